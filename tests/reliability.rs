//! Reliability against careless and hostile clients: input is never dropped, nothing a client
//! sends or fails to read grows the daemon's memory, idle connections lock nobody out, and
//! WebSocket protocol violations get a close frame.

use crate::common;

use std::time::Duration;

use common::wire::frame;
use common::{Client, Daemon, TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

const TOKEN: &str = "test-token-0123456789abcdef";

/// `len` bytes of printable lines: no byte a terminal or the browser dialect treats specially.
fn paste_bytes(len: usize) -> Vec<u8> {
    let mut x: u32 = 12345;
    (0..len)
        .map(|i| {
            if i % 100 == 99 {
                return b'\n';
            }
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            b'a' + ((x >> 16) % 26) as u8
        })
        .collect()
}

async fn viewers_of(d: &Daemon, id: Uuid) -> u64 {
    let v: Value = reqwest::get(d.http(&format!("/api/sessions/{id}")))
        .await
        .expect("GET session")
        .json()
        .await
        .expect("json");
    v["viewers"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn a_10_mb_paste_in_64k_frames_arrives_byte_identical() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut typist = Client::connect(&d.ws(id, "?assistant=shell")).await;
    typist.wait_screen("$ ").await;
    let out = d.dir.path().join("paste.bin");
    // Raw mode without echo: the bytes reach `cat` as sent. The program starts reading only
    // after a pause, so the paste meets a full input queue.
    typist
        .run(
            &format!(
                "stty raw -echo; echo READ''Y; sleep 2; cat > {}",
                out.display()
            ),
            "READY",
        )
        .await;
    let data = paste_bytes(10_000_000);
    let mut other = Client::connect(&d.ws(id, "")).await;
    other.wait_json("ready").await;

    // The paste goes on its own connection, as the UI sends it: 64 KiB binary frames.
    let (mut paster, _) = tokio_tungstenite::connect_async(d.ws(id, ""))
        .await
        .expect("connect");
    let frames: Vec<Vec<u8>> = data.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
    let paste = tokio::spawn(async move {
        for f in frames {
            paster.send(Message::Binary(f)).await.expect("send");
        }
        // Keep reading (and so the connection) until the test is done with it.
        while let Some(Ok(_)) = paster.next().await {}
    });

    // The other viewer stays live while the paste waits for the program.
    other
        .send_json(json!({"type": "ping", "data": "still-here"}))
        .await;
    assert_eq!(other.wait_json("pong").await["data"], "still-here");

    let len = data.len() as u64;
    common::eventually("the whole paste in the file", || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() >= len)
    })
    .await;
    let got = std::fs::read(&out).expect("read");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the paste arrived altered");
    assert!(
        typist.messages.iter().all(|m| m["type"] != "error"),
        "no error: {:?}",
        typist.messages
    );
    paste.abort();
}

#[tokio::test]
async fn ping_data_is_capped() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_json("ready").await;
    c.send_json(json!({"type": "ping", "data": "x".repeat(2000)}))
        .await;
    let err = c.wait_json("error").await;
    assert_eq!(err["code"], "bad_message");
    assert!(err["message"].as_str().unwrap_or("").contains("1024"));
    c.send_json(json!({"type": "ping", "data": {"ts": 1}}))
        .await;
    assert_eq!(c.wait_json("pong").await["data"]["ts"], 1);
}

#[tokio::test]
async fn a_viewer_that_never_reads_its_replies_is_closed_and_memory_stays_bounded() {
    let d = Daemon::start_with(&common::config("[viewer]\nstall_deadline = \"1s\"\n"));
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    let rss_before = d.rss_kib();

    // A raw client that sends pings with the most data allowed and never reads.
    let (ws, _) = tokio_tungstenite::connect_async(d.ws(id, ""))
        .await
        .expect("connect");
    let (mut tx, _rx) = ws.split();
    let ping = json!({"type": "ping", "data": "p".repeat(1000)}).to_string();
    let flood = tokio::spawn(async move {
        // Bounded: ~200 MB of pings at most; the server closes it long before.
        for _ in 0..200_000 {
            if tx.send(Message::Text(ping.clone())).await.is_err() {
                return true;
            }
        }
        false
    });
    common::eventually_async("the flooding viewer closed", || async {
        d.log_text().contains("not reading what it is sent")
    })
    .await;
    common::eventually_async("only the owner left", || async {
        viewers_of(&d, id).await == 1
    })
    .await;
    flood.abort();
    let grown_mib = d.rss_kib().saturating_sub(rss_before) / 1024;
    assert!(grown_mib < 64, "RSS grew by {grown_mib} MiB");
    // The session and its owner are undisturbed.
    owner.run("echo ok-$((6*7))", "ok-42").await;
}

#[tokio::test]
async fn a_viewer_that_never_reads_session_events_is_closed() {
    let d = Daemon::start_with(&common::config("[limits]\nmax_chat_chars = 4000\n"));
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    // Joins, then never reads.
    let (_silent, _) = tokio_tungstenite::connect_async(d.ws(id, ""))
        .await
        .expect("connect");
    common::eventually_async("two viewers", || async { viewers_of(&d, id).await == 2 }).await;
    let text = "c".repeat(3900);
    let mut sent = 0;
    // The owner reads its own copies between batches, so that on a busy host it is only the
    // silent viewer that falls behind.
    while viewers_of(&d, id).await == 2 {
        for _ in 0..20 {
            owner
                .send_json(json!({"type": "chat", "userName": "a", "text": text}))
                .await;
        }
        sent += 20;
        owner.drain_for(Duration::from_millis(100)).await;
        assert!(sent < 20_000, "the silent viewer was never closed");
    }
    assert!(d.log_text().contains("viewer event queue full"));
    owner.run("echo ok-$((6*7))", "ok-42").await;
}

#[tokio::test]
async fn idle_connections_are_closed_and_never_lock_out_a_real_client() {
    let d = Daemon::start_args(
        &common::config("[limits]\nmax_connections_per_ip = 8\nheader_timeout = \"1s\"\n"),
        &["--token", TOKEN],
    );
    // A connection that never sends a request is closed after the header timeout.
    let mut idle = TcpStream::connect(d.addr).await.expect("connect");
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(TIMEOUT, idle.read(&mut buf))
        .await
        .expect("closed by the server in time");
    assert!(matches!(n, Ok(0) | Err(_)), "closed, not answered");

    // Twice the limit of idle strangers: a real client still gets in, over HTTP and WebSocket.
    let mut strangers = Vec::new();
    for _ in 0..16 {
        strangers.push(TcpStream::connect(d.addr).await.expect("connect"));
    }
    let http = reqwest::Client::new();
    let r = http
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"assistant": "shell"}))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let id: Uuid = r.json::<Value>().await.expect("json")["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("id");
    let mut ws = Vec::new();
    for _ in 0..8 {
        let mut c = Client::connect(&d.ws(id, &format!("?token={TOKEN}"))).await;
        c.wait_json("ready").await;
        ws.push(c);
    }
    // Authenticated WebSockets do not take the strangers' places, nor they theirs.
    for _ in 0..16 {
        strangers.push(TcpStream::connect(d.addr).await.expect("connect"));
    }
    let r = reqwest::Client::new()
        .get(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("list");
    assert_eq!(r.status(), 200);
    ws[0].run("echo ok-$((6*7))", "ok-42").await;
}

/// Reads server frames until a close frame; returns its code (None: the TCP connection ended
/// without one).
async fn close_code(s: &mut TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    let read = async {
        loop {
            // Parse whole frames from the front of `buf` (server frames are unmasked).
            while buf.len() >= 2 {
                let len7 = (buf[1] & 0x7f) as usize;
                let (hdr, len) = match len7 {
                    126 if buf.len() >= 4 => (4, u16::from_be_bytes([buf[2], buf[3]]) as usize),
                    127 if buf.len() >= 10 => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&buf[2..10]);
                        (10, u64::from_be_bytes(b) as usize)
                    }
                    126 | 127 => break,
                    n => (2, n),
                };
                if buf.len() < hdr + len {
                    break;
                }
                if buf[0] & 0x0f == 0x8 {
                    let p = &buf[hdr..hdr + len];
                    return (p.len() >= 2).then(|| u16::from_be_bytes([p[0], p[1]]));
                }
                buf.drain(..hdr + len);
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(TIMEOUT, read)
        .await
        .expect("the server answered in time")
}

#[tokio::test]
async fn websocket_protocol_violations_get_close_1002() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    let long = vec![b'x'; 126];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unmasked frame", frame(0x82, b"hi", false)),
        ("RSV1 set", frame(0xc2, b"hi", true)),
        ("RSV3 set", frame(0x92, b"hi", true)),
        ("reserved data opcode", frame(0x83, b"hi", true)),
        ("reserved control opcode", frame(0x8b, b"", true)),
        ("ping over 125 bytes", frame(0x89, &long, true)),
        ("pong over 125 bytes", frame(0x8a, &long, true)),
        ("close over 125 bytes", frame(0x88, &long, true)),
        ("fragmented ping", frame(0x09, b"", true)),
        ("1-byte close payload", frame(0x88, b"\x03", true)),
        ("close code 1005", frame(0x88, &1005u16.to_be_bytes(), true)),
        ("continuation without a message", frame(0x80, b"x", true)),
    ];
    for (what, bytes) in cases {
        let mut s = common::raw_ws(&d, id).await;
        s.write_all(&bytes).await.expect("write");
        assert_eq!(close_code(&mut s).await, Some(1002), "{what}");
    }
    // A well-formed close is answered with its own code.
    let mut s = common::raw_ws(&d, id).await;
    s.write_all(&frame(0x88, &1000u16.to_be_bytes(), true))
        .await
        .expect("write");
    assert_eq!(close_code(&mut s).await, Some(1000));
    // None of it disturbed the session.
    owner.run("echo ok-$((6*7))", "ok-42").await;
}

#[tokio::test]
async fn a_share_link_may_not_create_share_links() {
    let d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    let http = reqwest::Client::new();
    let r = http
        .post(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"assistant": "shell"}))
        .send()
        .await
        .expect("create");
    let id = r.json::<Value>().await.expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let share = |token: &str| {
        http.post(d.http(&format!("/api/sessions/{id}/share")))
            .bearer_auth(token)
            .json(&json!({"role": "writer"}))
            .send()
    };
    let r = share(TOKEN).await.expect("share");
    assert_eq!(r.status(), 201);
    let writer = r.json::<Value>().await.expect("json")["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let r = share(&writer).await.expect("share as writer");
    assert_eq!(r.status(), 403);
    assert!(r.json::<Value>().await.expect("json")["error"].is_string());
}

/// The daemon's side of the connection from `client`: its line in /proc/net/tcp, split.
fn daemon_socket_line(
    daemon: std::net::SocketAddr,
    client: std::net::SocketAddr,
) -> Option<Vec<String>> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    // Little-endian IPv4 and a big-endian port, as the kernel prints them: 127.0.0.1:1977 is
    // 0100007F:07B9.
    let hex = |a: std::net::SocketAddr| match a.ip() {
        std::net::IpAddr::V4(ip) => {
            format!("{:08X}:{:04X}", u32::from_le_bytes(ip.octets()), a.port())
        }
        std::net::IpAddr::V6(_) => String::new(),
    };
    let (local, remote) = (hex(daemon), hex(client));
    table.lines().skip(1).find_map(|line| {
        let f: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        (f.get(1) == Some(&local) && f.get(2) == Some(&remote)).then_some(f)
    })
}

/// The daemon's own descriptor of its side of the connection from `client`, duplicated into
/// this process (`pidfd_getfd`: the daemon is this test's child).
fn daemon_socket(d: &Daemon, client: std::net::SocketAddr) -> std::os::fd::OwnedFd {
    let line = daemon_socket_line(d.addr, client).expect("the connection in /proc/net/tcp");
    let inode = format!("socket:[{}]", line[9]);
    let fds = std::fs::read_dir(format!("/proc/{}/fd", d.pid())).expect("the daemon's fds");
    let fd = fds
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == inode.as_str()))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .expect("the daemon's descriptor of the connection");
    let pid = rustix::process::Pid::from_raw(d.pid() as i32).expect("a pid");
    let pidfd =
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).expect("pidfd_open");
    rustix::process::pidfd_getfd(&pidfd, fd, rustix::process::PidfdGetfdFlags::empty())
        .expect("pidfd_getfd")
}

/// A viewer that reads slowly during a flood (a phone, a busy tab): what waits for it waits in
/// the daemon, which can replace it with a fresh screen, not in a kernel send queue grown to
/// megabytes that the viewer would have to read, stale, before anything newer
/// (`http/send_queue.rs`). The daemon's socket carries the low-water mark (what fails
/// without it: in a run this short the kernel's queue grows to megabytes only with many
/// viewers, as in the load generator's `slow` scenario), and what the kernel has not sent
/// the viewer yet stays within it throughout the flood. (Not the send queue of
/// /proc/net/tcp: that counts sent bytes not yet acknowledged too, which a busy host's late
/// acknowledgements grew to 683 KB in a fresh-clone run.)
#[tokio::test]
async fn output_for_a_slow_viewer_waits_in_the_daemon_not_the_kernel() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    let mut slow = common::raw_ws(&d, id).await;
    let client = slow.local_addr().expect("local address");
    let socket = daemon_socket(&d, client);
    assert_eq!(
        ptyhub::sys::notsent_lowat(std::os::fd::AsFd::as_fd(&socket)).expect("getsockopt"),
        64 * 1024,
        "the daemon's socket for the viewer has no low-water mark"
    );
    // 2.5 MB/s in reads of up to 256 KiB, reading on until the test ends.
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = slow.read(&mut buf).await {
            if n == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    owner
        .type_str("head -c 15000000 /dev/zero | base64; echo FLOOD-$((6*7))-DONE\r")
        .await;
    let mut most = 0;
    let sampling = async {
        loop {
            let unsent = ptyhub::sys::unsent_bytes(std::os::fd::AsFd::as_fd(&socket));
            most = most.max(unsent.expect("SIOCOUTQNSD"));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::select! {
        () = owner.wait_screen("FLOOD-42-DONE") => {}
        () = sampling => {}
    }
    reader.abort();
    drop(socket);
    eprintln!("the most the kernel held unsent for the slow viewer: {most} bytes");
    // The low-water mark, and at most a segment of up to 64 KiB the kernel filled before it
    // checked; twice that for margin.
    assert!(
        most <= 256 * 1024,
        "the kernel held {most} unsent bytes for the slow viewer"
    );
    owner.run("echo still-$((6*7))", "still-42").await;
}
