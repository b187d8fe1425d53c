//! Load generator for ptyhub: drives a real daemon over 127.0.0.1 and measures keystroke echo with
//! idle viewers, floods to many viewers (against a bare PTY in the same run) and the stalled-viewer cost.
//!
//! Run: `cargo bench --bench load -- [--quick] [--scenarios echo,flood,stall] [--viewers 0,10,100]
//! [--flood-viewers 1,10] [--flood-mb 24] [--samples 500]`. Prints a table, then one JSON line (the
//! last line of stdout). Set `PTYHUB_BIN` to measure another daemon binary.

use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use uuid::Uuid;

/// Connecting, joining, and waiting for a session to start.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// One echo sample, writer and all viewers.
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);
/// Echo round trips made before measuring (first allocations, caches, TCP windows).
const ECHO_WARMUP: usize = 20;
/// How long the daemon gets to exit after SIGTERM (its kill grace is 1 s here).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Raw mode without echo: cat gets each byte as it arrives and writes it straight back, so the
/// round trip is the daemon's (and the PTY's), not a line editor's. Run by the daemon's `echo`
/// assistant and, for the baseline, on a bare PTY.
const ECHO_SCRIPT: &str = "stty raw -echo && printf ECHO-READY && exec cat";

/// The daemon config: a quiet bash with a fixed prompt, and the raw-mode `cat` for echo timing.
fn config() -> String {
    format!(
        r#"
[session]
kill_grace = "1s"

# Every viewer of the run comes from 127.0.0.1, into one session.
[limits]
max_viewers_per_session = 10000
max_connections_per_ip = 10000

[assistants.shell]
name = "Shell"
command = ["bash", "--norc", "--noprofile", "-i"]
env = {{ PS1 = "$ ", HISTFILE = "/dev/null" }}

[assistants.echo]
name = "Echo"
command = ["bash", "-c", "{ECHO_SCRIPT}"]
"#
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Echo,
    Flood,
    Stall,
}

/// ptyhub load generator (only talks to 127.0.0.1; every loop is bounded in count and time).
#[derive(Debug, Parser)]
struct Args {
    /// Scenarios to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "echo,flood,stall")]
    scenarios: Vec<Scenario>,
    /// echo: idle viewers per run [default: 0,10,100; --quick: 0,5]
    #[arg(long, value_delimiter = ',')]
    viewers: Option<Vec<usize>>,
    /// echo: round trips measured per run [default: 500; --quick: 50]
    #[arg(long)]
    samples: Option<usize>,
    /// echo: pause between two samples, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pause_ms: u64,
    /// flood: viewers per run (the first one types the command) [default: 1,10; --quick: 1,3]
    #[arg(long, value_delimiter = ',')]
    flood_viewers: Option<Vec<usize>>,
    /// flood and stall: MiB of base64 text [default: 24; --quick: 2]
    #[arg(long)]
    flood_mb: Option<usize>,
    /// stall: healthy viewers next to the stalled one [default: 10; --quick: 2]
    #[arg(long)]
    stall_viewers: Option<usize>,
    /// Small numbers, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The run's parameters, defaults resolved.
struct Settings {
    scenarios: Vec<Scenario>,
    viewers: Vec<usize>,
    samples: usize,
    pause: Duration,
    flood_viewers: Vec<usize>,
    flood_mb: usize,
    stall_viewers: usize,
}

impl Settings {
    fn from_args(a: Args) -> Result<Settings> {
        let q = a.quick;
        let s = Settings {
            scenarios: a.scenarios,
            viewers: a
                .viewers
                .unwrap_or(if q { vec![0, 5] } else { vec![0, 10, 100] }),
            samples: a.samples.unwrap_or(if q { 50 } else { 500 }),
            pause: Duration::from_millis(a.pause_ms),
            flood_viewers: a
                .flood_viewers
                .unwrap_or(if q { vec![1, 3] } else { vec![1, 10] }),
            flood_mb: a.flood_mb.unwrap_or(if q { 2 } else { 24 }),
            stall_viewers: a.stall_viewers.unwrap_or(if q { 2 } else { 10 }),
        };
        if s.samples == 0 || s.flood_mb == 0 || s.stall_viewers == 0 {
            bail!("--samples, --flood-mb and --stall-viewers must be at least 1");
        }
        if s.flood_viewers.contains(&0) {
            bail!("--flood-viewers: each run needs at least the viewer that types");
        }
        Ok(s)
    }
}

/// What every scenario needs.
struct Ctx {
    bin: PathBuf,
    dir: PathBuf,
    /// The flood file (base64 text), made once when a flood scenario runs.
    flood_file: Option<PathBuf>,
    /// Viewer connections run here (multi-threaded); the scenario drivers and the echo writer run
    /// on the current-thread runtime of the main thread, so nothing else delays their wake-ups.
    pool: Handle,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the selected scenarios; `Ok(false)` when some run failed (the others are still reported).
fn run(args: Args) -> Result<bool> {
    let settings = Settings::from_args(args)?;
    let bin = daemon_binary()?;
    let tmp = tempfile::Builder::new()
        .prefix("ptyhub-load-")
        .tempdir()
        .context("creating a temp dir")?;
    std::fs::write(tmp.path().join("ptyhub.toml"), config()).context("writing the config")?;
    let pool = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("load-viewers")
        .enable_all()
        .build()
        .context("starting the viewer runtime")?;
    let driver = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the driver runtime")?;
    let mut ctx = Ctx {
        bin,
        dir: tmp.path().to_owned(),
        flood_file: None,
        pool: pool.handle().clone(),
    };
    eprintln!("load: daemon {}", ctx.bin.display());
    let report = driver.block_on(scenarios(&settings, &mut ctx))?;
    pool.shutdown_timeout(Duration::from_secs(2));
    print_report(&settings, &report);
    Ok(report.errors.is_empty())
}

/// Everything measured, for the table and the JSON line.
#[derive(Default)]
struct Report {
    echo: Vec<EchoRow>,
    flood: Vec<FloodRow>,
    stall: Vec<StallRow>,
    /// Things to look at: daemon warnings, resyncs, processes left behind.
    notes: Vec<String>,
    errors: Vec<String>,
}

async fn scenarios(s: &Settings, ctx: &mut Ctx) -> Result<Report> {
    let mut report = Report::default();
    if s.scenarios.contains(&Scenario::Flood) || s.scenarios.contains(&Scenario::Stall) {
        eprintln!("load: writing {} MiB of base64", s.flood_mb);
        ctx.flood_file = Some(make_flood_file(&ctx.dir, s.flood_mb)?);
    }
    for &scenario in &s.scenarios {
        match scenario {
            Scenario::Echo => {
                for &k in &s.viewers {
                    eprintln!("load: echo, {k} idle viewers, {} samples", s.samples);
                    match echo_run(ctx, k, s.samples, s.pause, &mut report.notes).await {
                        Ok(row) => report.echo.push(row),
                        Err(e) => fail(&mut report, format!("echo with {k} viewers: {e:#}")),
                    }
                }
            }
            Scenario::Flood => {
                for &k in &s.flood_viewers {
                    eprintln!("load: flood, {k} viewers, {} MiB", s.flood_mb);
                    match flood_run(ctx, k, false, s.flood_mb, &mut report.notes).await {
                        Ok(row) => report.flood.push(row),
                        Err(e) => fail(&mut report, format!("flood to {k} viewers: {e:#}")),
                    }
                }
            }
            Scenario::Stall => {
                let k = s.stall_viewers;
                eprintln!("load: stall, {k} healthy viewers, {} MiB", s.flood_mb);
                let runs = async {
                    let without = flood_run(ctx, k, false, s.flood_mb, &mut report.notes).await?;
                    let with = flood_run(ctx, k, true, s.flood_mb, &mut report.notes).await?;
                    anyhow::Ok((without, with))
                };
                match runs.await {
                    Ok((without, with)) => report.stall.push(StallRow {
                        viewers: k,
                        mb: s.flood_mb,
                        baseline_seconds: without.seconds,
                        stalled_seconds: with.seconds,
                        ratio: with.seconds / without.seconds,
                        snapshots: with.snapshots,
                        daemon_resyncs: with.daemon_resyncs,
                    }),
                    Err(e) => fail(&mut report, format!("stall with {k} viewers: {e:#}")),
                }
            }
        }
    }
    Ok(report)
}

fn fail(report: &mut Report, msg: String) {
    eprintln!("load: FAILED {msg}");
    report.errors.push(msg);
}

// ---------------------------------------------------------------------------------------------
// The daemon

/// `PTYHUB_BIN`, else the binary cargo built for this bench (the release profile), else a build.
fn daemon_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PTYHUB_BIN") {
        return Ok(PathBuf::from(p));
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_ptyhub"));
    if built.exists() {
        return Ok(built);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "ptyhub"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .context("running cargo build")?;
    if !status.success() || !built.exists() {
        bail!(
            "cargo build --release --bin ptyhub failed ({status}); set PTYHUB_BIN to a daemon binary"
        );
    }
    Ok(built)
}

/// A daemon of our own on 127.0.0.1:0. Stopped (SIGTERM, then SIGKILL) when dropped.
struct Daemon {
    child: Option<Child>,
    addr: SocketAddr,
    log: PathBuf,
    /// Sessions we created, to find processes the daemon leaves behind.
    sessions: Vec<Uuid>,
}

impl Daemon {
    fn start(ctx: &Ctx, name: &str) -> Result<Daemon> {
        let log = ctx.dir.join(format!("daemon-{name}.log"));
        let stderr = File::create(&log).context("creating the daemon log")?;
        let mut child = Command::new(&ctx.bin)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--config")
            .arg(ctx.dir.join("ptyhub.toml"))
            // Loopback only; the generator measures sessions, not authentication.
            .arg("--no-auth")
            .current_dir(&ctx.dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", ctx.bin.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(line) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining so the daemon never blocks on a full pipe.
            for _ in lines {}
        });
        let addr = match rx.recv_timeout(STEP_TIMEOUT) {
            Ok(Ok(line)) => line
                .trim()
                .strip_prefix("ptyhub listening on http://")
                .and_then(|s| s.strip_suffix('/'))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| anyhow!("unexpected first line from the daemon: {line:?}")),
            Ok(Err(e)) => Err(anyhow!("reading the daemon's stdout: {e}")),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(anyhow!(
                "the daemon closed its stdout without printing its address"
            )),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(anyhow!(
                "the daemon printed no address within {STEP_TIMEOUT:?}"
            )),
        };
        match addr {
            Ok(addr) => Ok(Daemon {
                child: Some(child),
                addr,
                log,
                sessions: Vec::new(),
            }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(anyhow!("{e:#}; daemon log:\n{}", log_tail(&log)))
            }
        }
    }

    fn ws(&self, id: Uuid, query: &str) -> String {
        format!("ws://{}/ws/{id}{query}", self.addr)
    }

    fn new_session(&mut self) -> Uuid {
        let id = Uuid::new_v4();
        self.sessions.push(id);
        id
    }

    fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// CPU seconds (user + system, all threads) the daemon has used so far.
    fn cpu_seconds(&self) -> Result<f64> {
        let pid = self.pid().context("daemon not running")?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .context("reading the daemon's /proc stat")?;
        // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| -> Result<f64> {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .context("unexpected /proc stat format")
        };
        // /proc counts in USER_HZ, which is 100 on Linux whatever the kernel's HZ (nix's sysconf
        // needs a feature this crate does not enable).
        Ok((field(11)? + field(12)?) / 100.0)
    }

    /// Resyncs the daemon logged, and its WARN/ERROR lines.
    fn log_findings(&self) -> (usize, Vec<String>) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let resyncs = text.lines().filter(|l| l.contains("resyncing")).count();
        let warnings = text
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_owned)
            .collect();
        (resyncs, warnings)
    }

    /// SIGTERM, wait, SIGKILL if needed, then make sure no session process outlived it.
    /// Returns what went wrong (nothing, normally).
    fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(mut child) = self.child.take() else {
            return problems;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        match wait_child(&mut child, STOP_TIMEOUT) {
            Some(status) if status.success() => {}
            Some(status) => problems.push(format!("daemon exited with {status} after SIGTERM")),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                problems.push(format!(
                    "daemon still running {STOP_TIMEOUT:?} after SIGTERM: killed"
                ));
            }
        }
        let left = session_processes(&self.sessions);
        if !left.is_empty() {
            for &pid in &left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            problems.push(format!(
                "session processes outlived the daemon (killed them): pids {left:?}"
            ));
        }
        problems
    }

    /// Stops the daemon and files its findings under `what`.
    fn finish(mut self, what: &str, notes: &mut Vec<String>) -> usize {
        let (resyncs, warnings) = self.log_findings();
        for w in warnings.iter().take(5) {
            notes.push(format!("{what}: daemon logged: {w}"));
        }
        if warnings.len() > 5 {
            notes.push(format!(
                "{what}: ... and {} more WARN/ERROR lines",
                warnings.len() - 5
            ));
        }
        for p in self.stop() {
            notes.push(format!("{what}: {p}"));
        }
        resyncs
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        for p in self.stop() {
            eprintln!("load: {p}");
        }
    }
}

fn wait_child(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Pids of processes started for one of `sessions` (the daemon sets `PTYHUB_SESSION`).
fn session_processes(sessions: &[Uuid]) -> Vec<i32> {
    let markers: Vec<String> = sessions
        .iter()
        .map(|id| format!("PTYHUB_SESSION={id}"))
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    env.split(|&b| b == 0)
                        .any(|v| markers.iter().any(|m| v == m.as_bytes()))
                })
                .unwrap_or(false)
        })
        .collect()
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// Clients

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn is_snapshot_chunk(frame: &[u8]) -> bool {
    frame.len() >= 3 && frame[0] == 0x02
}

async fn connect(url: &str) -> Result<Ws> {
    // No Nagle: a 1-byte keystroke must leave at once, as it does from a browser.
    let connecting = tokio_tungstenite::connect_async_with_config(url, None, true);
    let (ws, _) = tokio::time::timeout(STEP_TIMEOUT, connecting)
        .await
        .map_err(|_| anyhow!("connecting to {url}: no answer within {STEP_TIMEOUT:?}"))?
        .with_context(|| format!("connecting to {url}"))?;
    Ok(ws)
}

/// Runs `fut` on the viewer runtime, so the sockets it opens are driven there.
async fn on_pool<T: Send + 'static>(
    pool: &Handle,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    pool.spawn(fut)
        .await
        .map_err(|e| anyhow!("viewer task failed: {e}"))?
}

/// Aborts the tasks when dropped, so an early error leaves nothing reading.
#[derive(Default)]
struct Tasks(Vec<AbortHandle>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Reassembles snapshot chunks `[0x02, index, total, gzip…]`.
#[derive(Default)]
struct Snapshots {
    gz: Vec<u8>,
    next: usize,
}

impl Snapshots {
    /// Adds a chunk; returns the snapshot's ANSI when it was the last one.
    fn push(&mut self, frame: &[u8]) -> Result<Option<Vec<u8>>> {
        let (index, total) = (frame[1] as usize, frame[2] as usize);
        if index != self.next || index >= total {
            bail!(
                "snapshot chunk {index}/{total} arrived, expected chunk {}",
                self.next
            );
        }
        self.gz.extend_from_slice(&frame[3..]);
        self.next += 1;
        if self.next < total {
            return Ok(None);
        }
        self.next = 0;
        let mut ansi = Vec::new();
        flate2::read::GzDecoder::new(&self.gz[..])
            .read_to_end(&mut ansi)
            .context("gunzip of a snapshot")?;
        self.gz.clear();
        Ok(Some(ansi))
    }
}

/// A client while it sets up: joins, waits for text, types. Measuring loops read `ws` directly.
struct Conn {
    ws: Ws,
    url: String,
    ready: bool,
    /// Output and snapshot text seen so far (set-up only, so small).
    seen: Vec<u8>,
    snapshots: Snapshots,
    /// Connect to `ready`.
    join_time: Duration,
    /// `viewers` of the newest `status`.
    viewers: u64,
}

impl Conn {
    /// Connects and reads until `ready`.
    async fn open(url: String) -> Result<Conn> {
        let start = Instant::now();
        let ws = connect(&url).await?;
        let mut conn = Conn {
            ws,
            url,
            ready: false,
            seen: Vec::new(),
            snapshots: Snapshots::default(),
            join_time: Duration::ZERO,
            viewers: 0,
        };
        let deadline = start + STEP_TIMEOUT;
        while !conn.ready {
            conn.read_one(deadline, "ready").await?;
        }
        conn.join_time = start.elapsed();
        Ok(conn)
    }

    /// Reads until `needle` has been drawn (in output or a snapshot).
    async fn wait_text(&mut self, needle: &str) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while !contains(&self.seen, needle.as_bytes()) {
            self.read_one(deadline, needle).await?;
        }
        Ok(())
    }

    /// Reads until the newest `status` counts `n` viewers.
    async fn wait_viewers(&mut self, n: u64) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while self.viewers != n {
            self.read_one(deadline, &format!("status with {n} viewers"))
                .await?;
        }
        Ok(())
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let sending = self.ws.send(Message::Binary(bytes.to_vec()));
        tokio::time::timeout(STEP_TIMEOUT, sending)
            .await
            .map_err(|_| anyhow!("{}: send blocked for {STEP_TIMEOUT:?}", self.url))?
            .with_context(|| format!("sending to {}", self.url))
    }

    async fn read_one(&mut self, deadline: Instant, waiting_for: &str) -> Result<()> {
        let msg = match timeout_at(deadline.into(), self.ws.next()).await {
            Err(_) => bail!(
                "{}: no {waiting_for:?} within {STEP_TIMEOUT:?}; last output {}",
                self.url,
                tail(&self.seen)
            ),
            Ok(None) => bail!("{}: connection closed", self.url),
            Ok(Some(Err(e))) => bail!("{}: connection failed: {e}", self.url),
            Ok(Some(Ok(msg))) => msg,
        };
        match msg {
            Message::Binary(b) if is_snapshot_chunk(&b) => {
                if let Some(ansi) = self.snapshots.push(&b)? {
                    self.seen.extend_from_slice(&ansi);
                }
            }
            Message::Binary(b) => self.seen.extend_from_slice(&b),
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t)
                    .with_context(|| format!("{}: server sent bad JSON {t:?}", self.url))?;
                match v["type"].as_str() {
                    Some("ready") => self.ready = true,
                    Some("status") => self.viewers = v["viewers"].as_u64().unwrap_or(0),
                    Some("error") => bail!("{}: server error {t}", self.url),
                    _ => {}
                }
            }
            Message::Close(frame) => bail!("{}: server closed the connection: {frame:?}", self.url),
            _ => {}
        }
        Ok(())
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn tail(b: &[u8]) -> String {
    format!(
        "{:?}",
        String::from_utf8_lossy(&b[b.len().saturating_sub(200)..])
    )
}

// ---------------------------------------------------------------------------------------------
// echo

struct EchoRow {
    viewers: usize,
    samples: usize,
    /// Writer's round trips, sorted.
    rtt: Vec<Duration>,
    /// The same round trip on a bare PTY, sorted.
    bare: Vec<Duration>,
    /// Send to the last viewer having the byte, sorted (empty without viewers).
    all: Vec<Duration>,
    /// Viewers' connect-to-ready times, sorted.
    joins: Vec<Duration>,
    /// Snapshots the idle viewers got after joining (resyncs; should be 0).
    snapshots: usize,
    daemon_resyncs: usize,
}

async fn echo_run(
    ctx: &Ctx,
    viewers: usize,
    samples: usize,
    pause: Duration,
    notes: &mut Vec<String>,
) -> Result<EchoRow> {
    // The physical limit first, in the same run and on the same runtime as the writer.
    let bare = bare_echo(samples, pause)
        .await
        .context("the bare-PTY baseline")?;
    let mut daemon = Daemon::start(ctx, &format!("echo-{viewers}"))?;
    let id = daemon.new_session();
    let mut tasks = Tasks::default();

    // The writer is opened here, on the driver's runtime, not on the viewers' pool.
    let mut writer = Conn::open(daemon.ws(id, "?assistant=echo"))
        .await
        .context("creating the echo session")?;
    writer
        .wait_text("ECHO-READY")
        .await
        .context("waiting for the raw-mode cat")?;

    let snapshots = Arc::new(AtomicUsize::new(0));
    let mut rxs = Vec::with_capacity(viewers);
    let mut joins = Vec::with_capacity(viewers);
    // One at a time, so the join times are not a thundering herd.
    for v in 0..viewers {
        let conn = on_pool(&ctx.pool, Conn::open(daemon.ws(id, "")))
            .await
            .with_context(|| format!("joining idle viewer {v}"))?;
        joins.push(conn.join_time);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = ctx.pool.spawn(idle_viewer(conn.ws, tx, snapshots.clone()));
        tasks.0.push(task.abort_handle());
        rxs.push(rx);
    }

    let mut rtt = Vec::with_capacity(samples);
    let mut all = Vec::with_capacity(samples);
    for i in 0..ECHO_WARMUP + samples {
        // A byte that differs from the previous sample's, so a late frame is never taken for it.
        let byte = b'a' + (i % 26) as u8;
        let sent = Instant::now();
        writer.send(&[byte]).await?;
        let deadline = sent + ECHO_TIMEOUT;
        let round_trip = loop {
            match timeout_at(deadline.into(), writer.ws.next()).await {
                Err(_) => bail!(
                    "sample {i}: the writer got no echo of {:?} within {ECHO_TIMEOUT:?}",
                    byte as char
                ),
                Ok(None) | Ok(Some(Err(_))) => bail!("sample {i}: the writer's connection closed"),
                Ok(Some(Ok(Message::Binary(b)))) if !is_snapshot_chunk(&b) && b.contains(&byte) => {
                    break sent.elapsed()
                }
                Ok(Some(Ok(Message::Close(f)))) => bail!("sample {i}: server closed: {f:?}"),
                Ok(Some(Ok(_))) => {}
            }
        };
        let mut last: Option<Instant> = None;
        for (v, rx) in rxs.iter_mut().enumerate() {
            let at = loop {
                match timeout_at(deadline.into(), rx.recv()).await {
                    Err(_) => bail!(
                        "sample {i}: viewer {v} did not get {:?} within {ECHO_TIMEOUT:?}",
                        byte as char
                    ),
                    Ok(None) => bail!("sample {i}: viewer {v}'s connection closed"),
                    Ok(Some((at, b))) if b.contains(&byte) => break at,
                    Ok(Some(_)) => {}
                }
            };
            last = Some(last.map_or(at, |l| l.max(at)));
        }
        if i >= ECHO_WARMUP {
            rtt.push(round_trip);
            if let Some(last) = last {
                all.push(last.saturating_duration_since(sent));
            }
        }
        tokio::time::sleep(pause).await;
    }

    drop(tasks);
    drop(writer);
    let daemon_resyncs = daemon.finish(&format!("echo with {viewers} viewers"), notes);
    rtt.sort();
    all.sort();
    joins.sort();
    Ok(EchoRow {
        viewers,
        samples,
        rtt,
        bare,
        all,
        joins,
        snapshots: snapshots.load(Ordering::Relaxed),
        daemon_resyncs,
    })
}

/// Reads all the time, like a browser tab; reports every output frame with its arrival time.
async fn idle_viewer(
    mut ws: Ws,
    tx: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    snapshots: Arc<AtomicUsize>,
) {
    let mut snaps = Snapshots::default();
    while let Some(Ok(msg)) = ws.next().await {
        let at = Instant::now();
        if let Message::Binary(b) = msg {
            if is_snapshot_chunk(&b) {
                if let Ok(Some(_)) = snaps.push(&b) {
                    snapshots.fetch_add(1, Ordering::Relaxed);
                }
            } else if tx.send((at, b)).is_err() {
                return;
            }
        }
    }
    // Dropping `tx` tells the driver this viewer is gone.
}

// ---------------------------------------------------------------------------------------------
// flood

/// Writes about `mb` MiB of base64 (76-char lines) of random bytes; returns its path.
fn make_flood_file(dir: &Path, mb: usize) -> Result<PathBuf> {
    // base64 makes one 77-byte line (76 chars and '\n') of each 57 raw bytes.
    let raw_len = (mb * 1024 * 1024 / 77) * 57;
    let raw = dir.join("flood.raw");
    let mut random = Vec::with_capacity(raw_len);
    File::open("/dev/urandom")
        .and_then(|f| f.take(raw_len as u64).read_to_end(&mut random))
        .context("reading /dev/urandom")?;
    std::fs::write(&raw, &random).context("writing the random file")?;
    let out = dir.join("flood.b64");
    let status = Command::new("base64")
        .args(["-w", "76"])
        .arg(&raw)
        .stdout(File::create(&out).context("creating the flood file")?)
        .status()
        .context("running base64")?;
    if !status.success() {
        bail!("base64 failed: {status}");
    }
    std::fs::remove_file(&raw).ok();
    Ok(out)
}

/// The shell command of one flood and the end marker it prints last. The command computes the
/// marker (`$((…))`) so that its own echo on the terminal does not contain it.
fn flood_command(file: &Path) -> (String, Vec<u8>) {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    let cmd = format!(
        "cat '{}'; echo FLOOD-END-$((1000+{n}))-MARK",
        file.display()
    );
    (cmd, format!("FLOOD-END-{}-MARK", 1000 + n).into_bytes())
}

/// Finds the end marker in a stream, also when it is split across reads.
struct MarkerScan {
    marker: Vec<u8>,
    /// The last `marker.len() - 1` bytes seen.
    tail: Vec<u8>,
}

impl MarkerScan {
    fn new(marker: Vec<u8>) -> MarkerScan {
        assert!(marker.contains(&b'-') && marker.len() > 1);
        MarkerScan {
            marker,
            tail: Vec::new(),
        }
    }

    /// True when the marker ends in `data`.
    fn feed(&mut self, data: &[u8]) -> bool {
        let keep = self.marker.len() - 1;
        // Quick reject: base64 never holds '-' and the marker does, so any piece of it (or the
        // whole) has one; `contains` on bytes is a memchr, cheap next to a window scan per byte.
        let found = (data.contains(&b'-') || self.tail.contains(&b'-')) && {
            let mut joined = self.tail.clone();
            joined.extend_from_slice(&data[..data.len().min(keep)]);
            contains(&joined, &self.marker) || contains(data, &self.marker)
        };
        if data.len() >= keep {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - keep..]);
        } else {
            self.tail.extend_from_slice(data);
            let excess = self.tail.len().saturating_sub(keep);
            self.tail.drain(..excess);
        }
        found
    }
}

/// How far one flood viewer got, readable while it runs (for a clear timeout message).
#[derive(Default)]
struct Progress {
    bytes: AtomicU64,
    snapshots: AtomicUsize,
}

struct FloodRow {
    viewers: usize,
    mb: usize,
    file_bytes: u64,
    seconds: f64,
    daemon_cpu_s: f64,
    /// Output bytes received, mean and minimum over the viewers (snapshots excluded).
    bytes_mean: u64,
    bytes_min: u64,
    /// Snapshots received after `ready`, all viewers together.
    snapshots: usize,
    bare_seconds: f64,
    ratio: f64,
    daemon_resyncs: usize,
}

/// One flood to `viewers` viewers (the first types the command); with `stalled`, one more viewer
/// joins and never reads.
async fn flood_run(
    ctx: &Ctx,
    viewers: usize,
    stalled: bool,
    mb: usize,
    notes: &mut Vec<String>,
) -> Result<FloodRow> {
    let file = ctx.flood_file.clone().context("no flood file")?;
    let file_bytes = std::fs::metadata(&file)?.len();
    // Generous: a 2-core box with 100 viewers may take minutes; the point is never to hang.
    let limit = Duration::from_secs(60 + (mb * viewers) as u64);

    // The physical limit first, in the same run: the same command on a PTY of our own.
    let (bare_cmd, bare_marker) = flood_command(&file);
    let bare_seconds = bare_pty(&bare_cmd, bare_marker, limit)
        .context("the bare-PTY baseline")?
        .as_secs_f64();

    let what = format!(
        "flood to {viewers} viewers{}",
        if stalled { " + 1 stalled" } else { "" }
    );
    let mut daemon = Daemon::start(ctx, &what.replace(' ', "-"))?;
    let id = daemon.new_session();
    let mut tasks = Tasks::default();

    let typist_url = daemon.ws(id, "?assistant=shell");
    let typist = on_pool(&ctx.pool, async move {
        let mut c = Conn::open(typist_url).await?;
        // The shell answers: it is up and reading its input.
        c.send(b"echo SHELL-$((1+1))-UP\r").await?;
        c.wait_text("SHELL-2-UP").await?;
        Ok(c)
    })
    .await
    .context("creating the shell session")?;
    let mut conns = vec![typist];
    for v in 1..viewers {
        let conn = on_pool(&ctx.pool, Conn::open(daemon.ws(id, "")))
            .await
            .with_context(|| format!("joining viewer {v}"))?;
        conns.push(conn);
    }
    // Held, never read: the daemon's writes to it fill the socket buffers and then block.
    let _stalled_ws = if stalled {
        let url = daemon.ws(id, "");
        Some(on_pool(&ctx.pool, async move { connect(&url).await }).await?)
    } else {
        None
    };
    // Everyone counted in, so no join lands inside the measurement.
    let expect = (viewers + usize::from(stalled)) as u64;
    let mut typist = conns.remove(0);
    let typist = on_pool(&ctx.pool, async move {
        typist.wait_viewers(expect).await?;
        Ok(typist)
    })
    .await?;
    conns.insert(0, typist);

    let (cmd, marker) = flood_command(&file);
    let mut sinks = Vec::new();
    let mut readers = Vec::new();
    let mut progress = Vec::new();
    for conn in conns {
        let (sink, stream) = conn.ws.split();
        sinks.push(sink);
        let p = Arc::new(Progress::default());
        let task = ctx.pool.spawn(flood_reader(
            stream,
            MarkerScan::new(marker.clone()),
            p.clone(),
        ));
        tasks.0.push(task.abort_handle());
        readers.push(task);
        progress.push(p);
    }

    let cpu_before = daemon.cpu_seconds()?;
    let start = Instant::now();
    let typing = sinks[0].send(Message::Binary(format!("{cmd}\r").into_bytes()));
    tokio::time::timeout(STEP_TIMEOUT, typing)
        .await
        .map_err(|_| anyhow!("typing the flood command: send blocked for {STEP_TIMEOUT:?}"))?
        .context("typing the flood command")?;
    let deadline = start + limit;
    let mut last = start;
    for (v, reader) in readers.iter_mut().enumerate() {
        let done = match timeout_at(deadline.into(), reader).await {
            Ok(Ok(Ok(at))) => at,
            Ok(Ok(Err(e))) => bail!("viewer {v}: {e:#}"),
            Ok(Err(e)) => bail!("viewer {v}: reader task failed: {e}"),
            Err(_) => {
                let got: Vec<String> = progress
                    .iter()
                    .map(|p| {
                        format!(
                            "{} B/{} snapshots",
                            p.bytes.load(Ordering::Relaxed),
                            p.snapshots.load(Ordering::Relaxed)
                        )
                    })
                    .collect();
                bail!(
                    "viewer {v} did not see the end marker within {limit:?} (file {file_bytes} B; \
                     per viewer: {got:?}); daemon log:\n{}",
                    log_tail(&daemon.log)
                );
            }
        };
        last = last.max(done);
    }
    let seconds = last.duration_since(start).as_secs_f64();
    let daemon_cpu_s = daemon.cpu_seconds()? - cpu_before;

    drop(tasks);
    drop(sinks);
    let daemon_resyncs = daemon.finish(&what, notes);
    let bytes: Vec<u64> = progress
        .iter()
        .map(|p| p.bytes.load(Ordering::Relaxed))
        .collect();
    Ok(FloodRow {
        viewers,
        mb,
        file_bytes,
        seconds,
        daemon_cpu_s,
        bytes_mean: bytes.iter().sum::<u64>() / bytes.len() as u64,
        bytes_min: bytes.iter().copied().min().unwrap_or(0),
        snapshots: progress
            .iter()
            .map(|p| p.snapshots.load(Ordering::Relaxed))
            .sum(),
        bare_seconds,
        ratio: seconds / bare_seconds,
        daemon_resyncs,
    })
}

/// Reads one viewer's stream until the end marker; returns when it arrived.
async fn flood_reader(
    mut stream: SplitStream<Ws>,
    mut scan: MarkerScan,
    progress: Arc<Progress>,
) -> Result<Instant> {
    let mut snaps = Snapshots::default();
    while let Some(msg) = stream.next().await {
        match msg.context("connection failed during the flood")? {
            Message::Binary(b) if is_snapshot_chunk(&b) => {
                // A resync: the screen (which may already show the marker) replaces the backlog.
                if let Some(ansi) = snaps.push(&b)? {
                    progress.snapshots.fetch_add(1, Ordering::Relaxed);
                    scan.tail.clear();
                    if contains(&ansi, &scan.marker) {
                        return Ok(Instant::now());
                    }
                }
            }
            Message::Binary(b) => {
                progress.bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
                if scan.feed(&b) {
                    return Ok(Instant::now());
                }
            }
            Message::Text(t) if t.contains("\"error\"") => bail!("server error: {t}"),
            Message::Close(f) => bail!("server closed the connection: {f:?}"),
            _ => {}
        }
    }
    bail!("connection closed before the end marker")
}

/// Starts `bash -c cmd` on a PTY of our own (24×80, the kernel's default line discipline, as a
/// session's), in its own process group; returns it and the PTY's master.
fn spawn_on_pty(cmd: &str) -> Result<(Child, OwnedFd)> {
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(&size, None).context("openpty")?;
    let out = pty.slave.try_clone()?;
    let err = pty.slave.try_clone()?;
    // Our copies of the slave go with this Command, so the master reads EIO once bash is done.
    let child = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", cmd])
        // Its own group, so that ending it also ends cat (which holds the slave open too).
        .process_group(0)
        .stdin(Stdio::from(pty.slave))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .context("starting bash on a bare PTY")?;
    Ok((child, pty.master))
}

/// Kills what `spawn_on_pty` started (when `now`, or when it has not ended by itself) and reaps it.
fn end_group(child: &mut Child, now: bool) {
    let group = Pid::from_raw(-(child.id() as i32));
    if now {
        let _ = kill(group, Signal::SIGKILL);
    }
    if wait_child(child, STOP_TIMEOUT).is_none() {
        let _ = kill(group, Signal::SIGKILL);
        let _ = child.wait();
    }
}

/// Runs `cmd` on a bare PTY and reads the master until `marker`; returns the time from spawning
/// to the marker.
fn bare_pty(cmd: &str, marker: Vec<u8>, limit: Duration) -> Result<Duration> {
    let start = Instant::now();
    let (mut child, master) = spawn_on_pty(cmd)?;
    let mut master = File::from(master);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut scan = MarkerScan::new(marker);
        let mut buf = vec![0u8; 64 * 1024];
        let result = loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break Err(anyhow!("bash ended before the end marker")),
                Ok(n) if scan.feed(&buf[..n]) => break Ok(Instant::now()),
                Ok(_) => {}
            }
        };
        let _ = tx.send(result);
    });
    let result = rx.recv_timeout(limit);
    // On a timeout, killing the group closes every copy of the slave, which unblocks the reader.
    end_group(&mut child, result.is_err());
    let _ = reader.join();
    match result {
        Ok(Ok(at)) => Ok(at.duration_since(start)),
        Ok(Err(e)) => Err(e),
        Err(_) => bail!("no end marker within {limit:?}"),
    }
}

/// The echo round trip through the same raw-mode cat on a bare PTY: the physical limit, read
/// with the same kind of wake-up (epoll, on this runtime) as the WebSocket writer. Sorted.
async fn bare_echo(samples: usize, pause: Duration) -> Result<Vec<Duration>> {
    let (mut child, master) = spawn_on_pty(ECHO_SCRIPT)?;
    let result = bare_echo_samples(master, samples, pause).await;
    end_group(&mut child, true);
    let mut rtt = result?;
    rtt.sort();
    Ok(rtt)
}

async fn bare_echo_samples(
    master: OwnedFd,
    samples: usize,
    pause: Duration,
) -> Result<Vec<Duration>> {
    fcntl(master.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).context("O_NONBLOCK")?;
    // SAFETY: `master` is an OwnedFd moved into the AsyncFd, so it stays open and the same
    // descriptor until the AsyncFd is dropped.
    let fd = unsafe { AsyncFd::register(master) }
        .map_err(|e| anyhow!("registering the PTY master: {e}"))?;
    let mut buf = vec![0u8; 4096];
    let mut seen = Vec::new();
    let deadline = Instant::now() + STEP_TIMEOUT;
    while !contains(&seen, b"ECHO-READY") {
        let n = timeout_at(deadline.into(), read_fd(&fd, &mut buf))
            .await
            .map_err(|_| anyhow!("no ECHO-READY within {STEP_TIMEOUT:?}: {}", tail(&seen)))??;
        seen.extend_from_slice(&buf[..n]);
    }
    let mut rtt = Vec::with_capacity(samples);
    for i in 0..ECHO_WARMUP + samples {
        let byte = b'a' + (i % 26) as u8;
        let sent = Instant::now();
        nix::unistd::write(fd.get_ref(), &[byte]).context("writing to the PTY")?;
        loop {
            let n = timeout_at((sent + ECHO_TIMEOUT).into(), read_fd(&fd, &mut buf))
                .await
                .map_err(|_| anyhow!("sample {i}: no echo within {ECHO_TIMEOUT:?}"))??;
            if buf[..n].contains(&byte) {
                break;
            }
        }
        if i >= ECHO_WARMUP {
            rtt.push(sent.elapsed());
        }
        tokio::time::sleep(pause).await;
    }
    Ok(rtt)
}

/// One read from a non-blocking fd, waiting for it to be readable.
async fn read_fd(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> Result<usize> {
    loop {
        let mut ready = fd.readable().await?;
        match ready
            .try_io(|inner| nix::unistd::read(inner.as_raw_fd(), buf).map_err(std::io::Error::from))
        {
            Ok(Ok(0)) => bail!("the PTY closed"),
            Ok(Ok(n)) => return Ok(n),
            Ok(Err(e)) => return Err(anyhow!("reading the PTY: {e}")),
            Err(_would_block) => continue,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// stall

struct StallRow {
    viewers: usize,
    mb: usize,
    baseline_seconds: f64,
    stalled_seconds: f64,
    ratio: f64,
    /// Snapshots the healthy viewers got in the stalled run (should be 0).
    snapshots: usize,
    daemon_resyncs: usize,
}

// ---------------------------------------------------------------------------------------------
// Output

/// Nearest-rank percentile, in microseconds.
fn pct_us(sorted: &[Duration], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1].as_micros() as u64)
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{:.2}", v as f64 / 1000.0))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn print_report(s: &Settings, r: &Report) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kernel = kernel.trim();
    println!();
    println!("ptyhub load ({cores} cores, Linux {kernel}; generator and daemon share the machine)");
    let mut out = serde_json::Map::new();

    if !r.echo.is_empty() {
        println!();
        println!(
            "echo: 1-byte round trip through raw-mode cat, {} samples, {} ms apart (bare_*: same on a bare PTY, µs)",
            s.samples,
            s.pause.as_millis()
        );
        println!(
            "{:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>7}",
            "viewers",
            "p50_us",
            "p99_us",
            "max_us",
            "all_p50_us",
            "all_p99_us",
            "bare_p50",
            "bare_p99",
            "join_p50_ms",
            "join_max_ms",
            "resyncs"
        );
        let mut rows = Vec::new();
        for e in &r.echo {
            let join_max = e.joins.last().map(|d| d.as_micros() as u64);
            println!(
                "{:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>7}",
                e.viewers,
                opt(pct_us(&e.rtt, 0.5)),
                opt(pct_us(&e.rtt, 0.99)),
                opt(pct_us(&e.rtt, 1.0)),
                opt(pct_us(&e.all, 0.5)),
                opt(pct_us(&e.all, 0.99)),
                opt(pct_us(&e.bare, 0.5)),
                opt(pct_us(&e.bare, 0.99)),
                ms(pct_us(&e.joins, 0.5)),
                ms(join_max),
                e.snapshots + e.daemon_resyncs
            );
            rows.push(json!({
                "viewers": e.viewers,
                "samples": e.samples,
                "p50_us": pct_us(&e.rtt, 0.5),
                "p99_us": pct_us(&e.rtt, 0.99),
                "max_us": pct_us(&e.rtt, 1.0),
                "all_p50_us": pct_us(&e.all, 0.5),
                "all_p99_us": pct_us(&e.all, 0.99),
                "all_max_us": pct_us(&e.all, 1.0),
                "bare_pty_p50_us": pct_us(&e.bare, 0.5),
                "bare_pty_p99_us": pct_us(&e.bare, 0.99),
                "bare_pty_max_us": pct_us(&e.bare, 1.0),
                "join_p50_us": pct_us(&e.joins, 0.5),
                "join_max_us": join_max,
                "viewer_snapshots": e.snapshots,
                "daemon_resyncs": e.daemon_resyncs,
            }));
        }
        out.insert("echo".into(), Value::Array(rows));
    }

    if !r.flood.is_empty() {
        println!();
        println!("flood: `cat` of base64 text to every viewer, against the same on a bare PTY");
        println!(
            "{:>7} {:>4} {:>9} {:>9} {:>6} {:>8} {:>12} {:>12} {:>9} {:>8}",
            "viewers",
            "MiB",
            "seconds",
            "bare_s",
            "ratio",
            "cpu_s",
            "bytes_mean",
            "bytes_min",
            "snapshots",
            "resyncs"
        );
        let mut rows = Vec::new();
        for f in &r.flood {
            println!(
                "{:>7} {:>4} {:>9.3} {:>9.3} {:>6.2} {:>8.2} {:>12} {:>12} {:>9} {:>8}",
                f.viewers,
                f.mb,
                f.seconds,
                f.bare_seconds,
                f.ratio,
                f.daemon_cpu_s,
                f.bytes_mean,
                f.bytes_min,
                f.snapshots,
                f.daemon_resyncs
            );
            rows.push(json!({
                "viewers": f.viewers,
                "mb": f.mb,
                "file_bytes": f.file_bytes,
                "seconds": round3(f.seconds),
                "daemon_cpu_s": round3(f.daemon_cpu_s),
                "bytes_per_viewer": f.bytes_mean,
                "bytes_min": f.bytes_min,
                "snapshots": f.snapshots,
                "bare_pty_seconds": round3(f.bare_seconds),
                "ratio": round3(f.ratio),
                "daemon_resyncs": f.daemon_resyncs,
            }));
        }
        out.insert("flood".into(), Value::Array(rows));
    }

    if !r.stall.is_empty() {
        println!();
        println!("stall: flood time to the healthy viewers with one more viewer that never reads");
        println!(
            "{:>7} {:>4} {:>10} {:>10} {:>6} {:>9} {:>8}",
            "viewers", "MiB", "without_s", "with_s", "ratio", "snapshots", "resyncs"
        );
        let mut rows = Vec::new();
        for t in &r.stall {
            println!(
                "{:>7} {:>4} {:>10.3} {:>10.3} {:>6.3} {:>9} {:>8}",
                t.viewers,
                t.mb,
                t.baseline_seconds,
                t.stalled_seconds,
                t.ratio,
                t.snapshots,
                t.daemon_resyncs
            );
            rows.push(json!({
                "viewers": t.viewers,
                "mb": t.mb,
                "seconds_without": round3(t.baseline_seconds),
                "seconds_with": round3(t.stalled_seconds),
                "ratio": round3(t.ratio),
                "healthy_snapshots": t.snapshots,
                "daemon_resyncs": t.daemon_resyncs,
            }));
        }
        out.insert("stall".into(), Value::Array(rows));
    }

    if !r.notes.is_empty() {
        println!();
        println!("notes:");
        for n in &r.notes {
            println!("  {n}");
        }
    }
    if !r.errors.is_empty() {
        println!();
        println!("FAILED:");
        for e in &r.errors {
            println!("  {e}");
        }
    }
    out.insert(
        "machine".into(),
        json!({ "cores": cores, "kernel": kernel }),
    );
    out.insert("notes".into(), json!(r.notes));
    out.insert("errors".into(), json!(r.errors));
    println!();
    println!("{}", Value::Object(out));
}
