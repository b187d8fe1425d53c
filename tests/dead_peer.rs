//! Clients whose network really vanishes (no FIN, no reset: a laptop's lid closed, a phone off
//! Wi-Fi) are noticed within `limits.dead_peer_timeout` plus a heartbeat (docs/protocol.md
//! section 16, "A client that vanishes"), while every program they ran is silent: an exec over
//! SSE and one in pipe mode have their process groups ended, the event stream is uncounted and
//! the viewer let go.
//!
//! The clients run in a network namespace of the test's own, joined to this one by a veth pair
//! on addresses of the benchmarking range (198.18.0.0/15) picked from the test's pid; the
//! daemon listens on this end. Setting the far end down is the network vanishing: nothing the
//! clients' kernel would send gets through, and nothing reaches it. The namespace and the pair
//! are deleted however the test ends. Without root (or `ip`), the test says so and passes.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Daemon, KillOnDrop, TIMEOUT};
use serde_json::json;

const TOKEN: &str = "dead-peer-test-token-7f3a9c1e5b";

/// How long the daemon gets to notice every vanished client: comfortably more than the bound
/// (9 s of user timeout after a heartbeat at most 5 s late, and a moment for the groups to be
/// ended), far less than the kernel's own retransmission timeout (about 15 minutes) that
/// applies without the socket options.
const NOTICED_WITHIN: Duration = Duration::from_secs(40);

/// Runs `ip` with `args`; what it said when it failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A namespace holding one end of a veth pair, the other end here; both deleted when dropped.
struct Net {
    ns: String,
    here: String,
    there: String,
    here_ip: String,
    there_ip: String,
}

impl Net {
    /// Whether this machine lets the test make one: root, and `ip` installed.
    fn possible() -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid());
        if uid != 0 {
            return Err(format!(
                "not root (uid {uid}): cannot make a network namespace"
            ));
        }
        ip(&["-V"]).map_err(|e| format!("iproute2 is not usable: {e}"))
    }

    fn create() -> Net {
        let pid = std::process::id();
        let (third, fourth) = ((pid >> 6) & 0xff, (pid & 0x3f) * 4);
        let net = Net {
            ns: format!("ptyhub-dp-{pid}"),
            here: format!("pdp{pid}h"),
            there: format!("pdp{pid}t"),
            here_ip: format!("198.18.{third}.{}", fourth + 1),
            there_ip: format!("198.18.{third}.{}", fourth + 2),
        };
        // Left over by a test killed before its cleanup (a guard cannot outlive SIGKILL): those
        // of processes that are gone, and any under this pid, go first.
        let stale = std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten();
        for entry in stale {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(owner) = name.strip_prefix("ptyhub-dp-") else {
                continue;
            };
            if owner == pid.to_string() || !std::path::Path::new("/proc").join(owner).exists() {
                let _ = ip(&["link", "del", &format!("pdp{owner}h")]);
                let _ = ip(&["netns", "del", &name]);
            }
        }
        let _ = ip(&["link", "del", &net.here]);
        let ns = net.ns.clone();
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), ns.clone()],
            vec![
                "link".into(),
                "add".into(),
                net.here.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                net.there.clone(),
                "netns".into(),
                ns.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{}/30", net.here_ip),
                "dev".into(),
                net.here.clone(),
            ],
            vec!["link".into(), "set".into(), net.here.clone(), "up".into()],
            net.inside(&[
                "addr",
                "add",
                &format!("{}/30", net.there_ip),
                "dev",
                &net.there,
            ]),
            net.inside(&["link", "set", &net.there, "up"]),
            net.inside(&["link", "set", "lo", "up"]),
        ];
        for step in steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            // As root `ip netns` must work: a failure here is the test's (the guard cleans up).
            if let Err(e) = ip(&args) {
                panic!("setting up the namespace: {e}");
            }
        }
        net
    }

    /// `ip netns exec NS ip ARGS`, as arguments of `ip`.
    fn inside(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<String> =
            vec!["netns".into(), "exec".into(), self.ns.clone(), "ip".into()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all
    }

    /// A command run inside the namespace.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, program]);
        cmd
    }

    /// The network vanishes: the far end goes down, nothing more crosses.
    fn vanish(&self) {
        let args = self.inside(&["link", "set", &self.there, "down"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ip(&args).unwrap_or_else(|e| panic!("setting the far end down: {e}"));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting one end deletes both.
        let _ = ip(&["link", "del", &self.here]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// A client process inside the namespace, its stdout read line by line on a thread.
struct Remote {
    _child: KillOnDrop,
    lines: mpsc::Receiver<String>,
}

impl Remote {
    fn spawn(mut cmd: Command) -> Remote {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a client in the namespace");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Remote {
            _child: KillOnDrop(child),
            lines,
        }
    }

    /// The first line `pick` accepts, within `TIMEOUT`.
    fn until<T>(&self, what: &str, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(found) = pick(&line) {
                        return found;
                    }
                }
                Err(e) => panic!("no {what} from the client: {e}"),
            }
        }
    }
}

/// A WebSocket client in Python's standard library only: the handshake, then the text of every
/// binary frame up to its first newline as a line (a pipe-mode exec's `echo $$`), reading
/// everything until the connection ends.
const WS_CLIENT: &str = r#"
import socket, sys
host, port, path, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection((host, port))
s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n").encode())
buf = b""
while b"\r\n\r\n" not in buf:
    got = s.recv(65536)
    if not got:
        sys.exit(1)
    buf += got
head, buf = buf.split(b"\r\n\r\n", 1)
print(head.split(b"\r\n")[0].decode(), flush=True)
while True:
    while len(buf) >= 2:
        n, at = buf[1] & 0x7f, 2
        if n == 126:
            if len(buf) < 4: break
            n, at = int.from_bytes(buf[2:4], "big"), 4
        elif n == 127:
            if len(buf) < 10: break
            n, at = int.from_bytes(buf[2:10], "big"), 10
        if len(buf) < at + n: break
        payload, buf = buf[at:at + n], buf[at + n:]
        if payload[:1] == b"\x01":
            print(payload[1:].decode(errors="replace").split("\n")[0], flush=True)
    got = s.recv(65536)
    if not got:
        break
    buf += got
"#;

/// The daemon listening on this end of the pair (a token, as off loopback it must have one).
fn daemon_on(net: &Net) -> Daemon {
    // The launcher passes `--listen 127.0.0.1:0` first: the wrapper puts this end's address in
    // its place and execs the daemon, which keeps the pid.
    let script = format!(
        "bin=$1; shift 3; exec \"$bin\" --listen {}:0 \"$@\"",
        net.here_ip
    );
    Daemon::start_launch(&common::config(""), |launch| {
        launch
            .wrapper(["sh", "-c", &script, "sh"])
            .args(["--token", TOKEN])
    })
}

async fn metric(d: &Daemon, name: &str) -> u64 {
    d.metric_as(Some(TOKEN), name).await
}

/// Waits (bounded by `TIMEOUT`) until the metric reads `want`.
async fn metric_is(d: &Daemon, name: &str, want: u64) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let now = metric(d, name).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} is {now}, not {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pid_line(line: &str) -> Option<i32> {
    line.trim()
        .strip_prefix("data:")
        .unwrap_or(line)
        .trim()
        .parse()
        .ok()
}

#[tokio::test]
async fn clients_whose_network_vanished_are_let_go_and_their_execs_ended() {
    if let Err(why) = Net::possible() {
        eprintln!("SKIPPED dead_peer: {why}");
        return;
    }
    let net = Net::create();
    let d = daemon_on(&net);
    let (host, port) = (net.here_ip.clone(), d.addr.port().to_string());
    let base = format!("http://{host}:{port}");
    let auth = format!("Authorization: Bearer {TOKEN}");

    // An exec over SSE whose program says its pid and then is silent for good.
    let mut curl = net.command("curl");
    curl.args(["-sN", "-H", &auth, "-H", "Content-Type: application/json"])
        .args(["--data", r#"{"cmd": "echo $$; exec sleep 1000"}"#])
        .arg(format!("{base}/api/exec"));
    let sse_exec = Remote::spawn(curl);
    let sse_pid = sse_exec.until("exec pid", pid_line);

    // The same in pipe mode over a WebSocket.
    let path = "/api/exec?cmd=sh&arg=-c&arg=echo%20%24%24%3B%20exec%20sleep%201000";
    let mut py = net.command("python3");
    py.args(["-c", WS_CLIENT, &host, &port, path, TOKEN]);
    let pipe_exec = Remote::spawn(py);
    pipe_exec.until("the upgrade", |l| l.contains(" 101 ").then_some(()));
    let pipe_pid = pipe_exec.until("pipe exec pid", pid_line);

    // The daemon's event stream, following.
    let mut curl = net.command("curl");
    curl.args(["-sN", "-i", "-H", &auth])
        .arg(format!("{base}/api/events?follow=1&tail=0"));
    let events = Remote::spawn(curl);
    events.until("the stream's head", |l| {
        l.starts_with("HTTP/1.1 200").then_some(())
    });

    // A viewer of a session (raw dialect), which the session's idle shell sends nothing.
    let id = d.create_session(TOKEN, json!({"assistant": "shell"})).await;
    let mut py = net.command("python3");
    py.args([
        "-c",
        WS_CLIENT,
        &host,
        &port,
        &format!("/ws/{id}/raw"),
        TOKEN,
    ]);
    let viewer = Remote::spawn(py);
    viewer.until("the viewer's upgrade", |l| {
        l.contains(" 101 ").then_some(())
    });

    metric_is(&d, "ptyhub_execs_running", 2).await;
    metric_is(&d, "ptyhub_sse_streams", 1).await;
    metric_is(&d, "ptyhub_viewers", 1).await;
    assert!(crate::exec::group_alive(sse_pid) && crate::exec::group_alive(pipe_pid));

    net.vanish();
    let deadline = Instant::now() + NOTICED_WITHIN;
    loop {
        let left = [
            (
                "the SSE exec's group",
                u64::from(crate::exec::group_alive(sse_pid)),
            ),
            (
                "the pipe exec's group",
                u64::from(crate::exec::group_alive(pipe_pid)),
            ),
            ("execs running", metric(&d, "ptyhub_execs_running").await),
            ("event streams", metric(&d, "ptyhub_sse_streams").await),
            ("viewers", metric(&d, "ptyhub_viewers").await),
        ];
        if left.iter().all(|(_, n)| *n == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{NOTICED_WITHIN:?} after the clients' network vanished, still there: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = d.log_text();
    assert!(
        log.matches("exec client gone: ending its process group")
            .count()
            >= 2,
        "{log}"
    );
    // The clients are still running (they were never told): they go with their guards, then
    // the namespace.
    drop((sse_exec, pipe_exec, events, viewer));
    drop(d);
    drop(net);
}
