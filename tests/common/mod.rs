//! Test harness: a `ptyhub` daemon on 127.0.0.1 with an ephemeral port, the real binary
//! (`launcher`, shared with the load generator) or in this process (`in_process`), and a
//! scripted WebSocket client that keeps its own vt100 screen of everything it receives.
#![allow(dead_code)]

pub mod in_process;
pub mod launcher;
pub mod nginx;
pub mod pki;
pub mod sse;
pub mod wire;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use uuid::Uuid;

/// Generous: CI machines are small and busy; tests wait on conditions, never on time alone.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// A test config: a quiet bash with a fixed prompt, plus whatever the test adds.
pub fn config(extra: &str) -> String {
    format!(
        r#"
[session]
kill_grace = "2s"

[assistants.shell]
name = "Shell"
command = ["bash", "--norc", "--noprofile", "-i"]
env = {{ PS1 = "$ ", HISTFILE = "/dev/null" }}

{extra}
"#
    )
}

/// How a test's daemon runs.
enum Runner {
    /// The `ptyhub` binary cargo built, as a child process (`launcher`).
    Binary(launcher::Process),
    /// `ptyhub::daemon::Daemon` on a thread of the test's process (`in_process`).
    InProcess(in_process::InProcess),
}

/// A running daemon, the binary or in-process: same config, address, temp dir and log either
/// way. Stopped when dropped: the binary with SIGTERM, then SIGKILL; the in-process one as
/// SIGTERM stops the binary (every session ended, its programs gone).
pub struct Daemon {
    // Dropped first: the daemon goes before its directory.
    runner: Runner,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
}

/// Lines of a daemon's log a failing test prints: the daemon's side of what went wrong, in
/// the output of a run nobody can repeat (a fresh clone's intermittent failure).
const LOG_TAIL_ON_FAILURE: usize = 150;

impl Drop for Daemon {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_FAILURE)..];
        eprintln!(
            "--- the daemon's log, last {} of {} lines ---\n{}\n--- end of the daemon's log ---",
            tail.len(),
            lines.len(),
            tail.join("\n")
        );
    }
}

impl Daemon {
    pub fn start() -> Daemon {
        Self::start_with(&config(""))
    }

    /// Authentication off (these tests are about sessions; tests/security.rs covers auth).
    pub fn start_with(config_toml: &str) -> Daemon {
        Self::start_args(config_toml, &["--no-auth"])
    }

    /// A daemon with these extra flags; `printed` keeps what it printed after the first line.
    pub fn start_args(config_toml: &str, args: &[&str]) -> Daemon {
        Self::start_launch(config_toml, |launch| launch.args(args))
    }

    /// The binary, started as `adjust` says on top of the usual flags, environment and temp dir
    /// (e.g. under a wrapper such as `prlimit`); panics if it does not start.
    pub fn start_launch(
        config_toml: &str,
        adjust: impl FnOnce(launcher::Launch) -> launcher::Launch,
    ) -> Daemon {
        Self::try_start_launch(config_toml, adjust)
            .unwrap_or_else(|e| panic!("daemon did not start: {e:#}"))
    }

    /// `start_launch`, returning why it did not start instead of panicking.
    pub fn try_start_launch(
        config_toml: &str,
        adjust: impl FnOnce(launcher::Launch) -> launcher::Launch,
    ) -> anyhow::Result<Daemon> {
        let (dir, cfg, log) = Self::prepare(config_toml);
        let launch = launcher::Launch::new(launcher::CARGO_BIN, &cfg, dir.path(), &log)
            .env_remove("PTYHUB_TOKEN")
            // A generated token is kept in the state directory: the test's own, not the user's.
            .env("XDG_STATE_HOME", dir.path())
            .env_remove("STATE_DIRECTORY")
            .env("RUST_LOG", "ptyhub=debug")
            .ready_timeout(TIMEOUT);
        let process = adjust(launch).spawn()?;
        Ok(Daemon {
            addr: process.addr(),
            runner: Runner::Binary(process),
            dir,
            log,
        })
    }

    /// The daemon in this process, authentication off: for tests of the REST API and the
    /// protocol, which do not look at the daemon's process, its signals, stdout or exit.
    pub fn in_process() -> Daemon {
        Self::in_process_with(&config(""))
    }

    /// `in_process` with this config.
    pub fn in_process_with(config_toml: &str) -> Daemon {
        Self::in_process_auth(config_toml, None)
    }

    /// `in_process` with this config and token (`None`: authentication off, as `--no-auth`).
    pub fn in_process_auth(config_toml: &str, token: Option<&str>) -> Daemon {
        let (dir, cfg, log) = Self::prepare(config_toml);
        let daemon = in_process::InProcess::start(&cfg, token.map(str::to_owned), &log, TIMEOUT)
            .unwrap_or_else(|e| panic!("in-process daemon did not start: {e:#}"));
        Daemon {
            addr: daemon.addr(),
            runner: Runner::InProcess(daemon),
            dir,
            log,
        }
    }

    /// A temp dir holding the config; the log's path in it.
    fn prepare(config_toml: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("ptyhub.toml");
        // Recordings go to the test's own directory unless the test says where.
        let config_toml = if config_toml.contains("[recording]") {
            config_toml.to_owned()
        } else {
            let recordings = dir.path().join("recordings");
            format!("{config_toml}\n[recording]\ndir = {recordings:?}\n")
        };
        // So is the audit trail (an in-process daemon shares the test's environment).
        let config_toml = if config_toml.contains("[audit]") {
            config_toml
        } else {
            let audit = dir.path().join("audit");
            format!("{config_toml}\n[audit]\ndir = {audit:?}\n")
        };
        std::fs::write(&cfg, config_toml).expect("write config");
        let log = dir.path().join("daemon.log");
        (dir, cfg, log)
    }

    /// The binary's process; panics for an in-process daemon (it has none of its own).
    fn process(&self) -> &launcher::Process {
        match &self.runner {
            Runner::Binary(p) => p,
            Runner::InProcess(_) => {
                panic!("an in-process daemon has no process of its own: use Daemon::start")
            }
        }
    }

    fn process_mut(&mut self) -> &mut launcher::Process {
        match &mut self.runner {
            Runner::Binary(p) => p,
            Runner::InProcess(_) => {
                panic!("an in-process daemon has no process of its own: use Daemon::start")
            }
        }
    }

    /// Whether it runs in this process.
    pub fn is_in_process(&self) -> bool {
        matches!(self.runner, Runner::InProcess(_))
    }

    /// Lines the binary printed on stdout after the first one.
    pub fn printed(&self) -> Vec<String> {
        self.process().printed()
    }

    pub fn http(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn ws(&self, id: Uuid, query: &str) -> String {
        format!("ws://{}/ws/{}{}", self.addr, id, query)
    }

    /// The raw dialect's URL for a session (`id` a uuid or a number).
    pub fn ws_raw(&self, id: impl std::fmt::Display, query: &str) -> String {
        format!("ws://{}/ws/{}/raw{}", self.addr, id, query)
    }

    /// `GET /metrics`: the whole exposition text.
    pub async fn metrics_text(&self) -> String {
        self.metrics_text_as(None).await
    }

    /// `GET /metrics` with `token` (a daemon that wants one: `/metrics` is an admin's).
    pub async fn metrics_text_as(&self, token: Option<&str>) -> String {
        let mut req = http().get(self.http("/metrics"));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        req.send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// The unlabelled sample `name` of `/metrics`; panics if it is missing.
    pub async fn metric(&self, name: &str) -> u64 {
        self.metric_as(None, name).await
    }

    /// [`Daemon::metric`], asked with `token`.
    pub async fn metric_as(&self, token: Option<&str>, name: &str) -> u64 {
        let text = self.metrics_text_as(token).await;
        text.lines()
            .find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    }

    /// `POST /api/sessions` of `body` with `token`, expecting 201: the new session's uuid.
    pub async fn create_session(&self, token: &str, body: Value) -> String {
        let resp = http()
            .post(self.http("/api/sessions"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("POST /api/sessions");
        assert_eq!(resp.status(), 201);
        let v: Value = resp.json().await.expect("json");
        v["id"].as_str().expect("id").to_owned()
    }

    /// `GET /api/sessions`: the session list, as JSON.
    pub async fn sessions(&self) -> Vec<Value> {
        reqwest::get(self.http("/api/sessions"))
            .await
            .expect("GET /api/sessions")
            .json()
            .await
            .expect("the session list")
    }

    /// The binary's pid.
    pub fn pid(&self) -> u32 {
        self.process().pid().expect("running")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM to the binary and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        match self.process_mut().stop(TIMEOUT) {
            launcher::Stopped::Exited(status) => status,
            launcher::Stopped::Killed => panic!("daemon did not exit after SIGTERM"),
            launcher::Stopped::NotRunning => panic!("daemon not running"),
        }
    }

    /// Whether the binary has exited (it is reaped then).
    pub fn has_exited(&mut self) -> bool {
        self.process_mut().try_wait().is_some()
    }

    /// SIGKILLs the binary and reaps it.
    pub fn kill(&mut self) -> std::process::ExitStatus {
        self.process_mut().kill().expect("SIGKILL")
    }

    /// Resident memory of the daemon, KiB.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// CPU seconds (user + system) used by the daemon so far.
    pub fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        ticks / 100.0
    }
}

/// A child process that is killed if the test fails before it stops it.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Pids of processes whose environment carries `PTYHUB_SESSION` (any session).
pub fn session_processes() -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env
                .split(|&b| b == 0)
                .any(|v| v.starts_with(b"PTYHUB_SESSION="))
            {
                found.push(pid);
            }
        }
    }
    found
}

/// Pids of processes of one session.
pub fn processes_of(id: Uuid) -> Vec<i32> {
    let marker = format!("PTYHUB_SESSION={id}");
    session_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|v| v == marker.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Polls `cond` until it holds or the timeout passes.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > TIMEOUT {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls an async condition until it holds or the timeout passes.
pub async fn eventually_async<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        if start.elapsed() > TIMEOUT {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A scripted viewer.
pub struct Client {
    ws: Ws,
    /// The terminal as this client would draw it.
    pub term: vt100::Parser,
    /// Every raw output byte received (snapshots excluded).
    pub output: Vec<u8>,
    /// Every JSON message received, in order.
    pub messages: Vec<Value>,
    /// Everything in arrival order: ("snapshot", ansi) / ("output", bytes) / ("json", text).
    pub events: Vec<(&'static str, Vec<u8>)>,
    /// Snapshot chunks being collected.
    chunks: Vec<Vec<u8>>,
    /// Completed snapshots (decompressed ANSI).
    pub snapshots: Vec<Vec<u8>>,
    /// Every binary frame's length, to check the frame rules.
    pub frame_lens: Vec<usize>,
    pub closed: Option<(u16, String)>,
    /// flow=ack: acknowledge output as it is drawn (while waiting in `until`).
    pub auto_ack: bool,
    acked: usize,
    /// A raw-dialect client: every binary frame is terminal bytes; those before `ready` are
    /// the replay.
    pub raw: bool,
    /// Raw dialect: the replay bytes received before `ready`.
    pub replay: Vec<u8>,
}

impl Client {
    pub async fn connect(url: &str) -> Client {
        Self::try_connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect {url}: {e}"))
    }

    pub async fn try_connect(url: &str) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
        let (ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .map_err(|_| tokio_tungstenite::tungstenite::Error::ConnectionClosed)??;
        Ok(Self::from_ws(ws))
    }

    /// A `wss://` client trusting what `tls` trusts (e.g. a test CA).
    pub async fn connect_tls(url: &str, tls: std::sync::Arc<rustls::ClientConfig>) -> Client {
        let connect = tokio_tungstenite::connect_async_tls_with_config(
            url,
            None,
            false,
            Some(tokio_tungstenite::Connector::Rustls(tls)),
        );
        match tokio::time::timeout(TIMEOUT, connect).await {
            Ok(Ok((ws, _))) => Self::from_ws(ws),
            Ok(Err(e)) => panic!("connect {url}: {e}"),
            Err(_) => panic!("connect {url}: timed out"),
        }
    }

    /// A client over an already open WebSocket.
    pub fn from_ws(ws: Ws) -> Client {
        Client {
            ws,
            term: vt100::Parser::new(
                std::num::NonZeroU16::new(24).unwrap(),
                std::num::NonZeroU16::new(80).unwrap(),
                1000,
            ),
            output: Vec::new(),
            messages: Vec::new(),
            events: Vec::new(),
            chunks: Vec::new(),
            snapshots: Vec::new(),
            frame_lens: Vec::new(),
            closed: None,
            auto_ack: false,
            acked: 0,
            raw: false,
            replay: Vec::new(),
        }
    }

    /// A raw-dialect client (`/ws/{id}/raw`).
    pub async fn connect_raw(url: &str) -> Client {
        let mut c = Self::connect(url).await;
        c.raw = true;
        c
    }

    /// Sets the local terminal size (the one this client draws into) and tells the server.
    pub async fn resize(&mut self, rows: u16, cols: u16) {
        self.set_term_size(rows, cols);
        let msg = vec![
            0,
            (rows >> 8) as u8,
            rows as u8,
            (cols >> 8) as u8,
            cols as u8,
        ];
        self.send_binary(msg).await;
    }

    pub fn set_term_size(&mut self, rows: u16, cols: u16) {
        self.term.screen_mut().set_size(
            std::num::NonZeroU16::new(rows).unwrap(),
            std::num::NonZeroU16::new(cols).unwrap(),
        );
    }

    pub async fn send_binary(&mut self, data: impl Into<Vec<u8>>) {
        self.ws
            .send(Message::Binary(data.into()))
            .await
            .expect("send binary");
    }

    /// Keystrokes, each first byte that could be read as a command sent on its own.
    pub async fn type_str(&mut self, s: &str) {
        self.send_binary(s.as_bytes().to_vec()).await;
    }

    pub async fn send_json(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string()))
            .await
            .expect("send json");
    }

    pub async fn send_text(&mut self, s: &str) {
        self.ws
            .send(Message::Text(s.to_owned()))
            .await
            .expect("send text");
    }

    pub async fn close(mut self) {
        let _ = self
            .ws
            .close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            }))
            .await;
    }

    /// Reads one message (or times out); returns false when the connection is closed.
    async fn read_one(&mut self, wait: Duration) -> bool {
        let msg = match tokio::time::timeout(wait, self.ws.next()).await {
            Err(_) => return true,
            Ok(None) => {
                self.closed.get_or_insert((1006, String::new()));
                return false;
            }
            Ok(Some(Err(_))) => {
                self.closed.get_or_insert((1006, String::new()));
                return false;
            }
            Ok(Some(Ok(msg))) => msg,
        };
        match msg {
            Message::Binary(b) if self.raw => {
                self.frame_lens.push(b.len());
                self.term.process(&b);
                if self.count("ready") == 0 {
                    self.replay.extend_from_slice(&b);
                    self.events.push(("replay", b.to_vec()));
                } else {
                    self.output.extend_from_slice(&b);
                    self.events.push(("output", b.to_vec()));
                }
            }
            Message::Binary(b) => {
                self.frame_lens.push(b.len());
                if b.len() >= 3 && b[0] == 0x02 {
                    let (index, total) = (b[1] as usize, b[2] as usize);
                    assert_eq!(index, self.chunks.len(), "snapshot chunks out of order");
                    self.chunks.push(b[3..].to_vec());
                    if self.chunks.len() == total {
                        let gz: Vec<u8> = self.chunks.drain(..).flatten().collect();
                        let mut ansi = Vec::new();
                        flate2::read::GzDecoder::new(&gz[..])
                            .read_to_end(&mut ansi)
                            .expect("gunzip snapshot");
                        self.term.process(&ansi);
                        self.events.push(("snapshot", ansi.clone()));
                        self.snapshots.push(ansi);
                    }
                } else {
                    assert!(self.chunks.is_empty(), "output inside a snapshot");
                    self.term.process(&b);
                    self.output.extend_from_slice(&b);
                    self.events.push(("output", b.to_vec()));
                }
            }
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).expect("server sent invalid JSON");
                self.events.push(("json", t.into_bytes()));
                self.messages.push(v);
            }
            Message::Close(frame) => {
                self.closed = Some(
                    frame
                        .map(|f| (u16::from(f.code), f.reason.to_string()))
                        .unwrap_or((1005, String::new())),
                );
                return false;
            }
            _ => {}
        }
        true
    }

    /// Reads until `cond` holds; panics after the timeout with what was seen.
    pub async fn until(&mut self, what: &str, cond: impl FnMut(&Client) -> bool) {
        self.until_within(what, TIMEOUT, cond).await;
    }

    /// [`Client::until`] with its own time limit, for work whose length depends on the
    /// machine's load (thousands of timed writes).
    pub async fn until_within(
        &mut self,
        what: &str,
        limit: Duration,
        mut cond: impl FnMut(&Client) -> bool,
    ) {
        let start = Instant::now();
        while !cond(self) {
            if start.elapsed() > limit {
                panic!(
                    "timed out waiting for {what}; screen:\n{}\nmessages: {:?}",
                    self.term.screen().contents(),
                    self.messages
                );
            }
            let open = self.read_one(Duration::from_millis(200)).await;
            if self.auto_ack && self.output.len() > self.acked {
                let n = self.output.len() - self.acked;
                self.acked = self.output.len();
                let _ = self
                    .ws
                    .send(Message::Text(
                        serde_json::json!({"type": "ack", "bytes": n}).to_string(),
                    ))
                    .await;
            }
            if !open && !cond(self) {
                panic!(
                    "connection closed ({:?}) while waiting for {what}; screen:\n{}\nmessages: {:?}",
                    self.closed,
                    self.term.screen().contents(),
                    self.messages
                );
            }
        }
    }

    /// Reads until the connection closes; returns the close code and reason.
    pub async fn until_closed(&mut self) -> (u16, String) {
        let start = Instant::now();
        while self.read_one(Duration::from_millis(200)).await {
            assert!(start.elapsed() < TIMEOUT, "connection did not close");
        }
        self.closed.clone().unwrap_or((1006, String::new()))
    }

    /// Reads whatever arrives for `d` (for checks that something does NOT arrive).
    pub async fn drain_for(&mut self, d: Duration) {
        let start = Instant::now();
        while start.elapsed() < d {
            if !self.read_one(Duration::from_millis(50)).await {
                return;
            }
        }
    }

    pub async fn wait_screen(&mut self, what: &str) {
        let needle = what.to_owned();
        self.until(&format!("{what:?} on screen"), move |c| {
            c.screen_text().contains(&needle)
        })
        .await;
    }

    pub async fn wait_json(&mut self, ty: &str) -> Value {
        let n = self.messages.len();
        let t = ty.to_owned();
        // Accept one that arrived already but has not been looked at.
        self.until(&format!("a {ty} message"), move |c| {
            c.messages[n.saturating_sub(0)..]
                .iter()
                .any(|m| m["type"] == t.as_str())
        })
        .await;
        self.messages[n..]
            .iter()
            .find(|m| m["type"] == ty)
            .cloned()
            .expect("found")
    }

    /// The newest message of this type, if any.
    pub fn last(&self, ty: &str) -> Option<&Value> {
        self.messages.iter().rev().find(|m| m["type"] == ty)
    }

    pub fn count(&self, ty: &str) -> usize {
        self.messages.iter().filter(|m| m["type"] == ty).count()
    }

    /// Waits until the latest snapshot this viewer got after joining carries the scrollback:
    /// a viewer behind a flood is sent its screens alone, and the scrollback once it has
    /// caught up (`docs/protocol.md` §6).
    pub async fn with_history(&mut self) {
        self.until("the scrollback after a flood's screens", |c| {
            c.snapshots.len() <= 1
                || c.snapshots
                    .last()
                    .is_some_and(|last| c.scrollback_drawn_by(last) > 0)
        })
        .await;
    }

    /// Lines of scrollback the snapshot `ansi` draws at this client's terminal size.
    pub fn scrollback_drawn_by(&self, ansi: &[u8]) -> usize {
        let (rows, cols) = self.term.screen().size();
        let mut term = vt100::Parser::new(rows, cols, 100_000);
        term.process(ansi);
        let mut screen = term.screen().clone();
        screen.set_scrollback(usize::MAX);
        screen.scrollback()
    }

    pub fn screen_text(&self) -> String {
        self.term.screen().contents()
    }

    /// Runs a shell command and waits for a marker it prints.
    pub async fn run(&mut self, cmd: &str, marker: &str) {
        self.type_str(&format!("{cmd}\r")).await;
        self.wait_screen(marker).await;
    }
}

/// An HTTP client for the daemon on 127.0.0.1, ignoring any proxy the environment names.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// Where two screens' visible rows first differ, for a failure message a person can read (the
/// whole screen's formatted bytes are not): the row, and each side's text and formatted row.
pub fn first_difference(a: &vt100::Screen, b: &vt100::Screen) -> String {
    let cols = a.size().1.get().max(b.size().1.get());
    let (fa, fb): (Vec<String>, Vec<String>) = (
        a.rows_formatted(0, cols).collect(),
        b.rows_formatted(0, cols).collect(),
    );
    let (ta, tb): (Vec<String>, Vec<String>) =
        (a.rows(0, cols).collect(), b.rows(0, cols).collect());
    let shown = |rows: &[String], i: usize| {
        rows.get(i)
            .map_or_else(|| "(none)".to_owned(), |r| r.escape_debug().to_string())
    };
    (0..fa.len().max(fb.len()))
        .find(|&i| fa.get(i) != fb.get(i))
        .map_or_else(
            || {
                "no row differs alone (the rows' joins do: a wrap or the pen across rows)"
                    .to_owned()
            },
            |i| {
                format!(
                    "row {i} of {}: {} against {}; formatted {} against {}",
                    fa.len(),
                    shown(&ta, i),
                    shown(&tb, i),
                    shown(&fa, i),
                    shown(&fb, i),
                )
            },
        )
}

/// Asserts two clients draw the same screen: text, attributes, cursor, active screen, modes.
pub fn assert_same_screen(a: &Client, b: &Client, what: &str) {
    let (sa, sb) = (a.term.screen(), b.term.screen());
    assert!(
        sa.contents() == sb.contents(),
        "{what}: text differs at {}",
        first_difference(sa, sb)
    );
    assert!(
        sa.contents_formatted() == sb.contents_formatted(),
        "{what}: attributes differ at {}",
        first_difference(sa, sb)
    );
    assert_eq!(
        sa.cursor_position(),
        sb.cursor_position(),
        "{what}: cursor differs"
    );
    assert_eq!(
        sa.hide_cursor(),
        sb.hide_cursor(),
        "{what}: cursor visibility differs"
    );
    assert_eq!(
        sa.alternate_screen(),
        sb.alternate_screen(),
        "{what}: active screen differs"
    );
    assert_eq!(
        sa.application_cursor(),
        sb.application_cursor(),
        "{what}: app cursor differs"
    );
    assert_eq!(
        sa.application_keypad(),
        sb.application_keypad(),
        "{what}: app keypad differs"
    );
    assert_eq!(
        sa.bracketed_paste(),
        sb.bracketed_paste(),
        "{what}: bracketed paste differs"
    );
    assert_eq!(
        sa.mouse_protocol_mode(),
        sb.mouse_protocol_mode(),
        "{what}: mouse mode differs"
    );
    assert_eq!(
        sa.mouse_protocol_encoding(),
        sb.mouse_protocol_encoding(),
        "{what}: mouse encoding differs"
    );
}

/// A file in the test's temp dir holding `contents`.
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, contents).expect("write");
    p
}

/// An upgraded raw TCP connection to a session, for frames no WebSocket library would send, a
/// frame stopped half way, or a socket dropped without a close frame.
pub async fn raw_ws(d: &Daemon, id: Uuid) -> tokio::net::TcpStream {
    raw_ws_at(d, &format!("/ws/{id}")).await
}

/// [`raw_ws`] to any WebSocket `path` (the multiplexed `/ws`, the board).
pub async fn raw_ws_at(d: &Daemon, path: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(d.addr)
        .await
        .expect("connect");
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        d.addr
    );
    tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes())
        .await
        .expect("write");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(TIMEOUT, tokio::io::AsyncReadExt::read(&mut s, &mut b))
            .await
            .expect("handshake in time")
            .expect("read");
        assert!(n == 1, "closed during the handshake");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// A share link's token for session `id` (uuid or number) with this role, made with the
/// daemon's own `token`.
pub async fn share_token(d: &Daemon, token: &str, id: &str, role: &str) -> String {
    let resp = reqwest::Client::new()
        .post(d.http(&format!("/api/sessions/{id}/share")))
        .bearer_auth(token)
        .json(&serde_json::json!({ "role": role }))
        .send()
        .await
        .expect("share");
    assert_eq!(resp.status(), 201, "share link for {id}");
    let share: Value = resp.json().await.expect("json");
    share["token"].as_str().expect("token").to_owned()
}

/// What the daemon answers a connection it refuses before its request (a connection cap): the
/// whole answer, checked to be a 429.
pub async fn refused_connection(addr: SocketAddr) -> String {
    use tokio::io::AsyncReadExt;
    let mut refused = TcpStream::connect(addr).await.expect("connect");
    let mut answer = String::new();
    tokio::time::timeout(TIMEOUT, refused.read_to_string(&mut answer))
        .await
        .expect("an answer")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    answer
}
