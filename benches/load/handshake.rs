//! handshake: the WebSocket upgrade, from `connect` to the whole `101` head read, to a session's
//! `/ws/{id}`, against the least an upgrade costs: a bare hyper server in this process that
//! accepts and answers the same request with `101` (fastwebsockets' handshake), in the same run,
//! in alternating rounds. The bare server runs twice: on a current-thread runtime (the least),
//! and on a two-worker multi-thread runtime like the daemon's, which tells the scheduler's
//! share of the gap (its wake-ups of the second worker) from the daemon's own work.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::daemon::Daemon;
use crate::report::{fail, ms, pct_us, Report};
use crate::{Ctx, Settings};

/// Rounds each side's samples are split into, alternating daemon and bare server.
const ROUNDS: usize = 4;

pub(crate) struct HandshakeRow {
    /// Upgrades to the daemon, sorted.
    daemon: Vec<Duration>,
    /// Upgrades to the bare hyper server, sorted.
    bare: Vec<Duration>,
    /// Upgrades to the same bare server on a two-worker multi-thread runtime, sorted.
    bare_multi: Vec<Duration>,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    match handshakes(s, ctx).await {
        Ok(row) => report.handshake = Some(row),
        Err(e) => fail(report, format!("handshake: {e:#}")),
    }
}

async fn handshakes(s: &Settings, ctx: &Ctx) -> Result<HandshakeRow> {
    let mut daemon = Daemon::start(ctx, "handshake")?;
    let id = daemon.create_session("shell").await?;
    let bare = bare_server(Flavour::CurrentThread)?;
    let bare_multi = bare_server(Flavour::MultiThread)?;
    let per_round = s.joins.div_ceil(ROUNDS);
    let (mut d, mut b, mut m) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        eprintln!("load: handshake, round {round} of {ROUNDS}");
        for (addr, path, into) in [
            (daemon.addr, format!("/ws/{id}"), &mut d),
            (bare, "/ws/bare".to_owned(), &mut b),
            (bare_multi, "/ws/bare".to_owned(), &mut m),
        ] {
            for _ in 0..per_round {
                into.push(upgrade(addr, &path).await?);
                if !s.pause.is_zero() {
                    tokio::time::sleep(s.pause).await;
                }
            }
        }
    }
    d.sort();
    b.sort();
    m.sort();
    daemon.finish("handshake", &mut Vec::new());
    Ok(HandshakeRow {
        daemon: d,
        bare: b,
        bare_multi: m,
    })
}

/// One upgrade: connect, send the request, read the response head; the time it took.
async fn upgrade(addr: std::net::SocketAddr, path: &str) -> Result<Duration> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let start = Instant::now();
    let step = async {
        let mut tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        tcp.write_all(request.as_bytes()).await?;
        let (mut head, mut buf) = (Vec::new(), [0u8; 1024]);
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await?;
            if n == 0 {
                bail!("closed before the response head");
            }
            head.extend_from_slice(&buf[..n]);
        }
        let took = start.elapsed();
        if !head.starts_with(b"HTTP/1.1 101") {
            bail!("answered {:?}", String::from_utf8_lossy(&head));
        }
        Ok::<_, anyhow::Error>(took)
    };
    tokio::time::timeout(Duration::from_secs(10), step)
        .await
        .context("no 101 within 10 s")?
}

/// The runtime a bare server runs on.
#[derive(Clone, Copy)]
enum Flavour {
    /// One thread, polling its own I/O: the least a tokio server costs.
    CurrentThread,
    /// Two workers, as the daemon has on this machine.
    MultiThread,
}

/// The bare server on a runtime of its own: accepts, answers each upgrade with `101`, and
/// drops the upgraded connection. Its address; it lives until the generator exits.
fn bare_server(flavour: Flavour) -> Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("load-bare-http".into())
        .spawn(move || {
            let mut builder = match flavour {
                Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread(),
                Flavour::MultiThread => {
                    let mut b = tokio::runtime::Builder::new_multi_thread();
                    b.worker_threads(2).thread_name("load-bare-multi");
                    b
                }
            };
            let Ok(rt) = builder.enable_all().build() else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                while let Ok((tcp, _)) = listener.accept().await {
                    let _ = tcp.set_nodelay(true);
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(
                            |mut req: hyper::Request<hyper::body::Incoming>| async move {
                                let (resp, _upgraded) = fastwebsockets::upgrade::upgrade(&mut req)?;
                                Ok::<_, fastwebsockets::WebSocketError>(resp)
                            },
                        );
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                            .with_upgrades()
                            .await;
                    });
                }
            });
        })
        .context("starting the bare server's thread")?;
    Ok(addr)
}

pub(crate) fn print(r: &HandshakeRow, out: &mut Map<String, Value>) {
    println!();
    println!(
        "handshake: connect to the whole 101 head, {} upgrades each, alternating rounds",
        r.daemon.len()
    );
    println!("{:<26} {:>9} {:>9}", "to", "p50", "p99");
    for (name, v) in [
        ("ptyhub /ws/{id}", &r.daemon),
        ("bare hyper 101", &r.bare),
        ("bare hyper, 2 workers", &r.bare_multi),
    ] {
        println!(
            "{:<26} {:>9} {:>9}",
            name,
            ms(pct_us(v, 0.50)),
            ms(pct_us(v, 0.99))
        );
    }
    out.insert(
        "handshake".into(),
        json!({
            "daemon_p50_us": pct_us(&r.daemon, 0.50),
            "daemon_p99_us": pct_us(&r.daemon, 0.99),
            "bare_p50_us": pct_us(&r.bare, 0.50),
            "bare_p99_us": pct_us(&r.bare, 0.99),
            "bare_multi_p50_us": pct_us(&r.bare_multi, 0.50),
            "bare_multi_p99_us": pct_us(&r.bare_multi, 0.99),
        }),
    );
}
