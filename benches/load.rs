//! Load generator for ptyhub: drives a real daemon over 127.0.0.1 and measures keystroke echo with
//! idle viewers (against a bare PTY and a bare relay in the same run), floods to many viewers
//! (against a bare PTY in the same run), the stalled-viewer cost, joining a full screen (open to
//! full snapshot), and the daemon's memory when idle, per idle session and per idle viewer.
//!
//! Run: `cargo bench --bench load -- [--quick] [--scenarios echo,flood,stall,join,memory]
//! [--viewers 0,10,100] [--samples 500] [--pause-ms 5] [--viewer-nice 10] [--flood-viewers 1,10,100]
//! [--flood-mb 50] [--flood-repeat 3] [--stall-viewers 10] [--joins 200] [--mem-sessions 100]
//! [--mem-viewers 1000]`. All scenarios run by default; `--quick` is a smoke run of all of them in
//! about a minute. Prints a table, then one JSON line (the last line of stdout). Set `PTYHUB_BIN` to
//! measure another daemon binary. Generator and daemon share the machine's cores, so floods also
//! report the generator's CPU and how busy the whole machine was.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Semaphore};
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
/// join: the screen joiners are sent, and the lines of scrollback above it.
const JOIN_ROWS: u16 = 50;
const JOIN_COLS: u16 = 200;
const JOIN_SCROLLBACK: usize = 200;
/// memory: connections being opened at once, so 1000 joins are not one thundering herd.
const CONNECT_CONCURRENCY: usize = 50;
/// memory: RSS counts as settled when two reads this far apart differ by less than 0.5%.
const SETTLE_STEP: Duration = Duration::from_millis(200);
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

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

# Every viewer of the run comes from 127.0.0.1, into one session; memory makes many sessions.
[limits]
max_sessions = 10000
max_viewers_per_session = 10000
max_connections_per_ip = 10000

[assistants.shell]
name = "Shell"
command = ["bash", "--norc", "--noprofile", "-i"]
env = {{ PS1 = "$ ", HISTFILE = "/dev/null" }}

[assistants.echo]
name = "Echo"
command = ["bash", "-c", "{ECHO_SCRIPT}"]

# memory: a program that holds a PTY and prints nothing, so only the daemon's memory moves.
[assistants.idle]
name = "Idle"
command = ["sleep", "3600"]
"#
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Echo,
    Flood,
    Stall,
    Join,
    Memory,
}

/// ptyhub load generator (only talks to 127.0.0.1; every loop is bounded in count and time).
#[derive(Debug, Parser)]
struct Args {
    /// Scenarios to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "echo,flood,stall,join,memory"
    )]
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
    /// echo: nice value of the idle viewers' threads (0: the typist's priority).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=19))]
    viewer_nice: i32,
    /// flood: viewers per run (the first one types the command) [default: 1,10,100; --quick: 1,3]
    #[arg(long, value_delimiter = ',')]
    flood_viewers: Option<Vec<usize>>,
    /// flood and stall: MiB of base64 text [default: 50; --quick: 2]
    #[arg(long)]
    flood_mb: Option<usize>,
    /// flood and stall: runs of each configuration (flood: each with its own bare-PTY baseline;
    /// stall: pairs without and with the stalled viewer, in alternating order); the median by
    /// ratio is reported [default: 3; --quick: 1]
    #[arg(long)]
    flood_repeat: Option<usize>,
    /// stall: healthy viewers next to the stalled one [default: 10; --quick: 2]
    #[arg(long)]
    stall_viewers: Option<usize>,
    /// join: joins measured, one after the other [default: 200; --quick: 20]
    #[arg(long)]
    joins: Option<usize>,
    /// memory: idle sessions created [default: 100; --quick: 10]
    #[arg(long)]
    mem_sessions: Option<usize>,
    /// memory: idle viewers joined to one session [default: 1000; --quick: 50]
    #[arg(long)]
    mem_viewers: Option<usize>,
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
    viewer_nice: i32,
    flood_viewers: Vec<usize>,
    flood_mb: usize,
    flood_repeat: usize,
    stall_viewers: usize,
    joins: usize,
    mem_sessions: usize,
    mem_viewers: usize,
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
            viewer_nice: a.viewer_nice,
            flood_viewers: a
                .flood_viewers
                .unwrap_or(if q { vec![1, 3] } else { vec![1, 10, 100] }),
            flood_mb: a.flood_mb.unwrap_or(if q { 2 } else { 50 }),
            flood_repeat: a.flood_repeat.unwrap_or(if q { 1 } else { 3 }),
            stall_viewers: a.stall_viewers.unwrap_or(if q { 2 } else { 10 }),
            joins: a.joins.unwrap_or(if q { 20 } else { 200 }),
            mem_sessions: a.mem_sessions.unwrap_or(if q { 10 } else { 100 }),
            mem_viewers: a.mem_viewers.unwrap_or(if q { 50 } else { 1000 }),
        };
        if [
            s.samples,
            s.flood_mb,
            s.flood_repeat,
            s.stall_viewers,
            s.joins,
            s.mem_sessions,
            s.mem_viewers,
        ]
        .contains(&0)
        {
            bail!(
                "--samples, --flood-mb, --flood-repeat, --stall-viewers, --joins, --mem-sessions \
                 and --mem-viewers must be at least 1"
            );
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
    flood_file: Option<FloodFile>,
    /// Viewer connections run here (multi-threaded); the scenario drivers and the echo writer run
    /// on the current-thread runtime of the main thread, so nothing else delays their wake-ups.
    pool: Handle,
    /// echo's idle viewers: `pool`, or with `--viewer-nice` a runtime of their own whose threads
    /// run at that nice value (see `run`).
    echo_pool: Handle,
    /// The soft RLIMIT_NOFILE after raising it (`None`: unknown).
    nofile: Option<u64>,
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
    // Before any socket or child: the daemon inherits the limit, and memory opens 2000+ sockets.
    let nofile = raise_nofile();
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
    // echo: the idle viewers stand for browsers on other machines. On 2 shared cores their reading
    // must not delay the typist's reader (the driver thread), which is what the echo figure
    // measures, so their threads run niced. They get a runtime of their own rather than `pool`
    // being reniced around echo: floods time the viewers themselves (until the last one has the
    // end marker), so flood readers must keep the default priority, and a thread can raise its
    // nice value but, without CAP_SYS_NICE, never lower it back.
    let nice_failures = Arc::new(AtomicUsize::new(0));
    let echo_pool = if settings.viewer_nice > 0 && settings.scenarios.contains(&Scenario::Echo) {
        let (nice, failures) = (settings.viewer_nice, nice_failures.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("load-echo-view")
            .on_thread_start(move || {
                if let Err(e) = renice_this_thread(nice) {
                    failures.fetch_add(1, Ordering::Relaxed);
                    eprintln!("load: could not set nice {nice} on an echo viewer thread: {e}");
                }
            })
            .enable_all()
            .build()
            .context("starting the echo viewers' runtime")?;
        Some(runtime)
    } else {
        None
    };
    let driver = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the driver runtime")?;
    let mut ctx = Ctx {
        bin,
        dir: tmp.path().to_owned(),
        flood_file: None,
        pool: pool.handle().clone(),
        echo_pool: echo_pool
            .as_ref()
            .map_or_else(|| pool.handle().clone(), |r| r.handle().clone()),
        nofile,
    };
    eprintln!("load: daemon {}", ctx.bin.display());
    let mut report = driver.block_on(scenarios(&settings, &mut ctx))?;
    pool.shutdown_timeout(Duration::from_secs(2));
    if let Some(runtime) = echo_pool {
        runtime.shutdown_timeout(Duration::from_secs(2));
    }
    let failures = nice_failures.load(Ordering::Relaxed);
    if failures > 0 {
        report.notes.push(format!(
            "echo: nice {} could not be set on {failures} viewer threads (they ran at the \
             typist's priority)",
            settings.viewer_nice
        ));
    }
    print_report(&settings, &report);
    Ok(report.errors.is_empty())
}

/// Everything measured, for the table and the JSON line.
#[derive(Default)]
struct Report {
    echo: Vec<EchoRow>,
    flood: Vec<FloodRow>,
    stall: Vec<StallRow>,
    join: Option<JoinRow>,
    memory: Option<MemoryRow>,
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
                // The bare PTY alone varies by about ±20% from run to run on a 2-core machine,
                // so one run's ratio says little: report the median run and the spread.
                'config: for &k in &s.flood_viewers {
                    let mut runs = Vec::with_capacity(s.flood_repeat);
                    for r in 1..=s.flood_repeat {
                        eprintln!(
                            "load: flood, {k} viewers, {} MiB, run {r} of {}",
                            s.flood_mb, s.flood_repeat
                        );
                        match flood_run(ctx, k, false, s.flood_mb, &mut report.notes).await {
                            Ok(row) => {
                                eprintln!(
                                    "load:   {:.3} s, bare {:.3} s, ratio {:.2}, busy {:.2}, \
                                     bare busy {:.2}",
                                    row.seconds,
                                    row.bare_seconds,
                                    row.ratio,
                                    row.busy,
                                    row.bare_busy
                                );
                                runs.push(row);
                            }
                            Err(e) => {
                                fail(&mut report, format!("flood to {k} viewers, run {r}: {e:#}"));
                                continue 'config;
                            }
                        }
                    }
                    report.flood.extend(median_run(runs));
                }
            }
            Scenario::Stall => {
                let k = s.stall_viewers;
                // As for floods: pairs of runs, the median pair by ratio is reported.
                let mut rows: Vec<StallRow> = Vec::with_capacity(s.flood_repeat);
                for r in 1..=s.flood_repeat {
                    eprintln!(
                        "load: stall, {k} healthy viewers, {} MiB, pair {r} of {}",
                        s.flood_mb, s.flood_repeat
                    );
                    // Every other pair runs the stalled case first, so a drift in the host's
                    // load over the scenario favours neither.
                    let stalled_first = r % 2 == 0;
                    let runs = async {
                        let first =
                            flood_run(ctx, k, stalled_first, s.flood_mb, &mut report.notes).await?;
                        let second =
                            flood_run(ctx, k, !stalled_first, s.flood_mb, &mut report.notes)
                                .await?;
                        anyhow::Ok(if stalled_first {
                            (second, first)
                        } else {
                            (first, second)
                        })
                    };
                    match runs.await {
                        Ok((without, with)) => rows.push(StallRow {
                            viewers: k,
                            mb: s.flood_mb,
                            baseline_seconds: without.seconds,
                            stalled_seconds: with.seconds,
                            ratio: with.seconds / without.seconds,
                            ratios: Vec::new(),
                            cpu_without: without.daemon_cpu_s,
                            cpu_with: with.daemon_cpu_s,
                            cpu_ratios: Vec::new(),
                            gen_cpu_without: without.gen_cpu_s,
                            gen_cpu_with: with.gen_cpu_s,
                            busy_without: without.busy,
                            busy_with: with.busy,
                            snapshots: with.snapshots,
                            snapshots_sent: with.snapshots_sent,
                            resyncs: with.resyncs,
                            daemon_resyncs: with.daemon_resyncs,
                        }),
                        Err(e) => {
                            fail(
                                &mut report,
                                format!("stall with {k} viewers, pair {r}: {e:#}"),
                            );
                            rows.clear();
                            break;
                        }
                    }
                }
                let cpu_ratios: Vec<f64> =
                    rows.iter().map(|t| t.cpu_with / t.cpu_without).collect();
                if let Some((mut row, ratios)) = median_by(rows, |t| t.ratio) {
                    row.ratios = ratios;
                    row.cpu_ratios = cpu_ratios;
                    report.stall.push(row);
                }
            }
            Scenario::Join => {
                eprintln!(
                    "load: join, {} joins to a full {JOIN_ROWS}x{JOIN_COLS} screen",
                    s.joins
                );
                match join_run(ctx, s.joins, &mut report.notes).await {
                    Ok(row) => report.join = Some(row),
                    Err(e) => fail(&mut report, format!("join: {e:#}")),
                }
            }
            Scenario::Memory => {
                eprintln!(
                    "load: memory, {} idle sessions, {} idle viewers",
                    s.mem_sessions, s.mem_viewers
                );
                match memory_run(ctx, s.mem_sessions, s.mem_viewers, &mut report.notes).await {
                    Ok(row) => report.memory = Some(row),
                    Err(e) => fail(&mut report, format!("memory: {e:#}")),
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
    /// For `/metrics` and `/api/sessions` (the daemon runs without auth, so no token is needed).
    http: reqwest::Client,
}

impl Daemon {
    fn start(ctx: &Ctx, name: &str) -> Result<Daemon> {
        let http = reqwest::Client::builder()
            // 127.0.0.1 only, whatever HTTP_PROXY says.
            .no_proxy()
            // No idle keep-alive connection: it would hold up the daemon's graceful shutdown.
            .pool_max_idle_per_host(0)
            .timeout(STEP_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
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
                http,
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
        process_cpu_seconds(&pid.to_string()).context("the daemon's CPU time")
    }

    /// `GET /metrics`: every sample line, keyed by name and labels as written.
    async fn metrics(&self) -> Result<Metrics> {
        let url = format!("http://{}/metrics", self.addr);
        let resp = self.http.get(&url).send().await.context("GET /metrics")?;
        let status = resp.status();
        let text = resp.text().await.context("reading /metrics")?;
        if !status.is_success() {
            bail!("GET /metrics: {status}: {text}");
        }
        Ok(Metrics(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (key, value) = l.rsplit_once(' ')?;
                    Some((key.to_owned(), value.parse().ok()?))
                })
                .collect(),
        ))
    }

    /// Polls `/metrics` until `ptyhub_viewers` is `n`.
    async fn wait_viewer_gauge(&self, n: u64, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let now = self.metrics().await?.get("ptyhub_viewers");
            if now == n {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the daemon counts {now} viewers, not {n}, after {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `POST /api/sessions` running `assistant`; the session is not necessarily up yet.
    async fn create_session(&mut self, assistant: &str) -> Result<Uuid> {
        let id = self.new_session();
        let url = format!("http://{}/api/sessions", self.addr);
        let resp = self
            .http
            .post(&url)
            .json(&json!({ "assistant": assistant, "id": id }))
            .send()
            .await
            .context("POST /api/sessions")?;
        let status = resp.status();
        if !status.is_success() {
            bail!(
                "POST /api/sessions: {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        Ok(id)
    }

    /// Waits until every one of `ids` runs `program` (its exec done), polling /proc.
    async fn wait_running(&self, ids: &[Uuid], program: &str, limit: Duration) -> Result<()> {
        let pid = self.pid().context("daemon not running")?;
        let deadline = Instant::now() + limit;
        loop {
            let up = running_sessions(pid, program);
            let missing = ids.iter().filter(|id| !up.contains(id)).count();
            if missing == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{missing} of {} sessions not running {program} after {limit:?}",
                    ids.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The daemon's memory now, from /proc/<pid>/status.
    fn memory(&self) -> Result<MemSample> {
        let pid = self.pid().context("daemon not running")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .context("reading the daemon's /proc status")?;
        let field = |name: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .with_context(|| format!("no {name} in /proc/{pid}/status"))
        };
        Ok(MemSample {
            rss_kib: field("VmRSS")?,
            anon_kib: field("RssAnon")?,
            threads: field("Threads")?,
        })
    }

    /// The memory once RSS stops moving (queued writes drained, lazy allocations done), or after
    /// `SETTLE_LIMIT` at the latest.
    async fn settled_memory(&self) -> Result<MemSample> {
        let deadline = Instant::now() + SETTLE_LIMIT;
        let mut last = self.memory()?;
        loop {
            tokio::time::sleep(SETTLE_STEP).await;
            let now = self.memory()?;
            if now.rss_kib.abs_diff(last.rss_kib) * 200 < last.rss_kib || Instant::now() >= deadline
            {
                return Ok(now);
            }
            last = now;
        }
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

/// CPU seconds (user + system, all threads, ended ones included) process `pid` (or `self`) has
/// used so far. For `self` this is what getrusage(RUSAGE_SELF) adds up, read from /proc because
/// nix's `resource` feature is not enabled here; 10 ms resolution, fine for floods of seconds.
fn process_cpu_seconds(pid: &str) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
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

/// The whole machine's CPU time so far (/proc/stat's aggregate `cpu` line, all cores), in ticks.
#[derive(Debug, Clone, Copy)]
struct CpuTimes {
    total: u64,
    /// Of which idle or waiting for IO.
    idle: u64,
}

impl CpuTimes {
    fn now() -> Result<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let line = stat
            .lines()
            .find_map(|l| l.strip_prefix("cpu "))
            .context("no cpu line in /proc/stat")?;
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().context("unexpected /proc/stat format"))
            .collect::<Result<_>>()?;
        if v.len() < 5 {
            bail!("unexpected /proc/stat cpu line: {line:?}");
        }
        // user nice system idle iowait irq softirq steal; guest and guest_nice (9, 10) are
        // already counted in user and nice.
        Ok(CpuTimes {
            total: v.iter().take(8).sum(),
            idle: v[3] + v[4],
        })
    }

    /// How busy all cores together were since `before`: 1.0 is every core busy all the time.
    fn busy_since(&self, before: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(before.total);
        let idle = self.idle.saturating_sub(before.idle);
        if total == 0 {
            return 0.0;
        }
        total.saturating_sub(idle) as f64 / total as f64
    }
}

/// Sets the calling thread's nice value. Linux keeps nice per thread, and `PRIO_PROCESS` with a
/// thread id names that one thread.
fn renice_this_thread(nice: i32) -> std::io::Result<()> {
    use std::ffi::{c_int, c_uint};
    // nix has no setpriority and this crate does not depend on libc; the C library is linked
    // anyway.
    extern "C" {
        fn setpriority(which: c_int, who: c_uint, prio: c_int) -> c_int;
    }
    const PRIO_PROCESS: c_int = 0;
    let tid = nix::unistd::gettid().as_raw() as c_uint;
    // SAFETY: integers in and out, no memory shared; the thread id is our own thread's.
    if unsafe { setpriority(PRIO_PROCESS, tid, nice) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
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

/// The daemon's memory at one moment.
#[derive(Debug, Clone, Copy)]
struct MemSample {
    rss_kib: u64,
    /// Of which anonymous (heap, stacks): the part that grows with sessions and viewers.
    anon_kib: u64,
    threads: u64,
}

/// One scrape of `/metrics`.
struct Metrics(HashMap<String, f64>);

impl Metrics {
    /// A sample by name (with labels, as written); 0 when absent.
    fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0.0) as u64
    }

    /// How much `key` grew since `before`.
    fn since(&self, before: &Metrics, key: &str) -> u64 {
        self.get(key).saturating_sub(before.get(key))
    }
}

/// Sessions whose process, a child of `daemon`, now runs `program`.
fn running_sessions(daemon: i32, program: &str) -> HashSet<Uuid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // "pid (comm) state ppid …": comm may hold spaces, so split around the parentheses.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let comm = head.split_once('(').map_or("", |(_, c)| c);
            let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            comm == program && ppid == Some(daemon)
        })
        .filter_map(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            env.split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"PTYHUB_SESSION="))
                .and_then(|v| Uuid::try_parse_ascii(v).ok())
        })
        .collect()
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit then in force.
/// nix's `resource` feature is not enabled in this crate, so util-linux `prlimit` does it.
fn raise_nofile() -> Option<u64> {
    let read = || -> Option<(u64, u64)> {
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        let mut v = line["Max open files".len()..].split_whitespace();
        Some((v.next()?.parse().ok()?, v.next()?.parse().ok()?))
    };
    let (soft, hard) = read()?;
    if soft < hard {
        let status = Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--nofile={hard}:{hard}"))
            .stdout(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("load: could not raise the open-file limit from {soft} to {hard} (prlimit)");
        }
    }
    read().map(|(soft, _)| soft)
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
    /// The same round trip and time to the last viewer through a bare relay, sorted.
    relay: Vec<Duration>,
    relay_all: Vec<Duration>,
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
    let (relay, relay_all) = relay_echo(ctx, viewers, samples, pause)
        .await
        .context("the bare-relay baseline")?;
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
        let conn = on_pool(&ctx.echo_pool, Conn::open(daemon.ws(id, "")))
            .await
            .with_context(|| format!("joining idle viewer {v}"))?;
        joins.push(conn.join_time);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = ctx
            .echo_pool
            .spawn(idle_viewer(conn.ws, tx, snapshots.clone()));
        tasks.0.push(task.abort_handle());
        rxs.push(rx);
    }

    let (rtt, all) = echo_samples(samples, pause, &mut rxs, async |i, byte, deadline| {
        writer.send(&[byte]).await?;
        loop {
            match timeout_at(deadline.into(), writer.ws.next()).await {
                Err(_) => bail!(
                    "sample {i}: the writer got no echo of {:?} within {ECHO_TIMEOUT:?}",
                    byte as char
                ),
                Ok(None) | Ok(Some(Err(_))) => bail!("sample {i}: the writer's connection closed"),
                Ok(Some(Ok(Message::Binary(b)))) if !is_snapshot_chunk(&b) && b.contains(&byte) => {
                    return Ok(())
                }
                Ok(Some(Ok(Message::Close(f)))) => bail!("sample {i}: server closed: {f:?}"),
                Ok(Some(Ok(_))) => {}
            }
        }
    })
    .await?;

    drop(tasks);
    drop(writer);
    let daemon_resyncs = daemon.finish(&format!("echo with {viewers} viewers"), notes);
    joins.sort();
    Ok(EchoRow {
        viewers,
        samples,
        rtt,
        bare,
        relay,
        relay_all,
        all,
        joins,
        snapshots: snapshots.load(Ordering::Relaxed),
        daemon_resyncs,
    })
}

/// An echo run's samples, after `ECHO_WARMUP` unmeasured ones: `round_trip(sample, byte,
/// deadline)` sends the byte and returns once the typist has its echo, then every viewer must
/// get it too. Returns the round trips and the times to the last viewer (empty without
/// viewers), sorted.
async fn echo_samples(
    samples: usize,
    pause: Duration,
    rxs: &mut [mpsc::UnboundedReceiver<(Instant, Vec<u8>)>],
    mut round_trip: impl AsyncFnMut(usize, u8, Instant) -> Result<()>,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let mut rtt = Vec::with_capacity(samples);
    let mut all = Vec::with_capacity(samples);
    for i in 0..ECHO_WARMUP + samples {
        // A byte that differs from the previous sample's, so a late frame is never taken for it.
        let byte = b'a' + (i % 26) as u8;
        let sent = Instant::now();
        let deadline = sent + ECHO_TIMEOUT;
        round_trip(i, byte, deadline).await?;
        let elapsed = sent.elapsed();
        let last = last_arrival(rxs, byte, deadline, i).await?;
        if i >= ECHO_WARMUP {
            rtt.push(elapsed);
            if let Some(last) = last {
                all.push(last.saturating_duration_since(sent));
            }
        }
        tokio::time::sleep(pause).await;
    }
    rtt.sort();
    all.sort();
    Ok((rtt, all))
}

/// Waits until every viewer has a frame containing `byte`; returns when the last one got it
/// (`None` without viewers).
async fn last_arrival(
    rxs: &mut [mpsc::UnboundedReceiver<(Instant, Vec<u8>)>],
    byte: u8,
    deadline: Instant,
    sample: usize,
) -> Result<Option<Instant>> {
    let mut last: Option<Instant> = None;
    for (v, rx) in rxs.iter_mut().enumerate() {
        let at = loop {
            match timeout_at(deadline.into(), rx.recv()).await {
                Err(_) => bail!(
                    "sample {sample}: viewer {v} did not get {:?} within {ECHO_TIMEOUT:?}",
                    byte as char
                ),
                Ok(None) => bail!("sample {sample}: viewer {v}'s connection closed"),
                Ok(Some((at, b))) if b.contains(&byte) => break at,
                Ok(Some(_)) => {}
            }
        };
        last = Some(last.map_or(at, |l| l.max(at)));
    }
    Ok(last)
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

/// The text every flood `cat`s.
#[derive(Clone)]
struct FloodFile {
    path: PathBuf,
    len: u64,
    /// Its last 3 lines, each with its newline: what the screen shows above the end marker.
    last_lines: String,
}

/// Writes about `mb` MiB of base64 (76-char lines) of random bytes.
fn make_flood_file(dir: &Path, mb: usize) -> Result<FloodFile> {
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
    let mut file = File::open(&out).context("opening the flood file")?;
    let len = file.metadata()?.len();
    // Three 77-byte lines fit in the last KiB.
    file.seek(SeekFrom::Start(len.saturating_sub(1024)))?;
    let mut end = Vec::new();
    file.read_to_end(&mut end)?;
    let lines: Vec<&[u8]> = end.split(|&b| b == b'\n').rev().skip(1).take(3).collect();
    let mut last_lines = String::new();
    for line in lines.iter().rev() {
        last_lines.push_str(&String::from_utf8_lossy(line));
        last_lines.push('\n');
    }
    Ok(FloodFile {
        path: out,
        len,
        last_lines,
    })
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
    /// Live output bytes (frame payloads).
    bytes: AtomicU64,
    /// Snapshot chunk bytes (frame payloads, headers included).
    snapshot_bytes: AtomicU64,
    snapshots: AtomicUsize,
}

struct FloodRow {
    viewers: usize,
    mb: usize,
    file_bytes: u64,
    seconds: f64,
    daemon_cpu_s: f64,
    /// The generator's own CPU seconds (all its threads) in the same window.
    gen_cpu_s: f64,
    /// How busy the whole machine was in that window, as a fraction of all cores.
    busy: f64,
    /// Output bytes received, mean and minimum over the viewers (snapshots excluded).
    bytes_mean: u64,
    bytes_min: u64,
    /// Everything delivered: output and snapshot bytes, summed over the viewers.
    bytes_total: u64,
    /// Snapshots received after `ready`, all viewers together.
    snapshots: usize,
    /// The daemon's own counts during the flood (`/metrics`, after minus before).
    snapshots_sent: u64,
    resyncs: u64,
    /// Output bytes the daemon's screen model skipped (plain text that scrolled away unseen).
    parse_skipped: u64,
    bare_seconds: f64,
    /// `busy` during the bare-PTY run.
    bare_busy: f64,
    ratio: f64,
    /// The ratio of every run of this configuration (`--flood-repeat`), in run order; this row is
    /// the run with the median.
    ratios: Vec<f64>,
    daemon_resyncs: usize,
}

/// The run with the median ratio, carrying every run's ratio.
fn median_run(runs: Vec<FloodRow>) -> Option<FloodRow> {
    let (mut row, ratios) = median_by(runs, |r| r.ratio)?;
    row.ratios = ratios;
    Some(row)
}

/// The item with the median `key` (the lower of the two middle ones for an even count), and
/// every item's key in the order given.
fn median_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> Option<(T, Vec<f64>)> {
    let keys: Vec<f64> = items.iter().map(&key).collect();
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    if items.is_empty() {
        return None;
    }
    let middle = (items.len() - 1) / 2;
    Some((items.swap_remove(middle), keys))
}

/// The smallest and the largest of `values`.
fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
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
    let flood = ctx.flood_file.clone().context("no flood file")?;
    let (file, file_bytes) = (flood.path, flood.len);
    // Generous: a 2-core box with 100 viewers may take minutes; the point is never to hang.
    let limit = Duration::from_secs(60 + (mb * viewers) as u64);

    // The physical limit first, in the same run: the same command on a PTY of our own.
    let (bare_cmd, bare_marker) = flood_command(&file);
    let (bare_time, bare_busy) =
        bare_pty(&bare_cmd, bare_marker, limit).context("the bare-PTY baseline")?;
    let bare_seconds = bare_time.as_secs_f64();

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

    let metrics_before = daemon.metrics().await?;
    let cpu_before = daemon.cpu_seconds()?;
    let gen_cpu_before = process_cpu_seconds("self")?;
    let machine_before = CpuTimes::now()?;
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
    // Read as the last reader is done (the driver wakes on it), before anything else runs.
    let busy = CpuTimes::now()?.busy_since(&machine_before);
    let gen_cpu_s = process_cpu_seconds("self")? - gen_cpu_before;
    let daemon_cpu_s = daemon.cpu_seconds()? - cpu_before;
    let metrics_after = daemon.metrics().await?;
    // The right screen: what a joiner now gets (the daemon's model, which skipped most of the
    // flood unparsed) ends with the file's last lines and the marker. Every viewer got the
    // same byte count and no resync (checked by the caller's table), so the same stream.
    let url = daemon.ws(id, "");
    let joined = on_pool(&ctx.pool, async move { join_once(&url).await })
        .await
        .context("joining after the flood")?;
    let mut term = vt100::Parser::new(
        std::num::NonZeroU16::new(24).context("rows")?,
        std::num::NonZeroU16::new(80).context("cols")?,
        0,
    );
    term.process(&joined.ansi()?);
    let contents = term.screen().contents();
    let expect = format!("{}{}", flood.last_lines, String::from_utf8_lossy(&marker));
    if !contents.contains(&expect) {
        bail!("after the flood a joiner sees the wrong screen:\n{contents}\nexpected it to contain:\n{expect}");
    }

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
        gen_cpu_s,
        busy,
        bytes_mean: bytes.iter().sum::<u64>() / bytes.len() as u64,
        bytes_min: bytes.iter().copied().min().unwrap_or(0),
        bytes_total: progress
            .iter()
            .map(|p| p.bytes.load(Ordering::Relaxed) + p.snapshot_bytes.load(Ordering::Relaxed))
            .sum(),
        snapshots_sent: metrics_after.since(&metrics_before, "ptyhub_snapshots_total"),
        resyncs: metrics_after.since(&metrics_before, "ptyhub_resyncs_total"),
        parse_skipped: metrics_after.since(&metrics_before, "ptyhub_parse_skipped_bytes_total"),
        snapshots: progress
            .iter()
            .map(|p| p.snapshots.load(Ordering::Relaxed))
            .sum(),
        bare_seconds,
        bare_busy,
        ratio: seconds / bare_seconds,
        ratios: vec![seconds / bare_seconds],
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
                progress
                    .snapshot_bytes
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
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
/// to the marker, and how busy the machine was meanwhile (`CpuTimes::busy_since`).
fn bare_pty(cmd: &str, marker: Vec<u8>, limit: Duration) -> Result<(Duration, f64)> {
    let machine_before = CpuTimes::now()?;
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
    // At the marker, not after reaping bash, whose polling would count idle time.
    let machine_after = CpuTimes::now();
    // On a timeout, killing the group closes every copy of the slave, which unblocks the reader.
    end_group(&mut child, result.is_err());
    let _ = reader.join();
    match result {
        Ok(Ok(at)) => Ok((
            at.duration_since(start),
            machine_after?.busy_since(&machine_before),
        )),
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
    result
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
    let ready = Instant::now() + STEP_TIMEOUT;
    read_until(async |buf| read_fd(&fd, buf).await, b"ECHO-READY", ready).await?;
    let (rtt, _) = echo_samples(samples, pause, &mut [], async |i, byte, deadline| {
        nix::unistd::write(fd.get_ref(), &[byte]).context("writing to the PTY")?;
        read_until(async |buf| read_fd(&fd, buf).await, &[byte], deadline)
            .await
            .with_context(|| format!("sample {i}"))
    })
    .await?;
    Ok(rtt)
}

/// Reads with `read` (one read a call, 0 once closed) until `needle` has come, by `deadline`.
async fn read_until(
    mut read: impl AsyncFnMut(&mut [u8]) -> Result<usize>,
    needle: &[u8],
    deadline: Instant,
) -> Result<()> {
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    let what = || String::from_utf8_lossy(needle).into_owned();
    while !contains(&seen, needle) {
        let n = timeout_at(deadline.into(), read(&mut buf))
            .await
            .map_err(|_| anyhow!("no {:?} in time: {}", what(), tail(&seen)))??;
        if n == 0 {
            bail!("closed before {:?}: {}", what(), tail(&seen));
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(())
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

/// The echo round trip through the least any server sharing a terminal must do, in the same
/// run: the typist on a plain TCP connection (no WebSocket, no HTTP), one thread copying its
/// bytes into the PTY, another copying the PTY's output to the typist and then to every idle
/// viewer's socket, and the same raw-mode cat. That is the bare PTY plus two loopback hops and
/// the fan-out. Returns the typist's round trips and the times to the last viewer, sorted.
async fn relay_echo(
    ctx: &Ctx,
    viewers: usize,
    samples: usize,
    pause: Duration,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the relay")?;
    let addr = listener.local_addr()?;
    let (mut child, master) = spawn_on_pty(ECHO_SCRIPT)?;
    let relay = std::thread::spawn(move || relay_thread(listener, viewers, master));
    let result = relay_echo_samples(ctx, addr, viewers, samples, pause).await;
    // Killing cat gives the PTY reader EIO; the closed typist connection ends the other thread.
    end_group(&mut child, true);
    let relayed = tokio::task::spawn_blocking(move || relay.join())
        .await
        .map_err(|e| anyhow!("joining the relay: {e}"))?
        .map_err(|_| anyhow!("the relay thread panicked"))?;
    let samples = result?;
    relayed?;
    Ok(samples)
}

/// The relay: accepts the typist, then `viewers` connections, and copies until the typist
/// leaves or cat ends.
fn relay_thread(listener: std::net::TcpListener, viewers: usize, master: OwnedFd) -> Result<()> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut conns = Vec::with_capacity(viewers + 1);
    while conns.len() < viewers + 1 {
        match listener.accept() {
            Ok((conn, _)) => {
                conn.set_nonblocking(false)?;
                conn.set_nodelay(true)?;
                conns.push(conn);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    bail!("the relay's clients did not connect within {STEP_TIMEOUT:?}");
                }
                // Set-up only: the generator is connecting, nothing is being timed.
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e).context("accepting a relay client"),
        }
    }
    let mut pty_in = File::from(master.try_clone()?);
    let mut typist_in = conns[0].try_clone()?;
    let input = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = typist_in.read(&mut buf) {
            if pty_in.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
    let mut pty_out = File::from(master);
    let mut buf = [0u8; 4096];
    // Until EIO: cat has been killed.
    while let Ok(n @ 1..) = pty_out.read(&mut buf) {
        for conn in &conns {
            // A viewer that left is the generator ending the run: keep serving the others.
            let _ = (&*conn).write_all(&buf[..n]);
        }
    }
    drop(conns);
    let _ = input.join();
    Ok(())
}

/// The relay's clients: the typist on this runtime, the viewers on `ctx.echo_pool`, measured
/// as `echo_run` measures the daemon.
async fn relay_echo_samples(
    ctx: &Ctx,
    addr: SocketAddr,
    viewers: usize,
    samples: usize,
    pause: Duration,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let connect = |addr| async move {
        let conn = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connecting to the relay: no answer within {STEP_TIMEOUT:?}"))??;
        conn.set_nodelay(true)?;
        Ok::<_, anyhow::Error>(conn)
    };
    let mut typist = connect(addr).await?;
    let mut tasks = Tasks::default();
    let mut rxs = Vec::with_capacity(viewers);
    for _ in 0..viewers {
        let conn = on_pool(&ctx.echo_pool, connect(addr)).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        tasks
            .0
            .push(ctx.echo_pool.spawn(raw_viewer(conn, tx)).abort_handle());
        rxs.push(rx);
    }
    let ready = Instant::now() + STEP_TIMEOUT;
    read_until(
        async |buf| Ok(typist.read(buf).await?),
        b"ECHO-READY",
        ready,
    )
    .await
    .context("the relay")?;
    echo_samples(samples, pause, &mut rxs, async |i, byte, deadline| {
        typist.write_all(&[byte]).await?;
        read_until(async |buf| Ok(typist.read(buf).await?), &[byte], deadline)
            .await
            .with_context(|| format!("sample {i}: the relay"))
    })
    .await
}

/// A relay viewer: reads all the time and reports every read with its arrival time.
async fn raw_viewer(mut conn: TcpStream, tx: mpsc::UnboundedSender<(Instant, Vec<u8>)>) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n @ 1..) = conn.read(&mut buf).await {
        if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
            return;
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
    /// Every pair's ratio (`--flood-repeat`), in run order; this row is the median pair.
    ratios: Vec<f64>,
    /// The daemon's CPU seconds without and with the stalled viewer; every pair's ratio of the
    /// two, in run order (CPU time varies less with the host's load than elapsed time does).
    cpu_without: f64,
    cpu_with: f64,
    cpu_ratios: Vec<f64>,
    /// The generator's CPU seconds and the machine's `busy`, without and with the stalled viewer.
    gen_cpu_without: f64,
    gen_cpu_with: f64,
    busy_without: f64,
    busy_with: f64,
    /// Snapshots the healthy viewers got in the stalled run (should be 0).
    snapshots: usize,
    /// The daemon's counts in the stalled run (`/metrics`): the stalled viewer's resyncs.
    snapshots_sent: u64,
    resyncs: u64,
    daemon_resyncs: usize,
}

// ---------------------------------------------------------------------------------------------
// join

struct JoinRow {
    joins: usize,
    /// Connect to the last snapshot chunk and `ready`, sorted.
    times: Vec<Duration>,
    /// The snapshot as sent (gzip bytes, chunks) and its ANSI once unpacked.
    gzip_bytes: usize,
    chunks: usize,
    ansi_bytes: usize,
    /// Snapshots the daemon counted during the measured joins (`/metrics`; one per join).
    snapshots_sent: u64,
    daemon_resyncs: usize,
}

/// The text on screen once the session is full; typed as `$((2+2))` so the command's echo
/// does not contain it.
const FILLED: &str = "JOIN-4-FILLED";

/// Writes `lines` lines of `cols` characters in runs of 256-colour SGR (bold or not, some with a
/// background) over pseudo-random text, so the snapshot is a busy screen, not a blank one that
/// gzip makes nothing of.
fn make_fill_file(dir: &Path, lines: usize, cols: usize) -> Result<PathBuf> {
    const TEXT: &[u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;(){}[]<>=+-*/_";
    // xorshift64: the same screen in every run.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::new();
    for _ in 0..lines {
        let mut col = 0;
        while col < cols {
            let run = (5 + next() % 30) as usize;
            let run = run.min(cols - col);
            let r = next();
            let style = if r & 1 == 0 { "0" } else { "0;1" };
            let bg = if r & 6 == 0 {
                format!(";48;5;{}", (r >> 16) % 256)
            } else {
                String::new()
            };
            out.extend_from_slice(format!("\x1b[{style};38;5;{}{bg}m", (r >> 8) % 256).as_bytes());
            out.extend((0..run).map(|_| TEXT[(next() % TEXT.len() as u64) as usize]));
            col += run;
        }
        out.extend_from_slice(b"\x1b[0m\n");
    }
    let path = dir.join("join-fill.txt");
    std::fs::write(&path, out).context("writing the fill file")?;
    Ok(path)
}

/// A session showing a full coloured screen with scrollback, then `joins` viewers one after
/// the other, each timed from connect to the whole snapshot and `ready`, then closed.
async fn join_run(ctx: &Ctx, joins: usize, notes: &mut Vec<String>) -> Result<JoinRow> {
    let fill = make_fill_file(
        &ctx.dir,
        JOIN_SCROLLBACK + usize::from(JOIN_ROWS),
        usize::from(JOIN_COLS),
    )?;
    let mut daemon = Daemon::start(ctx, "join")?;
    let id = daemon.new_session();
    let url = daemon.ws(id, "");

    // The joins and this set-up run on the driver's runtime: nothing else is going on.
    let mut typist = Conn::open(daemon.ws(id, "?assistant=shell"))
        .await
        .context("creating the shell session")?;
    typist.send(b"echo SHELL-$((1+1))-UP\r").await?;
    typist
        .wait_text("SHELL-2-UP")
        .await
        .context("waiting for the shell")?;
    // The only viewer that sends a size sets the session's, which stays when it leaves.
    let [rows_hi, rows_lo] = JOIN_ROWS.to_be_bytes();
    let [cols_hi, cols_lo] = JOIN_COLS.to_be_bytes();
    typist
        .send(&[0x00, rows_hi, rows_lo, cols_hi, cols_lo])
        .await?;
    typist
        .send(b"echo SIZE-$(stty size | tr ' ' x)-OK\r")
        .await?;
    typist
        .wait_text(&format!("SIZE-{JOIN_ROWS}x{JOIN_COLS}-OK"))
        .await
        .context("resizing the session")?;
    let fill_cmd = format!("cat '{}'; echo JOIN-$((2+2))-FILLED\r", fill.display());
    typist.send(fill_cmd.as_bytes()).await?;
    typist
        .wait_text(FILLED)
        .await
        .context("filling the screen")?;
    close_ws(typist.ws).await;
    // Every join then finds the session with nobody else watching: one clean, repeatable case.
    daemon.wait_viewer_gauge(0, STEP_TIMEOUT).await?;

    // Warm-up, not measured: also waits (bounded) for the screen model to show the end marker,
    // should it ever lag the live output.
    let warm_deadline = Instant::now() + STEP_TIMEOUT;
    let mut warm = 0;
    loop {
        let sample = join_once(&url).await.context("warm-up join")?;
        warm += 1;
        if warm >= 5 && contains(&sample.ansi()?, FILLED.as_bytes()) {
            break;
        }
        if Instant::now() >= warm_deadline {
            bail!("after {warm} joins the snapshot still does not show {FILLED:?}");
        }
    }

    let before = daemon.metrics().await?;
    let mut times = Vec::with_capacity(joins);
    let mut last = None;
    for j in 0..joins {
        let sample = join_once(&url).await.with_context(|| format!("join {j}"))?;
        // Checked outside the timing: the viewer has the full screen.
        if !contains(&sample.ansi()?, FILLED.as_bytes()) {
            bail!("join {j}: the snapshot does not show {FILLED:?}");
        }
        times.push(sample.time);
        last = Some(sample);
    }
    let after = daemon.metrics().await?;
    let last = last.context("no join measured")?;
    let daemon_resyncs = daemon.finish("join", notes);
    times.sort();
    Ok(JoinRow {
        joins,
        times,
        gzip_bytes: last.gzip.len(),
        chunks: last.chunks,
        ansi_bytes: last.ansi()?.len(),
        snapshots_sent: after.since(&before, "ptyhub_snapshots_total"),
        daemon_resyncs,
    })
}

struct JoinSample {
    time: Duration,
    gzip: Vec<u8>,
    chunks: usize,
}

impl JoinSample {
    fn ansi(&self) -> Result<Vec<u8>> {
        let mut ansi = Vec::new();
        flate2::read::GzDecoder::new(&self.gzip[..])
            .read_to_end(&mut ansi)
            .context("gunzip of the snapshot")?;
        Ok(ansi)
    }
}

/// One join: connect, read every snapshot chunk and `ready` (the clock stops there), close.
async fn join_once(url: &str) -> Result<JoinSample> {
    let start = Instant::now();
    let deadline = start + STEP_TIMEOUT;
    let mut ws = connect(url).await?;
    let mut gzip = Vec::new();
    let mut chunks = 0;
    let mut total = None;
    let time = loop {
        let msg = match timeout_at(deadline.into(), ws.next()).await {
            Err(_) => bail!("no ready within {STEP_TIMEOUT:?}"),
            Ok(None) => bail!("connection closed before ready"),
            Ok(Some(Err(e))) => bail!("connection failed: {e}"),
            Ok(Some(Ok(msg))) => msg,
        };
        match msg {
            Message::Binary(b) if is_snapshot_chunk(&b) => {
                let (index, of) = (usize::from(b[1]), usize::from(b[2]));
                if index != chunks || total.is_some_and(|t| t != of) {
                    bail!("snapshot chunk {index}/{of} arrived, expected chunk {chunks}");
                }
                total = Some(of);
                chunks += 1;
                gzip.extend_from_slice(&b[3..]);
            }
            Message::Text(t) => {
                let v: Value =
                    serde_json::from_str(&t).with_context(|| format!("bad JSON {t:?}"))?;
                match v["type"].as_str() {
                    Some("ready") => break start.elapsed(),
                    Some("error") => bail!("server error {t}"),
                    _ => {}
                }
            }
            Message::Close(f) => bail!("server closed the connection: {f:?}"),
            // Live output: none expected, the screen is still.
            _ => {}
        }
    };
    if total != Some(chunks) {
        bail!("ready after {chunks} of {total:?} snapshot chunks");
    }
    close_ws(ws).await;
    Ok(JoinSample { time, gzip, chunks })
}

/// Closes with a close frame and reads to the server's answer, bounded, so that the daemon sees
/// a clean leave before the next join.
async fn close_ws(mut ws: Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = ws.close(None).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// memory

struct MemoryRow {
    idle: MemSample,
    sessions: usize,
    with_sessions: MemSample,
    viewers: usize,
    /// With the viewers' session up and nobody in it.
    before_viewers: MemSample,
    with_viewers: MemSample,
    /// Time to connect every viewer, `CONNECT_CONCURRENCY` at a time.
    connect_seconds: f64,
    daemon_resyncs: usize,
}

impl MemoryRow {
    fn per_session_kib(&self) -> f64 {
        self.with_sessions.rss_kib.saturating_sub(self.idle.rss_kib) as f64 / self.sessions as f64
    }

    fn per_viewer_kib(&self) -> f64 {
        self.with_viewers
            .rss_kib
            .saturating_sub(self.before_viewers.rss_kib) as f64
            / self.viewers as f64
    }

    fn per_viewer_anon_kib(&self) -> f64 {
        self.with_viewers
            .anon_kib
            .saturating_sub(self.before_viewers.anon_kib) as f64
            / self.viewers as f64
    }
}

/// The daemon's RSS idle, with `sessions` idle sessions, and with `viewers` idle viewers of one
/// more session; every figure read once RSS has settled.
async fn memory_run(
    ctx: &Ctx,
    sessions: usize,
    viewers: usize,
    notes: &mut Vec<String>,
) -> Result<MemoryRow> {
    // Each viewer is a socket here and one in the daemon, which has the same limit as we do.
    let needed = viewers as u64 + 256;
    if let Some(limit) = ctx.nofile.filter(|&l| l < needed) {
        bail!("the open-file limit is {limit}; {viewers} viewers need about {needed}");
    }
    let mut daemon = Daemon::start(ctx, "memory")?;
    let idle = daemon.settled_memory().await?;

    let mut ids = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let id = daemon
            .create_session("idle")
            .await
            .with_context(|| format!("creating idle session {i}"))?;
        ids.push(id);
    }
    let limit = STEP_TIMEOUT + Duration::from_millis(50 * sessions as u64);
    daemon.wait_running(&ids, "sleep", limit).await?;
    let with_sessions = daemon.settled_memory().await?;

    // The viewers' session is one more idle one, counted in their baseline.
    let id = daemon.create_session("idle").await?;
    daemon.wait_running(&[id], "sleep", STEP_TIMEOUT).await?;
    let before_viewers = daemon.settled_memory().await?;

    let mut tasks = Tasks::default();
    let gate = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    // Viewers dropped or sent an error after joining: none expected.
    let dropped = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    for v in 0..viewers {
        let (url, gate, tx, dropped) =
            (daemon.ws(id, ""), gate.clone(), tx.clone(), dropped.clone());
        let task = ctx.pool.spawn(async move {
            let joined = async {
                let _permit = gate.acquire_owned().await?;
                Conn::open(url).await
            }
            .await;
            match joined {
                Ok(conn) => {
                    let _ = tx.send(Ok(()));
                    idle_reader(conn.ws, dropped).await;
                }
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("viewer {v}: {e:#}")));
                }
            }
        });
        tasks.0.push(task.abort_handle());
    }
    drop(tx);
    let limit = STEP_TIMEOUT + Duration::from_millis(50 * viewers as u64);
    for joined in 0..viewers {
        match timeout_at((start + limit).into(), rx.recv()).await {
            Err(_) => bail!("{joined} of {viewers} viewers joined within {limit:?}"),
            Ok(None) => bail!("a viewer task ended without reporting"),
            Ok(Some(result)) => result?,
        }
    }
    let connect_seconds = start.elapsed().as_secs_f64();
    daemon
        .wait_viewer_gauge(viewers as u64, STEP_TIMEOUT)
        .await?;
    let with_viewers = daemon.settled_memory().await?;
    let dropped = dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        bail!("{dropped} idle viewers were dropped or sent an error");
    }

    drop(tasks);
    let daemon_resyncs = daemon.finish("memory", notes);
    Ok(MemoryRow {
        idle,
        sessions,
        with_sessions,
        viewers,
        before_viewers,
        with_viewers,
        connect_seconds,
        daemon_resyncs,
    })
}

/// Reads everything (status updates as others join), like an open browser tab; counts itself in
/// `dropped` if the connection ends or the server sends an error.
async fn idle_reader(mut ws: Ws, dropped: Arc<AtomicUsize>) {
    while let Some(Ok(msg)) = ws.next().await {
        match msg {
            Message::Text(t) if t.contains("\"error\"") => break,
            Message::Close(_) => break,
            _ => {}
        }
    }
    dropped.fetch_add(1, Ordering::Relaxed);
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
    if s.scenarios.contains(&Scenario::Echo) {
        println!(
            "echo's idle viewers at nice {} (the typist and the daemon at the default priority)",
            s.viewer_nice
        );
    }
    let mut out = serde_json::Map::new();

    if !r.echo.is_empty() {
        println!();
        println!(
            "echo: 1-byte round trip through raw-mode cat, {} samples, {} ms apart (µs)",
            s.samples,
            s.pause.as_millis()
        );
        println!(
            "  (all_*: to the last idle viewer, whose threads ran at nice {}; bare_*: the same cat \
             on a bare PTY; relay_*: through a bare relay, plain TCP and two copying threads, to \
             as many viewers)",
            s.viewer_nice
        );
        println!(
            "{:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>11} {:>11} {:>11} {:>7}",
            "viewers",
            "p50_us",
            "p99_us",
            "max_us",
            "all_p50_us",
            "all_p99_us",
            "bare_p50",
            "bare_p99",
            "relay_p50",
            "relay_p99",
            "relay_all99",
            "join_p50_ms",
            "join_max_ms",
            "resyncs"
        );
        let mut rows = Vec::new();
        for e in &r.echo {
            let join_max = e.joins.last().map(|d| d.as_micros() as u64);
            println!(
                "{:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>11} {:>11} {:>11} {:>7}",
                e.viewers,
                opt(pct_us(&e.rtt, 0.5)),
                opt(pct_us(&e.rtt, 0.99)),
                opt(pct_us(&e.rtt, 1.0)),
                opt(pct_us(&e.all, 0.5)),
                opt(pct_us(&e.all, 0.99)),
                opt(pct_us(&e.bare, 0.5)),
                opt(pct_us(&e.bare, 0.99)),
                opt(pct_us(&e.relay, 0.5)),
                opt(pct_us(&e.relay, 0.99)),
                opt(pct_us(&e.relay_all, 0.99)),
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
                "relay_p50_us": pct_us(&e.relay, 0.5),
                "relay_p99_us": pct_us(&e.relay, 0.99),
                "relay_max_us": pct_us(&e.relay, 1.0),
                "relay_all_p50_us": pct_us(&e.relay_all, 0.5),
                "relay_all_p99_us": pct_us(&e.relay_all, 0.99),
                "join_p50_us": pct_us(&e.joins, 0.5),
                "join_max_us": join_max,
                "viewer_snapshots": e.snapshots,
                "daemon_resyncs": e.daemon_resyncs,
                "viewer_nice": s.viewer_nice,
            }));
        }
        out.insert("echo".into(), Value::Array(rows));
    }

    if !r.flood.is_empty() {
        println!();
        println!("flood: `cat` of base64 text to every viewer, against the same on a bare PTY");
        println!(
            "  (every run checks that a joiner then sees the file's last lines and the marker; \
             seconds: until every viewer has the end marker; the median run by ratio of {}, \
             ratio_min/max over them; cpu_s: the daemon's CPU seconds, gen_cpu_s: the \
             generator's; busy, bare_busy: the whole machine, fraction of all cores; delivered: \
             output and snapshot bytes, all viewers; skip_MiB: output the daemon's screen model \
             did not need to parse; snapshots, resyncs: the daemon's /metrics during the flood)",
            s.flood_repeat
        );
        println!(
            "{:>7} {:>4} {:>9} {:>9} {:>6} {:>9} {:>9} {:>8} {:>9} {:>5} {:>9} {:>14} {:>12} {:>12} {:>8} {:>9} {:>8}",
            "viewers",
            "MiB",
            "seconds",
            "bare_s",
            "ratio",
            "ratio_min",
            "ratio_max",
            "cpu_s",
            "gen_cpu_s",
            "busy",
            "bare_busy",
            "delivered",
            "bytes_mean",
            "bytes_min",
            "skip_MiB",
            "snapshots",
            "resyncs"
        );
        let mut rows = Vec::new();
        for f in &r.flood {
            let (ratio_min, ratio_max) = spread(&f.ratios);
            println!(
                "{:>7} {:>4} {:>9.3} {:>9.3} {:>6.2} {:>9.2} {:>9.2} {:>8.2} {:>9.2} {:>5.2} {:>9.2} {:>14} {:>12} {:>12} {:>8.1} {:>9} {:>8}",
                f.viewers,
                f.mb,
                f.seconds,
                f.bare_seconds,
                f.ratio,
                ratio_min,
                ratio_max,
                f.daemon_cpu_s,
                f.gen_cpu_s,
                f.busy,
                f.bare_busy,
                f.bytes_total,
                f.bytes_mean,
                f.bytes_min,
                f.parse_skipped as f64 / f64::from(1 << 20),
                f.snapshots_sent,
                f.resyncs
            );
            rows.push(json!({
                "viewers": f.viewers,
                "mb": f.mb,
                "file_bytes": f.file_bytes,
                "seconds": round3(f.seconds),
                "daemon_cpu_s": round3(f.daemon_cpu_s),
                "gen_cpu_s": round3(f.gen_cpu_s),
                "busy": round3(f.busy),
                "bytes_per_viewer": f.bytes_mean,
                "bytes_min": f.bytes_min,
                "bytes_delivered": f.bytes_total,
                "snapshots_used": f.snapshots_sent,
                "resyncs_used": f.resyncs,
                "parse_skipped_bytes": f.parse_skipped,
                "snapshots": f.snapshots,
                "bare_pty_seconds": round3(f.bare_seconds),
                "bare_busy": round3(f.bare_busy),
                "ratio": round3(f.ratio),
                "ratio_min": round3(ratio_min),
                "ratio_max": round3(ratio_max),
                "ratios": f.ratios.iter().map(|&r| round3(r)).collect::<Vec<_>>(),
                "daemon_resyncs": f.daemon_resyncs,
            }));
        }
        out.insert("flood".into(), Value::Array(rows));
    }

    if !r.stall.is_empty() {
        println!();
        println!("stall: flood time to the healthy viewers with one more viewer that never reads");
        println!(
            "  (the median of {} pairs of runs, in alternating order, by ratio; ratio_min/max over them; cpu_*: the \
             daemon's CPU seconds, cpu_ratio: the median over the pairs of with/without; \
             gen_cpu_*: the generator's CPU seconds, busy_*: the whole machine, fraction of all \
             cores; *_wo: without the stalled viewer, *_w: with it)",
            s.flood_repeat
        );
        println!(
            "{:>7} {:>4} {:>10} {:>10} {:>6} {:>9} {:>9} {:>6} {:>6} {:>9} {:>10} {:>9} {:>7} {:>6} {:>16} {:>9} {:>8}",
            "viewers",
            "MiB",
            "without_s",
            "with_s",
            "ratio",
            "ratio_min",
            "ratio_max",
            "cpu_wo",
            "cpu_w",
            "cpu_ratio",
            "gen_cpu_wo",
            "gen_cpu_w",
            "busy_wo",
            "busy_w",
            "healthy_snapshots",
            "snapshots",
            "resyncs"
        );
        let mut rows = Vec::new();
        for t in &r.stall {
            let (ratio_min, ratio_max) = spread(&t.ratios);
            let cpu_ratio = median_by(t.cpu_ratios.clone(), |&r| r).map_or(f64::NAN, |(r, _)| r);
            println!(
                "{:>7} {:>4} {:>10.3} {:>10.3} {:>6.3} {:>9.3} {:>9.3} {:>6.2} {:>6.2} {:>9.3} {:>10.2} {:>9.2} {:>7.2} {:>6.2} {:>16} {:>9} {:>8}",
                t.viewers,
                t.mb,
                t.baseline_seconds,
                t.stalled_seconds,
                t.ratio,
                ratio_min,
                ratio_max,
                t.cpu_without,
                t.cpu_with,
                cpu_ratio,
                t.gen_cpu_without,
                t.gen_cpu_with,
                t.busy_without,
                t.busy_with,
                t.snapshots,
                t.snapshots_sent,
                t.resyncs
            );
            rows.push(json!({
                "viewers": t.viewers,
                "mb": t.mb,
                "seconds_without": round3(t.baseline_seconds),
                "seconds_with": round3(t.stalled_seconds),
                "ratio": round3(t.ratio),
                "ratios": t.ratios.iter().map(|&r| round3(r)).collect::<Vec<_>>(),
                "cpu_s_without": round3(t.cpu_without),
                "cpu_s_with": round3(t.cpu_with),
                "cpu_ratio": round3(cpu_ratio),
                "cpu_ratios": t.cpu_ratios.iter().map(|&r| round3(r)).collect::<Vec<_>>(),
                "gen_cpu_s_without": round3(t.gen_cpu_without),
                "gen_cpu_s_with": round3(t.gen_cpu_with),
                "busy_without": round3(t.busy_without),
                "busy_with": round3(t.busy_with),
                "healthy_snapshots": t.snapshots,
                "snapshots_used": t.snapshots_sent,
                "resyncs_used": t.resyncs,
                "daemon_resyncs": t.daemon_resyncs,
            }));
        }
        out.insert("stall".into(), Value::Array(rows));
    }

    if let Some(j) = &r.join {
        println!();
        println!(
            "join: connect to the whole snapshot and `ready`, {} joins one after the other, to a \
             full {JOIN_ROWS}x{JOIN_COLS} coloured screen with {JOIN_SCROLLBACK} lines of scrollback",
            j.joins
        );
        println!(
            "{:>6} {:>7} {:>7} {:>7} {:>9} {:>7} {:>10} {:>9}",
            "joins", "p50_ms", "p99_ms", "max_ms", "gzip_B", "chunks", "ansi_B", "snapshots"
        );
        println!(
            "{:>6} {:>7} {:>7} {:>7} {:>9} {:>7} {:>10} {:>9}",
            j.joins,
            ms(pct_us(&j.times, 0.5)),
            ms(pct_us(&j.times, 0.99)),
            ms(pct_us(&j.times, 1.0)),
            j.gzip_bytes,
            j.chunks,
            j.ansi_bytes,
            j.snapshots_sent
        );
        out.insert(
            "join".into(),
            json!({
                "joins": j.joins,
                "rows": JOIN_ROWS,
                "cols": JOIN_COLS,
                "scrollback_lines": JOIN_SCROLLBACK,
                "p50_us": pct_us(&j.times, 0.5),
                "p99_us": pct_us(&j.times, 0.99),
                "max_us": pct_us(&j.times, 1.0),
                "snapshot_gzip_bytes": j.gzip_bytes,
                "snapshot_chunks": j.chunks,
                "snapshot_ansi_bytes": j.ansi_bytes,
                "snapshots_sent": j.snapshots_sent,
                "daemon_resyncs": j.daemon_resyncs,
            }),
        );
    }

    if let Some(m) = &r.memory {
        println!();
        println!(
            "memory: daemon RSS in KiB once settled (anon: of which heap and stacks); viewers idle \
             in one idle session, joined {CONNECT_CONCURRENCY} at a time"
        );
        println!(
            "{:>9} {:>8} {:>10} {:>11} {:>8} {:>10} {:>11} {:>16} {:>9} {:>7}",
            "idle_kib",
            "sessions",
            "total_kib",
            "per_session",
            "viewers",
            "total_kib",
            "per_viewer",
            "per_viewer_anon",
            "connect_s",
            "threads"
        );
        println!(
            "{:>9} {:>8} {:>10} {:>11.1} {:>8} {:>10} {:>11.1} {:>16.1} {:>9.2} {:>7}",
            m.idle.rss_kib,
            m.sessions,
            m.with_sessions.rss_kib,
            m.per_session_kib(),
            m.viewers,
            m.with_viewers.rss_kib,
            m.per_viewer_kib(),
            m.per_viewer_anon_kib(),
            m.connect_seconds,
            m.with_viewers.threads
        );
        out.insert(
            "memory".into(),
            json!({
                "idle_rss_kib": m.idle.rss_kib,
                "idle_anon_kib": m.idle.anon_kib,
                "sessions": m.sessions,
                "sessions_rss_kib": m.with_sessions.rss_kib,
                "per_session_kib": (m.per_session_kib() * 10.0).round() / 10.0,
                "viewers": m.viewers,
                "viewers_base_rss_kib": m.before_viewers.rss_kib,
                "viewers_rss_kib": m.with_viewers.rss_kib,
                "per_viewer_kib": (m.per_viewer_kib() * 10.0).round() / 10.0,
                "per_viewer_anon_kib": (m.per_viewer_anon_kib() * 10.0).round() / 10.0,
                "viewers_connect_seconds": round3(m.connect_seconds),
                "threads": {
                    "idle": m.idle.threads,
                    "sessions": m.with_sessions.threads,
                    "viewers": m.with_viewers.threads,
                },
                "daemon_resyncs": m.daemon_resyncs,
            }),
        );
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
    out.insert(
        "settings".into(),
        json!({ "echo_viewer_nice": s.viewer_nice, "flood_repeat": s.flood_repeat }),
    );
    out.insert("notes".into(), json!(r.notes));
    out.insert("errors".into(), json!(r.errors));
    println!();
    println!("{}", Value::Object(out));
}
