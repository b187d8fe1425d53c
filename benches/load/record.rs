//! record: what recording sessions costs. The flood to 10 viewers with recording on and off in
//! the same run (alternating which goes first, the median of `--flood-repeat` pairs), and the
//! daemon's memory per idle session with recording on and off.

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::daemon::{Daemon, CONFIG, NO_RECORDING_CONFIG};
use crate::flood::flood_run;
use crate::report::{fail, median_by, round3, spread, Report};
use crate::{Ctx, Settings};

/// Viewers of the flood, as the target states it.
const VIEWERS: usize = 10;

pub(crate) struct RecordRow {
    mb: usize,
    /// Seconds of the median pair (by slowdown), recording off and on.
    off_seconds: f64,
    on_seconds: f64,
    /// on / off of every pair, in run order.
    slowdowns: Vec<f64>,
    /// on / off of the daemon's CPU seconds, every pair in run order: what recording costs,
    /// less sensitive than wall time to whatever else runs on the machine.
    cpu_ratios: Vec<f64>,
    /// Daemon CPU seconds of the median pair.
    off_cpu_s: f64,
    on_cpu_s: f64,
    sessions: usize,
    /// RSS per idle session, KiB, recording off and on.
    off_session_kib: f64,
    on_session_kib: f64,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    match record_run(s, ctx, &mut report.notes).await {
        Ok(row) => report.record = Some(row),
        Err(e) => fail(report, format!("record: {e:#}")),
    }
}

async fn record_run(s: &Settings, ctx: &Ctx, notes: &mut Vec<String>) -> Result<RecordRow> {
    let mut pairs = Vec::new();
    for r in 1..=s.flood_repeat {
        eprintln!(
            "load: record, flood of {} MiB to {VIEWERS} viewers, pair {r} of {}",
            s.flood_mb, s.flood_repeat
        );
        // Alternating which goes first, so a machine that slows down over the run favours
        // neither.
        let on_first = r % 2 == 1;
        let first = flood_run(ctx, VIEWERS, false, on_first, s.flood_mb, notes).await?;
        let second = flood_run(ctx, VIEWERS, false, !on_first, s.flood_mb, notes).await?;
        let (on, off) = if on_first {
            (first, second)
        } else {
            (second, first)
        };
        eprintln!(
            "load:   off {:.3} s, on {:.3} s, slowdown {:.3}; daemon CPU off {:.2} s, on {:.2} s",
            off.seconds,
            on.seconds,
            on.seconds / off.seconds,
            off.daemon_cpu_s,
            on.daemon_cpu_s
        );
        pairs.push((off, on));
    }
    let cpu_ratios: Vec<f64> = pairs
        .iter()
        .map(|(off, on)| on.daemon_cpu_s / off.daemon_cpu_s)
        .collect();
    let ((off, on), slowdowns) =
        median_by(pairs, |(off, on)| on.seconds / off.seconds).context("no flood pair ran")?;

    eprintln!(
        "load: record, memory of {} idle sessions, recording off and on",
        s.mem_sessions
    );
    let off_session_kib = per_session_kib(ctx, s.mem_sessions, false, notes).await?;
    let on_session_kib = per_session_kib(ctx, s.mem_sessions, true, notes).await?;
    Ok(RecordRow {
        mb: s.flood_mb,
        off_seconds: off.seconds,
        on_seconds: on.seconds,
        slowdowns,
        cpu_ratios,
        off_cpu_s: off.daemon_cpu_s,
        on_cpu_s: on.daemon_cpu_s,
        sessions: s.mem_sessions,
        off_session_kib,
        on_session_kib,
    })
}

/// The daemon's settled RSS growth per idle session, KiB.
async fn per_session_kib(
    ctx: &Ctx,
    sessions: usize,
    recording: bool,
    notes: &mut Vec<String>,
) -> Result<f64> {
    let (name, config) = if recording {
        ("record-memory-on", CONFIG)
    } else {
        ("record-memory-off", NO_RECORDING_CONFIG)
    };
    let mut daemon = Daemon::start_config(ctx, name, config)?;
    let idle = daemon.settled_memory().await?;
    daemon.idle_sessions(sessions).await?;
    let with = daemon.settled_memory().await?;
    daemon.finish(name, notes);
    Ok(with.rss_kib.saturating_sub(idle.rss_kib) as f64 / sessions as f64)
}

pub(crate) fn print(r: &RecordRow, out: &mut Map<String, Value>) {
    let (lo, hi) = spread(&r.slowdowns);
    let median = r.on_seconds / r.off_seconds;
    println!();
    println!(
        "record: sessions recorded (asciicast v2) vs not, in the same run (targets: flood at most \
         1.05x, at most 64 KiB more per idle session)"
    );
    println!(
        "  flood of {} MiB to {VIEWERS} viewers: off {:.3} s, on {:.3} s, slowdown {:.3} \
         (pairs {:.3}..{:.3}); daemon CPU off {:.2} s, on {:.2} s",
        r.mb, r.off_seconds, r.on_seconds, median, lo, hi, r.off_cpu_s, r.on_cpu_s
    );
    let mut sorted = r.cpu_ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let cpu_median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let (cpu_lo, cpu_hi) = spread(&r.cpu_ratios);
    println!(
        "  daemon CPU on/off per pair: median {cpu_median:.3} (pairs {cpu_lo:.3}..{cpu_hi:.3})"
    );
    println!(
        "  memory per idle session ({} sessions): off {:.1} KiB, on {:.1} KiB, difference {:.1} KiB",
        r.sessions,
        r.off_session_kib,
        r.on_session_kib,
        r.on_session_kib - r.off_session_kib
    );
    out.insert(
        "record".into(),
        json!({
            "flood_mb": r.mb,
            "flood_viewers": VIEWERS,
            "off_seconds": round3(r.off_seconds),
            "on_seconds": round3(r.on_seconds),
            "slowdown": round3(median),
            "slowdowns": r.slowdowns.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
            "cpu_ratios": r.cpu_ratios.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
            "off_cpu_s": round3(r.off_cpu_s),
            "on_cpu_s": round3(r.on_cpu_s),
            "sessions": r.sessions,
            "off_session_kib": round3(r.off_session_kib),
            "on_session_kib": round3(r.on_session_kib),
        }),
    );
}
