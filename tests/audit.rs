//! The audit trail (README, "Audit trail"): each thing a person does leaves one line with who
//! did it, read back by admins at `GET /api/audit` with filters; refusals are recorded; the
//! file rotates at its bound and is read across its rotated files; a live upgrade keeps one
//! trail; no token is ever written to it.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::{config, eventually_async, http, Client, Daemon, TIMEOUT};

const TOKEN: &str = "audit-test-token-0123456789abcdef";

/// The owner's name, as the daemon (which inherits this environment) finds it.
fn owner() -> String {
    ptyhub::auth::owner_name()
}

/// `GET /api/audit?{query}` with the daemon token: status and body.
async fn audit(d: &Daemon, query: &str) -> (u16, Value) {
    let resp = http()
        .get(d.http(&format!("/api/audit?{query}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET /api/audit");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON"))
}

/// The events `query` finds.
async fn events(d: &Daemon, query: &str) -> Vec<Value> {
    let (status, body) = audit(d, query).await;
    assert_eq!(status, 200, "{body}");
    body.as_array().expect("a list").clone()
}

/// Waits until `query` finds an event `pick` accepts, and returns it.
async fn wait_event(d: &Daemon, query: &str, pick: impl Fn(&Value) -> bool) -> Value {
    let started = std::time::Instant::now();
    loop {
        if let Some(found) = events(d, query).await.into_iter().find(|e| pick(e)) {
            return found;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "no audit event for {query}: {:?}",
            events(d, "limit=1000").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn upload_frame(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut f = vec![0x01, (name.len() >> 8) as u8, name.len() as u8];
    f.extend_from_slice(name);
    f.extend_from_slice(data);
    f
}

async fn rest(
    d: &Daemon,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http().request(method, d.http(path)).bearer_auth(token);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn daemon(extra: &str) -> Daemon {
    Daemon::start_args(&config(extra), &["--token", TOKEN])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_people_do_is_recorded_with_who_did_it() {
    let d = Daemon::start_launch(&config(""), |launch| {
        launch
            .args(["--token", TOKEN])
            .env("RUST_LOG", "ptyhub=info,audit=info")
    });
    let me = owner();
    let cwd = d.dir.path().to_str().expect("utf-8").to_owned();
    let id: Uuid = d
        .create_session(
            TOKEN,
            json!({"assistant": "shell", "name": "one", "cwd": cwd}),
        )
        .await
        .parse()
        .expect("uuid");
    let q = format!("session={id}");

    let created = wait_event(&d, &format!("{q}&action=session.create"), |_| true).await;
    assert_eq!(created["user"], me.as_str());
    assert_eq!(created["credential"], "daemon-token");
    assert_eq!(created["detail"]["assistant"], "shell");
    assert_eq!(created["detail"]["name"], "one");
    assert!(created["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    let ts = created["ts"].as_str().unwrap();
    assert!(ts.ends_with('Z') && ts.len() == 24, "{ts}");

    // Renamed over REST.
    let path = format!("/api/sessions/{id}");
    let (s, _) = rest(
        &d,
        reqwest::Method::PATCH,
        &path,
        TOKEN,
        Some(json!({"name": "two"})),
    )
    .await;
    assert_eq!(s, 200);
    let renamed = wait_event(&d, &format!("{q}&action=session.rename"), |_| true).await;
    assert_eq!(renamed["user"], me.as_str());
    assert_eq!(renamed["detail"], json!({"from": "one", "to": "two"}));

    // Shared.
    let share_path = format!("/api/sessions/{id}/share");
    let body = json!({"role": "writer", "ttl": 3600});
    let (s, link) = rest(&d, reqwest::Method::POST, &share_path, TOKEN, Some(body)).await;
    assert_eq!(s, 201);
    let (share_id, share_token) = (
        link["id"].as_str().unwrap().to_owned(),
        link["token"].as_str().unwrap().to_owned(),
    );
    let shared = wait_event(&d, &format!("{q}&action=session.share"), |_| true).await;
    assert_eq!(shared["user"], me.as_str());
    assert_eq!(shared["detail"]["share"], share_id.as_str());
    assert_eq!(shared["detail"]["role"], "writer");
    assert_eq!(shared["detail"]["ttl"], 3600);

    // The owner types (the first key of a spell is recorded, not every key) and uploads.
    let mut mine = Client::connect(&d.ws(id, &format!("?token={TOKEN}"))).await;
    mine.resize(24, 80).await;
    mine.type_str("echo typed-by-me\r").await;
    mine.wait_screen("\ntyped-by-me\n").await;
    mine.type_str("echo again\r").await;
    mine.wait_screen("\nagain\n").await;
    let typed = wait_event(&d, &format!("{q}&action=typing"), |_| true).await;
    assert_eq!(typed["user"], me.as_str());
    assert_eq!(typed["credential"], "daemon-token");
    mine.send_binary(upload_frame(b"notes.txt", b"hello")).await;
    let up = mine.wait_json("file_upload").await;
    assert_eq!(up["success"], true, "{up}");
    let uploaded = wait_event(&d, &format!("{q}&action=upload"), |_| true).await;
    assert_eq!(uploaded["user"], me.as_str());
    assert_eq!(uploaded["detail"], json!({"file": "notes.txt", "bytes": 5}));

    // A guest types through the share link: recorded as a guest, with the link.
    let mut guest = Client::connect(&d.ws(id, &format!("?token={share_token}"))).await;
    // The upload typed its path at the prompt: cleared first.
    guest.type_str("\x15echo typed-by-guest\r").await;
    guest.wait_screen("\ntyped-by-guest\n").await;
    let by_guest = wait_event(&d, "user=guest&action=typing", |_| true).await;
    assert_eq!(by_guest["session"], id.to_string());
    assert_eq!(by_guest["credential"], format!("share:{share_id}"));
    // Each spell once: the owner's two commands made one line.
    let typing = events(&d, &format!("{q}&action=typing")).await;
    assert_eq!(typing.len(), 2, "{typing:?}");

    // Refusals: a wrong token (401) and a link asking for the session list (403).
    let (s, _) = rest(
        &d,
        reqwest::Method::GET,
        "/api/sessions?x=1",
        "wrong-token-0123456789",
        None,
    )
    .await;
    assert_eq!(s, 401);
    let (s, _) = rest(
        &d,
        reqwest::Method::GET,
        "/api/sessions",
        &share_token,
        None,
    )
    .await;
    assert_eq!(s, 403);
    let refused = wait_event(&d, "action=refused", |e| e["detail"]["status"] == 401).await;
    assert_eq!(refused["user"], "-");
    assert_eq!(refused["detail"]["path"], "/api/sessions");
    assert!(refused["detail"]["reason"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));
    let forbidden = wait_event(&d, "action=refused", |e| e["detail"]["status"] == 403).await;
    assert_eq!(forbidden["user"], "guest");
    assert_eq!(forbidden["credential"], format!("share:{share_id}"));

    // The share revoked.
    let revoke = format!("/api/sessions/{id}/share/{share_id}");
    let (s, _) = rest(&d, reqwest::Method::DELETE, &revoke, TOKEN, None).await;
    assert_eq!(s, 204);
    let revoked = wait_event(&d, &format!("{q}&action=share.revoke"), |_| true).await;
    assert_eq!(revoked["detail"]["share"], share_id.as_str());

    // An exec: its command, then its exit code.
    let body = json!({"cmd": ["sh", "-c", "exit 3"]});
    let resp = http()
        .post(d.http("/api/exec"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("POST /api/exec");
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await;
    let ran = wait_event(&d, "action=exec", |_| true).await;
    assert_eq!(ran["user"], me.as_str());
    assert_eq!(ran["detail"]["argv"], json!(["sh", "-c", "exit 3"]));
    let exited = wait_event(&d, "action=exec.exit", |_| true).await;
    assert_eq!(exited["detail"]["id"], ran["detail"]["id"]);
    assert_eq!(exited["detail"]["exitCode"], 3);

    // Ended through the API.
    let (s, _) = rest(&d, reqwest::Method::DELETE, &path, TOKEN, None).await;
    assert_eq!(s, 204);
    let ended = wait_event(&d, &format!("{q}&action=session.end"), |_| true).await;
    assert_eq!(ended["user"], me.as_str());
    assert_eq!(ended["detail"]["how"], "delete");

    // A session made over a WebSocket, whose program exits on its own: nobody ended it.
    let other = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(other, &format!("?assistant=shell&token={TOKEN}"))).await;
    let made = wait_event(
        &d,
        &format!("session={other}&action=session.create"),
        |_| true,
    )
    .await;
    assert_eq!(made["user"], me.as_str());
    c.resize(24, 80).await;
    c.type_str("exit 7\r").await;
    let gone = wait_event(&d, &format!("session={other}&action=session.end"), |_| true).await;
    assert_eq!(gone["user"], "-");
    assert_eq!(gone["detail"]["how"], "exit");
    assert_eq!(gone["detail"]["exitCode"], 7);

    // The owner's login, once.
    let logins = events(&d, &format!("action=login&user={me}")).await;
    assert_eq!(logins.len(), 1, "{logins:?}");

    // Filters: newest first, by user, time and count; bad ones are 400 with a message.
    let all = events(&d, "limit=1000").await;
    let times: Vec<&str> = all.iter().map(|e| e["ts"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    assert!(events(&d, "user=guest")
        .await
        .iter()
        .all(|e| e["user"] == "guest"));
    assert_eq!(events(&d, "limit=2").await.len(), 2);
    assert!(events(&d, "since=2999-01-01T00:00:00Z").await.is_empty());
    assert!(events(&d, "until=2000-01-01T00:00:00%2B02:00")
        .await
        .is_empty());
    let since = format!("since={}", ts.replace(':', "%3A"));
    assert!(events(&d, &format!("{since}&{q}")).await.len() >= 8);
    for bad in [
        "limit=0",
        "limit=1001",
        "session=7",
        "since=yesterday",
        "until=2026-05-01",
    ] {
        let (status, body) = audit(&d, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].as_str().is_some(), "{bad}: {body}");
    }
    // Not for a link.
    let (s, _) = rest(&d, reqwest::Method::GET, "/api/audit", &share_token, None).await;
    assert!(s == 401 || s == 403, "{s}");

    // The file: private, and no token, share token or query string in it.
    let file = d.dir.path().join("audit/audit.jsonl");
    let text = std::fs::read_to_string(&file).expect("audit.jsonl");
    assert!(!text.contains(TOKEN) && !text.contains(&share_token));
    assert!(!text.contains("wrong-token") && !text.contains("x=1"));
    assert!(
        !text.contains("typed-by-me"),
        "typed bytes are never recorded"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // And the log has each line too (target "audit").
    let log = d.log_text();
    assert!(log.contains(&format!("\"action\":\"session.create\",\"user\":\"{me}\"")));
    assert!(!log.contains(TOKEN) && !log.contains(&share_token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trail_rotates_at_its_bound_and_is_read_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&format!(
        "[audit]\ndir = {:?}\nmax_bytes = 4096\nfiles = 2\n",
        dir.path()
    ));
    let id = d.create_session(TOKEN, json!({"assistant": "shell"})).await;
    let path = format!("/api/sessions/{id}");
    // About 250 bytes a rename: some 20 fill a file.
    for i in 0..50 {
        let body = Some(json!({"name": format!("name-{i}")}));
        let (s, _) = rest(&d, reqwest::Method::PATCH, &path, TOKEN, body).await;
        assert_eq!(s, 200);
    }
    let file = |n: usize| match n {
        0 => dir.path().join("audit.jsonl"),
        n => dir.path().join(format!("audit.jsonl.{n}")),
    };
    for n in 0..=2 {
        let len = std::fs::metadata(file(n)).expect("a trail file").len();
        assert!(len <= 4096, "file {n}: {len}");
    }
    assert!(!file(3).exists(), "only `files` rotated files are kept");
    let current = std::fs::read_to_string(file(0)).unwrap().lines().count();
    let renames = events(&d, "action=session.rename&limit=1000").await;
    assert!(renames.len() > current, "{} > {current}", renames.len());
    // Newest first, none missing between the first and the last, none twice.
    let nums: Vec<u64> = renames
        .iter()
        .map(|e| {
            let to = e["detail"]["to"].as_str().unwrap();
            to.trim_start_matches("name-").parse().unwrap()
        })
        .collect();
    assert_eq!(nums[0], 49);
    assert!(nums.windows(2).all(|w| w[0] == w[1] + 1), "{nums:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_upgrade_keeps_one_trail() {
    let d = daemon("");
    let before = d
        .create_session(TOKEN, json!({"assistant": "shell", "name": "before"}))
        .await;
    let version = || async {
        let v: Value = http()
            .get(d.http("/api/version"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["upgrades"].as_u64()
    };
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("signal");
    eventually_async("the upgrade", || async { version().await == Some(1) }).await;
    let after = d
        .create_session(TOKEN, json!({"assistant": "shell", "name": "after"}))
        .await;
    let created = events(&d, "action=session.create").await;
    let ids: Vec<&str> = created
        .iter()
        .map(|e| e["session"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [after.as_str(), before.as_str()]);
    let phases: Vec<Value> = events(&d, "action=upgrade")
        .await
        .iter()
        .map(|e| e["detail"]["phase"].clone())
        .collect();
    assert_eq!(phases, [json!("adopted"), json!("begin")]);
    // Every line once, each whole.
    let text = std::fs::read_to_string(d.dir.path().join("audit/audit.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines
        .iter()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));
    let n = lines.len();
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), n, "a line written twice");
}
