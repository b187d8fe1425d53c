//! The report: every scenario's rows, printed as tables and then as one JSON line (the last
//! line of stdout), with the notes and failures; and the statistics the tables share.

use std::time::Duration;

use serde_json::{json, Value};

use crate::echo::EchoRow;
use crate::flood::FloodRow;
use crate::join::JoinRow;
use crate::memory::MemoryRow;
use crate::soak::SoakRow;
use crate::stall::StallRow;
use crate::{Scenario, Settings};

/// Everything measured, for the table and the JSON line.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) echo: Vec<EchoRow>,
    pub(crate) dialects: Vec<crate::dialects::DialectRow>,
    pub(crate) attach: Option<crate::attach::AttachRow>,
    pub(crate) flood: Vec<FloodRow>,
    pub(crate) stall: Vec<StallRow>,
    pub(crate) join: Option<JoinRow>,
    pub(crate) memory: Option<MemoryRow>,
    pub(crate) footprint: Option<crate::footprint::FootprintRow>,
    pub(crate) exec: Option<crate::exec::ExecRow>,
    pub(crate) record: Option<crate::record::RecordRow>,
    pub(crate) upgrade: Vec<crate::upgrade::UpgradeRow>,
    pub(crate) busy: Vec<crate::busy::BusyRow>,
    pub(crate) board: Option<crate::board::BoardRow>,
    pub(crate) soak: Option<SoakRow>,
    pub(crate) deploy: Vec<crate::deploy::DeployRow>,
    pub(crate) slow: Option<crate::slow::SlowRow>,
    pub(crate) handshake: Option<crate::handshake::HandshakeRow>,
    /// Things to look at: daemon warnings, resyncs, processes left behind.
    pub(crate) notes: Vec<String>,
    pub(crate) errors: Vec<String>,
}

pub(crate) fn fail(report: &mut Report, msg: String) {
    eprintln!("load: FAILED {msg}");
    report.errors.push(msg);
}

/// The item with the median `key` (the lower of the two middle ones for an even count), and
/// every item's key in the order given.
pub(crate) fn median_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> Option<(T, Vec<f64>)> {
    let keys: Vec<f64> = items.iter().map(&key).collect();
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    if items.is_empty() {
        return None;
    }
    let middle = (items.len() - 1) / 2;
    Some((items.swap_remove(middle), keys))
}

/// The smallest and the largest of `values`.
pub(crate) fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

/// Nearest-rank percentile, in microseconds.
pub(crate) fn pct_us(sorted: &[Duration], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1].as_micros() as u64)
}

pub(crate) fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

pub(crate) fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{:.2}", v as f64 / 1000.0))
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub(crate) fn print_report(s: &Settings, r: &Report) {
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
        crate::echo::print(s, &r.echo, &mut out);
    }
    if !r.dialects.is_empty() {
        crate::dialects::print(s, &r.dialects, &mut out);
    }
    if let Some(a) = &r.attach {
        crate::attach::print(s, a, &mut out);
    }
    if !r.flood.is_empty() {
        crate::flood::print(s, &r.flood, &mut out);
    }
    if !r.stall.is_empty() {
        crate::stall::print(s, &r.stall, &mut out);
    }
    if let Some(j) = &r.join {
        crate::join::print(j, &mut out);
    }
    if let Some(h) = &r.handshake {
        crate::handshake::print(h, &mut out);
    }
    if let Some(m) = &r.memory {
        crate::memory::print(m, &mut out);
    }
    if let Some(f) = &r.footprint {
        crate::footprint::print(f, &mut out);
    }
    if let Some(e) = &r.exec {
        crate::exec::print(s, e, &mut out);
    }
    if let Some(rec) = &r.record {
        crate::record::print(rec, &mut out);
    }
    if !r.deploy.is_empty() {
        crate::deploy::print(s, &r.deploy, &mut out);
    }
    if let Some(slow) = &r.slow {
        crate::slow::print(s, slow, &mut out);
    }
    if !r.upgrade.is_empty() {
        crate::upgrade::print(&r.upgrade, &mut out);
    }
    if !r.busy.is_empty() {
        crate::busy::print(&r.busy, &mut out);
    }
    if let Some(board) = &r.board {
        crate::board::print(board, &mut out);
    }
    if let Some(soak) = &r.soak {
        crate::soak::print(soak, &mut out);
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
        json!({
            "echo_viewer_nice": s.viewer_nice,
            "flood_repeat": s.flood_repeat,
            "busy_core": s.busy_core,
        }),
    );
    out.insert("notes".into(), json!(r.notes));
    out.insert("errors".into(), json!(r.errors));
    println!();
    println!("{}", Value::Object(out));
}
