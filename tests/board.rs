//! The board (`GET /ws/board`, docs/protocol.md section 11a) on the real daemon with real
//! programs: the first `cards`, a change as a `card` with only what changed, rows only for the
//! visible cards and at most about once a second, a quick reply that reaches the program, the
//! limits of a share link (its session only; a watch-only link cannot type), `gone`, and bad
//! input.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{http, Client, Daemon};
use serde_json::{json, Value};

const TOKEN: &str = "board-test-token-0123456789abcdef";

/// A daemon whose `claude` is the fake permission prompt (`tests/agents/permission-prompt`).
fn daemon() -> Daemon {
    let prompt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agents/permission-prompt");
    let extra = format!(
        "[attention]\nquiet = \"1s\"\n\n[assistants.claude]\nname = \"Claude\"\n\
         command = [\"{}\"]\nstate_hooks = \"none\"\n",
        prompt.display()
    );
    Daemon::in_process_auth(&common::config(&extra), Some(TOKEN))
}

/// Creates a session from `body`; its uuid.
async fn create(d: &Daemon, body: Value) -> String {
    d.create_session(TOKEN, body).await
}

async fn board(d: &Daemon, token: &str) -> Client {
    Client::connect(&format!("ws://{}/ws/board?token={token}", d.addr)).await
}

/// The `card` messages about `id` received so far.
fn cards_of<'a>(c: &'a Client, id: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    c.messages
        .iter()
        .filter(move |m| m["type"] == "card" && m["id"] == id)
}

/// The card of `id` as the client would hold it: the first `cards` with every `card` applied.
fn card(c: &Client, id: &str) -> Value {
    let mut card = c
        .messages
        .iter()
        .find(|m| m["type"] == "cards")
        .expect("cards")["cards"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|k| k["id"] == id)
        .cloned()
        .unwrap_or_else(|| json!({"rows": []}));
    for change in cards_of(c, id) {
        for (k, v) in change.as_object().expect("object") {
            match k.as_str() {
                // A card sent whole (a session that appeared later) has its rows as a list.
                "rows" if v.is_array() => card["rows"] = v.clone(),
                "rows" => {
                    for (i, text) in v.as_object().expect("rows by index") {
                        let i: usize = i.parse().expect("index");
                        let rows = card["rows"].as_array_mut().expect("rows");
                        if rows.len() <= i {
                            rows.resize(i + 1, json!(""));
                        }
                        rows[i] = text.clone();
                    }
                }
                "height" => {
                    let n = v.as_u64().expect("height") as usize;
                    card["rows"]
                        .as_array_mut()
                        .expect("rows")
                        .resize(n, json!(""));
                }
                _ => card[k] = v.clone(),
            }
        }
    }
    card
}

async fn errors_after(c: &mut Client, n: usize) -> Value {
    c.until("an error", |c| {
        c.messages[n..].iter().any(|m| m["type"] == "error")
    })
    .await;
    c.messages[n..]
        .iter()
        .find(|m| m["type"] == "error")
        .cloned()
        .expect("error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_card_changes_by_its_fields_and_a_quick_reply_answers_it() {
    let d = daemon();
    let shell = create(&d, json!({"assistant": "shell", "name": "calm"})).await;
    let mut b = board(&d, TOKEN).await;
    let first = b.wait_json("cards").await;
    let all = first["cards"].as_array().expect("cards");
    assert_eq!(all.len(), 1, "{first}");
    let calm = &all[0];
    assert_eq!(calm["id"], shell.as_str());
    assert_eq!(calm["name"], "calm");
    assert_eq!(calm["assistant"], "shell");
    assert_eq!(calm["assistantName"], "Shell");
    assert_eq!(calm["mayType"], true);
    assert_eq!(calm["alive"], true);
    assert!(
        calm["rows"].is_array() && calm["cursor"].is_array(),
        "{calm}"
    );
    for field in ["num", "state", "since", "reason", "choices", "people"] {
        assert!(calm.get(field).is_some(), "{field} missing: {calm}");
    }

    // A new session arrives whole, then changes by its fields only.
    let claude = create(&d, json!({"assistant": "claude"})).await;
    b.until("the new session's card", |c| {
        cards_of(c, &claude).any(|m| m.get("assistant").is_some())
    })
    .await;
    b.until("the claude card waiting", |c| {
        card(c, &claude)["state"] == "waiting"
    })
    .await;
    let now = card(&b, &claude);
    assert_eq!(now["reason"], "Claude asks: Do you want to proceed?");
    assert_eq!(now["choices"][0], json!({"label": "Yes", "keys": "1"}));

    // The quick reply reaches the program: it answers, and the card says working.
    b.send_json(json!({"type": "reply", "id": claude, "keys": "1"}))
        .await;
    b.until("the claude card working", |c| {
        card(c, &claude)["state"] == "working"
    })
    .await;
    // Every card message after the whole one carries only what changed (the whole card may
    // itself already say waiting, when the prompt was drawn before the board heard of the
    // session; the change to working always comes after it).
    let whole = cards_of(&b, &claude)
        .position(|m| m.get("assistant").is_some())
        .expect("the whole card");
    let changes: Vec<&Value> = cards_of(&b, &claude).skip(whole + 1).collect();
    assert!(
        changes.iter().any(|m| m["state"] == "working"),
        "{changes:?}"
    );
    for change in changes {
        assert!(change.get("assistant").is_none(), "only changes: {change}");
        assert!(change.get("name").is_none(), "only changes: {change}");
        assert!(
            change.get("rows").is_none(),
            "no rows for a card not visible: {change}"
        );
    }
    // The program saw the key (its screen says so): made visible, its rows arrive.
    b.send_json(json!({"type": "visible", "ids": [claude]}))
        .await;
    b.until("the answer on the card's rows", |c| {
        card(c, &claude)["rows"].as_array().is_some_and(|r| {
            r.iter()
                .any(|row| row.as_str().is_some_and(|t| t.contains("answer 1")))
        })
    })
    .await;
    assert_eq!(b.count("error"), 0, "{:?}", b.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_go_only_to_visible_cards_at_most_once_a_second() {
    let d = daemon();
    let busy = create(&d, json!({"assistant": "shell", "name": "busy"})).await;
    let other = create(&d, json!({"assistant": "shell", "name": "other"})).await;
    // Both redraw ten times a second.
    for id in [&busy, &other] {
        let mut c = Client::connect(&d.ws(id.parse().unwrap(), &format!("?token={TOKEN}"))).await;
        c.wait_screen("$ ").await;
        c.type_str("while :; do date +%s%N; sleep 0.1; done\r")
            .await;
        c.wait_screen("\n1").await;
    }
    let mut b = board(&d, TOKEN).await;
    b.wait_json("cards").await;
    b.send_json(json!({"type": "visible", "ids": [busy]})).await;
    let start = Instant::now();
    b.until("three row updates of the visible card", |c| {
        cards_of(c, &busy)
            .filter(|m| m.get("rows").is_some())
            .count()
            >= 3
    })
    .await;
    // Three updates at least a second apart, after the first.
    b.drain_for(Duration::from_millis(500)).await;
    let elapsed = start.elapsed().as_secs_f64();
    let updates = cards_of(&b, &busy)
        .filter(|m| m.get("rows").is_some())
        .count();
    assert!(
        (updates as f64) <= elapsed + 1.0,
        "{updates} row updates in {elapsed:.1} s"
    );
    assert_eq!(
        cards_of(&b, &other)
            .filter(|m| m.get("rows").is_some())
            .count(),
        0,
        "rows for a card not visible"
    );
    // Only the rows that changed: a 24-row screen whose one line moves sends a few rows.
    let last = cards_of(&b, &busy)
        .filter(|m| m.get("rows").is_some())
        .last()
        .cloned()
        .expect("rows");
    assert!(
        last["rows"].as_object().expect("by index").len() < 24,
        "{last}"
    );
    // The other card becomes visible: its rows follow.
    b.send_json(json!({"type": "visible", "ids": [other]}))
        .await;
    b.until("rows of the card now visible", |c| {
        cards_of(c, &other).any(|m| m.get("rows").is_some())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_link_sees_its_session_and_types_only_if_it_may() {
    let d = daemon();
    let mine = create(&d, json!({"assistant": "shell", "name": "mine"})).await;
    let theirs = create(&d, json!({"assistant": "shell", "name": "theirs"})).await;
    let watch = common::share_token(&d, TOKEN, &mine, "viewer").await;
    let mut w = board(&d, &watch).await;
    let first = w.wait_json("cards").await;
    let ids: Vec<&Value> = first["cards"]
        .as_array()
        .expect("cards")
        .iter()
        .map(|c| &c["id"])
        .collect();
    assert_eq!(ids, [&json!(mine)], "{first}");
    assert_eq!(first["cards"][0]["mayType"], false);
    let n = w.messages.len();
    w.send_json(json!({"type": "reply", "id": mine, "keys": "echo typed\r"}))
        .await;
    let refused = errors_after(&mut w, n).await;
    assert_eq!(refused["code"], "read_only", "{refused}");
    assert_eq!(refused["id"], mine.as_str());
    let n = w.messages.len();
    w.send_json(json!({"type": "reply", "id": theirs, "keys": "x"}))
        .await;
    assert_eq!(errors_after(&mut w, n).await["code"], "not_found");
    // A session created later is not shown to it either.
    let later = create(&d, json!({"assistant": "shell"})).await;
    w.drain_for(Duration::from_millis(500)).await;
    assert_eq!(cards_of(&w, &later).count(), 0);

    // A writer's link types.
    let write = common::share_token(&d, TOKEN, &mine, "writer").await;
    let mut v = Client::connect(&d.ws(mine.parse().unwrap(), &format!("?token={TOKEN}"))).await;
    v.wait_screen("$ ").await;
    let mut wr = board(&d, &write).await;
    assert_eq!(wr.wait_json("cards").await["cards"][0]["mayType"], true);
    wr.send_json(json!({"type": "reply", "id": mine, "keys": "echo from-the-board\r"}))
        .await;
    v.wait_screen("\nfrom-the-board").await;
    assert_eq!(wr.count("error"), 0, "{:?}", wr.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_shows_on_the_card_and_an_ended_session_is_gone() {
    let d = daemon();
    let id = create(&d, json!({"assistant": "shell"})).await;
    let mut b = board(&d, TOKEN).await;
    b.wait_json("cards").await;
    b.send_json(json!({"type": "reply", "id": id, "keys": "exit 3\r"}))
        .await;
    b.until("the card exited", |c| {
        let k = card(c, &id);
        k["state"] == "exited" && k["alive"] == false
    })
    .await;
    let n = b.messages.len();
    b.send_json(json!({"type": "reply", "id": id, "keys": "x"}))
        .await;
    assert_eq!(errors_after(&mut b, n).await["code"], "not_running");
    let resp = http()
        .delete(d.http(&format!("/api/sessions/{id}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("DELETE");
    assert!(resp.status().is_success());
    b.until("gone", |c| {
        c.messages
            .iter()
            .any(|m| m["type"] == "gone" && m["id"] == id.as_str())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_an_error_and_the_board_stays() {
    let d = daemon();
    let id = create(&d, json!({"assistant": "shell"})).await;
    let mut b = board(&d, TOKEN).await;
    b.wait_json("cards").await;
    for bad in [
        "not json",
        "[1]",
        r#"{"type":"dance"}"#,
        r#"{"type":"visible","ids":"all"}"#,
        r#"{"type":"reply","id":"nope","keys":"1"}"#,
        r#"{"type":"reply","keys":"1"}"#,
    ] {
        let n = b.messages.len();
        b.send_text(bad).await;
        let e = errors_after(&mut b, n).await;
        assert_eq!(e["code"], "bad_message", "{bad}: {e}");
    }
    let n = b.messages.len();
    b.send_binary(b"\x01{}".to_vec()).await;
    assert_eq!(errors_after(&mut b, n).await["code"], "bad_message");
    let n = b.messages.len();
    let unknown = uuid::Uuid::new_v4().to_string();
    b.send_json(json!({"type": "reply", "id": unknown, "keys": "1"}))
        .await;
    assert_eq!(errors_after(&mut b, n).await["code"], "not_found");
    // Still served: a visible card gets its rows when its screen changes.
    b.send_json(json!({"type": "visible", "ids": [id]})).await;
    b.send_json(json!({"type": "reply", "id": id, "keys": "echo still-here\r"}))
        .await;
    b.until("rows after the bad input", |c| {
        card(c, &id)["rows"]
            .as_array()
            .is_some_and(|r| r.iter().any(|row| row == "still-here"))
    })
    .await;
    // An oversized message closes with 1009.
    b.send_text(&"x".repeat(70 * 1024)).await;
    let (code, _) = b.until_closed().await;
    assert_eq!(code, 1009);
}
