//! Attention (README, "Attention"; docs/protocol.md): every session's state (working, waiting,
//! idle, exited) on the real daemon with real programs. Fake agents in `tests/agents/`: a
//! Claude-Code-like permission prompt that waits (`permission-prompt`), a fake `claude` on PATH
//! that runs the hooks of the `--settings` it was given the way Claude Code does, a fake
//! `codex` that runs its `-c notify`; and a shell that runs `sleep` and returns to its prompt.
//! Each state and transition, each source and their priority, the capability token's limits,
//! `ptyhub wait`, a live upgrade, and bad input.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::sse::{Ev, Sse};
use common::{eventually_async, http, Client, Daemon, TIMEOUT};
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "attention-test-token-0123456789";

/// The test config: a quiet of one second, so rules decide quickly.
fn config(extra: &str) -> String {
    common::config(&format!("[attention]\nquiet = \"1s\"\n\n{extra}"))
}

/// `tests/agents`.
fn agents() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agents")
}

/// A daemon with a token whose PATH finds the fake agents first.
fn daemon(extra: &str) -> Daemon {
    let path = format!(
        "{}:{}",
        agents().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Daemon::start_launch(&config(extra), |l| {
        l.args(["--token", TOKEN]).env("PATH", path)
    })
}

/// Creates a session from `body` with the daemon token; its uuid.
async fn create(d: &Daemon, body: Value) -> String {
    d.create_session(TOKEN, body).await
}

async fn session(d: &Daemon, id: &str) -> Value {
    http()
        .get(d.http(&format!("/api/sessions/{id}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("json")
}

/// Waits until session `id` is in `state` (by the REST API); returns the session.
async fn until_state(d: &Daemon, id: &str, state: &str) -> Value {
    let start = Instant::now();
    loop {
        let s = session(d, id).await;
        if s["state"] == state {
            return s;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "session {id} never {state}: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `POST /api/sessions/{id}/state[?query]` with `token` and `body`.
async fn report(d: &Daemon, id: &str, query: &str, token: &str, body: &str) -> reqwest::Response {
    http()
        .post(d.http(&format!("/api/sessions/{id}/state{query}")))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("POST state")
}

/// The `state` events of session `id`, as JSON.
fn states(events: &[Ev], id: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.event == "state")
        .map(|e| serde_json::from_str::<Value>(&e.data).expect("JSON"))
        .filter(|v| v["session"] == id)
        .collect()
}

/// The daemon's lifecycle events, followed.
async fn events(d: &Daemon) -> Sse {
    Sse::open(
        &d.http(&format!("/api/events?follow=1&token={TOKEN}")),
        None,
    )
    .await
}

/// A session's program that prints its capability token, then waits: the token, and the id.
async fn token_of_a_session(d: &Daemon) -> (String, String) {
    let id = create(
        d,
        json!({"cmd": ["sh", "-c", "echo TOKEN=$PTYHUB_STATE_TOKEN; echo URL=$PTYHUB_URL; exec sleep 600"]}),
    )
    .await;
    let start = Instant::now();
    loop {
        let resp = http()
            .get(d.http(&format!("/api/sessions/{id}/scrollback")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("scrollback");
        let v: Value = resp.json().await.expect("json");
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["scrollback"].as_str().unwrap_or_default())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        // Both lines, whole: the URL line may not be on screen yet when the token's is.
        let url = format!("URL=http://{}", d.addr);
        let token = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("TOKEN="))
            .filter(|t| t.len() == 64);
        if let Some(t) = token.filter(|_| text.lines().any(|l| l.trim().starts_with(&url))) {
            return (id, t.to_owned());
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "no token and PTYHUB_URL ({url}) printed: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The terminal rule: a shell starts working, is idle at its prompt once quiet; `sleep` in
/// the foreground is working ("running sleep"), its prompt back idle again; typing is not
/// work. Every viewer is told: the browser dialect's `status` and `state` messages.
#[tokio::test]
async fn a_shell_is_idle_at_its_prompt_and_working_while_sleep_runs() {
    let d = daemon("");
    let mut ev = events(&d).await;
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, &format!("?assistant=shell&token={TOKEN}"))).await;
    c.wait_screen("$ ").await;
    let id = id.to_string();
    let idle = until_state(&d, &id, "idle").await;
    assert_eq!(idle["reason"], "quiet for 1 s at a shell prompt");
    assert_eq!(idle["stateSource"], "terminal");
    assert!(idle["stateSinceMs"].as_u64().unwrap() > 0);
    assert!(idle["stateSince"].as_str().unwrap().ends_with('Z'));
    c.until("a state message saying idle", |c| {
        c.last("state").is_some_and(|s| s["state"] == "idle")
    })
    .await;
    let told = c.last("state").cloned().expect("state");
    assert_eq!(told["reason"], "quiet for 1 s at a shell prompt");
    assert_eq!(told["stateSource"], "terminal");
    assert_eq!(told["choices"], json!([]));

    c.type_str("sleep 3\r").await;
    let running = until_state(&d, &id, "working").await;
    assert_eq!(running["reason"], "running sleep", "{running:#}");
    let idle_again = until_state(&d, &id, "idle").await;
    assert!(
        idle_again["stateSinceMs"].as_u64() > running["stateSinceMs"].as_u64(),
        "{idle_again:#}"
    );
    // A rejoining viewer's status says the state.
    let mut b = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    let status = b.wait_json("status").await;
    assert_eq!(status["state"], "idle", "{status}");
    assert_eq!(status["stateSource"], "terminal");

    ev.until("working and idle again", |e| {
        let s = states(e, &id);
        s.iter().filter(|v| v["state"] == "idle").count() >= 2
    })
    .await;
    let seen: Vec<(String, String)> = states(&ev.events, &id)
        .iter()
        .map(|v| {
            (
                v["state"].as_str().unwrap().to_owned(),
                v["source"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = seen.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["created", "idle", "working", "idle"], "{seen:?}");
    let working = &states(&ev.events, &id)[2];
    assert_eq!(working["from"], "idle");
    assert_eq!(working["reason"], "running sleep");

    // Typing at the prompt (an echo) is not work.
    c.type_str("echo hi").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(session(&d, &id).await["state"], "idle");
    // Exit: exited, with why, in the session and the lifecycle event.
    c.type_str("\x15exit 3\r").await;
    let exited = until_state(&d, &id, "exited").await;
    assert_eq!(exited["reason"], "exited with code 3");
    assert_eq!(exited["stateSource"], "exit");
    ev.until("exited", |e| {
        states(e, &id).iter().any(|v| v["state"] == "exited")
    })
    .await;
    let last = states(&ev.events, &id).pop().unwrap();
    assert_eq!(
        (&last["reason"], &last["source"], &last["exit_code"]),
        (&json!("exited with code 3"), &json!("exit"), &json!(3))
    );
}

/// The screen rule: a Claude-like permission prompt on screen is `waiting`, with the question
/// and its quick replies; the answer typed, its spinner is `working`; its composer, quiet, is
/// `idle`. The multiplexed socket says it too (`open`, then `state`).
#[tokio::test]
async fn a_permission_prompt_on_screen_is_waiting_with_its_choices() {
    let d = daemon(
        "[assistants.claude]\nname = \"Claude\"\ncommand = [\"permission-prompt\"]\nstate_hooks = \"none\"\n",
    );
    let id = create(&d, json!({"assistant": "claude"})).await;
    let waiting = until_state(&d, &id, "waiting").await;
    assert_eq!(waiting["stateSource"], "screen");
    assert_eq!(waiting["reason"], "Claude asks: Do you want to proceed?");
    assert_eq!(
        waiting["choices"],
        json!([
            {"label": "Yes", "keys": "1"},
            {"label": "Yes, and always allow cargo commands", "keys": "2"},
            {"label": "No", "keys": "3"}
        ])
    );
    // Quiet at its own prompt does not make a waiting screen idle.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(session(&d, &id).await["state"], "waiting");

    let (mut mux, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/ws?token={TOKEN}", d.addr))
            .await
            .expect("mux");
    let open = mux_message(&mut mux, "open").await;
    assert_eq!(open["state"], "waiting", "{open}");
    assert_eq!(open["choices"][0]["keys"], "1");

    // The quick reply's keys reach the program.
    let mut c = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    c.wait_json("ready").await;
    c.type_str("1").await;
    c.wait_screen("answer 1").await;
    let working = until_state(&d, &id, "working").await;
    assert_eq!(working["stateSource"], "screen");
    assert_eq!(working["reason"], "Claude is working");
    let told = mux_message(&mut mux, "state").await;
    assert_eq!(told["id"], "1");
    let idle = until_state(&d, &id, "idle").await;
    assert_eq!(idle["stateSource"], "terminal");
    assert_eq!(idle["choices"], json!([]));
}

/// The next `terminal` channel message of type `ty` on a multiplexed socket.
async fn mux_message(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    ty: &str,
) -> Value {
    let start = Instant::now();
    loop {
        let left = TIMEOUT.saturating_sub(start.elapsed());
        let msg = tokio::time::timeout(left, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {ty} message"))
            .expect("open")
            .expect("message");
        if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
            let v: Value = serde_json::from_str(&t).expect("JSON");
            if v["type"] == ty {
                return v;
            }
        }
    }
}

/// The hook rule with a fake `claude` on PATH: ptyhub gives it `--settings` whose command hooks
/// run `ptyhub notify --from claude` with the capability token of its environment; the turn's
/// hooks make it working, waiting (the permission, with what it wants to run) and idle, and a
/// hook prints nothing into its transcript.
#[tokio::test]
async fn a_fake_claude_reports_through_the_hooks_it_was_given() {
    let d = daemon("[assistants.claude]\nname = \"Claude\"\ncommand = [\"claude\"]\n");
    let mut ev = events(&d).await;
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, &format!("?assistant=claude&token={TOKEN}"))).await;
    c.wait_screen("Welcome to Claude Code").await;
    let id = id.to_string();
    let info = session(&d, &id).await;
    assert_eq!(
        info["command"],
        json!(["claude"]),
        "the command as configured"
    );
    until_state(&d, &id, "idle").await;
    c.type_str("run the tests\r").await;
    let waiting = until_state(&d, &id, "waiting").await;
    assert_eq!(waiting["stateSource"], "hook", "{waiting:#}");
    assert_eq!(waiting["reason"], "Claude wants to run: cargo test");
    c.wait_screen("Do you want to proceed?").await;
    // The dialog drawn right after the report does not end it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still = session(&d, &id).await;
    assert_eq!(
        (&still["state"], &still["stateSource"]),
        (&json!("waiting"), &json!("hook"))
    );
    assert_eq!(still["choices"][0]["keys"], "1", "{still:#}");
    c.type_str("1").await;
    c.wait_screen("The tests pass.").await;
    let idle = eventually_idle_by_hook(&d, &id).await;
    assert_eq!(idle["reason"], "Claude finished its turn");
    assert!(
        !c.screen_text().contains("hook error"),
        "{}",
        c.screen_text()
    );
    ev.until("the turn's states", |e| {
        states(e, &id)
            .iter()
            .any(|v| v["state"] == "idle" && v["source"] == "hook")
    })
    .await;
    let turn: Vec<(String, String)> = states(&ev.events, &id)
        .iter()
        .map(|v| {
            (
                v["state"].as_str().unwrap().to_owned(),
                v["source"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let waiting_by_hook = turn
        .iter()
        .position(|(s, src)| s == "waiting" && src == "hook")
        .unwrap_or_else(|| panic!("{turn:?}"));
    assert!(
        turn[..waiting_by_hook]
            .iter()
            .any(|(s, src)| s == "working" && src == "hook"),
        "the prompt's hook said working first: {turn:?}"
    );
}

async fn eventually_idle_by_hook(d: &Daemon, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let s = session(d, id).await;
        if s["state"] == "idle" && s["stateSource"] == "hook" {
            return s;
        }
        assert!(start.elapsed() < TIMEOUT, "never idle by hook: {s:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Codex's `notify`: ptyhub adds `-c notify=[…]` before its subcommand; each finished turn
/// runs `ptyhub notify --from codex JSON`, which makes the session idle.
#[tokio::test]
async fn a_fake_codex_reports_each_finished_turn() {
    let d = daemon("[assistants.codex]\nname = \"Codex\"\ncommand = [\"codex\"]\n");
    let id = create(&d, json!({"assistant": "codex"})).await;
    let mut c = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    c.wait_screen("Ask Codex").await;
    c.type_str("fix it\r").await;
    c.wait_screen("Worked for").await;
    let idle = eventually_idle_by_hook(&d, &id).await;
    assert_eq!(idle["reason"], "Codex finished its turn");
}

/// Priority: a report wins over the screen until the screen changes after `hook_grace`, or
/// someone types; then the screen decides again.
#[tokio::test]
async fn a_report_wins_over_the_screen_until_the_screen_changes() {
    let d = daemon("");
    // The screen changes when the test says so (a file appears), not after a fixed time that
    // a busy host could spend before the report is even made.
    let go = d.dir.path().join("go");
    let script = format!(
        "printf 'Do you want to proceed?\\r\\n❯ 1. Yes\\r\\n  2. No\\r\\n'; \
         while [ ! -e '{}' ]; do sleep 0.05; done; \
         printf '\\033[2J\\033[H✳ Brewing… (3s · esc to interrupt)\\r\\n'; exec sleep 600",
        go.display()
    );
    let id = create(
        &d,
        json!({"assistant": "claude", "cmd": ["sh", "-c", script]}),
    )
    .await;
    let waiting = until_state(&d, &id, "waiting").await;
    assert_eq!(waiting["stateSource"], "screen");
    let resp = report(&d, &id, "", TOKEN, r#"{"state":"idle","reason":"told so"}"#).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let told = session(&d, &id).await;
    assert_eq!(
        (&told["state"], &told["stateSource"], &told["reason"]),
        (&json!("idle"), &json!("hook"), &json!("told so"))
    );
    // The screen is unchanged: the report holds.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(session(&d, &id).await["state"], "idle");
    // The screen changes (the spinner): the screen decides again.
    std::fs::write(&go, "").expect("the file that changes the screen");
    let working = until_state(&d, &id, "working").await;
    assert_eq!(working["stateSource"], "screen");
    // Keys end a report too.
    let resp = report(&d, &id, "", TOKEN, r#"{"state":"waiting"}"#).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let held = session(&d, &id).await;
    assert_eq!(
        (&held["state"], &held["reason"]),
        (&json!("waiting"), &json!("Claude needs you"))
    );
    let mut c = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    c.wait_json("ready").await;
    c.type_str("x").await;
    let back = until_state(&d, &id, "working").await;
    assert_eq!(back["stateSource"], "screen");
}

/// The capability token sets its own session's state and does nothing else: every other route
/// of the table is 403 with it, so is another session's state; a wrong token is refused; the
/// daemon token works on the route, a share link does not.
#[tokio::test]
async fn the_capability_token_reaches_nothing_but_its_sessions_state() {
    use ptyhub::http::routes::{Callers, ANY_METHOD, ROUTES};
    let d = daemon("");
    let (id, token) = token_of_a_session(&d).await;
    let (other, _) = token_of_a_session(&d).await;
    let ok = report(
        &d,
        &id,
        "",
        &token,
        r#"{"state":"waiting","reason":"from the token"}"#,
    )
    .await;
    assert_eq!(ok.status(), StatusCode::NO_CONTENT);
    assert_eq!(session(&d, &id).await["reason"], "from the token");

    let mut checked = 0;
    for route in ROUTES.iter().filter(|r| r.callers != Callers::Public) {
        for method in route.methods.iter().filter(|m| **m != ANY_METHOD) {
            let path = route
                .pattern
                .replace("{id}", &id)
                .replace("{share}", "abcdef");
            let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let resp = http()
                .request(method.clone(), d.http(&path))
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(r#"{"state":"idle"}"#)
                .send()
                .await
                .expect("request");
            let want = if route.callers == Callers::SessionState {
                StatusCode::NO_CONTENT
            } else {
                StatusCode::FORBIDDEN
            };
            assert_eq!(resp.status(), want, "{method} {path}");
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} routes");
    // In the query too (pages move a query token into a cookie: not this one).
    let page = http()
        .get(d.http(&format!("/session/{id}?token={token}")))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    assert!(page.headers().get("set-cookie").is_none());
    // Another session's state.
    let theirs = report(&d, &other, "", &token, r#"{"state":"idle"}"#).await;
    assert_eq!(theirs.status(), StatusCode::FORBIDDEN);
    let by_number = report(&d, "2", "", &token, r#"{"state":"idle"}"#).await;
    assert_eq!(by_number.status(), StatusCode::FORBIDDEN);
    // A wrong token is no token at all.
    let wrong = report(&d, &id, "", &"0".repeat(64), r#"{"state":"idle"}"#).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    // The daemon token reports any session's; a share link (even a writer's) none.
    let owner = report(&d, &other, "", TOKEN, r#"{"state":"idle"}"#).await;
    assert_eq!(owner.status(), StatusCode::NO_CONTENT);
    let share = common::share_token(&d, TOKEN, &id, "writer").await;
    let shared = report(&d, &id, "", &share, r#"{"state":"idle"}"#).await;
    assert_eq!(shared.status(), StatusCode::FORBIDDEN);
    // The token is not in the session's description for anyone to read.
    let listed = session(&d, &id).await.to_string();
    assert!(!listed.contains(&token));
    // It ends with its session.
    let gone = http()
        .delete(d.http(&format!("/api/sessions/{id}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(gone.status(), StatusCode::NO_CONTENT);
    let after = report(&d, &id, "", &token, r#"{"state":"idle"}"#).await;
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);
}

/// Bad reports are refused with a JSON error that says why; a flood is limited per session
/// (429 with Retry-After) while another session's reports pass.
#[tokio::test]
async fn bad_reports_and_a_flood_are_refused() {
    let d = daemon("");
    let (id, token) = token_of_a_session(&d).await;
    let (other, other_token) = token_of_a_session(&d).await;
    let cases: [(&str, &str, &str); 7] = [
        ("", r#"{"state":"busy"}"#, "working, waiting, idle"),
        ("", r#"{"state":"exited"}"#, "unknown state"),
        ("", r#"{"state":"idle","why":"x"}"#, "unknown field"),
        ("", "not json", "invalid JSON"),
        (
            "",
            r#"{"state":"idle","reason":"a\nb"}"#,
            "control characters",
        ),
        ("?from=vim", "{}", "unknown from"),
        ("?from=claude", "[]", "bad report"),
    ];
    for (query, body, says) in cases {
        let resp = report(&d, &id, query, &token, body).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        let v: Value = resp.json().await.expect("JSON error");
        assert!(
            v["error"].as_str().unwrap_or_default().contains(says),
            "{body}: {v}"
        );
    }
    let huge = json!({"state": "idle", "reason": "x".repeat(201)}).to_string();
    let resp = report(&d, &id, "", &token, &huge).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let too_big = "x".repeat(70 * 1024);
    let resp = report(&d, &id, "", &token, &too_big).await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A hook event that says nothing of the state is taken and changes nothing.
    let before = session(&d, &id).await;
    let resp = report(
        &d,
        &id,
        "?from=claude",
        &token,
        r#"{"hook_event_name":"SessionEnd","reason":"exit"}"#,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(session(&d, &id).await["state"], before["state"]);

    // A flood: the burst (twice `hook_rate`) passes, then 429 with Retry-After.
    let mut limited = None;
    for i in 0..200 {
        let resp = report(&d, &id, "", &token, r#"{"state":"working"}"#).await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some((i, resp));
            break;
        }
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    }
    let (at, resp) = limited.expect("the flood was limited");
    assert!(at >= 30, "limited after {at}");
    assert_eq!(resp.headers()["retry-after"], "1");
    // Another session is not slowed by it.
    let resp = report(&d, &other, "", &other_token, r#"{"state":"idle"}"#).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let metrics = http()
        .get(d.http("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("ptyhub_errors_total{code=\"http_429\"}"),
        "{metrics}"
    );
}

/// A pattern that is not a regular expression stops start-up with its file, line and column.
#[test]
fn an_invalid_pattern_is_a_config_error_at_its_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[assistants.mine]\ncommand = [\"sh\"]\n[assistants.mine.state]\nwaiting = [\n  'ok',\n  '(unclosed',\n]\n",
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["--check-config", "--config"])
        .arg(&file)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:6:3")
            && err.contains("invalid regular expression \"(unclosed\": unclosed group"),
        "{err}"
    );
}

/// `ptyhub wait`'s outcomes: a state already reached (0), one reached later (0), a timeout (1),
/// the session exiting first (2), no such session (2), waiting for the exit (0); and `ptyhub
/// ls` says the state and for how long.
#[tokio::test]
async fn ptyhub_wait_for_each_outcome() {
    let d = daemon("");
    let ptyhub = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"));
        cmd.args(args)
            .env("PTYHUB_URL", d.http(""))
            .env("PTYHUB_TOKEN", TOKEN)
            .kill_on_drop(true);
        cmd
    };
    let run = |args: &'static [&'static str]| {
        let mut cmd = ptyhub(args);
        async move { cmd.output().await.expect("runs") }
    };
    let (id, _) = token_of_a_session(&d).await;
    until_state(&d, &id, "idle").await;
    let out = ptyhub(&["wait", &id, "--until", "idle"])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("idle: quiet for 1 s"));

    // Reached later: a report while it waits.
    let waiter = ptyhub(&["wait", "1", "--until", "waiting", "--timeout", "20s"]).output();
    let waiter = tokio::spawn(waiter);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resp = report(
        &d,
        &id,
        "",
        TOKEN,
        r#"{"state":"waiting","reason":"your turn"}"#,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let out = waiter.await.expect("joined").expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1 waiting: your turn"
    );

    let listed = run(&["ls"]).await;
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with('1') && l.contains("waiting ")),
        "{table}"
    );

    // A timeout.
    let started = Instant::now();
    let out = ptyhub(&["wait", &id, "--until", "idle", "--timeout", "2s"])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("timed out after 2s: session 1 is still waiting (your turn)"),
        "{err}"
    );

    // The session exits before it is idle; waiting for the exit itself is fine.
    let short = create(
        &d,
        json!({"cmd": ["sh", "-c", "read line; printf 'gone\\n'; exit 4"]}),
    )
    .await;
    let for_idle =
        tokio::spawn(ptyhub(&["wait", &short, "--until", "waiting", "--timeout", "20s"]).output());
    let for_exit =
        tokio::spawn(ptyhub(&["wait", &short, "--until", "exited", "--timeout", "20s"]).output());
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut c = Client::connect(&d.ws(short.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    c.wait_json("ready").await;
    c.type_str("x\r").await;
    let out = for_idle.await.expect("joined").expect("runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exited with code 4 before it was waiting"),
        "{err}"
    );
    let out = for_exit.await.expect("joined").expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Already exited: at once, 2 for another state.
    let out = ptyhub(&["wait", &short, "--until", "idle"])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    let out = ptyhub(&["wait", "no-such-session", "--until", "idle"])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session \"no-such-session\""));
}

/// `ptyhub notify` from a session's program: with its environment it reports; without one, or
/// refused, it still exits 0 and prints nothing (unless --verbose).
#[tokio::test]
async fn ptyhub_notify_reports_and_never_fails_its_caller() {
    let d = daemon("");
    let exe = env!("CARGO_BIN_EXE_ptyhub");
    let script = format!(
        "read line; {exe} notify --state waiting --reason \"$line\"; echo NOTIFIED-$?; exec sleep 600"
    );
    let id = create(&d, json!({"cmd": ["sh", "-c", script]})).await;
    let mut c = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    c.wait_json("ready").await;
    c.type_str("approve the plan\r").await;
    c.wait_screen("NOTIFIED-0").await;
    let s = until_state(&d, &id, "waiting").await;
    assert_eq!(
        (&s["reason"], &s["stateSource"]),
        (&json!("approve the plan"), &json!("hook"))
    );
    // No environment, a refused report, a bad flag: 0, and silent.
    for args in [
        vec!["notify", "--state", "idle"],
        vec![
            "notify",
            "--state",
            "idle",
            "--url",
            "http://127.0.0.1:9",
            "--session",
            "x",
            "--token",
            "y",
        ],
        vec!["notify", "--no-such-flag"],
    ] {
        let out = std::process::Command::new(exe)
            .args(&args)
            .env_remove("PTYHUB_URL")
            .env_remove("PTYHUB_SESSION")
            .env_remove("PTYHUB_STATE_TOKEN")
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "{args:?}: {out:?}"
        );
    }
    let out = std::process::Command::new(exe)
        .args(["notify", "--state", "idle", "--verbose"])
        .env_remove("PTYHUB_URL")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PTYHUB_URL is not set"));
}

/// What the daemon on `daemon_port` has received from `peer_port` and not read yet, from
/// `/proc/net/tcp` (`None` while no such connection is listed).
fn unread_from(daemon_port: u16, peer_port: u16) -> Option<u64> {
    common::wire::tcp_sockets()
        .iter()
        .find(|s| s.local_port == daemon_port && s.remote_port == peer_port)
        .map(|s| s.unread)
}

/// A live upgrade loses no report. One the old image gets after its sessions froze is not
/// applied, and is answered 503 with `Retry-After` (it was 404, as if the session had ended);
/// `ptyhub notify` started then waits for the new image (its connection in the listener's
/// backlog, beyond the 2 s it used to wait) and reports. An exec that ignores SIGTERM holds
/// the handover open for `session.kill_grace` (3 s) after the freeze, and no longer (it held
/// it twice that: its leftovers' scan counted the group's killed, unreaped `sleep`).
#[tokio::test]
async fn a_report_made_during_a_live_upgrade_is_not_lost() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start_launch(
        "[session]\nkill_grace = \"3s\"\n\n[attention]\nquiet = \"1s\"\n",
        |l| l.args(["--token", TOKEN]),
    );
    let id = create(&d, json!({"cmd": ["sleep", "1000"]})).await;
    let started = d.dir.path().join("exec-started");
    let script = format!("trap '' TERM; touch {}; sleep 60", started.display());
    let exec = {
        let url = d.http("/api/exec");
        tokio::spawn(async move {
            let sent = http()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"cmd": ["sh", "-c", script]}))
                .send()
                .await;
            // Read to the end: a client that goes away ends its exec.
            if let Ok(resp) = sent {
                let _ = resp.bytes().await;
            }
        })
    };
    common::eventually("the exec to start", || started.exists()).await;

    // A report whose head the daemon has read, and whose body comes after the freeze.
    let body = r#"{"state":"working","reason":"in flight"}"#;
    let mut raw = tokio::net::TcpStream::connect(d.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /api/sessions/{id}/state HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        d.addr,
        body.len()
    );
    raw.write_all(head.as_bytes()).await.expect("head");
    let peer = raw.local_addr().expect("local address").port();
    common::eventually("the daemon to read the head", || {
        unread_from(d.addr.port(), peer) == Some(0)
    })
    .await;

    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("signal");
    common::eventually("the session to freeze", || {
        d.log_text().contains("session frozen for the upgrade")
    })
    .await;
    let notify = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args([
            "notify",
            "--state",
            "waiting",
            "--reason",
            "during the upgrade",
        ])
        .args([
            "--url",
            &d.http(""),
            "--session",
            &id,
            "--token",
            TOKEN,
            "--verbose",
        ])
        .output();
    let notify = tokio::spawn(notify);

    raw.write_all(body.as_bytes()).await.expect("body");
    let mut answer = Vec::new();
    tokio::time::timeout(TIMEOUT, raw.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(answer.contains("report again"), "{answer}");

    let out = notify.await.expect("joined").expect("ptyhub notify runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("ptyhub notify: reported"), "{said}");
    let now = session(&d, &id).await;
    assert_eq!(
        (&now["state"], &now["reason"]),
        (&json!("waiting"), &json!("during the upgrade")),
        "{now:#}"
    );
    // The exec, killed with its group after its grace, held the handover no longer: its
    // leftovers' scan no longer waits a second grace for the group's unreaped dead.
    let log = d.log_text();
    assert!(!log.contains("left behind still running"), "{log}");
    assert!(!log.contains("some execs did not end in time"), "{log}");
    exec.abort();
}

/// A live upgrade keeps every session's state, since, reason, source and capability token: a
/// report the program makes after it, with the token it got before it, still works.
#[tokio::test]
async fn a_live_upgrade_keeps_states_and_tokens() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let d = daemon("");
    let exe = env!("CARGO_BIN_EXE_ptyhub");
    let script = format!(
        "while read line; do {exe} notify --state idle --reason \"$line\"; echo DONE-$line; done"
    );
    let id = create(&d, json!({"cmd": ["sh", "-c", script]})).await;
    let resp = report(
        &d,
        &id,
        "",
        TOKEN,
        r#"{"state":"waiting","reason":"before"}"#,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let before = session(&d, &id).await;
    assert_eq!(before["state"], "waiting");

    let version = |d: &Daemon| {
        let url = d.http("/api/version");
        async move {
            let v: Value = reqwest::get(url).await.ok()?.json().await.ok()?;
            v["upgrades"].as_u64()
        }
    };
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("signal");
    eventually_async("the upgrade", || async { version(&d).await == Some(1) }).await;
    let after = session(&d, &id).await;
    for key in [
        "state",
        "stateSince",
        "stateSinceMs",
        "reason",
        "stateSource",
    ] {
        assert_eq!(after[key], before[key], "{key}: {after:#}");
    }
    // The program reports with the token it was given before the upgrade.
    let mut c = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    c.wait_json("ready").await;
    c.type_str("after\r").await;
    c.wait_screen("DONE-after").await;
    let now = until_state(&d, &id, "idle").await;
    assert_eq!(
        (&now["reason"], &now["stateSource"]),
        (&json!("after"), &json!("hook"))
    );
}
