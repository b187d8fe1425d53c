//! The bounded window of recent PTY output, addressed by absolute byte offset.
//!
//! The session actor appends; every viewer reads from its own offset. A viewer whose offset
//! has fallen out of the window is told so and resyncs with a snapshot: nothing is skipped
//! silently and memory stays bounded whatever the viewers do.
//!
//! The window is kept full only while someone may need it: once the session has been quiet for
//! [`RELEASE_AFTER`] and every reader the session knows of (its viewers, its recorder) has
//! taken the output, the log lets go of all but its newest bytes ([`Release`]), so the memory a
//! flood filled is given back instead of held for the session's life.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

    /// Drops the oldest chunks that end at or before `floor` (never the newest chunk), and
    /// the room their entries took; returns the bytes let go.
    pub fn release_before(&mut self, floor: u64) -> u64 {
        let before = self.start;
        while self.chunks.len() > 1 {
            let Some(first) = self.chunks.front() else {
                break;
            };
            let end = self.start + first.bytes.len() as u64;
            if end > floor {
                break;
            }
            self.chunks.pop_front();
            self.start = end;
        }
        // A flood leaves room for a thousand entries; what is kept needs a few.
        if self.chunks.capacity() > 2 * self.chunks.len() + 16 {
            self.chunks.shrink_to_fit();
        }
        self.start - before
    }

    /// When the newest chunk was appended (none yet: `None`).
    pub fn last_append(&self) -> Option<Instant> {
        self.chunks.back().map(|c| c.at)
    }

    /// Room for chunk entries (for tests of what [`OutputLog::release_before`] gives back).
    #[cfg(test)]
    fn entries_capacity(&self) -> usize {
        self.chunks.capacity()
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
    /// The oldest byte held, published as `head` is: what the log holds is known without the
    /// lock (see [`SharedLog::held`]).
    start: AtomicU64,
    /// Readers waiting in [`SharedLog::wait_past`]: the appender notifies only when there are.
    followers: AtomicUsize,
    /// Wakes those readers.
    grew: tokio::sync::Notify,
    /// The window, in bytes (see [`OutputLog::new`]).
    capacity: usize,
    /// The positions of readers the session's actor does not know of (log streams): the log
    /// keeps their bytes when it lets go ([`Release`]).
    cursors: Arc<Mutex<Vec<Arc<AtomicU64>>>>,
}

/// A reader's position, registered with its log so that letting go of the window
/// ([`Release`]) keeps what it has still to read; gone with it.
#[derive(Debug)]
pub struct Cursor {
    at: Arc<AtomicU64>,
    cursors: Arc<Mutex<Vec<Arc<AtomicU64>>>>,
}

impl Cursor {
    /// The reader has read up to `at`.
    pub fn set(&self, at: u64) {
        self.at.store(at, Ordering::Release);
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.retain(|c| !Arc::ptr_eq(c, &self.at));
    }
}

impl SharedLog {
    /// An empty shared log of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            log: Mutex::new(OutputLog::new(capacity)),
            head: AtomicU64::new(0),
            start: AtomicU64::new(0),
            followers: AtomicUsize::new(0),
            grew: tokio::sync::Notify::new(),
            capacity,
            cursors: Arc::default(),
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
            start: AtomicU64::new(log.start),
            log: Mutex::new(log),
            followers: AtomicUsize::new(0),
            grew: tokio::sync::Notify::new(),
            capacity,
            cursors: Arc::default(),
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
        self.start.store(log.start(), Ordering::Release);
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

    /// Bytes held now (read without the lock: for deciding whether to look closer).
    pub fn held(&self) -> u64 {
        let start = self.start.load(Ordering::Acquire);
        self.head.load(Ordering::Acquire).saturating_sub(start)
    }

    /// See [`OutputLog::release_before`].
    pub fn release_before(&self, floor: u64) -> u64 {
        let mut log = self.lock();
        let gone = log.release_before(floor);
        self.start.store(log.start(), Ordering::Release);
        gone
    }

    /// A reader's position at `at`, kept by the log until the reader lets go of it.
    pub fn cursor(&self, at: u64) -> Cursor {
        let cursor = Arc::new(AtomicU64::new(at));
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.push(cursor.clone());
        Cursor {
            at: cursor,
            cursors: self.cursors.clone(),
        }
    }

    /// The lowest position of a [`Cursor`] (`u64::MAX` without any).
    pub fn lowest_cursor(&self) -> u64 {
        let cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// See [`OutputLog::last_append`].
    pub fn last_append(&self) -> Option<Instant> {
        self.lock().last_append()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutputLog> {
        // A panic while holding this lock cannot leave the log inconsistent (each method
        // completes its updates before anything can panic), so a poisoned lock is still usable.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long a session's output must have stopped before its log lets go of what its readers
/// have taken: a burst's short pauses keep the window, and a flood's memory is back within
/// seconds of its end (issue 39's target: within 10% of idle 10 s after).
pub const RELEASE_AFTER: Duration = Duration::from_secs(2);
/// How long the log waits to look again while a reader is still behind once the session is
/// quiet (a stalled viewer): rarely enough to cost an idle session nothing to speak of.
pub const RELEASE_RETRY: Duration = Duration::from_secs(5);
/// Least the log keeps when it lets go: a joiner's snapshot may stand a held-back escape
/// sequence behind the head, and the scrollback endpoint, a log stream's `tail` and a live
/// upgrade read the newest bytes.
pub const RELEASE_KEEP_MIN: usize = 64 * 1024;

/// When a session's log lets go of its window (see the module's head): the actor's side. It
/// costs the actor one atomic load per output chunk while the log holds no more than it keeps,
/// and one timer per quiet spell after more.
#[derive(Debug)]
pub struct Release {
    /// Bytes kept when letting go: the scrollback endpoint's, at least [`RELEASE_KEEP_MIN`],
    /// at most the window.
    keep: u64,
    /// When to look next; `None` while there is nothing to let go.
    due: Option<tokio::time::Instant>,
}

impl Release {
    /// For a log of `capacity` bytes whose scrollback endpoint returns `scrollback_api_bytes`.
    pub fn new(capacity: usize, scrollback_api_bytes: usize) -> Self {
        let keep = scrollback_api_bytes.max(RELEASE_KEEP_MIN).min(capacity);
        Self {
            keep: u64::try_from(keep).unwrap_or(u64::MAX),
            due: None,
        }
    }

    /// Output was appended to `log`: a look is due once the session has been quiet.
    pub fn appended(&mut self, log: &SharedLog) {
        if self.due.is_none() && log.held() > self.keep {
            self.due = Some(tokio::time::Instant::now() + RELEASE_AFTER);
        }
    }

    /// When to call [`Release::release`] next, if at all.
    pub fn due(&self) -> Option<tokio::time::Instant> {
        self.due
    }

    /// The look is due: once the session has been quiet for [`RELEASE_AFTER`], lets go of
    /// `log`'s output before `readers` (the lowest offset the session's readers still need:
    /// the viewers', the recorder's) and its cursors', keeping the newest `keep` bytes.
    /// Returns the bytes let go.
    pub fn release(&mut self, log: &SharedLog, readers: u64) -> u64 {
        let now = tokio::time::Instant::now();
        let quiet = log.last_append().map_or(RELEASE_AFTER, |at| at.elapsed());
        if quiet < RELEASE_AFTER {
            self.due = Some(now + (RELEASE_AFTER - quiet));
            return 0;
        }
        let readers = readers.min(log.lowest_cursor());
        let wanted = log.head().saturating_sub(self.keep);
        let gone = log.release_before(wanted.min(readers));
        // A reader still behind: look again later. Otherwise nothing more to do until more
        // output (a newest chunk larger than `keep`, a live upgrade's tail, stays as it is).
        self.due = (readers < wanted).then(|| now + RELEASE_RETRY);
        gone
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::Bytes;

    use super::{
        FellBehind, OutputLog, Release, SharedLog, RELEASE_AFTER, RELEASE_KEEP_MIN, RELEASE_RETRY,
    };

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

    /// A flood's worth of 4 KiB chunks into `log`, appended `ago`.
    fn flood(log: &SharedLog, bytes: usize, ago: std::time::Duration) {
        let at = Instant::now() - ago;
        for _ in 0..bytes / 4096 {
            let mut inner = log.lock();
            inner.append_at(Bytes::from(vec![b'x'; 4096]), at);
            log.head
                .store(inner.head(), std::sync::atomic::Ordering::SeqCst);
            log.start
                .store(inner.start(), std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn letting_go_gives_back_the_chunks_and_their_room() {
        let log = SharedLog::new(4 << 20);
        flood(&log, 4 << 20, std::time::Duration::ZERO);
        let head = log.head();
        assert_eq!(log.held(), 4 << 20);
        assert!(log.lock().entries_capacity() >= 1024);
        assert_eq!(log.release_before(head - 65536), (4 << 20) - 65536);
        assert_eq!((log.start(), log.held()), (head - 65536, 65536));
        assert!(
            log.lock().entries_capacity() < 64,
            "the entries' room is given back too"
        );
        let mut out = Vec::new();
        assert_eq!(log.read(head - 65536, usize::MAX, &mut out), Ok(head));
        assert_eq!(out.len(), 65536, "what is kept reads whole");
        assert_eq!(log.read(head - 65537, 1, &mut out), Err(FellBehind));
        // Only whole chunks go, and never the newest.
        assert_eq!(log.release_before(head - 100), 65536 - 4096);
        assert_eq!(log.release_before(u64::MAX), 0);
        assert_eq!(log.held(), 4096);
    }

    #[tokio::test]
    async fn the_log_lets_go_once_quiet_and_taken_by_every_reader() {
        let keep = RELEASE_KEEP_MIN as u64;
        let log = SharedLog::new(4 << 20);
        let mut release = Release::new(4 << 20, 1024);
        release.appended(&log);
        assert_eq!(release.due(), None, "nothing held: nothing to look at");

        // Output just now: not yet quiet; the look moves to when it will be.
        flood(&log, 1 << 20, std::time::Duration::ZERO);
        release.appended(&log);
        assert!(release.due().is_some());
        assert_eq!(release.release(&log, u64::MAX), 0);
        assert!(release
            .due()
            .is_some_and(|at| at <= tokio::time::Instant::now() + RELEASE_AFTER));
        assert_eq!(log.held(), 1 << 20);

        // Quiet, but a viewer is 512 KiB behind: only what it has taken goes, and the log
        // looks again later.
        let log = SharedLog::new(4 << 20);
        flood(&log, 1 << 20, RELEASE_AFTER * 2);
        let behind = log.head() - (512 << 10);
        assert_eq!(release.release(&log, behind), 512 << 10);
        assert_eq!(log.start(), behind);
        assert!(release
            .due()
            .is_some_and(|at| at > tokio::time::Instant::now()
                && at <= tokio::time::Instant::now() + RELEASE_RETRY));
        // It caught up: all but the newest `keep` bytes go, and nothing more is due.
        assert_eq!(release.release(&log, log.head()), (512 << 10) - keep);
        assert_eq!(log.held(), keep);
        assert_eq!(release.due(), None);

        // A log stream's cursor holds what it has still to read, until it goes.
        let log = SharedLog::new(4 << 20);
        flood(&log, 1 << 20, RELEASE_AFTER * 2);
        let cursor = log.cursor(4096);
        assert_eq!(release.release(&log, u64::MAX), 4096);
        assert!(release.due().is_some());
        cursor.set(8192);
        assert_eq!(release.release(&log, u64::MAX), 4096);
        drop(cursor);
        assert_eq!(log.lowest_cursor(), u64::MAX);
        assert_eq!(release.release(&log, u64::MAX), (1 << 20) - 8192 - keep);

        // The scrollback endpoint's bytes are kept when more than the least, and never more
        // than the window.
        let log = SharedLog::new(4 << 20);
        flood(&log, 1 << 20, RELEASE_AFTER * 2);
        let mut release = Release::new(4 << 20, 256 << 10);
        assert_eq!(release.release(&log, u64::MAX), (1 << 20) - (256 << 10));
        assert_eq!(Release::new(65536, 1 << 20).keep, 65536);
    }

    #[test]
    fn empty_appends_change_nothing() {
        let mut log = OutputLog::new(4);
        log.append(Bytes::new());
        assert_eq!((log.start(), log.head()), (0, 0));
        assert_eq!(read_all(&log, 0).unwrap(), (vec![], 0));
    }
}
