//! Language servers over WebSocket (docs/protocol.md section 13a) on the real daemon: pyright,
//! typescript-language-server and gopls (installed by tests/lsp/install.sh) driven by a Node
//! client on vscode-ws-jsonrpc and vscode-jsonrpc (`tests/lsp/client.mjs`): initialize, a file
//! with an error, its diagnostics, a hover and a completion. Then what can go wrong, with `cat`
//! and small shell scripts as servers (the bridge does not care what speaks the protocol): bad
//! frames, messages over the bound both ways, a server that will not start, one that dies
//! mid-session, the session or the daemon ending; and that no process of a server outlives its
//! connection, share links are refused and the limit holds.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{eventually, Daemon, TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

fn tests_lsp() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lsp")
}

/// The servers under test, from tests/lsp's node_modules and Debian's gopls, and the scripted
/// ones; `extra` is added to the config.
fn lsp_config(extra: &str) -> String {
    let bin = tests_lsp().join("node_modules/.bin");
    common::config(&format!(
        r#"
[lsp.python]
command = ["{bin}/pyright-langserver", "--stdio"]

[lsp.typescript]
command = ["{bin}/typescript-language-server", "--stdio"]

[lsp.echo]
command = ["cat"]

[lsp.dies]
command = ["sh", "-c", "head -c 1 >/dev/null; echo 'fatal: out of cheese' >&2; exit 3"]

[lsp.huge]
command = ["sh", "-c", "printf 'Content-Length: 99999999\r\n\r\n'; exec sleep 1000"]

[lsp.garbled]
command = ["sh", "-c", "printf 'Nonsense\r\n\r\n'; exec sleep 1000"]

[lsp.missing]
command = ["/no/such/language-server", "--stdio"]

[lsp.flood]
command = ["python3", "-c", '''
import sys
out, pad, i = sys.stdout.buffer, "x" * 10000, 0
while True:
    body = ('{{"jsonrpc":"2.0","method":"n","params":[%d,"%s"]}}' % (i, pad)).encode()
    out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    out.flush()
    i += 1
    open("count", "w").write(str(i))
''']

{extra}
"#,
        bin = bin.display()
    ))
}

/// Every process of a language server (marked `PTYHUB_EXEC`, as execs are) working in `dir`:
/// a server's processes all start there (the session's shell, also there, is not marked).
fn processes_in(dir: &Path) -> Vec<i32> {
    let dir = dir.canonicalize().expect("the workspace");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir))
        .filter(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|&b| b == 0)
                .any(|var| var.starts_with(b"PTYHUB_EXEC="))
        })
        .collect()
}

async fn none_left_in(dir: &Path) {
    eventually(&format!("no process left in {}", dir.display()), || {
        processes_in(dir).is_empty()
    })
    .await;
}

/// A workspace holding `files`.
fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a workspace");
    for (name, text) in files {
        common::write_file(dir.path(), name, text.as_bytes());
    }
    dir
}

/// Runs the Node client; its one line of results.
async fn node_client(spec: Value) -> Value {
    let script = tests_lsp().join("client.mjs");
    let run = tokio::process::Command::new("node")
        .arg(script)
        .arg(spec.to_string())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the LSP client finished in time")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the LSP client failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("the client's JSON line")
}

fn lsp_url(d: &Daemon, session: &str, lang: &str) -> String {
    format!("ws://{}/ws/{session}/lsp/{lang}", d.addr)
}

fn dir_url(d: &Daemon, lang: &str, dir: &Path) -> String {
    let q = form_urlencoded::Serializer::new(String::new())
        .append_pair("cwd", &dir.display().to_string())
        .finish();
    format!("ws://{}/ws/lsp/{lang}?{q}", d.addr)
}

async fn session_in(d: &Daemon, dir: &Path) -> String {
    d.create_session("", json!({"assistant": "shell", "cwd": dir}))
        .await
}

// ---- real servers, a real client --------------------------------------------------------

const PYTHON: &str = "import os\n\ndef greet(name: str) -> str:\n    return \"hello \" + name\n\nprint(undefined_name)\nos.pa\n";

#[tokio::test]
async fn pyright_diagnoses_hovers_and_completes_and_dies_with_its_socket() {
    let d = Daemon::in_process_with(&lsp_config(""));
    let work = workspace(&[("main.py", PYTHON)]);
    let id = session_in(&d, work.path()).await;
    let got = node_client(json!({
        "url": lsp_url(&d, &id, "python"),
        "root": work.path(), "file": "main.py", "languageId": "python",
        "hover": [2, 5], "completion": [6, 5], "end": "close",
    }))
    .await;
    let diagnostics = got["diagnostics"].to_string();
    assert!(diagnostics.contains("undefined_name"), "{got}");
    assert!(
        got["hover"].as_str().unwrap_or("").contains("greet"),
        "{got}"
    );
    let completion = got["completion"].as_array().expect("labels");
    assert!(completion.iter().any(|l| l == "path"), "{got}");
    // The client closed its socket without `shutdown`: the server and its workers go.
    none_left_in(work.path()).await;
    common::eventually_async("the server counted as ended", || async {
        d.metric("ptyhub_lsp_running").await == 0
    })
    .await;
    assert!(d.metric("ptyhub_lsp_messages_in_total").await >= 5);
    assert!(d.metric("ptyhub_lsp_messages_out_total").await >= 3);
}

#[tokio::test]
async fn typescript_answers_and_its_exit_closes_with_1000() {
    let d = Daemon::in_process_with(&lsp_config(""));
    let text = "function greet(name: string): string {\n  return \"hello \" + name;\n}\nconst n: number = greet(\"x\");\nMath.fl\n";
    let work = workspace(&[("main.ts", text)]);
    let id = session_in(&d, work.path()).await;
    let got = node_client(json!({
        "url": lsp_url(&d, &id, "typescript"),
        "root": work.path(), "file": "main.ts", "languageId": "typescript",
        "hover": [0, 10], "completion": [4, 7], "end": "exit",
    }))
    .await;
    assert!(
        got["diagnostics"].to_string().contains("not assignable"),
        "{got}"
    );
    assert!(
        got["hover"].as_str().unwrap_or("").contains("greet"),
        "{got}"
    );
    let completion = got["completion"].as_array().expect("labels");
    assert!(completion.iter().any(|l| l == "floor"), "{got}");
    assert_eq!(got["close"]["code"], 1000, "{got}");
    assert!(
        got["close"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("exited with code 0"),
        "{got}"
    );
    none_left_in(work.path()).await;
}

#[tokio::test]
async fn gopls_answers_in_a_directory() {
    let d = Daemon::in_process_with(&lsp_config("[lsp.go]\ncommand = [\"gopls\"]\n"));
    let main = "package main\n\nimport \"fmt\"\n\nfunc greet(name string) string { return \"hello \" + name }\n\nfunc main() {\n\tvar n int = greet(\"x\")\n\tfmt.Println(n)\n\tfmt.Pr\n}\n";
    let work = workspace(&[
        ("go.mod", "module example.com/m\n\ngo 1.19\n"),
        ("main.go", main),
    ]);
    let got = node_client(json!({
        "url": dir_url(&d, "go", work.path()),
        "root": work.path(), "file": "main.go", "languageId": "go",
        "hover": [4, 6], "completion": [9, 7], "end": "close",
    }))
    .await;
    assert!(
        got["diagnostics"].to_string().contains("cannot use"),
        "{got}"
    );
    assert!(
        got["hover"].as_str().unwrap_or("").contains("greet"),
        "{got}"
    );
    let completion = got["completion"].as_array().expect("labels");
    assert!(completion.iter().any(|l| l == "Println"), "{got}");
    none_left_in(work.path()).await;
}

// ---- what can go wrong --------------------------------------------------------------------

/// A scripted client: the text messages it got, how the connection closed.
struct Lsp {
    ws: Ws,
    texts: Vec<Value>,
    closed: Option<(u16, String)>,
}

impl Lsp {
    async fn open(url: &str) -> Lsp {
        let (ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect in time")
            .unwrap_or_else(|e| panic!("connect {url}: {e}"));
        Lsp {
            ws,
            texts: Vec::new(),
            closed: None,
        }
    }

    async fn send(&mut self, msg: Message) {
        self.ws.send(msg).await.expect("send");
    }

    /// Reads until `cond` holds; panics after [`TIMEOUT`] or if the connection closes first.
    async fn until(&mut self, what: &str, cond: impl Fn(&Lsp) -> bool) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while !cond(self) {
            assert!(
                self.closed.is_none(),
                "closed {:?} before {what}",
                self.closed
            );
            let next = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what}: {:?}", self.texts));
            match next {
                Some(Ok(Message::Text(t))) => {
                    self.texts
                        .push(serde_json::from_str(&t).expect("JSON from the bridge"));
                }
                Some(Ok(Message::Close(frame))) => {
                    let frame = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                    self.closed = Some(frame.unwrap_or((1005, String::new())));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    self.closed.get_or_insert((1006, String::new()));
                }
            }
            if self.closed.is_some() && !cond(self) {
                panic!("closed {:?} before {what}: {:?}", self.closed, self.texts);
            }
        }
    }

    async fn until_closed(&mut self) -> (u16, String) {
        self.until("the close", |l| l.closed.is_some()).await;
        self.closed.clone().expect("closed")
    }
}

#[tokio::test]
async fn bad_frames_get_json_rpc_errors_and_a_message_over_the_bound_closes_with_1009() {
    let d = Daemon::in_process_with(&lsp_config("[limits]\nlsp_message_bytes = 65536\n"));
    let work = workspace(&[]);
    let mut c = Lsp::open(&dir_url(&d, "echo", work.path())).await;
    // A message goes through whole, framed, and comes back (the server is `cat`).
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"é": "ü".repeat(1000)}});
    c.send(Message::Text(msg.to_string())).await;
    c.until("the echo", |l| l.texts.len() == 1).await;
    assert_eq!(c.texts[0], msg);
    // Not JSON, not an object, not text: each answered, nothing passed on.
    c.send(Message::Text("{not json".into())).await;
    c.send(Message::Text("42".into())).await;
    c.send(Message::Binary(b"{}".to_vec())).await;
    c.until("three errors", |l| l.texts.len() == 4).await;
    let codes: Vec<&Value> = c.texts[1..].iter().map(|t| &t["error"]["code"]).collect();
    assert_eq!(codes, [-32700, -32600, -32600]);
    assert!(c.texts[1]["id"].is_null());
    // The connection still works.
    c.send(Message::Text(r#"{"jsonrpc":"2.0","method":"y"}"#.into()))
        .await;
    c.until("the second echo", |l| l.texts.len() == 5).await;
    assert_eq!(c.texts[4]["method"], "y");
    // Over the bound: closed with 1009, the server ended.
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"z","params":"{}"}}"#,
        "x".repeat(70_000)
    );
    c.send(Message::Text(big)).await;
    assert_eq!(c.until_closed().await.0, 1009);
    none_left_in(work.path()).await;
    let metrics = d.metrics_text().await;
    assert!(
        metrics.contains("ptyhub_errors_total{code=\"bad_message\"} 3"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_server_that_breaks_the_protocol_or_the_bound_is_ended_with_a_reason() {
    let d = Daemon::in_process_with(&lsp_config("[limits]\nlsp_message_bytes = 65536\n"));
    let work = workspace(&[]);
    let mut c = Lsp::open(&dir_url(&d, "huge", work.path())).await;
    let (code, reason) = c.until_closed().await;
    assert_eq!(code, 1009, "{reason}");
    assert!(
        reason.contains("99999999 bytes, over the bound of 65536"),
        "{reason}"
    );
    none_left_in(work.path()).await;
    let mut c = Lsp::open(&dir_url(&d, "garbled", work.path())).await;
    let (code, reason) = c.until_closed().await;
    assert_eq!(code, 1011, "{reason}");
    assert!(reason.contains("malformed header"), "{reason}");
    none_left_in(work.path()).await;
}

#[tokio::test]
async fn a_server_that_will_not_start_or_dies_mid_session_says_why() {
    let d = Daemon::in_process_with(&lsp_config(""));
    let work = workspace(&[]);
    let mut c = Lsp::open(&dir_url(&d, "missing", work.path())).await;
    let (code, reason) = c.until_closed().await;
    assert_eq!(code, 4002, "{reason}");
    assert!(reason.contains("could not start"), "{reason}");
    // An editor shows the error: a `window/showMessage` of type Error came first.
    assert_eq!(c.texts[0]["method"], "window/showMessage");
    assert_eq!(c.texts[0]["params"]["type"], 1);
    let shown = c.texts[0]["params"]["message"].as_str().unwrap_or("");
    assert!(shown.contains("/no/such/language-server"), "{shown}");

    let mut c = Lsp::open(&dir_url(&d, "dies", work.path())).await;
    c.send(Message::Text(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#.into(),
    ))
    .await;
    let (code, reason) = c.until_closed().await;
    assert_eq!(code, 1011, "{reason}");
    assert_eq!(
        reason,
        "the language server (sh) exited with code 3: fatal: out of cheese"
    );

    // Killed from outside, mid-session.
    let mut c = Lsp::open(&dir_url(&d, "echo", work.path())).await;
    c.send(Message::Text(r#"{"jsonrpc":"2.0","method":"a"}"#.into()))
        .await;
    c.until("the echo", |l| l.texts.len() == 1).await;
    let pids = processes_in(work.path());
    assert_eq!(pids.len(), 1, "one cat");
    let _ = Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status();
    let (code, reason) = c.until_closed().await;
    assert_eq!(code, 1011, "{reason}");
    assert_eq!(reason, "the language server (cat) was killed by SIGKILL");
    let metrics = d.metrics_text().await;
    assert!(
        metrics.contains("ptyhub_lsp_total{outcome=\"failed_to_start\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ptyhub_lsp_total{outcome=\"exited\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ptyhub_lsp_total{outcome=\"signalled\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_stops_the_server_and_loses_nothing() {
    let d = Daemon::in_process_with(&lsp_config(""));
    let work = workspace(&[]);
    let count = || {
        std::fs::read_to_string(work.path().join("count"))
            .ok()
            .and_then(|c| c.trim().parse::<u64>().ok())
    };
    let mut c = Lsp::open(&dir_url(&d, "flood", work.path())).await;
    // Not reading: the server's writes stop once the socket and its pipe are full.
    let mut last = None;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let stalled = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never stalled: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = count();
        if now.is_some() && now == last {
            break now.unwrap_or_default();
        }
        last = now;
    };
    // 10 KB each: the socket's buffers and one pipe hold a few MB, not the flood.
    assert!(
        stalled < 3000,
        "{stalled} messages written to a client that reads none"
    );
    // Every message arrives, in order, once the client reads.
    c.until("every message written", |l| l.texts.len() as u64 > stalled)
        .await;
    for (i, m) in c.texts.iter().enumerate() {
        assert_eq!(m["params"][0], i, "message {i}");
    }
    c.ws.close(None).await.expect("close");
    none_left_in(work.path()).await;
}

#[tokio::test]
async fn the_session_ending_ends_its_server() {
    let d = Daemon::in_process_with(&lsp_config(""));
    let work = workspace(&[]);
    let id = session_in(&d, work.path()).await;
    let mut c = Lsp::open(&lsp_url(&d, &id, "echo")).await;
    c.send(Message::Text(r#"{"jsonrpc":"2.0","method":"a"}"#.into()))
        .await;
    c.until("the echo", |l| l.texts.len() == 1).await;
    let deleted = common::http()
        .delete(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .expect("DELETE");
    assert!(deleted.status().is_success());
    assert_eq!(
        c.until_closed().await,
        (1001, "the session ended".to_owned())
    );
    none_left_in(work.path()).await;
    // An ended session runs no server.
    let e = tokio_tungstenite::connect_async(lsp_url(&d, &id, "echo"))
        .await
        .expect_err("refused");
    assert!(
        matches!(http_status(e), StatusCode::CONFLICT | StatusCode::NOT_FOUND),
        "an ended session"
    );
}

#[tokio::test]
async fn the_daemon_stopping_ends_every_server() {
    let mut d = Daemon::start_with(&lsp_config(""));
    let work = workspace(&[]);
    let mut c = Lsp::open(&dir_url(&d, "echo", work.path())).await;
    c.send(Message::Text(r#"{"jsonrpc":"2.0","method":"a"}"#.into()))
        .await;
    c.until("the echo", |l| l.texts.len() == 1).await;
    assert!(d.terminate().success());
    assert!(
        processes_in(work.path()).is_empty(),
        "a server outlived the daemon"
    );
    assert_eq!(c.until_closed().await.0, 1001);
}

fn http_status(e: tokio_tungstenite::tungstenite::Error) -> StatusCode {
    match e {
        tokio_tungstenite::tungstenite::Error::Http(resp) => resp.status(),
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

#[tokio::test]
async fn access_limits_and_bad_requests_are_answered_before_anything_runs() {
    let token = "t".repeat(32);
    let d = Daemon::in_process_auth(&lsp_config("[limits]\nmax_lsp = 1\n"), Some(&token));
    let work = workspace(&[]);
    let id = d
        .create_session(&token, json!({"assistant": "shell", "cwd": work.path()}))
        .await;
    let with = |url: String| {
        format!(
            "{url}{}token={token}",
            if url.contains('?') { "&" } else { "?" }
        )
    };
    let refused = |url: String| async move {
        http_status(
            tokio_tungstenite::connect_async(url)
                .await
                .expect_err("refused"),
        )
    };
    // A share link, even a writer's, reaches no language server.
    let share = common::share_token(&d, &token, &id, "writer").await;
    let shared = format!("{}?token={share}", lsp_url(&d, &id, "echo"));
    assert_eq!(refused(shared).await, StatusCode::FORBIDDEN);
    assert_eq!(
        refused(lsp_url(&d, &id, "echo")).await,
        StatusCode::UNAUTHORIZED
    );
    // No such language, no cwd, a relative cwd.
    assert_eq!(
        refused(with(lsp_url(&d, &id, "cobol"))).await,
        StatusCode::NOT_FOUND
    );
    let no_cwd = with(format!("ws://{}/ws/lsp/echo", d.addr));
    assert_eq!(refused(no_cwd).await, StatusCode::BAD_REQUEST);
    let relative = with(format!("ws://{}/ws/lsp/echo?cwd=here", d.addr));
    assert_eq!(refused(relative).await, StatusCode::BAD_REQUEST);
    // The limit: one runs, the next is refused until it ends.
    let mut first = Lsp::open(&with(lsp_url(&d, &id, "echo"))).await;
    first
        .send(Message::Text(r#"{"jsonrpc":"2.0","method":"a"}"#.into()))
        .await;
    first.until("the echo", |l| l.texts.len() == 1).await;
    assert_eq!(
        refused(with(dir_url(&d, "echo", work.path()))).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    first.ws.close(None).await.expect("close");
    none_left_in(work.path()).await;
    eventually_open(&with(dir_url(&d, "echo", work.path()))).await;
    // `GET /api/lsp`: what is configured and whether it is installed.
    let list: Vec<Value> = common::http()
        .get(d.http("/api/lsp"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("GET /api/lsp")
        .json()
        .await
        .expect("JSON");
    let entry = |lang: &str| list.iter().find(|e| e["lang"] == lang).cloned();
    assert_eq!(entry("echo").expect("echo")["available"], true);
    let missing = entry("missing").expect("missing");
    assert_eq!(missing["available"], false);
    assert!(missing["reason"]
        .as_str()
        .unwrap_or("")
        .contains("language-server"));
    assert_eq!(entry("python").expect("python")["command"][1], "--stdio");
    // The embedded default's four (rust-analyzer cannot be installed here: its path is the
    // others').
    assert_eq!(
        entry("rust").expect("rust")["command"],
        json!(["rust-analyzer"])
    );
    assert_eq!(entry("go").expect("go")["command"], json!(["gopls"]));
}

/// Connects once a place is free again (the previous server's permit is given back as its
/// task ends, just after its processes are gone).
async fn eventually_open(url: &str) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        match tokio_tungstenite::connect_async(url).await {
            Ok(_) => return,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never admitted: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
