//! The multiplexed terminals dialect (`GET /ws`, docs/protocol.md section 11) against the real
//! daemon and real bash: every session on one socket tagged by its number, replays on
//! connect, sessions created later, input, resize, exit, close, errors, share links, a paste,
//! and ten sockets on one session.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Client, Daemon, TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use uuid::Uuid;

type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A scripted multiplexed client: a terminal per session number.
struct Mux {
    ws: Ws,
    terms: BTreeMap<u8, vt100::Parser>,
    /// Bytes received per number.
    bytes: BTreeMap<u8, Vec<u8>>,
    messages: Vec<Value>,
    closed: Option<u16>,
}

impl Mux {
    async fn connect(url: &str) -> Mux {
        let (ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect in time")
            .unwrap_or_else(|e| panic!("connect {url}: {e}"));
        Mux {
            ws,
            terms: BTreeMap::new(),
            bytes: BTreeMap::new(),
            messages: Vec::new(),
            closed: None,
        }
    }

    async fn read_one(&mut self, wait: Duration) -> bool {
        let msg = match tokio::time::timeout(wait, self.ws.next()).await {
            Err(_) => return true,
            Ok(Some(Ok(msg))) => msg,
            Ok(_) => {
                self.closed.get_or_insert(1006);
                return false;
            }
        };
        match msg {
            Message::Binary(b) => {
                let (num, data) = b.split_first().expect("a tagged frame");
                let term = self.terms.get_mut(num).unwrap_or_else(|| {
                    panic!("output for {num} before its open: {:?}", self.messages)
                });
                term.process(data);
                self.bytes.entry(*num).or_default().extend_from_slice(data);
            }
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).expect("JSON");
                assert_eq!(v["channel"], "terminal", "{v}");
                if v["type"] == "open" {
                    let num: u8 = v["id"].as_str().unwrap().parse().unwrap();
                    let (rows, cols) = (v["rows"].as_u64().unwrap(), v["cols"].as_u64().unwrap());
                    self.terms.insert(
                        num,
                        vt100::Parser::new(
                            std::num::NonZeroU16::new(rows as u16).unwrap(),
                            std::num::NonZeroU16::new(cols as u16).unwrap(),
                            1000,
                        ),
                    );
                }
                self.messages.push(v);
            }
            Message::Close(f) => {
                self.closed = Some(f.map_or(1005, |f| u16::from(f.code)));
                return false;
            }
            _ => {}
        }
        true
    }

    async fn until(&mut self, what: &str, mut cond: impl FnMut(&Mux) -> bool) {
        let start = Instant::now();
        while !cond(self) {
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out waiting for {what}; messages: {:?}; screens: {:?}",
                self.messages,
                self.terms
                    .iter()
                    .map(|(n, t)| (n, t.screen().contents()))
                    .collect::<Vec<_>>()
            );
            if !self.read_one(Duration::from_millis(200)).await && !cond(self) {
                panic!(
                    "closed ({:?}) waiting for {what}: {:?}",
                    self.closed, self.messages
                );
            }
        }
    }

    fn screen(&self, num: u8) -> String {
        self.terms
            .get(&num)
            .map(|t| t.screen().contents())
            .unwrap_or_default()
    }

    async fn wait_screen(&mut self, num: u8, text: &str) {
        let t = text.to_owned();
        self.until(&format!("{text:?} on {num}"), move |m| {
            m.screen(num).contains(&t)
        })
        .await;
    }

    fn find(&self, ty: &str, id: &str) -> Option<&Value> {
        self.messages
            .iter()
            .find(|m| m["type"] == ty && m["id"] == id)
    }

    async fn wait_msg(&mut self, ty: &str, id: &str) -> Value {
        let (t, i) = (ty.to_owned(), id.to_owned());
        self.until(&format!("{ty} for {id}"), move |m| m.find(&t, &i).is_some())
            .await;
        self.find(ty, id).cloned().expect("found")
    }

    fn errors(&self) -> Vec<&Value> {
        self.messages
            .iter()
            .filter(|m| m["type"] == "error")
            .collect()
    }

    async fn input(&mut self, num: u8, data: &[u8]) {
        let mut f = vec![num];
        f.extend_from_slice(data);
        self.ws.send(Message::Binary(f)).await.expect("send");
    }

    async fn send_json(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string()))
            .await
            .expect("send");
    }
}

fn mux_url(d: &Daemon, query: &str) -> String {
    format!("ws://{}/ws{}", d.addr, query)
}

/// A shell session opened by a browser client sized 24x80; returns the client and its num.
async fn shell(d: &Daemon) -> (Uuid, Client, u8) {
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.resize(24, 80).await;
    c.wait_screen("$ ").await;
    let info: Value = reqwest::get(d.http(&format!("/api/sessions/{id}")))
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    let num = info["num"].as_u64().expect("num") as u8;
    (id, c, num)
}

#[tokio::test]
async fn every_session_on_one_socket_with_replays_and_later_sessions() {
    let d = Daemon::start();
    let (id1, mut b1, n1) = shell(&d).await;
    b1.run("echo FIRST-$((1+1))", "FIRST-2").await;
    let (id2, mut b2, n2) = shell(&d).await;
    b2.run("echo SECOND-$((2+2))", "SECOND-4").await;
    assert_eq!((n1, n2), (1, 2));

    let mut m = Mux::connect(&mux_url(&d, "")).await;
    let open1 = m.wait_msg("open", "1").await;
    assert_eq!(open1["uuid"], id1.to_string());
    assert_eq!(
        (open1["cols"].as_u64(), open1["rows"].as_u64()),
        (Some(80), Some(24))
    );
    assert_eq!(open1["command"][0], "bash");
    let open2 = m.wait_msg("open", "2").await;
    assert_eq!(open2["uuid"], id2.to_string());
    // The replays draw each screen.
    m.wait_screen(1, "FIRST-2").await;
    m.wait_screen(2, "SECOND-4").await;
    assert!(!m.screen(1).contains("SECOND"));

    // Input goes to the session its number names, and only there.
    m.input(1, b"echo VIA-MUX-$((3*3))\r").await;
    b1.wait_screen("VIA-MUX-9").await;
    m.wait_screen(1, "VIA-MUX-9").await;
    b2.type_str("echo ON-TWO\r").await;
    m.wait_screen(2, "\nON-TWO").await;
    assert!(!m.screen(2).contains("VIA-MUX"));
    assert!(!b2.screen_text().contains("VIA-MUX"));

    // A session created later is announced, then streamed.
    let (id3, mut b3, n3) = shell(&d).await;
    let open3 = m.wait_msg("open", &n3.to_string()).await;
    assert_eq!(open3["uuid"], id3.to_string());
    b3.type_str("echo LATER-ON\r").await;
    m.wait_screen(n3, "\nLATER-ON").await;

    // Exit and close.
    m.input(2, b"exit 3\r").await;
    let exit = m.wait_msg("exit", "2").await;
    assert_eq!(exit["code"], 3);
    m.send_json(json!({"channel": "terminal", "type": "close", "id": id3.to_string()}))
        .await;
    m.wait_msg("closed", &n3.to_string()).await;
    assert_eq!(b3.until_closed().await.0, 4003);
    let resp = reqwest::get(d.http(&format!("/api/sessions/{id3}")))
        .await
        .expect("GET");
    assert_eq!(resp.status(), 404, "closed ends the session");
    assert!(m.errors().is_empty(), "{:?}", m.errors());

    // A fresh connection replays an ended session with its exit.
    let mut late = Mux::connect(&mux_url(&d, "")).await;
    let exit = late.wait_msg("exit", "2").await;
    assert_eq!(exit["code"], 3);
    late.wait_screen(2, "[Process exited (code 3)]").await;
    assert!(late.find("open", &n3.to_string()).is_none());
}

#[tokio::test]
async fn resize_counts_the_connection_once_per_session() {
    let d = Daemon::start();
    let (id, mut b, n) = shell(&d).await;
    let mut m = Mux::connect(&mux_url(&d, "")).await;
    m.wait_msg("open", &n.to_string()).await;
    // Not counted before it sends a size.
    b.resize(30, 100).await;
    b.until("status 30x100", |c| {
        c.last("status")
            .is_some_and(|s| s["cols"] == 100 && s["rows"] == 30)
    })
    .await;
    m.send_json(json!({"channel": "terminal", "type": "resize", "id": n.to_string(), "cols": 70, "rows": 20}))
        .await;
    b.until("status 20x70", |c| {
        c.last("status")
            .is_some_and(|s| s["cols"] == 70 && s["rows"] == 20)
    })
    .await;
    // By uuid too; a bigger size then leaves the browser's as the minimum.
    m.send_json(json!({"channel": "terminal", "type": "resize", "id": id.to_string(), "cols": 200, "rows": 60}))
        .await;
    b.until("status 30x100", |c| {
        c.last("status")
            .is_some_and(|s| s["cols"] == 100 && s["rows"] == 30)
    })
    .await;
}

#[tokio::test]
async fn bad_messages_get_errors_and_disturb_nobody() {
    let d = Daemon::start();
    let (_, mut b, n) = shell(&d).await;
    let mut m = Mux::connect(&mux_url(&d, "")).await;
    m.wait_msg("open", &n.to_string()).await;
    let cases: Vec<Message> = vec![
        Message::Binary(b"\x09echo x\r".to_vec()),
        Message::Binary(vec![]),
        Message::Binary(b"\x00x".to_vec()),
        Message::Text("not json".into()),
        Message::Text("[1]".into()),
        Message::Text(json!({"type": "resize", "id": "1"}).to_string()),
        Message::Text(json!({"channel": "terminal", "type": "nope", "id": "1"}).to_string()),
        Message::Text(json!({"channel": "terminal", "type": "close"}).to_string()),
        Message::Text(
            json!({"channel": "terminal", "type": "resize", "id": "1", "cols": 0, "rows": 3})
                .to_string(),
        ),
        Message::Text(
            json!({"channel": "terminal", "type": "resize", "id": "77", "cols": 9, "rows": 3})
                .to_string(),
        ),
        Message::Text(
            json!({"channel": "terminal", "type": "close", "id": Uuid::new_v4().to_string()})
                .to_string(),
        ),
    ];
    for (i, msg) in cases.into_iter().enumerate() {
        let before = m.errors().len();
        m.ws.send(msg).await.expect("send");
        m.until(&format!("error {i}"), |m| m.errors().len() > before)
            .await;
        let e = m.errors()[before];
        assert!(!e["message"].as_str().unwrap_or("").is_empty(), "{e}");
    }
    assert_eq!(m.errors()[0]["id"], "9");
    // Still up, and the session and its browser client noticed nothing.
    m.input(n, b"echo STILL-FINE\r").await;
    m.wait_screen(n, "\nSTILL-FINE").await;
    b.wait_screen("\nSTILL-FINE").await;
    assert!(b.messages.iter().all(|v| v["type"] != "error"));
}

#[tokio::test]
async fn a_share_link_reaches_only_its_session_and_a_viewer_link_changes_nothing() {
    const TOKEN: &str = "test-token-0123456789abcdef";
    let d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    let (mut owner, mut other) = (None, None);
    let mut ids = Vec::new();
    for slot in [&mut owner, &mut other] {
        let id = Uuid::new_v4();
        let mut c = Client::connect(&d.ws(id, &format!("?assistant=shell&token={TOKEN}"))).await;
        c.resize(24, 80).await;
        c.wait_screen("$ ").await;
        *slot = Some(c);
        ids.push(id);
    }
    let mut owner = owner.expect("owner");
    let share: Value = reqwest::Client::new()
        .post(d.http(&format!("/api/sessions/{}/share", ids[0])))
        .bearer_auth(TOKEN)
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .expect("share")
        .json()
        .await
        .expect("json");
    let vt = share["token"].as_str().expect("token");
    let mut m = Mux::connect(&mux_url(&d, &format!("?token={vt}"))).await;
    let open = m.wait_msg("open", "1").await;
    assert_eq!(open["uuid"], ids[0].to_string());
    owner.type_str("echo OWNER-LINE\r").await;
    m.wait_screen(1, "\nOWNER-LINE").await;
    assert_eq!(
        m.terms.len(),
        1,
        "only the link's session: {:?}",
        m.messages
    );

    // Input, resize and close are refused, in this dialect's form, and reach nothing.
    m.input(1, b"echo SNEAKY\r").await;
    m.send_json(json!({"channel": "terminal", "type": "resize", "id": "1", "cols": 30, "rows": 9}))
        .await;
    m.send_json(json!({"channel": "terminal", "type": "close", "id": "1"}))
        .await;
    m.until("three refusals", |m| m.errors().len() >= 3).await;
    assert!(
        m.errors().iter().all(|e| e["id"] == "1"),
        "{:?}",
        m.errors()
    );
    owner.type_str("echo AFTER\r").await;
    m.wait_screen(1, "\nAFTER").await;
    assert!(!owner.screen_text().contains("SNEAKY"));
    owner
        .until("a status", |c| c.last("status").is_some())
        .await;
    assert_eq!(owner.last("status").expect("status")["cols"], 80);
    // Input for the other session's number is refused as unknown here.
    m.input(2, b"echo NO\r").await;
    m.until("a refusal for 2", |m| {
        m.errors().iter().any(|e| e["id"] == "2")
    })
    .await;
    assert!(!other.expect("other").screen_text().contains("echo NO"));
}

#[tokio::test]
async fn a_1_mib_paste_and_ten_sockets_on_one_session() {
    let d = Daemon::start();
    let (_, mut b, n) = shell(&d).await;
    let out = d.dir.path().join("paste.bin");
    b.run(
        &format!("stty raw -echo; echo READ''Y; cat > {}", out.display()),
        "READY",
    )
    .await;
    let data: Vec<u8> = (0..1usize << 20)
        .map(|i| {
            if i % 80 == 79 {
                b'\n'
            } else {
                b'a' + (i * 11 % 26) as u8
            }
        })
        .collect();
    let mut socks = Vec::new();
    for _ in 0..10 {
        let mut m = Mux::connect(&mux_url(&d, "")).await;
        m.wait_msg("open", &n.to_string()).await;
        socks.push(m);
    }
    socks[3].input(n, &data).await;
    let want = data.len() as u64;
    common::eventually("the paste in the file", || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() >= want)
    })
    .await;
    assert!(std::fs::read(&out).expect("read") == data, "paste altered");
    // Every socket sees the session's output.
    // Raw mode reads no Ctrl+D: the paste's reader is interrupted by a signal instead.
    b.send_json(json!({"type": "signal", "signal": "SIGINT"}))
        .await;
    // Keys sent before the shell is back would go to `cat` if it reads them before the signal
    // ends it (seen on a busy host): wait for the prompt.
    b.until("the prompt after the paste", |c| {
        c.screen_text()
            .split_once("READY")
            .is_some_and(|(_, after)| after.contains("$ "))
    })
    .await;
    b.type_str("stty sane; echo TEN-$((5+5))\r").await;
    for m in &mut socks {
        m.wait_screen(n, "TEN-10").await;
    }
}

#[tokio::test]
async fn the_size_is_the_minimum_over_browser_raw_and_multiplexed_writers() {
    let d = Daemon::start();
    let (id, mut b, n) = shell(&d).await;
    let mut r = Client::connect_raw(&d.ws_raw(id, "?cols=100&rows=30")).await;
    r.wait_json("ready").await;
    let mut m = Mux::connect(&mux_url(&d, "")).await;
    m.wait_msg("open", &n.to_string()).await;
    m.send_json(json!({"channel": "terminal", "type": "resize", "id": n.to_string(), "cols": 120, "rows": 20}))
        .await;
    // Rows from the multiplexed client, columns from the browser.
    b.until("status 20x80", |c| {
        c.last("status")
            .is_some_and(|s| s["cols"] == 80 && s["rows"] == 20)
    })
    .await;
    // The raw client's columns once the browser leaves; its rows stay above the mux's.
    // A departure reaches the session on its own connection, so a command typed on another
    // may run before it: ask again until the new size shows.
    b.close().await;
    let start = Instant::now();
    loop {
        m.input(n, b"clear; stty size\r").await;
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_secs(1) && !m.screen(n).contains("20 100") {
            assert!(m.read_one(Duration::from_millis(100)).await, "mux closed");
        }
        if m.screen(n).contains("20 100") {
            break;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "size never became 20x100: {}",
            m.screen(n)
        );
    }
    // And the mux's own size is forgotten when it goes.
    drop(m);
    let start = Instant::now();
    loop {
        r.send_text("clear; stty size\r").await;
        r.drain_for(Duration::from_secs(1)).await;
        if r.screen_text().contains("30 100") {
            break;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "size never became 30x100: {}",
            r.screen_text()
        );
    }
}

/// Past 255 sessions a session has no number: REST shows `num: null` and reaches it by uuid,
/// and the multiplexed socket, which tags frames by number, says once per such session
/// (naming its uuid) that it cannot carry it, while it carries the 255 numbered ones.
#[tokio::test]
async fn sessions_past_255_have_no_number_and_the_mux_says_so() {
    let extra = r#"
[limits]
max_sessions = 300

[assistants.idle]
name = "Idle"
command = ["sleep", "600"]
"#;
    // 257 sessions hold several hundred descriptors in the daemon.
    let d = Daemon::start_launch(&common::config(extra), |l| {
        l.args(["--no-auth"])
            .wrapper(["prlimit", "--nofile=4096:4096"])
    });
    let http = reqwest::Client::new();
    let mut nums = Vec::new();
    let mut unnumbered = Vec::new();
    for _ in 0..257 {
        let resp = http
            .post(d.http("/api/sessions"))
            .json(&json!({"assistant": "idle"}))
            .send()
            .await
            .expect("POST");
        assert_eq!(resp.status(), 201);
        let created: Value = resp.json().await.expect("json");
        match created["num"].as_u64() {
            Some(n) => nums.push(n),
            None => {
                assert!(created["num"].is_null(), "{created}");
                unnumbered.push(created["id"].as_str().expect("id").to_owned());
            }
        }
    }
    assert_eq!(
        nums,
        (1..=255).collect::<Vec<u64>>(),
        "the smallest free, in order"
    );
    assert_eq!(unnumbered.len(), 2);
    for id in &unnumbered {
        let info: Value = http
            .get(d.http(&format!("/api/sessions/{id}")))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("json");
        assert_eq!(info["id"], id.as_str(), "reached by its uuid");
        assert!(info["num"].is_null());
    }

    let mut m = Mux::connect(&mux_url(&d, "")).await;
    m.until(
        "an open for each numbered session and an error for each other",
        |m| m.terms.len() == 255 && m.errors().len() == 2,
    )
    .await;
    for id in &unnumbered {
        let told: Vec<_> = m
            .errors()
            .into_iter()
            .filter(|e| e["id"] == id.as_str())
            .collect();
        assert_eq!(told.len(), 1, "told once about {id}: {:?}", m.errors());
        assert!(told[0]["message"]
            .as_str()
            .is_some_and(|s| s.contains("no number")));
    }
    // Ending a numbered session frees its number for the next one created.
    let gone = m.find("open", "7").expect("open 7")["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    let resp = http
        .delete(d.http(&format!("/api/sessions/{gone}")))
        .send()
        .await
        .expect("DELETE");
    assert!(resp.status().is_success());
    m.wait_msg("closed", "7").await;
    // The number is given back just after the session leaves the table: a session created in
    // between has none (and stays), the next one gets it.
    let start = Instant::now();
    loop {
        let created: Value = http
            .post(d.http("/api/sessions"))
            .json(&json!({"assistant": "idle"}))
            .send()
            .await
            .expect("POST")
            .json()
            .await
            .expect("json");
        if created["num"] == 7 {
            break;
        }
        assert!(created["num"].is_null(), "{created}");
        assert!(start.elapsed() < TIMEOUT, "number 7 never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    m.until("the new session 7 opened", |m| {
        m.messages
            .iter()
            .filter(|v| v["type"] == "open" && v["id"] == "7")
            .count()
            == 2
    })
    .await;
}
