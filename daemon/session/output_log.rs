//! The bounded window of recent PTY output, addressed by absolute byte offset.
//!
//! The session actor appends; every viewer reads from its own offset. A viewer whose offset
//! has fallen out of the window is told so and resyncs with a snapshot: nothing is skipped
//! silently and memory stays bounded whatever the viewers do.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;

/// One chunk as kept: its bytes and when they came (for recordings' timestamps).
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The bytes, as read.
    pub bytes: Bytes,
    /// When they were appended.
    pub at: Instant,
}

/// Output in arrival order, at most `capacity` bytes of it (a single chunk may exceed it).
#[derive(Debug)]
pub struct OutputLog {
    /// Chunks as read; cheap to keep because `Bytes` shares the read buffer.
    chunks: VecDeque<Chunk>,
    /// Offset of the first byte of `chunks[0]`.
    start: u64,
    /// Offset one past the last byte appended.
    head: u64,
    /// Most bytes kept before the oldest chunks are dropped.
    capacity: usize,
}

/// The requested offset is older than anything the log still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FellBehind;

impl OutputLog {
    /// An empty log keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            start: 0,
            head: 0,
            capacity,
        }
    }

    /// Offset one past the newest byte.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Offset of the oldest byte still held.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Appends a chunk of output, dropping the oldest chunks beyond the capacity.
    pub fn append(&mut self, chunk: Bytes) {
        self.append_at(chunk, Instant::now());
    }

    /// Appends a chunk that arrived `at`.
    fn append_at(&mut self, bytes: Bytes, at: Instant) {
        if bytes.is_empty() {
            return;
        }
        self.head += bytes.len() as u64;
        self.chunks.push_back(Chunk { bytes, at });
        // Keep at least the newest chunk so a reader at head - len can always be served.
        while self.head - self.start > self.capacity as u64 && self.chunks.len() > 1 {
            if let Some(old) = self.chunks.pop_front() {
                self.start += old.bytes.len() as u64;
            }
        }
    }

    /// The chunks from `from` up to `until`, at most about `max` bytes of them (always one
    /// chunk when there is one), each with its offset; the first cut to start at `from` (the
    /// last may reach past `until`). For readers that need each part's time.
    pub fn chunks_between(
        &self,
        from: u64,
        until: u64,
        max: usize,
    ) -> Result<Vec<(u64, Chunk)>, FellBehind> {
        if from < self.start {
            return Err(FellBehind);
        }
        let mut pos = self.start;
        let mut taken = 0usize;
        let mut found = Vec::new();
        for chunk in &self.chunks {
            let end = pos + chunk.bytes.len() as u64;
            if pos >= until || (taken >= max && !found.is_empty()) {
                break;
            }
            if end > from {
                let skip = from.saturating_sub(pos) as usize;
                let mut part = chunk.clone();
                part.bytes = part.bytes.slice(skip..);
                taken += part.bytes.len();
                found.push((pos + skip as u64, part));
            }
            pos = end;
        }
        Ok(found)
    }

    /// Copies the bytes from `from` onward, at most `max`, into `out`; returns the offset
    /// after the last byte copied (`from` when there is nothing new).
    pub fn read(&self, from: u64, max: usize, out: &mut Vec<u8>) -> Result<u64, FellBehind> {
        if from < self.start {
            return Err(FellBehind);
        }
        let mut pos = self.start;
        let mut at = from;
        let end = self.head.min(from.saturating_add(max as u64));
        for chunk in &self.chunks {
            let chunk = &chunk.bytes;
            let chunk_end = pos + chunk.len() as u64;
            if chunk_end > at && at < end {
                let lo = (at - pos) as usize;
                let hi = (end.min(chunk_end) - pos) as usize;
                out.extend_from_slice(&chunk[lo..hi]);
                at = pos + hi as u64;
            }
            if at >= end {
                break;
            }
            pos = chunk_end;
        }
        Ok(at)
    }

    /// Copies the newest bytes still held, at most `max` of them, into `out`.
    pub fn tail(&self, max: usize, out: &mut Vec<u8>) {
        let from = self
            .head
            .saturating_sub(u64::try_from(max).unwrap_or(u64::MAX))
            .max(self.start);
        // `from` is inside the window, so the read cannot fall behind.
        let _ = self.read(from, max, out);
    }
}

/// The log as shared between the actor (writer) and the viewers (readers).
///
/// The mutex is held only to append or copy bytes, never across an `.await`; `head` is read
/// without it. The actor wakes the viewers that need it (see `session::LiveOutput`).
#[derive(Debug)]
pub struct SharedLog {
    log: Mutex<OutputLog>,
    head: AtomicU64,
    /// Readers waiting in [`SharedLog::wait_past`]: the appender notifies only when there are.
    followers: AtomicUsize,
    /// Wakes those readers.
    grew: tokio::sync::Notify,
    /// The window, in bytes (see [`OutputLog::new`]).
    capacity: usize,
}

impl SharedLog {
    /// An empty shared log of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            log: Mutex::new(OutputLog::new(capacity)),
            head: AtomicU64::new(0),
            followers: AtomicUsize::new(0),
            grew: tokio::sync::Notify::new(),
            capacity,
        }
    }

    /// A log of `capacity` bytes that goes on from an earlier one (a live upgrade): `tail`
    /// holds its bytes from offset `start`, so offsets continue where they were.
    pub fn resumed(capacity: usize, start: u64, tail: Bytes) -> Self {
        let mut log = OutputLog::new(capacity);
        log.start = start;
        log.head = start;
        log.append(tail);
        // An empty tail leaves no chunk: the log starts at its head.
        log.start = log.head - log.chunks.iter().map(|c| c.bytes.len() as u64).sum::<u64>();
        Self {
            head: AtomicU64::new(log.head),
            log: Mutex::new(log),
            followers: AtomicUsize::new(0),
            grew: tokio::sync::Notify::new(),
            capacity,
        }
    }

    /// Appends; returns the new head.
    pub fn append(&self, chunk: Bytes) -> u64 {
        let mut log = self.lock();
        log.append(chunk);
        let head = log.head();
        // Published under the lock, so a reader that sees the head can read up to it. SeqCst
        // with the followers' count: a follower that registers after this load sees the head.
        self.head.store(head, Ordering::SeqCst);
        drop(log);
        if self.followers.load(Ordering::SeqCst) > 0 {
            self.grew.notify_waiters();
        }
        head
    }

    /// Resolves once the head is past `offset`: for readers that follow the log without being
    /// viewers (the log stream). Costs the appender one atomic load while nobody follows.
    pub async fn wait_past(&self, offset: u64) {
        struct Following<'a>(&'a AtomicUsize);
        impl Drop for Following<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.followers.fetch_add(1, Ordering::SeqCst);
        let _following = Following(&self.followers);
        loop {
            let grew = self.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            if self.head.load(Ordering::SeqCst) > offset {
                return;
            }
            grew.await;
        }
    }

    /// See [`OutputLog::chunks_between`].
    pub fn chunks_between(
        &self,
        from: u64,
        until: u64,
        max: usize,
    ) -> Result<Vec<(u64, Chunk)>, FellBehind> {
        self.lock().chunks_between(from, until, max)
    }

    /// See [`OutputLog::read`].
    pub fn read(&self, from: u64, max: usize, out: &mut Vec<u8>) -> Result<u64, FellBehind> {
        self.lock().read(from, max, out)
    }

    /// The newest bytes still kept, at most `max` (copied under the lock, so bound `max`).
    pub fn tail(&self, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        self.lock().tail(max, &mut out);
        out
    }

    /// Offset one past the newest byte.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Most bytes kept: a reader further behind than this falls out of the window.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Offset of the oldest byte still kept.
    pub fn start(&self) -> u64 {
        self.lock().start()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutputLog> {
        // A panic while holding this lock cannot leave the log inconsistent (each method
        // completes its updates before anything can panic), so a poisoned lock is still usable.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::Bytes;

    use super::{FellBehind, OutputLog, SharedLog};

    fn read_all(log: &OutputLog, from: u64) -> Result<(Vec<u8>, u64), FellBehind> {
        let mut out = Vec::new();
        let at = log.read(from, usize::MAX, &mut out)?;
        Ok((out, at))
    }

    #[test]
    fn reads_across_chunks_from_any_offset() {
        let mut log = OutputLog::new(1024);
        log.append(Bytes::from_static(b"hello "));
        log.append(Bytes::from_static(b"world"));
        assert_eq!(log.head(), 11);
        for from in 0..=11u64 {
            let (bytes, at) = read_all(&log, from).unwrap();
            assert_eq!(bytes, &b"hello world"[from as usize..]);
            assert_eq!(at, 11);
        }
    }

    #[test]
    fn read_respects_max() {
        let mut log = OutputLog::new(1024);
        log.append(Bytes::from_static(b"abc"));
        log.append(Bytes::from_static(b"defg"));
        let mut out = Vec::new();
        let at = log.read(1, 4, &mut out).unwrap();
        assert_eq!(out, b"bcde");
        assert_eq!(at, 5);
    }

    #[test]
    fn drops_oldest_beyond_capacity_and_reports_fell_behind() {
        let mut log = OutputLog::new(8);
        log.append(Bytes::from_static(b"aaaa"));
        log.append(Bytes::from_static(b"bbbb"));
        log.append(Bytes::from_static(b"cccc"));
        assert_eq!(log.start(), 4);
        assert_eq!(read_all(&log, 3), Err(FellBehind));
        assert_eq!(read_all(&log, 4).unwrap().0, b"bbbbcccc");
    }

    #[test]
    fn keeps_a_chunk_larger_than_capacity() {
        let mut log = OutputLog::new(4);
        log.append(Bytes::from_static(b"0123456789"));
        assert_eq!(log.start(), 0);
        log.append(Bytes::from_static(b"x"));
        assert_eq!(log.start(), 10);
        assert_eq!(read_all(&log, 10).unwrap().0, b"x");
    }

    #[test]
    fn chunks_keep_their_time_and_are_cut_at_the_offset() {
        let mut log = OutputLog::new(1024);
        let (t0, t1) = (
            Instant::now(),
            Instant::now() + std::time::Duration::from_secs(1),
        );
        log.append_at(Bytes::from_static(b"out"), t0);
        log.append_at(Bytes::from_static(b"err"), t1);
        let got = log.chunks_between(1, u64::MAX, usize::MAX).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, &got[0].1.bytes[..]), (1, &b"ut"[..]));
        assert_eq!(got[0].1.at, t0);
        assert_eq!((got[1].0, got[1].1.at), (3, t1));
        assert!(log
            .chunks_between(6, u64::MAX, usize::MAX)
            .unwrap()
            .is_empty());
        let between = log.chunks_between(1, 2, 1).unwrap();
        assert_eq!(between.len(), 1, "bounded by the byte budget and `until`");
        assert_eq!(log.chunks_between(0, 6, 100).unwrap().len(), 2);
        assert!(log.chunks_between(3, 3, 100).unwrap().is_empty());
        let mut small = OutputLog::new(2);
        small.append(Bytes::from_static(b"ab"));
        small.append(Bytes::from_static(b"cd"));
        assert_eq!(small.chunks_between(0, 4, 100).unwrap_err(), FellBehind);
    }

    #[test]
    fn tail_is_the_newest_bytes_within_the_window() {
        let mut log = OutputLog::new(8);
        let tail = |log: &OutputLog, max| {
            let mut out = Vec::new();
            log.tail(max, &mut out);
            out
        };
        assert_eq!(tail(&log, 4), b"");
        log.append(Bytes::from_static(b"abc"));
        log.append(Bytes::from_static(b"defg"));
        assert_eq!(tail(&log, 3), b"efg");
        assert_eq!(tail(&log, 5), b"cdefg", "across chunks");
        assert_eq!(tail(&log, 100), b"abcdefg");
        assert_eq!(tail(&log, 0), b"");
        log.append(Bytes::from_static(b"hijk"));
        // "abc" fell out of the window: only what is still held.
        assert_eq!(tail(&log, 100), b"defghijk");
        assert_eq!(tail(&log, usize::MAX), b"defghijk");
        let shared = SharedLog::new(1024);
        shared.append(Bytes::from_static(b"hello"));
        assert_eq!(shared.tail(3), b"llo");
    }

    #[test]
    fn empty_appends_change_nothing() {
        let mut log = OutputLog::new(4);
        log.append(Bytes::new());
        assert_eq!((log.start(), log.head()), (0, 0));
        assert_eq!(read_all(&log, 0).unwrap(), (vec![], 0));
    }
}
