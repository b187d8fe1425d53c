//! board: the cost of one open board (`GET /ws/board`, docs/protocol.md section 11a). 100
//! sessions (`--board-sessions`), 10 of them (`--board-busy`) printing the flood file at full
//! speed with no viewer; the rest idle. Phases of `--board-seconds` each on the same daemon:
//! calm (nothing prints) without and with the board, then busy without, with, and without the
//! board again. Reports the daemon's CPU and what the printers got out (MB/s) in each, and the
//! board's bytes per second per visible card (the busy cards and two idle ones on its screen)
//! and per card overall.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::client::{connect, Conn, Tasks};
use crate::daemon::Daemon;
use crate::report::{fail, round3, Report};
use crate::{Ctx, Settings};

/// Idle cards the board also shows besides the busy ones (a desktop's screenful).
const IDLE_VISIBLE: usize = 2;

/// One phase: with or without the board, calm or busy.
pub(crate) struct Phase {
    name: &'static str,
    board: bool,
    seconds: f64,
    daemon_cpu_s: f64,
    /// Bytes the busy sessions printed (their `outputBytes`).
    printed: u64,
    /// Bytes the board received.
    board_bytes: u64,
}

pub(crate) struct BoardRow {
    sessions: usize,
    busy: usize,
    visible: usize,
    phases: Vec<Phase>,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    eprintln!(
        "load: board, {} sessions, {} printing at full speed, {} s phases",
        s.board_sessions, s.board_busy, s.board_seconds
    );
    match board_run(ctx, s, &mut report.notes).await {
        Ok(row) => report.board = Some(row),
        Err(e) => fail(report, format!("board: {e:#}")),
    }
}

/// The busy sessions' output so far, from `GET /api/sessions`.
async fn printed(daemon: &Daemon, busy: &[Uuid]) -> Result<u64> {
    let list = daemon.sessions_json().await?;
    Ok(list
        .iter()
        .filter(|s| {
            s["id"]
                .as_str()
                .and_then(|i| Uuid::parse_str(i).ok())
                .is_some_and(|i| busy.contains(&i))
        })
        .filter_map(|s| s["outputBytes"].as_u64())
        .sum())
}

async fn board_run(ctx: &Ctx, s: &Settings, notes: &mut Vec<String>) -> Result<BoardRow> {
    let file = ctx.flood_file.as_ref().context("no flood file")?;
    if s.board_busy > s.board_sessions {
        bail!("--board-busy is more than --board-sessions");
    }
    let mut daemon = Daemon::start(ctx, "board")?;
    let idle = daemon
        .idle_sessions(s.board_sessions - s.board_busy)
        .await?;
    let mut busy = Vec::with_capacity(s.board_busy);
    let mut writers = Vec::with_capacity(s.board_busy);
    for n in 0..s.board_busy {
        let id = daemon.new_session();
        let mut w = Conn::open(daemon.ws(id, "?assistant=shell"))
            .await
            .with_context(|| format!("creating busy session {n}"))?;
        w.wait_text("$ ").await?;
        busy.push(id);
        writers.push(w);
    }
    let phase_len = Duration::from_secs(s.board_seconds);
    let mut phases = Vec::new();
    let board_url = format!("ws://{}/ws/board", daemon.addr);
    let visible: Vec<Uuid> = busy
        .iter()
        .chain(idle.iter().take(IDLE_VISIBLE))
        .copied()
        .collect();

    // One phase: the board open (counting what it gets) or not, for `phase_len`.
    async fn phase(
        ctx: &Ctx,
        daemon: &Daemon,
        name: &'static str,
        board: Option<(&str, &[Uuid])>,
        busy: &[Uuid],
        len: Duration,
    ) -> Result<Phase> {
        let mut tasks = Tasks::default();
        let got = Arc::new(AtomicU64::new(0));
        if let Some((url, visible)) = board {
            let mut ws = connect(url).await.context("opening the board")?;
            let first = tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .context("no cards")?;
            if !matches!(first, Some(Ok(Message::Text(_)))) {
                bail!("the board's first message: {first:?}");
            }
            let ids = json!({"type": "visible", "ids": visible}).to_string();
            ws.send(Message::Text(ids)).await.context("visible")?;
            // A moment for the first rows of the newly visible cards, not counted.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let count = got.clone();
            let task = ctx.pool.spawn(async move {
                while let Some(Ok(msg)) = ws.next().await {
                    if let Message::Text(t) = msg {
                        count.fetch_add(t.len() as u64, Ordering::Relaxed);
                    }
                }
            });
            tasks.0.push(task.abort_handle());
        }
        let (cpu0, out0, got0) = (
            daemon.cpu_seconds()?,
            printed(daemon, busy).await?,
            got.load(Ordering::Relaxed),
        );
        let start = Instant::now();
        tokio::time::sleep(len).await;
        let seconds = start.elapsed().as_secs_f64();
        let daemon_cpu_s = daemon.cpu_seconds()? - cpu0;
        let printed_bytes = printed(daemon, busy).await? - out0;
        let board_bytes = got.load(Ordering::Relaxed) - got0;
        drop(tasks);
        Ok(Phase {
            name,
            board: board.is_some(),
            seconds,
            daemon_cpu_s,
            printed: printed_bytes,
            board_bytes,
        })
    }

    let open = Some((board_url.as_str(), visible.as_slice()));
    phases.push(phase(ctx, &daemon, "calm", None, &busy, phase_len).await?);
    phases.push(phase(ctx, &daemon, "calm", open, &busy, phase_len).await?);
    let command = format!("while :; do cat '{}'; done\r", file.path.display());
    for w in &mut writers {
        w.send(command.as_bytes()).await?;
    }
    // The writers leave: the printers run with no viewer but the board.
    for w in writers.drain(..) {
        crate::client::close_ws(w.ws).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    phases.push(phase(ctx, &daemon, "busy", None, &busy, phase_len).await?);
    phases.push(phase(ctx, &daemon, "busy", open, &busy, phase_len).await?);
    phases.push(phase(ctx, &daemon, "busy", None, &busy, phase_len).await?);
    if phases
        .iter()
        .filter(|p| p.name == "busy")
        .any(|p| p.printed == 0)
    {
        bail!("the busy sessions printed nothing in a phase");
    }
    for id in &busy {
        let mut w = Conn::open(daemon.ws(*id, "")).await?;
        let _ = w.send(b"\x03").await;
    }
    daemon.finish("board", notes);
    Ok(BoardRow {
        sessions: s.board_sessions,
        busy: s.board_busy,
        visible: visible.len(),
        phases,
    })
}

/// The board table and its JSON.
pub(crate) fn print(r: &BoardRow, out: &mut Map<String, Value>) {
    println!();
    println!(
        "board: {} sessions, {} printing at full speed with no viewer; phases with and without \
         one open board showing {} cards (the busy ones and {IDLE_VISIBLE} idle)",
        r.sessions, r.busy, r.visible
    );
    println!(
        "{:>6} {:>6} {:>8} {:>11} {:>12} {:>14} {:>14} {:>16}",
        "phase",
        "board",
        "seconds",
        "daemon_cpu",
        "printed",
        "cpu_ms_per_MB",
        "board_B/s",
        "B/s_per_visible"
    );
    let mut rows = Vec::new();
    for p in &r.phases {
        let mb_s = p.printed as f64 / 1e6 / p.seconds;
        let per_mb = if p.printed > 0 {
            p.daemon_cpu_s * 1000.0 / (p.printed as f64 / 1e6)
        } else {
            f64::NAN
        };
        let board_bps = p.board_bytes as f64 / p.seconds;
        let per_visible = board_bps / r.visible as f64;
        println!(
            "{:>6} {:>6} {:>8.1} {:>10.2}s {:>7.1}MB/s {:>14.2} {:>14.0} {:>16.0}",
            p.name,
            if p.board { "open" } else { "none" },
            p.seconds,
            p.daemon_cpu_s,
            mb_s,
            per_mb,
            board_bps,
            per_visible
        );
        rows.push(json!({
            "phase": p.name,
            "board": p.board,
            "seconds": round3(p.seconds),
            "daemon_cpu_s": round3(p.daemon_cpu_s),
            "printed_mb_per_s": round3(mb_s),
            "daemon_cpu_ms_per_mb_printed": round3(per_mb),
            "board_bytes_per_s": round3(board_bps),
            "board_bytes_per_s_per_visible_card": round3(per_visible),
            "board_bytes_per_s_per_card": round3(board_bps / r.sessions as f64),
        }));
    }
    // Busy with the board against the mean of the busy phases around it.
    let busy = |board: bool| -> Vec<&Phase> {
        r.phases
            .iter()
            .filter(|p| p.name == "busy" && p.board == board)
            .collect()
    };
    let mean = |ps: &[&Phase], f: &dyn Fn(&Phase) -> f64| {
        ps.iter().map(|p| f(p)).sum::<f64>() / ps.len().max(1) as f64
    };
    let (off, on) = (busy(false), busy(true));
    let rate = |p: &Phase| p.printed as f64 / p.seconds;
    let cpu = |p: &Phase| p.daemon_cpu_s / p.seconds;
    let printed_ratio = mean(&on, &rate) / mean(&off, &rate);
    let cpu_ratio = mean(&on, &cpu) / mean(&off, &cpu);
    let per_mb = |p: &Phase| p.daemon_cpu_s / (p.printed as f64 / 1e6);
    let per_mb_ratio = mean(&on, &per_mb) / mean(&off, &per_mb);
    println!(
        "board open / none while busy: printed {printed_ratio:.3}, daemon CPU {cpu_ratio:.3}, \
         daemon CPU per MB printed {per_mb_ratio:.3} (target: within 5%)"
    );
    out.insert(
        "board".into(),
        json!({
            "sessions": r.sessions,
            "busy": r.busy,
            "visible": r.visible,
            "phases": rows,
            "busy_printed_ratio": round3(printed_ratio),
            "busy_daemon_cpu_ratio": round3(cpu_ratio),
            "busy_cpu_per_mb_ratio": round3(per_mb_ratio),
        }),
    );
}
