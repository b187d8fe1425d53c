//! The screen model's own thread: parses the session's output behind the actor, so the vt100
//! parse (the costliest step of a flood) never delays reading the PTY or feeding viewers.
//!
//! The thread runs only while there is work: after `LINGER` without a job it ends and leaves
//! the model parked, and the next job starts a new one. An idle session holds no OS thread and
//! wakes nothing.
//!
//! Jobs run in stream order: output, resizes and snapshot requests. A snapshot request made
//! when the log's head was `h` runs after every byte before `h` was parsed, so the snapshot
//! and its offset still match exactly. The backlog is bounded in bytes: past it the actor
//! stops reading the PTY until the parser catches up, so memory stays bounded and nothing is
//! lost. The last snapshot is kept until output or a resize changes the model, where the actor
//! finds it too ([`ScreenThread::served`]): viewers joining an unchanged screen (a reconnect
//! storm, a crowd) cost one render between them and wake no thread, and requests queued
//! together (viewers resynced during a flood) are served by one render at the last of their
//! offsets.
//!
//! Every snapshot request is answered: with the snapshot, or with [`ScreenFailed`] when the
//! thread panicked while it was queued (the model is then replaced by a blank one of the same
//! size, which the output that follows draws on) or could not be started.
//!
//! The thread also reads the screen for attention (`attention/screen.rs`): after a run of
//! output or a resize when `READ_EVERY` has passed since the last reading, and always when its
//! queue runs empty (so the last frame of a burst is read before the thread lingers). A reading
//! that differs from the one before goes to the actor; the text goes into a shared slot that
//! readers take without waking the thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tracing::error;

use crate::attention::screen::{self, Reading, ScreenSlot, ScreenText};
use crate::config::ScreenPatterns;
use crate::metrics::Metrics;
use crate::term::model::{Parked, ScreenModel};
use crate::term::queries::Query;
use crate::term::snapshot::{self, EncodedSnapshot, SnapshotForm};
use crate::term::{pen, seq};

/// Most output gathered into one parse (a few hundred ms of parsing at worst; snapshot and
/// resize jobs end a batch, so they wait no longer than before).
const MAX_BATCH: usize = 4 << 20;
/// Pen text (plain text and colours) is gathered until there is this much of it, or for `GATHER_WAIT`. The skip keeps
/// the last `2 × rows + scrollback` lines of a run (about 80 KB at 24×80), so a flood gathered
/// into runs of 1 MiB parses about a tenth of its bytes.
const GATHER: usize = 1 << 20;
const GATHER_WAIT: Duration = Duration::from_millis(10);

/// How long the thread waits for another job before it ends: a session typed in or printing
/// keeps its thread, an idle one gives it back.
const LINGER: Duration = Duration::from_secs(1);

/// Least time between bringing a parked model back and parking it again: a session that prints
/// every second or two keeps its model (and its thread) rather than rendering and parsing its
/// screen each time; one quiet for longer keeps only the snapshot. 5 s: a flood's model (2.6 MB
/// for 1000 lines of 80 columns) is given back within seconds of its end.
const PARK_EVERY: Duration = Duration::from_secs(5);

/// Snapshots kept for reuse while the model is unchanged: one per form in use.
const MAX_CACHED_FORMS: usize = 4;

/// How long a patient snapshot request (a resync) waits for others while output keeps coming:
/// viewers slower than a flood ask for screens all the time, and each render they share is
/// one render less, and one cut less in the runs the parser skips through.
pub const PATIENT_WAIT: Duration = Duration::from_millis(20);

/// A patient request stops waiting once no job came for this long: the output has stopped.
const PATIENT_QUIET: Duration = Duration::from_millis(2);

/// Least time between two readings of the screen for attention while output keeps coming (the
/// queue running empty reads it at once).
const READ_EVERY: Duration = Duration::from_millis(100);

/// How the screen is read for attention: the assistant's patterns, on how many bottom rows.
#[derive(Debug, Clone, Default)]
pub struct ScreenReader {
    /// The assistant's screen patterns (none: only the text and the prompt are read).
    pub patterns: ScreenPatterns,
    /// How many bottom non-empty rows the patterns see (`attention.state_rows`).
    pub rows: usize,
}

/// Readings of the screen, in order, each different from the one before (boxed: the channel
/// reserves room for 32 at the session's start).
pub type Readings = mpsc::UnboundedReceiver<Box<Reading>>;

/// Called with a snapshot and the log offset it belongs to, or with why there is none.
pub type SnapshotFn = Box<dyn FnOnce(Result<(EncodedSnapshot, u64), ScreenFailed>) + Send>;

/// The screen model could not render a snapshot: its thread panicked, or none could be
/// started. The next request is served by a fresh model or thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the session's screen could not be drawn (its model failed); try again")]
pub struct ScreenFailed;

/// A snapshot request's reply, answered with [`ScreenFailed`] if it is dropped unanswered (a
/// panic unwinding past it, a queue dropped): no waiter is ever left hanging.
struct Waiter(Option<SnapshotFn>);

impl Waiter {
    fn answer(mut self, snapshot: EncodedSnapshot, offset: u64) {
        if let Some(take) = self.0.take() {
            take(Ok((snapshot, offset)));
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(take) = self.0.take() {
            take(Err(ScreenFailed));
        }
    }
}

/// Work for the screen thread, in stream order.
enum Job {
    Output(Bytes),
    Resize(u16, u16),
    Snapshot {
        head: u64,
        form: SnapshotForm,
        take: Waiter,
        /// A resync's, which may wait a moment for others to share its render.
        patient: bool,
    },
}

impl Job {
    /// Whether someone waits for this job at once: a snapshot request that is not patient (a
    /// join, a live upgrade's handoff).
    fn is_impatient(&self) -> bool {
        matches!(self, Job::Snapshot { patient: false, .. })
    }

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
    /// Whether a thread is running (or starting) to serve the jobs.
    running: AtomicBool,
    /// Test hooks: the next snapshot render panics; thread starts fail.
    #[cfg(test)]
    panic_at_snapshot: AtomicBool,
    #[cfg(test)]
    refuse_spawn: AtomicBool,
    /// The model and the jobs' receiving end: held by the running thread, parked in between.
    state: Mutex<State>,
    name: String,
    max_scrollback: usize,
    answers: mpsc::UnboundedSender<Vec<(Query, Vec<u8>)>>,
    /// The daemon's counters: bytes the model skipped, and parked models.
    metrics: Arc<Metrics>,
    /// How the screen is read for attention, if it is.
    reader: Option<ScreenReader>,
    readings: mpsc::UnboundedSender<Box<Reading>>,
    /// The screen's latest text.
    slot: Arc<ScreenSlot>,
    /// The snapshots rendered of the model as it is.
    served: Mutex<Served>,
}

/// The last snapshot of each form and its offset, and which model they show: the count of
/// model-changing jobs (output chunks, resizes) it had taken. The actor counts the same jobs
/// as it sends them, so it can answer a join from here while nothing changed, without a job
/// (browser and raw joiners ask for different forms; neither evicts the other). Emptied when
/// the model changes and when the thread ends: an idle session keeps no rendering.
#[derive(Default)]
struct Served {
    version: u64,
    snapshots: Vec<(SnapshotForm, EncodedSnapshot, u64)>,
}

impl Served {
    /// The snapshot in `form` of the model at `version`, and its offset, if rendered.
    fn get(&self, version: u64, form: SnapshotForm) -> Option<(EncodedSnapshot, u64)> {
        if self.version != version {
            return None;
        }
        self.snapshots
            .iter()
            .find(|(f, ..)| *f == form)
            .map(|(_, snapshot, offset)| (snapshot.clone(), *offset))
    }

    fn put(&mut self, version: u64, form: SnapshotForm, snapshot: EncodedSnapshot, offset: u64) {
        if self.version != version {
            self.snapshots.clear();
            self.version = version;
        }
        if self.snapshots.len() == MAX_CACHED_FORMS {
            self.snapshots.remove(0);
        }
        self.snapshots.push((form, snapshot, offset));
    }

    fn clear(&mut self) {
        self.snapshots = Vec::new();
    }
}

impl Shared {
    fn served(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the thread works on, kept across runs of the thread.
struct State {
    /// The model; a 1×1 stand-in while `parked` holds it.
    model: ScreenModel,
    /// The model put away when the thread ended, to bring back when the next one starts.
    parked: Option<ParkedScreen>,
    /// When the model was last brought back from `parked`.
    thawed_at: Option<Instant>,
    jobs: std_mpsc::Receiver<Job>,
    /// Model-changing jobs (output chunks, resizes) the model has taken: the version of
    /// [`Served`].
    applied: u64,
    /// Jobs taken from the queue ahead of their turn, to run next, in order.
    ahead: VecDeque<Job>,
    /// When the screen was last read for attention.
    read_at: Option<Instant>,
    /// Whether the screen may have changed since.
    unread: bool,
}

/// A parked model, counted in the parked-screen gauges of the metrics it holds for as long as
/// it is kept.
struct ParkedScreen(Parked, Arc<Metrics>);

impl ParkedScreen {
    fn new(parked: Parked, metrics: Arc<Metrics>) -> Self {
        metrics.screens_parked.add(1);
        metrics.screens_parked_bytes.add(parked.held_bytes() as u64);
        ParkedScreen(parked, metrics)
    }
}

impl Drop for ParkedScreen {
    fn drop(&mut self) {
        self.1.screens_parked.sub(1);
        self.1.screens_parked_bytes.sub(self.0.held_bytes() as u64);
    }
}

/// The actor's handle on its screen thread; dropping it ends the thread once its jobs are done.
pub struct ScreenThread {
    jobs: std_mpsc::Sender<Job>,
    shared: Arc<Shared>,
    /// Model-changing jobs sent: once the thread has taken them all, its snapshots show the
    /// model as the actor left it.
    sent: AtomicU64,
}

/// Answers the model computed for queries met while parsing, in stream order.
pub type Answers = mpsc::UnboundedReceiver<Vec<(Query, Vec<u8>)>>;

impl ScreenThread {
    /// Parks `model` for a thread started at the first job; at most `backlog_limit` bytes wait
    /// to be parsed before [`ScreenThread::has_room`] says no.
    /// Snapshots keep at most `max_scrollback` lines. What the model skips, and the model while
    /// parked, are counted in `metrics`.
    pub fn start(
        model: ScreenModel,
        max_scrollback: usize,
        backlog_limit: usize,
        name: String,
        metrics: Arc<Metrics>,
    ) -> (ScreenThread, Answers) {
        let (thread, answers, _) =
            Self::start_reading(model, max_scrollback, backlog_limit, name, metrics, None);
        (thread, answers)
    }

    /// [`ScreenThread::start`], reading the screen for attention as `reader` says (none: not
    /// at all): its readings come on the [`Readings`], its text is in [`ScreenThread::slot`].
    pub fn start_reading(
        model: ScreenModel,
        max_scrollback: usize,
        backlog_limit: usize,
        name: String,
        metrics: Arc<Metrics>,
        reader: Option<ScreenReader>,
    ) -> (ScreenThread, Answers, Readings) {
        let (jobs, rx) = std_mpsc::channel();
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let (readings_tx, readings) = mpsc::unbounded_channel();
        let slot = Arc::new(ScreenSlot::default());
        if reader.is_some() && model.has_output() {
            // A screen rebuilt in a live upgrade shows at once.
            slot.put(ScreenText::of(model.screen()));
        }
        let shared = Arc::new(Shared {
            backlog: AtomicUsize::new(0),
            room: Notify::new(),
            limit: backlog_limit.max(1),
            running: AtomicBool::new(false),
            #[cfg(test)]
            panic_at_snapshot: AtomicBool::new(false),
            #[cfg(test)]
            refuse_spawn: AtomicBool::new(false),
            state: Mutex::new(State {
                model,
                parked: None,
                thawed_at: None,
                jobs: rx,
                applied: 0,
                ahead: VecDeque::new(),
                read_at: None,
                unread: false,
            }),
            name,
            max_scrollback,
            answers: answers_tx,
            metrics,
            reader,
            readings: readings_tx,
            slot,
            served: Mutex::default(),
        });
        let thread = ScreenThread {
            jobs,
            shared,
            sent: AtomicU64::new(0),
        };
        (thread, answers, readings)
    }

    /// The screen's latest text, as the last reading found it.
    pub fn slot(&self) -> &Arc<ScreenSlot> {
        &self.shared.slot
    }

    /// Queues output for parsing.
    pub fn output(&self, chunk: Bytes) {
        self.shared
            .backlog
            .fetch_add(chunk.len(), Ordering::Relaxed);
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.send(Job::Output(chunk));
    }

    /// Resizes the model after the output queued so far.
    pub fn resize(&self, rows: u16, cols: u16) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.send(Job::Resize(rows, cols));
    }

    /// The snapshot in `form` of the model after every job sent so far, and its offset, when
    /// the thread has rendered it already: what a [`ScreenThread::snapshot`] request would be
    /// answered, without the request (nothing to wake).
    pub fn served(&self, form: SnapshotForm) -> Option<(EncodedSnapshot, u64)> {
        let version = self.sent.load(Ordering::Relaxed);
        self.shared.served().get(version, form)
    }

    /// Renders a snapshot once the model has parsed everything before `head`, and hands it to
    /// `take` with the exact offset it belongs to (`head` less what the model holds back of an
    /// unfinished sequence), packed as `form` asks. A `patient` request (a viewer's resync)
    /// may be served up to [`PATIENT_WAIT`] later, at a later offset, by a render it shares
    /// with the requests made meanwhile.
    pub fn snapshot(&self, head: u64, form: SnapshotForm, patient: bool, take: SnapshotFn) {
        self.send(Job::Snapshot {
            head,
            form,
            take: Waiter(Some(take)),
            patient,
        });
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
        // The receiver lives in `shared`, as long as this sender: sending cannot fail.
        let _ = self.jobs.send(job);
        // Sent before the swap: a thread that stops running after this swap finds the job
        // (it stops running, then looks for jobs once more); one that stopped before it
        // leaves `running` false, and a new thread is started here.
        if !self.shared.running.swap(true, Ordering::SeqCst) {
            if let Err(e) = self.spawn() {
                error!(thread = %self.shared.name, "screen thread could not start: {e}");
                self.refuse_snapshots();
            }
        }
    }

    fn spawn(&self) -> std::io::Result<()> {
        #[cfg(test)]
        if self.shared.refuse_spawn.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("refused by the test"));
        }
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name(self.shared.name.clone())
            .spawn(move || work(&shared))
            .map(drop)
    }

    /// No thread could start for the queued jobs: their snapshot requests are answered
    /// [`ScreenFailed`] now rather than when some later job gets a thread up (an idle session
    /// may send none); output and resizes wait, in order, for that thread.
    fn refuse_snapshots(&self) {
        // No thread serves the jobs now (`running` was false); one winding down holds the
        // lock only to finish its last job and park the model.
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let State { jobs, ahead, .. } = &mut *state;
        let kept: VecDeque<Job> = std::mem::take(ahead)
            .into_iter()
            .chain(jobs.try_iter())
            // A snapshot request dropped here is answered by its `Waiter`.
            .filter(|job| !matches!(job, Job::Snapshot { .. }))
            .collect();
        *ahead = kept;
        // The next job tries to start a thread again.
        self.shared.running.store(false, Ordering::SeqCst);
    }
}

/// One run of the thread: serves jobs until none came for `LINGER`, then parks the model.
fn work(shared: &Shared) {
    // Held for the whole run: a thread started while this one winds down waits here, and then
    // serves the jobs this one left, in order.
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(parked) = state.parked.take() {
        state.thawed_at = Some(Instant::now());
        let thawed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parked.0.thaw()));
        state.model = thawed.unwrap_or_else(|_| {
            error!(thread = %shared.name, "screen model could not be brought back: the screen starts blank");
            let (rows, cols) = parked.0.size();
            ScreenModel::new(rows, cols, shared.max_scrollback)
        });
    }
    while let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve(&mut state, shared);
    })) {
        // The requests being served were answered `ScreenFailed` as the panic dropped them.
        // The model may be half-updated: a blank one of the same size takes its place (the
        // program's next output draws on it), and this thread goes on with the queued jobs,
        // so none of them waits for another to arrive.
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        error!(thread = %shared.name, "screen model panicked ({why}): its snapshots were refused and the screen starts blank");
        let (rows, cols) = state.model.size();
        state.model = ScreenModel::new(rows, cols, shared.max_scrollback);
        shared.served().clear();
    }
    shared.served().clear();
    if let Some(parked) = state.model.park() {
        state.model = ScreenModel::new(1, 1, 0);
        state.parked = Some(ParkedScreen::new(parked, shared.metrics.clone()));
        // A model with its scrollback holds megabytes of cells (32 bytes each): the allocator
        // would keep them a while for reuse, which a quiet session has none of.
        crate::idle_pages::release_allocator();
    }
    // Parking ran code no worker woke for: the daemon's idle watch hears of it.
    crate::idle_pages::woke();
}

/// How long to wait for another job before the thread ends: `LINGER`, or until parking is
/// due again if the model was brought back (at `thawed_at`) less than `PARK_EVERY` ago.
fn linger_after(thawed_at: Option<Instant>) -> Duration {
    let due = thawed_at
        .map(|at| PARK_EVERY.saturating_sub(at.elapsed()))
        .unwrap_or_default();
    LINGER.max(due)
}

fn serve(state: &mut State, shared: &Shared) {
    loop {
        let job = match state.ahead.pop_front() {
            Some(job) => job,
            None => match next_job(state, shared) {
                Ok(job) => job,
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    shared.running.store(false, Ordering::SeqCst);
                    // A job sent before the store saw `running` true and started no thread.
                    let Ok(job) = state.jobs.try_recv() else {
                        return;
                    };
                    let mine = !shared.running.swap(true, Ordering::SeqCst);
                    run_job_and_read(state, shared, job);
                    if !mine {
                        // A new thread waits for the state, and serves what follows.
                        return;
                    }
                    continue;
                }
            },
        };
        run_job_and_read(state, shared, job);
    }
}

/// The next job: at once if one is queued; else, once the screen is read (the queue ran empty:
/// the last frame of a burst is read now), the next one within the linger.
fn next_job(state: &mut State, shared: &Shared) -> Result<Job, std_mpsc::RecvTimeoutError> {
    match state.jobs.try_recv() {
        Ok(job) => Ok(job),
        Err(std_mpsc::TryRecvError::Disconnected) => Err(std_mpsc::RecvTimeoutError::Disconnected),
        Err(std_mpsc::TryRecvError::Empty) => {
            if state.unread {
                read_screen(state, shared);
            }
            state.jobs.recv_timeout(linger_after(state.thawed_at))
        }
    }
}

/// Runs `job`, then reads the screen if a reading is due.
fn run_job_and_read(state: &mut State, shared: &Shared, job: Job) {
    run_job(state, shared, job);
    if shared.reader.is_some() {
        state.unread = true;
        if state.read_at.is_none_or(|at| at.elapsed() >= READ_EVERY) {
            read_screen(state, shared);
        }
    }
}

/// Reads the screen for attention: its text into the slot when it changed, and a reading to
/// the actor when its rows did.
fn read_screen(state: &mut State, shared: &Shared) {
    state.unread = false;
    let Some(reader) = &shared.reader else {
        return;
    };
    let now = Instant::now();
    state.read_at = Some(now);
    let text = ScreenText::of(state.model.screen());
    let last = shared.slot.get();
    let rows_changed = last.generation == 0 || !last.same_rows(&text);
    if !rows_changed && last.cursor == text.cursor {
        return;
    }
    if rows_changed {
        let reading = screen::read(&text, &reader.patterns, reader.rows, now);
        // The actor gone: nobody to tell.
        let _ = shared.readings.send(Box::new(reading));
    }
    shared.slot.put(text);
}

/// Where the pen sequence `bytes` ends inside starts (its ESC), or `bytes.len()`.
fn open_pen_start(bytes: &[u8]) -> usize {
    match memchr::memrchr(seq::ESC, bytes) {
        Some(e) if pen::could_become_pen(&bytes[e..]) => e,
        _ => bytes.len(),
    }
}

/// Parses a run of output: counts what was skipped, passes on query answers, and gives the
/// actor room again.
fn parse(model: &mut ScreenModel, shared: &Shared, run: &[u8], len: usize) {
    let skipped = model.process_bulk(run);
    if skipped > 0 {
        shared.metrics.parse_skipped.add(skipped as u64);
    }
    let found = model.take_queries();
    if !found.is_empty() {
        let _ = shared.answers.send(found);
    }
    let before = shared.backlog.fetch_sub(len, Ordering::Relaxed);
    if before >= shared.limit && before - len < shared.limit {
        // Stored as a permit if the actor is not waiting yet: no lost wake-up.
        shared.room.notify_one();
    }
}

fn run_job(state: &mut State, shared: &Shared, job: Job) {
    let State {
        model,
        jobs,
        applied,
        ahead,
        ..
    } = state;
    match job {
        Job::Output(chunk) => {
            shared.served().clear();
            *applied += 1;
            // Parse the output queued up to the next other job as one run, so the part of
            // a long flood of text and colours that scrolls away unseen is skipped. Text
            // with no sequence but pen ones (so no terminal query to answer) waits a moment
            // for more to join it:
            // the model may lag a few milliseconds, as a snapshot request makes it parse
            // everything before its offset first.
            let mut len = chunk.len();
            let mut plain = pen::only_pen_sequences_so_far(&chunk);
            // Where the next chunk's check starts: at a pen sequence `chunk` ends inside, so
            // that a sequence split between chunks is checked whole.
            let mut check_from = open_pen_start(&chunk);
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
                        *applied += 1;
                        if batch.is_empty() {
                            batch.extend_from_slice(&chunk);
                        }
                        batch.extend_from_slice(&more);
                        // Only the new bytes, with the open sequence before them.
                        let fresh = &batch[check_from..];
                        plain = plain && pen::only_pen_sequences_so_far(fresh);
                        check_from += open_pen_start(fresh);
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
            parse(model, shared, run, len);
        }
        Job::Resize(rows, cols) => {
            shared.served().clear();
            *applied += 1;
            model.resize(rows, cols);
        }
        Job::Snapshot {
            head,
            form,
            take,
            patient,
        } => {
            // Requests queued behind this one (many viewers resynced during a flood) are
            // served by one render at the last of them: a snapshot at a later exact offset
            // serves an earlier request as well, and the output between is parsed as one
            // run of at most `MAX_BATCH` bytes, so memory stays as bounded as a plain run.
            // A patient one waits a moment for more to come while the output flows.
            let mut waiting = vec![(form, take)];
            let mut head = head;
            let mut queued: usize = ahead.iter().map(Job::output_len).sum();
            let patient_until = Instant::now() + PATIENT_WAIT;
            let mut patient = patient && !ahead.iter().any(Job::is_impatient);
            while queued < MAX_BATCH {
                let job = match jobs.try_recv() {
                    Ok(job) => job,
                    Err(std_mpsc::TryRecvError::Empty) if patient => {
                        let left = patient_until.saturating_duration_since(Instant::now());
                        match jobs.recv_timeout(left.min(PATIENT_QUIET)) {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    }
                    Err(_) => break,
                };
                // Someone waits for this render now (a join): no more waiting.
                patient &= !job.is_impatient();
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
                        Job::Output(chunk) => {
                            *applied += 1;
                            batch.extend_from_slice(&chunk);
                        }
                        Job::Resize(rows, cols) => {
                            if !batch.is_empty() {
                                parse(model, shared, &batch, batch.len());
                                batch.clear();
                            }
                            *applied += 1;
                            shared.served().clear();
                            model.resize(rows, cols);
                        }
                        Job::Snapshot {
                            head: h,
                            form,
                            take,
                            ..
                        } => {
                            head = h;
                            waiting.push((form, take));
                        }
                    }
                }
                if !batch.is_empty() {
                    shared.served().clear();
                    parse(model, shared, &batch, batch.len());
                }
            }
            let offset = head - model.pending_len() as u64;
            for (form, take) in waiting {
                let served = shared.served().get(*applied, form);
                let snapshot = match served {
                    Some((snapshot, _)) => snapshot,
                    None => {
                        let snapshot = snapshot::encode_as(model, shared.max_scrollback, form);
                        shared
                            .served()
                            .put(*applied, form, snapshot.clone(), offset);
                        snapshot
                    }
                };
                #[cfg(test)]
                if shared.panic_at_snapshot.swap(false, Ordering::SeqCst) {
                    panic!("screen model panic forced by a test");
                }
                take.answer(snapshot, offset);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc as std_mpsc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::{linger_after, ScreenFailed, ScreenThread, LINGER, PARK_EVERY};
    use crate::metrics::Metrics;
    use crate::term::model::ScreenModel;
    use crate::term::snapshot::{self, SnapshotForm};

    /// This process's threads named `name`.
    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim_end() == name)
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// The screen as a snapshot job renders it, once the thread has served it.
    fn contents(screen: &ScreenThread, head: u64) -> String {
        let (tx, rx) = std_mpsc::channel();
        screen.snapshot(
            head,
            SnapshotForm::plain(1 << 20),
            false,
            Box::new(move |drawn| {
                let _ = tx.send(drawn.map(|(snap, _)| snap.bytes));
            }),
        );
        let bytes = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("answered")
            .expect("drawn");
        let mut vt = vt100::Parser::new(non_zero(24), non_zero(80), 0);
        vt.process(&bytes);
        vt.screen().contents()
    }

    fn non_zero(n: u16) -> std::num::NonZeroU16 {
        std::num::NonZeroU16::new(n).expect("not zero")
    }

    /// Counters of the test's own.
    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// No thread before the first job; one while there is work; none once idle for `LINGER`
    /// (the model parked, nothing woken), and the next job brings one back on the same model.
    #[test]
    fn an_idle_thread_ends_and_the_next_job_brings_it_back() {
        const NAME: &str = "screen-parktest";
        let metrics = metrics();
        let model = ScreenModel::new(24, 80, 100);
        let (screen, _answers) =
            ScreenThread::start(model, 100, 1 << 20, NAME.into(), metrics.clone());
        assert_eq!(threads_named(NAME), 0, "no thread before any job");
        screen.output(Bytes::from_static(b"\x1b[31mhello\r\n"));
        assert!(contents(&screen, 15).contains("hello"));
        let gone_by = Instant::now() + LINGER + Duration::from_secs(20);
        while threads_named(NAME) > 0 || screen.shared.running.load(Ordering::SeqCst) {
            assert!(Instant::now() < gone_by, "the idle thread did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The model was put away as its snapshot when the thread ended, and counted as parked
        // while it is.
        assert!(screen.shared.state.lock().expect("lock").parked.is_some());
        assert_eq!(metrics.screens_parked.get(), 1);
        assert!(metrics.screens_parked_bytes.get() > 0);
        screen.output(Bytes::from_static(b"world"));
        let now = contents(&screen, 20);
        assert!(now.contains("hello") && now.contains("world"), "{now:?}");
        assert_eq!(metrics.screens_parked.get(), 0);
        assert_eq!(metrics.screens_parked_bytes.get(), 0);
    }

    /// A snapshot rendered of the model as it is can be taken without a job, in the form it
    /// was rendered in, until output or a resize changes the model or the thread ends.
    #[test]
    fn a_rendered_snapshot_is_served_until_the_model_changes() {
        const NAME: &str = "screen-served";
        let (screen, _answers) = ScreenThread::start(
            ScreenModel::new(24, 80, 100),
            100,
            1 << 20,
            NAME.into(),
            metrics(),
        );
        let (plain, gzip) = (SnapshotForm::plain(1 << 20), SnapshotForm::gzip(1 << 20));
        screen.output(Bytes::from_static(b"served\r\n"));
        assert!(screen.served(plain).is_none(), "nothing rendered yet");
        assert!(contents(&screen, 8).contains("served"));
        let (snapshot, offset) = screen.served(plain).expect("served without a job");
        assert_eq!(offset, 8);
        let mut vt = vt100::Parser::new(non_zero(24), non_zero(80), 0);
        vt.process(&snapshot.bytes);
        assert!(vt.screen().contents().contains("served"));
        assert!(
            screen.served(gzip).is_none(),
            "another form is rendered on request"
        );

        screen.resize(10, 40);
        assert!(screen.served(plain).is_none(), "a resize changes the model");
        assert!(contents(&screen, 8).contains("served"));
        assert!(screen.served(plain).is_some());
        screen.output(Bytes::from_static(b"more"));
        assert!(screen.served(plain).is_none(), "output changes the model");
        assert!(contents(&screen, 12).contains("more"));
        assert!(screen.served(plain).is_some());

        let gone_by = Instant::now() + LINGER + Duration::from_secs(20);
        while threads_named(NAME) > 0 || screen.shared.running.load(Ordering::SeqCst) {
            assert!(Instant::now() < gone_by, "the idle thread did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            screen.served(plain).is_none(),
            "an idle session keeps no rendering"
        );
    }

    /// A model brought back lately is kept (with its thread) until `PARK_EVERY` after that.
    #[test]
    fn a_model_brought_back_lately_is_not_parked_again_at_once() {
        assert_eq!(linger_after(None), LINGER);
        assert!(linger_after(Some(Instant::now())) > PARK_EVERY - Duration::from_secs(1));
        let long_ago = Instant::now().checked_sub(PARK_EVERY * 2);
        assert_eq!(linger_after(long_ago), LINGER);
    }

    /// Snapshot requests queued between outputs, patient or not, are each served at an offset
    /// at or after their own, with a screen exactly that of a model fed everything before that
    /// offset.
    #[test]
    fn queued_snapshots_are_served_exactly_at_a_later_offset() {
        let form = SnapshotForm::plain(1 << 20);
        let model = ScreenModel::new(24, 80, 100);
        let (screen, _answers) = ScreenThread::start(model, 100, 1 << 20, "t".into(), metrics());
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
                // Resyncs (patient) and joins alike.
                screen.snapshot(
                    head,
                    form,
                    i % 2 == 0,
                    Box::new(move |drawn| {
                        if let Ok((snap, offset)) = drawn {
                            let _ = tx.send((head, offset, snap));
                        }
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

    /// Asks for a snapshot; the receiver gets its offset, or why there is none.
    fn ask(screen: &ScreenThread, head: u64) -> std_mpsc::Receiver<Result<u64, ScreenFailed>> {
        let (tx, rx) = std_mpsc::channel();
        screen.snapshot(
            head,
            SnapshotForm::plain(1 << 20),
            false,
            Box::new(move |drawn| {
                let _ = tx.send(drawn.map(|(_, offset)| offset));
            }),
        );
        rx
    }

    /// A panic cannot be provoked from outside honestly (the model is meant not to panic), so
    /// a test hook forces one: the request being served is answered `ScreenFailed`, and the
    /// next one is served by the same thread on a blank model that later output draws on.
    #[test]
    fn a_panicking_render_answers_its_waiters_and_the_next_request_is_served() {
        let (screen, _answers) = ScreenThread::start(
            ScreenModel::new(24, 80, 100),
            100,
            1 << 20,
            "t-panic".into(),
            metrics(),
        );
        screen.output(Bytes::from_static(b"before\r\n"));
        assert!(contents(&screen, 8).contains("before"));
        screen
            .shared
            .panic_at_snapshot
            .store(true, Ordering::SeqCst);
        let failed = ask(&screen, 8);
        assert_eq!(
            failed.recv_timeout(Duration::from_secs(20)),
            Ok(Err(ScreenFailed)),
            "the waiter of the panicking render is answered"
        );
        assert_eq!(
            ask(&screen, 8).recv_timeout(Duration::from_secs(20)),
            Ok(Ok(8)),
            "the next request is served"
        );
        screen.output(Bytes::from_static(b"after"));
        let now = contents(&screen, 13);
        assert!(now.contains("after") && !now.contains("before"), "{now:?}");
    }

    /// A thread that cannot be started leaves no waiter hanging: snapshot requests are
    /// answered `ScreenFailed` at once, output waits in order, and the next job that gets a
    /// thread up serves it.
    #[test]
    fn a_thread_that_cannot_start_answers_its_waiters_and_keeps_the_output() {
        let (screen, _answers) = ScreenThread::start(
            ScreenModel::new(24, 80, 100),
            100,
            1 << 20,
            "t-nospawn".into(),
            metrics(),
        );
        screen.shared.refuse_spawn.store(true, Ordering::SeqCst);
        screen.output(Bytes::from_static(b"kept\r\n"));
        assert_eq!(
            ask(&screen, 6).recv_timeout(Duration::from_secs(20)),
            Ok(Err(ScreenFailed))
        );
        screen.shared.refuse_spawn.store(false, Ordering::SeqCst);
        assert!(contents(&screen, 6).contains("kept"));
    }
}
