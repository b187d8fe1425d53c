//! One session's recorder: a task that follows the session's output log from its own offset
//! (as a log follower does) and its feed (sizes, names, chat, restarts, input), encodes
//! asciicast v2 events and writes them to the `.cast` file in batches, off the runtime's
//! threads. It loses nothing: it reports how far it has taken the log, and once it is half a
//! window behind the session's PTY waits for it (`session/recorder_pace.rs`), so a flood on a
//! busy machine is recorded whole, at the pace the recorder and its disk can go. A recorder
//! that takes nothing for `recorder_pace::STALL` is let go by the session; a failing disk, a
//! deleted file or the size cap stop the recording, and the session reads on unrecorded.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};
use uuid::Uuid;

use super::catalog::{self, Meta};
use crate::metrics::Metrics;
use crate::protocol::asciicast::{self, Code, Utf8Carry};
use crate::session::output_log::{FellBehind, SharedLog};
use crate::session::recorder_feed::{FeedItem, FeedReceiver};
use crate::session::WeakSessionHandle;
use crate::session::{StatusInfo, ViewerEvent};

/// Output bytes in one event, at most.
const BATCH_BYTES: usize = 64 * 1024;
/// Encoded bytes gathered before they are written (a flood is written in few large writes).
const FLUSH_BYTES: usize = 1 << 20;
/// Longest time encoded events wait to be written: a running recording on disk is at most
/// this far behind.
const BATCH_DELAY: Duration = Duration::from_millis(100);
/// Capacity an idle recorder keeps of each of its buffers.
const IDLE_BYTES: usize = 4 * 1024;
/// After a flood's last large write, how long without more output before the buffers shrink
/// to [`IDLE_BYTES`] (a flood that ends on a large write leaves no small one to shrink them,
/// and they had grown to megabytes).
const SHRINK_AFTER: Duration = Duration::from_secs(1);
/// Room kept under the size cap for the marker that says the cap was reached.
const CAP_RESERVE: u64 = 256;
/// Once output arrives, how long the recorder lets more gather before reading it: a flood is
/// read a few times per window instead of once per PTY read, and meanwhile the session does
/// not wake it (well under the time a 4 MiB log window lasts at full speed, about 50 ms).
const GATHER: Duration = Duration::from_millis(10);
/// Output read within this time of an event's first byte joins that event (most bytes in one
/// event: [`BATCH_BYTES`]). Replay timing moves by less than this.
const MERGE_WINDOW: Duration = Duration::from_millis(10);

/// What the recorder of one session needs.
pub(super) struct Job {
    /// The session.
    pub id: Uuid,
    /// Its assistant key.
    pub assistant: String,
    /// Its output.
    pub log: Arc<SharedLog>,
    /// Everything else it says.
    pub feed: FeedReceiver,
    /// The session, without keeping it alive: told when the recording fails.
    pub session: WeakSessionHandle,
    /// Where recordings go.
    pub dir: PathBuf,
    /// The size cap.
    pub max_bytes: u64,
    /// Set when the recording goes on from an earlier image of the daemon (a live upgrade).
    pub resume: Option<Resume>,
    /// The daemon's counters.
    pub metrics: Arc<Metrics>,
}

/// Where a recording handed over by a live upgrade goes on.
pub struct Resume {
    /// Time since the recording's start (its events' clock goes on from there).
    pub since_start: Duration,
    /// The log offset the previous image recorded up to.
    pub from: u64,
}

/// Why a recording stopped early.
enum Stop {
    /// The size cap.
    Full(u64),
    /// Writing failed.
    Io(std::io::Error),
    /// The file was deleted (its last link is gone): what follows would go nowhere.
    Deleted,
    /// The session stopped waiting for this recorder (it took nothing for too long) and has
    /// said the recording failed.
    LetGo,
}

/// The state of a recording in progress.
struct Recording {
    file: Option<std::fs::File>,
    /// Encoded, not yet written.
    buf: Vec<u8>,
    /// Bytes in the file.
    written: u64,
    /// When the oldest unwritten byte was encoded.
    dirty_since: Option<tokio::time::Instant>,
    /// When the buffers shrink unless more is written first (set by a large write).
    shrink_at: Option<tokio::time::Instant>,
    max_bytes: u64,
    /// The clock's origin.
    start: Instant,
    /// The last event's time: times never go back.
    last_time: f64,
    carry: Utf8Carry,
    /// Output read and not yet encoded, and when its first byte came.
    pending: Vec<u8>,
    pending_at: Option<Instant>,
    stopped: bool,
}

impl Recording {
    fn time_of(&mut self, at: Instant) -> f64 {
        let t = at.saturating_duration_since(self.start).as_secs_f64();
        self.last_time = self.last_time.max(t);
        self.last_time
    }

    /// Encodes an event, unless it would pass the cap (then the cap's marker, and the
    /// recording stops).
    fn event(&mut self, at: Instant, code: Code, data: &str) -> Result<(), Stop> {
        if self.stopped {
            return Ok(());
        }
        if code != Code::Output {
            // What came before it goes first.
            self.encode_output()?;
        }
        let time = self.time_of(at);
        let before = self.buf.len();
        asciicast::write_event(&mut self.buf, time, code, data);
        let total = self.written + self.buf.len() as u64;
        if total + CAP_RESERVE > self.max_bytes {
            self.buf.truncate(before);
            let label = format!(
                "recording stopped: size limit of {} bytes reached",
                self.max_bytes
            );
            asciicast::write_event(&mut self.buf, time, Code::Marker, &label);
            self.stopped = true;
            return Err(Stop::Full(self.max_bytes));
        }
        self.dirty_since
            .get_or_insert_with(tokio::time::Instant::now);
        Ok(())
    }

    /// Output that came `at`: joins the pending event when close enough in time.
    fn output(&mut self, at: Instant, bytes: &[u8]) -> Result<(), Stop> {
        let joins = self.pending_at.is_some_and(|first| {
            at.saturating_duration_since(first) < MERGE_WINDOW
                && self.pending.len() + bytes.len() <= BATCH_BYTES
        });
        if !joins {
            self.encode_output()?;
            self.pending_at = Some(at);
        }
        self.pending.extend_from_slice(bytes);
        Ok(())
    }

    /// Encodes the pending output as one event (an incomplete character waits for more).
    fn encode_output(&mut self) -> Result<(), Stop> {
        let Some(at) = self.pending_at.take() else {
            return Ok(());
        };
        let bytes = std::mem::take(&mut self.pending);
        let text = self.carry.feed_owned(bytes);
        let result = if text.is_empty() {
            Ok(())
        } else {
            self.event(at, Code::Output, &text)
        };
        // The next event gathers into the same allocation instead of growing a new one.
        let mut spare = text.into_bytes();
        spare.clear();
        self.pending = spare;
        result
    }

    /// Gives back what the buffers grew to beyond [`IDLE_BYTES`].
    fn shrink(&mut self) {
        self.shrink_at = None;
        self.buf.shrink_to(IDLE_BYTES);
        self.pending.shrink_to(IDLE_BYTES);
    }

    /// Writes what is encoded, on a blocking thread.
    async fn flush(&mut self) -> Result<(), Stop> {
        self.dirty_since = None;
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(mut file) = self.file.take() else {
            self.buf.clear();
            return Ok(());
        };
        let mut buf = std::mem::take(&mut self.buf);
        let done = tokio::task::spawn_blocking(move || {
            // A file deleted meanwhile (`DELETE /api/recordings/{id}`, or by hand) has no link
            // left: writing on would fill an inode nobody can reach.
            let result = match file.metadata() {
                Ok(meta) if meta.nlink() == 0 => Ok(false),
                Ok(_) => file.write_all(&buf).map(|()| true),
                Err(e) => Err(e),
            };
            let len = buf.len();
            buf.clear();
            (file, buf, len, result)
        })
        .await;
        match done {
            Ok((file, buf, len, result)) => {
                // A batch under the flush size was written by the timer: output has slowed
                // down, and an idle recorder keeps little. During a flood the buffers are kept
                // (shrinking and growing them again for every batch showed in profiles).
                self.buf = buf;
                if len < FLUSH_BYTES {
                    self.shrink();
                } else {
                    self.shrink_at = Some(tokio::time::Instant::now() + SHRINK_AFTER);
                }
                if !result.map_err(Stop::Io)? {
                    self.stopped = true;
                    return Err(Stop::Deleted);
                }
                self.file = Some(file);
                self.written += len as u64;
                Ok(())
            }
            Err(e) => Err(Stop::Io(std::io::Error::other(e))),
        }
    }
}

/// Creates the file and writes its header; the session's first status gives the size and
/// name.
fn create(dir: &std::path::Path, id: Uuid, status: &StatusInfo) -> std::io::Result<std::fs::File> {
    // Recordings hold whatever sessions printed: for the daemon's user only.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(catalog::cast_path(dir, id))?;
    let header = asciicast::Header {
        version: 2,
        width: status.cols,
        height: status.rows,
        timestamp: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        title: Some(status.session_name.clone()),
        env: Some(asciicast::Env {
            term: Some(crate::session::process::TERM.to_owned()),
            shell: std::env::var("SHELL").ok(),
        }),
    };
    let mut line = Vec::new();
    asciicast::write_header(&mut line, &header);
    file.write_all(&line)?;
    Ok(file)
}

/// Records until the session ends or the recording stops.
pub(super) async fn run(mut job: Job) {
    if job.resume.is_some() {
        return resume(job).await;
    }
    let start = Instant::now();
    let started_at = SystemTime::now();
    // The first item is the session's status when the feed began.
    let first = match job.feed.recv().await {
        Some(FeedItem::Event(ViewerEvent::Status { info, .. })) => info,
        _ => return,
    };
    let meta = Meta {
        id: job.id,
        name: first.session_name.clone(),
        assistant: job.assistant.clone(),
        started: crate::session::rfc3339(started_at),
        started_unix: started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        ended: None,
        duration: None,
    };
    let dir = job.dir.clone();
    let created = {
        let (dir, id, first, meta) = (dir.clone(), job.id, first.clone(), meta.clone());
        tokio::task::spawn_blocking(move || {
            let file = create(&dir, id, &first)?;
            catalog::write_meta(&dir, &meta)?;
            Ok::<_, std::io::Error>(file)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    };
    let file = match created {
        Ok(file) => file,
        Err(e) => return fail(&job, Stop::Io(e)).await,
    };
    let at = job.log.start();
    record(job, file, start, 0.0, meta, first, at).await;
}

/// Goes on with a recording the previous image of the daemon began (a live upgrade): appends
/// to its file, with event times on the same clock. A recording deleted meanwhile stays so.
async fn resume(mut job: Job) {
    let Some(Resume { since_start, from }) = job.resume.take() else {
        return;
    };
    let first = match job.feed.recv().await {
        Some(FeedItem::Event(ViewerEvent::Status { info, .. })) => info,
        _ => return,
    };
    let (dir, id) = (job.dir.clone(), job.id);
    let opened = tokio::task::spawn_blocking(move || {
        let path = catalog::cast_path(&dir, id);
        let meta = catalog::read_meta(&dir, id)?;
        let last_time = asciicast::last_time(&read_tail(&path).ok()?).unwrap_or(0.0);
        let file = std::fs::OpenOptions::new().append(true).open(&path).ok()?;
        Some((file, meta, last_time))
    })
    .await
    .ok()
    .flatten();
    let Some((file, meta, last_time)) = opened else {
        return;
    };
    let start = Instant::now()
        .checked_sub(since_start)
        .unwrap_or_else(Instant::now);
    record(job, file, start, last_time, meta, first, from).await;
}

/// Records into `file` (the header written) from log offset `at` until the session ends, is
/// frozen for an upgrade, or the recording stops.
async fn record(
    mut job: Job,
    file: std::fs::File,
    start: Instant,
    last_time: f64,
    mut meta: Meta,
    first: StatusInfo,
    mut at: u64,
) {
    let dir = job.dir.clone();
    let mut rec = Recording {
        file: Some(file),
        buf: Vec::new(),
        written: 0,
        dirty_since: None,
        shrink_at: None,
        max_bytes: job.max_bytes,
        start,
        last_time,
        carry: Utf8Carry::default(),
        pending: Vec::new(),
        pending_at: None,
        stopped: false,
    };
    // The header's bytes count against the cap too.
    rec.written = std::fs::metadata(catalog::cast_path(&dir, job.id)).map_or(0, |m| m.len());
    let mut listed_name = meta.name.clone();
    let mut last = first;
    let mut suspended = false;
    let stop = loop {
        if job.feed.pace().was_let_go() {
            let label = "recording stopped: the session could not wait for the recorder any longer";
            let _ = rec.event(Instant::now(), Code::Marker, label);
            break Some(Stop::LetGo);
        }
        let flush_at = rec.dirty_since.map(|t| t + BATCH_DELAY);
        let step = tokio::select! {
            biased;
            item = job.feed.recv() => match item {
                None => break drain(&mut rec, &job.log, &mut at, u64::MAX).err(),
                Some(FeedItem::Suspended) => {
                    suspended = true;
                    break drain(&mut rec, &job.log, &mut at, u64::MAX).err();
                }
                Some(item) => on_feed_item(&mut rec, &job.log, &mut at, &mut last, &mut meta, item),
            },
            _ = job.log.wait_past(at) => {
                // Already a quarter of the window behind: no gathering, the PTY may soon wait.
                if job.log.head().saturating_sub(at) < job.log.capacity() as u64 / 4 {
                    tokio::time::sleep(GATHER).await;
                }
                drain(&mut rec, &job.log, &mut at, u64::MAX)
            }
            _ = sleep_until(flush_at) => rec.flush().await,
            // Quiet since a large write: nothing else would shrink the buffers.
            _ = sleep_until(rec.shrink_at), if rec.dirty_since.is_none() => {
                rec.shrink();
                Ok(())
            }
        };
        let step = step.and_then(|()| {
            let lost = job.feed.take_lost();
            if lost > 0 {
                let label = format!("recording: {lost} session events were lost (recorder behind)");
                rec.event(Instant::now(), Code::Marker, &label)?;
            }
            Ok(())
        });
        // Taken: the session may read on (it waits once this is half a window behind).
        job.feed.pace().took(at);
        let step = match step {
            Ok(()) if rec.buf.len() >= FLUSH_BYTES => rec.flush().await,
            other => other,
        };
        if meta.name != listed_name {
            // Renamed: the listing shows the new name (rare, so written at once).
            listed_name = meta.name.clone();
            let (dir, meta) = (dir.clone(), meta.clone());
            let _ = tokio::task::spawn_blocking(move || catalog::write_meta(&dir, &meta)).await;
        }
        if let Err(stop) = step {
            break Some(stop);
        }
    };
    let mut stop = stop;
    if stop.is_none() {
        stop = rec.encode_output().err();
    }
    let tail = rec.carry.finish();
    if !tail.is_empty() && stop.is_none() {
        stop = rec.event(Instant::now(), Code::Output, &tail).err();
    }
    if let Err(e) = rec.flush().await {
        stop = stop.or(Some(e));
    }
    if suspended {
        // The next image goes on with this file; its listing stays "recording".
        if let Some(stop) = stop {
            fail(&job, stop).await;
        }
        return;
    }
    let duration = rec.last_time.max(start.elapsed().as_secs_f64());
    meta.ended = Some(crate::session::rfc3339(SystemTime::now()));
    meta.duration = Some(duration);
    let (dir, id) = (dir.clone(), job.id);
    let _ = tokio::task::spawn_blocking(move || {
        // A recording deleted while it ran stays deleted.
        if catalog::cast_path(&dir, id).exists() {
            if let Err(e) = catalog::write_meta(&dir, &meta) {
                warn!(session = %id, "could not write the recording's sidecar: {e}");
            }
        }
    })
    .await;
    if let Some(stop) = stop {
        fail(&job, stop).await;
    }
}

/// The last 512 KiB of a file: room for the last event line (64 KiB of output, up to six
/// times that once escaped), bounded whatever the file's size.
fn read_tail(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _};
    const TAIL: u64 = 512 * 1024;
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    file.seek(std::io::SeekFrom::Start(len.saturating_sub(TAIL)))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    Ok(tail)
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Logs and counts a stopped recording and tells the session's writers.
async fn fail(job: &Job, stop: Stop) {
    if let Stop::LetGo = stop {
        // Counted, logged and told by the session as it let go.
        return;
    }
    job.metrics.recording_failures.inc();
    let message = match stop {
        Stop::Full(max) => {
            info!(session = %job.id, max, "recording stopped at its size limit");
            format!("the recording stopped: it reached its size limit of {max} bytes (recording.max_bytes_per_session)")
        }
        Stop::Io(e) => {
            warn!(session = %job.id, dir = %job.dir.display(), "recording failed: {e}");
            format!("the recording stopped: {e}")
        }
        Stop::Deleted => {
            info!(session = %job.id, "recording stopped: its file was deleted");
            "the recording stopped: its file was deleted".to_owned()
        }
        Stop::LetGo => return,
    };
    job.session.report_recording_failure(message).await;
}

/// Encodes output from `at` up to `until` (or the head), from the log's chunks with their own
/// times; output already out of the log's window becomes a marker.
fn drain(rec: &mut Recording, log: &SharedLog, at: &mut u64, until: u64) -> Result<(), Stop> {
    loop {
        let end = until.min(log.head());
        if *at >= end {
            return rec.encode_output();
        }
        match log.chunks_between(*at, end, BATCH_BYTES) {
            // Nothing held reaches `end` (cannot happen below the head): nothing to do.
            Ok(chunks) if chunks.is_empty() => return rec.encode_output(),
            Ok(chunks) => {
                for (offset, chunk) in chunks {
                    let len = chunk.bytes.len().min((end - offset) as usize);
                    rec.output(chunk.at, &chunk.bytes[..len])?;
                    *at = offset + len as u64;
                }
            }
            Err(FellBehind) => {
                let oldest = log.start();
                let label = format!(
                    "recording: {} bytes of output were lost (recorder fell behind)",
                    oldest.saturating_sub(*at)
                );
                rec.encode_output()?;
                // What was held of a character belongs to the lost output.
                rec.carry = Utf8Carry::default();
                rec.event(Instant::now(), Code::Marker, &label)?;
                *at = oldest;
            }
        }
    }
}

/// Handles one item of the feed: output before it first.
fn on_feed_item(
    rec: &mut Recording,
    log: &SharedLog,
    at: &mut u64,
    last: &mut StatusInfo,
    meta: &mut Meta,
    item: FeedItem,
) -> Result<(), Stop> {
    let now = Instant::now();
    match item {
        FeedItem::Event(ViewerEvent::Status { info, offset }) => {
            drain(rec, log, at, offset)?;
            if (info.cols, info.rows) != (last.cols, last.rows) {
                let size = asciicast::resize_data(info.cols, info.rows);
                rec.event(now, Code::Resize, &size)?;
            }
            if info.session_name != last.session_name {
                rec.event(
                    now,
                    Code::Marker,
                    &format!("renamed: {}", info.session_name),
                )?;
                meta.name = info.session_name.clone();
            }
            if info.restarting && !last.restarting {
                let mode = if info.yolo_mode { "ON" } else { "OFF" };
                rec.event(now, Code::Marker, &format!("restart: YOLO {mode}"))?;
            }
            *last = info;
        }
        FeedItem::Event(ViewerEvent::Chat(line)) => {
            drain(rec, log, at, u64::MAX)?;
            let guest = if line.guest { " (guest)" } else { "" };
            rec.event(
                now,
                Code::Marker,
                &format!("{}{guest}: {}", line.user_name, line.text),
            )?;
        }
        FeedItem::Marker { label, offset } => {
            drain(rec, log, at, offset)?;
            rec.event(now, Code::Marker, &label)?;
        }
        FeedItem::Event(ViewerEvent::Exit { offset, .. }) => drain(rec, log, at, offset)?,
        FeedItem::Event(
            ViewerEvent::Refused(_)
            | ViewerEvent::Close(_)
            | ViewerEvent::Presence(_)
            | ViewerEvent::State(_),
        )
        | FeedItem::Suspended => {}
        FeedItem::Input { data, offset } => {
            drain(rec, log, at, offset)?;
            let text = String::from_utf8_lossy(&data);
            rec.event(now, Code::Input, &text)?;
        }
    }
    Ok(())
}
