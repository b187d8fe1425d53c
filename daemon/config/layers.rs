//! Layering: each source (the embedded default, then the user's file) parsed into a raw layer
//! whose every key is optional, the checks across keys, each layer laid over the one below key
//! by key, and the result finished into a [`Config`]; spans are kept so that errors, even from
//! checks made after parsing, name the file, line and column.
//!
//! The tables' keys are declared in `keys`; here are the top level (`listen` and the tables),
//! `[assistants]`, `[lsp]`, and how the layers meet.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use toml::Spanned;

use super::deploy::RawTls;
use super::keys::{
    RawAttention, RawAudit, RawAuth, RawCluster, RawLimits, RawNotify, RawProxy, RawRecording,
    RawServer, RawSession, RawViewer,
};
use super::patterns::{RawPatterns, StateHooks};
use super::section::required;
use super::values::{Argv, AssistantKey, DisplayName, EnvVars, LangKey, Listen};
use super::{Assistant, Config, ConfigError, LanguageServer, DEFAULT_ORIGIN, DEFAULT_TOML};

/// The embedded default, with the user layer `(text, origin)` laid over it when given.
pub(super) fn build(user: Option<(&str, &str)>) -> Result<Config, ConfigError> {
    let mut layers = vec![Layer::parse(DEFAULT_TOML, DEFAULT_ORIGIN)?];
    let source = match user {
        None => DEFAULT_ORIGIN.to_owned(),
        Some((text, origin)) => {
            layers.push(Layer::parse(text, origin)?);
            format!("{origin} over the {DEFAULT_ORIGIN}")
        }
    };
    check_message_limits(&layers)?;
    check_cleartext_peers(&layers)?;
    let merged = layers
        .into_iter()
        .fold(RawConfig::default(), |below, layer| below.merge(layer.raw));
    finish(merged, source)
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
        let layer = Layer {
            text,
            origin,
            raw: parse(text, origin)?,
        };
        for table in layer.raw.assistants.values() {
            let a = table.get_ref();
            if a.yolo.is_none() && !a.yolo_env.0.is_empty() {
                return Err(layer.error_at(
                    table.span().start,
                    "yolo_env is set but yolo is not: add a yolo command or remove yolo_env",
                ));
            }
        }
        if let Some((offset, why)) = super::notify::misplaced_ntfy(&layer.raw.notify) {
            return Err(layer.error_at(offset, why));
        }
        Ok(layer)
    }

    fn error_at(&self, offset: usize, reason: impl Into<String>) -> ConfigError {
        invalid_at(self.text, self.origin, offset, reason.into())
    }
}

/// One source's text read as `R`; a syntax error, an unknown key or a bad value is placed at
/// its line and column.
pub(super) fn parse<R: DeserializeOwned>(text: &str, origin: &str) -> Result<R, ConfigError> {
    toml::from_str(text).map_err(|e| {
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
    })
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

// ---- checks across keys ----------------------------------------------------------------
//
// Made on the layers before they are merged, so that the error points at the value that
// wins, in the file that holds it.

/// The value of a key that wins (the one set by the highest layer that sets it), with the
/// index of that layer.
fn winning<'l, T>(
    layers: &'l [Layer<'_>],
    key: impl Fn(&'l RawConfig) -> Option<&'l Spanned<T>>,
) -> Option<(usize, &'l Spanned<T>)> {
    layers
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, layer)| key(&layer.raw).map(|value| (i, value)))
}

/// `max_message_bytes` must leave room for an upload frame's header, whichever layer set each
/// of the two; the error points at the one set higher (the one the user wrote, if they wrote
/// one), the message limit when both come from the same layer.
fn check_message_limits(layers: &[Layer<'_>]) -> Result<(), ConfigError> {
    let max = winning(layers, |r| r.viewer.max_message_bytes.as_ref());
    let upload = winning(layers, |r| r.viewer.upload_max_bytes.as_ref());
    let (Some((max_at, max)), Some((upload_at, upload))) = (max, upload) else {
        return Ok(()); // missing keys are reported by `finish`
    };
    let (max_bytes, upload_bytes) = (max.get_ref().0, upload.get_ref().0);
    if max_bytes > upload_bytes {
        return Ok(());
    }
    let reason = format!(
        "max_message_bytes ({max_bytes}) must be more than upload_max_bytes ({upload_bytes}): \
         an upload frame carries a header and the file name besides the file"
    );
    let (at, span) = if upload_at > max_at {
        (upload_at, upload.span())
    } else {
        (max_at, max.span())
    };
    Err(layers[at].error_at(span.start, reason))
}

/// A peer over plain `http://` beyond this machine would get the token in the clear: refused
/// unless `allow_cleartext_peers` (from any layer) says otherwise. The error points at the
/// peers that win.
fn check_cleartext_peers(layers: &[Layer<'_>]) -> Result<(), ConfigError> {
    let allowed = winning(layers, |r| r.cluster.allow_cleartext_peers.as_ref())
        .is_some_and(|(_, allow)| *allow.get_ref());
    let Some((at, peers)) = winning(layers, |r| r.cluster.peers.as_ref()) else {
        return Ok(());
    };
    let Some(peer) = peers.get_ref().iter().find_map(|p| p.cleartext()) else {
        return Ok(());
    };
    if allowed {
        return Ok(());
    }
    let reason = format!(
        "peer {peer:?} is plain http beyond this machine: this host's token would cross the \
         network in the clear (use https://, or set allow_cleartext_peers = true in [cluster] \
         for a network you trust)"
    );
    Err(layers[at].error_at(peers.span().start, reason))
}

// ---- the file as written ---------------------------------------------------------------
//
// Every field is optional so that one shape serves the embedded default and a partial user
// file; `deny_unknown_fields` turns a typo into an error at its line. Each value type checks
// itself while it is deserialised, so the TOML parser attaches the position for us.

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Spanned<Listen>>,
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
    lsp: BTreeMap<LangKey, RawLanguageServer>,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    recording: RawRecording,
    #[serde(default)]
    cluster: RawCluster,
    #[serde(default)]
    notify: RawNotify,
    #[serde(default)]
    attention: RawAttention,
    #[serde(default)]
    audit: RawAudit,
}

impl RawConfig {
    /// `over` laid on `self`: keys one by one, assistants table by table (but for their
    /// attention settings, `state` and `state_hooks`, which a table that leaves them out takes
    /// from the one it replaces), language servers table by table, `[tls]` whole.
    fn merge(self, over: RawConfig) -> RawConfig {
        let mut lsp = self.lsp;
        lsp.extend(over.lsp);
        let mut assistants = self.assistants;
        for (key, mut table) in over.assistants {
            if let Some(below) = assistants.remove(&key) {
                let (below, mine) = (below.into_inner(), table.get_mut());
                if mine.state.is_none() {
                    mine.state = below.state;
                }
                if mine.state_hooks.is_none() {
                    mine.state_hooks = below.state_hooks;
                }
            }
            assistants.insert(key, table);
        }
        RawConfig {
            listen: over.listen.or(self.listen),
            server: self.server.merge(over.server),
            tls: self.tls.merge(over.tls),
            proxy: self.proxy.merge(over.proxy),
            session: self.session.merge(over.session),
            viewer: self.viewer.merge(over.viewer),
            assistants,
            lsp,
            auth: self.auth.merge(over.auth),
            limits: self.limits.merge(over.limits),
            recording: self.recording.merge(over.recording),
            cluster: self.cluster.merge(over.cluster),
            notify: self.notify.merge(over.notify),
            attention: self.attention.merge(over.attention),
            audit: self.audit.merge(over.audit),
        }
    }
}

/// Every layer merged, as the daemon reads it; `source` says where it came from.
fn finish(raw: RawConfig, source: String) -> Result<Config, ConfigError> {
    let tls = raw.tls.finish().map_err(|reason| ConfigError::Unplaced {
        origin: source.clone(),
        reason,
    })?;
    Ok(Config {
        listen: required(raw.listen, "listen")?,
        server: raw.server.finish()?,
        tls,
        proxy: raw.proxy.finish()?,
        session: raw.session.finish()?,
        viewer: raw.viewer.finish()?,
        assistants: raw
            .assistants
            .into_iter()
            .map(|(key, table)| {
                let assistant = table.into_inner().finish(&key.0);
                (key.0, assistant)
            })
            .collect(),
        lsp: raw
            .lsp
            .into_iter()
            .map(|(key, table)| {
                let server = LanguageServer {
                    command: table.command.0,
                };
                (key.0, server)
            })
            .collect(),
        auth: raw.auth.finish()?,
        limits: raw.limits.finish()?,
        recording: raw.recording.finish()?,
        cluster: raw.cluster.finish()?,
        notify: raw.notify.finish()?,
        attention: raw.attention.finish()?,
        audit: raw.audit.finish()?,
        source,
    })
}

/// `[lsp.KEY]` as written: a user file's table replaces the default's of the same key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLanguageServer {
    command: Argv,
}

/// `[assistants.KEY]` as written: a user file's table replaces the default's of the same key
/// whole, so only `command` is required and nothing is merged key by key.
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
    state_hooks: Option<StateHooks>,
    state: Option<RawPatterns>,
}

impl RawAssistant {
    /// The assistant of that key as the daemon reads it.
    fn finish(self, key: &str) -> Assistant {
        Assistant {
            name: self.name.map_or_else(|| key.to_owned(), |n| n.0),
            command: self.command.0,
            resume: self.resume.map(|c| c.0),
            yolo: self.yolo.map(|c| c.0),
            env: self.env.0,
            yolo_env: self.yolo_env.0,
            state_hooks: self.state_hooks.unwrap_or_default(),
            state: self.state.map(RawPatterns::finish).unwrap_or_default(),
        }
    }
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

    #[test]
    fn single_sign_on_keys() {
        use crate::auth::Scopes;
        let d = Config::default();
        assert!(d.auth.user_header.is_none(), "off unless set");
        assert_eq!(d.auth.default_scopes, Scopes::VIEW);
        assert!(d.auth.users.is_empty());
        let c = from_toml_str(
            "[auth]\nuser_header = \"X-Forwarded-Email\"\ndefault_scopes = []\n\
             [auth.users]\n\"alice@example.com\" = [\"admin\"]\n\"bob\" = [\"view\", \"exec\"]\n",
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            c.auth.user_header.as_ref().map(|h| h.as_str()),
            Some("x-forwarded-email")
        );
        assert_eq!(c.auth.default_scopes, Scopes::NONE);
        assert_eq!(c.auth.users["alice@example.com"], Scopes::ADMIN);
        assert_eq!(c.auth.users["bob"], Scopes::VIEW.with(Scopes::EXEC));
        let (line, _, reason) = placed("[auth.users]\n\"carol\" = [\"root\"]\n");
        assert_eq!(line, 2);
        assert!(
            reason.contains("unknown scope \"root\": the scopes are view, write, exec and admin"),
            "{reason}"
        );
        let (_, _, reason) = placed("[auth]\ndefault_scopes = [\"viewer\"]\n");
        assert!(reason.contains("unknown scope \"viewer\""), "{reason}");
        let (_, _, reason) = placed("[auth]\nuser_header = \"X Email\"\n");
        assert!(reason.contains("invalid header name"), "{reason}");
        let (_, _, reason) = placed("[auth.users]\n\"a, b\" = [\"view\"]\n");
        assert!(reason.contains("invalid user name"), "{reason}");
    }
}
