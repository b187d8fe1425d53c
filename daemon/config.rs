//! Configuration: the embedded default, a TOML file, environment variables and flags, merged into one Config.
//!
//! `config/ptyhub.toml` is both the documented example and the default compiled into the
//! binary, so the two can never disagree. A user file is laid over it key by key (assistant
//! tables replace whole assistants), then the listen address from a flag or the environment
//! wins over both. Every value is checked while it is read, so a mistake is reported with the
//! file, line and column it was written at, and start-up stops there instead of running with a
//! setting nobody asked for.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The embedded default configuration, which is also the documented example.
pub const DEFAULT_TOML: &str = include_str!("../config/ptyhub.toml");

/// How errors and [`Config::source`] name the embedded default.
pub const DEFAULT_ORIGIN: &str = "embedded default (config/ptyhub.toml)";

/// Environment variable naming the config file (a `--config` flag wins over it).
pub const ENV_CONFIG: &str = "PTYHUB_CONFIG";

/// Environment variable overriding the listen address (a `--listen` flag wins over it).
pub const ENV_LISTEN: &str = "PTYHUB_LISTEN";

/// The one placeholder that is expanded: a program that is exactly this string.
const SHELL_PLACEHOLDER: &str = "$SHELL";

/// The program `$SHELL` stands for when the daemon's `SHELL` is unset or empty.
const FALLBACK_SHELL: &str = "bash";

/// Where programs are looked up when the daemon has no `PATH` (what `execvp` assumes).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Longest accepted duration (365 days): larger values are surely typos, and adding them to an
/// `Instant` could overflow.
const MAX_DURATION_MS: u64 = 365 * 24 * 3600 * 1000;

/// Smallest output window, bytes (64 KiB): below it ordinary bursts of output would push every
/// viewer into a snapshot resync.
const MIN_OUTPUT_LOG_BYTES: u64 = 64 * 1024;

/// Most scrollback lines (100 000): each costs the full terminal width in memory, so a larger
/// value is far more likely a typo than a wish.
const MAX_SCROLLBACK_LINES: u64 = 100_000;

/// Smallest flow-control budget, bytes (512 KiB): twice the browser's acknowledgement interval
/// of 256 KiB; a smaller one would wait for an acknowledgement that never comes, and resync the
/// client by snapshot instead.
const MIN_FLOW_BUDGET_BYTES: u64 = 512 * 1024;

/// The whole configuration of the daemon.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address the HTTP/WebSocket server listens on.
    pub listen: SocketAddr,
    /// Settings of each session.
    pub session: SessionConfig,
    /// Settings of each connected viewer.
    pub viewer: ViewerConfig,
    /// The programs a session can run, by key (the `assistant` query parameter).
    pub assistants: BTreeMap<String, Assistant>,
    /// Who may connect.
    pub auth: AuthConfig,
    /// Bounds on what clients may use.
    pub limits: LimitsConfig,
    /// Where this configuration came from, for logs.
    pub source: String,
}

/// `[session]`: per-session settings.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Terminal height before any viewer sends a size, rows (1..=500).
    pub rows: u16,
    /// Terminal width before any viewer sends a size, columns (1..=1000).
    pub cols: u16,
    /// Scrollback lines kept by the screen model and sent in snapshots.
    pub scrollback_lines: usize,
    /// Window of recent output kept per session, bytes (at least 64 KiB).
    pub output_log_bytes: usize,
    /// Time between SIGTERM and SIGKILL when processes are ended.
    pub kill_grace: Duration,
    /// An exited session with no viewer is removed this long after its exit.
    pub reap_after_exit: Duration,
    /// Chat messages kept per session.
    pub chat_history: usize,
}

/// `[viewer]`: per-connection settings.
#[derive(Debug, Clone)]
pub struct ViewerConfig {
    /// A socket unwritable this long gets a snapshot instead of the backlog (never zero).
    pub stall_deadline: Duration,
    /// With `flow=ack`: most unacknowledged bytes per client (at least 64 KiB).
    pub flow_budget_bytes: u64,
    /// Largest WebSocket message accepted, bytes; larger closes with 1009. Always more than
    /// `upload_max_bytes`.
    pub max_message_bytes: usize,
    /// Largest file upload, bytes (at least 1).
    pub upload_max_bytes: usize,
}

/// `[auth]`: the daemon token and the origins allowed besides the server's own.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// The token; `None` means one is generated at start (loopback listen only).
    pub token: Option<String>,
    /// Origins (`https://host:port`) accepted besides the Host itself, e.g. a reverse proxy's.
    pub allowed_origins: Vec<String>,
}

/// `[limits]`: what one client, or all of them, may use.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most viewers of one session at once.
    pub max_viewers_per_session: usize,
    /// Longest chat message, characters after trimming.
    pub max_chat_chars: usize,
    /// Longest chat user name and session name, characters after trimming.
    pub max_name_chars: usize,
    /// Failed authentications per client address per minute before it gets 429.
    pub failed_auth_per_minute: usize,
    /// Most simultaneous not-yet-authenticated connections from one client address (and,
    /// separately, most authenticated WebSockets from it).
    pub max_connections_per_ip: usize,
    /// How long a connection may take to send a request's headers, and may stay idle between
    /// requests, before it is closed.
    pub header_timeout: Duration,
}

/// `[assistants.KEY]`: a program a session can run. Commands are argument arrays, never split
/// on spaces and never run through a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assistant {
    /// Display name, sent to viewers in `status`.
    pub name: String,
    /// How a session starts; the first element is the program (at least one element).
    pub command: Vec<String>,
    /// How the agent restarts when YOLO mode is switched off; `None` means `command`.
    pub resume: Option<Vec<String>>,
    /// How the agent restarts when YOLO mode is switched on; `None`: YOLO unsupported.
    pub yolo: Option<Vec<String>>,
    /// Environment added for every run.
    pub env: BTreeMap<String, String>,
    /// Environment added on top of `env` in YOLO mode only.
    pub yolo_env: BTreeMap<String, String>,
}

impl Assistant {
    /// The command with `$SHELL` resolved (see above).
    pub fn start_argv(&self) -> Vec<String> {
        resolve_argv(&self.command, shell_from_env().as_deref())
    }

    /// The command that restarts the agent in normal mode (`resume`, else `command`), with
    /// `$SHELL` resolved.
    pub fn resume_argv(&self) -> Vec<String> {
        let argv = self.resume.as_ref().unwrap_or(&self.command);
        resolve_argv(argv, shell_from_env().as_deref())
    }

    /// The command that restarts the agent in YOLO mode, with `$SHELL` resolved; `None` when
    /// YOLO is unsupported.
    pub fn yolo_argv(&self) -> Option<Vec<String>> {
        let shell = shell_from_env();
        self.yolo
            .as_ref()
            .map(|argv| resolve_argv(argv, shell.as_deref()))
    }

    /// The command for a restart into YOLO mode (`yolo == true`) or out of it; `None` when
    /// YOLO mode is asked for and unsupported.
    pub fn restart_argv(&self, yolo: bool) -> Option<Vec<String>> {
        if yolo {
            self.yolo_argv()
        } else {
            Some(self.resume_argv())
        }
    }

    /// Whether the assistant has a YOLO command.
    pub fn yolo_supported(&self) -> bool {
        self.yolo.is_some()
    }

    /// Whether the start command is itself the YOLO command, so a new session begins in YOLO
    /// mode (and should get [`Assistant::env_for`]`(true)`).
    pub fn starts_in_yolo(&self) -> bool {
        self.yolo.as_ref() == Some(&self.command)
    }

    /// The environment to add for a run in the given mode: `env`, plus `yolo_env` in YOLO
    /// mode (where it wins on a clash).
    pub fn env_for(&self, yolo: bool) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        if yolo {
            env.extend(self.yolo_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        env
    }

    /// Whether the program (first element after resolution) is found: an absolute/relative path that is an executable file, or a name found executable in PATH. Returns Err(reason) like "program `claude` not found in PATH".
    ///
    /// Relative paths are taken from the daemon's working directory.
    pub fn availability(&self) -> Result<(), String> {
        let argv = self.start_argv();
        let program = argv.first().map(String::as_str).unwrap_or_default();
        find_program(program, std::env::var_os("PATH").as_deref()).map(|_| ())
    }
}

/// The daemon's `SHELL`, if it is valid UTF-8 (argument arrays are strings).
fn shell_from_env() -> Option<String> {
    std::env::var("SHELL").ok()
}

/// `argv` with a first element of exactly `$SHELL` replaced by `shell` when that is set and
/// non-empty, else by `bash`. Nothing else is touched: this is not a shell.
fn resolve_argv(argv: &[String], shell: Option<&str>) -> Vec<String> {
    let mut out = argv.to_vec();
    if let Some(program) = out.first_mut() {
        if program == SHELL_PLACEHOLDER {
            let shell = shell.filter(|s| !s.is_empty()).unwrap_or(FALLBACK_SHELL);
            shell.clone_into(program);
        }
    }
    out
}

/// Find `program` the way `execvp` would: a name with a `/` is a path, anything else is looked
/// up in `path_var` (or [`DEFAULT_PATH`]). Empty `PATH` entries are skipped rather than meaning
/// "the current directory", which would make availability depend on where the daemon started.
fn find_program(program: &str, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program name is empty".to_owned());
    }
    if program.contains('/') {
        let path = Path::new(program);
        return match std::fs::metadata(path) {
            Ok(meta) if is_executable_file(&meta) => Ok(path.to_path_buf()),
            Ok(meta) if meta.is_dir() => Err(format!("program `{program}` is a directory")),
            Ok(_) => Err(format!("program `{program}` is not an executable file")),
            Err(e) => Err(format!("program `{program}` not found: {e}")),
        };
    }
    let dirs = path_var.unwrap_or_else(|| OsStr::new(DEFAULT_PATH));
    std::env::split_paths(dirs)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| is_executable_file(&m)))
        .ok_or_else(|| format!("program `{program}` not found in PATH"))
}

#[cfg(unix)]
fn is_executable_file(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable_file(meta: &std::fs::Metadata) -> bool {
    meta.is_file()
}

impl Config {
    /// The assistant of that key, if configured.
    pub fn assistant(&self, key: &str) -> Option<&Assistant> {
        self.assistants.get(key)
    }
}

impl Default for Config {
    /// The embedded default, parsed.
    fn default() -> Self {
        // The embedded default is a compile-time constant, checked by the unit test
        // `embedded_default_is_complete_and_valid`: failing here is a build bug, not bad input.
        build(None).expect("the embedded default configuration is valid")
    }
}

/// Why the configuration could not be loaded. Each message names the source and, where known,
/// the line and column, so start-up can stop with something a person can act on.
#[derive(thiserror::Error, Debug)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        /// The file asked for.
        path: PathBuf,
        /// What the OS said. Part of the message rather than a `source`, so that an error
        /// chain printer does not say it twice.
        error: std::io::Error,
    },
    /// A syntax error, an unknown key or a bad value, at a known place.
    #[error("{origin}:{line}:{column}: {reason}")]
    Invalid {
        /// The file (or the embedded default) it is in.
        origin: String,
        /// Line, from 1.
        line: usize,
        /// Column, in characters, from 1.
        column: usize,
        /// What is wrong, for people.
        reason: String,
    },
    /// A problem the parser could not place on a line.
    #[error("{origin}: {reason}")]
    Unplaced {
        /// The file (or the embedded default) it is in.
        origin: String,
        /// What is wrong, for people.
        reason: String,
    },
    /// The listen address given by `--listen` or `PTYHUB_LISTEN` is not `IP:port`.
    #[error("invalid listen address {value:?} (from --listen or {ENV_LISTEN}): {reason}")]
    Listen {
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Load: `file` = Some(path) from --config / PTYHUB_CONFIG (caller resolves that precedence); `listen_override` = from --listen / PTYHUB_LISTEN (caller resolves).
///
/// The file is laid over the embedded default; `None` uses the embedded default alone.
pub fn load(file: Option<&Path>, listen_override: Option<&str>) -> Result<Config, ConfigError> {
    let mut config = match file {
        None => build(None)?,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                path: path.to_path_buf(),
                error,
            })?;
            build(Some((&text, &path.display().to_string())))?
        }
    };
    if let Some(value) = listen_override {
        config.listen = value
            .trim()
            .parse()
            .map_err(|e: std::net::AddrParseError| ConfigError::Listen {
                value: value.to_owned(),
                reason: format!("{e} (expected IP:port, e.g. 127.0.0.1:1977)"),
            })?;
        config.source = format!(
            "{}; listen {} from --listen or {ENV_LISTEN}",
            config.source, config.listen
        );
    }
    Ok(config)
}

/// Parse from a string (for tests), `origin` names the source in errors.
///
/// Merged over the embedded default exactly as a file would be.
pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
    build(Some((text, origin)))
}

/// The embedded default, with the user layer `(text, origin)` laid over it when given.
fn build(user: Option<(&str, &str)>) -> Result<Config, ConfigError> {
    let default = Layer::parse(DEFAULT_TOML, DEFAULT_ORIGIN)?;
    let Some((text, origin)) = user else {
        check_message_limits(&default, None)?;
        return finish(default.raw, DEFAULT_ORIGIN.to_owned());
    };
    let layer = Layer::parse(text, origin)?;
    check_message_limits(&default, Some(&layer))?;
    let merged = merge(default.raw, layer.raw);
    finish(merged, format!("{origin} over the {DEFAULT_ORIGIN}"))
}

/// One parsed source, with its text kept so that checks made after parsing can still give a
/// line and column.
struct Layer<'a> {
    /// The source text.
    text: &'a str,
    /// Its name in errors.
    origin: &'a str,
    /// What it sets.
    raw: RawConfig,
}

impl<'a> Layer<'a> {
    fn parse(text: &'a str, origin: &'a str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            // Syntax errors come as several lines ("invalid table header\nexpected ..."); a
            // start-up error reads better, and logs better, as one.
            let reason = e.message().trim().replace('\n', "; ");
            match e.span() {
                Some(span) => invalid_at(text, origin, span.start, reason),
                None => ConfigError::Unplaced {
                    origin: origin.to_owned(),
                    reason,
                },
            }
        })?;
        let layer = Layer { text, origin, raw };
        for table in layer.raw.assistants.values() {
            let a = table.get_ref();
            if a.yolo.is_none() && !a.yolo_env.0.is_empty() {
                return Err(layer.error_at(
                    table.span().start,
                    "yolo_env is set but yolo is not: add a yolo command or remove yolo_env",
                ));
            }
        }
        Ok(layer)
    }

    fn error_at(&self, offset: usize, reason: impl Into<String>) -> ConfigError {
        invalid_at(self.text, self.origin, offset, reason.into())
    }
}

fn invalid_at(text: &str, origin: &str, offset: usize, reason: String) -> ConfigError {
    let (line, column) = line_column(text, offset);
    ConfigError::Invalid {
        origin: origin.to_owned(),
        line,
        column,
        reason,
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    for (i, c) in text.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// `max_message_bytes` must leave room for an upload frame's header, whichever layer set each
/// of the two; the error points at the value the user wrote, if they wrote one.
fn check_message_limits(default: &Layer<'_>, user: Option<&Layer<'_>>) -> Result<(), ConfigError> {
    let user_viewer = user.map(|l| &l.raw.viewer);
    let max = user_viewer
        .and_then(|v| v.max_message_bytes.as_ref())
        .or(default.raw.viewer.max_message_bytes.as_ref());
    let upload = user_viewer
        .and_then(|v| v.upload_max_bytes.as_ref())
        .or(default.raw.viewer.upload_max_bytes.as_ref());
    let (Some(max), Some(upload)) = (max, upload) else {
        return Ok(()); // missing keys are reported by `finish`
    };
    if max.get_ref().0 > upload.get_ref().0 {
        return Ok(());
    }
    let reason = format!(
        "max_message_bytes ({}) must be more than upload_max_bytes ({}): an upload frame \
         carries a header and the file name besides the file",
        max.get_ref().0,
        upload.get_ref().0
    );
    let (layer, span) = match user {
        Some(l) => match (
            &l.raw.viewer.max_message_bytes,
            &l.raw.viewer.upload_max_bytes,
        ) {
            (Some(m), _) => (l, m.span()),
            (None, Some(u)) => (l, u.span()),
            (None, None) => (default, max.span()),
        },
        None => (default, max.span()),
    };
    Err(layer.error_at(span.start, reason))
}

/// `over` laid on `base`: scalars key by key, assistants table by table.
fn merge(base: RawConfig, over: RawConfig) -> RawConfig {
    let (b, o) = (base.session, over.session);
    let session = RawSession {
        rows: o.rows.or(b.rows),
        cols: o.cols.or(b.cols),
        scrollback_lines: o.scrollback_lines.or(b.scrollback_lines),
        output_log_bytes: o.output_log_bytes.or(b.output_log_bytes),
        kill_grace: o.kill_grace.or(b.kill_grace),
        reap_after_exit: o.reap_after_exit.or(b.reap_after_exit),
        chat_history: o.chat_history.or(b.chat_history),
    };
    let (b, o) = (base.viewer, over.viewer);
    let viewer = RawViewer {
        stall_deadline: o.stall_deadline.or(b.stall_deadline),
        flow_budget_bytes: o.flow_budget_bytes.or(b.flow_budget_bytes),
        max_message_bytes: o.max_message_bytes.or(b.max_message_bytes),
        upload_max_bytes: o.upload_max_bytes.or(b.upload_max_bytes),
    };
    let mut assistants = base.assistants;
    assistants.extend(over.assistants);
    let (b, o) = (base.auth, over.auth);
    let auth = RawAuth {
        token: o.token.or(b.token),
        allowed_origins: o.allowed_origins.or(b.allowed_origins),
    };
    let (b, o) = (base.limits, over.limits);
    let limits = RawLimits {
        max_sessions: o.max_sessions.or(b.max_sessions),
        max_viewers_per_session: o.max_viewers_per_session.or(b.max_viewers_per_session),
        max_chat_chars: o.max_chat_chars.or(b.max_chat_chars),
        max_name_chars: o.max_name_chars.or(b.max_name_chars),
        failed_auth_per_minute: o.failed_auth_per_minute.or(b.failed_auth_per_minute),
        max_connections_per_ip: o.max_connections_per_ip.or(b.max_connections_per_ip),
        header_timeout: o.header_timeout.or(b.header_timeout),
    };
    RawConfig {
        listen: over.listen.or(base.listen),
        session,
        viewer,
        assistants,
        auth,
        limits,
    }
}

/// Every key has a value once the embedded default is under the user's file; a missing one
/// means the embedded default itself lacks it.
fn need<T>(value: Option<T>, key: &str) -> Result<T, ConfigError> {
    value.ok_or_else(|| ConfigError::Unplaced {
        origin: DEFAULT_ORIGIN.to_owned(),
        reason: format!("`{key}` is missing (the embedded default must set every key)"),
    })
}

fn to_usize(v: u64) -> usize {
    // Only reached with values validated to fit (the upper bound is usize::MAX).
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn to_u16(v: u64) -> u16 {
    // Only reached with values validated to at most 1000.
    u16::try_from(v).unwrap_or(u16::MAX)
}

fn finish(raw: RawConfig, source: String) -> Result<Config, ConfigError> {
    let s = raw.session;
    let session = SessionConfig {
        rows: to_u16(need(s.rows, "session.rows")?.0),
        cols: to_u16(need(s.cols, "session.cols")?.0),
        scrollback_lines: to_usize(need(s.scrollback_lines, "session.scrollback_lines")?.0),
        output_log_bytes: to_usize(need(s.output_log_bytes, "session.output_log_bytes")?.0),
        kill_grace: need(s.kill_grace, "session.kill_grace")?.0,
        reap_after_exit: need(s.reap_after_exit, "session.reap_after_exit")?.0,
        chat_history: to_usize(need(s.chat_history, "session.chat_history")?.0),
    };
    let v = raw.viewer;
    let viewer = ViewerConfig {
        stall_deadline: need(v.stall_deadline, "viewer.stall_deadline")?.0,
        flow_budget_bytes: need(v.flow_budget_bytes, "viewer.flow_budget_bytes")?.0,
        max_message_bytes: to_usize(
            need(v.max_message_bytes, "viewer.max_message_bytes")?
                .into_inner()
                .0,
        ),
        upload_max_bytes: to_usize(
            need(v.upload_max_bytes, "viewer.upload_max_bytes")?
                .into_inner()
                .0,
        ),
    };
    let assistants = raw
        .assistants
        .into_iter()
        .map(|(key, table)| {
            let a = table.into_inner();
            let assistant = Assistant {
                name: a.name.map_or_else(|| key.0.clone(), |n| n.0),
                command: a.command.0,
                resume: a.resume.map(|c| c.0),
                yolo: a.yolo.map(|c| c.0),
                env: a.env.0,
                yolo_env: a.yolo_env.0,
            };
            (key.0, assistant)
        })
        .collect();
    let l = raw.limits;
    let limits = LimitsConfig {
        max_sessions: to_usize(need(l.max_sessions, "limits.max_sessions")?.0),
        max_viewers_per_session: to_usize(
            need(l.max_viewers_per_session, "limits.max_viewers_per_session")?.0,
        ),
        max_chat_chars: to_usize(need(l.max_chat_chars, "limits.max_chat_chars")?.0),
        max_name_chars: to_usize(need(l.max_name_chars, "limits.max_name_chars")?.0),
        failed_auth_per_minute: to_usize(
            need(l.failed_auth_per_minute, "limits.failed_auth_per_minute")?.0,
        ),
        max_connections_per_ip: to_usize(
            need(l.max_connections_per_ip, "limits.max_connections_per_ip")?.0,
        ),
        header_timeout: need(l.header_timeout, "limits.header_timeout")?.0,
    };
    let auth = AuthConfig {
        token: raw.auth.token.map(|t| t.0),
        allowed_origins: raw.auth.allowed_origins.unwrap_or_default(),
    };
    Ok(Config {
        listen: need(raw.listen, "listen")?.0,
        session,
        viewer,
        auth,
        limits,
        assistants,
        source,
    })
}

// ---- the file as written ---------------------------------------------------------------
//
// Every field is optional so that one shape serves the embedded default and a partial user
// file; `deny_unknown_fields` turns a typo into an error at its line. Each value type checks
// itself while it is deserialised, so the TOML parser attaches the position for us.

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Listen>,
    #[serde(default)]
    session: RawSession,
    #[serde(default)]
    viewer: RawViewer,
    #[serde(default)]
    assistants: BTreeMap<AssistantKey, Spanned<RawAssistant>>,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    limits: RawLimits,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    token: Option<Token>,
    allowed_origins: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_sessions: Option<Int<1, 100_000>>,
    max_viewers_per_session: Option<Int<1, 100_000>>,
    max_chat_chars: Option<Int<1, 100_000>>,
    max_name_chars: Option<Int<1, 255>>,
    failed_auth_per_minute: Option<Int<1, 1_000_000>>,
    max_connections_per_ip: Option<Int<1, 1_000_000>>,
    header_timeout: Option<Dur<1>>,
}

/// A configured token: long enough to be worth having.
struct Token(String);

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = String::deserialize(d)?;
        if t.len() < 16 || !t.chars().all(|c| c.is_ascii_graphic()) {
            return Err(de::Error::custom(
                "token must be at least 16 printable ASCII characters without spaces",
            ));
        }
        Ok(Token(t))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSession {
    rows: Option<Int<1, 500>>,
    cols: Option<Int<1, 1000>>,
    scrollback_lines: Option<Int<0, MAX_SCROLLBACK_LINES>>,
    output_log_bytes: Option<Int<MIN_OUTPUT_LOG_BYTES, { usize::MAX as u64 }>>,
    kill_grace: Option<Dur<0>>,
    reap_after_exit: Option<Dur<0>>,
    chat_history: Option<Int<0, { usize::MAX as u64 }>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawViewer {
    stall_deadline: Option<Dur<1>>,
    flow_budget_bytes: Option<Int<MIN_FLOW_BUDGET_BYTES, { u64::MAX }>>,
    // Spanned: compared with each other after parsing, and the error must still point here.
    max_message_bytes: Option<Spanned<Int<2, { usize::MAX as u64 }>>>,
    upload_max_bytes: Option<Spanned<Int<1, { usize::MAX as u64 }>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAssistant {
    name: Option<DisplayName>,
    command: Argv,
    resume: Option<Argv>,
    yolo: Option<Argv>,
    #[serde(default)]
    env: EnvVars,
    #[serde(default)]
    yolo_env: EnvVars,
}

/// An integer in `MIN..=MAX`.
struct Int<const MIN: u64, const MAX: u64>(u64);

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Int<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const MIN: u64, const MAX: u64>;
        impl<const MIN: u64, const MAX: u64> V<MIN, MAX> {
            fn check<E: de::Error>(v: i128) -> Result<Int<MIN, MAX>, E> {
                match u64::try_from(v) {
                    Ok(n) if (MIN..=MAX).contains(&n) => Ok(Int(n)),
                    _ => Err(E::custom(format!(
                        "{v} is out of range: expected {}",
                        Self::range()
                    ))),
                }
            }
            fn range() -> String {
                if MAX == u64::MAX || MAX == usize::MAX as u64 {
                    format!("an integer of at least {MIN}")
                } else {
                    format!("an integer from {MIN} to {MAX}")
                }
            }
        }
        impl<const MIN: u64, const MAX: u64> Visitor<'_> for V<MIN, MAX> {
            type Value = Int<MIN, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&Self::range())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Self::check(i128::from(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Self::check(i128::from(v))
            }
        }
        d.deserialize_any(V::<MIN, MAX>)
    }
}

/// A duration written as a string ("5s", "500ms", "1h30m"), at least `MIN_MS` milliseconds.
struct Dur<const MIN_MS: u64>(Duration);

impl<'de, const MIN_MS: u64> Deserialize<'de> for Dur<MIN_MS> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const MIN_MS: u64>;
        impl<const MIN_MS: u64> Visitor<'_> for V<MIN_MS> {
            type Value = Dur<MIN_MS>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"500ms\", \"5s\" or \"1h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                let d = parse_duration(s).map_err(E::custom)?;
                if d.as_millis() < u128::from(MIN_MS) {
                    return Err(E::custom(format!("duration {s:?} must be more than 0")));
                }
                Ok(Dur(d))
            }
        }
        d.deserialize_any(V::<MIN_MS>)
    }
}

/// Parse "500ms", "5s", "10m", "1h", "2d" and sums such as "1h30m" or "1m 30s", to whole
/// milliseconds, at most 365 days.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {s:?}: {why}");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad("it is empty (write e.g. \"5s\")"));
    }
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad(
                "expected a whole number followed by a unit (ms, s, m, h, d)",
            ));
        }
        let (number, tail) = rest.split_at(digits);
        let n: u64 = number.parse().map_err(|_| bad("the number is too large"))?;
        if tail.starts_with('.') {
            return Err(bad(
                "fractions are not supported: use a smaller unit (\"1500ms\")",
            ));
        }
        let tail = tail.trim_start();
        let unit_len = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" | "sec" | "secs" => 1000,
            "m" | "min" | "mins" => 60 * 1000,
            "h" | "hour" | "hours" => 3600 * 1000,
            "d" | "day" | "days" => 24 * 3600 * 1000,
            "" => return Err(bad("a unit is missing (ms, s, m, h or d)")),
            other => {
                return Err(bad(&format!(
                    "unknown unit {other:?} (use ms, s, m, h or d)"
                )))
            }
        };
        total_ms = n
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .filter(|&ms| ms <= MAX_DURATION_MS)
            .ok_or_else(|| bad("longer than 365 days"))?;
        rest = tail.trim_start();
    }
    Ok(Duration::from_millis(total_ms))
}

/// A socket address `IP:port`.
struct Listen(SocketAddr);

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Listen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address string IP:port, e.g. \"127.0.0.1:1977\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                s.trim().parse().map(Listen).map_err(|e| {
                    E::custom(format!(
                        "invalid listen address {s:?}: {e} (expected IP:port, e.g. \"127.0.0.1:1977\")"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// An assistant's key: `[a-z0-9_-]+`, because it travels in URLs and JSON unescaped.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct AssistantKey(String);

impl<'de> Deserialize<'de> for AssistantKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let key = String::deserialize(d)?;
        let valid = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if valid {
            Ok(AssistantKey(key))
        } else {
            Err(de::Error::custom(format!(
                "invalid assistant key {key:?}: use only a-z, 0-9, \"_\" and \"-\""
            )))
        }
    }
}

/// A display name: not blank.
struct DisplayName(String);

impl<'de> Deserialize<'de> for DisplayName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name.trim().is_empty() {
            return Err(de::Error::custom("name must not be empty"));
        }
        Ok(DisplayName(name))
    }
}

/// An argument array: at least the program, which is not empty; no NUL anywhere (it cannot be
/// passed to `execve`).
struct Argv(Vec<String>);

impl<'de> Deserialize<'de> for Argv {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(d)?;
        match argv.first() {
            None => Err(de::Error::custom(
                "the command is empty: it needs at least the program, e.g. [\"bash\", \"-l\"]",
            )),
            Some(program) if program.is_empty() => Err(de::Error::custom(
                "the program (first element of the command) is an empty string",
            )),
            Some(_) if argv.iter().any(|a| a.contains('\0')) => {
                Err(de::Error::custom("command arguments cannot contain NUL"))
            }
            Some(_) => Ok(Argv(argv)),
        }
    }
}

/// Environment variables: names non-empty without `=` or NUL, values without NUL.
#[derive(Default)]
struct EnvVars(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for EnvVars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let vars = BTreeMap::<String, String>::deserialize(d)?;
        for (name, value) in &vars {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(de::Error::custom(format!(
                    "invalid environment variable name {name:?}: it must be non-empty, \
                     without \"=\" or NUL"
                )));
            }
            if value.contains('\0') {
                return Err(de::Error::custom(format!(
                    "environment variable {name} cannot contain NUL"
                )));
            }
        }
        Ok(EnvVars(vars))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        match from_toml_str(text, "test.toml") {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e,
        }
    }

    /// (line, column, reason) of an `Invalid` error.
    fn placed(text: &str) -> (usize, usize, String) {
        match err(text) {
            ConfigError::Invalid {
                origin,
                line,
                column,
                reason,
            } => {
                assert_eq!(origin, "test.toml");
                (line, column, reason)
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn embedded_default_is_complete_and_valid() {
        let c = build(None).unwrap();
        assert_eq!(c.listen, "127.0.0.1:1977".parse().unwrap());
        assert_eq!(c.source, DEFAULT_ORIGIN);
        let s = &c.session;
        assert_eq!((s.rows, s.cols), (24, 80));
        assert_eq!(s.scrollback_lines, 1000);
        assert_eq!(s.output_log_bytes, 4 * 1024 * 1024);
        assert_eq!(s.kill_grace, Duration::from_secs(5));
        assert_eq!(s.reap_after_exit, Duration::from_secs(3600));
        assert_eq!(s.chat_history, 200);
        let v = &c.viewer;
        assert_eq!(v.stall_deadline, Duration::from_secs(10));
        assert_eq!(v.flow_budget_bytes, 2 * 1024 * 1024);
        assert_eq!(v.max_message_bytes, 64 * 1024 * 1024 + 64 * 1024);
        assert_eq!(v.upload_max_bytes, 64 * 1024 * 1024);
        // Default::default goes the same way.
        assert_eq!(Config::default().assistants, c.assistants);
    }

    #[test]
    fn default_assistants_match_swe_swe() {
        let c = Config::default();
        let keys: Vec<&str> = c.assistants.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["aider", "claude", "codex", "gemini", "goose", "opencode", "shell"]
        );
        let check =
            |key: &str, name: &str, cmd: &[&str], resume: &[&str], yolo: Option<&[&str]>| {
                let a = &c.assistants[key];
                assert_eq!(a.name, name, "{key}");
                assert_eq!(a.command, argv(cmd), "{key}");
                assert_eq!(a.resume_argv(), argv(resume), "{key}");
                assert_eq!(a.yolo, yolo.map(argv), "{key}");
                assert_eq!(a.yolo_supported(), yolo.is_some(), "{key}");
                assert!(!a.starts_in_yolo(), "{key}");
            };
        check(
            "claude",
            "Claude",
            &["claude"],
            &["claude", "--continue"],
            Some(&["claude", "--dangerously-skip-permissions", "--continue"]),
        );
        check(
            "gemini",
            "Gemini",
            &["gemini"],
            &["gemini", "--resume"],
            Some(&["gemini", "--resume", "--approval-mode=yolo"]),
        );
        check(
            "codex",
            "Codex",
            &["codex"],
            &["codex", "resume", "--last"],
            Some(&["codex", "--yolo", "resume", "--last"]),
        );
        check(
            "goose",
            "Goose",
            &["goose", "session"],
            &["goose", "session", "-r"],
            Some(&["goose", "session", "-r"]),
        );
        check(
            "aider",
            "Aider",
            &["aider"],
            &["aider", "--restore-chat-history"],
            Some(&["aider", "--yes-always", "--restore-chat-history"]),
        );
        check("opencode", "OpenCode", &["opencode"], &["opencode"], None);

        let goose = &c.assistants["goose"];
        assert!(goose.env.is_empty());
        assert!(goose.env_for(false).is_empty());
        assert_eq!(
            goose.env_for(true),
            BTreeMap::from([("GOOSE_MODE".to_owned(), "auto".to_owned())])
        );
        assert_eq!(
            goose.restart_argv(true),
            Some(argv(&["goose", "session", "-r"]))
        );
        assert_eq!(c.assistants["opencode"].restart_argv(true), None);
        assert_eq!(
            c.assistants["opencode"].restart_argv(false),
            Some(argv(&["opencode"]))
        );

        let shell = &c.assistants["shell"];
        assert_eq!(shell.name, "Shell");
        assert_eq!(shell.command, argv(&["$SHELL", "-l"]));
        assert!(!shell.yolo_supported());
        let start = shell.start_argv();
        assert_eq!(
            start,
            resolve_argv(&shell.command, shell_from_env().as_deref())
        );
        assert_ne!(start[0], "$SHELL");
        assert_eq!(start[1], "-l");
    }

    #[test]
    fn shell_placeholder_resolution() {
        let cmd = argv(&["$SHELL", "-l"]);
        assert_eq!(
            resolve_argv(&cmd, Some("/bin/zsh")),
            argv(&["/bin/zsh", "-l"])
        );
        assert_eq!(resolve_argv(&cmd, Some("")), argv(&["bash", "-l"]));
        assert_eq!(resolve_argv(&cmd, None), argv(&["bash", "-l"]));
        // Only a program that is exactly `$SHELL`; nothing else is expanded.
        for unchanged in [
            argv(&["${SHELL}", "-l"]),
            argv(&["$SHELL2"]),
            argv(&["bash", "$SHELL", "$HOME", "~"]),
            argv(&[" $SHELL"]),
        ] {
            assert_eq!(resolve_argv(&unchanged, Some("/bin/zsh")), unchanged);
        }
        assert!(resolve_argv(&[], Some("/bin/zsh")).is_empty());
    }

    #[test]
    fn availability_of_programs() {
        let with = |cmd: &[&str]| Assistant {
            name: "t".into(),
            command: argv(cmd),
            resume: None,
            yolo: None,
            env: BTreeMap::new(),
            yolo_env: BTreeMap::new(),
        };
        assert_eq!(with(&["sh", "-c", "true"]).availability(), Ok(()));
        assert_eq!(
            with(&["no-such-program-xyz"]).availability(),
            Err("program `no-such-program-xyz` not found in PATH".to_owned())
        );
        assert_eq!(with(&["/bin/sh"]).availability(), Ok(()));
        let missing = with(&["/no/such/dir/prog"]).availability().unwrap_err();
        assert!(
            missing.starts_with("program `/no/such/dir/prog` not found"),
            "{missing}"
        );
        assert_eq!(
            with(&["/"]).availability(),
            Err("program `/` is a directory".to_owned())
        );
        let not_exec = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert_eq!(
            with(&[not_exec]).availability(),
            Err(format!("program `{not_exec}` is not an executable file"))
        );
        // PATH lookup itself, independent of the test's environment.
        assert!(find_program("sh", Some(OsStr::new("/no/such:/bin"))).is_ok());
        assert!(find_program("sh", Some(OsStr::new(""))).is_err());
        assert!(find_program("sh", Some(OsStr::new("/no/such"))).is_err());
        assert!(
            find_program("sh", None).is_ok(),
            "falls back to the standard PATH"
        );
        assert!(find_program("", None).is_err());
    }

    #[test]
    fn user_file_overrides_key_by_key() {
        let c = from_toml_str("[session]\nkill_grace = \"1s\"\n", "test.toml").unwrap();
        assert_eq!(c.session.kill_grace, Duration::from_secs(1));
        let d = Config::default();
        assert_eq!(c.session.rows, d.session.rows);
        assert_eq!(c.session.reap_after_exit, d.session.reap_after_exit);
        assert_eq!(c.viewer.upload_max_bytes, d.viewer.upload_max_bytes);
        assert_eq!(c.listen, d.listen);
        assert_eq!(c.assistants, d.assistants);
        assert_eq!(c.source, format!("test.toml over the {DEFAULT_ORIGIN}"));

        let c = from_toml_str("", "empty.toml").unwrap();
        assert_eq!(c.assistants, d.assistants);

        let c = from_toml_str(
            "listen = \"0.0.0.0:8080\"\n[session]\nrows = 50\ncols = 200\n[viewer]\nstall_deadline = \"1m 30s\"\n",
            "test.toml",
        )
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!((c.session.rows, c.session.cols), (50, 200));
        assert_eq!(c.viewer.stall_deadline, Duration::from_secs(90));
        assert_eq!(c.session.kill_grace, d.session.kill_grace);
    }

    #[test]
    fn user_assistants_add_or_replace_whole_tables() {
        let c = from_toml_str(
            r#"
[assistants.claude]
command = ["/opt/claude/bin/claude", "--model", "opus 4"]

[assistants.test-agent_2]
name = "Test agent"
command = ["sh", "-c", "echo hi; exec cat"]
yolo = ["sh", "-c", "echo YOLO; exec cat"]
env = { A = "1", EMPTY = "" }
yolo_env = { A = "2", B = "3" }
"#,
            "test.toml",
        )
        .unwrap();
        let claude = &c.assistants["claude"];
        // The whole table is replaced: nothing is inherited from the default claude.
        assert_eq!(claude.name, "claude");
        assert_eq!(
            claude.command,
            argv(&["/opt/claude/bin/claude", "--model", "opus 4"])
        );
        assert_eq!(claude.resume, None);
        assert!(!claude.yolo_supported());
        let t = &c.assistants["test-agent_2"];
        assert_eq!(t.name, "Test agent");
        assert_eq!(t.command, argv(&["sh", "-c", "echo hi; exec cat"]));
        assert_eq!(t.resume_argv(), t.command, "resume defaults to the command");
        assert_eq!(
            t.restart_argv(true),
            Some(argv(&["sh", "-c", "echo YOLO; exec cat"]))
        );
        let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(t.env_for(false), env(&[("A", "1"), ("EMPTY", "")]));
        assert_eq!(
            t.env_for(true),
            env(&[("A", "2"), ("B", "3"), ("EMPTY", "")])
        );
        // The other defaults are all still there.
        assert_eq!(c.assistants.len(), 8);
        assert_eq!(
            c.assistants["gemini"],
            Config::default().assistants["gemini"]
        );

        let c = from_toml_str(
            "[assistants.same]\ncommand = [\"x\"]\nyolo = [\"x\"]\n",
            "test.toml",
        )
        .unwrap();
        assert!(c.assistants["same"].starts_in_yolo());
    }

    #[test]
    fn unknown_key_names_file_line_column() {
        let e = err("[session]\nkill_grace = \"1s\"\nscrollback = 5000\n");
        let msg = e.to_string();
        assert!(
            msg.starts_with("test.toml:3:1: unknown field `scrollback`, expected one of `rows`, `cols`, `scrollback_lines`"),
            "{msg}"
        );
        assert!(matches!(
            e,
            ConfigError::Invalid {
                line: 3,
                column: 1,
                ..
            }
        ));

        let (line, col, reason) = placed("listen = \"127.0.0.1:1\"\n\n[sesion]\nrows = 3\n");
        assert_eq!((line, col), (3, 2));
        assert!(reason.starts_with("unknown field `sesion`"), "{reason}");

        let (line, _, reason) = placed("[assistants.x]\ncommand = [\"x\"]\n  yollo = [\"x\"]\n");
        assert_eq!(line, 3);
        assert!(reason.starts_with("unknown field `yollo`"), "{reason}");
    }

    #[test]
    fn bad_values_name_line_and_reason() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "[session]\nrows = 0\n",
                2,
                "0 is out of range: expected an integer from 1 to 500",
            ),
            (
                "[session]\ncols = 1001\n",
                2,
                "1001 is out of range: expected an integer from 1 to 1000",
            ),
            ("[session]\nrows = -3\n", 2, "-3 is out of range"),
            (
                "[session]\nrows = \"24\"\n",
                2,
                "invalid type: string \"24\", expected an integer from 1 to 500",
            ),
            ("[session]\nrows = 2.5\n", 2, "invalid type: floating point"),
            (
                "\n[session]\noutput_log_bytes = 1000\n",
                3,
                "1000 is out of range: expected an integer of at least 65536",
            ),
            ("[session]\nchat_history = -1\n", 2, "-1 is out of range"),
            (
                "[session]\nscrollback_lines = 100001\n",
                2,
                "expected an integer from 0 to 100000",
            ),
            (
                "[session]\nkill_grace = 5\n",
                2,
                "expected a duration string",
            ),
            (
                "[session]\nkill_grace = \"5\"\n",
                2,
                "invalid duration \"5\": a unit is missing",
            ),
            (
                "[session]\nkill_grace = \"1.5s\"\n",
                2,
                "fractions are not supported",
            ),
            (
                "[session]\nkill_grace = \"5 parsecs\"\n",
                2,
                "unknown unit \"parsecs\"",
            ),
            (
                "[session]\nreap_after_exit = \"400d\"\n",
                2,
                "longer than 365 days",
            ),
            (
                "[viewer]\nstall_deadline = \"0s\"\n",
                2,
                "duration \"0s\" must be more than 0",
            ),
            ("[viewer]\nflow_budget_bytes = 0\n", 2, "0 is out of range"),
            ("[viewer]\nupload_max_bytes = 0\n", 2, "0 is out of range"),
            (
                "listen = \"localhost:1977\"\n",
                1,
                "invalid listen address \"localhost:1977\"",
            ),
            ("listen = \"127.0.0.1\"\n", 1, "invalid listen address"),
            ("listen = 1977\n", 1, "invalid type: integer `1977`"),
            (
                "[assistants.a]\nname = \"A\"\ncommand = []\n",
                3,
                "the command is empty",
            ),
            (
                "[assistants.a]\ncommand = [\"\"]\n",
                2,
                "the program (first element of the command) is an empty string",
            ),
            (
                "[assistants.a]\ncommand = \"claude --continue\"\n",
                2,
                "invalid type: string",
            ),
            (
                "[assistants.a]\ncommand = [\"x\"]\nresume = []\n",
                3,
                "the command is empty",
            ),
            (
                "[assistants.a]\ncommand = [\"x\"]\nyolo = [1]\n",
                3,
                "invalid type: integer `1`",
            ),
            (
                "[assistants.a]\nname = \"  \"\ncommand = [\"x\"]\n",
                2,
                "name must not be empty",
            ),
            (
                "[assistants.a]\ncommand = [\"x\"]\nenv = { \"A=B\" = \"1\" }\n",
                3,
                "invalid environment variable name \"A=B\"",
            ),
            (
                "[assistants.a]\ncommand = [\"x\"]\nenv = { A = 1 }\n",
                3,
                "invalid type: integer `1`, expected a string",
            ),
            (
                "[assistants.a]\nname = \"A\"\n",
                1,
                "missing field `command`",
            ),
            (
                "[assistants.Claude]\ncommand = [\"x\"]\n",
                1,
                "invalid assistant key \"Claude\"",
            ),
            (
                "[assistants.\"my agent\"]\ncommand = [\"x\"]\n",
                1,
                "invalid assistant key \"my agent\"",
            ),
            (
                "\n[assistants.a]\ncommand = [\"x\"]\nyolo_env = { X = \"1\" }\n",
                2,
                "yolo_env is set but yolo is not",
            ),
            ("[session]\nrows = 10\nrows = 11\n", 3, "duplicate key"),
            ("[session\nrows = 10\n", 1, "invalid table header; expected"),
        ];
        for (text, line, reason_start) in cases {
            let (got_line, _, reason) = placed(text);
            assert_eq!(got_line, *line, "line for {text:?}: {reason}");
            assert!(
                reason.contains(reason_start),
                "reason for {text:?}: {reason:?} lacks {reason_start:?}"
            );
        }
    }

    #[test]
    fn message_limit_must_exceed_upload_limit() {
        // Raising only the upload limit points at the line the user wrote.
        let (line, col, reason) = placed("# mine\n[viewer]\nupload_max_bytes = 134217728\n");
        assert_eq!((line, col), (3, 20));
        assert!(
            reason.starts_with(
                "max_message_bytes (67174400) must be more than upload_max_bytes (134217728)"
            ),
            "{reason}"
        );
        let (line, _, _) = placed("[viewer]\nmax_message_bytes = 1000\n");
        assert_eq!(line, 2);
        let (line, _, _) = placed("[viewer]\nupload_max_bytes = 1000\nmax_message_bytes = 1000\n");
        assert_eq!(line, 3, "the max is blamed when the user set both");
        let c = from_toml_str(
            "[viewer]\nupload_max_bytes = 1000\nmax_message_bytes = 1001\n",
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            (c.viewer.upload_max_bytes, c.viewer.max_message_bytes),
            (1000, 1001)
        );
    }

    #[test]
    fn error_display_is_one_line_with_place() {
        assert_eq!(
            err("[session]\nrows = 0\n").to_string(),
            "test.toml:2:8: 0 is out of range: expected an integer from 1 to 500"
        );
    }

    #[test]
    fn line_column_counts_characters() {
        let text = "a\nbé c\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 2), (2, 1));
        assert_eq!(line_column(text, 5), (2, 3), "é is one column");
        assert_eq!(line_column(text, 100), (3, 1));
    }

    #[test]
    fn durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("5s"), Duration::from_secs(5));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("10m"), Duration::from_secs(600));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("2d"), Duration::from_secs(2 * 86400));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok(" 1m 30s "), Duration::from_secs(90));
        assert_eq!(ok("5 sec"), Duration::from_secs(5));
        assert_eq!(ok("365d"), Duration::from_secs(365 * 86400));
        for bad in [
            "",
            " ",
            "5",
            "s",
            "-1s",
            "1.5s",
            "5x",
            "1h 30",
            "365d1ms",
            "99999999999999999999s",
            "1e3s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    /// A file on disk, removed when dropped.
    struct TempFile(PathBuf);
    impl TempFile {
        fn new(name: &str, text: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("ptyhub-config-{}-{name}", std::process::id()));
            std::fs::write(&path, text).unwrap();
            TempFile(path)
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn load_precedence_override_file_default() {
        let default = load(None, None).unwrap();
        assert_eq!(default.listen, "127.0.0.1:1977".parse().unwrap());
        assert_eq!(default.source, DEFAULT_ORIGIN);

        let file = TempFile::new("listen.toml", "listen = \"127.0.0.1:2000\"\n");
        let from_file = load(Some(&file.0), None).unwrap();
        assert_eq!(from_file.listen, "127.0.0.1:2000".parse().unwrap());
        assert!(from_file.source.starts_with(&file.0.display().to_string()));

        let overridden = load(Some(&file.0), Some("127.0.0.1:3000")).unwrap();
        assert_eq!(overridden.listen, "127.0.0.1:3000".parse().unwrap());
        assert!(
            overridden.source.contains("from --listen or PTYHUB_LISTEN"),
            "{}",
            overridden.source
        );

        let overridden = load(None, Some("[::1]:4000")).unwrap();
        assert_eq!(overridden.listen, "[::1]:4000".parse().unwrap());

        match load(None, Some("localhost:1977")) {
            Err(e @ ConfigError::Listen { .. }) => {
                assert!(e.to_string().starts_with(
                    "invalid listen address \"localhost:1977\" (from --listen or PTYHUB_LISTEN): "
                ));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn load_reports_file_problems_with_path() {
        let missing = std::env::temp_dir().join("ptyhub-no-such-config.toml");
        let e = load(Some(&missing), None).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }));
        assert!(
            e.to_string()
                .starts_with(&format!("cannot read config file {}: ", missing.display())),
            "{e}"
        );

        let file = TempFile::new("bad.toml", "[session]\nkill_grace = \"1s\"\nbogus = true\n");
        let e = load(Some(&file.0), Some("127.0.0.1:3000")).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{}:3:1: unknown field `bogus`", file.0.display())),
            "{msg}"
        );
    }
}
