//! Names everywhere (issue 36), on the real daemon with real bash: the owner (the daemon token)
//! and a guest (a share link) in one session. Presence says who is a user and who a guest; a
//! user's chat carries its verified name whatever it sends, a guest's is marked as a guest's
//! even when it calls itself the owner; the session list says who created a session and who
//! is in it; the recording marks joins and typing; `GET /api/me` says who each caller is.

use crate::common;

use std::time::Duration;

use common::{eventually_async, http, share_token, Client, Daemon, TIMEOUT};
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "names-test-token-0123456789abcdef";

/// `GET /api/me` with `token`.
async fn me(d: &Daemon, token: &str) -> Value {
    let resp = http()
        .get(d.http("/api/me"))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET /api/me");
    assert_eq!(resp.status(), 200);
    resp.json().await.expect("JSON")
}

/// The session's entry in the list.
async fn listed(d: &Daemon, id: Uuid) -> Value {
    let list: Vec<Value> = http()
        .get(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET /api/sessions")
        .json()
        .await
        .expect("JSON");
    list.into_iter()
        .find(|s| s["id"] == id.to_string())
        .expect("the session is listed")
}

/// The recording's markers (`"m"` events), in order.
async fn markers(d: &Daemon, id: Uuid) -> Vec<String> {
    let resp = http()
        .get(d.http(&format!("/api/sessions/{id}/recording")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET recording");
    if resp.status() != 200 {
        return Vec::new();
    }
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e[1] == "m")
        .filter_map(|e| e[2].as_str().map(str::to_owned))
        .collect()
}

/// The chat lines `c` received, as (userName, guest, text).
fn chats(c: &Client) -> Vec<(String, bool, String)> {
    c.messages
        .iter()
        .filter(|m| m["type"] == "chat")
        .map(|m| {
            (
                m["userName"].as_str().unwrap_or_default().to_owned(),
                m["guest"].as_bool().expect("chat says guest or not"),
                m["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_and_a_guest_are_told_apart_everywhere() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));

    // Who the daemon token is: the owner, an admin.
    let owner = me(&d, TOKEN).await;
    let name = owner["name"]
        .as_str()
        .expect("the owner has a name")
        .to_owned();
    assert_eq!(owner["scopes"], json!(["view", "write", "exec", "admin"]));
    assert_eq!(owner["guest"], false);
    assert_eq!(owner["credential"], "daemon-token");

    // The owner creates the session by joining it.
    let id = Uuid::new_v4();
    let mut o = Client::connect(&format!("{}&token={TOKEN}", d.ws(id, "?assistant=shell"))).await;
    o.wait_screen("$ ").await;
    assert_eq!(listed(&d, id).await["createdBy"], name.as_str());

    // A guest, who calls itself by the owner's name.
    let share = share_token(&d, TOKEN, &id.to_string(), "writer").await;
    let guest = me(&d, &share).await;
    assert_eq!(guest["name"], Value::Null);
    assert_eq!(guest["guest"], true);
    assert_eq!(guest["scopes"], json!(["view", "write"]));
    assert!(
        guest["credential"]
            .as_str()
            .is_some_and(|c| c.starts_with("share:")),
        "{guest}"
    );
    let mut g = Client::connect(&d.ws(id, &format!("?token={share}"))).await;
    g.wait_json("ready").await;

    // Presence: the owner by user name, the guest as a guest.
    o.until("the guest in presence", |c| {
        c.last("presence")
            .is_some_and(|p| p["viewers"].as_array().is_some_and(|v| v.len() == 2))
    })
    .await;
    let people = o.last("presence").expect("presence")["viewers"].clone();
    assert_eq!(people[0]["user"], name.as_str(), "{people}");
    assert_eq!(people[0]["name"], name.as_str(), "{people}");
    assert_eq!(people[0]["guest"], false, "{people}");
    assert_eq!(people[1]["user"], Value::Null, "{people}");
    assert_eq!(people[1]["guest"], true, "{people}");

    // The owner's chat comes under its own name whatever it sends; a presence name cannot
    // change it either.
    o.send_json(json!({"type": "presence", "name": "mallory"}))
        .await;
    o.send_json(json!({"type": "chat", "userName": "mallory", "text": "from the owner"}))
        .await;
    // The guest claims the owner's name: it stays a guest.
    g.send_json(json!({"type": "chat", "userName": name, "text": "from the guest"}))
        .await;
    for c in [&mut o, &mut g] {
        c.until("both chat lines", |c| chats(c).len() == 2).await;
        let mut lines = chats(c);
        lines.sort_by(|a, b| a.2.cmp(&b.2));
        assert_eq!(
            lines,
            vec![
                (name.clone(), true, "from the guest".to_owned()),
                (name.clone(), false, "from the owner".to_owned()),
            ]
        );
    }
    o.until("the guest's chat name in presence", |c| {
        c.last("presence")
            .is_some_and(|p| p["viewers"][1]["name"] == name.as_str())
    })
    .await;
    let people = o.last("presence").expect("presence")["viewers"].clone();
    assert_eq!(
        people[0]["name"],
        name.as_str(),
        "still the owner: {people}"
    );
    assert_eq!(people[1]["guest"], true, "still a guest: {people}");

    // The session list: who created it, who is in it.
    let entry = listed(&d, id).await;
    assert_eq!(entry["createdBy"], name.as_str());
    assert_eq!(entry["people"], json!([name, format!("{name} (guest)")]));

    // Typing after a quiet spell is marked in the recording, like each join.
    o.run("echo TYPED-$((6*7))", "TYPED-42").await;
    let want = [
        format!("{name} joined"),
        "guest 2 joined".to_owned(),
        format!("{name} is typing"),
        format!("{name} (guest): from the guest"),
        format!("{name}: from the owner"),
    ];
    eventually_async("the markers recorded", || async {
        let got = markers(&d, id).await;
        want.iter().all(|m| got.contains(m))
    })
    .await;
    let got = markers(&d, id).await;
    let typing = got.iter().filter(|m| m.ends_with(" is typing")).count();
    assert_eq!(typing, 1, "one spell of typing, one marker: {got:?}");

    // A session made over REST records its creator too.
    let made = d.create_session(TOKEN, json!({"assistant": "shell"})).await;
    let made: Uuid = made.parse().expect("uuid");
    assert_eq!(listed(&d, made).await["createdBy"], name.as_str());
    // The lifecycle event says who created it too.
    let events = http()
        .get(d.http("/api/events?tail=100"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET /api/events")
        .text()
        .await
        .expect("events");
    let created = format!(r#""created_by":"{name}""#);
    assert!(
        events
            .lines()
            .any(|l| l.contains(&created) && l.contains(&made.to_string())),
        "{events}"
    );
    g.close().await;
    o.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_names_itself_is_listed_as_a_guest() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let id = Uuid::new_v4();
    let mut o = Client::connect(&format!("{}&token={TOKEN}", d.ws(id, "?assistant=shell"))).await;
    o.wait_screen("$ ").await;
    let share = share_token(&d, TOKEN, &id.to_string(), "viewer").await;
    let mut g = Client::connect(&d.ws(id, &format!("?token={share}"))).await;
    g.wait_json("ready").await;
    // A guest's name is held to the chat name's rules.
    for bad in ["", "   ", &"x".repeat(33)] {
        let n = g.count("error");
        g.send_json(json!({"type": "chat", "userName": bad, "text": "hi"}))
            .await;
        g.until("refused", |c| c.count("error") == n + 1).await;
        assert_eq!(g.last("error").expect("error")["code"], "invalid_chat");
    }
    g.send_json(json!({"type": "presence", "name": "Bob"}))
        .await;
    let start = std::time::Instant::now();
    loop {
        let people = listed(&d, id).await["people"].clone();
        if people[1] == "Bob (guest)" {
            break;
        }
        assert!(start.elapsed() < TIMEOUT, "the guest's name: {people}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    g.close().await;
    o.close().await;
}
