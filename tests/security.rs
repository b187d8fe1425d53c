//! Security and service: the auth matrix, origin checks, share links, limits, systemd
//! notification, start-up refusals, and a token that never reaches the log.

use crate::common;

use common::{Client, Daemon};
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "test-token-0123456789abcdef";

fn secured(extra: &str) -> Daemon {
    Daemon::start_args(&common::config(extra), &["--token", TOKEN])
}

fn no_redirect() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn create(d: &Daemon) -> Uuid {
    let resp = no_redirect()
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"assistant":"shell"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let v: Value = resp.json().await.unwrap();
    v["id"].as_str().unwrap().parse().unwrap()
}

async fn share(d: &Daemon, id: Uuid, role: &str, ttl: Option<u64>) -> Value {
    let mut body = json!({"role": role});
    if let Some(ttl) = ttl {
        body["ttl"] = json!(ttl);
    }
    let resp = no_redirect()
        .post(d.http(&format!("/api/sessions/{id}/share")))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    resp.json().await.unwrap()
}

/// Ends the session `id` as the owner would, and checks it was.
async fn delete(d: &Daemon, id: Uuid) {
    let r = no_redirect()
        .delete(d.http(&format!("/api/sessions/{id}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

/// Status of a GET with this bearer token.
async fn get_as(http: &reqwest::Client, url: impl reqwest::IntoUrl, token: &str) -> StatusCode {
    http.get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

/// Status of a WebSocket handshake (101 when it upgraded).
async fn ws_status(url: &str, origin: Option<&str>) -> u16 {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok(_) => 101,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("{url}: {e}"),
    }
}

#[tokio::test]
async fn the_auth_matrix_over_rest_and_websocket() {
    let d = secured("");
    let http = no_redirect();
    let id = create(&d).await;
    let other = create(&d).await;
    let list = d.http("/api/sessions");

    assert_eq!(
        http.get(&list).send().await.unwrap().status(),
        401,
        "no token"
    );
    let r = http
        .get(&list)
        .bearer_auth("wrong-token-xxxxxxxxxx")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "wrong token");
    assert!(
        r.json::<Value>().await.unwrap()["error"].as_str().is_some(),
        "401 is JSON for REST"
    );
    assert_eq!(get_as(&http, &list, TOKEN).await, 200, "header");
    assert_eq!(
        http.get(format!("{list}?token={TOKEN}"))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "query"
    );
    assert_eq!(
        http.get(format!("{list}?access_token={TOKEN}"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let cookie = format!("ptyhub_token={TOKEN}");
    assert_eq!(
        http.get(&list)
            .header("Cookie", &cookie)
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "cookie"
    );

    assert_eq!(
        ws_status(&d.ws(id, ""), None).await,
        401,
        "WebSocket without token"
    );
    assert_eq!(
        ws_status(&d.ws(id, "?token=nope-nope-nope-nope"), None).await,
        401
    );
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={TOKEN}")), None).await,
        101
    );
    // Cross-site: refused even with a valid token; the server's own origin passes.
    let evil = Some("http://evil.example");
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={TOKEN}")), evil).await,
        403
    );
    let own = format!("http://{}", d.addr);
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={TOKEN}")), Some(&own)).await,
        101
    );
    let r = http
        .post(&list)
        .bearer_auth(TOKEN)
        .header("Origin", "http://evil.example")
        .json(&json!({"assistant":"shell"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "cross-site REST write");

    // Share tokens reach only their session.
    let viewer = share(&d, id, "viewer", None).await;
    let vt = viewer["token"].as_str().unwrap();
    assert!(viewer["url"]
        .as_str()
        .unwrap()
        .starts_with(&format!("/session/{id}?token=")));
    assert_eq!(
        get_as(&http, d.http(&format!("/api/sessions/{id}")), vt).await,
        200
    );
    assert_eq!(
        get_as(&http, d.http(&format!("/api/sessions/{other}")), vt).await,
        403
    );
    assert_eq!(get_as(&http, &list, vt).await, 403);
    assert_eq!(
        ws_status(&d.ws(other, &format!("?token={vt}")), None).await,
        403,
        "scoped token on another session"
    );
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={vt}")), None).await,
        101
    );
    assert_eq!(get_as(&http, d.http("/"), vt).await, 403);
    assert_eq!(
        get_as(&http, d.http(&format!("/session/{id}")), vt).await,
        200
    );

    // Expired and revoked share tokens.
    let expired = share(&d, id, "writer", Some(0)).await;
    let et = expired["token"].as_str().unwrap();
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={et}")), None).await,
        401
    );
    let listed: Vec<Value> = http
        .get(d.http(&format!("/api/sessions/{id}/share")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "expired links are not listed: {listed:?}");
    assert!(
        listed[0].get("token").is_none(),
        "listing never shows tokens"
    );
    let sid = viewer["id"].as_str().unwrap();
    let del = http
        .delete(d.http(&format!("/api/sessions/{id}/share/{sid}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={vt}")), None).await,
        401,
        "revoked"
    );

    // Health needs nothing; metrics need the daemon token.
    assert_eq!(
        http.get(d.http("/healthz")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        http.get(d.http("/metrics")).send().await.unwrap().status(),
        401
    );
    let m = http
        .get(d.http("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "ptyhub_sessions{state=\"running\"} 2",
        "ptyhub_viewers",
        "ptyhub_bytes_out_total",
        "ptyhub_snapshots_total",
        "ptyhub_resyncs_total",
        "ptyhub_uploads_total",
        "ptyhub_auth_failures_total",
        "ptyhub_errors_total",
    ] {
        assert!(m.contains(name), "metrics lack {name}:\n{m}");
    }
}

#[tokio::test]
async fn a_page_with_a_query_token_sets_a_cookie_and_drops_the_token() {
    let d = secured("");
    let http = no_redirect();
    let id = Uuid::new_v4();
    let r = http
        .get(d.http(&format!("/session/{id}?assistant=shell&token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["location"],
        format!("/session/{id}?assistant=shell")
    );
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cookie.starts_with(&format!("ptyhub_token={TOKEN}")),
        "{cookie}"
    );
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // Without a token, a page is a small login page, not JSON.
    let r = http.get(d.http("/")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(r.text().await.unwrap().contains("<form"));
    // The UI's assets are public: a login page can load them.
    assert_ne!(
        http.get(d.http("/index.html"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
}

#[tokio::test]
async fn a_viewer_link_can_watch_and_chat_but_change_nothing() {
    let d = secured("");
    let id = create(&d).await;
    let vt = share(&d, id, "viewer", None).await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let wt = share(&d, id, "writer", None).await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut owner = Client::connect(&d.ws(id, &format!("?token={TOKEN}"))).await;
    owner.resize(30, 100).await;
    owner
        .until("30x100", |c| {
            c.last("status")
                .is_some_and(|s| s["rows"] == 30 && s["cols"] == 100)
        })
        .await;
    owner.wait_screen("$ ").await;

    let mut v = Client::connect(&d.ws(id, &format!("?token={vt}"))).await;
    let status = v.wait_json("status").await;
    assert_eq!(status["readOnly"], true);
    assert!(v.screen_text().contains("$ "), "a viewer sees the screen");
    v.resize(10, 40).await;
    v.type_str("echo viewer-typed\r").await;
    v.send_binary({
        let mut f = vec![1u8, 0, 5];
        f.extend_from_slice(b"x.txt");
        f.extend_from_slice(b"data");
        f
    })
    .await;
    v.send_json(json!({"type":"rename_session","name":"hijack"}))
        .await;
    v.send_json(json!({"type":"toggle_yolo"})).await;
    v.send_json(json!({"type":"signal","signal":"SIGINT"}))
        .await;
    v.until("refusals", |c| {
        c.count("error") >= 5 && c.count("file_upload") == 1
    })
    .await;
    assert!(
        v.messages
            .iter()
            .filter(|m| m["type"] == "error")
            .all(|m| m["code"] == "read_only"),
        "{:?}",
        v.messages
    );
    assert_eq!(v.last("file_upload").unwrap()["success"], false);
    // Chat is allowed.
    v.send_json(json!({"type":"chat","userName":"watcher","text":"hello"}))
        .await;
    owner.wait_json("chat").await;

    // Nothing reached the session: no input, no size change, no rename, no upload.
    owner.run("echo owner-$((2+2))", "owner-4").await;
    assert!(!owner.screen_text().contains("viewer-typed"));
    let s = owner.last("status").unwrap();
    assert_eq!(
        (
            s["rows"].as_u64(),
            s["cols"].as_u64(),
            s["sessionName"].as_str()
        ),
        (Some(30), Some(100), Some(""))
    );
    assert!(!d.dir.path().join(".ptyhub/uploads/x.txt").exists());
    let r = no_redirect()
        .patch(d.http(&format!("/api/sessions/{id}")))
        .bearer_auth(&vt)
        .json(&json!({"name":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // A writer link can type and resize.
    let mut w = Client::connect(&d.ws(id, &format!("?token={wt}"))).await;
    assert_eq!(w.wait_json("status").await["readOnly"], false);
    w.resize(20, 90).await;
    owner
        .until("20x90", |c| {
            c.last("status")
                .is_some_and(|s| s["rows"] == 20 && s["cols"] == 90)
        })
        .await;
    w.set_term_size(20, 90);
    w.run("echo writer-$((3+3))", "writer-6").await;
}

#[tokio::test]
async fn revoking_a_share_closes_its_connections() {
    let d = secured("");
    let id = create(&d).await;
    let s = share(&d, id, "writer", None).await;
    let mut c =
        Client::connect(&d.ws(id, &format!("?token={}", s["token"].as_str().unwrap()))).await;
    c.wait_json("ready").await;
    let r = no_redirect()
        .delete(d.http(&format!(
            "/api/sessions/{id}/share/{}",
            s["id"].as_str().unwrap()
        )))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(c.until_closed().await.0, 1008);
}

/// A link's viewers of a session that is ended are told it ended (4003), as every viewer is,
/// not that their link was revoked: the page then offers the output instead of an error. The
/// links went with the session and used to be cancelled as it ended, which raced the close.
#[tokio::test]
async fn a_links_viewers_are_told_their_session_ended_not_that_the_link_was_revoked() {
    let d = secured("");
    for round in 0..3 {
        let id = create(&d).await;
        let mut viewers = Vec::new();
        for role in ["writer", "viewer", "writer"] {
            let s = share(&d, id, role, None).await;
            let token = s["token"].as_str().unwrap();
            let mut c = Client::connect(&d.ws(id, &format!("?token={token}"))).await;
            c.wait_json("ready").await;
            viewers.push(c);
        }
        delete(&d, id).await;
        for (n, mut c) in viewers.into_iter().enumerate() {
            let (code, reason) = c.until_closed().await;
            assert_eq!(
                (code, reason.as_str()),
                (4003, "session ended"),
                "round {round}, link viewer {n}"
            );
        }
    }
}

/// An ended session's links end with it: listing them is "no such session", not an empty
/// list that says the session is there (found by Schemathesis's stateful phase).
#[tokio::test]
async fn a_deleted_sessions_links_are_no_longer_listed() {
    let d = secured("");
    let id = create(&d).await;
    share(&d, id, "viewer", None).await;
    let list = d.http(&format!("/api/sessions/{id}/share"));
    assert_eq!(get_as(&no_redirect(), &list, TOKEN).await, 200);
    delete(&d, id).await;
    assert_eq!(get_as(&no_redirect(), &list, TOKEN).await, 404);
    let never = d.http(&format!("/api/sessions/{}/share", Uuid::new_v4()));
    assert_eq!(get_as(&no_redirect(), &never, TOKEN).await, 404);
}

#[tokio::test]
async fn limits_give_clear_errors_and_disturb_nobody() {
    let d = secured("[limits]\nmax_sessions = 2\nmax_viewers_per_session = 2\nmax_connections_per_ip = 12\nfailed_auth_per_minute = 3\nmax_chat_chars = 10\n");
    let http = no_redirect();
    let a = create(&d).await;
    let _b = create(&d).await;
    let r = http
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"assistant":"shell"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("at most 2 sessions"));
    let mut c =
        Client::connect(&d.ws(Uuid::new_v4(), &format!("?assistant=shell&token={TOKEN}"))).await;
    assert_eq!(c.until_closed().await.0, 4002);
    assert!(c.last("error").unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("limit"));

    let mut v1 = Client::connect(&d.ws(a, &format!("?token={TOKEN}"))).await;
    let mut v2 = Client::connect(&d.ws(a, &format!("?token={TOKEN}"))).await;
    v2.wait_json("ready").await;
    let mut v3 = Client::connect(&d.ws(a, &format!("?token={TOKEN}"))).await;
    assert_eq!(v3.until_closed().await.0, 1013);
    assert_eq!(v3.last("error").unwrap()["code"], "too_many_viewers");
    v1.run("echo fine-$((4*4))", "fine-16").await;

    v1.send_json(json!({"type":"chat","userName":"a","text":"01234567890"}))
        .await;
    assert_eq!(v1.wait_json("error").await["code"], "invalid_chat");

    // Connections per address: idle strangers holding every place do not refuse a real
    // request; the oldest of them is closed to make room (tests/reliability.rs goes further).
    let mut held = Vec::new();
    for _ in 0..12 {
        held.push(tokio::net::TcpStream::connect(d.addr).await.unwrap());
    }
    let r = reqwest::Client::new().get(d.http("/healthz")).send().await;
    assert_eq!(
        r.map(|r| r.status().as_u16()).ok(),
        Some(200),
        "a newcomer gets in"
    );
    let mut first = held.remove(0);
    let mut byte = [0u8; 1];
    let evicted = tokio::time::timeout(
        common::TIMEOUT,
        tokio::io::AsyncReadExt::read(&mut first, &mut byte),
    )
    .await;
    assert!(
        matches!(evicted, Ok(Ok(0) | Err(_))),
        "the oldest idle connection was closed"
    );
    drop(held);
    common::eventually_async("connections freed", || async {
        reqwest::get(d.http("/healthz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;

    // Failed authentication: 3 per minute, then 429 with Retry-After for wrong tokens; the
    // right token still passes.
    for _ in 0..3 {
        let r = http
            .get(d.http("/api/sessions"))
            .bearer_auth("bad-bad-bad-bad-bad")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    assert_eq!(get_as(&http, d.http("/api/sessions"), TOKEN).await, 200);
    let r = http
        .get(d.http("/api/sessions"))
        .bearer_auth("bad-bad-bad-bad-bad")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    // The sessions and viewers that were already there keep working.
    v1.run("echo still-$((5*5))", "still-25").await;
    v2.wait_screen("still-25").await;
}

/// Status and `Retry-After` of a GET of the session list with this bearer token.
async fn list_as(d: &Daemon, http: &reqwest::Client, token: &str) -> (u16, Option<u64>) {
    let r = http
        .get(d.http("/api/sessions"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    (r.status().as_u16(), retry)
}

#[tokio::test]
async fn wrong_tokens_never_lock_out_the_right_one() {
    // The default limit (10 failures a minute); every client here is 127.0.0.1, like every
    // local browser tab.
    let d = secured("");
    let http = no_redirect();
    let id = create(&d).await;
    let writer = share(&d, id, "writer", None).await["token"]
        .as_str()
        .unwrap()
        .to_owned();

    // Requests without a credential guess nothing: they are neither counted nor limited.
    for _ in 0..15 {
        let r = http.get(d.http("/api/sessions")).send().await.unwrap();
        assert_eq!(r.status(), 401);
    }
    // Wrong tokens: the first ten are plain failures, then the address is limited.
    for i in 0..12 {
        let (status, retry) = list_as(&d, &http, "wrong-token-xxxxxxxxxx").await;
        if i < 10 {
            assert_eq!((status, retry), (401, None), "failure {i}");
        } else {
            assert_eq!(status, 429, "failure {i}");
            assert!(retry.is_some_and(|s| (1..=60).contains(&s)), "{retry:?}");
        }
    }

    // The right tokens pass from the limited address, over REST and WebSocket.
    assert_eq!(list_as(&d, &http, TOKEN).await, (200, None));
    assert_eq!(
        get_as(&http, d.http(&format!("/api/sessions/{id}")), &writer).await,
        200,
        "a valid share token"
    );
    assert_eq!(
        ws_status(&d.ws(id, &format!("?token={TOKEN}")), None).await,
        101
    );
    let mut c = Client::connect(&d.ws(id, &format!("?token={writer}"))).await;
    c.run("echo in-$((6*7))", "in-42").await;

    // Passing lifts nothing for failures: wrong tokens still get 429, over WebSocket too.
    let (status, retry) = list_as(&d, &http, "wrong-token-xxxxxxxxxx").await;
    assert_eq!(status, 429);
    assert!(retry.is_some_and(|s| (1..=60).contains(&s)), "{retry:?}");
    assert_eq!(
        ws_status(&d.ws(id, "?token=wrong-token-xxxxxxxxxx"), None).await,
        429
    );
    // A bare request still gets the login page, not 429.
    assert_eq!(http.get(d.http("/")).send().await.unwrap().status(), 401);
    assert_eq!(list_as(&d, &http, TOKEN).await, (200, None));
}

/// How long a GET of the session list with `token` takes from `from`, and its status.
async fn timed_list(d: &Daemon, from: &str, token: &str) -> (std::time::Duration, u16) {
    let http = reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let r = http
        .get(d.http("/api/sessions"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (started.elapsed(), r.status().as_u16())
}

#[tokio::test]
async fn each_failed_login_from_an_address_is_answered_later() {
    use std::time::Duration;
    // 25 ms, doubling with each failure (the eighth waits 3.2 s), at most 4 s.
    let d = secured("[limits]\nfailed_auth_delay_max = \"4s\"\n");
    let mut waits = Vec::new();
    for _ in 0..8 {
        let (took, status) = timed_list(&d, "127.0.0.1", "wrong-token-xxxxxxxxxx").await;
        assert_eq!(status, 401);
        waits.push(took);
    }
    // Lower bounds are the daemon's own sleeps; the upper ones are generous for a busy host.
    assert!(waits[0] < Duration::from_millis(1500), "{waits:?}");
    assert!(waits[6] >= Duration::from_millis(1550), "{waits:?}");
    assert!(waits[7] >= Duration::from_millis(3150), "{waits:?}");
    // The right token from that address answers at once (the next failure would wait 4 s).
    let (took, status) = timed_list(&d, "127.0.0.1", TOKEN).await;
    assert_eq!(status, 200);
    assert!(took < Duration::from_millis(2000), "{took:?}");
    // Another address's first failure is not slowed by this one's.
    let (took, status) = timed_list(&d, "127.0.0.2", "wrong-token-xxxxxxxxxx").await;
    assert_eq!(status, 401);
    assert!(took < Duration::from_millis(2000), "{took:?}");
}

fn upload_frame(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut f = vec![0x01, (name.len() >> 8) as u8, name.len() as u8];
    f.extend_from_slice(name);
    f.extend_from_slice(data);
    f
}

#[tokio::test]
async fn an_upload_never_goes_through_a_symlinked_uploads_directory() {
    let d = secured("");
    let work = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join(".ptyhub")).unwrap();
    let link = work.path().join(".ptyhub/uploads");
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let resp = no_redirect()
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"assistant":"shell","cwd": work.path()}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id: Uuid = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let mut c = Client::connect(&d.ws(id, &format!("?token={TOKEN}"))).await;
    c.wait_screen("$ ").await;
    c.send_binary(upload_frame(b"planted.sh", b"echo owned\n"))
        .await;
    let r = c.wait_json("file_upload").await;
    assert_eq!(r["success"], false, "{r}");
    let err = r["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("is a symbolic link: refusing to write through it"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing lands outside the working directory"
    );
    // The session carries on, and nothing was typed for the refused file.
    c.run("echo alive-$((3+4))", "alive-7").await;
    assert!(!c.screen_text().contains("planted.sh"));
}

#[tokio::test]
async fn systemd_gets_ready_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(common::TIMEOUT)).unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, common::config("")).unwrap();
    // systemd sets WATCHDOG_PID to the service's pid: exec from a shell that knows its own.
    let mut child = common::KillOnDrop(std::process::Command::new("bash")
        .arg("-c")
        .arg("export WATCHDOG_PID=$$; exec \"$0\" --listen 127.0.0.1:0 --no-auth --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_ptyhub"))
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap());
    let mut buf = [0u8; 256];
    let mut seen: Vec<String> = Vec::new();
    let mut recv = |seen: &mut Vec<String>| {
        let n = sock
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no notification ({e}); so far {seen:?}"));
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    };
    while !seen.iter().any(|m| m.contains("READY=1")) {
        recv(&mut seen);
    }
    while !seen.iter().any(|m| m.contains("WATCHDOG=1")) {
        recv(&mut seen);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    while !seen.iter().any(|m| m.contains("STOPPING=1")) {
        recv(&mut seen);
    }
    assert!(child.0.wait().unwrap().success());
}

fn start_fails(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(args)
        .env_remove("PTYHUB_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} should not start");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn non_loopback_needs_a_token_and_no_auth_needs_loopback() {
    let err = start_fails(&["--listen", "0.0.0.0:0"]);
    assert!(err.contains("without a token"), "{err}");
    let err = start_fails(&["--listen", "0.0.0.0:0", "--no-auth"]);
    assert!(err.contains("--no-auth is refused"), "{err}");
    let err = start_fails(&["--listen", "127.0.0.1:0", "--token", "short"]);
    assert!(err.contains("at least 16"), "{err}");
    // With a token it starts (and we stop it at once).
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("listen = \"0.0.0.0:0\"\n{}", common::config("")),
    )
    .unwrap();
    let mut child = common::KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
            .arg("--config")
            .arg(&cfg)
            .args(["--token", TOKEN])
            .env_remove("PTYHUB_LISTEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(
        line.starts_with("ptyhub listening on http://0.0.0.0:"),
        "{line}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.0.wait().unwrap().success());
}

#[tokio::test]
async fn a_generated_token_is_printed_once_and_never_logged() {
    let d = Daemon::start_args(&common::config(""), &[]);
    common::eventually("the URL line", || !d.printed().is_empty()).await;
    let line = d.printed()[0].clone();
    let token = line
        .split("?token=")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"))
        .trim()
        .to_owned();
    assert_eq!(token.len(), 64, "256 bits in hex");
    let http = no_redirect();
    let id = Uuid::new_v4();
    assert_eq!(
        http.get(d.http(&format!("/?token={token}")))
            .send()
            .await
            .unwrap()
            .status(),
        303
    );
    assert_eq!(
        http.get(d.http(&format!("/api/sessions?access_token={token}")))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let mut c = Client::connect(&d.ws(id, &format!("?assistant=shell&token={token}"))).await;
    c.wait_json("ready").await;
    assert_eq!(d.printed().iter().filter(|l| l.contains(&token)).count(), 1);
    // Request lines are written before each response is sent, so they are in the log now.
    assert!(
        !d.log_text().contains(&token),
        "the token leaked into the log"
    );
    assert!(
        d.log_text().contains("refused request") || d.log_text().contains("request"),
        "requests are logged"
    );
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    // Verify the unit as shipped, pointing ExecStart at the binary this build made and User at
    // an account that exists here.
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/ptyhub.service"
    ))
    .unwrap()
    .replace("/usr/local/bin/ptyhub", env!("CARGO_BIN_EXE_ptyhub"))
    .replace("User=ptyhub", "User=root");
    assert!(
        unit.contains("Type=notify")
            && unit.contains("KillMode=mixed")
            && unit.contains("Restart=on-failure")
            && unit.contains("upgrade --pid $MAINPID")
    );
    let path = dir.path().join("ptyhub.service");
    std::fs::write(&path, unit).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (tests/run installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("ptyhub.service:"),
        "{text}"
    );
}
