//! What a session tells the outside, in domain words: events for its viewers, its metadata,
//! what a joiner gets, why it ended or refused; dialects turn these into their own frames.

use std::path::PathBuf;

use serde::Serialize;
use uuid::Uuid;

use super::chat::ChatLine;
use super::process::{ExitInfo, SpawnError};
use super::refusal::{Action, Refusal};
use super::screen_thread::ScreenFailed;
use super::upload::UploadError;
use crate::attention::{Choice, SessionState, Source, State};
use crate::term::snapshot::EncodedSnapshot;

/// Identifies one viewer within the daemon.
pub type ViewerId = u64;

/// How the actor hands new output to a viewer: straight onto its socket when that needs no
/// waiting, else by waking the viewer's task, which catches up from the log.
///
/// Writing from the actor spares a task wake-up per viewer per chunk, and lets the viewer
/// that typed get its echo first. Implemented by each dialect's connection.
pub trait LiveOutput: Send + Sync {
    /// Sends what the viewer lacks of `chunk`, which starts at log offset `start`, if the
    /// viewer's position is within it, it is idle, and its socket takes it without blocking.
    /// True when the viewer now has all of `chunk` (also when it already had).
    fn try_push(&self, start: u64, chunk: &[u8]) -> bool;
    /// Wakes the viewer's task to catch up from the log.
    fn wake(&self);
    /// The next log offset the viewer needs, when it can be told now without waiting; `None`
    /// keeps the whole window for it (see `output_log.rs`, `Release`).
    fn offset(&self) -> Option<u64> {
        None
    }
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
    /// Who is here (and who typed), to every viewer.
    Presence(std::sync::Arc<PresenceInfo>),
    /// Something this viewer asked was refused.
    Refused(Refusal),
    /// The session's state changed (or its reason or choices): working, waiting, idle or
    /// exited (README, "Attention").
    State(std::sync::Arc<SessionState>),
    /// The session is gone, for this reason; the connection ends.
    Close(EndReason),
}

impl ViewerEvent {
    /// About what the event costs while queued, in bytes: its text plus a fixed part. Bounds
    /// a viewer's queue in memory ([`viewer_queue`](super::viewer_queue)).
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
                ViewerEvent::Presence(p) => p.cost(),
                ViewerEvent::State(s) => {
                    s.reason.len() + s.choices.iter().map(|c| 16 + c.label.len()).sum::<usize>()
                }
                ViewerEvent::Close(_) => 0,
            }
    }
}

/// Who a viewer is, as the credential it connected with says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    /// A user's verified name; none for a guest (a share link's), who picks a display name.
    pub user: Option<String>,
    /// The credential it came with, as the audit trail writes it (`daemon-token`,
    /// `token:ID`, `proxy`, `share:ID`); empty when not known.
    pub credential: String,
}

impl Who {
    /// Who connects with `access`.
    pub fn of(access: &crate::auth::Access) -> Self {
        Self {
            user: access.user_name().map(str::to_owned),
            credential: crate::audit::credential_of(access),
        }
    }
}

/// One person in the session, as the viewers are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// The viewer (for a client to recognise itself).
    pub viewer: ViewerId,
    /// Small and stable while connected: the smallest number free when it joined, from 1.
    pub num: u32,
    /// The chat name, once set.
    pub name: Option<String>,
    /// The verified user name; none for a guest.
    pub user: Option<String>,
    /// Whether it may type.
    pub writer: bool,
    /// One of [`DEVICES`](super::presence::DEVICES), when the client said.
    pub device: Option<&'static str>,
}

/// The presence event: everyone, and who typed last (recently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceInfo {
    /// In joining order.
    pub people: Vec<Person>,
    /// The viewer whose keystrokes started this event, if that is what it is for.
    pub typing: Option<ViewerId>,
}

impl PresenceInfo {
    /// About what it costs queued, in bytes (names and a fixed part per person).
    pub fn cost(&self) -> usize {
        self.people
            .iter()
            .map(|p| 48 + p.name.as_ref().map_or(0, String::len))
            .sum()
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
    /// Its state: working, waiting, idle or exited, since when and why.
    pub state: SessionState,
    /// The presence numbers of the writers whose sizes the session's is: each one's rows or
    /// cols is the session's (see `Viewers::settle_holders`). Empty when no size counts.
    pub sized_by: Vec<u32>,
}

/// A status for tests: a shell of `rows` × 80 with `viewers` connected, sent after output up
/// to `offset`.
#[cfg(test)]
pub(crate) fn test_status(viewers: usize, rows: u16, offset: u64) -> ViewerEvent {
    ViewerEvent::Status {
        info: StatusInfo {
            viewers,
            rows,
            cols: 80,
            assistant: "Shell".into(),
            session_name: String::new(),
            session_uuid: Uuid::nil(),
            work_dir: "/".into(),
            yolo_mode: false,
            yolo_supported: false,
            restarting: false,
            state: crate::attention::SessionState::starting("starting"),
            sized_by: Vec::new(),
        },
        offset,
    }
}

/// A session as the REST API lists it (read back from a peer's list, see http/cluster.rs).
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id.
    pub id: Uuid,
    /// The session's number, 1 to 255, given by the registry: the smallest one free when the
    /// session was created. Paths and messages may name the session by it. None (`null`) for
    /// a session created while all 255 were taken: it is reached by its uuid.
    pub num: Option<u8>,
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
    /// Who created it: a user's name; `null` when not known (a session made before names, or
    /// by nobody in particular).
    #[serde(default)]
    pub created_by: Option<String>,
    /// Working directory.
    pub work_dir: String,
    /// Whether the program runs in YOLO mode.
    pub yolo_mode: bool,
    /// The names of the people watching, in joining order: a user by name, a guest (a share
    /// link's) as "NAME (guest)" or "guest N" before it picked a name.
    pub people: Vec<String>,
    /// Bytes of output the program has written so far (what changes when it is active).
    pub output_bytes: u64,
    /// The program and arguments run last (the assistant's command, its resume or YOLO
    /// command after a restart, or the creator's own command), as configured: without the
    /// hooks ptyhub adds to an agent's command line.
    pub command: Vec<String>,
    /// Working (busy), waiting (it needs its user: a permission or question prompt), idle
    /// (done, at its prompt) or exited (README, "Attention").
    #[serde(default)]
    pub state: State,
    /// When it entered that state, RFC 3339 UTC (to the second).
    #[serde(default)]
    pub state_since: String,
    /// When it entered that state, milliseconds since the Unix epoch.
    #[serde(default)]
    pub state_since_ms: u64,
    /// Why, for people: "Claude wants to run: cargo test", "quiet for 3 s at a shell prompt".
    #[serde(default)]
    pub reason: String,
    /// Where the state was learnt: `hook` (the agent said so), `screen` (its assistant's
    /// patterns), `terminal` (output, quiet, the foreground program) or `exit`.
    #[serde(default)]
    pub state_source: Source,
    /// The quick replies a waiting screen offers (keys as a terminal sends them); may be empty.
    #[serde(default)]
    pub choices: Vec<Choice>,
}

/// What a joining viewer receives before any live output.
pub struct JoinReply {
    /// The screen, when the session has drawn anything.
    pub snapshot: Option<EncodedSnapshot>,
    /// Live output for this viewer starts at this log offset.
    pub offset: u64,
    /// Set when the program has already ended.
    pub exit: Option<ExitInfo>,
    /// The latest chat lines, oldest first.
    pub chat: Vec<ChatLine>,
}

/// A fresh snapshot for a viewer that fell behind, and where its stream resumes.
pub struct Resync {
    /// The screen now; `None` without a screen model (the stream resumes at the log's oldest
    /// byte, and what fell out of it is lost to this viewer).
    pub snapshot: Option<EncodedSnapshot>,
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
    /// The daemon is being replaced by a new image of itself (a live upgrade): the session
    /// goes on there.
    Upgrade,
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
    Spawn(#[from] SpawnError),
    /// The screen model's thread could not be started.
    #[error("could not start the screen thread: {0}")]
    Thread(std::io::Error),
    /// The daemon is shutting down.
    #[error("ptyhub is shutting down")]
    ShuttingDown,
    /// The daemon already runs its maximum of sessions.
    #[error("session limit reached: this server runs at most {0} sessions (limits.max_sessions)")]
    TooMany(usize),
    /// Every session number is taken.
    #[error("session limit reached: all {0} session numbers are in use")]
    NoFreeNumber(usize),
    /// The creator's own command cannot be run; says why.
    #[error("bad command: {0}")]
    BadCommand(String),
    /// The creator's own command names a program this host does not have; says which.
    #[error("bad command: {0}")]
    ProgramNotFound(String),
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
    /// Whether the session keeps a screen model. Without one (a pipe-mode stream, where
    /// nothing draws a screen) there are no snapshots and no answers to terminal queries:
    /// joiners replay the output log from its oldest byte instead.
    pub screen: bool,
    /// The program and its arguments, run as they are (never through a shell, no `$SHELL`
    /// substitution) instead of the assistant's command. Such a session has no YOLO mode.
    /// With it, `assistant` may be [`CUSTOM_ASSISTANT`]: no assistant, the program's file
    /// name shown as the assistant's name; a configured assistant lends its name and `env`.
    pub command: Option<Vec<String>>,
    /// The initial `(rows, cols)` of the PTY and the screen, clamped like any size; default
    /// the configured `session.rows` and `session.cols`.
    pub size: Option<(u16, u16)>,
    /// Who creates it: the caller's user name (none for a caller without one).
    pub created_by: Option<String>,
}

/// The assistant key of a session that runs its creator's command and no configured
/// assistant (unless the config defines an assistant of that key).
pub const CUSTOM_ASSISTANT: &str = "custom";

/// What a viewer may do to its session; a share link gives its holder one (the API spells it
/// `viewer` or `writer`), the daemon's token gives [`Role::Writer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
// The OpenAPI document describes it as the share links' field it is there.
#[schema(description = "What a share link lets its holder do.")]
pub enum Role {
    /// Watches and chats; changes nothing, and its size does not count.
    Viewer,
    /// Types, resizes, renames, uploads, restarts and signals.
    Writer,
}

impl Role {
    /// Whether this role may do `action` (every [`Action`] changes the session).
    pub fn may(self, _action: Action) -> bool {
        self == Role::Writer
    }
}

/// Why a viewer could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The session has its configured maximum of viewers.
    #[error("this session already has {0} viewers")]
    TooManyViewers(usize),
    /// The session ended.
    #[error(transparent)]
    Gone(#[from] SessionGone),
    /// The screen could not be drawn for the joiner.
    #[error(transparent)]
    Screen(#[from] ScreenFailed),
}

/// Why a rename did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RenameError {
    /// The viewer's role does not allow it.
    #[error("{}", .0.message())]
    Refused(Refusal),
    /// The name breaks the naming rule; says how.
    #[error("{0}")]
    BadName(String),
    /// The session ended.
    #[error(transparent)]
    Gone(#[from] SessionGone),
}

/// A file saved into the session's working directory (and its path typed for the program).
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// Where it was saved, absolute.
    pub path: PathBuf,
    /// The name it was saved under (`name-N.ext` when the name was taken).
    pub filename: String,
}

/// Why an upload did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UploadFailed {
    /// The viewer's role does not allow it.
    #[error("{}", .0.message())]
    Refused(Refusal),
    /// Saving failed (bad name, too large, disk full...); nothing was left behind.
    #[error(transparent)]
    Save(#[from] UploadError),
    /// The session ended.
    #[error(transparent)]
    Gone(#[from] SessionGone),
}
