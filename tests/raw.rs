//! The raw terminal dialect (`/ws/{id}/raw`, docs/protocol.md section 10) against the real daemon
//! and real bash: the replay equals a browser joiner's screen, input as text, binary and
//! `0x01` frames, control messages, exit, `create=0`, sizes, read-only links, bad frames, and
//! many raw clients on one session.

use crate::common;

use common::{assert_same_screen, Client, Daemon};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

/// Colours, scrollback, then a full-screen program with input modes, left on screen.
const DRAW: &str = r#"
for ((i = 1; i <= 120; i++)); do
  printf '\e[3%dm%04d \e[1;4%dmbold\e[0m \e[38;2;%d;90;200mrgb\e[0m 日本 %s\n' \
    $((i % 8)) "$i" $(((i + 3) % 8)) $((i % 256)) "$(printf '%*s' $((i % 30)) '' | tr ' ' '=')"
done
printf '\e[?1049h\e[?1h\e=\e[?2004h\e[?1002h\e[?1006h\e[2J'
for ((i = 1; i <= 200; i++)); do
  printf '\e[%d;%dH\e[48;5;%dm cell-%d \e[0m' $(((i % 20) + 1)) $(((i * 7) % 60 + 1)) $((i % 256)) "$i"
done
printf '\e[22;3H\e[33mALT-%s-DRAWN\e[0m\e[5;10H' SCREEN
read -r line
printf '\e[?1002l\e[?1006l\e[?2004l\e[?1l\e>\e[?1049l'
echo "LEFT-$line"
"#;

/// A browser client of a fresh shell session, sized 24x80, at its prompt.
async fn shell(d: &Daemon, id: Uuid) -> Client {
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.resize(24, 80).await;
    c.wait_screen("$ ").await;
    c
}

/// A raw client that has received its replay and `ready`.
async fn raw(d: &Daemon, id: impl std::fmt::Display, query: &str) -> Client {
    let mut c = Client::connect_raw(&d.ws_raw(id, query)).await;
    c.wait_json("ready").await;
    c
}

fn errors(c: &Client) -> Vec<&Value> {
    c.messages.iter().filter(|m| m["type"] == "error").collect()
}

#[tokio::test]
async fn the_replay_before_ready_draws_the_browser_joiners_screen() {
    let d = Daemon::start();
    common::write_file(d.dir.path(), "draw.sh", DRAW.as_bytes());
    let id = Uuid::new_v4();
    let mut a = shell(&d, id).await;
    a.run("bash draw.sh", "ALT-SCREEN-DRAWN").await;

    let mut browser = Client::connect(&d.ws(id, "")).await;
    browser.wait_json("ready").await;
    let r = raw(&d, id, "").await;
    assert!(!r.replay.is_empty(), "a replay came before ready");
    assert!(
        r.messages.iter().all(|m| m["type"] == "ready"),
        "nothing but ready in text: {:?}",
        r.messages
    );
    assert!(r.term.screen().alternate_screen());
    assert_same_screen(
        &browser,
        &r,
        "raw replay vs browser snapshot, alternate screen",
    );

    // Back on the main screen: scrollback and colours too.
    a.type_str("bye\r").await;
    a.wait_screen("LEFT-bye").await;
    a.wait_screen("$ ").await;
    let mut browser = Client::connect(&d.ws(id, "")).await;
    browser.wait_json("ready").await;
    let mut r = raw(&d, id, "").await;
    assert_same_screen(&browser, &r, "raw replay vs browser snapshot, main screen");
    browser.term.screen_mut().set_scrollback(60);
    r.term.screen_mut().set_scrollback(60);
    assert_eq!(
        browser.term.screen().contents_formatted(),
        r.term.screen().contents_formatted(),
        "scrollback differs"
    );
    // Plain ANSI, not the browser's gzip chunks.
    assert!(r.replay.windows(4).any(|w| w == b"0120"));
}

#[tokio::test]
async fn keys_as_text_binary_and_control_frames() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut browser = shell(&d, id).await;
    let mut r = raw(&d, id, "").await;

    // AttachAddon sends keys as text frames; websocat and the CLI as binary.
    r.send_text("echo TEXT-").await;
    r.send_text("INPUT\r").await;
    r.wait_screen("TEXT-INPUT\n").await;
    r.send_binary(b"echo BIN-INPUT\r".to_vec()).await;
    r.wait_screen("BIN-INPUT\n").await;
    browser.wait_screen("BIN-INPUT").await;
    // A text frame that is JSON of no known type is input too.
    r.send_text("echo '{\"type\":\"nope\"}'\r").await;
    r.wait_screen("\n{\"type\":\"nope\"}").await;

    // Control messages: as text, and with seed 003's 0x01 byte, text or binary.
    r.send_text(r#"{"type":"ping"}"#).await;
    let pong = r.wait_json("pong").await;
    assert_eq!(pong, json!({"type": "pong"}));
    r.send_binary(b"\x01{\"type\":\"resize\",\"cols\":70,\"rows\":20}".to_vec())
        .await;
    browser
        .until("status 20x70", |c| {
            c.last("status")
                .is_some_and(|s| s["cols"] == 70 && s["rows"] == 20)
        })
        .await;
    r.send_text("\u{1}{\"type\":\"resize\",\"cols\":60,\"rows\":18}")
        .await;
    r.set_term_size(18, 60);
    r.send_text("stty size\r").await;
    r.wait_screen("18 60").await;
    // A lone 0x01 is Ctrl+A, input like any other byte.
    // Sent once the shell runs the command: its line editor would take Ctrl+A as a key.
    r.send_text("echo READ''ING; read -r x; printf 'GOT:%q\\n' \"$x\"\r")
        .await;
    r.wait_screen("\nREADING").await;
    r.send_binary(b"\x01".to_vec()).await;
    r.send_text("z\r").await;
    r.wait_screen("GOT:$'\\001z'").await;

    // Signals reach the foreground program (the one that prints the marker then sleeps).
    r.send_text("clear; sh -c 'echo SLEEP''ING; exec sleep 100'; echo AFTER-SLEEP\r")
        .await;
    r.wait_screen("SLEEPING").await;
    r.send_text(r#"{"type":"signal","signal":"SIGINT"}"#).await;
    r.send_text("echo INTERRUPTED\r").await;
    r.wait_screen("\nINTERRUPTED").await;
    let screen = r.screen_text();
    assert!(!screen.contains("\nAFTER-SLEEP"), "{screen}");
    assert!(errors(&r).is_empty(), "no error: {:?}", r.messages);
    // Raw output is raw: nothing but terminal bytes and the few control messages.
    assert!(r
        .messages
        .iter()
        .all(|m| ["ready", "pong"].contains(&m["type"].as_str().unwrap_or(""))));
}

#[tokio::test]
async fn exit_is_sent_live_and_on_join_and_the_connection_stays_until_deleted() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let _browser = shell(&d, id).await;
    let mut r = raw(&d, id, "").await;
    r.send_text("exit 7\r").await;
    let exit = r.wait_json("exit").await;
    assert_eq!(exit, json!({"type": "exit", "code": 7, "signal": null}));
    // Still open and joinable: a late raw joiner gets replay, ready, then exit.
    let mut late = Client::connect_raw(&d.ws_raw(id, "")).await;
    let exit = late.wait_json("exit").await;
    assert_eq!(exit["code"], 7);
    let kinds: Vec<&str> = late
        .messages
        .iter()
        .map(|m| m["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["ready", "exit"]);
    assert!(late.screen_text().contains("[Process exited (code 7)]"));

    let resp = reqwest::Client::new()
        .delete(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status(), 204);
    assert_eq!(r.until_closed().await.0, 4003);
    assert_eq!(late.until_closed().await.0, 4003);

    // A signal's name comes with the code.
    let id = Uuid::new_v4();
    let _browser = shell(&d, id).await;
    let mut r = raw(&d, id, "").await;
    r.send_text("kill -KILL $$\r").await;
    let exit = r.wait_json("exit").await;
    assert_eq!(exit["signal"], "SIGKILL");
    assert_eq!(exit["code"], 128 + 9);
}

#[tokio::test]
async fn create_0_joins_only_and_sizes_come_from_the_query() {
    let d = Daemon::start();
    let missing = Uuid::new_v4();
    let mut c = Client::connect_raw(&d.ws_raw(missing, "?create=0&assistant=shell")).await;
    assert_eq!(c.until_closed().await.0, 4004);
    assert_eq!(
        c.messages,
        [json!({"type": "error", "message": "Session not found", "code": "not_found"})]
    );
    let sessions: Value = reqwest::get(d.http("/api/sessions"))
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(sessions, json!([]), "create=0 created nothing");

    // No assistant: the session cannot be created, as in the browser dialect.
    let mut c = Client::connect_raw(&d.ws_raw(missing, "")).await;
    assert_eq!(c.until_closed().await.0, 4002);
    assert_eq!(c.messages[0]["code"], "session_create_failed");

    // cols and rows are this client's size, as if it had sent a resize.
    let id = Uuid::new_v4();
    let mut r = raw(&d, id, "?assistant=shell&cols=100&rows=30").await;
    r.set_term_size(30, 100);
    r.wait_screen("$ ").await;
    r.send_text("stty size\r").await;
    r.wait_screen("30 100").await;
    let mut again = raw(&d, id, "?create=0").await;
    again.send_text("echo JOINED\r").await;
    again.wait_screen("\nJOINED").await;

    // A bad size is refused before the upgrade.
    for q in ["?cols=0&rows=5", "?cols=abc&rows=5", "?cols=80"] {
        let err = tokio_tungstenite::connect_async(d.ws_raw(id, q))
            .await
            .expect_err("refused");
        match err {
            tokio_tungstenite::tungstenite::Error::Http(resp) => {
                assert_eq!(resp.status(), 400, "{q}")
            }
            other => panic!("{q}: {other}"),
        }
    }
}

#[tokio::test]
async fn bad_control_frames_get_errors_and_disturb_nobody() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut browser = shell(&d, id).await;
    let mut r = raw(&d, id, "").await;
    let mut bystander = raw(&d, id, "").await;
    for bad in [
        &b"\x01{\"type\":\"nope\"}"[..],
        b"\x01{}",
        b"\x01{\"type\":\"resize\",\"cols\":0,\"rows\":5}",
        b"\x01{\"type\":\"signal\",\"signal\":9}",
    ] {
        let before = errors(&r).len();
        r.send_binary(bad.to_vec()).await;
        r.until("an error", |c| errors(c).len() > before).await;
        let e = errors(&r)[before];
        assert_eq!(e["code"], "bad_message", "{e}");
        assert!(!e["message"].as_str().unwrap_or("").is_empty());
    }
    for bad in [
        r#"{"type":"resize","cols":80}"#,
        r#"{"type":"resize","cols":"80","rows":24}"#,
        r#"{"type":"signal"}"#,
    ] {
        let before = errors(&r).len();
        r.send_text(bad).await;
        r.until("an error", |c| errors(c).len() > before).await;
    }
    // A signal the session does not allow is refused by the session, in this dialect's form.
    r.send_text(r#"{"type":"signal","signal":"SIGSTOP"}"#).await;
    r.until("a refusal", |c| {
        errors(c).iter().any(|e| e["code"] == "bad_signal")
    })
    .await;
    // Still up, and nobody else noticed.
    r.send_text("echo STILL-UP\r").await;
    r.wait_screen("\nSTILL-UP").await;
    bystander.wait_screen("\nSTILL-UP").await;
    browser.wait_screen("\nSTILL-UP").await;
    assert!(errors(&bystander).is_empty());
    assert!(errors(&browser).is_empty());
}

#[tokio::test]
async fn a_1_mib_paste_through_the_raw_dialect_arrives_intact() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut typist = shell(&d, id).await;
    let out = d.dir.path().join("paste.bin");
    typist
        .run(
            &format!("stty raw -echo; echo READ''Y; cat > {}", out.display()),
            "READY",
        )
        .await;
    let data: Vec<u8> = (0..1usize << 20)
        .map(|i| {
            if i % 80 == 79 {
                b'\n'
            } else {
                b'a' + (i * 7 % 26) as u8
            }
        })
        .collect();
    // One binary frame and a text frame of the same bytes: both are input.
    let (mut paster, _) = tokio_tungstenite::connect_async(d.ws_raw(id, ""))
        .await
        .expect("connect");
    paster
        .send(Message::Binary(data.clone()))
        .await
        .expect("send");
    let text = String::from_utf8(data.clone()).expect("ascii");
    paster.send(Message::Text(text)).await.expect("send");
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = paster.next().await {} });
    let want = 2 * data.len() as u64;
    common::eventually("both pastes in the file", || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() >= want)
    })
    .await;
    let got = std::fs::read(&out).expect("read");
    assert_eq!(got.len(), 2 * data.len());
    assert!(got[..data.len()] == data[..] && got[data.len()..] == data[..]);
    reader.abort();
}

#[tokio::test]
async fn a_hundred_raw_clients_on_one_session() {
    let d = Daemon::start_with(&common::config(
        "[limits]\nmax_viewers_per_session = 200\nmax_connections_per_ip = 256\n",
    ));
    let id = Uuid::new_v4();
    let mut browser = shell(&d, id).await;
    let mut clients = Vec::new();
    for _ in 0..100 {
        clients.push(raw(&d, id, "").await);
    }
    browser
        .until("101 viewers", |c| {
            c.last("status").is_some_and(|s| s["viewers"] == 101)
        })
        .await;
    clients[37].send_text("echo HUNDRED-$((50+50))\r").await;
    for c in &mut clients {
        c.wait_screen("\nHUNDRED-100").await;
    }
    browser.wait_screen("\nHUNDRED-100").await;
}

#[tokio::test]
async fn a_read_only_link_is_refused_input_and_resize_with_an_error() {
    const TOKEN: &str = "test-token-0123456789abcdef";
    let d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, &format!("?assistant=shell&token={TOKEN}"))).await;
    owner.resize(24, 80).await;
    owner.wait_screen("$ ").await;
    let vt = common::share_token(&d, TOKEN, &id.to_string(), "viewer").await;

    // Its size in the query is refused like a resize, with an error that says why.
    let mut v = raw(&d, id, &format!("?token={vt}&cols=40&rows=10")).await;
    v.until("a read-only refusal", |c| {
        errors(c).iter().any(|e| e["code"] == "read_only")
    })
    .await;
    let before = errors(&v).len();
    v.send_text("echo SNEAKY\r").await;
    v.send_binary(b"echo SNEAKY\r".to_vec()).await;
    v.send_text(r#"{"type":"resize","cols":30,"rows":9}"#).await;
    v.send_text(r#"{"type":"signal","signal":"SIGINT"}"#).await;
    v.until("four more refusals", |c| errors(c).len() >= before + 4)
        .await;
    assert!(errors(&v)[before..]
        .iter()
        .all(|e| e["code"] == "read_only"));
    // It still watches: the owner's output reaches it; its own never reached the program.
    owner.type_str("echo OWNER-TYPED\r").await;
    v.wait_screen("\nOWNER-TYPED").await;
    assert!(!owner.screen_text().contains("SNEAKY"));
    // The join's status may come after the first output (written straight to an idle viewer):
    // wait for it rather than assume it was read with the prompt.
    owner
        .until("a status", |c| c.last("status").is_some())
        .await;
    assert_eq!(owner.last("status").expect("status")["cols"], 80);

    // A share link's token does not reach another session through this dialect either.
    let other = Uuid::new_v4();
    let err = tokio_tungstenite::connect_async(d.ws_raw(other, &format!("?token={vt}")))
        .await
        .expect_err("refused");
    match err {
        tokio_tungstenite::tungstenite::Error::Http(resp) => assert_eq!(resp.status(), 403),
        other => panic!("{other}"),
    }
}

/// A key sent right after a resize runs with the new size: the resize reaches the PTY before
/// the key does, though the key takes the direct path to the PTY.
#[tokio::test]
async fn a_key_right_after_a_resize_sees_the_new_size() {
    let d = Daemon::start();
    let mut r = raw(&d, Uuid::new_v4(), "?assistant=shell&cols=100&rows=30").await;
    r.wait_screen("$ ").await;
    for i in 0..12u16 {
        let (rows, cols) = (20 + i, 60 + i);
        r.send_text(&format!(
            r#"{{"type":"resize","cols":{cols},"rows":{rows}}}"#
        ))
        .await;
        r.set_term_size(rows, cols);
        r.send_text("clear; stty size\r").await;
        r.wait_screen(&format!("{rows} {cols}\n$ ")).await;
    }
}
