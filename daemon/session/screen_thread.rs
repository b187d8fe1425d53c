//! The screen model's own thread: parses the session's output behind the actor, so the vt100
//! parse (the costliest step of a flood) never delays reading the PTY or feeding viewers.
//!
//! Jobs run in stream order: output, resizes and snapshot requests. A snapshot request made
//! when the log's head was `h` runs after every byte before `h` was parsed, so the snapshot
//! and its offset still match exactly. The backlog is bounded in bytes: past it the actor
//! stops reading the PTY until the parser catches up, so memory stays bounded and nothing is
//! lost. The last snapshot is kept until output or a resize changes the model, so viewers
//! joining an unchanged screen (a reconnect storm) cost one render between them, and requests
//! queued together (viewers resynced during a flood) are served by one render at the last of
//! their offsets.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tracing::warn;

use super::queries::Query;
use super::screen::ScreenModel;
use super::snapshot::{self, EncodedSnapshot, SnapshotForm};
use crate::metrics::METRICS;
use crate::term::seq::ESC;

/// Most output gathered into one parse (a few hundred ms of parsing at worst; snapshot and
/// resize jobs end a batch, so they wait no longer than before).
const MAX_BATCH: usize = 4 << 20;
/// Plain text is gathered until there is this much of it, or for `GATHER_WAIT`. The skip keeps
/// the last `2 × rows + scrollback` lines of a run (about 80 KB at 24×80), so a flood gathered
/// into runs of 1 MiB parses about a tenth of its bytes.
const GATHER: usize = 1 << 20;
const GATHER_WAIT: Duration = Duration::from_millis(10);

/// Snapshots kept for reuse while the model is unchanged: one per form in use.
const MAX_CACHED_FORMS: usize = 4;

/// Called on the screen thread with a snapshot and the log offset it belongs to.
pub type SnapshotFn = Box<dyn FnOnce(EncodedSnapshot, u64) + Send>;

/// Work for the screen thread, in stream order.
enum Job {
    Output(Bytes),
    Resize(u16, u16),
    Snapshot {
        head: u64,
        form: SnapshotForm,
        take: SnapshotFn,
    },
}

impl Job {
    /// Output bytes the job carries.
    fn output_len(&self) -> usize {
        match self {
            Job::Output(chunk) => chunk.len(),
            _ => 0,
        }
    }
}

/// What the actor and the thread share.
struct Shared {
    /// Output bytes handed to the thread and not parsed yet.
    backlog: AtomicUsize,
    /// Signalled when the backlog falls back under the limit.
    room: Notify,
    limit: usize,
}

/// The actor's handle on its screen thread; dropping it ends the thread once its jobs are done.
pub struct ScreenThread {
    jobs: std_mpsc::Sender<Job>,
    shared: Arc<Shared>,
}

/// Answers the model computed for queries met while parsing, in stream order.
pub type Answers = mpsc::UnboundedReceiver<Vec<(Query, Vec<u8>)>>;

impl ScreenThread {
    /// Starts the thread for `model`; at most `backlog_limit` bytes wait to be parsed before
    /// [`ScreenThread::has_room`] says no.
    /// Snapshots keep at most `max_scrollback` lines.
    pub fn start(
        model: ScreenModel,
        max_scrollback: usize,
        backlog_limit: usize,
        name: String,
    ) -> std::io::Result<(ScreenThread, Answers)> {
        let (jobs, rx) = std_mpsc::channel();
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            backlog: AtomicUsize::new(0),
            room: Notify::new(),
            limit: backlog_limit.max(1),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run(model, max_scrollback, rx, thread_shared, answers_tx))?;
        Ok((ScreenThread { jobs, shared }, answers))
    }

    /// Queues output for parsing.
    pub fn output(&self, chunk: Bytes) {
        self.shared
            .backlog
            .fetch_add(chunk.len(), Ordering::Relaxed);
        self.send(Job::Output(chunk));
    }

    /// Resizes the model after the output queued so far.
    pub fn resize(&self, rows: u16, cols: u16) {
        self.send(Job::Resize(rows, cols));
    }

    /// Renders a snapshot once the model has parsed everything before `head`, and hands it to
    /// `take` with the exact offset it belongs to (`head` less what the model holds back of an
    /// unfinished sequence), packed as `form` asks.
    pub fn snapshot(&self, head: u64, form: SnapshotForm, take: SnapshotFn) {
        self.send(Job::Snapshot { head, form, take });
    }

    /// Whether more output may be queued now.
    pub fn has_room(&self) -> bool {
        self.shared.backlog.load(Ordering::Relaxed) < self.shared.limit
    }

    /// Resolves once the backlog has fallen under the limit (or at once, if it has since).
    pub async fn room(&self) {
        if !self.has_room() {
            self.shared.room.notified().await;
        }
    }

    fn send(&self, job: Job) {
        // The thread only stops when this handle is dropped, or if it panicked; then jobs are
        // dropped and their reply channels tell the waiting viewers.
        if self.jobs.send(job).is_err() {
            warn!("screen thread is gone: job dropped");
        }
    }
}

fn run(
    mut model: ScreenModel,
    max_scrollback: usize,
    jobs: std_mpsc::Receiver<Job>,
    shared: Arc<Shared>,
    answers: mpsc::UnboundedSender<Vec<(Query, Vec<u8>)>>,
) {
    // The last snapshot of each form and its offset, while the model has not changed since
    // (browser and raw joiners ask for different forms; neither evicts the other).
    let mut last: Vec<(EncodedSnapshot, (u64, SnapshotForm))> = Vec::new();
    // Jobs taken from the queue ahead of their turn, to run next, in order.
    let mut ahead: VecDeque<Job> = VecDeque::new();
    let parse = |model: &mut ScreenModel, run: &[u8], len: usize| {
        let skipped = model.process_bulk(run);
        if skipped > 0 {
            METRICS.parse_skipped.add(skipped as u64);
        }
        let found = model.take_queries();
        if !found.is_empty() {
            let _ = answers.send(found);
        }
        let before = shared.backlog.fetch_sub(len, Ordering::Relaxed);
        if before >= shared.limit && before - len < shared.limit {
            // Stored as a permit if the actor is not waiting yet: no lost wake-up.
            shared.room.notify_one();
        }
    };
    while let Some(job) = ahead.pop_front().or_else(|| jobs.recv().ok()) {
        match job {
            Job::Output(chunk) => {
                last.clear();
                // Parse the output queued up to the next other job as one run, so the part of
                // a long plain flood that scrolls away unseen is skipped. Text without an ESC
                // (so without a terminal query to answer) waits a moment for more to join it:
                // the model may lag a few milliseconds, as a snapshot request makes it parse
                // everything before its offset first.
                let mut len = chunk.len();
                let mut plain = memchr::memchr(ESC, &chunk).is_none();
                let until = Instant::now() + GATHER_WAIT;
                // Allocated per run and freed after it, so an idle session keeps no buffer.
                let mut batch = Vec::new();
                while len < MAX_BATCH {
                    let more = match ahead.pop_front().map(Ok).unwrap_or_else(|| jobs.try_recv()) {
                        Ok(job) => Some(job),
                        Err(std_mpsc::TryRecvError::Empty) if plain && len < GATHER => jobs
                            .recv_timeout(until.saturating_duration_since(Instant::now()))
                            .ok(),
                        Err(_) => None,
                    };
                    match more {
                        Some(Job::Output(more)) => {
                            if batch.is_empty() {
                                batch.extend_from_slice(&chunk);
                            }
                            plain = plain && memchr::memchr(ESC, &more).is_none();
                            batch.extend_from_slice(&more);
                            len += more.len();
                        }
                        Some(other) => {
                            ahead.push_front(other);
                            break;
                        }
                        None => break,
                    }
                }
                let run = if batch.is_empty() { &chunk[..] } else { &batch };
                parse(&mut model, run, len);
            }
            Job::Resize(rows, cols) => {
                last.clear();
                model.resize(rows, cols);
            }
            Job::Snapshot { head, form, take } => {
                // Requests queued behind this one (many viewers resynced during a flood) are
                // served by one render at the last of them: a snapshot at a later exact offset
                // serves an earlier request as well, and the output between is parsed as one
                // run of at most `MAX_BATCH` bytes, so memory stays as bounded as a plain run.
                let mut waiting = vec![(form, take)];
                let mut head = head;
                let mut queued: usize = ahead.iter().map(Job::output_len).sum();
                while queued < MAX_BATCH {
                    let Ok(job) = jobs.try_recv() else { break };
                    queued += job.output_len();
                    ahead.push_back(job);
                }
                if let Some(upto) = ahead
                    .iter()
                    .rposition(|j| matches!(j, Job::Snapshot { .. }))
                {
                    let mut batch = Vec::new();
                    for job in ahead.drain(..=upto) {
                        match job {
                            Job::Output(chunk) => batch.extend_from_slice(&chunk),
                            Job::Resize(rows, cols) => {
                                if !batch.is_empty() {
                                    last.clear();
                                    parse(&mut model, &batch, batch.len());
                                    batch.clear();
                                }
                                last.clear();
                                model.resize(rows, cols);
                            }
                            Job::Snapshot {
                                head: h,
                                form,
                                take,
                            } => {
                                head = h;
                                waiting.push((form, take));
                            }
                        }
                    }
                    if !batch.is_empty() {
                        last.clear();
                        parse(&mut model, &batch, batch.len());
                    }
                }
                let offset = head - model.pending_len() as u64;
                for (form, take) in waiting {
                    let snapshot = match last.iter().find(|(_, at)| *at == (offset, form)) {
                        Some((snapshot, _)) => snapshot.clone(),
                        None => {
                            let snapshot = snapshot::encode_as(&model, max_scrollback, form);
                            if last.len() == MAX_CACHED_FORMS {
                                last.remove(0);
                            }
                            last.push((snapshot.clone(), (offset, form)));
                            snapshot
                        }
                    };
                    take(snapshot, offset);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshot requests queued between outputs are each served at an offset at or after
    /// their own, with a screen exactly that of a model fed everything before that offset.
    #[test]
    fn queued_snapshots_are_served_exactly_at_a_later_offset() {
        let form = SnapshotForm::plain(1 << 20);
        let (screen, _answers) =
            ScreenThread::start(ScreenModel::new(24, 80, 100), 100, 1 << 20, "t".into())
                .expect("thread");
        let (tx, rx) = std_mpsc::channel();
        let mut fed = Vec::new();
        for i in 0..200 {
            // Colour and plain lines, and a sequence split across chunks now and then.
            let chunk = if i % 7 == 3 {
                format!("line {i} \x1b[3")
            } else {
                format!("1mred {i}\x1b[0m\r\n")
            };
            fed.extend_from_slice(chunk.as_bytes());
            screen.output(Bytes::from(chunk));
            if i % 3 == 0 {
                let (tx, head) = (tx.clone(), fed.len() as u64);
                screen.snapshot(
                    head,
                    form,
                    Box::new(move |snap, offset| {
                        let _ = tx.send((head, offset, snap));
                    }),
                );
            }
        }
        drop(tx);
        let served: Vec<_> = rx.iter().collect();
        assert_eq!(served.len(), 67, "every request served");
        for (head, offset, snap) in served {
            // At most an unfinished sequence's bytes before the head asked for, never past the end.
            assert!(
                offset + 8 >= head && offset <= fed.len() as u64,
                "{offset} for {head}"
            );
            let mut model = ScreenModel::new(24, 80, 100);
            model.process_bulk(&fed[..offset as usize]);
            assert_eq!(
                snap.bytes,
                snapshot::encode_as(&model, 100, form).bytes,
                "snapshot at {offset}"
            );
        }
    }
}
