//! Layering: each source (the embedded default, then the user's file) parsed into a raw layer
//! whose every key is optional, laid over the one below key by key, and finished into a
//! [`Config`]; spans are kept so that errors, even from checks made after parsing, name the
//! file, line and column.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::deploy::{self, RawProxy, RawServer, RawTls};
use super::values::{
    AnyDuration, Argv, AssistantKey, ChatHistory, Cols, DisplayName, EnvVars, FailedAuthPerMinute,
    FlowBudgetBytes, Listen, MaxChatChars, MaxConnectionsPerIp, MaxExecs, MaxMessageBytes,
    MaxNameChars, MaxSessions, MaxViewersPerSession, OutputLogBytes, PositiveDuration, Rows,
    ScrollbackApiBytes, ScrollbackLines, Token, UploadMaxBytes,
};
use super::values::{KeepDays, RecordingBytes};
use super::{
    Assistant, AuthConfig, Config, ConfigError, LimitsConfig, RecordingConfig, SessionConfig,
    ViewerConfig, DEFAULT_ORIGIN, DEFAULT_TOML,
};

/// The embedded default, with the user layer `(text, origin)` laid over it when given.
pub(super) fn build(user: Option<(&str, &str)>) -> Result<Config, ConfigError> {
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
        scrollback_api_bytes: o.scrollback_api_bytes.or(b.scrollback_api_bytes),
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
        max_execs: o.max_execs.or(b.max_execs),
        header_timeout: o.header_timeout.or(b.header_timeout),
    };
    let (b, o) = (base.recording, over.recording);
    let recording = RawRecording {
        enabled: o.enabled.or(b.enabled),
        dir: o.dir.or(b.dir),
        max_bytes_per_session: o.max_bytes_per_session.or(b.max_bytes_per_session),
        keep_days: o.keep_days.or(b.keep_days),
        input: o.input.or(b.input),
    };
    let server = RawServer {
        base_path: over.server.base_path.or(base.server.base_path),
    };
    // Cert and key go together: a user file's `[tls]` replaces the default's whole.
    let tls = if over.tls.cert.is_some() || over.tls.key.is_some() {
        over.tls
    } else {
        base.tls
    };
    let proxy = RawProxy {
        trusted: over.proxy.trusted.or(base.proxy.trusted),
        max_connections: over.proxy.max_connections.or(base.proxy.max_connections),
    };
    RawConfig {
        cluster: base.cluster.merge(over.cluster),
        listen: over.listen.or(base.listen),
        server,
        tls,
        proxy,
        recording,
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
        scrollback_api_bytes: to_usize(
            need(s.scrollback_api_bytes, "session.scrollback_api_bytes")?.0,
        ),
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
        max_execs: to_usize(need(l.max_execs, "limits.max_execs")?.0),
        header_timeout: need(l.header_timeout, "limits.header_timeout")?.0,
    };
    let auth = AuthConfig {
        token: raw.auth.token.map(|t| t.0),
        allowed_origins: raw.auth.allowed_origins.unwrap_or_default(),
    };
    let r = raw.recording;
    let recording = RecordingConfig {
        enabled: need(r.enabled, "recording.enabled")?,
        dir: r.dir.unwrap_or_else(super::default_recording_dir),
        max_bytes_per_session: need(r.max_bytes_per_session, "recording.max_bytes_per_session")?.0,
        keep: std::time::Duration::from_secs(need(r.keep_days, "recording.keep_days")?.0 * 86_400),
        input: need(r.input, "recording.input")?,
    };
    let tls = deploy::tls(raw.tls).map_err(|reason| ConfigError::Unplaced {
        origin: source.clone(),
        reason,
    })?;
    Ok(Config {
        cluster: raw.cluster.finish(),
        listen: need(raw.listen, "listen")?.0,
        server: super::ServerConfig {
            base_path: raw.server.base_path.map(|p| p.0).unwrap_or_default(),
        },
        tls,
        proxy: super::ProxyConfig {
            trusted: raw
                .proxy
                .trusted
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.0)
                .collect(),
            max_connections: to_usize(need(raw.proxy.max_connections, "proxy.max_connections")?.0),
        },
        recording,
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
    server: RawServer,
    #[serde(default)]
    tls: RawTls,
    #[serde(default)]
    proxy: RawProxy,
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
    #[serde(default)]
    recording: RawRecording,
    #[serde(default)]
    cluster: super::cluster::RawCluster,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRecording {
    enabled: Option<bool>,
    /// Unset in the embedded default: it depends on the environment.
    dir: Option<std::path::PathBuf>,
    max_bytes_per_session: Option<RecordingBytes>,
    keep_days: Option<KeepDays>,
    input: Option<bool>,
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
    max_sessions: Option<MaxSessions>,
    max_viewers_per_session: Option<MaxViewersPerSession>,
    max_chat_chars: Option<MaxChatChars>,
    max_name_chars: Option<MaxNameChars>,
    failed_auth_per_minute: Option<FailedAuthPerMinute>,
    max_connections_per_ip: Option<MaxConnectionsPerIp>,
    max_execs: Option<MaxExecs>,
    header_timeout: Option<PositiveDuration>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSession {
    rows: Option<Rows>,
    cols: Option<Cols>,
    scrollback_lines: Option<ScrollbackLines>,
    output_log_bytes: Option<OutputLogBytes>,
    kill_grace: Option<AnyDuration>,
    reap_after_exit: Option<AnyDuration>,
    chat_history: Option<ChatHistory>,
    scrollback_api_bytes: Option<ScrollbackApiBytes>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawViewer {
    stall_deadline: Option<PositiveDuration>,
    flow_budget_bytes: Option<FlowBudgetBytes>,
    // Spanned: compared with each other after parsing, and the error must still point here.
    max_message_bytes: Option<Spanned<MaxMessageBytes>>,
    upload_max_bytes: Option<Spanned<UploadMaxBytes>>,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::from_toml_str;

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
                "[session]\nscrollback_api_bytes = 0\n",
                2,
                "0 is out of range: expected an integer from 1 to 16777216",
            ),
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
}
