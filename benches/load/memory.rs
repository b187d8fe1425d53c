//! memory: the daemon's RSS idle, per idle session, per idle viewer and per idle log stream,
//! each read once it has settled (and first the footprint, `footprint`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Conn, Tasks, Ws, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::procfs::{wakeups, MemSample};
use crate::report::{fail, round3, Report};
use crate::{Ctx, Settings};

/// jemalloc's default `dirty_decay_ms` and a little more: freed pages are back by then.
const ALLOCATOR_DECAY: Duration = Duration::from_secs(12);

/// How long the idle sessions' wake-ups are counted.
const WAKEUP_WINDOW: Duration = Duration::from_secs(10);

/// Connections being opened at once, so 1000 joins are not one thundering herd.
const CONNECT_CONCURRENCY: usize = 50;

/// Runs `--mem-sessions` idle sessions, then `--mem-viewers` idle viewers.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    eprintln!(
        "load: memory, {} idle sessions, {} idle viewers",
        s.mem_sessions, s.mem_viewers
    );
    // First, on a daemon of its own: one idle shell in all, and the RSS after a flood.
    eprintln!("load: memory, footprint of one idle shell session and a 50 MiB flood");
    match crate::footprint::footprint_run(ctx, &mut report.notes).await {
        Ok(row) => report.footprint = Some(row),
        Err(e) => fail(report, format!("memory footprint: {e:#}")),
    }
    match memory_run(ctx, s.mem_sessions, s.mem_viewers, &mut report.notes).await {
        Ok(row) => report.memory = Some(row),
        Err(e) => fail(report, format!("memory: {e:#}")),
    }
}

pub(crate) struct MemoryRow {
    idle: MemSample,
    sessions: usize,
    with_sessions: MemSample,
    viewers: usize,
    /// With the viewers' session up and nobody in it.
    before_viewers: MemSample,
    with_viewers: MemSample,
    /// Idle `follow=1` log streams of one idle session, on a daemon of their own (after the
    /// viewers' churn the allocator's state, not the streams, would set the figure).
    streams: usize,
    before_streams: MemSample,
    with_streams: MemSample,
    /// Time to connect every viewer, `CONNECT_CONCURRENCY` at a time.
    connect_seconds: f64,
    daemon_resyncs: usize,
    /// The daemon's wake-ups per second with only the idle sessions.
    idle_wakeups_per_s: f64,
}

impl MemoryRow {
    fn per_session_kib(&self) -> f64 {
        per_kib(self.with_sessions.rss_kib, self.idle.rss_kib, self.sessions)
    }

    /// Per session in anonymous memory (heap and stacks): unlike RSS, not moved by the
    /// daemon letting go of its code pages once quiet (which may fall between two readings).
    fn per_session_anon_kib(&self) -> f64 {
        per_kib(
            self.with_sessions.anon_kib,
            self.idle.anon_kib,
            self.sessions,
        )
    }

    fn per_stream_anon_kib(&self) -> f64 {
        per_kib(
            self.with_streams.anon_kib,
            self.before_streams.anon_kib,
            self.streams.max(1),
        )
    }

    fn per_viewer_kib(&self) -> f64 {
        per_kib(
            self.with_viewers.rss_kib,
            self.before_viewers.rss_kib,
            self.viewers,
        )
    }

    fn per_stream_kib(&self) -> f64 {
        per_kib(
            self.with_streams.rss_kib,
            self.before_streams.rss_kib,
            self.streams.max(1),
        )
    }

    fn per_viewer_anon_kib(&self) -> f64 {
        per_kib(
            self.with_viewers.anon_kib,
            self.before_viewers.anon_kib,
            self.viewers,
        )
    }
}

/// What each of `n` added, from KiB `before` and `after` them (none if it fell).
fn per_kib(after: u64, before: u64, n: usize) -> f64 {
    after.saturating_sub(before) as f64 / n as f64
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

    daemon.idle_sessions(sessions).await?;
    // An idle session parks its screen model a second after its last output, and the
    // allocator gives the freed pages back about 10 s later (jemalloc's decay): the figure is
    // the session at rest, as it stays for as long as it is idle.
    if daemon.metrics().await?.has("ptyhub_screens_parked") {
        daemon
            .wait_gauge("ptyhub_screens_parked", sessions as u64, STEP_TIMEOUT)
            .await
            .context("waiting for the idle sessions' models to park")?;
    }
    tokio::time::sleep(ALLOCATOR_DECAY).await;
    let with_sessions = daemon.settled_memory().await?;
    // Wake-ups of the daemon's threads over a quiet stretch with every session idle (ours
    // reads /proc only, which wakes none of them).
    let pid = daemon.pid().context("daemon not running")?;
    let (before, start) = (wakeups(pid)?, Instant::now());
    tokio::time::sleep(WAKEUP_WINDOW).await;
    let idle_wakeups_per_s =
        (wakeups(pid)?.saturating_sub(before)) as f64 / start.elapsed().as_secs_f64();

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
    // What the joins allocated for a moment (snapshots, presence) is given back first.
    tokio::time::sleep(ALLOCATOR_DECAY).await;
    let with_viewers = daemon.settled_memory().await?;
    let dropped = dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        bail!("{dropped} idle viewers were dropped or sent an error");
    }

    drop(tasks);
    let daemon_resyncs = daemon.finish("memory", notes);
    let streams = (viewers / 5).max(1);
    let (before_streams, with_streams) = streams_run(ctx, streams, notes).await?;
    Ok(MemoryRow {
        idle,
        sessions,
        with_sessions,
        viewers,
        before_viewers,
        with_viewers,
        streams,
        before_streams,
        with_streams,
        connect_seconds,
        daemon_resyncs,
        idle_wakeups_per_s,
    })
}

/// The memory of a fresh daemon with one idle session, then with `streams` idle `follow=1` log
/// streams of it, each on its own connection; both once settled.
async fn streams_run(
    ctx: &Ctx,
    streams: usize,
    notes: &mut Vec<String>,
) -> Result<(MemSample, MemSample)> {
    let mut daemon = Daemon::start(ctx, "memory-streams")?;
    let id = daemon.create_session("idle").await?;
    daemon.wait_running(&[id], "sleep", STEP_TIMEOUT).await?;
    let before = daemon.settled_memory().await?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("building the HTTP client")?;
    let url = format!("http://{}/api/sessions/{id}/log?follow=1", daemon.addr);
    let mut tasks = Tasks::default();
    for _ in 0..streams {
        let request = http.get(&url).send();
        let task = ctx.pool.spawn(async move {
            if let Ok(mut resp) = request.await {
                while let Ok(Some(_)) = resp.chunk().await {}
            }
        });
        tasks.0.push(task.abort_handle());
    }
    let limit = STEP_TIMEOUT + Duration::from_millis(50 * streams as u64);
    daemon
        .wait_gauge("ptyhub_sse_streams", streams as u64, limit)
        .await?;
    tokio::time::sleep(ALLOCATOR_DECAY).await;
    let with_streams = daemon.settled_memory().await?;
    drop(tasks);
    daemon.finish("memory-streams", notes);
    Ok((before, with_streams))
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

/// The memory table and its JSON.
pub(crate) fn print(m: &MemoryRow, out: &mut Map<String, Value>) {
    println!();
    println!(
        "memory: daemon RSS in KiB once settled (anon: of which heap and stacks); viewers idle \
         in one idle session, joined {CONNECT_CONCURRENCY} at a time"
    );
    println!(
        "{:>9} {:>8} {:>10} {:>11} {:>17} {:>8} {:>10} {:>11} {:>16} {:>9} {:>7}",
        "idle_kib",
        "sessions",
        "total_kib",
        "per_session",
        "per_session_anon",
        "viewers",
        "total_kib",
        "per_viewer",
        "per_viewer_anon",
        "connect_s",
        "threads"
    );
    println!(
        "{:>9} {:>8} {:>10} {:>11.1} {:>17.1} {:>8} {:>10} {:>11.1} {:>16.1} {:>9.2} {:>7}",
        m.idle.rss_kib,
        m.sessions,
        m.with_sessions.rss_kib,
        m.per_session_kib(),
        m.per_session_anon_kib(),
        m.viewers,
        m.with_viewers.rss_kib,
        m.per_viewer_kib(),
        m.per_viewer_anon_kib(),
        m.connect_seconds,
        m.with_viewers.threads
    );
    println!(
        "with the {} idle sessions: {} threads (idle daemon: {}), {:.1} wake-ups/s",
        m.sessions, m.with_sessions.threads, m.idle.threads, m.idle_wakeups_per_s
    );
    println!(
        "idle follow=1 log streams: {}, {:.1} KiB each ({:.1} KiB anonymous)",
        m.streams,
        m.per_stream_kib(),
        m.per_stream_anon_kib()
    );
    out.insert(
        "memory".into(),
        json!({
            "idle_rss_kib": m.idle.rss_kib,
            "idle_anon_kib": m.idle.anon_kib,
            "sessions": m.sessions,
            "sessions_rss_kib": m.with_sessions.rss_kib,
            "per_session_kib": (m.per_session_kib() * 10.0).round() / 10.0,
            "per_session_anon_kib": (m.per_session_anon_kib() * 10.0).round() / 10.0,
            "viewers": m.viewers,
            "viewers_base_rss_kib": m.before_viewers.rss_kib,
            "viewers_rss_kib": m.with_viewers.rss_kib,
            "per_viewer_kib": (m.per_viewer_kib() * 10.0).round() / 10.0,
            "per_viewer_anon_kib": (m.per_viewer_anon_kib() * 10.0).round() / 10.0,
            "log_streams": m.streams,
            "per_log_stream_kib": (m.per_stream_kib() * 10.0).round() / 10.0,
            "per_log_stream_anon_kib": (m.per_stream_anon_kib() * 10.0).round() / 10.0,
            "viewers_connect_seconds": round3(m.connect_seconds),
            "threads": {
                "idle": m.idle.threads,
                "sessions": m.with_sessions.threads,
                "viewers": m.with_viewers.threads,
            },
            "daemon_resyncs": m.daemon_resyncs,
            "idle_sessions_wakeups_per_s": (m.idle_wakeups_per_s * 10.0).round() / 10.0,
        }),
    );
}
