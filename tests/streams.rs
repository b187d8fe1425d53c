//! The event and log streams (docs/protocol.md section 14) on the real daemon: lifecycle events
//! with resume and reset, share links seeing their own session only, and a session's output
//! as text lines (colours removed, progress bars at their last state, wide characters, split
//! UTF-8) resuming exactly after `Last-Event-ID`, ending with `exit`.

use crate::common;

use common::sse::{Ev, Sse};
use common::{Client, Daemon};
use serde_json::{json, Value};
use uuid::Uuid;

fn of(events: &[Ev], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.event == kind)
        .map(|e| serde_json::from_str(&e.data).expect("JSON data"))
        .collect()
}

async fn create(d: &Daemon, body: Value) -> Value {
    let resp = reqwest::Client::new()
        .post(d.http("/api/sessions"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

#[tokio::test]
async fn lifecycle_events_follow_resume_and_reset() {
    let d = Daemon::start();
    let mut ev = Sse::open(&d.http("/api/events?follow=1"), None).await;
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_screen("$ ").await;
    ev.until("created and viewers", |e| {
        of(e, "state").iter().any(|s| s["state"] == "created")
            && of(e, "viewers").iter().any(|v| v["viewers"] == 1)
    })
    .await;
    let created = &of(&ev.events, "state")[0];
    assert_eq!(created["session"], id.to_string());
    assert_eq!(created["num"], 1);
    c.send_json(json!({"type": "rename_session", "name": "alpha"}))
        .await;
    c.run("exit 4", "exited").await;
    ev.until("rename and exited", |e| {
        of(e, "rename").iter().any(|r| r["name"] == "alpha")
            && of(e, "state")
                .iter()
                .any(|s| s["state"] == "exited" && s["exit_code"] == 4)
    })
    .await;
    let resp = reqwest::Client::new()
        .delete(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(resp.status(), 204);
    ev.until("ended", |e| {
        of(e, "state").iter().any(|s| s["state"] == "ended")
    })
    .await;
    // Ids increase by one.
    let ids: Vec<u64> = ev
        .events
        .iter()
        .map(|e| e.id.as_deref().expect("id").parse().expect("number"))
        .collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");

    // Resume right after an id, by header and by query; without follow the stream ends.
    let mid = ids[1].to_string();
    let mut again = Sse::open(&d.http("/api/events"), Some(&mid)).await;
    again.until_end().await;
    assert_eq!(again.events, ev.events[2..]);
    let mut by_query = Sse::open(&d.http(&format!("/api/events?lastEventId={mid}")), None).await;
    by_query.until_end().await;
    assert_eq!(by_query.events, ev.events[2..]);
    // tail=N: the newest N.
    let mut tail = Sse::open(&d.http("/api/events?tail=2"), None).await;
    tail.until_end().await;
    assert_eq!(tail.events, ev.events[ev.events.len() - 2..]);
    // An id this daemon never gave: reset to the oldest kept, then everything.
    let mut lost = Sse::open(&d.http("/api/events"), Some("99999")).await;
    lost.until_end().await;
    assert_eq!(lost.events[0].event, "reset");
    let reset: Value = serde_json::from_str(&lost.events[0].data).expect("json");
    assert_eq!(reset["oldest"], 1);
    assert_eq!(lost.events[1..], ev.events[..]);

    // Bad ids are a clear 400.
    for q in ["?lastEventId=abc", "?tail=-1"] {
        let resp = reqwest::get(d.http(&format!("/api/events{q}")))
            .await
            .expect("GET");
        assert_eq!(resp.status(), 400, "{q}");
        let v: Value = resp.json().await.expect("json");
        assert!(v["error"].as_str().is_some());
    }
}

#[tokio::test]
async fn a_share_link_sees_only_its_own_sessions_events_and_log() {
    const TOKEN: &str = "test-token-0123456789abcdef";
    let d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let resp = http
            .post(d.http("/api/sessions"))
            .bearer_auth(TOKEN)
            .json(&json!({"cmd": ["sh", "-c", "echo hello-$((40+2)); sleep 100"]}))
            .send()
            .await
            .expect("POST");
        let v: Value = resp.json().await.expect("json");
        ids.push(v["id"].as_str().expect("id").to_owned());
    }
    let vt = &common::share_token(&d, TOKEN, &ids[0], "viewer").await;
    let mut ev = Sse::open(&d.http(&format!("/api/events?token={vt}")), None).await;
    ev.until_end().await;
    assert!(!ev.events.is_empty());
    assert!(
        ev.events.iter().all(|e| e.data.contains(&ids[0])),
        "{:?}",
        ev.events
    );
    let mut log = Sse::open(
        &d.http(&format!("/api/sessions/{}/log?token={vt}", ids[0])),
        None,
    )
    .await;
    log.until_end().await;
    assert_eq!(log.texts(), ["hello-42"]);
    let resp = reqwest::get(d.http(&format!("/api/sessions/{}/log?token={vt}", ids[1])))
        .await
        .expect("GET");
    assert_eq!(resp.status(), 403);
}

/// Colour, a progress bar redrawn with CR, wide characters, UTF-8 split between writes.
const TEXT: &str = r#"
printf '\033[1;32mgreen bold\033[0m and plain\n'
for p in 10 50 90 100; do printf '\rprogress %3d%%' $p; sleep 0.05; done; printf '\n'
printf '日本語 🚀\n'
printf '\346\227'; sleep 0.2; printf '\245 split\n'
printf 'DONE-TEXT\n'
"#;

#[tokio::test]
async fn the_log_is_clean_text_that_resumes_exactly_and_ends_with_exit() {
    let d = Daemon::start();
    common::write_file(d.dir.path(), "text.sh", TEXT.as_bytes());
    let info = create(
        &d,
        json!({"cmd": ["bash", "-c", "bash text.sh; read -r line; echo \"got $line\"; exit 5"], "cwd": d.dir.path()}),
    )
    .await;
    let id = info["id"].as_str().expect("id").to_owned();
    let num = info["num"].as_u64().expect("num");
    let mut log = Sse::open(&d.http(&format!("/api/sessions/{num}/log?follow=1")), None).await;
    log.until("the text", |e| e.iter().any(|e| e.data == "DONE-TEXT"))
        .await;
    assert_eq!(
        log.texts(),
        [
            "green bold and plain",
            "progress 100%",
            "日本語 🚀",
            "日 split",
            "DONE-TEXT"
        ]
    );
    // Every id is the offset after its line: increasing, and the last equals what the
    // session has written so far.
    let offsets: Vec<u64> = log
        .events
        .iter()
        .map(|e| e.id.as_deref().expect("id").parse().expect("offset"))
        .collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]));

    // Resume after the second line: the rest, nothing twice.
    let second = log.events[1].id.clone().expect("id");
    let mut again = Sse::open(&d.http(&format!("/api/sessions/{id}/log")), Some(&second)).await;
    again.until_end().await;
    assert_eq!(again.texts(), log.texts()[2..]);

    // Input through a viewer reaches the program; the followers see its output, then exit.
    let mut c = Client::connect(&d.ws(id.parse().expect("uuid"), "")).await;
    c.wait_json("ready").await;
    c.type_str("over there\r").await;
    log.until("exit", |e| e.iter().any(|e| e.event == "exit"))
        .await;
    assert!(log.texts().contains(&"got over there"));
    let exit = &of(&log.events, "exit")[0];
    assert_eq!(exit["exit_code"], 5);
    log.until_end().await;

    // An offset older than the log keeps (or never given): reset, then from the oldest.
    let mut lost = Sse::open(
        &d.http(&format!("/api/sessions/{id}/log")),
        Some("99999999"),
    )
    .await;
    lost.until_end().await;
    assert_eq!(lost.events[0].event, "reset");
    assert_eq!(lost.texts()[0], "green bold and plain");
    let resp = reqwest::get(d.http(&format!("/api/sessions/{}/log", Uuid::new_v4())))
        .await
        .expect("GET");
    assert_eq!(resp.status(), 404);
}

/// Waits until `ptyhub_sse_streams` reads `n`.
async fn wait_streams(d: &Daemon, n: u64) {
    common::eventually_async(&format!("ptyhub_sse_streams at {n}"), || async {
        d.metric("ptyhub_sse_streams").await == n
    })
    .await;
}

#[tokio::test]
async fn follow_streams_are_counted_and_end_with_their_client_or_the_daemon() {
    let mut d = Daemon::start();
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_screen("$ ").await;
    let events = Sse::open(&d.http("/api/events?follow=1"), None).await;
    let mut log = Sse::open(&d.http(&format!("/api/sessions/{id}/log?follow=1")), None).await;
    wait_streams(&d, 2).await;
    // A client that goes stops counting, and the other stream goes on.
    drop(events);
    wait_streams(&d, 1).await;
    c.type_str("echo still-$((6*7))\r").await;
    log.until("the echo", |e| e.iter().any(|e| e.data == "still-42"))
        .await;
    // At shutdown an open stream ends, so it holds up no one: the daemon exits cleanly.
    assert!(d.terminate().success());
    log.until_end().await;
}

#[tokio::test]
async fn a_follow_from_now_or_from_another_run_misses_no_new_event() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_screen("$ ").await;
    let mut before = Sse::open(&d.http("/api/events"), None).await;
    before.until_end().await;
    assert!(!before.events.is_empty());
    // `tail=0`: nothing of the past, only what comes.
    let mut now = Sse::open(&d.http("/api/events?tail=0&follow=1"), None).await;
    // An id this daemon never gave (a client of an earlier run): reset, then everything.
    let mut stale = Sse::open(&d.http("/api/events?follow=1"), Some("99999")).await;
    stale
        .until("the reset and what is kept", |e| {
            e.len() > before.events.len()
        })
        .await;
    assert_eq!(stale.events[0].event, "reset");
    c.send_json(json!({"type": "rename_session", "name": "later"}))
        .await;
    let renamed = |e: &[Ev]| of(e, "rename").iter().any(|r| r["name"] == "later");
    now.until("the rename", renamed).await;
    assert_eq!(of(&now.events, "rename").len(), 1);
    // Nothing from before it opened.
    assert!(
        now.events.iter().all(|e| !before.events.contains(e)),
        "{:?}",
        now.events
    );
    stale.until("the rename after the reset", renamed).await;
}

#[tokio::test]
async fn a_keep_alive_comment_comes_while_output_brings_no_whole_line() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_screen("$ ").await;
    let mut resp = reqwest::get(d.http(&format!("/api/sessions/{id}/log?follow=1&tail=0")))
        .await
        .expect("GET");
    assert_eq!(resp.status(), 200);
    // A dot every half second and no line end: the stream wakes often and has nothing to send.
    c.type_str("for i in $(seq 80); do printf .; sleep 0.5; done\r")
        .await;
    let start = std::time::Instant::now();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains(": keep-alive") {
        assert!(
            start.elapsed() < common::TIMEOUT,
            "no keep-alive comment in {:?}",
            String::from_utf8_lossy(&seen)
        );
        match tokio::time::timeout(std::time::Duration::from_secs(1), resp.chunk()).await {
            Ok(Ok(Some(bytes))) => seen.extend_from_slice(&bytes),
            Ok(other) => panic!("stream ended: {other:?}"),
            Err(_) => {}
        }
    }
}

/// A flood's output window is let go once the session is quiet and every reader has taken it
/// (`daemon/session/output_log.rs`, `Release`), and nothing is lost on the way: the viewer,
/// a follower of the log and the recording have all of it, and what comes after reaches each
/// of them and a new joiner; only a read from the first byte is told it is gone.
#[tokio::test]
async fn a_quiet_session_lets_go_of_a_flood_every_reader_has_taken() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_screen("$ ").await;
    let mut log = Sse::open(
        &d.http(&format!("/api/sessions/{id}/log?follow=1&tail=0")),
        None,
    )
    .await;
    // 300 KB, several times what a quiet log keeps (64 KiB), well within its 4 MiB window.
    c.type_str(
        "seq -f 'line %06g of the flood, long enough to fill the log' 5000; echo FLOOD-$((6*7))\r",
    )
    .await;
    c.wait_screen("FLOOD-42").await;
    log.until("the flood's end", |e| {
        e.iter().any(|e| e.data == "FLOOD-42")
    })
    .await;
    let lines = log.texts();
    let first = lines.iter().position(|l| l.starts_with("line 000001 "));
    let last = lines.iter().position(|l| l.starts_with("line 005000 "));
    assert!(
        matches!((first, last), (Some(a), Some(b)) if b - a == 4999),
        "every line, in order"
    );

    // Quiet, and taken by everyone: a read from the first byte is reset past the flood's
    // start (without the release the window still holds it all).
    let url = d.http(&format!("/api/sessions/{id}/log"));
    common::eventually_async("the log lets go of the flood", || async {
        let mut from_start = Sse::open(&url, Some("0")).await;
        from_start.until_end().await;
        from_start.events.first().is_some_and(|e| {
            e.event == "reset"
                && serde_json::from_str::<Value>(&e.data).expect("json")["oldest"]
                    .as_u64()
                    .is_some_and(|oldest| oldest > 150_000)
        })
    })
    .await;

    // What comes next reaches the viewer, the follower, a joiner and the recording, which
    // kept the whole flood.
    c.type_str("echo AFTER-$((1+1))\r").await;
    c.wait_screen("AFTER-2").await;
    log.until("the output after", |e| {
        e.iter().any(|e| e.data == "AFTER-2")
    })
    .await;
    let mut joiner = Client::connect(&d.ws(id, "")).await;
    joiner.wait_screen("AFTER-2").await;
    let recording = d.http(&format!("/api/sessions/{id}/recording"));
    common::eventually_async("the recording has it all", || async {
        let text = reqwest::get(&recording)
            .await
            .expect("GET")
            .text()
            .await
            .expect("body");
        ["line 000001 of", "line 005000 of", "FLOOD-42", "AFTER-2"]
            .iter()
            .all(|s| text.contains(s))
    })
    .await;
}
