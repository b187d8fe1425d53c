//! Core logic for sessions, independent of any wire format: one actor task per session owns
//! the program and its PTY, the screen model, the output log, the viewers and the metadata.
//!
//! Other tasks talk to a session only through its [`SessionHandle`]: commands go in on a
//! bounded channel, replies come back on oneshot channels, events go out on each viewer's
//! own channel, and output is published in the shared [`output_log`].

mod actor;
mod chat;
mod events;
mod file_drop;
pub mod freeze;
mod handle;
mod input;
mod lifecycle;
mod name;
pub mod output_log;
mod phase;
pub mod presence;
pub mod process;
pub mod pty;
pub mod queries;
pub mod refusal;
pub mod screen;
pub mod screen_thread;
mod signal;
pub mod size;
pub mod snapshot;
pub mod tap;
mod turns;
pub mod upload;
pub mod viewer_queue;
mod viewers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

use crate::config::Config;
use output_log::SharedLog;
pub use process::ExitInfo;
pub use refusal::{Action, Refusal};
use screen::ScreenModel;
pub use screen_thread::ScreenFailed;
use screen_thread::ScreenThread;
pub use snapshot::{EncodedSnapshot, Packing, SnapshotForm};
use viewer_queue::EventSender;

use actor::{Proc, Session};
pub use chat::{validate_chat, ChatLine, CHAT_REPLAY};
pub use events::{
    CreateError, CreateSpec, EndReason, JoinError, JoinReply, LiveOutput, RenameError, Resync,
    Role, SessionGone, SessionInfo, StatusInfo, UploadFailed, Uploaded, ViewerEvent, ViewerId,
    CUSTOM_ASSISTANT,
};
pub use freeze::{adopt, AdoptError, Frozen};
use handle::Command;
pub use handle::{Membership, OnEnd, SessionHandle};
use input::{
    pty_writer, HeldInput, InputPermit, PtyInput, INPUT_MESSAGE_OVERHEAD, INPUT_QUEUE_BYTES,
};
pub use name::validate_name;
pub use signal::ALLOWED_SIGNALS;

/// Commands queued per session before senders wait.
const COMMAND_QUEUE: usize = 256;
/// Output bytes waiting for the screen thread before the actor stops reading the PTY (16 MiB:
/// several seconds of a flood; chunks still in the output log cost nothing extra).
const PARSE_BACKLOG: usize = 16 << 20;
/// Viewers handed a chunk in one turn of the actor's loop before it yields to the worker's
/// other tasks: a round to 100 viewers (0.1–0.3 ms of non-blocking sends) goes in one turn,
/// since each yield costs more than the sends it separates (8 a turn put the gap-0 echo's
/// all-viewers p99 ~0.8 ms higher). A key does not wait for the turn: the hand-out stops after
/// any send that finds a command waiting.
const FANOUT_SLICE: usize = 128;
/// Most output joined into one pending fan-out (see `actor::Fanout`): keys and short
/// bursts; beyond it, viewers still owed output copy it from the log on their own tasks.
const FANOUT_JOIN_BYTES: usize = 16 * 1024;
/// Least time from the end of one fan-out round to the viewers other than the typist to the
/// start of the next (see `actor::Fanout`).
pub const FANOUT_PACE: Duration = Duration::from_millis(1);
/// Viewers a session has before its fan-out rounds are paced: a round to fewer costs less
/// than the timer wake-up that would delay it (and many sessions' timers fire together).
pub const FANOUT_PACED_FROM: usize = 16;
/// How long after a viewer's input its output counts as that viewer's echo, delivered to it
/// before anyone else.
const TYPIST_WINDOW: Duration = Duration::from_millis(500);

/// Creates session number `num` (given by the registry; shown in its metadata): validates the
/// request, starts the program, spawns the actor.
pub fn start(
    cfg: Arc<Config>,
    spec: CreateSpec,
    num: Option<u8>,
    on_end: OnEnd,
) -> Result<SessionHandle, CreateError> {
    let (assistant, argv) = match &spec.command {
        Some(argv) => (
            own_command_assistant(&cfg, &spec.assistant, argv)?,
            argv.clone(),
        ),
        None => {
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
            let argv = assistant.start_argv();
            (assistant, argv)
        }
    };
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

    let yolo_mode = assistant.starts_in_yolo();
    let (rows, cols) = spec.size.unwrap_or((cfg.session.rows, cfg.session.cols));
    let (rows, cols) = size::clamp(rows, cols);
    let (screen, answers) = if spec.screen {
        let model = ScreenModel::new(rows, cols, cfg.session.scrollback_lines);
        let thread_name = format!("screen-{}", &spec.id.simple().to_string()[..8]);
        let (screen, answers) = ScreenThread::start(
            model,
            cfg.session.scrollback_lines,
            PARSE_BACKLOG,
            thread_name,
        );
        (Some(screen), Some(answers))
    } else {
        (None, None)
    };
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
    let who = Identity {
        id: spec.id,
        num,
        name,
        own_command: spec.command.is_some(),
        assistant_key: spec.assistant,
        assistant,
        command: argv,
        cwd,
        created_at: SystemTime::now(),
        yolo_mode,
        size: (rows, cols),
        chat: std::collections::VecDeque::new(),
        drawn: false,
        last_pid: 0,
    };
    let (mut session, commands, rx) = assemble(cfg, who, screen.zip(answers), log, on_end);
    session.attach(spawned);
    Ok(launch(session, commands, rx))
}

/// What a session is, however it came to be: created now, or adopted in a live upgrade.
struct Identity {
    id: Uuid,
    num: Option<u8>,
    name: String,
    assistant_key: String,
    assistant: crate::config::Assistant,
    own_command: bool,
    command: Vec<String>,
    cwd: std::path::PathBuf,
    created_at: SystemTime,
    yolo_mode: bool,
    size: (u16, u16),
    chat: std::collections::VecDeque<ChatLine>,
    drawn: bool,
    last_pid: i32,
}

/// A session's actor state around its screen and log, before its program is attached.
fn assemble(
    cfg: Arc<Config>,
    who: Identity,
    screen: Option<(ScreenThread, screen_thread::Answers)>,
    log: Arc<SharedLog>,
    on_end: OnEnd,
) -> (Session, mpsc::Sender<Command>, mpsc::Receiver<Command>) {
    let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
    let (screen, answers) = screen.unzip();
    let session = Session {
        me: commands.downgrade(),
        input_budget: Arc::new(Semaphore::new(INPUT_QUEUE_BYTES)),
        id: who.id,
        screen,
        answers,
        scan: queries::QueryScan::default(),
        drawn: who.drawn,
        typist: None,
        assistant_key: who.assistant_key,
        assistant: who.assistant,
        own_command: who.own_command,
        command: who.command,
        num: who.num,
        name: who.name,
        cwd: who.cwd,
        created_at: who.created_at,
        yolo_mode: who.yolo_mode,
        log,
        viewers: HashMap::new(),
        size: who.size,
        proc: Proc::default(),
        phase: phase::Phase::Running,
        last_pid: who.last_pid,
        chat: who.chat,
        info: watch::Sender::new(placeholder_info(who.id)),
        on_end: Some(on_end),
        ended: CancellationToken::new(),
        fanout: Default::default(),
        tap: None,
        recording_failed: None,
        freeze: None,
        presence: Default::default(),
        cfg,
    };
    (session, commands, rx)
}

/// Publishes the session's metadata and starts its actor; the handle is the way in.
fn launch(
    session: Session,
    commands: mpsc::Sender<Command>,
    rx: mpsc::Receiver<Command>,
) -> SessionHandle {
    session.publish_info();
    let handle = SessionHandle {
        id: session.id,
        commands,
        input_budget: session.input_budget.clone(),
        log: session.log.clone(),
        info: session.info.subscribe(),
        ended: session.ended.clone(),
        screen: session.screen.is_some(),
    };
    tokio::spawn(session.run(rx));
    handle
}

/// The assistant a session with its creator's own command `argv` runs as: the configured one
/// of key `key` lending its display name and environment, or, for [`CUSTOM_ASSISTANT`] (when
/// the config has no such key), none, shown as the program's file name. Its command is `argv`
/// and it has no YOLO command, so a YOLO toggle is refused and nothing restarts it.
fn own_command_assistant(
    cfg: &Config,
    key: &str,
    argv: &[String],
) -> Result<crate::config::Assistant, CreateError> {
    if let Some(problem) = crate::config::argv_problem(argv) {
        return Err(CreateError::BadCommand(problem));
    }
    // `argv_problem` found the program there, and not empty.
    let program = argv.first().map(String::as_str).unwrap_or_default();
    crate::config::program_available(program).map_err(CreateError::BadCommand)?;
    let (name, env) = match cfg.assistants.get(key) {
        Some(a) => (a.name.clone(), a.env.clone()),
        None if key == CUSTOM_ASSISTANT => {
            let name = std::path::Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| program.to_owned());
            (name, Default::default())
        }
        None => return Err(CreateError::UnknownAssistant(key.to_owned())),
    };
    Ok(crate::config::Assistant {
        name,
        command: argv.to_vec(),
        resume: None,
        yolo: None,
        env,
        yolo_env: Default::default(),
    })
}

fn placeholder_info(id: Uuid) -> SessionInfo {
    SessionInfo {
        id,
        num: None,
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
        command: Vec::new(),
        people: Vec::new(),
        output_bytes: 0,
    }
}

/// RFC 3339 UTC, second precision.
pub fn rfc3339(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&fmt).unwrap_or_default()
}
