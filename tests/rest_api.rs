//! The REST additions of PROTOCOL §9 and §12 on a real daemon (in-process, 127.0.0.1, an
//! ephemeral port) running real programs: session numbers and ids that are numbers, `cmd`,
//! `cols` and `rows` at creation, the scrollback endpoint, 405 with `Allow`, 429 on a full
//! table, and what a share link may read.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Client, Daemon};
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "test-token-0123456789abcdef";

/// A program that stays until its session is ended.
fn sleeper() -> Value {
    json!(["sleep", "600"])
}

/// Creates a session from `body`; panics unless it is created. The reply.
async fn create(d: &Daemon, body: Value) -> Value {
    let resp = reqwest::Client::new()
        .post(d.http("/api/sessions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(status, 201, "{body}: {reply}");
    reply
}

/// A session's reply's number.
fn num(session: &Value) -> u64 {
    session["num"]
        .as_u64()
        .unwrap_or_else(|| panic!("no num in {session}"))
}

fn uuid(session: &Value) -> Uuid {
    session["id"].as_str().unwrap().parse().unwrap()
}

/// GET as JSON: the status and the body.
async fn get(d: &Daemon, path: &str) -> (StatusCode, Value) {
    let resp = reqwest::get(d.http(path)).await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The scrollback endpoint's reply, its output decoded.
async fn scrollback(d: &Daemon, id: &str) -> (Value, Vec<u8>) {
    let (status, reply) = get(d, &format!("/api/sessions/{id}/scrollback")).await;
    assert_eq!(status, 200, "{reply}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(
            reply["scrollback"]
                .as_str()
                .expect("scrollback is a string"),
        )
        .expect("scrollback is base64");
    assert_eq!(reply["size"].as_u64(), Some(bytes.len() as u64), "{reply}");
    (reply, bytes)
}

/// Polls `probe` until it gives a value; panics after the timeout.
async fn poll<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            start.elapsed() < common::TIMEOUT,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The scrollback once `cond` holds for it.
async fn scrollback_when(
    d: &Daemon,
    id: &str,
    what: &str,
    cond: impl Fn(&Value, &str) -> bool,
) -> (Value, Vec<u8>) {
    poll(what, || async {
        let (reply, bytes) = scrollback(d, id).await;
        cond(&reply, &String::from_utf8_lossy(&bytes)).then_some((reply, bytes))
    })
    .await
}

/// Waits until the session's program has ended, then its scrollback.
async fn scrollback_once_ended(d: &Daemon, id: &str) -> (Value, Vec<u8>) {
    scrollback_when(d, id, "the program to end", |reply, _| {
        reply["alive"] == false
    })
    .await
}

#[tokio::test]
async fn numbers_follow_creation_and_are_reused_once_free() {
    let d = Daemon::in_process();
    let http = reqwest::Client::new();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(create(&d, json!({"cmd": sleeper()})).await);
    }
    let nums: Vec<u64> = sessions.iter().map(num).collect();
    assert_eq!(nums, [1, 2, 3]);

    // A number reaches its session wherever an id does.
    let (status, two) = get(&d, "/api/sessions/2").await;
    assert_eq!(status, 200);
    assert_eq!(two["id"], sessions[1]["id"]);
    assert_eq!(two["num"], 2);
    let (_, list) = get(&d, "/api/sessions").await;
    let listed: BTreeSet<(u64, String)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (num(s), s["id"].as_str().unwrap().to_owned()))
        .collect();
    let created: BTreeSet<(u64, String)> = sessions
        .iter()
        .map(|s| (num(s), s["id"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(listed, created);

    let del = http.delete(d.http("/api/sessions/2")).send().await.unwrap();
    assert_eq!(del.status(), 204);
    assert!(common::processes_of(uuid(&sessions[1])).is_empty());
    let (status, err) = get(&d, "/api/sessions/2").await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"], "no such session");
    let (status, _) = get(&d, &format!("/api/sessions/{}", uuid(&sessions[1]))).await;
    assert_eq!(status, 404);
    // The others keep theirs.
    let (status, three) = get(&d, "/api/sessions/3").await;
    assert_eq!((status, &three["id"]), (StatusCode::OK, &sessions[2]["id"]));

    let next = create(&d, json!({"cmd": sleeper()})).await;
    assert_eq!(num(&next), 2, "the smallest free number");
    let after = create(&d, json!({"cmd": sleeper()})).await;
    assert_eq!(num(&after), 4);
}

#[tokio::test]
async fn racing_creators_never_share_a_number() {
    let d = Daemon::in_process();
    let creations = (0..20).map(|_| create(&d, json!({"cmd": sleeper()})));
    let sessions = futures_util::future::join_all(creations).await;
    let nums: BTreeSet<u64> = sessions.iter().map(num).collect();
    assert_eq!(nums, (1..=20).collect::<BTreeSet<u64>>(), "{sessions:?}");
    let ids: BTreeSet<Uuid> = sessions.iter().map(uuid).collect();
    assert_eq!(ids.len(), 20);
    for s in &sessions {
        let (status, got) = get(&d, &format!("/api/sessions/{}", num(s))).await;
        assert_eq!(status, 200);
        assert_eq!(
            got["id"],
            s["id"],
            "number {} names its own session",
            num(s)
        );
    }
}

#[tokio::test]
async fn a_websocket_by_number_joins_the_same_session() {
    let d = Daemon::in_process();
    let session = create(&d, json!({"assistant": "shell"})).await;
    let id = uuid(&session);
    let mut by_uuid = Client::connect(&d.ws(id, "")).await;
    by_uuid.wait_json("ready").await;
    let mut by_num = Client::connect(&format!("ws://{}/ws/{}", d.addr, num(&session))).await;
    by_num
        .until("joined", |c| {
            c.count("ready") == 1 && c.last("status").is_some()
        })
        .await;
    assert_eq!(
        by_num.last("status").unwrap()["sessionUUID"],
        id.to_string()
    );
    by_uuid.run("echo same-$((6*7))", "same-42").await;
    by_num.wait_screen("same-42").await;
    by_uuid
        .until("two viewers", |c| {
            c.last("status").is_some_and(|s| s["viewers"] == 2)
        })
        .await;

    // A number cannot create: one that no session has is refused before the upgrade.
    let refused = Client::try_connect(&format!("ws://{}/ws/77?assistant=shell", d.addr)).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 404)
        }
        Err(e) => panic!("expected 404, got {e}"),
        Ok(_) => panic!("a number no session has was upgraded"),
    }
    let (_, list) = get(&d, "/api/sessions").await;
    assert_eq!(list.as_array().unwrap().len(), 1, "nothing was created");
}

#[tokio::test]
async fn cmd_runs_without_a_shell_and_its_output_is_in_the_scrollback() {
    let d = Daemon::in_process();
    let argv = json!(["sh", "-c", "printf hello; exit 3"]);
    let session = create(&d, json!({"cmd": argv})).await;
    assert_eq!(session["command"], argv);
    assert_eq!(session["assistant"], "custom");
    assert_eq!(session["assistantName"], "sh");
    assert_eq!(session["yoloMode"], false);

    let (reply, bytes) = scrollback_once_ended(&d, &num(&session).to_string()).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("hello"), "{text:?}");
    assert_eq!(reply["alive"], false);
    assert_eq!(reply["exit_code"], 3);
    // By uuid too, the same.
    let (by_uuid, _) = scrollback(&d, &uuid(&session).to_string()).await;
    assert_eq!(by_uuid["exit_code"], 3);

    // `command` is the same as `cmd`; arguments reach the program as they are.
    let argv = json!(["printf", "%s|", "$HOME", "a b", "*"]);
    let session = create(&d, json!({"command": argv})).await;
    assert_eq!(session["command"], argv);
    let (_, bytes) = scrollback_once_ended(&d, &uuid(&session).to_string()).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("$HOME|a b|*|"), "{text:?}");

    // A running program: alive, no exit code yet.
    let session = create(&d, json!({"cmd": ["sh", "-c", "echo up; exec sleep 600"]})).await;
    let id = num(&session).to_string();
    let (last, _) = scrollback_when(&d, &id, "the output", |_, text| text.contains("up")).await;
    assert_eq!(last["alive"], true);
    assert_eq!(last["exit_code"], Value::Null);
}

#[tokio::test]
async fn scrollback_is_the_newest_bytes_up_to_the_configured_amount() {
    // The test config already has a [session] table: the key joins it.
    let d = Daemon::in_process_with(
        &common::config("").replace("[session]\n", "[session]\nscrollback_api_bytes = 100\n"),
    );
    let session = create(
        &d,
        json!({"cmd": ["sh", "-c", "i=0; while [ $i -lt 50 ]; do echo line-$i; i=$((i+1)); done"]}),
    )
    .await;
    let (_, bytes) = scrollback_once_ended(&d, &uuid(&session).to_string()).await;
    assert_eq!(bytes.len(), 100);
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("line-49"), "{text:?}");
    assert!(text.contains("[Process exited (code 0)]"), "{text:?}");
    assert!(!text.contains("line-1\r"), "only the newest: {text:?}");
}

#[tokio::test]
async fn own_command_sessions_have_no_yolo_mode() {
    let d = Daemon::in_process_with(&common::config(
        "[assistants.agent]\nname = \"Agent\"\ncommand = [\"cat\"]\nyolo = [\"cat\"]\nenv = { AGENT_MARK = \"from-agent\" }\n",
    ));
    // A configured assistant lends its name and environment; its commands are not used.
    let session = create(
        &d,
        json!({"assistant": "agent", "cmd": ["sh", "-c", "echo mark=$AGENT_MARK; exec cat"]}),
    )
    .await;
    assert_eq!(session["assistant"], "agent");
    assert_eq!(session["assistantName"], "Agent");
    let mut c = Client::connect(&d.ws(uuid(&session), "")).await;
    let status = c.wait_json("status").await;
    assert_eq!(status["yoloSupported"], false);
    c.wait_screen("mark=from-agent").await;
    c.send_json(json!({"type": "toggle_yolo"})).await;
    let err = c.wait_json("error").await;
    assert_eq!(err["code"], "yolo_unsupported", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("own command"),
        "{err}"
    );
    // Nothing restarted: the same program still echoes.
    c.run("still-here", "still-here").await;
    assert!(!c.screen_text().contains("Switching YOLO"));
    let (_, got) = get(&d, &format!("/api/sessions/{}", uuid(&session))).await;
    assert_eq!(got["yoloMode"], false);
    assert_eq!(got["alive"], true);
}

#[tokio::test]
async fn cols_and_rows_set_the_initial_size() {
    let d = Daemon::in_process();
    let session = create(
        &d,
        json!({"cmd": ["sh", "-c", "stty size; exec sleep 600"], "cols": 132, "rows": 43}),
    )
    .await;
    assert_eq!(
        (session["rows"].as_u64(), session["cols"].as_u64()),
        (Some(43), Some(132))
    );
    let (_, got) = get(&d, &format!("/api/sessions/{}", num(&session))).await;
    assert_eq!(
        (got["rows"].as_u64(), got["cols"].as_u64()),
        (Some(43), Some(132))
    );
    // The program's terminal has that size.
    let id = num(&session).to_string();
    scrollback_when(&d, &id, "stty's answer", |_, text| text.contains("43 132")).await;
    // A viewer joining sees it too.
    let mut c = Client::connect(&d.ws(uuid(&session), "")).await;
    let status = c.wait_json("status").await;
    assert_eq!(
        (status["rows"].as_u64(), status["cols"].as_u64()),
        (Some(43), Some(132))
    );

    // Clamped like any size; one given, the other the configured default.
    let big = create(&d, json!({"cmd": sleeper(), "cols": 5000, "rows": 70000})).await;
    assert_eq!(
        (big["rows"].as_u64(), big["cols"].as_u64()),
        (Some(500), Some(1000))
    );
    let wide = create(&d, json!({"cmd": sleeper(), "cols": 100})).await;
    assert_eq!(
        (wide["rows"].as_u64(), wide["cols"].as_u64()),
        (Some(24), Some(100))
    );
    let plain = create(&d, json!({"assistant": "shell", "rows": 30})).await;
    assert_eq!(
        (plain["rows"].as_u64(), plain["cols"].as_u64()),
        (Some(30), Some(80))
    );
}

#[tokio::test]
async fn bad_bodies_and_ids_get_json_errors() {
    let d = Daemon::in_process();
    let http = reqwest::Client::new();
    let cases = [
        (json!({"cmd": []}), "empty"),
        (json!({"cmd": [""]}), "empty string"),
        (json!({"cmd": ["sh", 1]}), "cmd[1] must be a string"),
        (json!({"cmd": "ls -la"}), "must be an array of strings"),
        (json!({"cmd": ["printf", "a\u{0}b"]}), "NUL"),
        (
            json!({"cmd": ["true"], "assistant": "nope"}),
            "unknown assistant",
        ),
        (
            json!({"cmd": ["true"], "cols": 0}),
            "cols must be a positive integer",
        ),
        (
            json!({"cmd": ["true"], "rows": -1}),
            "rows must be a positive integer",
        ),
        (
            json!({"cmd": ["true"], "rows": 2.5}),
            "rows must be a positive integer",
        ),
        (
            json!({"cmd": ["true"], "cols": "80"}),
            "cols must be a positive integer",
        ),
        (json!({"name": "x"}), "assistant is required"),
        (json!({"cmd": ["true"], "bogus": 1}), "unknown field"),
    ];
    for (body, says) in cases {
        let resp = http
            .post(d.http("/api/sessions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let err: Value = resp.json().await.unwrap();
        let message = err["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {err} lacks {says:?}");
    }
    // Well formed, naming a program this host does not have: 404.
    for cmd in ["no-such-program-ptyhub-test", "/no/such/dir/prog"] {
        let resp = http
            .post(d.http("/api/sessions"))
            .json(&json!({ "cmd": [cmd] }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{cmd}");
        let err: Value = resp.json().await.unwrap();
        assert!(
            err["error"].as_str().unwrap().contains("not found"),
            "{err}"
        );
    }
    let (_, list) = get(&d, "/api/sessions").await;
    assert_eq!(list, json!([]), "nothing was created");

    for id in ["0", "256", "1000", "-1", "xyz", "1.5"] {
        for path in [
            format!("/api/sessions/{id}"),
            format!("/api/sessions/{id}/scrollback"),
        ] {
            let (status, err) = get(&d, &path).await;
            assert_eq!(status, 400, "{path}: {err}");
            assert!(err["error"]
                .as_str()
                .unwrap()
                .contains("not a UUID or a session number"));
        }
    }
    for path in ["/api/sessions/9", "/api/sessions/9/scrollback"] {
        let (status, err) = get(&d, path).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(err["error"], "no such session");
    }
    let (status, _) = get(&d, &format!("/api/sessions/{}/scrollback", Uuid::new_v4())).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_method_a_path_does_not_answer_is_405_with_allow() {
    let d = Daemon::in_process();
    let session = create(&d, json!({"cmd": sleeper()})).await;
    let id = uuid(&session);
    let http = reqwest::Client::new();
    let cases = [
        (
            reqwest::Method::PUT,
            "/api/sessions".to_owned(),
            "GET, POST",
        ),
        (
            reqwest::Method::DELETE,
            "/api/sessions".to_owned(),
            "GET, POST",
        ),
        (
            reqwest::Method::POST,
            format!("/api/sessions/{id}"),
            "GET, PATCH, DELETE",
        ),
        (
            reqwest::Method::PUT,
            "/api/sessions/1".to_owned(),
            "GET, PATCH, DELETE",
        ),
        (
            reqwest::Method::POST,
            "/api/sessions/1/scrollback".to_owned(),
            "GET",
        ),
        (
            reqwest::Method::PUT,
            "/api/sessions/1/share".to_owned(),
            "GET, POST",
        ),
        (
            reqwest::Method::GET,
            "/api/sessions/1/share/abc".to_owned(),
            "DELETE",
        ),
        (reqwest::Method::POST, "/api/assistants".to_owned(), "GET"),
        (reqwest::Method::POST, "/metrics".to_owned(), "GET"),
        (reqwest::Method::POST, "/ws/1".to_owned(), "GET"),
        (reqwest::Method::POST, "/".to_owned(), "GET, HEAD"),
        (reqwest::Method::POST, "/app.css".to_owned(), "GET, HEAD"),
    ];
    for (method, path, allow) in cases {
        let resp = http
            .request(method.clone(), d.http(&path))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "{method} {path}");
        assert_eq!(resp.headers()["allow"], allow, "{method} {path}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(
            err,
            json!({"error": "method not allowed"}),
            "{method} {path}"
        );
    }
    // Unknown paths stay 404, whatever the method.
    for (method, path) in [
        (reqwest::Method::GET, "/api/nope"),
        (reqwest::Method::PUT, "/api/sessions/1/nope"),
        (reqwest::Method::POST, "/no/such/file.js"),
    ] {
        let resp = http
            .request(method.clone(), d.http(path))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{method} {path}");
    }
    // The session was not touched by any of it.
    let (status, got) = get(&d, "/api/sessions/1").await;
    assert_eq!(
        (status, got["alive"].clone()),
        (StatusCode::OK, json!(true))
    );
}

#[tokio::test]
async fn a_full_session_table_is_429_naming_the_limit() {
    let d = Daemon::in_process_with(&common::config("[limits]\nmax_sessions = 2\n"));
    let http = reqwest::Client::new();
    let first = create(&d, json!({"cmd": sleeper()})).await;
    create(&d, json!({"assistant": "shell"})).await;
    for body in [json!({"cmd": sleeper()}), json!({"assistant": "shell"})] {
        let resp = http
            .post(d.http("/api/sessions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 429, "{body}");
        let err: Value = resp.json().await.unwrap();
        let message = err["error"].as_str().unwrap();
        assert!(
            message.contains("max_sessions") && message.contains('2'),
            "{message}"
        );
    }
    // Joining a session that exists is not creating one.
    let mut c = Client::connect(&d.ws(uuid(&first), "")).await;
    c.wait_json("ready").await;
    // A free place is usable again, with the number it freed.
    let del = http
        .delete(d.http(&format!("/api/sessions/{}", num(&first))))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    let again = create(&d, json!({"cmd": sleeper()})).await;
    assert_eq!(num(&again), 1);
}

#[tokio::test]
async fn a_viewer_link_reads_its_own_sessions_scrollback_only() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let http = reqwest::Client::new();
    let mut sessions = Vec::new();
    for word in ["mine", "theirs"] {
        let resp = http
            .post(d.http("/api/sessions"))
            .bearer_auth(TOKEN)
            .json(&json!({"cmd": ["sh", "-c", format!("echo {word}-output; exec sleep 600")]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        sessions.push(resp.json::<Value>().await.unwrap());
    }
    let (mine, theirs) = (&sessions[0], &sessions[1]);
    let resp = http
        .post(d.http(&format!("/api/sessions/{}/share", uuid(mine))))
        .bearer_auth(TOKEN)
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let link: Value = resp.json().await.unwrap();
    let viewer = link["token"].as_str().unwrap().to_owned();
    let as_viewer = |path: String| {
        let http = http.clone();
        let url = d.http(&path);
        let viewer = viewer.clone();
        async move { http.get(url).bearer_auth(viewer).send().await.unwrap() }
    };

    for id in [uuid(mine).to_string(), num(mine).to_string()] {
        let text = poll("its own session's output", || {
            let get = as_viewer(format!("/api/sessions/{id}/scrollback"));
            async move {
                let resp = get.await;
                assert_eq!(resp.status(), 200);
                let reply: Value = resp.json().await.unwrap();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(reply["scrollback"].as_str().unwrap())
                    .unwrap();
                let text = String::from_utf8_lossy(&bytes).into_owned();
                text.contains("mine-output").then_some(text)
            }
        })
        .await;
        assert!(!text.contains("theirs-output"), "{text:?}");
    }
    // Another session, by uuid or by number, and a number no session has: all the same 403.
    for id in [
        uuid(theirs).to_string(),
        num(theirs).to_string(),
        "200".to_owned(),
    ] {
        for path in [
            format!("/api/sessions/{id}/scrollback"),
            format!("/api/sessions/{id}"),
        ] {
            let resp = as_viewer(path.clone()).await;
            assert_eq!(resp.status(), 403, "{path}");
            let err: Value = resp.json().await.unwrap();
            assert!(err["error"].is_string(), "{path}: {err}");
        }
    }
    // Its own session by number, as by uuid; still nothing it may not do.
    assert_eq!(
        as_viewer(format!("/api/sessions/{}", num(mine)))
            .await
            .status(),
        200
    );
    let resp = http
        .delete(d.http(&format!("/api/sessions/{}", num(mine))))
        .bearer_auth(&viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(as_viewer("/api/sessions".to_owned()).await.status(), 403);
    // The WebSocket by number: its own session only.
    let own = format!("ws://{}/ws/{}?token={viewer}", d.addr, num(mine));
    let mut c = Client::connect(&own).await;
    c.wait_screen("mine-output").await;
    let other = format!("ws://{}/ws/{}?token={viewer}", d.addr, num(theirs));
    match Client::try_connect(&other).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 403)
        }
        Err(e) => panic!("expected 403, got {e}"),
        Ok(_) => panic!("a viewer link joined another session by number"),
    }
    // Without any token: 401, as everywhere.
    let resp = http
        .get(d.http(&format!("/api/sessions/{}/scrollback", num(mine))))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}
