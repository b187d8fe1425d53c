//! How a session's program learns to report its state: the environment every program gets
//! (`PTYHUB_URL`, `PTYHUB_STATE_TOKEN`; `PTYHUB_SESSION` is set at spawn), and, for an
//! assistant with `state_hooks`, its own hooks wired to `ptyhub notify` as ptyhub starts it:
//! Claude Code's `--settings` (inline JSON, merged with the user's settings), Codex's
//! `-c notify=[…]`, Gemini CLI's per-session system-defaults file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tracing::warn;
use uuid::Uuid;

use crate::config::StateHooks;

/// How a program reaches its daemon: `http://127.0.0.1:PORT` and the base path.
pub const URL_ENV: &str = "PTYHUB_URL";
/// The session's capability token: it can set that session's state and nothing else.
pub const TOKEN_ENV: &str = "PTYHUB_STATE_TOKEN";
/// Gemini CLI's lowest settings layer (its hooks lists are concatenated with the user's).
pub const GEMINI_DEFAULTS_ENV: &str = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH";
/// The system-defaults file Gemini CLI reads when the variable is not set.
const GEMINI_SYSTEM_DEFAULTS: &str = "/etc/gemini-cli/system-defaults.json";

/// Seconds Claude Code gives one hook (it waits for hooks on `UserPromptSubmit`: keep short;
/// `ptyhub notify` gives up after 2 s anyway).
const CLAUDE_HOOK_TIMEOUT_S: u64 = 5;

/// Claude Code's events ptyhub listens to, with their matcher (`None`: every one).
const CLAUDE_EVENTS: [(&str, Option<&str>); 7] = [
    ("UserPromptSubmit", None),
    ("PreToolUse", None),
    ("PostToolUse", None),
    ("PermissionRequest", None),
    (
        "Notification",
        Some("permission_prompt|elicitation_dialog|elicitation_url_dialog"),
    ),
    ("Stop", None),
    ("StopFailure", None),
];

/// Gemini CLI's events ptyhub listens to.
const GEMINI_EVENTS: [&str; 5] = [
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "Notification",
    "AfterAgent",
];

/// What a session needs to start its program so that it can report its state.
#[derive(Debug, Clone)]
pub struct Wiring {
    /// The assistant's `state_hooks` (none for a creator's own command).
    pub hooks: StateHooks,
    /// The `ptyhub` binary the hooks run.
    pub ptyhub: PathBuf,
    /// `PTYHUB_URL`.
    pub url: String,
    /// `PTYHUB_STATE_TOKEN`.
    pub token: String,
    /// The session.
    pub session: Uuid,
    /// Where per-session files go (Gemini's settings): private to the daemon's user.
    pub dir: PathBuf,
}

impl Wiring {
    /// The argument array and environment that start `argv` with `env` wired: the state
    /// variables added to `env`, and the assistant's hooks to `argv` (or, for Gemini, to a
    /// file the environment names).
    pub fn launch(
        &self,
        argv: &[String],
        env: &BTreeMap<String, String>,
    ) -> (Vec<String>, BTreeMap<String, String>) {
        let mut env = env.clone();
        env.insert(URL_ENV.to_owned(), self.url.clone());
        env.insert(TOKEN_ENV.to_owned(), self.token.clone());
        let argv = match self.hooks {
            StateHooks::None => argv.to_vec(),
            StateHooks::Claude => claude_argv(argv, &self.ptyhub),
            StateHooks::Codex => codex_argv(argv, &self.ptyhub),
            StateHooks::Gemini => {
                match self.gemini_file(env.get(GEMINI_DEFAULTS_ENV).map(PathBuf::from)) {
                    Ok(path) => {
                        env.insert(GEMINI_DEFAULTS_ENV.to_owned(), path.display().to_string());
                    }
                    Err(e) => {
                        warn!(session = %self.session, "Gemini's hooks not wired: {e}");
                    }
                }
                argv.to_vec()
            }
        };
        (argv, env)
    }

    /// The session's Gemini settings file.
    pub fn gemini_path(&self) -> PathBuf {
        self.dir.join(format!("gemini-{}.json", self.session))
    }

    /// Removes what [`Wiring::launch`] left on disk (the session ended).
    pub fn clean_up(&self) {
        if self.hooks == StateHooks::Gemini {
            let _ = std::fs::remove_file(self.gemini_path());
        }
    }

    /// Writes the session's Gemini settings (mode 600): the system defaults Gemini would have
    /// read (`base`, else its system file), with ptyhub's hooks added to their lists. The
    /// command carries the URL, the session and the token itself: Gemini may strip variables
    /// named like tokens from a hook's environment.
    fn gemini_file(&self, base: Option<PathBuf>) -> std::io::Result<PathBuf> {
        use std::io::Write as _;
        use std::os::unix::fs::DirBuilderExt as _;
        let base = base.unwrap_or_else(|| PathBuf::from(GEMINI_SYSTEM_DEFAULTS));
        let mut settings = match std::fs::read(&base) {
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| {
                    warn!(file = %base.display(), "Gemini's system defaults are not a JSON object: ptyhub's hooks replace them for this session");
                    json!({})
                }),
            Err(_) => json!({}),
        };
        let command = format!(
            "{} notify --from gemini --url {} --session {} --token {}",
            sh_quote(&self.ptyhub.to_string_lossy()),
            sh_quote(&self.url),
            self.session,
            sh_quote(&self.token)
        );
        let hook = json!({"hooks": [{"type": "command", "name": "ptyhub", "command": command, "timeout": 5000}]});
        if !settings["hooks"].is_object() {
            settings["hooks"] = json!({});
        }
        for event in GEMINI_EVENTS {
            match settings["hooks"][event].as_array_mut() {
                Some(list) => list.push(hook.clone()),
                None => settings["hooks"][event] = json!([hook.clone()]),
            }
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let path = self.gemini_path();
        let mut file = tempfile::Builder::new()
            .prefix(".gemini-")
            .tempfile_in(&self.dir)?;
        file.write_all(settings.to_string().as_bytes())?;
        file.persist(&path).map_err(|e| e.error)?;
        Ok(path)
    }
}

/// How a program on this host reaches a daemon listening on `addr` (`tls`: its own https),
/// under `base`: a wildcard address is reached on loopback.
pub fn daemon_url(addr: std::net::SocketAddr, tls: bool, base: &str) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if tls { "https" } else { "http" };
    format!(
        "{scheme}://{}{base}",
        std::net::SocketAddr::new(ip, addr.port())
    )
}

/// `argv` with Claude Code's `--settings` (inline JSON: hooks running `ptyhub notify --from
/// claude`) after the program, unless it has `--settings` already.
fn claude_argv(argv: &[String], ptyhub: &Path) -> Vec<String> {
    if argv
        .iter()
        .any(|a| a == "--settings" || a.starts_with("--settings="))
    {
        return argv.to_vec();
    }
    let command = format!(
        "{} notify --from claude",
        sh_quote(&ptyhub.to_string_lossy())
    );
    let mut hooks = serde_json::Map::new();
    for (event, matcher) in CLAUDE_EVENTS {
        let mut entry = json!({"hooks": [{"type": "command", "command": command, "timeout": CLAUDE_HOOK_TIMEOUT_S}]});
        if let Some(m) = matcher {
            entry["matcher"] = json!(m);
        }
        hooks.insert(event.to_owned(), json!([entry]));
    }
    let settings = json!({ "hooks": hooks }).to_string();
    insert_after_program(argv, ["--settings".to_owned(), settings])
}

/// `argv` with Codex's `-c notify=[…]` after the program (`-c` is global, so before any
/// subcommand such as `resume`), unless it sets `notify` already.
fn codex_argv(argv: &[String], ptyhub: &Path) -> Vec<String> {
    if argv.iter().any(|a| a.starts_with("notify=")) {
        return argv.to_vec();
    }
    let words = [
        ptyhub.to_string_lossy().into_owned(),
        "notify".to_owned(),
        "--from".to_owned(),
        "codex".to_owned(),
    ];
    let list = toml::Value::Array(words.into_iter().map(toml::Value::String).collect());
    insert_after_program(argv, ["-c".to_owned(), format!("notify={list}")])
}

fn insert_after_program<const N: usize>(argv: &[String], extra: [String; N]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len() + N);
    out.extend(argv.first().cloned());
    out.extend(extra);
    out.extend(argv.iter().skip(1).cloned());
    out
}

/// `s` as one word for `sh`.
fn sh_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn wiring(hooks: StateHooks, dir: &Path) -> Wiring {
        Wiring {
            hooks,
            ptyhub: PathBuf::from("/opt/my tools/ptyhub"),
            url: "http://127.0.0.1:1977".into(),
            token: "t0k".into(),
            session: Uuid::nil(),
            dir: dir.to_owned(),
        }
    }

    #[test]
    fn the_url_a_program_reaches_its_daemon_by() {
        let url = |a: &str, tls, base| daemon_url(a.parse().unwrap(), tls, base);
        assert_eq!(url("0.0.0.0:1977", false, ""), "http://127.0.0.1:1977");
        assert_eq!(url("[::]:80", true, "/ptyhub"), "https://[::1]:80/ptyhub");
        assert_eq!(url("10.0.0.2:1977", false, ""), "http://10.0.0.2:1977");
    }

    #[test]
    fn claude_gets_its_hooks_as_settings() {
        let dir = tempfile::tempdir().unwrap();
        let w = wiring(StateHooks::Claude, dir.path());
        let (out, env) = w.launch(&argv(&["claude", "--continue"]), &BTreeMap::new());
        assert_eq!(out[0], "claude");
        assert_eq!(out[1], "--settings");
        assert_eq!(out[3], "--continue");
        let settings: Value = serde_json::from_str(&out[2]).unwrap();
        let stop = &settings["hooks"]["Stop"][0]["hooks"][0];
        assert_eq!(stop["type"], "command");
        assert_eq!(
            stop["command"],
            "'/opt/my tools/ptyhub' notify --from claude"
        );
        assert_eq!(
            settings["hooks"]["Notification"][0]["matcher"],
            "permission_prompt|elicitation_dialog|elicitation_url_dialog"
        );
        assert!(settings["hooks"]["PermissionRequest"].is_array());
        assert_eq!(env[URL_ENV], "http://127.0.0.1:1977");
        assert_eq!(env[TOKEN_ENV], "t0k");
        // The user's own --settings are left alone.
        let own = argv(&["claude", "--settings", "/home/me/s.json"]);
        assert_eq!(w.launch(&own, &BTreeMap::new()).0, own);
    }

    #[test]
    fn codex_gets_notify_before_its_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let w = wiring(StateHooks::Codex, dir.path());
        let (out, _) = w.launch(&argv(&["codex", "resume", "--last"]), &BTreeMap::new());
        assert_eq!(
            out,
            argv(&[
                "codex",
                "-c",
                r#"notify = ["/opt/my tools/ptyhub", "notify", "--from", "codex"]"#
                    .replace(" = ", "=")
                    .as_str(),
                "resume",
                "--last"
            ])
        );
        let parsed: toml::Table = out[2].parse().unwrap();
        assert_eq!(parsed["notify"][0].as_str(), Some("/opt/my tools/ptyhub"));
    }

    #[test]
    fn gemini_gets_a_settings_file_that_keeps_the_system_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("defaults.json");
        std::fs::write(
            &base,
            r#"{"general":{"vimMode":true},"hooks":{"AfterAgent":[{"hooks":[{"type":"command","command":"mine"}]}]}}"#,
        )
        .unwrap();
        let w = wiring(StateHooks::Gemini, &dir.path().join("sessions"));
        let env = BTreeMap::from([(GEMINI_DEFAULTS_ENV.to_owned(), base.display().to_string())]);
        let (out, env) = w.launch(&argv(&["gemini"]), &env);
        assert_eq!(out, argv(&["gemini"]));
        let path = PathBuf::from(&env[GEMINI_DEFAULTS_ENV]);
        assert_eq!(path, w.gemini_path());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let written: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(written["general"]["vimMode"], true);
        let after = written["hooks"]["AfterAgent"].as_array().unwrap();
        assert_eq!(after.len(), 2, "the system's hook and ptyhub's");
        let command = after[1]["hooks"][0]["command"].as_str().unwrap();
        assert!(command.contains("notify --from gemini --url http://127.0.0.1:1977"));
        assert!(command.ends_with("--token t0k"));
        w.clean_up();
        assert!(!path.exists());
    }
}
