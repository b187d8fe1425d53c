//! soak: a bounded run of what a long day of use does to one daemon, checking that it gives back
//! everything it takes. Workers create sessions (REST), join and leave viewers (some stalled,
//! some dropped mid-stream without a close frame), paste (checked byte for byte in the file a
//! raw-mode `head -c` writes), flood (`yes | head -c`), run a counter (`seq 1 N`, whose every
//! line each viewer that saw it whole verifies), chat, upload (checked on disk), restart the
//! agent in and out of YOLO mode, resize, and end sessions (some after their program exited).
//! Visitors join and leave other workers' sessions meanwhile. Every choice comes from one seeded
//! generator, so a run's sequence of operations is repeatable (their interleaving is not).
//!
//! The daemon's RSS, open fds, threads and child processes are sampled throughout. After a
//! warm-up everything is closed and the daemon measured at rest; again between segments of the
//! load, and at the end. The run fails when RSS at the end is more than 10% over the level it
//! settled at (the median of its levels at rest before the end), when an fd or a thread is
//! left over, when a process of an ended session is left, or when a byte was lost or changed.
//! Its summary counts the daemon's WARN/ERROR lines by message: what an operator would find in
//! the journal.

#[path = "soak/viewer.rs"]
mod viewer;
#[path = "soak/work.rs"]
mod work;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::daemon::{Api, Daemon};
use crate::procfs::{children, fd_count, processes_of, MemSample};
use crate::report::{fail, round3, Report};
use crate::{Ctx, Settings};
use work::{visitors, worker, Rng};

/// RSS at the end may exceed its settled level at rest ([`SoakRow::settled_rss_kib`]) by this
/// fraction at most.
const RSS_TOLERANCE: f64 = 0.10;
/// Extra viewers a worker keeps on its own session, at most.
const MAX_EXTRAS: usize = 4;
/// Visitors (viewers of other workers' sessions) at once, at most.
const MAX_VISITORS: usize = 12;
/// How long the processes of an ended session may take to go (the config's kill grace is 1 s).
const END_LIMIT: Duration = Duration::from_secs(15);
/// How long the daemon gets to come to rest (no session, viewer, process; steady fds).
const QUIET_LIMIT: Duration = Duration::from_secs(90);
/// At rest, fds and threads must read the same for this long before they count.
const STEADY_FOR: Duration = Duration::from_secs(5);
/// Time for the operations still under way once a phase's time is up.
const PHASE_GRACE: Duration = Duration::from_secs(300);
/// Times the load stops for the daemon to be measured at rest, after the warm-up, in a run of
/// 5 minutes or more (the last is the end).
const REST_POINTS: u32 = 5;
/// Failures kept word for word (the count goes on).
const MAX_FAILURES_KEPT: usize = 50;
/// The largest paste, flood, upload (bytes) and counter (lines). A worker's first session in
/// the warm-up does one of each at this size, so the level after the warm-up has seen them.
const MAX_PASTE: u64 = 4 << 20;
const MAX_FLOOD: u64 = 8 << 20;
const MAX_UPLOAD: u64 = 8 << 20;
const MAX_COUNT: u64 = 300_000;

/// Runs the soak and files its table, or its failures.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    eprintln!(
        "load: soak, {} s (warm-up {} s), seed {}, {} workers",
        s.soak.as_secs(),
        s.soak_warmup.as_secs(),
        s.seed,
        s.soak_workers
    );
    match soak_run(s, ctx, &mut report.notes).await {
        Ok(row) => {
            for f in row.failures() {
                fail(report, format!("soak: {f}"));
            }
            report.soak = Some(row);
        }
        Err(e) => fail(report, format!("soak: {e:#}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The run

/// Everything the soak found.
pub(crate) struct SoakRow {
    seconds: f64,
    warmup_seconds: f64,
    seed: u64,
    workers: usize,
    sample_every: Duration,
    /// The daemon at rest after the warm-up and at the end.
    after_warmup: Quiet,
    /// At rest between the segments of the load (seconds into the run, and the daemon then).
    rests: Vec<(f64, Quiet)>,
    end: Quiet,
    samples: Vec<Sample>,
    counts: Vec<(&'static str, u64)>,
    /// Operations that failed (timeouts, wrong bytes, wrong replies), word for word up to
    /// `MAX_FAILURES_KEPT`, and how many in all.
    op_failures: Vec<String>,
    op_failure_count: u64,
    /// Processes of ended sessions found after `END_LIMIT` (each also an op failure).
    orphans_during: u64,
    /// Bytes lost or changed in pastes and uploads, and counters whose lines were wrong.
    lost_bytes: u64,
    counter_failures: u64,
    /// The daemon's WARN/ERROR lines over the run, counted by message, most frequent first.
    warnings: Vec<(usize, String)>,
}

impl SoakRow {
    /// The level RSS settled at: the median of the levels at rest before the end (after the
    /// warm-up and between segments; the higher middle one of an even count). Not the level after
    /// the warm-up alone: the allocator's memory climbs for minutes to a plateau (a 10-minute
    /// run: 6,000 KiB after its 60 s warm-up, then 6,552, 7,076, 7,148 and 7,188 KiB), so a
    /// short run that leaks nothing ended 13.5% over the warm-up's level. A leak grows with the
    /// work and still shows: growing by L a segment, the end is 3 L over this median (5 L over
    /// the warm-up's level). A run of one segment has only the warm-up's level to go by.
    fn settled_rss_kib(&self) -> u64 {
        let mut levels: Vec<u64> = std::iter::once(&self.after_warmup)
            .chain(self.rests.iter().map(|(_, q)| q))
            .map(|q| q.mem.rss_kib)
            .collect();
        levels.sort_unstable();
        levels[levels.len() / 2]
    }

    /// RSS at the end over its settled level.
    fn rss_change(&self) -> f64 {
        self.end.mem.rss_kib as f64 / self.settled_rss_kib().max(1) as f64 - 1.0
    }

    /// RSS at the end over its level after the warm-up (reported, not judged).
    fn rss_change_over_warmup(&self) -> f64 {
        self.end.mem.rss_kib as f64 / self.after_warmup.mem.rss_kib.max(1) as f64 - 1.0
    }

    fn leaked_fds(&self) -> i64 {
        self.end.fds as i64 - self.after_warmup.fds as i64
    }

    fn leaked_threads(&self) -> i64 {
        self.end.mem.threads as i64 - self.after_warmup.mem.threads as i64
    }

    fn orphans(&self) -> u64 {
        self.end.processes.len() as u64 + self.end.children as u64 + self.orphans_during
    }

    /// The invariants, each with whether it held.
    fn invariants(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("rss_within_10pct", self.rss_change() <= RSS_TOLERANCE),
            ("no_leaked_fds", self.leaked_fds() <= 0),
            ("no_orphan_processes", self.orphans() == 0),
            (
                "no_lost_bytes",
                self.lost_bytes == 0 && self.counter_failures == 0,
            ),
            ("no_failed_operations", self.op_failure_count == 0),
            ("daemon_at_rest", self.end.rest_problems.is_empty()),
        ]
    }

    /// What to report as failures.
    fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.rss_change() > RSS_TOLERANCE {
            out.push(format!(
                "RSS {} KiB at the end, {:+.1}% over the {} KiB it settled at (the median of its \
                 levels at rest before the end: {} KiB after the warm-up, then {}; limit +{:.0}%)",
                self.end.mem.rss_kib,
                self.rss_change() * 100.0,
                self.settled_rss_kib(),
                self.after_warmup.mem.rss_kib,
                self.rests
                    .iter()
                    .map(|(t, q)| format!("{} KiB at {t:.0} s", q.mem.rss_kib))
                    .collect::<Vec<_>>()
                    .join(", "),
                RSS_TOLERANCE * 100.0
            ));
        }
        if self.leaked_fds() > 0 {
            out.push(format!(
                "{} fds leaked: {} open at rest after the warm-up, {} at the end",
                self.leaked_fds(),
                self.after_warmup.fds,
                self.end.fds
            ));
        }
        if !self.end.processes.is_empty() || self.end.children > 0 {
            out.push(format!(
                "processes left at the end: {} of ended sessions (pids {:?}), {} children of the \
                 daemon ({} zombies)",
                self.end.processes.len(),
                self.end.processes,
                self.end.children,
                self.end.zombies
            ));
        }
        if self.lost_bytes > 0 || self.counter_failures > 0 {
            out.push(format!(
                "{} bytes lost or changed in pastes and uploads, {} counters wrong",
                self.lost_bytes, self.counter_failures
            ));
        }
        for p in &self.end.rest_problems {
            out.push(format!("at the end: {p}"));
        }
        if self.op_failure_count > 0 {
            out.push(format!(
                "{} operations failed (first {} below)",
                self.op_failure_count,
                self.op_failures.len()
            ));
            out.extend(self.op_failures.iter().cloned());
        }
        out
    }
}

/// The daemon at rest: no session, no viewer, nothing running.
#[derive(Clone)]
struct Quiet {
    mem: MemSample,
    fds: u64,
    /// Processes of our sessions still there (should be none).
    processes: Vec<i32>,
    /// Children of the daemon, and of them zombies (should be none).
    children: usize,
    zombies: usize,
    /// Sessions the daemon still lists and viewers it still counts (should be 0).
    sessions: usize,
    viewers: u64,
    /// What did not come to rest within `QUIET_LIMIT`.
    rest_problems: Vec<String>,
    /// Seconds it took to come to rest.
    waited: f64,
}

/// The daemon during the load, at one moment.
struct Sample {
    at: f64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
    /// Processes of our sessions, and the daemon's children.
    processes: usize,
    children: usize,
    /// Sessions and viewers the daemon counts (`/metrics`).
    sessions: u64,
    viewers: u64,
}

async fn soak_run(s: &Settings, ctx: &Ctx, notes: &mut Vec<String>) -> Result<SoakRow> {
    let mut daemon = Daemon::start(ctx, "soak")?;
    let pid = daemon.pid().context("daemon not running")?;
    let root = ctx.dir.join("soak");
    std::fs::create_dir_all(&root).context("creating the soak's directory")?;
    let env = Arc::new(Env {
        api: daemon.api(),
        root,
        counts: Counts::default(),
        failures: Mutex::new(Vec::new()),
        failure_count: AtomicU64::new(0),
        sessions: Mutex::new(HashSet::new()),
        live: Mutex::new(Vec::new()),
    });
    // A few dozen samples in a short run, one every 10 s in a long one.
    let sample_every = (s.soak / 180).clamp(Duration::from_secs(2), Duration::from_secs(10));
    let start = Instant::now();
    let mut samples = Vec::new();

    eprintln!("load: soak: warm-up");
    let warm_end = start + s.soak_warmup;
    phase(
        s,
        ctx,
        &env,
        0,
        warm_end,
        pid,
        start,
        sample_every,
        &mut samples,
    )
    .await;
    eprintln!("load: soak: warm-up done, closing everything");
    let after_warmup = quiesce(&env, &daemon, pid, None).await?;
    eprintln!(
        "load: soak: at rest after the warm-up: RSS {} KiB, {} fds, {} threads",
        after_warmup.mem.rss_kib, after_warmup.fds, after_warmup.mem.threads
    );
    if !after_warmup.rest_problems.is_empty() {
        env.fail(format!(
            "after the warm-up: {}",
            after_warmup.rest_problems.join("; ")
        ));
    }

    // The rest of the run in segments, each ending at rest: the levels at rest over the run
    // tell a leak (growing with the work done) from memory the allocator keeps (a plateau).
    let end_at = start + s.soak;
    let segments = if s.soak - s.soak_warmup >= Duration::from_secs(300) {
        REST_POINTS
    } else {
        1
    };
    let segment = (s.soak - s.soak_warmup) / segments;
    let mut rests = Vec::new();
    for i in 1..=u64::from(segments) {
        let until = if i == u64::from(segments) {
            end_at
        } else {
            Instant::now() + segment
        };
        eprintln!("load: soak: load, segment {i} of {segments}");
        phase(
            s,
            ctx,
            &env,
            i,
            until,
            pid,
            start,
            sample_every,
            &mut samples,
        )
        .await;
        eprintln!("load: soak: closing everything");
        let rest = quiesce(&env, &daemon, pid, Some(&after_warmup)).await?;
        eprintln!(
            "load: soak: at rest after {:.0} s: RSS {} KiB, {} fds, {} threads",
            start.elapsed().as_secs_f64(),
            rest.mem.rss_kib,
            rest.fds,
            rest.mem.threads
        );
        rests.push((start.elapsed().as_secs_f64(), rest));
    }
    let (seconds, end) = rests.pop().context("no segment ran")?;

    let sessions: Vec<Uuid> = lock(&env.sessions).iter().copied().collect();
    daemon.sessions.extend(sessions);
    let warnings = daemon.warnings_by_message();
    daemon.finish("soak", notes);
    let c = &env.counts;
    let op_failures = lock(&env.failures).clone();
    Ok(SoakRow {
        seconds,
        warmup_seconds: s.soak_warmup.as_secs_f64(),
        seed: s.seed,
        workers: s.soak_workers,
        sample_every,
        after_warmup,
        rests,
        end,
        samples,
        counts: c.list(),
        op_failures,
        op_failure_count: env.failure_count.load(Ordering::Relaxed),
        orphans_during: c.orphan_sessions.load(Ordering::Relaxed),
        lost_bytes: c.lost_bytes.load(Ordering::Relaxed),
        counter_failures: c.counter_failures.load(Ordering::Relaxed),
        warnings,
    })
}

/// One phase: `s.soak_workers` workers and the visitors until `until`, sampling the daemon
/// meanwhile; then waits (bounded) for their last operations.
#[allow(clippy::too_many_arguments)]
async fn phase(
    s: &Settings,
    ctx: &Ctx,
    env: &Arc<Env>,
    phase: u64,
    until: Instant,
    pid: i32,
    start: Instant,
    every: Duration,
    samples: &mut Vec<Sample>,
) {
    let mut seeds = Rng::new(s.seed ^ phase.wrapping_mul(0xA076_1D64_78BD_642F));
    let mut handles: Vec<JoinHandle<()>> = (0..s.soak_workers)
        .map(|w| {
            let rng = seeds.fork();
            ctx.pool.spawn(worker(w, phase, rng, env.clone(), until))
        })
        .collect();
    handles.push(ctx.pool.spawn(visitors(seeds.fork(), env.clone(), until)));
    let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
    let mut all = futures_util::future::join_all(handles);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            results = &mut all => {
                for r in results {
                    if let Err(e) = r {
                        env.fail(format!("a worker task failed: {e}"));
                    }
                }
                break;
            }
            _ = tick.tick() => {
                match sample(&env.api, env, pid, start).await {
                    Ok(x) => samples.push(x),
                    Err(e) => env.fail(format!("sampling the daemon: {e:#}")),
                }
                if Instant::now() > until + PHASE_GRACE {
                    env.fail(format!(
                        "workers still busy {PHASE_GRACE:?} after the phase's end: aborted"
                    ));
                    for a in &aborts {
                        a.abort();
                    }
                }
            }
        }
    }
}

/// Reads the daemon's memory, fds, threads and processes now.
async fn sample(api: &Api, env: &Env, pid: i32, start: Instant) -> Result<Sample> {
    let mem = crate::procfs::mem_sample(pid)?;
    let fds = fd_count(pid)?;
    let ours = lock(&env.sessions).clone();
    let metrics = api.metrics().await?;
    Ok(Sample {
        at: start.elapsed().as_secs_f64(),
        rss_kib: mem.rss_kib,
        fds,
        threads: mem.threads,
        processes: processes_of(&ours).len(),
        children: children(pid).len(),
        sessions: metrics.get("ptyhub_sessions{state=\"running\"}")
            + metrics.get("ptyhub_sessions{state=\"exited\"}"),
        viewers: metrics.get("ptyhub_viewers"),
    })
}

/// Ends whatever a failed round left, then waits for the daemon to come to rest: no session,
/// no viewer, no process of ours, no child; fds and threads steady (and, given the level after
/// the warm-up, back to it); RSS settled.
async fn quiesce(env: &Env, daemon: &Daemon, pid: i32, base: Option<&Quiet>) -> Result<Quiet> {
    let start = Instant::now();
    let deadline = start + QUIET_LIMIT;
    let mut problems = Vec::new();
    let left: Vec<Uuid> = lock(&env.live).drain(..).collect();
    for id in left {
        let _ = env.api.delete(id).await;
        env.fail(format!(
            "session {id} was still open after its worker ended"
        ));
    }
    let (mut sessions, mut viewers) = (0, 0);
    loop {
        sessions = env.api.session_count().await.unwrap_or(sessions);
        viewers = env
            .api
            .metrics()
            .await
            .map_or(viewers, |m| m.get("ptyhub_viewers"));
        if sessions == 0 && viewers == 0 {
            break;
        }
        if Instant::now() >= deadline {
            problems.push(format!(
                "the daemon still lists {sessions} sessions and counts {viewers} viewers"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ours = lock(&env.sessions).clone();
    let (mut processes, mut kids);
    loop {
        processes = processes_of(&ours)
            .into_iter()
            .map(|(p, _)| p)
            .collect::<Vec<_>>();
        kids = children(pid);
        if (processes.is_empty() && kids.is_empty()) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Steady: the same fds and threads for `STEADY_FOR` (a blocking-pool thread lingers 10 s
    // after its last job; a closed connection may take a moment to be dropped).
    let mut last = None;
    let mut steady_since = Instant::now();
    let (fds, _threads) = loop {
        let now = (fd_count(pid)?, crate::procfs::mem_sample(pid)?.threads);
        if last != Some(now) {
            last = Some(now);
            steady_since = Instant::now();
        }
        let back = base.is_none_or(|b| now.0 <= b.fds && now.1 <= b.mem.threads);
        if (back && steady_since.elapsed() >= STEADY_FOR) || Instant::now() >= deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mem = daemon.settled_memory().await?;
    Ok(Quiet {
        mem,
        fds,
        zombies: kids.iter().filter(|(_, state)| *state == 'Z').count(),
        children: kids.len(),
        processes,
        sessions,
        viewers,
        rest_problems: problems,
        waited: start.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------------------------
// Shared state

/// What every task of the soak shares.
struct Env {
    api: Api,
    /// The sessions' working directories are made below this.
    root: PathBuf,
    counts: Counts,
    failures: Mutex<Vec<String>>,
    failure_count: AtomicU64,
    /// Every session created, to find their processes.
    sessions: Mutex<HashSet<Uuid>>,
    /// Sessions open now, for visitors.
    live: Mutex<Vec<Uuid>>,
}

impl Env {
    fn fail(&self, msg: String) {
        eprintln!("load: soak FAILED {msg}");
        self.failure_count.fetch_add(1, Ordering::Relaxed);
        let mut kept = lock(&self.failures);
        if kept.len() < MAX_FAILURES_KEPT {
            kept.push(msg);
        }
    }

    fn add(&self, counter: impl Fn(&Counts) -> &AtomicU64, n: u64) {
        counter(&self.counts).fetch_add(n, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

macro_rules! counts {
    ($($name:ident: $doc:literal,)*) => {
        /// How many of each operation the soak did, and what it checked.
        #[derive(Default)]
        struct Counts {
            $(#[doc = $doc] $name: AtomicU64,)*
        }

        impl Counts {
            fn list(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counts! {
    sessions_created: "POST /api/sessions",
    sessions_ended: "DELETE /api/sessions/{id}",
    programs_exited: "sessions whose program exited (`exit`) before they were ended",
    closes_4003: "viewers told 4003 when their session was ended",
    viewers_joined: "extra viewers of a worker's session (readers)",
    stalled_joined: "extra viewers that never read after `ready`",
    viewers_left: "extra viewers that left with a close frame",
    viewers_dropped: "extra viewers dropped without a close frame (half of them mid-stream)",
    mid_stream_drops: "of which during a flood or a counter",
    typist_reconnects: "typists dropped mid-flood and joined again",
    visitors_joined: "viewers of other workers' sessions",
    visitors_missed: "visitors whose session ended before they joined (refused, 4002)",
    visitors_left: "visitors that left with a close frame",
    visitors_dropped: "visitors dropped without a close frame",
    visitors_ended: "visitors closed by their session's end",
    pastes: "pastes into `head -c N > file` in raw mode",
    paste_bytes: "bytes pasted and found identical in the file",
    floods: "`yes | head -c N` floods",
    flood_bytes: "bytes of those floods",
    counters: "`seq 1 N` counters run",
    counter_checks: "counters verified whole by a viewer (typists, extras, visitors)",
    counter_lines: "lines verified in those counters",
    counter_bytes: "bytes verified in those counters",
    counter_skipped: "counters a viewer could not verify (a resync snapshot came mid-way)",
    counter_failures: "counters with a missing, extra or wrong line",
    chats: "chat messages sent and echoed",
    uploads: "uploads saved and found identical on disk",
    upload_bytes: "bytes of those uploads",
    upload_refusals: "uploads with a bad name, refused as they should be",
    yolo_restarts: "YOLO toggles (agent restarted in the other mode)",
    resizes: "resizes sent",
    resyncs: "snapshots a viewer got after `ready` (resyncs)",
    lost_bytes: "bytes lost or changed in pastes and uploads",
    orphan_sessions: "ended sessions whose processes outlived the end",
}

// ---------------------------------------------------------------------------------------------
// Report

/// The soak table and its JSON.
pub(crate) fn print(r: &SoakRow, out: &mut Map<String, Value>) {
    println!();
    println!(
        "soak: {:.0} s (warm-up {:.0} s), seed {}, {} workers and visitors on one daemon; sampled \
         every {} s; at rest = every session ended, every viewer gone, fds and threads steady",
        r.seconds,
        r.warmup_seconds,
        r.seed,
        r.workers,
        r.sample_every.as_secs()
    );
    let (a, e) = (&r.after_warmup, &r.end);
    let peak = |f: fn(&Sample) -> u64| r.samples.iter().map(f).max().unwrap_or(0);
    println!(
        "{:<22} {:>12} {:>12} {:>10} {:>12}",
        "daemon at rest", "after_warmup", "end", "change", "under_load"
    );
    let rows: [(&str, u64, u64, String, u64); 5] = [
        (
            "rss_kib",
            a.mem.rss_kib,
            e.mem.rss_kib,
            format!("{:+.1}%", r.rss_change_over_warmup() * 100.0),
            peak(|s| s.rss_kib),
        ),
        (
            "anon_kib",
            a.mem.anon_kib,
            e.mem.anon_kib,
            format!("{:+}", e.mem.anon_kib as i64 - a.mem.anon_kib as i64),
            0,
        ),
        (
            "fds",
            a.fds,
            e.fds,
            format!("{:+}", r.leaked_fds()),
            peak(|s| s.fds),
        ),
        (
            "threads",
            a.mem.threads,
            e.mem.threads,
            format!("{:+}", r.leaked_threads()),
            peak(|s| s.threads),
        ),
        (
            "processes",
            (a.processes.len() + a.children) as u64,
            (e.processes.len() + e.children) as u64,
            format!(
                "{:+}",
                (e.processes.len() + e.children) as i64 - (a.processes.len() + a.children) as i64
            ),
            peak(|s| (s.processes + s.children) as u64),
        ),
    ];
    for (name, before, after, change, under) in rows {
        let under = if under == 0 && name == "anon_kib" {
            "-".to_owned()
        } else {
            under.to_string()
        };
        println!("{name:<22} {before:>12} {after:>12} {change:>10} {under:>12}");
    }
    println!(
        "  (under_load: the most over {} samples; processes: of our sessions plus the daemon's \
         children; at most {} sessions and {} viewers at once; at rest after {:.1} s and {:.1} s)",
        r.samples.len(),
        peak(|s| s.sessions),
        peak(|s| s.viewers),
        a.waited,
        e.waited
    );
    if !r.rests.is_empty() {
        let series: Vec<String> = r
            .rests
            .iter()
            .map(|(t, q)| format!("{:.0} s: {} KiB, {} fds", t, q.mem.rss_kib, q.fds))
            .collect();
        println!(
            "  at rest between segments of the load: {}",
            series.join("; ")
        );
    }
    println!(
        "  RSS settled at {} KiB (the median of its levels at rest before the end); the end is \
         {:+.1}% over it (limit +{:.0}%)",
        r.settled_rss_kib(),
        r.rss_change() * 100.0,
        RSS_TOLERANCE * 100.0
    );
    println!();
    println!("operations and checks:");
    for chunk in r.counts.chunks(3) {
        let line: Vec<String> = chunk
            .iter()
            .map(|(name, v)| format!("{name:>20} {v:>10}"))
            .collect();
        println!("  {}", line.join("  "));
    }
    println!();
    let held: Vec<String> = r
        .invariants()
        .iter()
        .map(|(name, ok)| format!("{name}: {}", if *ok { "ok" } else { "FAILED" }))
        .collect();
    println!("invariants: {}", held.join(", "));
    // Each kind a person would find in the daemon's journal after such a day, with its count:
    // none should be there that an operator could not act on.
    let logged: usize = r.warnings.iter().map(|(n, _)| n).sum();
    println!(
        "daemon log: {logged} WARN/ERROR lines{}",
        if logged == 0 { "" } else { ", by message:" }
    );
    for (n, kind) in &r.warnings {
        println!("  {n:>8} × {kind}");
    }

    let quiet = |q: &Quiet| {
        json!({
            "rss_kib": q.mem.rss_kib,
            "anon_kib": q.mem.anon_kib,
            "fds": q.fds,
            "threads": q.mem.threads,
            "session_processes": q.processes.len(),
            "children": q.children,
            "zombies": q.zombies,
            "sessions": q.sessions,
            "viewers": q.viewers,
            "seconds_to_rest": round3(q.waited),
            "problems": q.rest_problems,
        })
    };
    let counts: Map<String, Value> = r
        .counts
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let invariants: Map<String, Value> = r
        .invariants()
        .iter()
        .map(|(k, ok)| ((*k).to_owned(), json!(ok)))
        .collect();
    out.insert(
        "soak".into(),
        json!({
            "seconds": round3(r.seconds),
            "warmup_seconds": round3(r.warmup_seconds),
            "seed": r.seed,
            "workers": r.workers,
            "after_warmup": quiet(a),
            "at_rest_between": r.rests.iter().map(|(t, q)| {
                let mut v = quiet(q);
                v["at_seconds"] = json!(round3(*t));
                v
            }).collect::<Vec<_>>(),
            "end": quiet(e),
            "rss_settled_kib": r.settled_rss_kib(),
            "rss_change": round3(r.rss_change()),
            "rss_change_over_warmup": round3(r.rss_change_over_warmup()),
            "leaked_fds": r.leaked_fds(),
            "leaked_threads": r.leaked_threads(),
            "orphan_processes": r.orphans(),
            "lost_bytes": r.lost_bytes,
            "counter_failures": r.counter_failures,
            "failed_operations": r.op_failure_count,
            "under_load": {
                "rss_kib_max": peak(|s| s.rss_kib),
                "fds_max": peak(|s| s.fds),
                "threads_max": peak(|s| s.threads),
                "processes_max": peak(|s| (s.processes + s.children) as u64),
                "sessions_max": peak(|s| s.sessions),
                "viewers_max": peak(|s| s.viewers),
            },
            "counts": counts,
            "invariants": invariants,
            "warnings": r.warnings.iter().map(|(n, kind)| json!({"count": n, "message": kind})).collect::<Vec<_>>(),
            // [seconds, rss_kib, fds, threads, processes, sessions, viewers]
            "samples": r.samples.iter().map(|s| json!([
                (s.at * 10.0).round() / 10.0, s.rss_kib, s.fds, s.threads,
                s.processes + s.children, s.sessions, s.viewers
            ])).collect::<Vec<_>>(),
        }),
    );
}
