//! The REST API and the daemon's process ownership: create / list / get / delete, and a
//! shutdown that leaves no process behind. The API tests run the daemon in-process; SIGTERM
//! of the binary is tested on the binary, and the in-process daemon's own end as well (every
//! other test relies on it to leave nothing behind).

use crate::common;

use common::{Client, Daemon};
use serde_json::{json, Value};
use uuid::Uuid;

#[tokio::test]
async fn create_list_get_delete() {
    let d = Daemon::in_process();
    let http = reqwest::Client::new();
    let work = tempfile::tempdir().unwrap();
    let resp = http
        .post(d.http("/api/sessions"))
        .json(&json!({"assistant":"shell","name":"my feature","cwd": work.path()}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    let id: Uuid = created["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(created["name"], "my feature");
    assert_eq!(created["assistant"], "shell");
    assert_eq!(created["alive"], true);
    assert_eq!(
        created["workDir"],
        work.path().canonicalize().unwrap().display().to_string()
    );
    for key in ["viewers", "cols", "rows", "exitCode", "createdAt"] {
        assert!(created.get(key).is_some(), "missing {key}");
    }

    // The program runs in that directory.
    let mut v = Client::connect(&d.ws(id, "")).await;
    v.run(
        "echo at=$(pwd)",
        &format!("at={}", work.path().canonicalize().unwrap().display()),
    )
    .await;

    let list: Vec<Value> = http
        .get(d.http("/api/sessions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], id.to_string());
    assert_eq!(list[0]["viewers"], 1);

    let one = http
        .get(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);

    let pids = common::processes_of(id);
    assert!(!pids.is_empty());
    let del = http
        .delete(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    let (code, _) = v.until_closed().await;
    assert_eq!(code, 4003);
    assert!(
        common::processes_of(id).is_empty(),
        "deleting ends every process of the session"
    );
    let gone = http
        .get(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    let del = http
        .delete(d.http(&format!("/api/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 404);
}

#[tokio::test]
async fn rest_errors() {
    let d = Daemon::in_process();
    let http = reqwest::Client::new();
    let cases = [
        (json!({"assistant":"nope"}), 400),
        (json!({"assistant":"shell","name":"bad/name"}), 400),
        (json!({"assistant":"shell","cwd":"/no/such/dir"}), 404),
        (json!({"assistant":"shell","bogus":1}), 400),
        (json!({"name":"x"}), 400),
    ];
    for (body, status) in cases {
        let resp = http
            .post(d.http("/api/sessions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "{body}");
        let err: Value = resp.json().await.unwrap();
        assert!(
            err["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}: {err}"
        );
    }
    let resp = http
        .post(d.http("/api/sessions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = http.get(d.http("/api/sessions/xyz")).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let resp = http
        .get(d.http(&format!("/api/sessions/{}", Uuid::new_v4())))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    let id = Uuid::new_v4();
    let ok = http
        .post(d.http("/api/sessions"))
        .json(&json!({"assistant":"shell","id":id}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let dup = http
        .post(d.http("/api/sessions"))
        .json(&json!({"assistant":"shell","id":id}))
        .send()
        .await
        .unwrap();
    assert_eq!(dup.status(), 409);
}

#[tokio::test]
async fn assistants_report_availability() {
    let d = Daemon::in_process_with(&common::config(
        "[assistants.ghost]\nname = \"Ghost\"\ncommand = [\"no-such-program-ptyhub-test\"]\nyolo = [\"x\"]\n",
    ));
    let list: Vec<Value> = reqwest::get(d.http("/api/assistants"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let get = |k: &str| {
        list.iter()
            .find(|a| a["key"] == k)
            .cloned()
            .unwrap_or_else(|| panic!("no {k}"))
    };
    assert_eq!(get("shell")["available"], true);
    assert_eq!(get("ghost")["available"], false);
    assert_eq!(get("ghost")["yoloSupported"], true);
    assert!(get("ghost")["reason"]
        .as_str()
        .unwrap()
        .contains("not found"));
    // The shipped defaults are listed too.
    for key in ["claude", "gemini", "codex", "goose", "aider", "opencode"] {
        get(key);
    }
}

/// A program that ignores SIGTERM and SIGHUP.
const STUBBORN: &str = "[assistants.stubborn]\ncommand = [\"bash\", \"-c\", \"trap '' TERM HUP; echo stubborn-ready; while :; do sleep 0.1; done\"]\n";

/// One session per assistant, each with a viewer, running: the first (a shell) has a
/// background job that ignores SIGHUP and escaped into its own session; a `stubborn` one has
/// printed that it is ready.
async fn hard_to_end_sessions(d: &Daemon, assistants: &[&str]) -> (Vec<Client>, Vec<Uuid>) {
    let mut viewers = Vec::new();
    let mut ids = Vec::new();
    for assistant in assistants {
        let id = Uuid::new_v4();
        let mut c = Client::connect(&d.ws(id, &format!("?assistant={assistant}"))).await;
        c.wait_json("ready").await;
        ids.push(id);
        viewers.push(c);
    }
    viewers[0]
        .run(
            "setsid nohup sleep 1000 >/dev/null 2>&1 & echo bg-$((3*3))",
            "bg-9",
        )
        .await;
    for (c, assistant) in viewers.iter_mut().zip(assistants) {
        if *assistant == "stubborn" {
            c.wait_screen("stubborn-ready").await;
        }
    }
    for id in &ids {
        assert!(!common::processes_of(*id).is_empty());
    }
    (viewers, ids)
}

/// Every viewer was closed with 1001 (going away) and no process of the sessions is left.
async fn all_closed_with_1001_and_gone(viewers: &mut [Client], ids: &[Uuid]) {
    for v in viewers {
        let (code, _) = v.until_closed().await;
        assert_eq!(code, 1001);
    }
    for id in ids {
        assert!(
            common::processes_of(*id).is_empty(),
            "processes of {id} left: {:?}",
            common::processes_of(*id)
        );
    }
}

#[tokio::test]
async fn sigterm_closes_viewers_with_1001_and_leaves_no_process() {
    let mut d = Daemon::start_with(&common::config(STUBBORN));
    let (mut viewers, ids) = hard_to_end_sessions(&d, &["shell", "shell", "stubborn"]).await;
    let status = d.terminate();
    assert!(status.success(), "daemon exit status {status:?}");
    all_closed_with_1001_and_gone(&mut viewers, &ids).await;
}

/// An idle keep-alive connection is closed at shutdown rather than waited for: the daemon
/// never has to give up on draining it.
#[tokio::test]
async fn sigterm_closes_idle_keep_alive_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut d = Daemon::start();
    let mut conn = tokio::net::TcpStream::connect(d.addr)
        .await
        .expect("connect");
    conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .expect("request");
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&reply).contains("\r\n\r\n") {
        let n = tokio::time::timeout(common::TIMEOUT, conn.read(&mut buf))
            .await
            .expect("reply in time")
            .expect("read");
        assert!(n > 0, "closed before replying");
        reply.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 200"));
    let status = d.terminate();
    assert!(status.success(), "daemon exit status {status:?}");
    let log = d.log_text();
    assert!(
        !log.contains("closing connections that did not finish"),
        "the idle connection held the shutdown up:\n{log}"
    );
}

#[tokio::test]
async fn pages_are_embedded_with_types_etags_and_caching() {
    let d = Daemon::in_process();
    let http = reqwest::Client::new();
    for path in ["/".to_owned(), format!("/session/{}", Uuid::new_v4())] {
        let resp = http.get(d.http(&path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
        assert_eq!(resp.headers()["cache-control"], "no-cache");
        let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
        let again = http
            .get(d.http(&path))
            .header("If-None-Match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
    }
    assert_eq!(
        http.get(d.http("/no/such/file.js"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        http.get(d.http("/session/not-a-uuid"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
}

#[tokio::test]
async fn an_in_process_daemon_ends_like_sigterm_and_leaves_no_process() {
    let d = Daemon::in_process_with(&common::config(STUBBORN));
    let (mut viewers, ids) = hard_to_end_sessions(&d, &["shell", "stubborn"]).await;
    // What the end of a test does: the daemon is dropped, with viewers still connected.
    drop(d);
    all_closed_with_1001_and_gone(&mut viewers, &ids).await;
}
