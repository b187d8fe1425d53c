//! Single sign-on through a trusted reverse proxy: real nginx running the shipped
//! `config/nginx/ptyhub-sso.conf`, asking (`auth_request`) a stand-in for oauth2-proxy served by
//! the test, and passing the signed-in person's email in `X-Forwarded-Email`. People are named
//! and scoped by `[auth.users]` and `[auth] default_scopes`; the same header sent to the
//! daemon by anyone but a trusted proxy is ignored.

use crate::common;

use std::net::SocketAddr;

use common::nginx::{self, Nginx};
use common::{eventually_async, Client, Daemon};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const TOKEN: &str = "sso-test-token-0123456789abcdef";
/// The stand-in's session cookie: it names who signed in.
const COOKIE: &str = "sso_user";
const ADMIN: &str = "admin@example.com";
const VIEWER: &str = "viewer@example.com";
const UNLISTED: &str = "carol@example.com";

/// The daemon behind the proxy: nginx (127.0.0.1) trusted, people named by X-Forwarded-Email.
fn daemon(default_scopes: &str) -> Daemon {
    let extra = format!(
        "[proxy]\ntrusted = [\"127.0.0.1/32\"]\n\
         [auth]\nuser_header = \"X-Forwarded-Email\"\ndefault_scopes = {default_scopes}\n\
         [auth.users]\n\"{ADMIN}\" = [\"admin\"]\n\"{VIEWER}\" = [\"view\"]\n"
    );
    Daemon::start_args(&common::config(&extra), &["--token", TOKEN])
}

/// A stand-in for oauth2-proxy's `/oauth2/auth`: 202 with `X-Auth-Request-Email` when the
/// request's cookie names a user, 401 otherwise. One request per connection (nginx's
/// subrequests close theirs).
async fn auth_service() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let user = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .filter(|(k, _)| k.eq_ignore_ascii_case("cookie"))
                    .flat_map(|(_, v)| v.split(';'))
                    .filter_map(|c| c.trim().split_once('='))
                    .find(|(k, _)| *k == COOKIE)
                    .map(|(_, v)| v.to_owned());
                let answer = match user {
                    Some(user) => format!(
                        "HTTP/1.1 202 Accepted\r\nX-Auth-Request-Email: {user}\r\n\
                         Content-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    None => "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\
                             Connection: close\r\n\r\n"
                        .to_owned(),
                };
                let _ = tcp.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// nginx with the shipped single sign-on file in front of `d`, asking `auth`.
fn nginx_for(d: &Daemon, auth: SocketAddr) -> Option<Nginx> {
    let Some(bin) = nginx::binary() else {
        println!("SKIPPED: nginx is not installed (tests/run installs Debian's nginx package)");
        return None;
    };
    let nginx = Nginx::start(&bin, |port| nginx::sso_site(d.addr, auth, port))
        .expect("nginx with config/nginx/ptyhub-sso.conf");
    Some(nginx)
}

fn web() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A request through nginx as `user` (signed in with the stand-in's cookie), or as nobody.
fn as_user(req: reqwest::RequestBuilder, user: Option<&str>) -> reqwest::RequestBuilder {
    match user {
        Some(user) => req.header("cookie", format!("{COOKIE}={user}")),
        None => req,
    }
}

/// A terminal WebSocket through nginx as `user`, from a page of nginx's origin.
async fn terminal(nginx: &Nginx, id: &str, user: &str) -> Client {
    let mut req = nginx
        .url("ws", &format!("/ws/{id}"))
        .into_client_request()
        .expect("request");
    let h = req.headers_mut();
    h.insert(
        "cookie",
        format!("{COOKIE}={user}").parse().expect("cookie"),
    );
    h.insert("origin", nginx.url("http", "").parse().expect("origin"));
    let (ws, _) = tokio::time::timeout(common::TIMEOUT, tokio_tungstenite::connect_async(req))
        .await
        .expect("in time")
        .unwrap_or_else(|e| panic!("ws through nginx as {user}: {e}"));
    Client::from_ws(ws)
}

/// `ptyhub_user_header_ignored_total`, asked with the token (`/metrics` is an admin's).
async fn ignored(d: &Daemon) -> u64 {
    d.metric_as(Some(TOKEN), "ptyhub_user_header_ignored_total")
        .await
}

/// Presence's viewers, as (user, role).
fn present(c: &Client) -> Vec<(String, String)> {
    c.last("presence")
        .and_then(|p| p["viewers"].as_array())
        .map(|viewers| {
            viewers
                .iter()
                .map(|v| {
                    let s = |k: &str| v[k].as_str().unwrap_or("null").to_owned();
                    (s("user"), s("role"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn people_signed_in_by_nginx_auth_request_are_named_and_scoped() {
    let d = daemon("[\"write\"]");
    let auth = auth_service().await;
    let Some(nginx) = nginx_for(&d, auth) else {
        return;
    };
    let web = web();
    let api = nginx.url("http", "/api/sessions");

    // Not signed in: nginx refuses before ptyhub is asked.
    let resp = as_user(web.get(&api), None).send().await.expect("GET");
    assert_eq!(resp.status(), 401);
    let body = resp.text().await.expect("body");
    assert!(body.contains("nginx"), "nginx's own 401: {body}");

    // The admin creates a session and joins it; presence names them.
    let resp = as_user(web.post(&api), Some(ADMIN))
        .json(&json!({"assistant": "shell"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.expect("json");
    let id = created["id"].as_str().expect("id").to_owned();
    let mut admin = terminal(&nginx, &id, ADMIN).await;
    admin.resize(24, 80).await;
    admin.wait_screen("$ ").await;
    admin
        .until("presence names the admin", |c| {
            present(c) == [(ADMIN.to_owned(), "writer".to_owned())]
        })
        .await;
    admin.run("echo sso-$((6*7))", "sso-42").await;

    // A view user (listed) watches; typing is refused; creating a session is 403.
    let mut viewer = terminal(&nginx, &id, VIEWER).await;
    viewer.wait_screen("sso-42").await;
    admin
        .until("presence names the viewer", |c| {
            present(c).contains(&(VIEWER.to_owned(), "viewer".to_owned()))
        })
        .await;
    viewer.type_str("echo viewer-typed\r").await;
    viewer
        .until("typing refused", |c| {
            c.messages
                .iter()
                .any(|m| m["type"] == "error" && m["code"] == "read_only")
        })
        .await;
    let resp = as_user(web.post(&api), Some(VIEWER))
        .json(&json!({"assistant": "shell"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 403);

    // An unlisted user gets default_scopes (write here): types, but may not create.
    let mut carol = terminal(&nginx, &id, UNLISTED).await;
    carol.resize(24, 80).await;
    carol.wait_screen("sso-42").await;
    carol.run("echo carol-$((2*3))", "carol-6").await;
    admin
        .until("presence names the unlisted user", |c| {
            present(c).contains(&(UNLISTED.to_owned(), "writer".to_owned()))
        })
        .await;
    let resp = as_user(web.post(&api), Some(UNLISTED))
        .json(&json!({"assistant": "shell"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 403);
    assert!(
        !admin.screen_text().contains("viewer-typed")
            && !viewer.screen_text().contains("viewer-typed"),
        "the viewer's keys reached the session"
    );

    // A script through the proxy: its token wins over whoever the cookie names; a stale
    // cookie of ptyhub's beside a signed-in person does not lock them out.
    let resp = as_user(web.post(&api), Some(VIEWER))
        .bearer_auth(TOKEN)
        .json(&json!({"assistant": "shell"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 201, "the token's owner may create");
    // More than `failed_auth_per_minute` (10): none of them counts as a failure.
    for _ in 0..12 {
        let resp = web
            .get(&api)
            .header(
                "cookie",
                format!("{COOKIE}={VIEWER}; ptyhub_token=stale-stale-stale-stale"),
            )
            .send()
            .await
            .expect("GET");
        assert_eq!(
            resp.status(),
            200,
            "a stale cookie beside a signed-in person"
        );
    }
    drop(nginx);
}

#[tokio::test]
async fn the_user_header_from_anyone_but_a_trusted_proxy_is_ignored() {
    // 127.0.0.1 is not trusted here: the header sent straight to the daemon is nobody's.
    let extra = "[proxy]\ntrusted = [\"10.0.0.0/8\"]\n\
                 [auth]\nuser_header = \"X-Forwarded-Email\"\ndefault_scopes = [\"admin\"]\n";
    let d = Daemon::start_args(&common::config(extra), &["--token", TOKEN]);
    let get = |email: &'static str| {
        common::http()
            .get(d.http("/api/sessions"))
            .header("x-forwarded-email", email)
            .send()
    };
    for _ in 0..3 {
        let resp = get("mallory@example.com").await.expect("GET");
        assert_eq!(resp.status(), 401, "the header is not a credential");
    }
    assert_eq!(ignored(&d).await, 3, "each one counted");
    // Logged once a minute per address, with the header's name and a prefix of its value only.
    eventually_async("the ignored header is logged", || async {
        d.log_text().contains("ignored the user header")
    })
    .await;
    let log = d.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ignored the user header"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("x-forwarded-email"), "{log}");
    assert!(lines[0].contains("peer=127.0.0.1:"), "{log}");
    assert!(
        !log.contains("mallory@example.com"),
        "the value was logged whole: {log}"
    );
    // Its token still works as ever.
    let resp = common::http()
        .get(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .header("x-forwarded-email", "mallory@example.com")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn a_trusted_proxy_s_user_without_scopes_is_told_who_they_are() {
    // The test is the trusted proxy: it sends the header itself from 127.0.0.1.
    let d = daemon("[]");
    let get = |email: &'static str| {
        common::http()
            .get(d.http("/api/sessions"))
            .header("x-forwarded-email", email)
            .send()
    };
    let resp = get(UNLISTED).await.expect("GET");
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.expect("json");
    let reason = body["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("signed in as {UNLISTED}")),
        "{body}"
    );
    assert_eq!(get(VIEWER).await.expect("GET").status(), 200);
    // A value that is no name is ignored (counted), not taken: without a token, 401.
    let resp = get("   ").await.expect("GET");
    assert_eq!(resp.status(), 401);
    assert_eq!(ignored(&d).await, 1);
}
