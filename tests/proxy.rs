//! Behind a reverse proxy: `[proxy] trusted` peers' `X-Forwarded-For` names the client for the
//! failed-auth rate limit, the per-address WebSocket pool and the logs (anyone else's is
//! ignored: spoofing it changes nothing); `X-Forwarded-Proto` / `-Host` decide the cookie's
//! `Secure`, the origin check and share links; `[server] base_path` puts every page, asset,
//! route, cookie and link under it. Then the shipped `config/nginx/ptyhub.conf` in real nginx
//! (Debian's package) in front of a daemon under `/ptyhub/`: pages, a WebSocket session, an
//! upload, the event stream as it happens, and the client's own address in the rate limit.

use crate::common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::nginx::{self, Nginx};
use common::{eventually, eventually_async, Client, Daemon, TIMEOUT};
use rustls::pki_types::pem::PemObject;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use uuid::Uuid;

const TOKEN: &str = "proxy-test-token-0123456789abcdef";

fn start(extra: &str) -> Daemon {
    Daemon::start_args(&common::config(extra), &["--token", TOKEN])
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A request with a wrong token, as if forwarded for `xff` (none: no header).
async fn bad_token(d: &Daemon, xff: Option<&str>) -> u16 {
    let mut req = http()
        .get(d.http("/api/sessions"))
        .bearer_auth("wrong-token-wrong-token-wrong");
    if let Some(xff) = xff {
        req = req.header("x-forwarded-for", xff);
    }
    req.send().await.expect("request").status().as_u16()
}

#[tokio::test]
async fn spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    // 127.0.0.1 is not a trusted proxy here (only 10.0.0.0/8 is).
    let d = start("[proxy]\ntrusted = [\"10.0.0.0/8\"]\n[limits]\nfailed_auth_per_minute = 3\n");
    // Each failure claims another client; all of them are 127.0.0.1's.
    for xff in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        assert_eq!(bad_token(&d, Some(xff)).await, 401);
    }
    assert_eq!(bad_token(&d, Some("192.0.2.4")).await, 429);
    assert_eq!(bad_token(&d, None).await, 429);
    let log = d.log_text();
    assert!(
        !log.contains("192.0.2."),
        "a spoofed address was logged:\n{log}"
    );
    assert!(log.contains("peer=127.0.0.1:"), "{log}");

    // Nor does a spoofed X-Forwarded-Host pass the origin check, or -Proto make a cookie Secure.
    let resp = http()
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .header("origin", "https://dev.example.com")
        .header("x-forwarded-host", "dev.example.com")
        .json(&json!({}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 403);
    let resp = http()
        .get(d.http(&format!("/?token={TOKEN}")))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .expect("GET");
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(!cookie.contains("Secure"), "{cookie}");
}

/// A WebSocket to `url` as if forwarded for `xff`; the HTTP status when refused.
async fn ws_for(url: &str, xff: &str) -> Result<Client, u16> {
    let mut req = url.into_client_request().expect("request");
    req.headers_mut()
        .insert("x-forwarded-for", xff.parse().expect("header"));
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(Client::from_ws(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("connect {url}: {e}"),
    }
}

#[tokio::test]
async fn a_trusted_proxy_s_client_is_what_limits_logs_and_links_see() {
    let d = start(
        "[proxy]\ntrusted = [\"127.0.0.1/32\"]\n[limits]\nfailed_auth_per_minute = 3\nmax_connections_per_ip = 2\n",
    );
    for _ in 0..3 {
        assert_eq!(bad_token(&d, Some("192.0.2.1")).await, 401);
    }
    assert_eq!(bad_token(&d, Some("192.0.2.1")).await, 429);
    // Another client behind the same proxy is not limited by the first one's failures.
    assert_eq!(bad_token(&d, Some("192.0.2.2")).await, 401);
    // Trusted hops on the right are skipped...
    assert_eq!(bad_token(&d, Some("192.0.2.1, 127.0.0.1")).await, 429);
    // ...and what the limited client wrote left of its own address is not believed.
    assert_eq!(bad_token(&d, Some("192.0.2.9, 192.0.2.1")).await, 429);
    assert_eq!(bad_token(&d, Some("192.0.2.1, 192.0.2.3")).await, 401);
    let log = d.log_text();
    assert!(log.contains("peer=192.0.2.1:0"), "{log}");

    // The per-address WebSocket pool (2 here) is the forwarded client's, not the proxy's.
    let id = Uuid::new_v4();
    let url = d.ws(id, &format!("?assistant=shell&token={TOKEN}"));
    let mut a1 = ws_for(&url, "198.51.100.1").await.expect("first of A");
    a1.resize(24, 80).await;
    a1.wait_json("ready").await;
    let mut a2 = ws_for(&url, "198.51.100.1").await.expect("second of A");
    a2.wait_json("ready").await;
    assert_eq!(ws_for(&url, "198.51.100.1").await.err(), Some(429));
    let mut b = ws_for(&url, "198.51.100.2")
        .await
        .expect("B has places of its own");
    b.wait_json("ready").await;

    // X-Forwarded-Host and -Proto: the origin check, the cookie, the share link.
    let resp = http()
        .post(d.http(&format!("/api/sessions/{id}/share")))
        .bearer_auth(TOKEN)
        .header("origin", "https://dev.example.com")
        .header("x-forwarded-host", "dev.example.com")
        .header("x-forwarded-proto", "https")
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .expect("share");
    assert_eq!(resp.status(), 201);
    let share: Value = resp.json().await.expect("json");
    let href = share["href"].as_str().expect("href");
    assert!(
        href.starts_with(&format!("https://dev.example.com/session/{id}?token=")),
        "{share}"
    );
    let resp = http()
        .get(d.http(&format!("/?token={TOKEN}")))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .expect("GET");
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
}

#[tokio::test]
async fn base_path_puts_pages_routes_cookies_and_links_under_it() {
    let d = start("[server]\nbase_path = \"/ptyhub\"\n");
    let get = |path: &str| http().get(d.http(path)).bearer_auth(TOKEN).send();
    // The bare prefix goes to its root; nothing outside it is served (but /healthz).
    let resp = get("/ptyhub").await.expect("GET");
    assert_eq!(resp.status(), 301);
    assert_eq!(resp.headers()["location"], "/ptyhub/");
    for outside in ["/", "/app.css", "/api/sessions", "/session/x"] {
        assert_eq!(get(outside).await.expect("GET").status(), 404, "{outside}");
    }
    assert_eq!(get("/healthz").await.expect("GET").status(), 200);
    assert_eq!(get("/ptyhub/healthz").await.expect("GET").status(), 200);
    // Pages carry the base; their assets are served under it.
    let page = get("/ptyhub/")
        .await
        .expect("GET")
        .text()
        .await
        .expect("body");
    assert!(page.contains("<base href=\"/ptyhub/\">"), "{page}");
    assert!(page.contains("href=\"app.css\""), "{page}");
    assert_eq!(get("/ptyhub/app.css").await.expect("GET").status(), 200);
    assert_eq!(get("/ptyhub/api.js").await.expect("GET").status(), 200);
    // The token's cookie and redirect stay under it.
    let resp = http()
        .get(d.http(&format!("/ptyhub/session/{}?token={TOKEN}", Uuid::nil())))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), 303);
    assert_eq!(
        resp.headers()["location"],
        format!("/ptyhub/session/{}", Uuid::nil()).as_str()
    );
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("Path=/ptyhub/"), "{cookie}");
    // The API and a WebSocket under it.
    let id = Uuid::new_v4();
    let mut c = Client::connect(&format!(
        "ws://{}/ptyhub/ws/{id}?assistant=shell&token={TOKEN}",
        d.addr
    ))
    .await;
    c.resize(24, 80).await;
    c.wait_screen("$ ").await;
    c.run("echo under-$((2*21))", "under-42").await;
    let sessions: Value = get("/ptyhub/api/sessions")
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    assert!(sessions.to_string().contains(&id.to_string()), "{sessions}");
    let share: Value = http()
        .post(d.http(&format!("/ptyhub/api/sessions/{id}/share")))
        .bearer_auth(TOKEN)
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .expect("share")
        .json()
        .await
        .expect("json");
    let url = share["url"].as_str().expect("url");
    assert!(
        url.starts_with(&format!("/ptyhub/session/{id}?token=")),
        "{share}"
    );
    assert_eq!(
        share["href"].as_str(),
        Some(format!("http://{}{url}", d.addr).as_str())
    );
    // The command-line client, given the server under its prefix, prints links under it once.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["share", &id.to_string()])
        .env("PTYHUB_URL", format!("http://{}/ptyhub", d.addr))
        .env("PTYHUB_TOKEN", TOKEN)
        .output()
        .expect("ptyhub share");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains(&format!("http://{}/ptyhub/session/{id}?token=", d.addr)),
        "{printed}"
    );
}

// ---- real nginx ----------------------------------------------------------------------------

/// The shipped nginx file.
/// A test CA's certificate for 127.0.0.1, written to `dir`: (CA PEM, cert path, key path).
pub fn test_cert(dir: &Path) -> (String, PathBuf, PathBuf) {
    let pki = common::pki::pki();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, &pki.leaf_pem).expect("write");
    std::fs::write(&key_path, &pki.key_pem).expect("write");
    (pki.ca_pem, cert_path, key_path)
}

#[tokio::test]
async fn the_shipped_nginx_file_serves_ptyhub_under_a_prefix() {
    let Some(bin) = nginx::binary() else {
        println!("SKIPPED: nginx is not installed (tests/run installs Debian's nginx package)");
        return;
    };
    let d = start(
        "[server]\nbase_path = \"/ptyhub\"\n[proxy]\ntrusted = [\"127.0.0.1/32\"]\n[limits]\nfailed_auth_per_minute = 3\n",
    );
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = test_cert(certs.path());
    let nginx = Nginx::start(&bin, |port| {
        nginx::single_host_site(d.addr, port, &cert, &key)
    })
    .expect("nginx with config/nginx/ptyhub.conf");
    let base = format!("https://127.0.0.1:{}/ptyhub/", nginx.port);
    let origin = format!("https://127.0.0.1:{}", nginx.port);
    let client_from = |ip: &str| {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
            .redirect(reqwest::redirect::Policy::none())
            .local_address(ip.parse::<IpAddr>().expect("ip"))
            .build()
            .expect("client")
    };
    let web = client_from("127.0.0.1");

    // The page: signed in through the prefix, a Secure cookie for it, the base in the page.
    let resp = web
        .get(format!("{base}?token={TOKEN}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/ptyhub/");
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("Path=/ptyhub/; Secure"), "{cookie}");
    let page = web
        .get(&base)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("page");
    assert!(page.contains("<base href=\"/ptyhub/\">"), "{page}");
    let bare = web
        .get(format!("{origin}/ptyhub"))
        .send()
        .await
        .expect("GET");
    assert_eq!(bare.headers()["location"], "/ptyhub/");

    // The event stream, followed: an event made after it opened arrives while it stays open
    // (nginx buffers nothing).
    let events = web
        .get(format!("{base}api/events?follow=1&tail=0"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("SSE");
    assert_eq!(events.status(), 200);
    let mut stream = events;

    // A terminal over wss:// through nginx, from a page of the proxy's origin.
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates({
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(c.expect("pem")).expect("root");
        }
        roots
    })
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let id = Uuid::new_v4();
    let mut req = format!(
        "wss://127.0.0.1:{}/ptyhub/ws/{id}?assistant=shell&token={TOKEN}",
        nginx.port
    )
    .into_client_request()
    .expect("request");
    req.headers_mut()
        .insert("origin", origin.parse().expect("origin"));
    let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(
        req,
        None,
        false,
        Some(tokio_tungstenite::Connector::Rustls(Arc::new(tls))),
    )
    .await
    .expect("wss through nginx");
    let mut c = Client::from_ws(ws);
    c.resize(24, 80).await;
    c.wait_screen("$ ").await;
    c.run("echo via-$((6*7))-nginx", "via-42-nginx").await;

    // The session's creation reached the stream already open through nginx.
    let created = tokio::time::timeout(TIMEOUT, async {
        let mut seen = String::new();
        while let Some(chunk) = stream.chunk().await.expect("chunk") {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains(&id.to_string()) {
                return seen;
            }
        }
        panic!("the stream ended: {seen}");
    })
    .await
    .expect("the event arrived through nginx in time");
    assert!(created.contains("event:"), "{created}");

    // An upload (1 MiB) over the WebSocket through nginx.
    let data: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let name = b"through-nginx.bin";
    let mut frame = vec![1, 0, name.len() as u8];
    frame.extend_from_slice(name);
    frame.extend_from_slice(&data);
    c.send_binary(frame).await;
    let reply = c.wait_json("file_upload").await;
    assert_eq!(reply["success"], true, "{reply}");
    let written = d.dir.path().join(".ptyhub/uploads/through-nginx.bin");
    eventually("the upload is on disk", || {
        std::fs::read(&written).is_ok_and(|w| w == data)
    })
    .await;

    // The client's own address is what the rate limit sees: 127.0.0.3 is limited after three
    // failures, 127.0.0.4 (even claiming to be 127.0.0.3) is not.
    let bad = |from: &'static str, xff: Option<&'static str>| {
        let web = client_from(from);
        let url = format!("{base}api/sessions");
        async move {
            let mut req = web.get(url).bearer_auth("wrong-token-wrong-token-wrong");
            if let Some(xff) = xff {
                req = req.header("x-forwarded-for", xff);
            }
            req.send().await.expect("request").status().as_u16()
        }
    };
    for _ in 0..3 {
        assert_eq!(bad("127.0.0.3", None).await, 401);
    }
    assert_eq!(bad("127.0.0.3", None).await, 429);
    assert_eq!(bad("127.0.0.4", Some("127.0.0.3")).await, 401);
    assert_eq!(bad("127.0.0.4", None).await, 401);
    eventually_async("the log names the client, not nginx", || async {
        d.log_text().contains("peer=127.0.0.3:0")
    })
    .await;
    drop(nginx);
}

/// One keep-alive connection as the trusted proxy (127.0.0.1) opens them: each request names
/// its client in `X-Forwarded-For`.
struct ProxyConn(tokio::io::BufReader<tokio::net::TcpStream>);

impl ProxyConn {
    async fn open(d: &Daemon) -> ProxyConn {
        let tcp = tokio::net::TcpStream::connect(d.addr)
            .await
            .expect("connect");
        ProxyConn(tokio::io::BufReader::new(tcp))
    }

    async fn write(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.0.get_mut().write_all(bytes).await.expect("write");
    }

    /// Sends a GET for `path` on behalf of `client`, and reads its answer.
    async fn get(&mut self, path: &str, client: &str) -> (u16, String) {
        let head =
            format!("GET {path} HTTP/1.1\r\nhost: ptyhub\r\nx-forwarded-for: {client}\r\n\r\n");
        self.write(head.as_bytes()).await;
        self.response().await
    }

    /// Asks for `/healthz` as `client` until the answer is `want`.
    async fn until_status(&mut self, client: &str, want: u16, what: &str) {
        let start = std::time::Instant::now();
        while self.get("/healthz", client).await.0 != want {
            assert!(start.elapsed() < TIMEOUT, "timed out waiting for: {what}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The status and body of the next response (every one here has a content-length).
    async fn response(&mut self) -> (u16, String) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt};
        let read = async {
            let mut status = 0;
            let mut length = 0;
            loop {
                let mut line = String::new();
                self.0.read_line(&mut line).await.expect("read");
                assert!(!line.is_empty(), "closed before a response");
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(code) = line.strip_prefix("HTTP/1.1 ") {
                    status = code[..3].parse().expect("status");
                } else if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().expect("length");
                    }
                }
            }
            let mut body = vec![0; length];
            self.0.read_exact(&mut body).await.expect("body");
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        tokio::time::timeout(TIMEOUT, read)
            .await
            .expect("a response")
    }
}

/// Behind a trusted proxy a client counts on a connection only while its request is live: a
/// burst through the proxy's keep-alive connections leaves it no 429 once it is over, while
/// requests really in flight still meet the per-client limit.
#[tokio::test]
async fn a_proxy_s_idle_keep_alive_connections_count_under_no_client() {
    // A header timeout longer than the test's patience: an idle connection still counted
    // would refuse the client for all of it.
    let d = start(
        "[proxy]\ntrusted = [\"127.0.0.1/32\"]\n[limits]\nmax_connections_per_ip = 2\nheader_timeout = \"120s\"\n",
    );
    const A: &str = "198.51.100.7";
    let mut conns = Vec::new();
    for _ in 0..2 {
        let mut c = ProxyConn::open(&d).await;
        assert_eq!(c.get("/healthz", A).await.0, 200);
        conns.push(c);
    }
    // Both stay open as the proxy keeps them; A's requests are over.
    let mut third = ProxyConn::open(&d).await;
    third
        .until_status(A, 200, "A's finished requests no longer count")
        .await;

    // Two requests of A really in flight (their bodies not all sent) take A's two places.
    let body = "{not json at all}";
    let head = format!(
        "POST /api/sessions HTTP/1.1\r\nhost: ptyhub\r\nx-forwarded-for: {A}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    for c in &mut conns {
        c.write(head.as_bytes()).await;
        c.write(&body.as_bytes()[..3]).await;
    }
    // The daemon reads each head on its own task: wait until both hold their place (the log
    // line follows the count). Asking as A before that would race them: a request of A's in
    // flight on `third` would take a place and refuse the later upload.
    let counted = format!("peer={A}:0 method=POST path=/api/sessions");
    eventually("both of A's uploads hold a place", || {
        d.log_text()
            .lines()
            .filter(|l| l.contains(&counted))
            .count()
            == 2
    })
    .await;
    let (status, refusal) = third.get("/healthz", A).await;
    assert_eq!(status, 429, "{refusal}");
    assert!(refusal.contains("too many connections"), "{refusal}");
    // Another client behind the same proxy is not affected.
    assert_eq!(third.get("/healthz", "198.51.100.8").await.0, 200);
    for c in &mut conns {
        c.write(&body.as_bytes()[3..]).await;
        let (status, answer) = c.response().await;
        assert_eq!(status, 400, "{answer}");
    }
    third
        .until_status(A, 200, "A's places are free again")
        .await;
}

/// A trusted proxy is bounded too: past `[proxy] max_connections` open connections from it,
/// one more is refused with a 429 before its request; one closing makes room again.
#[tokio::test]
async fn a_trusted_proxy_s_connections_have_a_cap() {
    let d = start("[proxy]\ntrusted = [\"127.0.0.1/32\"]\nmax_connections = 3\n");
    let mut open = Vec::new();
    for client in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        let mut c = ProxyConn::open(&d).await;
        // Answered: it holds its place (idle keep-alive connections count against the cap).
        assert_eq!(c.get("/healthz", client).await.0, 200);
        open.push(c);
    }
    let answer = common::refused_connection(d.addr).await;
    assert!(
        answer.ends_with(r#"{"error":"too many connections from this address"}"#),
        "{answer}"
    );
    // A client that sends its request at once (as every HTTP client does) reads the 429 to its
    // end, not a reset: the daemon takes the request it refuses before it closes.
    for _ in 0..5 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut refused = tokio::net::TcpStream::connect(d.addr).await.unwrap();
        refused
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: ptyhub\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        let read = tokio::time::timeout(TIMEOUT, refused.read_to_string(&mut answer))
            .await
            .expect("an answer");
        assert!(read.is_ok(), "{read:?} after {answer:?}");
        assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    }
    drop(open.pop());
    let start = std::time::Instant::now();
    loop {
        let mut c = ProxyConn::open(&d).await;
        c.write(b"GET /healthz HTTP/1.1\r\nhost: ptyhub\r\nx-forwarded-for: 198.51.100.4\r\n\r\n")
            .await;
        let mut first = String::new();
        use tokio::io::AsyncBufReadExt;
        tokio::time::timeout(TIMEOUT, c.0.read_line(&mut first))
            .await
            .expect("an answer")
            .expect("read");
        if first.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            first.starts_with("HTTP/1.1 429") && start.elapsed() < TIMEOUT,
            "a closed connection's place is not given back: {first}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
