//! Configuration: the embedded default, a TOML file, environment variables and flags, merged into one Config.
//!
//! `config/ptyhub.toml` is both the documented example and the default compiled into the
//! binary, so the two can never disagree. A user file is laid over it key by key (assistant
//! tables replace whole assistants), then the listen address from a flag or the environment
//! wins over both. Every value is checked while it is read, so a mistake is reported with the
//! file, line and column it was written at, and start-up stops there instead of running with a
//! setting nobody asked for.
//!
//! This module owns [`Config`] and [`load`]. Each table's keys are written once, in `keys`
//! (the `section!` macro of `section` makes from them the struct the daemon reads, the table
//! as written, the merge and the finish); how the sources are parsed and laid over each other,
//! and the checks across keys, are in `layers`; what each value may be is in `values`; how an
//! assistant's command is resolved and found is in `assistants`; its screen patterns and hook
//! wiring (attention) in `patterns`; language servers (`[lsp.KEY]`) in `lsp`.

mod assistants;
mod cluster;
mod deploy;
mod keys;
mod layers;
mod lsp;
mod notify;
mod patterns;
mod section;
mod values;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use assistants::{argv_problem, program_available, user_shell, Assistant};
pub use deploy::{canonical, TlsConfig};
pub use keys::{
    AttentionConfig, AuditConfig, AuthConfig, ClusterConfig, LimitsConfig, NotifyConfig,
    ProxyConfig, RecordingConfig, ServerConfig, SessionConfig, ViewerConfig,
};
use layers::build;
pub use lsp::LanguageServer;
pub use notify::Webhook;
pub use patterns::{compile as compile_pattern, ScreenPatterns, StateHooks};
pub use values::parse_duration;

/// The embedded default configuration, which is also the documented example.
pub const DEFAULT_TOML: &str = include_str!("../../config/ptyhub.toml");

/// How errors and [`Config::source`] name the embedded default.
pub const DEFAULT_ORIGIN: &str = "embedded default (config/ptyhub.toml)";

/// Environment variable naming the config file (a `--config` flag wins over it).
pub const ENV_CONFIG: &str = "PTYHUB_CONFIG";

/// Environment variable overriding the listen address (a `--listen` flag wins over it).
pub const ENV_LISTEN: &str = "PTYHUB_LISTEN";

/// The whole configuration of the daemon.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address the HTTP/WebSocket server listens on.
    pub listen: SocketAddr,
    /// `[server]`, `[tls]`, `[proxy]`: where it is mounted, its certificate, its proxies.
    pub server: ServerConfig,
    /// `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    /// Trusted reverse proxies.
    pub proxy: ProxyConfig,
    /// Settings of each session.
    pub session: SessionConfig,
    /// Settings of each connected viewer.
    pub viewer: ViewerConfig,
    /// The programs a session can run, by key (the `assistant` query parameter).
    pub assistants: BTreeMap<String, Assistant>,
    /// The language servers, by language (the `{lang}` of `/ws/{id}/lsp/{lang}`).
    pub lsp: BTreeMap<String, LanguageServer>,
    /// Who may connect.
    pub auth: AuthConfig,
    /// Bounds on what clients may use.
    pub limits: LimitsConfig,
    /// Session recordings.
    pub recording: RecordingConfig,
    /// This host's name and its peers.
    pub cluster: ClusterConfig,
    /// Webhooks and the command told of sessions' changes of state.
    pub notify: NotifyConfig,
    /// How each session's state is found.
    pub attention: AttentionConfig,
    /// The audit trail's file and its bound.
    pub audit: AuditConfig,
    /// Where this configuration came from, for logs.
    pub source: String,
}

/// The recordings' directory when the config names none: `recordings` in [`state_dir`].
pub fn default_recording_dir() -> PathBuf {
    state_dir().join("recordings")
}

/// The daemon's state directory (recordings, the generated token): the service's when systemd
/// gives one (`StateDirectory=`, as `$STATE_DIRECTORY`), else `$XDG_STATE_HOME/ptyhub`, else
/// `~/.local/state/ptyhub`.
pub fn state_dir() -> PathBuf {
    // systemd separates several state directories with colons: the first is the service's.
    let systemd = std::env::var("STATE_DIRECTORY")
        .ok()
        .and_then(|dirs| dirs.split(':').next().map(PathBuf::from))
        .filter(|p| p.is_absolute());
    if let Some(dir) = systemd {
        return dir;
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .map(|h| h.join(".local/state"))
        })
        .unwrap_or_else(|| PathBuf::from(".local/state"));
    state.join("ptyhub")
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
        assert_eq!(s.scrollback_api_bytes, 64 * 1024);
        let v = &c.viewer;
        assert_eq!(v.stall_deadline, Duration::from_secs(10));
        assert_eq!(v.flow_budget_bytes, 2 * 1024 * 1024);
        assert_eq!(v.max_message_bytes, 64 * 1024 * 1024 + 64 * 1024);
        assert_eq!(v.upload_max_bytes, 64 * 1024 * 1024);
        // Default::default goes the same way.
        assert_eq!(Config::default().assistants, c.assistants);
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
