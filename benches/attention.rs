//! Attention's latency on a real daemon (README, "Attention"): the time from a prompt appearing
//! on a session's screen to the `state` event that says `waiting` (the screen path), and from an
//! agent's hook starting (`ptyhub notify`, a process, as Claude Code runs it) or an HTTP report
//! being sent (the API alone) to that event (the hook path); p50, p99 and max over `--samples`.
//!
//! Run: `cargo bench --bench attention [-- --samples 200]`. The session's program is a small
//! Python script that, on each line it reads, clears its screen and writes a Claude-like
//! permission dialog, a spinner line, or runs `ptyhub notify`, and prints the wall-clock time
//! it did so (the same clock the generator reads when an event arrives). Everything is on
//! 127.0.0.1. The cost of one screen reading (the patterns) is `cargo bench --bench micro --
//! attention`.

#[path = "../tests/common/launcher.rs"]
mod launcher;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

/// The session's program: each line read is a command (`w`: the spinner, `p`: the dialog, `h`:
/// `ptyhub notify --state waiting`), answered with `T=<µs since the epoch>` when it is done.
const AGENT: &str = r#"
import os, subprocess, sys, time
ptyhub = sys.argv[1]
out = sys.stdout
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "w":
        t = time.time_ns() // 1000
        out.write("\x1b[2J\x1b[H\u2733 Working\u2026 (1s \u00b7 esc to interrupt)\r\n")
    elif cmd == "p":
        t = time.time_ns() // 1000
        out.write("\x1b[2J\x1b[H Bash command\r\n   cargo test\r\n Do you want to proceed?\r\n"
                  " \u276f 1. Yes\r\n   2. No\r\n Esc to cancel \u00b7 Tab to amend\r\n")
    elif cmd == "h":
        t = time.time_ns() // 1000
        subprocess.run([ptyhub, "notify", "--state", "waiting", "--reason", "hook"])
    else:
        continue
    out.write("T=%d\r\n" % t)
    out.flush()
"#;

fn main() -> Result<()> {
    let samples = std::env::args()
        .skip_while(|a| a != "--samples")
        .nth(1)
        .map(|n| n.parse().context("--samples N"))
        .transpose()?
        .unwrap_or(100usize);
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("ptyhub.toml");
    std::fs::write(
        &config,
        format!(
            "[recording]\nenabled = false\n[attention]\nhook_rate = 10000\n\
             [assistants.agent]\nname = \"Claude\"\ncommand = [\"python3\", \"-u\", \"-c\", {AGENT:?}, {bin:?}]\n\
             [assistants.agent.state]\n\
             waiting = ['(?m)^\\s*Do you want to proceed\\?\\s*$']\n\
             working = ['(?:esc|ctrl\\+c) to interrupt\\)']\n",
            bin = launcher::CARGO_BIN,
        ),
    )?;
    let log = dir.path().join("daemon.log");
    let daemon = launcher::Launch::new(launcher::CARGO_BIN, &config, dir.path(), &log)
        .args(["--no-auth"])
        .env("XDG_STATE_HOME", dir.path())
        .spawn()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(measure(daemon.addr(), samples))
}

/// Microseconds since the epoch, now.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

async fn measure(addr: std::net::SocketAddr, samples: usize) -> Result<()> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let created: Value = http
        .post(format!("http://{addr}/api/sessions"))
        .json(&serde_json::json!({"assistant": "agent"}))
        .send()
        .await?
        .json()
        .await?;
    let id = created["id"].as_str().context("id")?.to_owned();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws/{id}")).await?;
    let mut events = Events::open(&http, addr).await?;
    let mut screen = Vec::new();
    // Warm up: the first reading, the first notify.
    let mut step = Step {
        ws: &mut ws,
        events: &mut events,
        screen: &mut screen,
        id: &id,
    };
    // A session starts `working`: a prompt first, so the loop's first step is a change.
    step.run("p", "waiting").await?;
    let (mut screen_path, mut hook_path, mut api_path) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        step.run("w", "working").await?;
        screen_path.push(step.run("p", "waiting").await?);
        step.run("w", "working").await?;
        hook_path.push(step.run("h", "waiting").await?);
        step.run("w", "working").await?;
        let t0 = now_us();
        http.post(format!("http://{addr}/api/sessions/{id}/state"))
            .body(r#"{"state":"waiting","reason":"api"}"#)
            .send()
            .await?;
        let arrived = step.events.until(&id, "waiting").await?;
        api_path.push(arrived.saturating_sub(t0));
    }
    println!("attention latency, {samples} samples each (from the prompt written, the hook started or the report sent, to the `state` event read by a client of /api/events):");
    for (what, mut us) in [
        ("screen: prompt on screen -> state event", screen_path),
        ("hook: `ptyhub notify` started -> state event", hook_path),
        ("hook: HTTP report sent -> state event", api_path),
    ] {
        us.sort_unstable();
        let pct = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
        println!(
            "  {what:<48} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
            pct(0.5),
            pct(0.99),
            pct(1.0)
        );
    }
    Ok(())
}

/// One step of the program: a command typed, the event it leads to, and the program's stamp.
struct Step<'a> {
    ws: &'a mut Ws,
    events: &'a mut Events,
    /// Output read since the last stamp.
    screen: &'a mut Vec<u8>,
    id: &'a str,
}

impl Step<'_> {
    /// Types `key`, waits for the `want` event, then for the program's stamp; the µs between
    /// the two.
    async fn run(&mut self, key: &str, want: &str) -> Result<u64> {
        self.ws
            .send(Message::Binary(format!("{key}\r").into_bytes()))
            .await?;
        let arrived = self.events.until(self.id, want).await?;
        // The program's stamp follows the output it stamps.
        let start = Instant::now();
        loop {
            if let Some(t0) = self.stamp() {
                return Ok(arrived.saturating_sub(t0));
            }
            let msg = tokio::time::timeout(Duration::from_secs(10), self.ws.next())
                .await
                .context("the program's time stamp")?
                .context("closed")??;
            if let Message::Binary(b) = msg {
                self.screen.extend_from_slice(&b);
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!("no time stamp");
            }
        }
    }

    /// The last `T=<µs>` the program wrote, if a whole one came; what was read goes.
    fn stamp(&mut self) -> Option<u64> {
        let text = String::from_utf8_lossy(self.screen).into_owned();
        let at = text.rfind("T=")?;
        let end = text[at..].find('\r')?;
        let t = text[at + 2..at + end].parse().ok();
        self.screen.clear();
        t
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// `GET /api/events?follow=1` as it arrives.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    async fn open(http: &reqwest::Client, addr: std::net::SocketAddr) -> Result<Events> {
        let resp = http
            .get(format!("http://{addr}/api/events?follow=1&tail=0"))
            .send()
            .await?;
        Ok(Events {
            resp,
            buf: String::new(),
        })
    }

    /// Reads until session `id`'s next `state` event of `state`; when it was read, in µs
    /// since the epoch.
    async fn until(&mut self, id: &str, state: &str) -> Result<u64> {
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue;
                };
                let v: Value = serde_json::from_str(data)?;
                if v["session"] == id && v["state"] == state {
                    return Ok(now_us());
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.resp.chunk())
                .await
                .with_context(|| format!("no {state} event"))??
                .context("the event stream ended")?;
            // Read as it arrives: the time is taken once the event is whole.
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
