//! stall: the flood's time to healthy viewers with one more viewer that never reads, in pairs
//! of runs without and with it.

use serde_json::{json, Map, Value};

use crate::flood::flood_run;
use crate::report::{fail, median_by, round3, spread, Report};
use crate::{Ctx, Settings};

/// Runs `--flood-repeat` pairs (without and with the stalled viewer); reports the median pair.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
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
                flood_run(ctx, k, stalled_first, true, s.flood_mb, &mut report.notes).await?;
            let second =
                flood_run(ctx, k, !stalled_first, true, s.flood_mb, &mut report.notes).await?;
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
                fail(report, format!("stall with {k} viewers, pair {r}: {e:#}"));
                rows.clear();
                break;
            }
        }
    }
    let cpu_ratios: Vec<f64> = rows.iter().map(|t| t.cpu_with / t.cpu_without).collect();
    if let Some((mut row, ratios)) = median_by(rows, |t| t.ratio) {
        row.ratios = ratios;
        row.cpu_ratios = cpu_ratios;
        report.stall.push(row);
    }
}

pub(crate) struct StallRow {
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

/// The stall table and its JSON.
pub(crate) fn print(s: &Settings, rows: &[StallRow], out: &mut Map<String, Value>) {
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
    let mut json_rows = Vec::new();
    for t in rows {
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
        json_rows.push(json!({
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
    out.insert("stall".into(), Value::Array(json_rows));
}
