//! Core logic for sessions, independent of any wire format: one actor task per session owns
//! the program and its PTY, the screen model, the output log, the viewers and the metadata.
//!
//! Other tasks talk to a session only through its [`SessionHandle`]: commands go in on a
//! bounded channel, replies come back on oneshot channels, events go out on each viewer's
//! own channel, and output is published in the shared [`output_log`].

pub mod event_queue;
pub mod output_log;
pub mod process;
pub mod queries;
pub mod refusal;
pub mod screen;
pub mod screen_thread;
pub mod size;
pub mod snapshot;
pub mod upload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use nix::sys::signal::Signal;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::config::{Assistant, Config};
use event_queue::EventSender;
use output_log::SharedLog;
pub use process::ExitInfo;
pub use refusal::{Action, Refusal};
use screen::ScreenModel;
use screen_thread::ScreenThread;
use size::ViewerSize;
pub use snapshot::EncodedSnapshot;

/// Identifies one viewer within the daemon.
pub type ViewerId = u64;

/// Commands queued per session before senders wait.
const COMMAND_QUEUE: usize = 256;
/// Input bytes in flight to the PTY (queued in commands or for the writer task) before writers
/// wait: the input queue's memory bound. A writer that sends faster than the program reads is
/// slowed (its socket is not read, so TCP pushes back); its input is never dropped.
const INPUT_QUEUE_BYTES: usize = 1 << 20;
/// What one input message costs against [`INPUT_QUEUE_BYTES`] beyond its bytes (its queue
/// entry), so a flood of tiny messages is bounded in memory too.
const INPUT_MESSAGE_OVERHEAD: usize = 64;
/// Bytes of the daemon's own answers to terminal queries queued for a program that does not
/// read its input; past it further answers are dropped (the program asked, and did not listen).
const ANSWER_QUEUE_BYTES: usize = 64 * 1024;
/// Bytes asked of the PTY per read; PTY reads return at most about 4 KiB anyway.
const READ_CHUNK: usize = 16 * 1024;
/// After the program exits, how long output still arriving from its PTY is collected.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// After leftover processes got SIGHUP at the program's exit, when they get SIGTERM.
const LEFTOVER_TERM_AFTER: Duration = Duration::from_secs(1);
/// Output bytes waiting for the screen thread before the actor stops reading the PTY (16 MiB:
/// several seconds of a flood; chunks still in the output log cost nothing extra).
const PARSE_BACKLOG: usize = 16 << 20;
/// How long after a viewer's input its output counts as that viewer's echo, delivered to it
/// before anyone else.
const TYPIST_WINDOW: Duration = Duration::from_millis(500);

/// How the actor hands new output to a viewer: straight onto its socket when that needs no
/// waiting, else by waking the viewer's task, which catches up from the log.
///
/// Writing from the actor spares a task wake-up per viewer per chunk, and lets the viewer
/// that typed get its echo first. Implemented by each dialect's connection.
pub trait LiveOutput: Send + Sync {
    /// Sends `chunk`, which starts at log offset `start`, if the viewer is caught up to
    /// `start`, idle, and its socket takes it without blocking. False when it did not.
    fn try_push(&self, start: u64, chunk: &[u8]) -> bool;
    /// Wakes the viewer's task to catch up from the log.
    fn wake(&self);
}

/// What a viewer is told by its session.
#[derive(Debug, Clone)]
pub enum ViewerEvent {
    /// The session's metadata changed (or the viewer just joined); output before `offset`
    /// was produced before the change (at the old size) and is sent first.
    Status {
        /// The metadata.
        info: StatusInfo,
        /// Log offset of the change.
        offset: u64,
    },
    /// The program ended; the exit notice ends at `offset` in the output log.
    Exit {
        /// How it ended.
        info: ExitInfo,
        /// Output up to this offset comes before the exit message.
        offset: u64,
    },
    /// A chat line, to every viewer.
    Chat(ChatLine),
    /// Something this viewer asked was refused.
    Refused(Refusal),
    /// The session is gone, for this reason; the connection ends.
    Close(EndReason),
}

impl ViewerEvent {
    /// About what the event costs while queued, in bytes: its text plus a fixed part. Bounds
    /// a viewer's queue in memory ([`event_queue`]).
    pub fn cost(&self) -> usize {
        const FIXED: usize = 128;
        FIXED
            + match self {
                ViewerEvent::Status { info, .. } => {
                    info.assistant.len() + info.session_name.len() + info.work_dir.len()
                }
                ViewerEvent::Exit { info, .. } => info.signal.as_ref().map_or(0, String::len),
                ViewerEvent::Chat(line) => {
                    line.user_name.len() + line.text.len() + line.timestamp.len()
                }
                ViewerEvent::Refused(r) => r.message().len(),
                ViewerEvent::Close(_) => 0,
            }
    }
}

/// The session's metadata as every viewer sees it (the viewer adds its own role).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusInfo {
    /// Connected viewers.
    pub viewers: usize,
    /// Session height.
    pub rows: u16,
    /// Session width.
    pub cols: u16,
    /// Display name of the assistant.
    pub assistant: String,
    /// User-given name, possibly empty.
    pub session_name: String,
    /// The session id.
    pub session_uuid: Uuid,
    /// Working directory of the program.
    pub work_dir: String,
    /// Whether the program runs in YOLO mode.
    pub yolo_mode: bool,
    /// Whether the assistant has a YOLO command.
    pub yolo_supported: bool,
    /// Whether the agent is being restarted (YOLO toggle) right now.
    pub restarting: bool,
}

/// A session as the REST API lists it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id.
    pub id: Uuid,
    /// User-given name, possibly empty.
    pub name: String,
    /// Assistant key in the config.
    pub assistant: String,
    /// Assistant display name.
    pub assistant_name: String,
    /// Connected viewers.
    pub viewers: usize,
    /// Session width.
    pub cols: u16,
    /// Session height.
    pub rows: u16,
    /// Whether the program still runs.
    pub alive: bool,
    /// Exit status once it ended.
    pub exit_code: Option<i32>,
    /// Signal name if a signal ended it.
    pub exit_signal: Option<String>,
    /// Creation time, RFC 3339 UTC.
    pub created_at: String,
    /// Working directory.
    pub work_dir: String,
    /// Whether the program runs in YOLO mode.
    pub yolo_mode: bool,
}

/// What a joining viewer receives before any live output.
pub struct JoinReply {
    /// The viewer's id within the session.
    pub viewer: ViewerId,
    /// The screen, when the session has drawn anything.
    pub snapshot: Option<EncodedSnapshot>,
    /// Live output for this viewer starts at this log offset.
    pub offset: u64,
    /// Set when the program has already ended.
    pub exit: Option<ExitInfo>,
    /// The latest chat lines, oldest first.
    pub chat: Vec<ChatLine>,
}

/// One chat message as kept in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatLine {
    /// Who wrote it (trimmed).
    pub user_name: String,
    /// What they wrote (trimmed).
    pub text: String,
    /// When the session received it, RFC 3339 UTC.
    pub timestamp: String,
}

/// Chat lines a joiner receives before `ready`.
pub const CHAT_REPLAY: usize = 50;
/// Signals a viewer may send to the foreground process group.
pub const ALLOWED_SIGNALS: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGKILL,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// Trims and checks a chat message against the configured lengths.
pub fn validate_chat(
    user_name: &str,
    text: &str,
    limits: &crate::config::LimitsConfig,
) -> Result<(String, String), String> {
    let (user, text) = (user_name.trim(), text.trim());
    let (max_user, max_text) = (limits.max_name_chars, limits.max_chat_chars);
    let user_len = user.chars().count();
    if user_len == 0 || user_len > max_user {
        return Err(format!("chat userName must be 1 to {max_user} characters"));
    }
    let text_len = text.chars().count();
    if text_len == 0 || text_len > max_text {
        return Err(format!("chat text must be 1 to {max_text} characters"));
    }
    Ok((user.to_owned(), text.to_owned()))
}

/// A fresh snapshot for a viewer that fell behind, and where its stream resumes.
pub struct Resync {
    /// The screen now.
    pub snapshot: EncodedSnapshot,
    /// Live output resumes at this log offset.
    pub offset: u64,
}

/// Why a session is being ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Deleted through the API.
    Deleted,
    /// The daemon is shutting down.
    Shutdown,
    /// Exited and unwatched for the configured time.
    Reaped,
}

/// The session no longer exists.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the session has ended")]
pub struct SessionGone;

/// Why a session could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// No such assistant in the config.
    #[error("unknown assistant `{0}`")]
    UnknownAssistant(String),
    /// The assistant's program is not installed.
    #[error("assistant `{key}` is unavailable: {reason}")]
    Unavailable {
        /// Assistant key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The requested name breaks the naming rule.
    #[error("{0}")]
    BadName(String),
    /// The working directory does not exist.
    #[error("working directory {0} does not exist or is not a directory")]
    BadWorkDir(String),
    /// Starting the program failed.
    #[error(transparent)]
    Spawn(#[from] process::SpawnError),
    /// The screen model's thread could not be started.
    #[error("could not start the screen thread: {0}")]
    Thread(std::io::Error),
    /// The daemon is shutting down.
    #[error("ptyhub is shutting down")]
    ShuttingDown,
    /// The daemon already runs its maximum of sessions.
    #[error("session limit reached: this server runs at most {0} sessions")]
    TooMany(usize),
}

/// What to create.
#[derive(Debug, Clone, Default)]
pub struct CreateSpec {
    /// The client's uuid, which the session keeps.
    pub id: Uuid,
    /// Assistant key.
    pub assistant: String,
    /// Optional name (validated like a rename).
    pub name: Option<String>,
    /// Optional working directory (must exist); default the daemon's.
    pub cwd: Option<PathBuf>,
}

/// Trims and checks a session name: up to `max` (config, default 32) characters of
/// `[A-Za-z0-9 _-]`; empty clears the name.
pub fn validate_name(name: &str, max: usize) -> Result<String, String> {
    let name = name.trim();
    if name.chars().count() > max {
        return Err(format!("session name is longer than {max} characters"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-')))
    {
        return Err(format!(
            "session name may only hold letters, digits, spaces, '-' and '_' (found {bad:?})"
        ));
    }
    Ok(name.to_owned())
}

/// Called once when a session has ended, with its id (the registry removes it).
pub type OnEnd = Box<dyn FnOnce(Uuid) + Send>;

enum Command {
    Join {
        read_only: bool,
        events: EventSender,
        live: Arc<dyn LiveOutput>,
        reply: oneshot::Sender<Result<JoinReply, String>>,
    },
    Leave {
        viewer: ViewerId,
    },
    Input {
        viewer: ViewerId,
        data: Bytes,
        /// Its share of the input budget, given back once it is written to the PTY.
        permit: InputPermit,
    },
    Resize {
        viewer: ViewerId,
        rows: u16,
        cols: u16,
    },
    Resync {
        reply: oneshot::Sender<Resync>,
    },
    Chat {
        viewer: ViewerId,
        user_name: String,
        text: String,
    },
    Rename {
        name: String,
        reply: oneshot::Sender<Result<SessionInfo, String>>,
    },
    ToggleYolo {
        viewer: ViewerId,
    },
    Signal {
        viewer: ViewerId,
        signal: String,
    },
    End {
        reason: EndReason,
        done: oneshot::Sender<()>,
    },
}

/// A cheap, cloneable reference to a running session actor.
#[derive(Clone)]
pub struct SessionHandle {
    id: Uuid,
    commands: mpsc::Sender<Command>,
    /// Input bytes that may be in flight to the PTY, shared by every writer of the session.
    input_budget: Arc<Semaphore>,
    log: Arc<SharedLog>,
    info: watch::Receiver<SessionInfo>,
    ended: CancellationToken,
}

impl SessionHandle {
    /// Cancelled once the session has ended and told its viewers to close.
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// The session id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The session's output log, which viewers read from their own offsets.
    pub fn log(&self) -> &Arc<SharedLog> {
        &self.log
    }

    /// The session's current metadata.
    pub fn info(&self) -> SessionInfo {
        self.info.borrow().clone()
    }

    async fn send(&self, cmd: Command) -> Result<(), SessionGone> {
        self.commands.send(cmd).await.map_err(|_| SessionGone)
    }

    /// Adds a viewer; `events` receives everything addressed to it, `live` its output. The
    /// inner `Err` says why the session refused it (too many viewers).
    pub async fn join(
        &self,
        read_only: bool,
        events: EventSender,
        live: Arc<dyn LiveOutput>,
    ) -> Result<Result<JoinReply, String>, SessionGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Join {
            read_only,
            events,
            live,
            reply,
        })
        .await?;
        rx.await.map_err(|_| SessionGone)
    }

    /// Removes a viewer.
    pub async fn leave(&self, viewer: ViewerId) {
        let _ = self.send(Command::Leave { viewer }).await;
    }

    /// Keystrokes or pasted bytes for the program. Waits while the program is
    /// [`INPUT_QUEUE_BYTES`] behind in reading its input: the caller stops reading its client,
    /// which is slowed by TCP instead of losing what it sent.
    pub async fn input(&self, viewer: ViewerId, data: Bytes) -> Result<(), SessionGone> {
        let cost = (data.len() + INPUT_MESSAGE_OVERHEAD).min(INPUT_QUEUE_BYTES) as u32;
        let permit = self
            .input_budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| SessionGone)?;
        self.send(Command::Input {
            viewer,
            data,
            permit: Some(permit),
        })
        .await
    }

    /// The viewer's terminal size.
    pub async fn resize(&self, viewer: ViewerId, rows: u16, cols: u16) -> Result<(), SessionGone> {
        self.send(Command::Resize { viewer, rows, cols }).await
    }

    /// A fresh snapshot and the offset the stream resumes from.
    pub async fn resync(&self) -> Result<Resync, SessionGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Resync { reply }).await?;
        rx.await.map_err(|_| SessionGone)
    }

    /// A chat message from a viewer, for everyone.
    pub async fn chat(
        &self,
        viewer: ViewerId,
        user_name: String,
        text: String,
    ) -> Result<(), SessionGone> {
        self.send(Command::Chat {
            viewer,
            user_name,
            text,
        })
        .await
    }

    /// Renames the session; `Err` carries why the name was refused.
    pub async fn rename(&self, name: String) -> Result<Result<SessionInfo, String>, SessionGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Rename { name, reply }).await?;
        rx.await.map_err(|_| SessionGone)
    }

    /// Restarts the agent with or without its YOLO command.
    pub async fn toggle_yolo(&self, viewer: ViewerId) -> Result<(), SessionGone> {
        self.send(Command::ToggleYolo { viewer }).await
    }

    /// Sends a signal (by name) to the program's foreground process group.
    pub async fn signal(&self, viewer: ViewerId, signal: String) -> Result<(), SessionGone> {
        self.send(Command::Signal { viewer, signal }).await
    }

    /// Ends the session (signalling its processes, closing its viewers) and waits until it is gone.
    pub async fn end(&self, reason: EndReason) -> Result<(), SessionGone> {
        let (done, rx) = oneshot::channel();
        self.send(Command::End { reason, done }).await?;
        rx.await.map_err(|_| SessionGone)
    }
}

/// Creates a session: validates the request, starts the program, spawns the actor.
pub fn start(
    cfg: Arc<Config>,
    spec: CreateSpec,
    on_end: OnEnd,
) -> Result<SessionHandle, CreateError> {
    let assistant = cfg
        .assistants
        .get(&spec.assistant)
        .ok_or_else(|| CreateError::UnknownAssistant(spec.assistant.clone()))?
        .clone();
    assistant
        .availability()
        .map_err(|reason| CreateError::Unavailable {
            key: spec.assistant.clone(),
            reason,
        })?;
    let name = validate_name(
        spec.name.as_deref().unwrap_or(""),
        cfg.limits.max_name_chars,
    )
    .map_err(CreateError::BadName)?;
    let cwd = match spec.cwd {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|e| CreateError::BadWorkDir(e.to_string()))?,
    };
    let cwd = cwd
        .canonicalize()
        .ok()
        .filter(|d| d.is_dir())
        .ok_or_else(|| CreateError::BadWorkDir(cwd.display().to_string()))?;

    let argv = assistant.start_argv();
    let yolo_mode = assistant.starts_in_yolo();
    let (rows, cols) = size::clamp(cfg.session.rows, cfg.session.cols);
    let model = ScreenModel::new(rows, cols, cfg.session.scrollback_lines);
    let thread_name = format!("screen-{}", &spec.id.simple().to_string()[..8]);
    let (screen, answers) = ScreenThread::start(
        model,
        cfg.session.scrollback_lines,
        PARSE_BACKLOG,
        thread_name,
    )
    .map_err(CreateError::Thread)?;
    let env = assistant.env_for(yolo_mode);
    let spawned = process::spawn(&process::SpawnSpec {
        argv: &argv,
        env: &env,
        cwd: &cwd,
        rows,
        cols,
        session: spec.id,
    })?;
    info!(session = %spec.id, assistant = %spec.assistant, pid = spawned.pid, cwd = %cwd.display(), "session started");

    let log = Arc::new(SharedLog::new(cfg.session.output_log_bytes));
    let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
    let created_at = SystemTime::now();
    let mut session = Session {
        id: spec.id,
        screen,
        answers,
        scan: queries::QueryScan::default(),
        drawn: false,
        typist: None,
        assistant_key: spec.assistant,
        assistant,
        name,
        cwd,
        created_at,
        yolo_mode,
        log: log.clone(),
        viewers: HashMap::new(),
        size: (rows, cols),
        proc: Proc::default(),
        exit: None,
        idle_since: Instant::now(),
        ending: None,
        last_pid: 0,
        restarting: false,
        kill_at: None,
        chat: std::collections::VecDeque::new(),
        info: watch::Sender::new(placeholder_info(spec.id)),
        on_end: Some(on_end),
        ended: CancellationToken::new(),
        read_buf: BytesMut::new(),
        cfg,
    };
    session.attach(spawned);
    session.publish_info();
    let handle = SessionHandle {
        id: spec.id,
        commands,
        input_budget: Arc::new(Semaphore::new(INPUT_QUEUE_BYTES)),
        log,
        info: session.info.subscribe(),
        ended: session.ended.clone(),
    };
    tokio::spawn(session.run(rx));
    Ok(handle)
}

fn placeholder_info(id: Uuid) -> SessionInfo {
    SessionInfo {
        id,
        name: String::new(),
        assistant: String::new(),
        assistant_name: String::new(),
        viewers: 0,
        cols: 0,
        rows: 0,
        alive: true,
        exit_code: None,
        exit_signal: None,
        created_at: String::new(),
        work_dir: String::new(),
        yolo_mode: false,
    }
}

/// RFC 3339 UTC, second precision.
pub fn rfc3339(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&fmt).unwrap_or_default()
}

struct ViewerEntry {
    events: EventSender,
    live: Arc<dyn LiveOutput>,
    size: ViewerSize,
    /// Replies this viewer's terminal owes to queries it was sent (dropped when they come).
    expected: queries::Expected,
}

/// The running program, while there is one.
#[derive(Default)]
struct Proc {
    child: Option<tokio::process::Child>,
    pid: i32,
    reader: Option<pty_process::OwnedReadPty>,
    input: Option<mpsc::UnboundedSender<PtyInput>>,
    /// Bytes of query answers sent to the writer task and not yet written to the PTY.
    answers_queued: Arc<std::sync::atomic::AtomicUsize>,
    size: Option<watch::Sender<(u16, u16)>>,
    /// How it ended, once it has (its PTY may still be draining).
    status: Option<ExitInfo>,
    /// Stop waiting for output after the program's exit at this instant.
    drain_until: Option<Instant>,
}

struct Ending {
    reason: EndReason,
    waiters: Vec<oneshot::Sender<()>>,
}

struct Session {
    id: Uuid,
    cfg: Arc<Config>,
    assistant_key: String,
    assistant: Assistant,
    name: String,
    cwd: PathBuf,
    created_at: SystemTime,
    yolo_mode: bool,
    /// The screen model, on its own thread.
    screen: ScreenThread,
    /// The model's answers to terminal queries, for the program.
    answers: screen_thread::Answers,
    /// Finds queries in the output before it is published, so replies are expected in time.
    scan: queries::QueryScan,
    /// Whether the program has drawn anything yet.
    drawn: bool,
    /// The viewer that typed last, and when: its echo goes to it first.
    typist: Option<(ViewerId, Instant)>,
    log: Arc<SharedLog>,
    viewers: HashMap<ViewerId, ViewerEntry>,
    size: (u16, u16),
    proc: Proc,
    exit: Option<ExitInfo>,
    /// When the session last became exited-and-unwatched, for reaping.
    idle_since: Instant,
    ending: Option<Ending>,
    /// The pid of the latest program, kept after it exits: its leftovers are found through it.
    last_pid: i32,
    /// Set while the agent is being restarted (YOLO toggle).
    restarting: bool,
    /// SIGKILL whatever is left of the program at this instant (ending or restarting).
    kill_at: Option<Instant>,
    chat: std::collections::VecDeque<ChatLine>,
    info: watch::Sender<SessionInfo>,
    on_end: Option<OnEnd>,
    ended: CancellationToken,
    read_buf: BytesMut,
}

static NEXT_VIEWER: AtomicU64 = AtomicU64::new(1);

async fn read_pty(
    reader: &mut Option<pty_process::OwnedReadPty>,
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    match reader {
        Some(r) => {
            buf.reserve(READ_CHUNK);
            r.read_buf(buf).await
        }
        None => std::future::pending().await,
    }
}

async fn wait_child(
    child: &mut Option<tokio::process::Child>,
) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(c) => c.wait().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A writer's share of the session's input budget; `None` for the daemon's own answers.
type InputPermit = Option<OwnedSemaphorePermit>;

/// Bytes for the PTY writer task and what they hold of a budget until written.
struct PtyInput {
    data: Bytes,
    /// Returned to the input budget when dropped (after the last byte is written).
    _permit: InputPermit,
    /// For an answer: the answer-queue counter to give its bytes back to.
    answer: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl PtyInput {
    /// Marks the first `n` bytes written.
    fn consume(&mut self, n: usize) {
        let n = n.min(self.data.len());
        let _ = self.data.split_to(n);
        if let Some(queued) = &self.answer {
            queued.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

impl Drop for PtyInput {
    fn drop(&mut self) {
        // Unwritten answer bytes (the program ended) leave the count too.
        if let Some(queued) = &self.answer {
            queued.fetch_sub(self.data.len(), Ordering::Relaxed);
        }
    }
}

/// Writes input to the PTY and applies size changes, so a program that stops reading its
/// input never blocks the actor (and a resize never waits behind queued input). Its queue is
/// unbounded as a channel but bounded in bytes by the permits and counters its items hold.
async fn pty_writer(
    mut pty: pty_process::OwnedWritePty,
    mut input: mpsc::UnboundedReceiver<PtyInput>,
    mut size: watch::Receiver<(u16, u16)>,
) {
    let mut pending: Option<PtyInput> = None;
    loop {
        let writing = pending.as_ref().map(|p| p.data.clone()).unwrap_or_default();
        tokio::select! {
            biased;
            changed = size.changed() => {
                if changed.is_err() {
                    return;
                }
                let (rows, cols) = *size.borrow_and_update();
                if let Err(e) = pty.resize(pty_process::Size::new(rows, cols)) {
                    debug!("pty resize failed: {e}");
                }
            }
            written = pty.write(&writing), if !writing.is_empty() => match written {
                Ok(n) => {
                    if let Some(item) = &mut pending {
                        item.consume(n);
                        if item.data.is_empty() {
                            // Gives the permit back: the next writer may go on.
                            pending = None;
                        }
                    }
                }
                Err(e) => { debug!("pty write failed: {e}"); return; }
            },
            next = input.recv(), if pending.is_none() => match next {
                Some(item) if item.data.is_empty() => {}
                Some(item) => pending = Some(item),
                None => return,
            },
        }
    }
}

impl Session {
    fn attach(&mut self, spawned: process::Spawned) {
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        let (size_tx, size_rx) = watch::channel(self.size);
        self.last_pid = spawned.pid;
        tokio::spawn(pty_writer(spawned.writer, input_rx, size_rx));
        self.proc = Proc {
            child: Some(spawned.child),
            pid: spawned.pid,
            reader: Some(spawned.reader),
            input: Some(input_tx),
            answers_queued: Default::default(),
            size: Some(size_tx),
            status: None,
            drain_until: None,
        };
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            let reap_at = self.reap_at();
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    // Every handle is gone: nobody can reach this session any more.
                    None => self.begin_end(EndReason::Deleted, None),
                },
                read = read_pty(&mut self.proc.reader, &mut self.read_buf), if self.screen.has_room() => {
                    self.on_read(read)
                }
                // The parser is a backlog behind: the PTY waits (and with it the program).
                _ = self.screen.room(), if !self.screen.has_room() => {}
                Some(found) = self.answers.recv() => self.answer_queries(found),
                status = wait_child(&mut self.proc.child) => self.on_child_exit(status),
                _ = sleep_until(self.proc.drain_until) => self.finish_exit(),
                _ = sleep_until(self.kill_at) => self.kill_now(),
                _ = sleep_until(reap_at) => {
                    info!(session = %self.id, "reaping exited session with no viewer");
                    self.begin_end(EndReason::Reaped, None);
                }
            }
            if self.on_end.is_none() {
                break;
            }
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Join {
                read_only,
                events,
                live,
                reply,
            } => {
                let max = self.cfg.limits.max_viewers_per_session;
                if self.viewers.len() >= max {
                    let _ = reply.send(Err(format!("this session already has {max} viewers")));
                    return;
                }
                let viewer = NEXT_VIEWER.fetch_add(1, Ordering::Relaxed);
                let chat_from = self.chat.len().saturating_sub(CHAT_REPLAY);
                let mut join = JoinReply {
                    viewer,
                    snapshot: None,
                    offset: self.log.head(),
                    exit: self.exit.clone(),
                    chat: self.chat.iter().skip(chat_from).cloned().collect(),
                };
                if self.drawn {
                    // Rendered on the screen thread once it has parsed up to here.
                    self.snapshot_then(move |snapshot, offset| {
                        join.snapshot = Some(snapshot);
                        join.offset = offset;
                        let _ = reply.send(Ok(join));
                    });
                } else {
                    let _ = reply.send(Ok(join));
                }
                // Registered at once: a viewer that never reads its reply still leaves.
                self.viewers.insert(
                    viewer,
                    ViewerEntry {
                        events,
                        live,
                        size: ViewerSize {
                            read_only,
                            size: None,
                        },
                        expected: queries::Expected::default(),
                    },
                );
                self.broadcast_status();
            }
            Command::Leave { viewer } => {
                if self.viewers.remove(&viewer).is_some() {
                    if self.viewers.is_empty() {
                        self.idle_since = Instant::now();
                    }
                    if !self.apply_size() {
                        self.broadcast_status();
                    }
                }
            }
            Command::Input {
                viewer,
                data,
                permit,
            } => self.input(viewer, data, permit),
            Command::Resize { viewer, rows, cols } => {
                let Some(entry) = self.viewers.get_mut(&viewer) else {
                    return;
                };
                if entry.size.read_only {
                    self.refuse(viewer, Refusal::ReadOnly(Action::Resize));
                    return;
                }
                entry.size.size = Some(size::clamp(rows, cols));
                self.apply_size();
            }
            Command::Resync { reply } => self.snapshot_then(move |snapshot, offset| {
                let _ = reply.send(Resync { snapshot, offset });
            }),
            Command::Chat {
                viewer,
                user_name,
                text,
            } => match validate_chat(&user_name, &text, &self.cfg.limits) {
                Ok((user_name, text)) => {
                    let line = ChatLine {
                        user_name,
                        text,
                        timestamp: rfc3339(SystemTime::now()),
                    };
                    if self.chat.len() == self.cfg.session.chat_history {
                        self.chat.pop_front();
                    }
                    if self.cfg.session.chat_history > 0 {
                        self.chat.push_back(line.clone());
                    }
                    self.broadcast(ViewerEvent::Chat(line));
                }
                Err(message) => self.refuse(viewer, Refusal::InvalidChat(message)),
            },
            Command::Rename { name, reply } => {
                let result = validate_name(&name, self.cfg.limits.max_name_chars).map(|name| {
                    if name != self.name {
                        info!(session = %self.id, %name, "session renamed");
                        self.name = name;
                        self.broadcast_status();
                    }
                    self.info.borrow().clone()
                });
                let _ = reply.send(result);
            }
            Command::ToggleYolo { viewer } => self.toggle_yolo(viewer),
            Command::Signal { viewer, signal } => self.send_signal(viewer, &signal),
            Command::End { reason, done } => self.begin_end(reason, Some(done)),
        }
    }

    /// Renders a snapshot of the screen as it stands after the output published so far, off
    /// the actor (on the screen thread), and hands it to `done` with the exact log offset it
    /// belongs to: the model has consumed every byte before it (bytes it holds back, an
    /// incomplete escape sequence, are streamed instead).
    fn snapshot_then(&self, done: impl FnOnce(EncodedSnapshot, u64) + Send + 'static) {
        self.screen.snapshot(self.log.head(), Box::new(done));
    }

    fn input(&mut self, viewer: ViewerId, data: Bytes, permit: InputPermit) {
        let Some(entry) = self.viewers.get_mut(&viewer) else {
            return;
        };
        if entry.size.read_only {
            self.refuse(viewer, Refusal::ReadOnly(Action::Input));
            return;
        }
        self.typist = Some((viewer, Instant::now()));
        let data = if entry.expected.is_empty() {
            data
        } else {
            let kept = entry.expected.filter(&data, Instant::now());
            if kept.is_empty() {
                return;
            }
            Bytes::from(kept)
        };
        let Some(input) = &self.proc.input else {
            self.refuse(viewer, Refusal::NotRunning(Action::Input));
            return;
        };
        let len = data.len();
        // The writer task ends only with the program, and then `proc.input` is gone too.
        if input
            .send(PtyInput {
                data,
                _permit: permit,
                answer: None,
            })
            .is_ok()
        {
            crate::metrics::METRICS.bytes_in.add(len as u64);
        }
    }

    /// Recomputes the session size; returns whether it changed (status already sent).
    fn apply_size(&mut self) -> bool {
        let new = size::session_size(self.viewers.values().map(|v| &v.size), self.size);
        if new == self.size {
            return false;
        }
        self.size = new;
        self.screen.resize(new.0, new.1);
        if let Some(size) = &self.proc.size {
            size.send_replace(new);
        }
        self.broadcast_status();
        true
    }

    fn status(&self) -> StatusInfo {
        StatusInfo {
            viewers: self.viewers.len(),
            rows: self.size.0,
            cols: self.size.1,
            assistant: self.assistant.name.clone(),
            session_name: self.name.clone(),
            session_uuid: self.id,
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
            yolo_supported: self.assistant.yolo_supported(),
            restarting: self.restarting,
        }
    }

    fn broadcast_status(&mut self) {
        let info = self.status();
        let offset = self.log.head();
        self.broadcast(ViewerEvent::Status { info, offset });
        self.publish_info();
    }

    fn broadcast(&self, event: ViewerEvent) {
        for (id, viewer) in &self.viewers {
            if !viewer.events.push(event.clone()) {
                // Its writer has been stuck for long: rather than buffer for it without
                // bound, it is closed (its task sees the overrun) and may reconnect.
                warn!(session = %self.id, viewer = id, "viewer event queue full: closing it");
            }
        }
    }

    /// Tells one viewer why what it asked was refused.
    fn refuse(&self, viewer: ViewerId, refusal: Refusal) {
        if let Some(v) = self.viewers.get(&viewer) {
            v.events.push(ViewerEvent::Refused(refusal));
        }
    }

    fn publish_info(&self) {
        let info = SessionInfo {
            id: self.id,
            name: self.name.clone(),
            assistant: self.assistant_key.clone(),
            assistant_name: self.assistant.name.clone(),
            viewers: self.viewers.len(),
            cols: self.size.1,
            rows: self.size.0,
            alive: self.exit.is_none(),
            exit_code: self.exit.as_ref().map(|e| e.code),
            exit_signal: self.exit.as_ref().and_then(|e| e.signal.clone()),
            created_at: rfc3339(self.created_at),
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
        };
        self.info.send_replace(info);
    }

    /// Publishes output: to the screen thread, to the log, and to the viewers (straight onto
    /// their sockets when they can take it now, the typist first; the others are woken to
    /// copy it from the log on their own tasks).
    fn output(&mut self, chunk: Bytes) {
        // Before anyone can see a query, its replies are expected from everyone who will.
        let queries = self.scan.scan(&chunk);
        if !queries.is_empty() {
            let now = Instant::now();
            for query in queries {
                for viewer in self.viewers.values_mut() {
                    viewer.expected.expect(query, now);
                }
            }
        }
        self.drawn = true;
        let start = self.log.head();
        self.log.append(chunk.clone());
        self.screen.output(chunk.clone());
        let typist = self
            .typist
            .filter(|(_, at)| at.elapsed() < TYPIST_WINDOW)
            .and_then(|(id, _)| self.viewers.get(&id).map(|v| (id, v)));
        if let Some((_, v)) = typist {
            if !v.live.try_push(start, &chunk) {
                v.live.wake();
            }
        }
        let typist = typist.map(|(id, _)| id);
        for (id, v) in &self.viewers {
            if Some(*id) != typist && !v.live.try_push(start, &chunk) {
                v.live.wake();
            }
        }
    }

    /// The screen model's answers to queries in the output: each goes to the program once.
    fn answer_queries(&mut self, found: Vec<(queries::Query, Vec<u8>)>) {
        for (query, answer) in found {
            debug!(session = %self.id, ?query, "answering terminal query");
            let Some(input) = &self.proc.input else {
                continue;
            };
            let queued = &self.proc.answers_queued;
            if queued.load(Ordering::Relaxed) + answer.len() > ANSWER_QUEUE_BYTES {
                debug!(session = %self.id, "program is not reading its input: answer dropped");
                continue;
            }
            queued.fetch_add(answer.len(), Ordering::Relaxed);
            let _ = input.send(PtyInput {
                data: Bytes::from(answer),
                _permit: None,
                answer: Some(queued.clone()),
            });
        }
    }

    fn on_read(&mut self, read: std::io::Result<usize>) {
        match read {
            Ok(n) if n > 0 => {
                // Copied out at its own size so the log's byte bound is also its memory bound
                // (a frozen slice would pin the whole read buffer); the buffer is reused.
                let chunk = Bytes::copy_from_slice(&self.read_buf);
                self.read_buf.clear();
                self.output(chunk);
            }
            // EOF, or EIO once every process has closed the terminal side.
            _ => {
                self.proc.reader = None;
                if self.proc.status.is_some() {
                    self.finish_exit();
                }
            }
        }
    }

    fn on_child_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        self.proc.child = None;
        let info = match status {
            Ok(status) => ExitInfo::from_status(status),
            Err(e) => {
                warn!(session = %self.id, "waiting for the program failed: {e}");
                ExitInfo {
                    code: -1,
                    signal: None,
                }
            }
        };
        self.proc.status = Some(info);
        self.kill_at = None;
        // Background jobs may keep the terminal open; hang them up like a terminal would.
        process::signal_session(self.proc.pid, None, Signal::SIGHUP);
        if self.proc.reader.is_none() {
            self.finish_exit();
        } else {
            self.proc.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
        }
    }

    /// The program has exited and its output is collected: tell everyone.
    fn finish_exit(&mut self) {
        let Some(info) = self.proc.status.take() else {
            return;
        };
        let pid = self.proc.pid;
        // Dropping the reader and the writer task's input closes the PTY master.
        self.proc = Proc::default();
        if self.restarting {
            self.restarting = false;
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
            match self.spawn_replacement() {
                Ok(()) => return,
                Err(e) => {
                    warn!(session = %self.id, "restart failed: {e}");
                    self.output(Bytes::from(format!("\r\n[Restart failed: {e}]\r\n")));
                }
            }
        }
        self.output(Bytes::from(format!(
            "\r\n[Process exited (code {})]\r\n",
            info.code
        )));
        info!(session = %self.id, code = info.code, signal = ?info.signal, "session program exited");
        self.exit = Some(info.clone());
        self.idle_since = Instant::now();
        self.broadcast(ViewerEvent::Exit {
            info,
            offset: self.log.head(),
        });
        self.publish_info();
        if self.ending.is_some() {
            process::signal_session(pid, Some(self.id), Signal::SIGKILL);
            self.complete_end();
        } else {
            // By kernel session only: the uuid marker could match a new session of the same
            // uuid once this one is gone. Marked escapees are killed when the session ends.
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
        }
    }

    fn toggle_yolo(&mut self, viewer: ViewerId) {
        if self.viewers.get(&viewer).is_some_and(|v| v.size.read_only) {
            return self.refuse(viewer, Refusal::ReadOnly(Action::ToggleYolo));
        }
        if !self.assistant.yolo_supported() {
            let message = format!("{} has no YOLO mode", self.assistant.name);
            return self.refuse(viewer, Refusal::YoloUnsupported(message));
        }
        if self.restarting {
            return self.refuse(viewer, Refusal::RestartInProgress);
        }
        if self.proc.child.is_none() || self.ending.is_some() {
            return self.refuse(viewer, Refusal::NotRunning(Action::ToggleYolo));
        }
        self.yolo_mode = !self.yolo_mode;
        self.restarting = true;
        info!(session = %self.id, yolo = self.yolo_mode, "restarting agent for a YOLO toggle");
        self.broadcast_status();
        let notice = if self.yolo_mode { "ON" } else { "OFF" };
        self.output(Bytes::from(format!(
            "\r\n[Switching YOLO mode {notice}, restarting agent...]\r\n"
        )));
        process::signal_session(self.proc.pid, None, Signal::SIGTERM);
        self.kill_at = Some(Instant::now() + self.cfg.session.kill_grace);
    }

    /// Starts the resume or YOLO command on a fresh PTY of the current size.
    fn spawn_replacement(&mut self) -> Result<(), process::SpawnError> {
        let argv = self
            .assistant
            .restart_argv(self.yolo_mode)
            .unwrap_or_else(|| self.assistant.resume_argv());
        let env = self.assistant.env_for(self.yolo_mode);
        let spawned = process::spawn(&process::SpawnSpec {
            argv: &argv,
            env: &env,
            cwd: &self.cwd,
            rows: self.size.0,
            cols: self.size.1,
            session: self.id,
        })?;
        info!(session = %self.id, pid = spawned.pid, yolo = self.yolo_mode, "agent restarted");
        self.attach(spawned);
        // `restarting` is already false: tell the viewers the new agent is up.
        self.broadcast_status();
        Ok(())
    }

    fn send_signal(&mut self, viewer: ViewerId, name: &str) {
        if self.viewers.get(&viewer).is_some_and(|v| v.size.read_only) {
            return self.refuse(viewer, Refusal::ReadOnly(Action::Signal));
        }
        let Some(signal) = ALLOWED_SIGNALS.iter().copied().find(|s| s.as_str() == name) else {
            let allowed: Vec<&str> = ALLOWED_SIGNALS.iter().map(|s| s.as_str()).collect();
            let message = format!(
                "signal {name:?} is not allowed (use one of {})",
                allowed.join(", ")
            );
            return self.refuse(viewer, Refusal::BadSignal(message));
        };
        if self.proc.child.is_none() {
            return self.refuse(viewer, Refusal::NotRunning(Action::Signal));
        }
        match process::foreground_group(self.proc.pid) {
            Some(pgrp) => {
                debug!(session = %self.id, ?signal, pgrp, "signal from viewer");
                if let Err(e) = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgrp), signal) {
                    self.refuse(
                        viewer,
                        Refusal::SignalFailed(format!("could not send {name}: {e}")),
                    );
                }
            }
            None => self.refuse(
                viewer,
                Refusal::SignalFailed("the terminal has no foreground process group".to_owned()),
            ),
        }
    }

    fn reap_at(&self) -> Option<Instant> {
        (self.exit.is_some() && self.viewers.is_empty() && self.ending.is_none())
            .then(|| self.idle_since + self.cfg.session.reap_after_exit)
    }

    fn begin_end(&mut self, reason: EndReason, done: Option<oneshot::Sender<()>>) {
        if let Some(ending) = &mut self.ending {
            ending.waiters.extend(done);
            return;
        }
        info!(session = %self.id, ?reason, "ending session");
        let alive = self.proc.child.is_some() || self.proc.status.is_some();
        // An ongoing restart is abandoned: the session ends instead.
        self.restarting = false;
        if self.proc.child.is_some() {
            process::signal_session(self.proc.pid, Some(self.id), Signal::SIGHUP);
            process::signal_session(self.proc.pid, Some(self.id), Signal::SIGTERM);
            self.kill_at = Some(Instant::now() + self.cfg.session.kill_grace);
        } else if self.proc.status.is_some() {
            // Exited and still draining: stop waiting for the output.
            self.proc.drain_until = Some(Instant::now());
        }
        self.ending = Some(Ending {
            reason,
            waiters: done.into_iter().collect(),
        });
        if !alive {
            self.complete_end();
        }
    }

    fn kill_now(&mut self) {
        self.kill_at = None;
        warn!(session = %self.id, "program still running after the grace period: SIGKILL");
        // While restarting, the marker would also match the replacement: use the kernel session.
        let marker = (!self.restarting).then_some(self.id);
        process::signal_session(self.proc.pid, marker, Signal::SIGKILL);
    }

    fn complete_end(&mut self) {
        let Some(ending) = self.ending.take() else {
            return;
        };
        if self.last_pid > 0 {
            // Whatever the program left behind, escaped into its own session or not, goes with
            // the session (the registry still holds this uuid, so no other session shares it).
            process::signal_session(self.last_pid, Some(self.id), Signal::SIGKILL);
        }
        for viewer in self.viewers.values() {
            viewer.events.push(ViewerEvent::Close(ending.reason));
        }
        self.viewers.clear();
        if let Some(on_end) = self.on_end.take() {
            on_end(self.id);
        }
        self.ended.cancel();
        info!(session = %self.id, "session ended");
        for waiter in ending.waiters {
            let _ = waiter.send(());
        }
    }
}

/// Processes left behind by an exited program got SIGHUP; give them SIGTERM, then SIGKILL.
/// `marker` is `None` after a restart, when the replacement carries the same marker.
async fn end_leftovers(pid: i32, marker: Option<Uuid>, grace: Duration) {
    tokio::time::sleep(LEFTOVER_TERM_AFTER).await;
    if process::signal_session(pid, marker, Signal::SIGTERM) == 0 {
        return;
    }
    tokio::time::sleep(grace).await;
    let killed = process::signal_session(pid, marker, Signal::SIGKILL);
    if killed > 0 {
        warn!(session = ?marker, killed, "killed processes left behind by the session's program");
    }
}
