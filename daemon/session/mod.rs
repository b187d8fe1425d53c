//! Core logic for sessions, independent of any wire format: one actor task per session owns
//! the program and its PTY, the screen model, the output log, the viewers and the metadata.
//!
//! Other tasks talk to a session only through its [`SessionHandle`]: commands go in on a
//! bounded channel, replies come back on oneshot channels, events go out on each viewer's
//! own channel ([`viewer_queue`]), and output is published in the shared [`output_log`].
//!
//! The actor (`actor.rs`, with its work by concern in `actor/`) holds the session as parts
//! that own their state: `identity.rs` (what the session is and how it is set), `viewers.rs`
//! (who is connected, sizes, the typist, presence, and the fan-out of output in
//! `viewers/fanout.rs`), `chat.rs`, `program.rs` (the program, its PTY and input writer
//! `input.rs`, and its phase `phase.rs`), `screen_bridge.rs` (the screen model's thread
//! `screen_thread.rs`, its query answers, whether anything was drawn) and `recorder_feed.rs`
//! (what the recorder is fed, and its failure, with `recorder_pace.rs`: how far behind it
//! the PTY waits) and `attention.rs` (its state: working,
//! waiting, idle, exited, and what decides it). What the session tells the outside is in
//! `events.rs`; `handoff.rs` is what it hands over in a live upgrade; `yield_to_typists.rs`
//! is the daemon's latest keys, for which sessions printing a lot give way.

mod actor;
mod attention;
mod chat;
mod events;
mod handle;
mod handoff;
mod identity;
mod input;
mod name;
pub mod output_log;
mod phase;
pub mod presence;
pub mod process;
mod program;
pub mod pty;
pub mod recorder_feed;
pub mod recorder_pace;
pub mod refusal;
pub mod replies;
mod screen_bridge;
pub mod screen_thread;
mod signal;
pub mod size;
mod timestamp;
pub mod upload;
pub mod viewer_queue;
mod viewers;
mod yield_to_typists;

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use tracing::info;

use crate::attention::gate::StateGate;
use crate::attention::wiring::Wiring;
use crate::attention::Transitions;
use crate::config::{Config, StateHooks};
use crate::metrics::Metrics;
use crate::upgrade::image::{Blobs, SessionImage};
use actor::Parts;
use attention::Attention;
use chat::Chat;
use identity::Identity;
use output_log::SharedLog;
use program::Program;
use pty::PtyMaster;
use screen_bridge::ScreenBridge;
use screen_thread::ScreenReader;

pub use chat::{validate_chat, ChatLine, CHAT_REPLAY};
pub use events::{
    CreateError, CreateSpec, EndReason, JoinError, JoinReply, LiveOutput, Person, PresenceInfo,
    RenameError, Resync, Role, SessionGone, SessionInfo, StatusInfo, UploadFailed, Uploaded,
    ViewerEvent, ViewerId, Who, CUSTOM_ASSISTANT,
};
pub use handle::{Membership, OnEnd, SessionHandle, WeakSessionHandle};
pub use handoff::{AdoptError, SessionHandoff};
pub use name::validate_name;
pub use process::ExitInfo;
pub use refusal::{Action, Refusal};
pub use screen_thread::ScreenFailed;
pub use signal::{Rung, StopLadder, ALLOWED_SIGNALS};
pub use timestamp::{rfc3339, rfc3339_millis};
pub use viewers::{FANOUT_PACE, FANOUT_PACED_FROM, TYPING_AUDIT_QUIET};
pub use yield_to_typists::RecentKeys;

/// What the daemon gives each of its sessions for their state (README, "Attention").
#[derive(Clone)]
pub struct StateLinks {
    /// Where its changes of state go.
    pub transitions: Arc<Transitions>,
    /// How its programs reach the daemon (`PTYHUB_URL`).
    pub url: String,
    /// The `ptyhub` binary its agents' hooks run.
    pub ptyhub: PathBuf,
    /// Its capability token (`PTYHUB_STATE_TOKEN`).
    pub token: String,
    /// Where per-session files go (an agent's settings file), private to the daemon's user.
    pub dir: PathBuf,
    /// The daemon's audit trail: renames, uploads, typing and its program's own exit.
    pub audit: Arc<crate::audit::Audit>,
}

impl StateLinks {
    fn wiring(&self, hooks: StateHooks, session: uuid::Uuid) -> Wiring {
        Wiring {
            hooks,
            ptyhub: self.ptyhub.clone(),
            url: self.url.clone(),
            token: self.token.clone(),
            session,
            dir: self.dir.clone(),
        }
    }
}

/// Creates session number `num` (given by the registry; shown in its metadata): validates the
/// request, starts the program, spawns the actor. `recent_keys` and `metrics` are the daemon's;
/// `links` how it tells its state.
pub fn start(
    cfg: Arc<Config>,
    spec: CreateSpec,
    num: Option<u8>,
    recent_keys: Arc<RecentKeys>,
    metrics: Arc<Metrics>,
    links: StateLinks,
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
    let cwd = match &spec.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| CreateError::BadWorkDir(e.to_string()))?,
    };
    let cwd = cwd
        .canonicalize()
        .ok()
        .filter(|d| d.is_dir())
        .ok_or_else(|| CreateError::BadWorkDir(cwd.display().to_string()))?;

    let (rows, cols) = spec.size.unwrap_or((cfg.session.rows, cfg.session.cols));
    let (rows, cols) = size::clamp(rows, cols);
    let scrollback = cfg.session.scrollback_lines;
    let reader = ScreenReader {
        patterns: assistant.state.clone(),
        rows: cfg.attention.state_rows,
    };
    let screen = ScreenBridge::new(
        spec.screen,
        (rows, cols),
        scrollback,
        spec.id,
        reader,
        metrics.clone(),
    );
    let wiring = links.wiring(assistant.state_hooks, spec.id);
    let env = assistant.env_for(assistant.starts_in_yolo());
    let (wired, env) = wiring.launch(&argv, &env);
    let spawned = process::spawn(&process::SpawnSpec {
        argv: &wired,
        env: &env,
        cwd: &cwd,
        rows,
        cols,
        session: spec.id,
    })?;
    info!(session = %spec.id, assistant = %spec.assistant, pid = spawned.pid, cwd = %cwd.display(), "session started");

    let log = Arc::new(SharedLog::new(cfg.session.output_log_bytes));
    let mut program = Program::new(spec.id, 0, metrics.clone());
    program.attach(spawned);
    let attention = Attention::new(&cfg.attention, &assistant.name);
    let parts = Parts {
        identity: Identity::created(&spec, num, name, assistant, argv, cwd, wiring),
        size: (rows, cols),
        chat: Chat::new(cfg.session.chat_history),
        screen,
        program,
        log,
        recent_keys,
        metrics,
        attention,
        gate: Arc::new(StateGate::new(links.token, cfg.attention.hook_rate)),
        transitions: links.transitions,
        audit: links.audit,
    };
    Ok(actor::launch(cfg, parts, on_end))
}

/// Builds a running session from its image in a live upgrade: the program (still this
/// process's child) on its PTY master `pty`, the screen rebuilt from the snapshot and the log
/// bytes after it, the log with its offsets, the chat, and the input that was waiting,
/// written first; its state and capability token (in `links`) as they were. `recent_keys` and
/// `metrics` are the daemon's.
#[allow(clippy::too_many_arguments)]
pub fn adopt(
    cfg: Arc<Config>,
    image: &SessionImage,
    blobs: &Blobs,
    pty: Option<OwnedFd>,
    recent_keys: Arc<RecentKeys>,
    metrics: Arc<Metrics>,
    links: StateLinks,
    on_end: OnEnd,
) -> Result<SessionHandle, AdoptError> {
    let (rows, cols) = size::clamp(image.rows, image.cols);
    let log_bytes = blobs.get(image.log)?;
    let screen = match image.screen {
        true => {
            let snapshot = image.snapshot.map(|s| blobs.get(s)).transpose()?;
            // What the model held back at the handoff (an unfinished sequence) comes after it.
            let skip = (image.snapshot_offset - image.log_start) as usize;
            Some((snapshot, log_bytes.get(skip..).unwrap_or_default()))
        }
        false => None,
    };
    let scrollback = cfg.session.scrollback_lines;
    // The patterns of the configuration it is adopted under (a new binary may read screens
    // better); none for a creator's own command that borrowed no assistant.
    let reader = ScreenReader {
        patterns: cfg
            .assistants
            .get(&image.assistant_key)
            .map(|a| a.state.clone())
            .unwrap_or_default(),
        rows: cfg.attention.state_rows,
    };
    let screen = ScreenBridge::rebuilt(
        screen,
        (rows, cols),
        scrollback,
        (image.id, image.drawn),
        reader,
        metrics.clone(),
    );
    let log = Arc::new(SharedLog::resumed(
        cfg.session.output_log_bytes,
        image.log_start,
        Bytes::copy_from_slice(log_bytes),
    ));
    let mut program = Program::new(image.id, image.last_pid, metrics.clone());
    match (&image.process, &image.exit) {
        (Some(p), _) => {
            let exit = process::ExitWatch::new(p.pid)?;
            match pty {
                Some(fd) => {
                    let pty = PtyMaster::adopt(fd)?;
                    program.attach(process::Spawned {
                        pid: p.pid,
                        exit,
                        pty,
                    });
                    // Queued (and counted) first: no key typed next overtakes it.
                    program.queue_input(blobs.get(image.input)?);
                }
                // The terminal had already closed: only the exit is left to watch.
                None => program.watch_exit(exit, p.pid),
            }
        }
        (None, exit) => {
            program.set_exited(exit.as_ref().map_or(ExitInfo::exited(-1), |e| ExitInfo {
                code: e.code,
                signal: e.signal.clone(),
            }))
        }
    }
    info!(session = %image.id, pid = image.process.as_ref().map(|p| p.pid), "session adopted");
    let wiring = links.wiring(Identity::image_hooks(image), image.id);
    let attention = Attention::adopted(
        &cfg.attention,
        &image.assistant.name,
        image.attention.as_ref(),
    );
    let parts = Parts {
        identity: Identity::from_image(image, wiring),
        size: (rows, cols),
        chat: Chat::from_image(cfg.session.chat_history, &image.chat),
        screen,
        program,
        log,
        recent_keys,
        metrics,
        attention,
        gate: Arc::new(StateGate::new(links.token, cfg.attention.hook_rate)),
        transitions: links.transitions,
        audit: links.audit,
    };
    Ok(actor::launch(cfg, parts, on_end))
}

/// The assistant a session with its creator's own command `argv` runs as: the configured one
/// of key `key` lending its display name and environment, or, for [`CUSTOM_ASSISTANT`] (when
/// the config has no such key), none, shown as the program's file name. Its command is `argv`
/// and it has no YOLO command, so a YOLO toggle is refused and nothing restarts it. It borrows
/// the assistant's screen patterns, not its hooks.
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
    crate::config::program_available(program).map_err(CreateError::ProgramNotFound)?;
    let (name, env, state) = match cfg.assistants.get(key) {
        Some(a) => (a.name.clone(), a.env.clone(), a.state.clone()),
        None if key == CUSTOM_ASSISTANT => {
            let name = std::path::Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| program.to_owned());
            (name, Default::default(), Default::default())
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
        // Its screen read as the lending assistant's; the creator's argv is never changed, so
        // no hooks are wired into it.
        state_hooks: StateHooks::None,
        state,
    })
}
