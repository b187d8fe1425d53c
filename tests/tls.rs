//! `[tls]`: the daemon serves https:// and wss:// itself with a certificate made by the test
//! (rcgen), to real clients (reqwest with rustls, a WebSocket over rustls, a bare rustls
//! handshake to see which certificate is presented); SIGHUP swaps the certificate for new
//! handshakes while an open WebSocket goes on; a failed reload keeps the old pair; start-up
//! stops with a clear error for a missing file or a key that does not match; a live upgrade
//! keeps serving TLS.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::pki::{pki, Pki};
use common::{eventually_async, Client, Daemon};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rustls::pki_types::{CertificateDer, ServerName};
use uuid::Uuid;

const TOKEN: &str = "tls-test-token-0123456789abcdef";

/// Writes the pair where `[tls]` points; returns (cert, key) paths.
fn install(dir: &Path, p: &Pki) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    // Through a rename, as certbot does: a reader never sees half a file.
    for (path, text) in [(&cert, &p.leaf_pem), (&key, &p.key_pem)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    }
    (cert, key)
}

fn tls_config(cert: &Path, key: &Path) -> String {
    common::config(&format!(
        "[tls]\ncert = {:?}\nkey = {:?}\n[auth]\ntoken = {TOKEN:?}\n",
        cert, key
    ))
}

/// A client trusting these CAs, TLS 1.2 and 1.3 or only `versions`.
fn client_config(
    cas: &[&CertificateDer<'static>],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add((*ca).clone()).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// TLS 1.3 and 1.2.
const BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A fresh handshake: the certificate the daemon presents now, and the ALPN it chose.
async fn presented(
    d: &Daemon,
    config: Arc<rustls::ClientConfig>,
) -> (CertificateDer<'static>, Option<Vec<u8>>) {
    let tcp = tokio::net::TcpStream::connect(d.addr)
        .await
        .expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("handshake");
    let (_, conn) = tls.get_ref();
    let cert = conn.peer_certificates().expect("a certificate")[0].clone();
    (cert, conn.alpn_protocol().map(<[u8]>::to_vec))
}

fn https(d: &Daemon, path: &str) -> String {
    format!("https://{}{path}", d.addr)
}

fn wss(d: &Daemon, id: Uuid, query: &str) -> String {
    format!("wss://{}/ws/{id}{query}", d.addr)
}

fn reqwest_trusting(ca: &Pki) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.ca_pem.as_bytes()).expect("CA"))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

#[tokio::test]
async fn https_and_wss_with_a_certificate_made_now() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pki();
    let (cert, key) = install(dir.path(), &p);
    let d = Daemon::start_with(&tls_config(&cert, &key));
    // The URL to open is https://.
    let open = format!("open https://{}/", d.addr);
    common::eventually("the https URL is printed", || {
        d.printed().iter().any(|l| l.starts_with(&open))
    })
    .await;

    let http = reqwest_trusting(&p);
    // A page opened with the token: the cookie it gets is Secure.
    let resp = http
        .get(https(&d, &format!("/?token={TOKEN}")))
        .send()
        .await
        .expect("https GET");
    assert_eq!(resp.status(), 303);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(
        cookie.contains("Path=/;") || cookie.ends_with("Path=/; Secure"),
        "{cookie}"
    );
    let sessions = http
        .get(https(&d, "/api/sessions"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("https API");
    assert_eq!(sessions.status(), 200);
    // Plain HTTP on the TLS port gets no answer it could read as HTTP.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/api/sessions", d.addr))
        .bearer_auth(TOKEN)
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was served: {plain:?}");

    // TLS 1.2 alone is accepted too, and HTTP/1.1 is what is spoken.
    let (leaf, alpn) = presented(&d, client_config(&[&p.ca], &[&rustls::version::TLS12])).await;
    assert_eq!(leaf, p.leaf);
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));

    // A terminal over wss://.
    let id = Uuid::new_v4();
    let mut c = Client::connect_tls(
        &wss(&d, id, &format!("?assistant=shell&token={TOKEN}")),
        client_config(&[&p.ca], BOTH),
    )
    .await;
    c.resize(24, 80).await;
    c.wait_screen("$ ").await;
    c.run("echo over-$((6*7))-tls", "over-42-tls").await;
}

/// One deadline covers the TLS handshake and the first request's head together: a client
/// slow at both, each part under `header_timeout` but the two over it, is closed without an
/// answer, as it would be on plain TCP; a prompt one is served.
#[tokio::test]
async fn the_handshake_and_the_first_request_share_one_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pki();
    let (cert, key) = install(dir.path(), &p);
    let header_timeout = std::time::Duration::from_secs(3);
    let d = Daemon::start_args(
        &format!(
            "{}\n[limits]\nheader_timeout = \"{}s\"\n",
            tls_config(&cert, &key),
            header_timeout.as_secs()
        ),
        &[],
    );
    let ok = reqwest_trusting(&p)
        .get(https(&d, "/healthz"))
        .send()
        .await
        .expect("a prompt client");
    assert_eq!(ok.status(), 200);

    // Each pause is 60% of the timeout: the handshake ends in time, and the head follows it
    // within the timeout, but not within the timeout of the accept.
    let pause = header_timeout * 6 / 10;
    let tcp = tokio::net::TcpStream::connect(d.addr)
        .await
        .expect("connect");
    tokio::time::sleep(pause).await;
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(client_config(&[&p.ca], BOTH))
        .connect(name, tcp)
        .await
        .expect("the handshake, in time");
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .expect("the head's first line");
    tls.flush().await.expect("flush");
    tokio::time::sleep(pause).await;
    // Past the deadline the daemon has closed it: this may fail, or go unread.
    let _ = tls.write_all(b"\r\n").await;
    let _ = tls.flush().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(common::TIMEOUT, tls.read_to_end(&mut answer))
        .await
        .expect("closed, not left open");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.starts_with("HTTP/1.1 200"),
        "served after {:?} ({read:?}): {answer}",
        pause * 2
    );
}

#[tokio::test]
async fn sighup_swaps_the_certificate_for_new_handshakes_and_keeps_open_sockets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, second) = (pki(), pki());
    let (cert, key) = install(dir.path(), &first);
    let d = Daemon::start_with(&tls_config(&cert, &key));
    let trust = client_config(&[&first.ca, &second.ca], BOTH);
    assert_eq!(presented(&d, trust.clone()).await.0, first.leaf);

    let id = Uuid::new_v4();
    let mut open = Client::connect_tls(
        &wss(&d, id, &format!("?assistant=shell&token={TOKEN}")),
        trust.clone(),
    )
    .await;
    open.resize(24, 80).await;
    open.wait_screen("$ ").await;

    // The renewal: new files, SIGHUP.
    install(dir.path(), &second);
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGHUP).expect("SIGHUP");
    eventually_async("a new handshake presents the new certificate", || {
        let trust = trust.clone();
        let d = &d;
        let want = second.leaf.clone();
        async move { presented(d, trust).await.0 == want }
    })
    .await;
    // The socket opened before the reload goes on.
    open.run("echo still-$((40+2))-here", "still-42-here").await;

    // A broken renewal (the first key with the second certificate): refused, logged, and the
    // second pair stays.
    std::fs::write(&key, &first.key_pem).expect("write");
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGHUP).expect("SIGHUP");
    common::eventually("the failed reload is logged", || {
        d.log_text()
            .contains("TLS reload failed, keeping the previous certificate")
    })
    .await;
    let log = d.log_text();
    assert!(log.contains("does not go with certificate"), "{log}");
    assert_eq!(presented(&d, trust.clone()).await.0, second.leaf);
    open.run("echo after-$((40+3))-fail", "after-43-fail").await;
}

#[tokio::test]
async fn start_up_stops_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (pki(), pki());
    let (cert, key) = install(dir.path(), &a);
    let missing = dir.path().join("nope.pem");
    // No backtrace after the message: the launcher's error quotes only the end of the log.
    let quiet =
        |l: common::launcher::Launch| l.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
    let start = |config: String| match Daemon::try_start_launch(&config, quiet) {
        Ok(_) => panic!("started with {config}"),
        Err(e) => format!("{e:#}"),
    };

    let e = start(tls_config(&missing, &key));
    assert!(
        e.contains(&format!(
            "cannot read TLS certificate {}",
            missing.display()
        )),
        "{e}"
    );
    let e = start(tls_config(&cert, &missing));
    assert!(
        e.contains(&format!("cannot read TLS key {}", missing.display())),
        "{e}"
    );
    let other_key = dir.path().join("other-key.pem");
    std::fs::write(&other_key, &b.key_pem).expect("write");
    let e = start(tls_config(&cert, &other_key));
    assert!(e.contains("does not go with certificate"), "{e}");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").expect("write");
    let e = start(tls_config(&junk, &key));
    assert!(e.contains("no CERTIFICATE block"), "{e}");
    let e = start(common::config(&format!("[tls]\ncert = {cert:?}\n")));
    assert!(e.contains("[tls] cert is set but key is not"), "{e}");
}

#[tokio::test]
async fn a_live_upgrade_keeps_serving_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pki();
    let (cert, key) = install(dir.path(), &p);
    let d = Daemon::start_with(&tls_config(&cert, &key));
    let trust = client_config(&[&p.ca], BOTH);
    let http = reqwest_trusting(&p);
    let upgrades = || async {
        let v: serde_json::Value = http
            .get(https(&d, "/api/version"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["upgrades"].as_u64()
    };
    assert_eq!(upgrades().await, Some(0));
    let id = Uuid::new_v4();
    let url = wss(&d, id, &format!("?assistant=shell&token={TOKEN}"));
    let mut before = Client::connect_tls(&url, trust.clone()).await;
    before.resize(24, 80).await;
    before.wait_screen("$ ").await;
    before
        .run("export MARK=kept-over; echo set-$((2+3))", "set-5")
        .await;

    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("SIGUSR2");
    eventually_async("the new image answers over https", || async {
        upgrades().await == Some(1)
    })
    .await;
    // The old viewer was told to reconnect (1012); a new one over wss finds the same shell.
    let (code, _) = before.until_closed().await;
    assert_eq!(code, 1012);
    let mut after = Client::connect_tls(&url, trust).await;
    after.resize(24, 80).await;
    after.wait_json("ready").await;
    after.run("echo $MARK-$((1+1))", "kept-over-2").await;
}

/// A viewer over wss:// that reads what it is sent at once gets a flood as the stream, as a
/// plain one does, not as resync snapshots: its writes never wait for the socket, so the
/// backlog its writer task holds between the actor's turns (every chunk goes through that
/// task over TLS) does not mark it as slow. Up to three floods, so that one the test's reader
/// fell behind on (a busy machine) does not fail it; before the fix every flood was resynced
/// within its first few hundred KiB.
#[tokio::test]
async fn a_wss_viewer_that_keeps_up_gets_a_flood_streamed_not_resynced() {
    use futures_util::SinkExt;
    use std::io::Read;
    use tokio_tungstenite::tungstenite::Message;
    const FLOOD: usize = 4 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pki();
    let (cert, key) = install(dir.path(), &p);
    let d = Daemon::start_with(&tls_config(&cert, &key));
    let url = wss(
        &d,
        Uuid::new_v4(),
        &format!("?assistant=shell&token={TOKEN}"),
    );
    let connector = tokio_tungstenite::Connector::Rustls(client_config(&[&p.ca], BOTH));
    let connect =
        tokio_tungstenite::connect_async_tls_with_config(&url, None, true, Some(connector));
    let (mut ws, _) = tokio::time::timeout(common::TIMEOUT, connect)
        .await
        .expect("connect in time")
        .expect("connect");
    while !matches!(next(&mut ws).await, Message::Text(t) if t.contains(r#""type":"ready""#)) {}
    let mut tries = Vec::new();
    for round in 0..3 {
        // The typed command's echo does not hold the marker; the shell's arithmetic makes it.
        let end = format!("TLS-FLOOD-END-{}", 40 + round);
        let cmd = format!(
            "base64 -w 76 /dev/zero | head -c {FLOOD}; echo; echo TLS-FLOOD-END-$((40+{round}))\r"
        );
        ws.send(Message::Binary(cmd.into_bytes()))
            .await
            .expect("send");
        // Only bytes are counted and the end looked for: this reader keeps up with the flood.
        let (mut streamed, mut resyncs, mut tail, mut gz) = (0, 0, Vec::new(), Vec::new());
        loop {
            let Message::Binary(b) = next(&mut ws).await else {
                continue;
            };
            if b.len() >= 3 && b[0] == 0x02 {
                // A snapshot chunk [0x02, index, total, gzip…]: a resync, which may show the end.
                gz.extend_from_slice(&b[3..]);
                if b[1] + 1 < b[2] {
                    continue;
                }
                resyncs += 1;
                let mut screen = String::new();
                flate2::read::GzDecoder::new(&gz[..])
                    .read_to_string(&mut screen)
                    .expect("gunzip snapshot");
                gz.clear();
                if screen.contains(&end) {
                    break;
                }
                continue;
            }
            streamed += b.len();
            tail.extend_from_slice(&b);
            tail.drain(..tail.len().saturating_sub(256));
            if String::from_utf8_lossy(&tail).contains(&format!("{end}\r\n")) {
                break;
            }
        }
        if resyncs == 0 && streamed > FLOOD {
            return;
        }
        tries.push((streamed, resyncs));
    }
    panic!("every flood was resynced or cut short: (bytes streamed, resyncs) {tries:?}");
}

/// The next message on `ws`; panics when it ends or stays silent.
async fn next(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> tokio_tungstenite::tungstenite::Message {
    use futures_util::StreamExt;
    match tokio::time::timeout(common::TIMEOUT, ws.next()).await {
        Ok(Some(Ok(m))) => m,
        other => panic!("the connection ended or went silent: {other:?}"),
    }
}

/// Starts the binary listening on every interface (a token set, so it may), reads its first
/// line, stops it, and returns what it logged.
fn log_of_a_wide_listen(extra: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("listen = \"0.0.0.0:0\"\n{}", common::config(extra)),
    )
    .expect("write");
    let log = dir.path().join("log");
    let mut child = common::KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
            .arg("--config")
            .arg(&cfg)
            .args(["--token", TOKEN])
            .env_remove("PTYHUB_LISTEN")
            .env("XDG_STATE_HOME", dir.path())
            .env("RUST_LOG", "ptyhub=info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("spawn"),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.0.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("first line");
    assert!(line.starts_with("ptyhub listening on "), "{line}");
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    assert!(child.0.wait().expect("wait").success());
    std::fs::read_to_string(&log).expect("log")
}

#[test]
fn plain_http_beyond_loopback_without_a_trusted_proxy_is_warned_about() {
    const WARNING: &str = "listening beyond loopback over plain HTTP";
    let log = log_of_a_wide_listen("");
    assert!(log.contains(WARNING), "{log}");
    // A TLS proxy in front, listed as trusted: no warning.
    let log = log_of_a_wide_listen("[proxy]\ntrusted = [\"127.0.0.1/32\"]\n");
    assert!(!log.contains(WARNING), "{log}");
}

#[tokio::test]
async fn a_live_upgrade_with_a_broken_certificate_is_refused_and_the_old_image_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p, other) = (pki(), pki());
    let (cert, key) = install(dir.path(), &p);
    let d = Daemon::start_with(&tls_config(&cert, &key));
    let trust = client_config(&[&p.ca], BOTH);
    let http = reqwest_trusting(&p);
    let id = Uuid::new_v4();
    let mut c = Client::connect_tls(
        &wss(&d, id, &format!("?assistant=shell&token={TOKEN}")),
        trust.clone(),
    )
    .await;
    c.resize(24, 80).await;
    c.wait_screen("$ ").await;
    std::fs::write(&key, &other.key_pem).expect("write");
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("SIGUSR2");
    let version = eventually_async_value(&http, &d).await;
    assert_eq!(version["upgrades"], 0, "{version}");
    let why = version["lastUpgradeError"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("does not go with certificate"), "{version}");
    // Same image, same socket, same certificate.
    c.run("echo on-$((6*7))", "on-42").await;
    assert_eq!(presented(&d, trust).await.0, p.leaf);
}

/// `/api/version` once it reports a failed upgrade.
async fn eventually_async_value(http: &reqwest::Client, d: &Daemon) -> serde_json::Value {
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let v: Option<serde_json::Value> = match http.get(https(d, "/api/version")).send().await {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        if let Some(v) = v.filter(|v| !v["lastUpgradeError"].is_null()) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failed upgrade reported"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
