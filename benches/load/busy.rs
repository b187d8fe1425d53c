//! busy: many sessions printing at once. 20 sessions (`--busy-sessions`) each print about
//! 1 MB/s of base64 to 5 viewers each (`--busy-viewers`); meanwhile a typist measures echo in
//! one more session, against the same typist on the same daemon before the load starts.
//! Reports the daemon's CPU per MB delivered to the viewers and the typist's p50 both ways,
//! beside the same echo on a bare PTY before and during the load: how much of the rise is the
//! machine's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::bare::bare_echo;
use crate::client::{is_snapshot_chunk, on_pool, Conn, Tasks};
use crate::daemon::Daemon;
use crate::echo::{echo_samples, ECHO_TIMEOUT};
use crate::procfs::process_cpu_seconds;
use crate::report::{fail, pct_us, round3, Report};
use crate::{Ctx, Settings};

/// Bytes each busy session prints per tenth of a second: about 1 MB/s.
const TENTH: usize = 100_000;
/// Load before measuring (every session printing, every viewer reading).
const WARMUP: Duration = Duration::from_secs(3);
/// Echo samples each way, 5 ms apart.
const SAMPLES: usize = 300;
const PAUSE: Duration = Duration::from_millis(5);

pub(crate) struct BusyRow {
    sessions: usize,
    viewers: usize,
    /// Seconds the load was measured over.
    seconds: f64,
    /// Bytes all viewers got in that time.
    delivered: u64,
    /// Bytes the busy sessions printed in that time (each viewer's share, from one viewer each).
    printed: u64,
    daemon_cpu_s: f64,
    gen_cpu_s: f64,
    /// The typist's round trips before the load and during it, sorted.
    idle_rtt: Vec<Duration>,
    busy_rtt: Vec<Duration>,
    /// The same echo on a bare PTY before the load and during it, sorted.
    bare_idle: Vec<Duration>,
    bare_busy: Vec<Duration>,
    daemon_resyncs: usize,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    for r in 1..=s.flood_repeat {
        eprintln!(
            "load: busy, {} sessions at ~1 MB/s with {} viewers each, run {r} of {}",
            s.busy_sessions, s.busy_viewers, s.flood_repeat
        );
        match busy_run(ctx, s.busy_sessions, s.busy_viewers, &mut report.notes).await {
            Ok(row) => report.busy.push(row),
            Err(e) => fail(report, format!("busy, run {r}: {e:#}")),
        }
    }
}

async fn busy_run(
    ctx: &Ctx,
    sessions: usize,
    viewers: usize,
    notes: &mut Vec<String>,
) -> Result<BusyRow> {
    let file = ctx.flood_file.as_ref().context("no flood file")?;
    let mut daemon = Daemon::start(ctx, "busy")?;

    // The typist, on the driver's runtime as in echo.
    let echo_id = daemon.new_session();
    let mut typist = Conn::open(daemon.ws(echo_id, "?assistant=echo"))
        .await
        .context("creating the echo session")?;
    typist
        .wait_text("ECHO-READY")
        .await
        .context("waiting for the raw-mode cat")?;
    let idle_rtt = typist_samples(&mut typist).await.context("echo, idle")?;
    let bare_idle = bare_echo(SAMPLES, PAUSE)
        .await
        .context("bare-PTY echo, idle")?;

    // The busy sessions, each with its viewers counting what they get.
    let mut tasks = Tasks::default();
    let mut counters = Vec::with_capacity(sessions);
    let mut writers = Vec::with_capacity(sessions);
    for n in 0..sessions {
        let id = daemon.new_session();
        let mut writer = Conn::open(daemon.ws(id, "?assistant=shell"))
            .await
            .with_context(|| format!("creating busy session {n}"))?;
        writer.wait_text("$ ").await?;
        let mut mine = Vec::with_capacity(viewers);
        for v in 0..viewers {
            let conn = on_pool(&ctx.pool, Conn::open(daemon.ws(id, "")))
                .await
                .with_context(|| format!("joining viewer {v} of busy session {n}"))?;
            let got = Arc::new(AtomicU64::new(0));
            let count = got.clone();
            let mut ws = conn.ws;
            let task = ctx.pool.spawn(async move {
                while let Some(Ok(msg)) = ws.next().await {
                    if let Message::Binary(b) = msg {
                        if !is_snapshot_chunk(&b) {
                            count.fetch_add(b.len() as u64, Ordering::Relaxed);
                        }
                    }
                }
            });
            tasks.0.push(task.abort_handle());
            mine.push(got);
        }
        counters.push(mine);
        writers.push(writer);
    }
    // Each prints a tenth of a megabyte every tenth of a second, from the flood file.
    let command = format!(
        "while :; do head -c {TENTH} '{}'; sleep 0.1; done\r",
        file.path.display()
    );
    for w in &mut writers {
        w.send(command.as_bytes()).await?;
    }
    tokio::time::sleep(WARMUP).await;

    let total = |counters: &[Vec<Arc<AtomicU64>>]| -> (u64, u64) {
        let all = counters
            .iter()
            .flatten()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        let one_each = counters.iter().map(|v| v[0].load(Ordering::Relaxed)).sum();
        (all, one_each)
    };
    let (delivered_before, printed_before) = total(&counters);
    let cpu_before = daemon.cpu_seconds()?;
    let gen_before = process_cpu_seconds("self")?;
    let start = Instant::now();
    let busy_rtt = typist_samples(&mut typist).await.context("echo, busy")?;
    let bare_busy = bare_echo(SAMPLES, PAUSE)
        .await
        .context("bare-PTY echo, busy")?;
    // At least a few seconds of load, whatever the echo took.
    let rest = Duration::from_secs(5).saturating_sub(start.elapsed());
    tokio::time::sleep(rest).await;
    let seconds = start.elapsed().as_secs_f64();
    let daemon_cpu_s = daemon.cpu_seconds()? - cpu_before;
    let gen_cpu_s = process_cpu_seconds("self")? - gen_before;
    let (delivered_after, printed_after) = total(&counters);
    if printed_after == printed_before {
        bail!("the busy sessions printed nothing while measured");
    }

    for w in &mut writers {
        // Ctrl-C ends the loop; the sessions end with the daemon.
        let _ = w.send(b"\x03").await;
    }
    drop(tasks);
    drop(writers);
    drop(typist);
    let daemon_resyncs = daemon.finish("busy", notes);
    Ok(BusyRow {
        sessions,
        viewers,
        seconds,
        delivered: delivered_after - delivered_before,
        printed: printed_after - printed_before,
        daemon_cpu_s,
        gen_cpu_s,
        idle_rtt,
        busy_rtt,
        bare_idle,
        bare_busy,
        daemon_resyncs,
    })
}

/// `SAMPLES` echo round trips of the typist alone (no viewers of its session).
async fn typist_samples(typist: &mut Conn) -> Result<Vec<Duration>> {
    let rtt = echo_samples(SAMPLES, PAUSE, &mut [], async |i, byte, deadline| {
        typist.send(&[byte]).await?;
        loop {
            match timeout_at(deadline.into(), typist.ws.next()).await {
                Err(_) => bail!(
                    "sample {i}: no echo of {:?} within {ECHO_TIMEOUT:?}",
                    byte as char
                ),
                Ok(None) | Ok(Some(Err(_))) => bail!("sample {i}: the typist's connection closed"),
                Ok(Some(Ok(Message::Binary(b)))) if !is_snapshot_chunk(&b) && b.contains(&byte) => {
                    return Ok(())
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    })
    .await?
    .rtt;
    Ok(rtt)
}

/// The busy table and its JSON.
pub(crate) fn print(rows: &[BusyRow], out: &mut Map<String, Value>) {
    println!();
    println!(
        "busy: sessions printing ~1 MB/s each to their viewers; a typist's echo (µs, {SAMPLES} \
         samples {} ms apart) in one more session before the load and during it; bare_*: the \
         same echo on a bare PTY, before and during the load",
        PAUSE.as_millis()
    );
    println!(
        "{:>8} {:>7} {:>9} {:>12} {:>12} {:>14} {:>9} {:>9} {:>9} {:>9} {:>6} {:>10} {:>10} {:>10} {:>7}",
        "sessions",
        "viewers",
        "printed",
        "delivered",
        "daemon_cpu",
        "cpu_ms_per_MB",
        "idle_p50",
        "idle_p99",
        "busy_p50",
        "busy_p99",
        "ratio",
        "bare_idle50",
        "bare_busy50",
        "bare_ratio",
        "resyncs"
    );
    let mut json_rows = Vec::new();
    for r in rows {
        let mb_s = |b: u64| b as f64 / 1e6 / r.seconds;
        let per_mb = r.daemon_cpu_s * 1000.0 / (r.delivered as f64 / 1e6);
        let (ip50, ip99) = (pct_us(&r.idle_rtt, 0.5), pct_us(&r.idle_rtt, 0.99));
        let (bp50, bp99) = (pct_us(&r.busy_rtt, 0.5), pct_us(&r.busy_rtt, 0.99));
        let ratio_of = |busy: Option<u64>, idle: Option<u64>| match (busy, idle) {
            (Some(b), Some(i)) if i > 0 => b as f64 / i as f64,
            _ => f64::NAN,
        };
        let ratio = ratio_of(bp50, ip50);
        let (bare_i50, bare_b50) = (pct_us(&r.bare_idle, 0.5), pct_us(&r.bare_busy, 0.5));
        let bare_ratio = ratio_of(bare_b50, bare_i50);
        println!(
            "{:>8} {:>7} {:>6.2}MB/s {:>8.1}MB/s {:>11.2}s {:>14.2} {:>9} {:>9} {:>9} {:>9} {:>6.2} {:>10} {:>10} {:>10.2} {:>7}",
            r.sessions,
            r.sessions * r.viewers,
            mb_s(r.printed),
            mb_s(r.delivered),
            r.daemon_cpu_s,
            per_mb,
            ip50.unwrap_or(0),
            ip99.unwrap_or(0),
            bp50.unwrap_or(0),
            bp99.unwrap_or(0),
            ratio,
            bare_i50.unwrap_or(0),
            bare_b50.unwrap_or(0),
            bare_ratio,
            r.daemon_resyncs
        );
        json_rows.push(json!({
            "sessions": r.sessions,
            "viewers": r.sessions * r.viewers,
            "seconds": round3(r.seconds),
            "printed_mb_per_s": round3(mb_s(r.printed)),
            "delivered_mb_per_s": round3(mb_s(r.delivered)),
            "daemon_cpu_s": round3(r.daemon_cpu_s),
            "generator_cpu_s": round3(r.gen_cpu_s),
            "daemon_cpu_ms_per_mb_delivered": round3(per_mb),
            "echo_idle_p50_us": ip50,
            "echo_idle_p99_us": ip99,
            "echo_busy_p50_us": bp50,
            "echo_busy_p99_us": bp99,
            "echo_p50_ratio": round3(ratio),
            "bare_pty_idle_p50_us": bare_i50,
            "bare_pty_busy_p50_us": bare_b50,
            "bare_pty_p50_ratio": round3(bare_ratio),
            "daemon_resyncs": r.daemon_resyncs,
        }));
    }
    out.insert("busy".into(), Value::Array(json_rows));
}
