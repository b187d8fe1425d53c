//! `ptyhub notify`: a session's program, or an agent's hook, tells its daemon the session's
//! state (`POST /api/sessions/{id}/state` with the session's capability token). It reads
//! `PTYHUB_URL`, `PTYHUB_SESSION` and `PTYHUB_STATE_TOKEN` (or the flags that name them), and
//! with `--from` an agent's hook JSON: on stdin (Claude Code, Gemini CLI) or as its last
//! argument (Codex), of which it sends only the fields the daemon reads.
//!
//! It always exits 0 and prints nothing unless `--verbose`: a hook that fails prints an error
//! into the agent's transcript, and some exit codes make an agent stop.
//!
//! A live upgrade loses no report: a connection made meanwhile waits in the listener's backlog
//! for the new image, and a report the old image could no longer apply (503) or whose
//! connection the handover closed is sent again, all within [`TIMEOUT`].

use std::io::{IsTerminal, Read};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::attention::report::{essentials, Agent};
use crate::attention::wiring::{TOKEN_ENV, URL_ENV};

/// How long the whole report may take, its second tries included: an agent waits for its
/// hooks, and the hooks the daemon wires give up after 5 s (`attention::wiring`). Long enough
/// for a live upgrade whose execs take their whole `session.kill_grace` of 1-3 s to end.
const TIMEOUT: Duration = Duration::from_secs(4);
/// The pause before a report is sent again (the next connection then waits in the backlog
/// until the new image serves it, so this is no busy loop).
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Most of a hook's JSON read from stdin (a tool call may carry a whole file).
const MAX_STDIN: u64 = 16 << 20;

/// What to report, and where (each `None` read from the environment).
#[derive(Debug, Clone, Default)]
pub struct Notify {
    /// `working`, `waiting` or `idle` (without `from`).
    pub state: Option<String>,
    /// Why, for people.
    pub reason: Option<String>,
    /// The agent whose hook JSON is reported: claude, codex or gemini.
    pub from: Option<String>,
    /// Codex's JSON (its last argument).
    pub json: Option<String>,
    /// `PTYHUB_URL`.
    pub url: Option<String>,
    /// `PTYHUB_SESSION`.
    pub session: Option<String>,
    /// `PTYHUB_STATE_TOKEN`.
    pub token: Option<String>,
    /// Say what happened on stderr.
    pub verbose: bool,
}

/// Sends the report; always 0 (see the module's documentation). With `verbose`, says on
/// stderr what happened.
pub fn run(notify: Notify) -> i32 {
    let sent = send(&notify);
    if notify.verbose {
        match sent {
            Ok(()) => eprintln!("ptyhub notify: reported"),
            Err(why) => eprintln!("ptyhub notify: {why}"),
        }
    }
    0
}

fn send(n: &Notify) -> Result<(), String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let url = n.url.clone().or_else(|| env(URL_ENV)).ok_or(format!(
        "{URL_ENV} is not set: this is not a program of a ptyhub session (or give --url)"
    ))?;
    let session = n
        .session
        .clone()
        .or_else(|| env(crate::session::process::SESSION_ENV))
        .ok_or("PTYHUB_SESSION is not set (or give --session)")?;
    let token = n
        .token
        .clone()
        .or_else(|| env(TOKEN_ENV))
        .ok_or(format!("{TOKEN_ENV} is not set (or give --token)"))?;
    let (from, body) = match n.from.as_deref() {
        Some(name) => {
            let agent = Agent::parse(name).ok_or(format!(
                "unknown --from {name:?}: {}",
                Agent::NAMES.join(", ")
            ))?;
            let raw = match agent {
                Agent::Codex => n
                    .json
                    .clone()
                    .ok_or("codex passes its JSON as the last argument: none was given")?
                    .into_bytes(),
                Agent::Claude | Agent::Gemini => stdin()?,
            };
            let value: Value = serde_json::from_slice(&raw)
                .map_err(|e| format!("the hook's JSON does not parse: {e}"))?;
            (Some(agent.as_str()), essentials(&value))
        }
        None => {
            let state = n
                .state
                .clone()
                .ok_or("say --state working|waiting|idle, or --from an agent")?;
            (None, json!({"state": state, "reason": n.reason}))
        }
    };
    let base = url.trim_end_matches('/');
    let mut target = format!("{base}/api/sessions/{session}/state");
    if let Some(from) = from {
        target.push_str("?from=");
        target.push_str(from);
    }
    let parsed = reqwest::Url::parse(&target).map_err(|e| format!("bad URL {target}: {e}"))?;
    let host = parsed.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    // The daemon on this host: its certificate names its public name, not 127.0.0.1, and a
    // capability token that can set a state is all the request carries. Nothing else is
    // reached this way, so no system certificates are loaded either (hooks run often).
    let http = reqwest::Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(loopback)
        .tls_built_in_root_certs(!loopback)
        .build()
        .map_err(|e| format!("cannot start an HTTP client: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let body = body.to_string();
    let deadline = Instant::now() + TIMEOUT;
    runtime.block_on(async move {
        loop {
            let attempt = http
                .post(parsed.clone())
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body.clone())
                .timeout(deadline.saturating_duration_since(Instant::now()))
                .send()
                .await;
            let why = match attempt {
                Ok(resp) if resp.status().is_success() => return Ok(()),
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.text().await.unwrap_or_default();
                    let why = format!("refused (HTTP {}): {}", status.as_u16(), text.trim());
                    // 503: not applied during a live upgrade's handover; anything else is final.
                    if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
                        return Err(why);
                    }
                    why
                }
                Err(e) => {
                    let why = format!("cannot reach ptyhub at {base}: {}", super::one_line(&e));
                    // Nobody listening (a live upgrade keeps listening), or out of time; what
                    // is left is a connection that broke under the request: a handover's.
                    if e.is_connect() || e.is_timeout() {
                        return Err(why);
                    }
                    why
                }
            };
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Err(why);
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    })
}

/// The hook's JSON on stdin (nothing when stdin is a terminal: nobody is going to type it).
fn stdin() -> Result<Vec<u8>, String> {
    let input = std::io::stdin();
    if input.is_terminal() {
        return Err("the hook's JSON is read from stdin, which is a terminal".to_owned());
    }
    let mut raw = Vec::new();
    input
        .lock()
        .take(MAX_STDIN)
        .read_to_end(&mut raw)
        .map_err(|e| format!("cannot read stdin: {e}"))?;
    Ok(raw)
}
