//! Load generator for ptyhub: drives a real daemon over 127.0.0.1 and measures keystroke echo with
//! idle viewers (against a bare PTY and a bare relay in the same run), floods to many viewers
//! (against a bare PTY in the same run), the stalled-viewer cost, joining a full screen (open to
//! full snapshot), the daemon's memory when idle, per idle session and per idle viewer (and the
//! total PSS of one idle shell session, and RSS after a flood), and
//! exec (output through pipe mode and SSE against a bare pipe, short execs at a steady rate), and
//! what recording sessions costs (a flood to 10 viewers and idle sessions, recording on vs off),
//! and live upgrades (SIGUSR2 to every viewer's screen back, and no counter line lost), and a
//! flood to viewers reading at a browser's pace (`slow`), and the WebSocket upgrade against a
//! bare hyper server's (`handshake`); `--busy-core` runs it all beside a
//! second process keeping one core busy. The
//! soak (`--soak MINUTES`) runs a day's mix of operations against one daemon and checks that it
//! gives back what it takes: RSS, fds, threads, processes, and every byte.
//!
//! Run: `cargo bench --bench load -- [--quick] [--scenarios echo,dialects,attach,flood,stall,join,memory,exec,record,upgrade,busy,board,soak,deploy,slow,handshake]
//! [--viewers 0,10,100] [--samples 500] [--pause-ms 5] [--echo-gaps-ms 5,0] [--viewer-nice 10] [--flood-viewers 1,10,100]
//! [--flood-mb 50] [--flood-repeat 3] [--stall-viewers 10] [--joins 200] [--mem-sessions 100]
//! [--mem-viewers 1000] [--exec-mb 100] [--exec-rate 100] [--exec-seconds 5] [--upgrade-sessions 10,100]
//! [--upgrades 5] [--deploy-viewers 10] [--slow-viewers 100] [--slow-mb 20] [--slow-pace-mbps 4]
//! [--busy-core] [--soak 30 | --soak-seconds 60] [--soak-warmup-seconds 180]
//! [--soak-workers 3] [--seed 1]`. All scenarios but the soak run by default (`--soak` alone runs
//! only the soak); `--quick` is a smoke run of all of them in about a minute. Prints a table, then
//! one JSON line (the last line of stdout); exits non-zero when a run or an invariant failed, and
//! then keeps the daemons' logs. Set `PTYHUB_BIN` to measure another daemon binary. Generator and
//! daemon share the machine's cores, so floods also report the generator's CPU and how busy the
//! whole machine was.
//!
//! This file is the entry point (flags, runtimes, the order of scenarios); `load/` holds one
//! file per scenario, the daemon's config and handle (`daemon`, on the launcher shared with the
//! integration tests, `tests/common/launcher.rs`), the WebSocket client
//! (`client`), the `/proc` readers (`procfs`), the bare-PTY and bare-relay baselines (`bare`) and
//! the report (`report`); `load/soak/` the soak's workload and viewers. They are `#[path]`
//! modules: a `.rs` file directly in `benches/` would be a bench target of its own.

#[path = "load/attach.rs"]
mod attach;
#[path = "load/bare.rs"]
mod bare;
#[path = "load/board.rs"]
mod board;
#[path = "load/busy.rs"]
mod busy;
#[path = "load/client.rs"]
mod client;
#[path = "load/daemon.rs"]
mod daemon;
#[path = "load/deploy.rs"]
mod deploy;
#[path = "load/dialects.rs"]
mod dialects;
#[path = "load/echo.rs"]
mod echo;
#[path = "load/exec.rs"]
mod exec;
#[path = "load/flood.rs"]
mod flood;
#[path = "load/footprint.rs"]
mod footprint;
#[path = "load/handshake.rs"]
mod handshake;
#[path = "load/join.rs"]
mod join;
#[path = "../tests/common/launcher.rs"]
mod launcher;
#[path = "load/memory.rs"]
mod memory;
#[path = "../tests/common/nginx.rs"]
mod nginx;
#[path = "load/procfs.rs"]
mod procfs;
#[path = "load/record.rs"]
mod record;
#[path = "load/report.rs"]
mod report;
#[path = "load/slow.rs"]
mod slow;
#[path = "load/soak.rs"]
mod soak;
#[path = "load/stall.rs"]
mod stall;
#[path = "load/upgrade.rs"]
mod upgrade;
#[path = "load/wire.rs"]
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use tokio::runtime::Handle;

use crate::daemon::{config_recording, daemon_binary, CONFIG, NO_RECORDING_CONFIG};
use crate::flood::{make_flood_file, FloodFile};
use crate::procfs::{raise_nofile, renice_this_thread};
use crate::report::{print_report, Report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    Echo,
    Dialects,
    Attach,
    Flood,
    Stall,
    Join,
    Memory,
    Exec,
    Record,
    Upgrade,
    Busy,
    /// One open board with 100 sessions, 10 of them printing at full speed, against none.
    Board,
    Soak,
    /// Echo and flood through ptyhub's TLS vs plain, and through nginx vs direct.
    Deploy,
    /// A flood to many viewers that read at a browser's pace, to every viewer's final screen.
    Slow,
    /// The WebSocket upgrade against a bare hyper server's.
    Handshake,
}

/// ptyhub load generator (only talks to 127.0.0.1; every loop is bounded in count and time).
#[derive(Debug, Parser)]
struct Args {
    /// Scenarios to run, comma-separated [default: echo,dialects,attach,flood,stall,join,handshake,memory,exec,record,deploy,slow,busy,board; with --soak or
    /// --soak-seconds: soak]
    #[arg(long, value_delimiter = ',')]
    scenarios: Option<Vec<Scenario>>,
    /// echo: idle viewers per run [default: 0,10,100; --quick: 0,5]
    #[arg(long, value_delimiter = ',')]
    viewers: Option<Vec<usize>>,
    /// echo: round trips measured per run [default: 500; --quick: 50]
    #[arg(long)]
    samples: Option<usize>,
    /// echo and handshake: pause between two samples, in milliseconds (handshake: 0 upgrades
    /// back to back, its code and data warm).
    #[arg(long, default_value_t = 5)]
    pause_ms: u64,
    /// echo: gaps between keys, in milliseconds, each run for every viewer count; 0 sends the
    /// next key as soon as the typist has the previous echo, without waiting for the viewers
    /// (typing fast: the fan-out of one key overlaps the next) [default: 5,0; --quick: 5]
    #[arg(long, value_delimiter = ',')]
    echo_gaps_ms: Option<Vec<u64>>,
    /// echo: nice value of the idle viewers' threads (0: the typist's priority).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=19))]
    viewer_nice: i32,
    /// flood: viewers per run (the first one types the command) [default: 1,10,100; --quick: 1,3]
    #[arg(long, value_delimiter = ',')]
    flood_viewers: Option<Vec<usize>>,
    /// flood and stall: MiB of base64 text [default: 50; --quick: 2]
    #[arg(long)]
    flood_mb: Option<usize>,
    /// flood and stall: colour the text as `ls --color` and compilers do (an SGR around every
    /// word, 16, 256 and RGB colours, erases in the line), still the same size.
    #[arg(long)]
    flood_colour: bool,
    /// flood and stall: runs of each configuration (flood: each with its own bare-PTY baseline;
    /// stall: pairs without and with the stalled viewer, in alternating order); the median by
    /// ratio is reported [default: 3; --quick: 1]
    #[arg(long)]
    flood_repeat: Option<usize>,
    /// stall: healthy viewers next to the stalled one [default: 10; --quick: 2]
    #[arg(long)]
    stall_viewers: Option<usize>,
    /// join and handshake: joins (upgrades to each side) measured, one after the other
    /// [default: 200; --quick: 20]
    #[arg(long)]
    joins: Option<usize>,
    /// busy: sessions printing about 1 MB/s each (runs: --flood-repeat) [default: 20; --quick: 3]
    #[arg(long)]
    busy_sessions: Option<usize>,
    /// busy: viewers of each printing session
    #[arg(long, default_value_t = 5)]
    busy_viewers: usize,
    /// board: sessions on the board [default: 100; --quick: 20]
    #[arg(long)]
    board_sessions: Option<usize>,
    /// board: of them, sessions printing at full speed [default: 10; --quick: 3]
    #[arg(long)]
    board_busy: Option<usize>,
    /// board: seconds of each phase [default: 5; --quick: 2]
    #[arg(long)]
    board_seconds: Option<u64>,
    /// memory: idle sessions created [default: 100; --quick: 10]
    #[arg(long)]
    mem_sessions: Option<usize>,
    /// memory: idle viewers joined to one session [default: 1000; --quick: 50]
    #[arg(long)]
    mem_viewers: Option<usize>,
    /// exec: MiB of base64 sent through one exec per transport [default: 100; --quick: 5]
    #[arg(long)]
    exec_mb: Option<usize>,
    /// exec: short execs (`true`) started per second
    #[arg(long, default_value_t = 100)]
    exec_rate: usize,
    /// exec: seconds of short execs [default: 5; --quick: 2]
    #[arg(long)]
    exec_seconds: Option<u64>,
    /// upgrade: sessions per run, each with a viewer [default: 10,100; --quick: 10]
    #[arg(long, value_delimiter = ',')]
    upgrade_sessions: Option<Vec<usize>>,
    /// upgrade: live upgrades per run [default: 5; --quick: 2]
    #[arg(long)]
    upgrades: Option<usize>,
    /// deploy: viewers of each path's flood (the first types) [default: 10; --quick: 2]
    #[arg(long)]
    deploy_viewers: Option<usize>,
    /// slow: viewers reading at a browser's pace [default: 100; --quick: 8]
    #[arg(long)]
    slow_viewers: Option<usize>,
    /// slow: MiB of base64 text [default: 20; --quick: 2]
    #[arg(long)]
    slow_mb: Option<usize>,
    /// slow: MB/s each viewer reads (every fourth a quarter of it)
    #[arg(long, default_value_t = 4.0)]
    slow_pace_mbps: f64,
    /// A busy host: a second process keeps one core busy for the whole run (killed at its end).
    #[arg(long)]
    busy_core: bool,
    /// Run the daemons with a token (every connection presents it) instead of `--no-auth`, to
    /// compare the cost of authentication.
    #[arg(long)]
    auth: bool,
    /// soak: its length in minutes, warm-up included [default: 10; --quick: 1]
    #[arg(long, conflicts_with = "soak_seconds")]
    soak: Option<u64>,
    /// soak: its length in seconds (for a smoke run).
    #[arg(long)]
    soak_seconds: Option<u64>,
    /// soak: the warm-up, in seconds, after which the daemon's level is taken [default: a tenth
    /// of the run, 10 to 180 s]
    #[arg(long)]
    soak_warmup_seconds: Option<u64>,
    /// soak: workers, each running one session after the other.
    #[arg(long, default_value_t = 3)]
    soak_workers: usize,
    /// soak: the seed of every random choice (same seed, same sequence of operations).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Small numbers, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The run's parameters, defaults resolved.
pub(crate) struct Settings {
    pub(crate) scenarios: Vec<Scenario>,
    pub(crate) viewers: Vec<usize>,
    pub(crate) samples: usize,
    pub(crate) pause: Duration,
    pub(crate) echo_gaps: Vec<Duration>,
    pub(crate) viewer_nice: i32,
    pub(crate) flood_viewers: Vec<usize>,
    pub(crate) flood_mb: usize,
    pub(crate) flood_colour: bool,
    pub(crate) flood_repeat: usize,
    pub(crate) stall_viewers: usize,
    pub(crate) joins: usize,
    pub(crate) mem_sessions: usize,
    pub(crate) mem_viewers: usize,
    pub(crate) busy_sessions: usize,
    pub(crate) busy_viewers: usize,
    pub(crate) board_sessions: usize,
    pub(crate) board_busy: usize,
    pub(crate) board_seconds: u64,
    pub(crate) exec_mb: usize,
    pub(crate) exec_rate: usize,
    pub(crate) exec_seconds: u64,
    pub(crate) upgrade_sessions: Vec<usize>,
    pub(crate) upgrades: usize,
    pub(crate) soak: Duration,
    pub(crate) soak_warmup: Duration,
    pub(crate) soak_workers: usize,
    pub(crate) seed: u64,
    pub(crate) deploy_viewers: usize,
    pub(crate) slow_viewers: usize,
    pub(crate) slow_mb: usize,
    pub(crate) slow_pace_mbps: f64,
    pub(crate) busy_core: bool,
    pub(crate) auth: bool,
}

impl Settings {
    fn from_args(a: Args) -> Result<Settings> {
        let q = a.quick;
        let soak = match (a.soak, a.soak_seconds) {
            (Some(m), _) => Some(Duration::from_secs(m * 60)),
            (_, Some(s)) => Some(Duration::from_secs(s)),
            _ => None,
        };
        let scenarios = a.scenarios.unwrap_or_else(|| {
            if soak.is_some() {
                vec![Scenario::Soak]
            } else {
                vec![
                    Scenario::Echo,
                    Scenario::Dialects,
                    Scenario::Attach,
                    Scenario::Flood,
                    Scenario::Stall,
                    Scenario::Join,
                    Scenario::Handshake,
                    Scenario::Memory,
                    Scenario::Exec,
                    Scenario::Record,
                    Scenario::Upgrade,
                    Scenario::Deploy,
                    Scenario::Slow,
                    Scenario::Busy,
                    Scenario::Board,
                ]
            }
        });
        let soak = soak.unwrap_or(Duration::from_secs(if q { 60 } else { 600 }));
        let soak_warmup = a.soak_warmup_seconds.map_or_else(
            || (soak / 10).clamp(Duration::from_secs(10), Duration::from_secs(180)),
            Duration::from_secs,
        );
        if soak_warmup >= soak {
            bail!("--soak-warmup-seconds must be shorter than the soak");
        }
        if a.soak_workers == 0 {
            bail!("--soak-workers must be at least 1");
        }
        let s = Settings {
            scenarios,
            soak,
            soak_warmup,
            soak_workers: a.soak_workers,
            seed: a.seed,
            deploy_viewers: a.deploy_viewers.unwrap_or(if q { 2 } else { 10 }),
            slow_viewers: a.slow_viewers.unwrap_or(if q { 8 } else { 100 }),
            slow_mb: a.slow_mb.unwrap_or(if q { 2 } else { 20 }),
            slow_pace_mbps: a.slow_pace_mbps,
            busy_core: a.busy_core,
            auth: a.auth,
            viewers: a
                .viewers
                .unwrap_or(if q { vec![0, 5] } else { vec![0, 10, 100] }),
            samples: a.samples.unwrap_or(if q { 50 } else { 500 }),
            pause: Duration::from_millis(a.pause_ms),
            echo_gaps: a
                .echo_gaps_ms
                .unwrap_or(if q { vec![5] } else { vec![5, 0] })
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            viewer_nice: a.viewer_nice,
            flood_viewers: a
                .flood_viewers
                .unwrap_or(if q { vec![1, 3] } else { vec![1, 10, 100] }),
            flood_mb: a.flood_mb.unwrap_or(if q { 2 } else { 50 }),
            flood_colour: a.flood_colour,
            flood_repeat: a.flood_repeat.unwrap_or(if q { 1 } else { 3 }),
            stall_viewers: a.stall_viewers.unwrap_or(if q { 2 } else { 10 }),
            joins: a.joins.unwrap_or(if q { 20 } else { 200 }),
            mem_sessions: a.mem_sessions.unwrap_or(if q { 10 } else { 100 }),
            mem_viewers: a.mem_viewers.unwrap_or(if q { 50 } else { 1000 }),
            busy_sessions: a.busy_sessions.unwrap_or(if q { 3 } else { 20 }),
            busy_viewers: a.busy_viewers,
            board_sessions: a.board_sessions.unwrap_or(if q { 20 } else { 100 }),
            board_busy: a.board_busy.unwrap_or(if q { 3 } else { 10 }),
            board_seconds: a.board_seconds.unwrap_or(if q { 2 } else { 5 }).max(1),
            exec_mb: a.exec_mb.unwrap_or(if q { 5 } else { 100 }),
            exec_rate: a.exec_rate,
            exec_seconds: a.exec_seconds.unwrap_or(if q { 2 } else { 5 }),
            upgrade_sessions: a.upgrade_sessions.unwrap_or(if q {
                vec![10]
            } else {
                vec![10, 100]
            }),
            upgrades: a.upgrades.unwrap_or(if q { 2 } else { 5 }),
        };
        if [
            s.samples,
            s.flood_mb,
            s.flood_repeat,
            s.stall_viewers,
            s.joins,
            s.mem_sessions,
            s.mem_viewers,
            s.exec_mb,
            s.exec_rate,
            s.exec_seconds as usize,
            s.upgrades,
            s.deploy_viewers,
            s.slow_viewers,
            s.slow_mb,
        ]
        .contains(&0)
            || s.slow_pace_mbps.is_nan()
            || s.slow_pace_mbps <= 0.0
            || s.upgrade_sessions.contains(&0)
        {
            bail!(
                "--samples, --flood-mb, --flood-repeat, --stall-viewers, --joins, --mem-sessions \
                 --mem-viewers, --exec-mb, --exec-rate, --exec-seconds, --upgrades, \
                 --upgrade-sessions, --deploy-viewers, --slow-viewers and --slow-mb must be at \
                 least 1, --slow-pace-mbps above 0"
            );
        }
        if s.flood_viewers.contains(&0) {
            bail!("--flood-viewers: each run needs at least the viewer that types");
        }
        Ok(s)
    }
}

/// What every scenario needs.
pub(crate) struct Ctx {
    pub(crate) bin: PathBuf,
    pub(crate) dir: PathBuf,
    /// The flood file (base64 text), made once when a flood scenario runs.
    pub(crate) flood_file: Option<FloodFile>,
    /// Viewer connections run here (multi-threaded); the scenario drivers and the echo writer run
    /// on the current-thread runtime of the main thread, so nothing else delays their wake-ups.
    pub(crate) pool: Handle,
    /// echo's idle viewers: `pool`, or with `--viewer-nice` a runtime of their own whose threads
    /// run at that nice value (see `run`).
    pub(crate) echo_pool: Handle,
    /// The soft RLIMIT_NOFILE after raising it (`None`: unknown).
    pub(crate) nofile: Option<u64>,
    /// `--auth`: the token the daemons run with and every client presents.
    pub(crate) token: Option<String>,
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
    std::fs::write(tmp.path().join(CONFIG), config_recording(tmp.path(), true))
        .context("writing the config")?;
    std::fs::write(
        tmp.path().join(NO_RECORDING_CONFIG),
        config_recording(tmp.path(), false),
    )
    .context("writing the config without recording")?;
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
        token: settings
            .auth
            .then(|| "load-generator-token-0123456789abcdef".to_owned()),
    };
    eprintln!("load: daemon {}", ctx.bin.display());
    let busy_core = settings.busy_core.then(BusyCore::start).transpose()?;
    let mut report = driver.block_on(scenarios(&settings, &mut ctx))?;
    if busy_core.is_some() {
        report
            .notes
            .push("busy host: a second process kept one core busy throughout (--busy-core)".into());
    }
    if settings.auth {
        report
            .notes
            .push("auth on: the daemons ran with a token every client presented (--auth)".into());
    }
    drop(busy_core);
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
    if !report.errors.is_empty() {
        // The daemons' logs stay for a look at what went wrong; the bulky inputs go.
        if let Some(flood) = &ctx.flood_file {
            let _ = std::fs::remove_file(&flood.path);
        }
        let _ = std::fs::remove_dir_all(tmp.path().join("soak"));
        let kept = tmp.keep();
        report
            .notes
            .push(format!("the daemons' logs are kept in {}", kept.display()));
    }
    print_report(&settings, &report);
    Ok(report.errors.is_empty())
}

async fn scenarios(s: &Settings, ctx: &mut Ctx) -> Result<Report> {
    let mut report = Report::default();
    if [
        Scenario::Flood,
        Scenario::Stall,
        Scenario::Dialects,
        Scenario::Attach,
        Scenario::Record,
        Scenario::Deploy,
        Scenario::Busy,
        Scenario::Board,
    ]
    .iter()
    .any(|sc| s.scenarios.contains(sc))
    {
        let what = if s.flood_colour { "coloured " } else { "" };
        eprintln!("load: writing {} MiB of {what}base64", s.flood_mb);
        let mut file = make_flood_file(&ctx.dir, s.flood_mb)?;
        if s.flood_colour {
            file = flood::colour_flood_file(&ctx.dir, &file, s.flood_mb)?;
        }
        ctx.flood_file = Some(file);
    }
    for &scenario in &s.scenarios {
        match scenario {
            Scenario::Echo => echo::run(s, ctx, &mut report).await,
            Scenario::Dialects => dialects::run(s, ctx, &mut report).await,
            Scenario::Attach => attach::run(s, ctx, &mut report).await,
            Scenario::Flood => flood::run(s, ctx, &mut report).await,
            Scenario::Stall => stall::run(s, ctx, &mut report).await,
            Scenario::Join => join::run(s, ctx, &mut report).await,
            Scenario::Memory => memory::run(s, ctx, &mut report).await,
            Scenario::Exec => exec::run(s, ctx, &mut report).await,
            Scenario::Record => record::run(s, ctx, &mut report).await,
            Scenario::Upgrade => upgrade::run(s, ctx, &mut report).await,
            Scenario::Busy => busy::run(s, ctx, &mut report).await,
            Scenario::Board => board::run(s, ctx, &mut report).await,
            Scenario::Soak => soak::run(s, ctx, &mut report).await,
            Scenario::Deploy => deploy::run(s, ctx, &mut report).await,
            Scenario::Slow => slow::run(s, ctx, &mut report).await,
            Scenario::Handshake => handshake::run(s, ctx, &mut report).await,
        }
    }
    Ok(report)
}

/// `--busy-core`: a second process spinning on one core, as a busy host has; it ends when this
/// is dropped, and by itself after two hours should the generator be killed.
struct BusyCore(std::process::Child);

impl BusyCore {
    fn start() -> Result<BusyCore> {
        let child = std::process::Command::new("timeout")
            .args(["7200", "sh", "-c", "while :; do :; done"])
            .spawn()
            .context("starting the busy-core process (timeout, sh)")?;
        Ok(BusyCore(child))
    }
}

impl Drop for BusyCore {
    fn drop(&mut self) {
        // `timeout` passes the signal on to the spinning shell.
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.0.wait();
    }
}
