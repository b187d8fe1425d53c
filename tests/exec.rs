//! Exec (docs/protocol.md section 13) on the real daemon with real programs: pipe mode over a
//! WebSocket (stream order, 10 MiB each way byte-exact, eof, signals, bad messages, a program
//! that cannot start), exec over SSE (exact reassembly, split and invalid UTF-8, stdin, env,
//! cwd, no shell for an array, timeouts), the process group ended when the client vanishes or
//! the daemon stops (SIGKILL for one that ignores SIGTERM), a client that never reads stalling
//! nothing else, share links refused, the running limit, metrics and the journal.

use crate::common;

use std::time::Duration;

use common::sse::Sse;
use common::{eventually, Client, Daemon, TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A pipe-mode client: what each stream carried, the text messages, how it closed.
struct Pipe {
    ws: Ws,
    out: Vec<u8>,
    err: Vec<u8>,
    texts: Vec<Value>,
    closed: Option<(u16, String)>,
}

fn exec_url(d: &Daemon, query: &str) -> String {
    format!("ws://{}/api/exec{query}", d.addr)
}

/// The query for `argv` (program and arguments).
fn argv_query(argv: &[&str]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("cmd", argv[0]);
    for a in &argv[1..] {
        q.append_pair("arg", a);
    }
    format!("?{}", q.finish())
}

impl Pipe {
    async fn open(d: &Daemon, argv: &[&str]) -> Pipe {
        Self::open_url(&exec_url(d, &argv_query(argv))).await
    }

    async fn open_url(url: &str) -> Pipe {
        let (ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect in time")
            .unwrap_or_else(|e| panic!("connect {url}: {e}"));
        Pipe {
            ws,
            out: Vec::new(),
            err: Vec::new(),
            texts: Vec::new(),
            closed: None,
        }
    }

    /// Takes one message; false once closed.
    fn take(&mut self, msg: Message) -> bool {
        match msg {
            Message::Binary(b) => match b.split_first() {
                Some((1, rest)) => self.out.extend_from_slice(rest),
                Some((2, rest)) => self.err.extend_from_slice(rest),
                _ => panic!("binary message without a stream tag: {b:?}"),
            },
            Message::Text(t) => self
                .texts
                .push(serde_json::from_str(&t).expect("JSON text")),
            Message::Close(c) => {
                self.closed = Some(c.map_or((1005, String::new()), |c| {
                    (c.code.into(), c.reason.into_owned())
                }));
                return false;
            }
            _ => {}
        }
        true
    }

    /// Reads until `cond` holds.
    async fn until(&mut self, what: &str, cond: impl Fn(&Pipe) -> bool) {
        let start = std::time::Instant::now();
        while !cond(self) {
            assert!(self.closed.is_none(), "closed waiting for {what}");
            assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
            match tokio::time::timeout(Duration::from_millis(500), self.ws.next()).await {
                Err(_) => {}
                Ok(Some(Ok(msg))) => {
                    self.take(msg);
                }
                Ok(_) => self.closed = Some((1006, String::new())),
            }
        }
    }

    /// Reads to the close; returns the `exit` message.
    async fn until_exit(&mut self) -> Value {
        self.until("close", |p| p.closed.is_some()).await;
        self.texts
            .iter()
            .find(|t| t["type"] == "exit")
            .cloned()
            .unwrap_or_else(|| panic!("no exit: {:?} {:?}", self.texts, self.closed))
    }

    async fn send(&mut self, msg: Message) {
        self.ws.send(msg).await.expect("send");
    }

    fn errors(&self) -> Vec<&str> {
        self.texts
            .iter()
            .filter(|t| t["type"] == "error")
            .filter_map(|t| t["code"].as_str())
            .collect()
    }
}

/// The pid a program printed first (`echo $$`), once its output has it.
async fn first_line_pid(p: &mut Pipe) -> i32 {
    p.until("the pid", |p| p.out.contains(&b'\n')).await;
    let line = p.out.split(|&b| b == b'\n').next().expect("a line");
    std::str::from_utf8(line)
        .expect("text")
        .trim()
        .parse()
        .expect("a pid")
}

/// Whether any process (zombies included) is `pid` or in its process group.
pub(crate) fn group_alive(pid: i32) -> bool {
    if std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return true;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        rest.split_whitespace().nth(2) == Some(&pid.to_string())
    })
}

async fn group_gone(pid: i32) {
    eventually(&format!("process group {pid} gone and reaped"), || {
        !group_alive(pid)
    })
    .await;
}

fn test_config(extra: &str) -> String {
    common::config(extra)
}

// ---- pipe mode ------------------------------------------------------------------------------

#[tokio::test]
async fn pipe_mode_keeps_each_streams_order_and_ends_with_exit_then_1000() {
    let d = Daemon::start_with(&test_config(""));
    let script = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done; exit 3";
    let mut p = Pipe::open(&d, &["sh", "-c", script]).await;
    let exit = p.until_exit().await;
    assert_eq!(exit, json!({"type":"exit","code":3,"signal":null}));
    assert_eq!(p.closed.as_ref().map(|c| c.0), Some(1000));
    let want = |tag: &str| -> Vec<u8> {
        (1..=200)
            .map(|i| format!("{tag}{i}\n"))
            .collect::<String>()
            .into_bytes()
    };
    assert_eq!(p.out, want("out"));
    assert_eq!(p.err, want("err"));
}

#[tokio::test]
async fn ten_mib_of_random_bytes_come_out_byte_exact() {
    let d = Daemon::start_with(&test_config(""));
    let data: Vec<u8> = (0..10 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let file = common::write_file(d.dir.path(), "random.bin", &data);
    let mut p = Pipe::open(&d, &["cat", file.to_str().expect("path")]).await;
    let exit = p.until_exit().await;
    assert_eq!(exit["code"], 0);
    assert_eq!(p.out.len(), data.len());
    assert!(p.out == data, "the bytes differ");
    assert!(p.err.is_empty());
}

#[tokio::test]
async fn ten_mib_of_stdin_arrive_intact_and_eof_closes_stdin() {
    let d = Daemon::start_with(&test_config(""));
    let data: Vec<u8> = (0..10 << 20)
        .map(|i: u32| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    let target = d.dir.path().join("stdin.bin");
    let script = format!("cat > '{}'; echo done", target.display());
    let p = Pipe::open(&d, &["sh", "-c", &script]).await;
    let (mut tx, rx) = p.ws.split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        for piece in sent.chunks(100_000) {
            tx.send(Message::Binary(piece.to_vec()))
                .await
                .expect("send");
        }
        // An empty binary message ends stdin.
        tx.send(Message::Binary(Vec::new())).await.expect("eof");
        tx
    });
    let mut rx = rx;
    let mut out = Vec::new();
    let mut exit = None;
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(TIMEOUT, rx.next()).await {
        match msg {
            Message::Binary(b) if b.first() == Some(&1) => out.extend_from_slice(&b[1..]),
            Message::Text(t) => exit = Some(t),
            Message::Close(_) => break,
            _ => {}
        }
    }
    drop(writer.await.expect("writer"));
    assert_eq!(out, b"done\n");
    assert_eq!(
        exit.as_deref(),
        Some(r#"{"type":"exit","code":0,"signal":null}"#)
    );
    let written = std::fs::read(&target).expect("written");
    assert_eq!(written.len(), data.len());
    assert!(written == data, "stdin bytes differ");
}

#[tokio::test]
async fn eof_signals_resize_and_bad_messages() {
    let d = Daemon::start_with(&test_config(""));
    // eof as JSON.
    let mut p = Pipe::open(&d, &["wc", "-c"]).await;
    p.send(Message::Binary(b"hello".to_vec())).await;
    p.send(Message::Text(
        r#"{"type":"resize","cols":80,"rows":24}"#.into(),
    ))
    .await;
    p.send(Message::Text(r#"{"type":"eof"}"#.into())).await;
    assert_eq!(p.until_exit().await["code"], 0);
    assert_eq!(String::from_utf8_lossy(&p.out).trim(), "5");
    assert!(p.errors().is_empty(), "{:?}", p.texts);

    // Bad messages get errors and the process keeps running; then a signal ends it.
    let mut p = Pipe::open(&d, &["sleep", "100"]).await;
    for bad in [
        "plain text",
        r#"{"type":"nope"}"#,
        r#"{"type":"signal","signal":"SIGSTOP"}"#,
        r#"{"type":"signal"}"#,
    ] {
        p.send(Message::Text(bad.into())).await;
    }
    p.until("four errors", |p| p.errors().len() == 4).await;
    assert_eq!(
        p.errors(),
        ["bad_message", "bad_message", "bad_signal", "bad_message"]
    );
    assert!(p.closed.is_none());
    p.send(Message::Text(
        r#"{"type":"signal","signal":"SIGINT"}"#.into(),
    ))
    .await;
    let exit = p.until_exit().await;
    assert_eq!(exit, json!({"type":"exit","code":130,"signal":"SIGINT"}));
    assert_eq!(p.closed.as_ref().map(|c| c.0), Some(1000));
    // Input after stdin closed is refused, not dropped silently.
    let mut p = Pipe::open(&d, &["sleep", "100"]).await;
    p.send(Message::Binary(Vec::new())).await;
    p.send(Message::Binary(b"late".to_vec())).await;
    p.until("an error", |p| !p.errors().is_empty()).await;
    assert_eq!(p.errors(), ["stdin_closed"]);
    p.send(Message::Text(
        r#"{"type":"signal","signal":"SIGKILL"}"#.into(),
    ))
    .await;
    assert_eq!(p.until_exit().await["signal"], "SIGKILL");
}

#[tokio::test]
async fn a_program_that_cannot_start_gets_error_then_4002() {
    let d = Daemon::start_with(&test_config(""));
    for query in [
        argv_query(&["/no/such/program"]),
        format!("{}&cwd=/no/such/dir", argv_query(&["true"])),
    ] {
        let mut p = Pipe::open_url(&exec_url(&d, &query)).await;
        p.until("close", |p| p.closed.is_some()).await;
        assert_eq!(p.closed.as_ref().map(|c| c.0), Some(4002), "{query}");
        assert_eq!(p.errors(), ["exec_failed"], "{query}");
        assert!(p.texts[0]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // The default is the user's shell, reading commands from stdin.
    let mut p = Pipe::open_url(&exec_url(&d, "")).await;
    p.send(Message::Binary(b"echo from-the-shell\n".to_vec()))
        .await;
    p.send(Message::Binary(Vec::new())).await;
    assert_eq!(p.until_exit().await["code"], 0);
    assert_eq!(p.out, b"from-the-shell\n");
}

#[tokio::test]
async fn a_vanished_client_leaves_no_process_even_one_ignoring_sigterm() {
    let d = Daemon::start_with(&test_config(""));
    for script in [
        "echo $$; sleep 1000 & exec yes",
        // Ignores SIGTERM (inherited by both children): SIGKILL after the grace period.
        "trap '' TERM; echo $$; sleep 1000 & exec yes",
    ] {
        let mut p = Pipe::open(&d, &["sh", "-c", script]).await;
        let pid = first_line_pid(&mut p).await;
        p.until("lots of output", |p| p.out.len() > 1 << 20).await;
        assert!(group_alive(pid));
        // Gone without a close frame.
        drop(p);
        group_gone(pid).await;
    }
    let m = d.metrics_text().await;
    assert!(
        m.contains("ptyhub_execs_total{outcome=\"signalled\"} 2"),
        "{m}"
    );
    assert!(m.contains("ptyhub_execs_running 0"), "{m}");
}

#[tokio::test]
async fn a_client_that_never_reads_stalls_only_its_own_process() {
    let d = Daemon::start_with(&test_config(""));
    // Never read from: its pipe and socket fill and `yes` waits.
    let mut stalled = Pipe::open(&d, &["sh", "-c", "echo $$; exec yes"]).await;
    let pid = first_line_pid(&mut stalled).await;
    let rss_before = d.rss_kib();
    // Time for the flood to fill every buffer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = std::time::Instant::now();
    let mut other = Pipe::open(&d, &["echo", "still responsive"]).await;
    assert_eq!(other.until_exit().await["code"], 0);
    assert_eq!(other.out, b"still responsive\n");
    let mut session =
        Client::connect_raw(&d.ws_raw(uuid::Uuid::new_v4(), "?assistant=shell")).await;
    session.wait_json("ready").await;
    session.run("echo $((6*7))", "42").await;
    assert!(started.elapsed() < Duration::from_secs(10));
    // The stalled exec's memory is bounded: the daemon did not buffer the flood.
    assert!(
        d.rss_kib() < rss_before + 32 * 1024,
        "RSS grew from {rss_before} to {} KiB",
        d.rss_kib()
    );
    assert!(
        group_alive(pid),
        "the stalled process is still there, waiting"
    );
    drop(stalled);
    group_gone(pid).await;
}

// ---- SSE ------------------------------------------------------------------------------------

async fn post_exec(d: &Daemon, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(d.http("/api/exec"))
        .json(&body)
        .send()
        .await
        .expect("POST")
}

async fn sse_exec(d: &Daemon, body: Value) -> Sse {
    let resp = post_exec(d, body).await;
    let mut s = Sse::from_response(resp, "/api/exec");
    s.until_end().await;
    s
}

fn done(s: &Sse) -> Value {
    let done = s.of("done");
    assert_eq!(done.len(), 1, "{:?}", s.events);
    serde_json::from_str(done[0]).expect("done JSON")
}

#[tokio::test]
async fn sse_streams_reassemble_exactly() {
    let d = Daemon::start_with(&test_config(""));
    let s = sse_exec(
        &d,
        json!({"cmd": "printf 'a\\nb\\n\\nc'; printf 'w1\\nw2\\n' >&2; exit 4"}),
    )
    .await;
    assert_eq!(s.of("stdout").concat(), "a\nb\n\nc");
    assert_eq!(s.of("stderr").concat(), "w1\nw2\n");
    let done = done(&s);
    assert_eq!(done["exit_code"], 4);
    assert_eq!(done["signal"], Value::Null);
    assert_eq!(done["timed_out"], false);
    assert!(done["duration_ms"].as_u64().is_some());
    assert_eq!(s.events.last().map(|e| e.event.as_str()), Some("done"));

    // A character cut between two writes is carried whole; invalid bytes become U+FFFD.
    let s = sse_exec(
        &d,
        json!({"cmd": "printf '\\342'; sleep 0.3; printf '\\202\\254 \\377 end'"}),
    )
    .await;
    assert_eq!(s.of("stdout").concat(), "€ \u{fffd} end");

    // stdin, env, cwd; an array never goes through a shell.
    let dir = d.dir.path().to_str().expect("path").to_owned();
    let s = sse_exec(
        &d,
        json!({"cmd": "cat; echo \"$K\"; pwd", "stdin": "in put\n", "env": {"K": "V V"}, "cwd": dir}),
    )
    .await;
    let canonical = std::fs::canonicalize(&dir).expect("canonical");
    assert_eq!(
        s.of("stdout").concat(),
        format!("in put\nV V\n{}\n", canonical.display())
    );
    let s = sse_exec(&d, json!({"cmd": ["echo", "$HOME", "a;b"]})).await;
    assert_eq!(s.of("stdout").concat(), "$HOME a;b\n");
}

#[tokio::test]
async fn sse_timeout_kills_the_group_and_says_so() {
    let d = Daemon::start_with(&test_config(""));
    let resp = post_exec(
        &d,
        json!({"cmd": "echo $$; sleep 1000 & sleep 1000", "timeout_sec": 1}),
    )
    .await;
    let mut s = Sse::from_response(resp, "/api/exec");
    s.until("the pid", |e| !e.is_empty()).await;
    let pid: i32 = s.of("stdout")[0].trim().parse().expect("pid");
    s.until_end().await;
    let done = done(&s);
    assert_eq!(done["timed_out"], true, "{done}");
    assert_eq!(done["signal"], "SIGTERM");
    assert_eq!(done["exit_code"], 143);
    assert!(done["duration_ms"].as_u64().is_some_and(|ms| ms >= 1000));
    group_gone(pid).await;
    let m = d.metrics_text().await;
    assert!(
        m.contains("ptyhub_execs_total{outcome=\"timed_out\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn sse_client_that_disconnects_kills_the_group() {
    let d = Daemon::start_with(&test_config(""));
    let resp = post_exec(
        &d,
        json!({"cmd": ["sh", "-c", "echo $$; sleep 1000 & exec yes"]}),
    )
    .await;
    let mut s = Sse::from_response(resp, "/api/exec");
    s.until("the pid", |e| !e.is_empty()).await;
    let pid: i32 = s.of("stdout")[0]
        .lines()
        .next()
        .expect("line")
        .parse()
        .expect("pid");
    assert!(group_alive(pid));
    drop(s);
    group_gone(pid).await;
}

/// A client that vanishes while its program is silent is noticed by the keep-alive, within
/// 15 s, and its group is ended then (not when the program next writes: never, here).
#[tokio::test]
async fn a_silent_sse_execs_vanished_client_is_noticed_within_15_s() {
    let d = Daemon::start_with(&test_config(""));
    let resp = post_exec(&d, json!({"cmd": "echo $$; exec sleep 1000"})).await;
    let mut s = Sse::from_response(resp, "/api/exec");
    s.until("the pid", |e| !e.is_empty()).await;
    let pid: i32 = s.of("stdout")[0].trim().parse().expect("pid");
    drop(s);
    let gone_by = std::time::Instant::now() + Duration::from_secs(20);
    while group_alive(pid) {
        assert!(
            std::time::Instant::now() < gone_by,
            "sleep {pid} outlived its client by 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_pipe_exec_with_a_timeout_ends_its_group_and_says_so() {
    let d = Daemon::start_with(&test_config(""));
    let script = "echo $$; sleep 1000 & echo before; sleep 1000";
    let query = format!("{}&timeout_sec=1", argv_query(&["sh", "-c", script]));
    let mut p = Pipe::open_url(&exec_url(&d, &query)).await;
    let pid = first_line_pid(&mut p).await;
    let exit = p.until_exit().await;
    assert_eq!(
        exit,
        json!({"type":"exit","code":143,"signal":"SIGTERM","timed_out":true})
    );
    assert_eq!(p.closed.as_ref().map(|c| c.0), Some(1000));
    assert!(String::from_utf8_lossy(&p.out).contains("before"));
    group_gone(pid).await;
    // A bad timeout is refused before the upgrade.
    for bad in ["0", "-1", "1e9", "soon"] {
        let query = format!("{}&timeout_sec={bad}", argv_query(&["true"]));
        let e = tokio_tungstenite::connect_async(exec_url(&d, &query))
            .await
            .expect_err("refused");
        assert_eq!(http_status(e), StatusCode::BAD_REQUEST, "timeout_sec={bad}");
    }
    let m = d.metrics_text().await;
    assert!(
        m.contains("ptyhub_execs_total{outcome=\"timed_out\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn every_bad_request_is_answered_clearly() {
    let d = Daemon::start_with(&test_config(""));
    let http = reqwest::Client::new();
    for (body, want) in [
        ("not json", 400),
        ("{}", 400),
        (r#"{"cmd":""}"#, 400),
        (r#"{"cmd":[]}"#, 400),
        (r#"{"cmd":"true","bogus":1}"#, 400),
        (r#"{"cmd":"true","timeout_sec":0}"#, 400),
        (r#"{"cmd":["/no/such/program"]}"#, 400),
        (r#"{"cmd":"true","cwd":"/no/such/dir"}"#, 400),
    ] {
        let resp = http
            .post(d.http("/api/exec"))
            .body(body)
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status().as_u16(), want, "{body}");
        let v: Value = resp.json().await.expect("JSON error");
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}: {v}"
        );
    }
    // Not an upgrade, an empty cmd, a NUL: 400 before anything runs.
    for query in ["", "?cmd=", "?cmd=true&arg=a%00b"] {
        let resp = http
            .get(d.http(&format!("/api/exec{query}")))
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status(), 400, "{query}");
    }
    let e = tokio_tungstenite::connect_async(exec_url(&d, "?cmd="))
        .await
        .expect_err("refused");
    assert_eq!(http_status(e), StatusCode::BAD_REQUEST);
    let resp = http
        .delete(d.http("/api/exec"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET, POST");
    let m = d.metrics_text().await;
    assert!(
        m.contains("ptyhub_execs_total{outcome=\"failed_to_start\"} 2"),
        "{m}"
    );
}

fn http_status(e: tokio_tungstenite::tungstenite::Error) -> StatusCode {
    match e {
        tokio_tungstenite::tungstenite::Error::Http(resp) => resp.status(),
        other => panic!("not an HTTP refusal: {other}"),
    }
}

// ---- limits, auth, journal, shutdown --------------------------------------------------------

#[tokio::test]
async fn share_links_get_403_on_both_transports() {
    const TOKEN: &str = "test-token-0123456789abcdef";
    let d = Daemon::start_args(&test_config(""), &["--token", TOKEN]);
    let http = reqwest::Client::new();
    let v: Value = http
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"cmd": ["sleep", "100"]}))
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("json");
    let id = v["id"].as_str().expect("id");
    for role in ["viewer", "writer"] {
        let st = &common::share_token(&d, TOKEN, id, role).await;
        let e = tokio_tungstenite::connect_async(exec_url(&d, &format!("?cmd=true&token={st}")))
            .await
            .expect_err("refused");
        assert_eq!(http_status(e), StatusCode::FORBIDDEN);
        let resp = http
            .post(d.http("/api/exec"))
            .bearer_auth(st)
            .json(&json!({"cmd": "true"}))
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status(), 403);
    }
    // The daemon's own token reaches both.
    let mut p = Pipe::open_url(&exec_url(&d, &format!("?cmd=true&token={TOKEN}"))).await;
    assert_eq!(p.until_exit().await["code"], 0);
    let resp = http
        .post(d.http("/api/exec"))
        .bearer_auth(TOKEN)
        .json(&json!({"cmd": "true"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn the_running_limit_answers_429_and_frees_places() {
    let d = Daemon::start_with(&test_config("[limits]\nmax_execs = 2\n"));
    let mut a = Pipe::open(&d, &["sleep", "100"]).await;
    let b = post_exec(&d, json!({"cmd": ["sleep", "100"]})).await;
    assert_eq!(b.status(), 200);
    let e = tokio_tungstenite::connect_async(exec_url(&d, &argv_query(&["true"])))
        .await
        .expect_err("over the limit");
    assert_eq!(http_status(e), StatusCode::TOO_MANY_REQUESTS);
    let over = post_exec(&d, json!({"cmd": "true"})).await;
    assert_eq!(over.status(), 429);
    let v: Value = over.json().await.expect("JSON");
    assert!(v["error"].as_str().expect("error").contains("max_execs"));
    assert!(d.metrics_text().await.contains("ptyhub_execs_running 2"));
    a.send(Message::Text(
        r#"{"type":"signal","signal":"SIGTERM"}"#.into(),
    ))
    .await;
    a.until_exit().await;
    common::eventually_async("a place freed", || async {
        post_exec(&d, json!({"cmd": "true"})).await.status() == 200
    })
    .await;
    drop(b);
}

#[tokio::test]
async fn a_finished_exec_is_journaled() {
    let d = Daemon::start_with(&test_config(""));
    let s = sse_exec(&d, json!({"cmd": "exit 7"})).await;
    assert_eq!(done(&s)["exit_code"], 7);
    let mut ev = Sse::open(&d.http("/api/events"), None).await;
    ev.until_end().await;
    let exec: Vec<Value> = ev
        .of("exec")
        .iter()
        .map(|e| serde_json::from_str(e).expect("JSON"))
        .collect();
    assert_eq!(exec.len(), 1, "{:?}", ev.events);
    assert_eq!(exec[0]["cmd"], "exit 7");
    assert_eq!(exec[0]["exit_code"], 7);
    assert!(exec[0]["duration_ms"].as_u64().is_some());
}

#[tokio::test]
async fn daemon_shutdown_leaves_no_exec_process() {
    let mut d = Daemon::start_with(&test_config(""));
    let mut p = Pipe::open(&d, &["sh", "-c", "trap '' TERM; echo $$; exec sleep 1000"]).await;
    let pid = first_line_pid(&mut p).await;
    let resp = post_exec(&d, json!({"cmd": "echo $$; exec sleep 1000"})).await;
    let mut s = Sse::from_response(resp, "/api/exec");
    s.until("the pid", |e| !e.is_empty()).await;
    let pid2: i32 = s.of("stdout")[0].trim().parse().expect("pid");
    assert!(d.terminate().success());
    assert!(
        !group_alive(pid),
        "the exec ignoring SIGTERM survived shutdown"
    );
    assert!(!group_alive(pid2), "the SSE exec survived shutdown");
    p.until("close", |p| p.closed.is_some()).await;
    assert_eq!(p.closed.as_ref().map(|c| c.0), Some(1001));
}

#[tokio::test]
async fn a_vanished_client_is_noticed_while_its_stdin_is_full() {
    let d = Daemon::start_with(&test_config(""));
    // Reads no stdin and writes nothing after its pid: only the socket can tell.
    let mut p = Pipe::open(&d, &["sh", "-c", "echo $$; exec sleep 1000"]).await;
    let pid = first_line_pid(&mut p).await;
    // More than the pipe holds: the daemon's reader waits on stdin with the second message
    // (more, past what the socket buffers hold, would keep TCP from delivering the FIN).
    for _ in 0..2 {
        p.send(Message::Binary(vec![b'x'; 64 * 1024])).await;
    }
    drop(p);
    group_gone(pid).await;
}

/// An exec's program starts with no signal blocked, whatever the daemon's own threads block
/// (it holds its handled signals over a live upgrade).
#[tokio::test]
async fn an_exec_starts_with_an_empty_signal_mask() {
    let d = Daemon::start_with(&test_config(""));
    let s = sse_exec(
        &d,
        json!({"cmd": ["grep", "^SigBlk:", "/proc/self/status"]}),
    )
    .await;
    assert_eq!(s.of("stdout").concat(), "SigBlk:\t0000000000000000\n");
}
