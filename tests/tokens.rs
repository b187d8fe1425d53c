//! API tokens (issue 36 items 1-2) against the real daemon: a token per scope against every
//! guarded route of the table and on every dialect, revocation and expiry closing live
//! connections with a reason, hashes at rest (never a token in the state directory or the
//! log), the `ptyhub token` round trip, and tokens that survive a restart.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;

use common::sse::Sse;
use common::{Client, Daemon, TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use ptyhub::http::routes::{Callers, ROUTES};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const TOKEN: &str = "tokens-test-token-0123456789";
const BIN: &str = env!("CARGO_BIN_EXE_ptyhub");

/// A daemon with the daemon token, a language server that echoes, and execs allowed.
fn secured() -> Daemon {
    let extra = "[lsp.echo]\ncommand = [\"cat\"]\n";
    Daemon::start_args(&common::config(extra), &["--token", TOKEN])
}

/// Makes a token with these scopes (and expiry); returns (id, token).
async fn make(
    d: &Daemon,
    name: &str,
    scopes: &[&str],
    expires_in: Option<u64>,
) -> (String, String) {
    let mut body = json!({"name": name, "scopes": scopes});
    if let Some(e) = expires_in {
        body["expiresIn"] = json!(e);
    }
    let resp = common::http()
        .post(d.http("/api/tokens"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{name}");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["createdBy"].as_str().map(str::is_empty),
        Some(false),
        "{v}"
    );
    (
        v["id"].as_str().unwrap().to_owned(),
        v["token"].as_str().unwrap().to_owned(),
    )
}

async fn revoke(d: &Daemon, id: &str) {
    let resp = common::http()
        .delete(d.http(&format!("/api/tokens/{id}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
}

/// Whether a user with `scopes` may call a route of `callers` (docs: the scopes table).
fn allowed(callers: Callers, scopes: &[&str]) -> bool {
    let has = |s: &str| scopes.contains(&s) || scopes.contains(&"admin");
    let view = has("view") || has("write");
    match callers {
        Callers::Public | Callers::AnyToken => true,
        Callers::Watcher | Callers::Viewer | Callers::Session | Callers::SessionRecording => view,
        Callers::SessionWriter => has("write"),
        Callers::Exec => has("exec"),
        Callers::Admin | Callers::SessionState => has("admin"),
    }
}

#[tokio::test]
async fn each_scope_reaches_what_it_names_and_gets_403_elsewhere() {
    let d = secured();
    let scopes: [&[&str]; 5] = [
        &["view"],
        &["write"],
        &["exec"],
        &["exec", "view"],
        &["admin"],
    ];
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // A session nobody has: the routes about it answer 404 once admitted, and nothing ends.
    let absent = Uuid::new_v4();
    for (n, scopes) in scopes.iter().enumerate() {
        let (_, token) = make(&d, &format!("matrix {n}"), scopes, None).await;
        for route in ROUTES.iter().filter(|r| r.callers != Callers::Public) {
            let path = route
                .pattern
                .replace("{id}", &absent.to_string())
                .replace("{share}", "0123456789ab")
                .replace("{lang}", "echo")
                .replace("{token}", "0123456789abcdef");
            for method in route.methods {
                let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                let mut req = http
                    .request(method.clone(), d.http(&path))
                    .bearer_auth(&token);
                if method == reqwest::Method::POST || method == reqwest::Method::PATCH {
                    req = req.json(&json!({}));
                }
                let status = req.send().await.unwrap().status();
                let want = allowed(route.callers, scopes);
                assert!(
                    status != StatusCode::UNAUTHORIZED && !status.is_server_error(),
                    "{scopes:?} {method} {path}: {status}"
                );
                assert_eq!(
                    status == StatusCode::FORBIDDEN,
                    !want,
                    "{scopes:?} {method} {path}: {status}"
                );
            }
        }
    }
}

/// Reads a raw WebSocket until its close: (code, reason); text messages in `texts`.
async fn until_close(ws: &mut Ws, texts: &mut Vec<Value>, within: Duration) -> (u16, String) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no close within {within:?}: {texts:?}"));
        match msg {
            Some(Ok(Message::Close(Some(f)))) => return (u16::from(f.code), f.reason.to_string()),
            Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return (1006, String::new()),
            Some(Ok(Message::Text(t))) => {
                if let Ok(v) = serde_json::from_str(&t) {
                    texts.push(v);
                }
            }
            Some(Ok(_)) => {}
        }
    }
}

/// The next multiplexed message of type `ty` (others skipped).
async fn mux_next(ws: &mut Ws, ty: &str) -> Value {
    loop {
        let msg = tokio::time::timeout(TIMEOUT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {ty} message"))
            .expect("open")
            .expect("a message");
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["type"] == ty {
                return v;
            }
        }
    }
}

async fn connect(url: &str) -> Ws {
    tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
        .0
}

/// Status of a WebSocket handshake (101 when it upgraded).
async fn ws_status(url: &str) -> u16 {
    match tokio_tungstenite::connect_async(url).await {
        Ok(_) => 101,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("{url}: {e}"),
    }
}

#[tokio::test]
async fn each_dialect_holds_a_token_to_its_scopes() {
    let d = secured();
    let id: Uuid = d
        .create_session(TOKEN, json!({"assistant": "shell"}))
        .await
        .parse()
        .unwrap();
    let (_, view) = make(&d, "watcher", &["view"], None).await;
    let (_, write) = make(&d, "typist", &["write"], None).await;
    let (_, exec) = make(&d, "runner", &["exec"], None).await;

    // view: watches on the browser dialect, and typing is refused as read-only.
    let mut c = Client::connect(&d.ws(id, &format!("?token={view}"))).await;
    c.wait_json("ready").await;
    c.type_str("echo nope\r").await;
    c.until("a read-only refusal", |c| {
        c.messages
            .iter()
            .any(|m| m["type"] == "error" && m["code"] == "read_only")
    })
    .await;
    // ... and on the raw dialect.
    let mut r = Client::connect_raw(&d.ws_raw(id, &format!("?token={view}"))).await;
    r.send_json(json!({"type": "resize", "cols": 90, "rows": 30}))
        .await;
    r.until("a read-only refusal", |c| {
        c.messages
            .iter()
            .any(|m| m["type"] == "error" && m["code"] == "read_only")
    })
    .await;
    // ... and on the multiplexed one: no typing, no ending the session (admin only).
    let close = |num: &str| json!({"channel": "terminal", "type": "close", "id": num});
    for token in [&view, &write] {
        let mut mux = connect(&format!("ws://{}/ws?token={token}", d.addr)).await;
        let open = mux_next(&mut mux, "open").await;
        let num = open["id"].as_str().unwrap().to_owned();
        let ask = close(&num).to_string();
        mux.send(Message::Text(ask)).await.unwrap();
        let refused = mux_next(&mut mux, "error").await;
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.contains("admin scope"), "{refused}");
    }
    let listed: Vec<Value> = common::http()
        .get(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        listed.iter().any(|s| s["id"] == id.to_string()),
        "the session lives on: {listed:?}"
    );

    // write: types; but creating a session on join needs admin, and says so.
    let mut w = Client::connect(&d.ws(id, &format!("?token={write}"))).await;
    w.wait_json("ready").await;
    w.run("echo TYPED-$((6*7))", "TYPED-42").await;
    let fresh = Uuid::new_v4();
    let mut refused =
        Client::connect(&d.ws(fresh, &format!("?token={write}&assistant=shell"))).await;
    let (code, _) = refused.until_closed().await;
    assert_eq!(code, 4002);
    assert!(
        refused
            .messages
            .iter()
            .any(|m| m["message"].as_str().is_some_and(|s| s.contains("admin"))),
        "{:?}",
        refused.messages
    );

    // exec only: no watching (403), but commands and language servers.
    assert_eq!(ws_status(&d.ws(id, &format!("?token={exec}"))).await, 403);
    assert_eq!(
        ws_status(&format!("ws://{}/ws?token={exec}", d.addr)).await,
        403
    );
    let events = common::http()
        .get(d.http("/api/events"))
        .bearer_auth(&exec)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 403);
    let ran = common::http()
        .post(d.http("/api/exec"))
        .bearer_auth(&exec)
        .json(&json!({"cmd": "echo ran-$((1+1))"}))
        .send()
        .await
        .unwrap();
    let mut s = Sse::from_response(ran, "/api/exec");
    s.until_end().await;
    assert!(s.of("stdout").concat().contains("ran-2"), "{:?}", s.events);
    let lsp = format!("ws://{}/ws/lsp/echo?cwd=/tmp&token={exec}", d.addr);
    assert_eq!(ws_status(&lsp).await, 101);
}

#[tokio::test]
async fn revocation_and_expiry_close_live_connections_within_a_second() {
    let d = secured();
    let id: Uuid = d
        .create_session(TOKEN, json!({"assistant": "shell"}))
        .await
        .parse()
        .unwrap();
    for expiry in [false, true] {
        let expires_in = expiry.then_some(4);
        let (tid, token) = make(&d, &format!("doomed {expiry}"), &["admin"], expires_in).await;
        let made = Instant::now();
        let mut browser = Client::connect(&d.ws(id, &format!("?token={token}"))).await;
        browser.wait_json("ready").await;
        let mut mux = connect(&format!("ws://{}/ws?token={token}", d.addr)).await;
        let mut raw = connect(&d.ws_raw(id, &format!("?token={token}"))).await;
        let mut board = connect(&format!("ws://{}/ws/board?token={token}", d.addr)).await;
        let lsp = format!("ws://{}/ws/lsp/echo?cwd=/tmp&token={token}", d.addr);
        let mut lsp = connect(&lsp).await;
        let pipe = format!("ws://{}/api/exec?cmd=sleep&arg=60&token={token}", d.addr);
        let mut pipe = connect(&pipe).await;
        let events = common::http()
            .get(d.http("/api/events?follow=1"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let mut events = Sse::from_response(events, "/api/events");
        let ran = common::http()
            .post(d.http("/api/exec"))
            .bearer_auth(&token)
            .json(&json!({"cmd": "sleep 60"}))
            .send()
            .await
            .unwrap();
        let mut exec = Sse::from_response(ran, "/api/exec");
        let (want, ended_at) = if expiry {
            ("token expired", made + Duration::from_secs(4))
        } else {
            revoke(&d, &tid).await;
            ("token revoked", Instant::now())
        };
        // A second after the end, on a loaded machine with slack for the reads themselves.
        let within = ended_at.saturating_duration_since(Instant::now()) + Duration::from_secs(2);
        let (code, why) = tokio::time::timeout(within, browser.until_closed())
            .await
            .expect("the browser socket closed in time");
        assert_eq!((code, why.as_str()), (1008, want), "browser");
        for (what, ws) in [
            ("mux", &mut mux),
            ("raw", &mut raw),
            ("board", &mut board),
            ("lsp", &mut lsp),
            ("pipe exec", &mut pipe),
        ] {
            let (code, why) =
                until_close(ws, &mut Vec::new(), within + Duration::from_secs(1)).await;
            assert_eq!((code, why.as_str()), (1008, want), "{what}");
        }
        for (what, s) in [("events", &mut events), ("exec", &mut exec)] {
            tokio::time::timeout(within + Duration::from_secs(1), s.until_end())
                .await
                .unwrap_or_else(|_| panic!("{what} stream did not end"));
            let ended = s.of("access_ended");
            assert_eq!(ended.len(), 1, "{what}: {:?}", s.events);
            let v: Value = serde_json::from_str(ended[0]).unwrap();
            assert_eq!(v["reason"], want, "{what}");
        }
        assert!(
            Instant::now() < ended_at + Duration::from_secs(5),
            "everything closed soon after the end"
        );
        // And the token no longer opens anything, saying why.
        let again = common::http()
            .get(d.http("/api/sessions"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 401);
        let body: Value = again.json().await.unwrap();
        let reason = body["error"].as_str().unwrap_or_default();
        if expiry {
            assert!(reason.contains("token expired"), "{body}");
        } else {
            assert!(reason.contains("invalid or revoked"), "{body}");
        }
    }
}

#[tokio::test]
async fn tokens_are_kept_as_hashes_and_survive_a_restart() {
    let mut d = secured();
    let (id, token) = make(&d, "kept", &["view"], None).await;
    let secret = &token["ptyhub_".len()..];
    // Used over a header, a query and a WebSocket.
    let list = common::http()
        .get(d.http("/api/sessions"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    let q = reqwest::get(d.http(&format!("/api/sessions?token={token}")))
        .await
        .unwrap();
    assert_eq!(q.status(), 200);
    let listed: Vec<Value> = common::http()
        .get(d.http("/api/tokens"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mine = listed.iter().find(|t| t["id"] == id.as_str()).unwrap();
    assert!(mine.get("token").is_none(), "a listing never shows a token");
    assert_eq!(mine["scopes"], json!(["view"]));
    assert!(mine["lastUsedAt"].is_string(), "{mine}");
    d.terminate();
    let state = d.dir.path().join("ptyhub");
    let file = state.join("tokens.json");
    let text = std::fs::read_to_string(&file).expect("tokens.json");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(text.contains(&id), "{text}");
    let mut everywhere = vec![d.log_text()];
    for entry in walk(d.dir.path()) {
        everywhere
            .push(String::from_utf8_lossy(&std::fs::read(&entry).unwrap_or_default()).into_owned());
    }
    for (n, text) in everywhere.iter().enumerate() {
        assert!(!text.contains(secret), "a token in clear (file {n})");
    }
    // A new daemon on the same state directory knows it.
    let again = Daemon::start_launch(&common::config(""), |l| {
        l.args(["--token", TOKEN])
            .env("XDG_STATE_HOME", d.dir.path())
    });
    let list = common::http()
        .get(again.http("/api/sessions"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200, "the restarted daemon keeps its tokens");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn cli(d: &Daemon, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("PTYHUB_URL", format!("http://{}", d.addr))
        .env("PTYHUB_TOKEN", token)
        .output()
        .expect("run ptyhub")
}

#[tokio::test]
async fn the_cli_creates_lists_and_revokes() {
    let d = secured();
    let made = cli(
        &d,
        TOKEN,
        &[
            "token",
            "create",
            "--name",
            "ci",
            "--scope",
            "exec",
            "--scope",
            "view",
            "--expires",
            "30d",
        ],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let token = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("ptyhub_") && token.len() == 50, "{token}");
    let help = String::from_utf8_lossy(&made.stderr);
    assert!(
        help.contains("Authorization: Bearer") && help.contains("shown this once"),
        "{help}"
    );
    let ok = common::http()
        .get(d.http("/api/sessions"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let list = cli(&d, TOKEN, &["token", "list"]);
    let table = String::from_utf8(list.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("LAST USED"),
        "{table}"
    );
    let row = lines
        .iter()
        .find(|l| l.contains(" ci "))
        .expect("the ci row");
    assert!(
        row.contains("view,exec") && row.contains("in 29d"),
        "{table}"
    );
    assert!(
        !table.contains(&token[7..]),
        "the list never shows the token"
    );
    let id = row.split_whitespace().next().unwrap();
    // A token without admin may not manage tokens.
    let refused = cli(&d, &token, &["token", "list"]);
    assert!(!refused.status.success());
    let revoked = cli(&d, TOKEN, &["token", "revoke", id]);
    assert!(
        revoked.status.success(),
        "{}",
        String::from_utf8_lossy(&revoked.stderr)
    );
    let gone = common::http()
        .get(d.http("/api/sessions"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 401);
    let again = cli(&d, TOKEN, &["token", "revoke", id]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("no such token"));
}

#[tokio::test]
async fn bad_requests_are_refused_clearly() {
    let d = secured();
    let post = |body: Value| {
        common::http()
            .post(d.http("/api/tokens"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
    };
    for (body, status) in [
        (json!({"name": "", "scopes": ["view"]}), 400),
        (json!({"name": "x".repeat(65), "scopes": ["view"]}), 400),
        (json!({"name": "a\u{7}b", "scopes": ["view"]}), 400),
        (json!({"name": "ok", "scopes": []}), 400),
        (json!({"name": "ok", "scopes": ["root"]}), 400),
        (
            json!({"name": "ok", "scopes": ["view"], "expiresIn": 0}),
            400,
        ),
        (
            json!({"name": "ok", "scopes": ["view"], "expiresIn": 1.5}),
            400,
        ),
        (json!({"name": "ok", "scopes": ["view"], "extra": 1}), 400),
        (json!({"name": "ok", "scopes": ["view"]}), 201),
        (json!({"name": " ok ", "scopes": ["exec"]}), 409),
    ] {
        let resp = post(body.clone()).await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{body}");
        if status != 201 {
            let v: Value = resp.json().await.unwrap();
            assert!(v["error"].is_string(), "{v}");
        }
    }
    let unknown = common::http()
        .delete(d.http("/api/tokens/0123456789abcdef"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn a_live_upgrade_keeps_the_tokens_and_their_last_use() {
    use nix::sys::signal::{kill, Signal};
    let d = secured();
    let (id, token) = make(&d, "through an upgrade", &["view"], None).await;
    let get = |t: String| {
        let url = d.http("/api/sessions");
        async move {
            common::http()
                .get(url)
                .bearer_auth(t)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(get(token.clone()).await, 200);
    let version = || async {
        let v: Value = reqwest::get(d.http("/api/version"))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["upgrades"].as_u64()
    };
    assert_eq!(version().await, Some(0));
    let pid = nix::unistd::Pid::from_raw(d.pid() as i32);
    kill(pid, Signal::SIGUSR2).expect("signal");
    common::eventually_async("the new image answers", || async {
        version().await == Some(1)
    })
    .await;
    assert_eq!(
        get(token.clone()).await,
        200,
        "the new image knows the token"
    );
    let listed: Vec<Value> = common::http()
        .get(d.http("/api/tokens"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mine = listed.iter().find(|t| t["id"] == id.as_str()).unwrap();
    assert!(mine["lastUsedAt"].is_string(), "{mine}");
    revoke(&d, &id).await;
    assert_eq!(get(token).await, 401);
}
