//! join: connect to the whole snapshot and `ready`, one join after the other, to a full
//! coloured screen with scrollback.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{close_ws, connect, contains, is_snapshot_chunk, Conn, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::report::{fail, ms, pct_us, Report};
use crate::{Ctx, Settings};

/// The screen joiners are sent, and the lines of scrollback above it.
const JOIN_ROWS: u16 = 50;
const JOIN_COLS: u16 = 200;
const JOIN_SCROLLBACK: usize = 200;

/// Runs `--joins` joins.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    eprintln!(
        "load: join, {} joins to a full {JOIN_ROWS}x{JOIN_COLS} screen",
        s.joins
    );
    match join_run(ctx, s.joins, &mut report.notes).await {
        Ok(row) => report.join = Some(row),
        Err(e) => fail(report, format!("join: {e:#}")),
    }
}

pub(crate) struct JoinRow {
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
    /// Then one join to the same screen once the idle session's model was parked (brought
    /// back from its snapshot first), and the bytes the parked model kept.
    parked_join: Duration,
    parked_bytes: u64,
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
    // Quiet for a second, the session parks its model; the next join brings it back.
    daemon
        .wait_gauge("ptyhub_screens_parked", 1, STEP_TIMEOUT)
        .await
        .context("waiting for the idle model to park")?;
    let parked_bytes = daemon.metrics().await?.get("ptyhub_screens_parked_bytes");
    let parked = join_once(&url).await.context("join to a parked model")?;
    if parked.ansi()? != last.ansi()? {
        bail!("the join to the parked model got another snapshot than the joins before");
    }
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
        parked_join: parked.time,
        parked_bytes,
    })
}

pub(crate) struct JoinSample {
    time: Duration,
    gzip: Vec<u8>,
    chunks: usize,
}

impl JoinSample {
    pub(crate) fn ansi(&self) -> Result<Vec<u8>> {
        let mut ansi = Vec::new();
        flate2::read::GzDecoder::new(&self.gzip[..])
            .read_to_end(&mut ansi)
            .context("gunzip of the snapshot")?;
        Ok(ansi)
    }
}

/// One join: connect, read every snapshot chunk and `ready` (the clock stops there), close.
pub(crate) async fn join_once(url: &str) -> Result<JoinSample> {
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

/// The join table and its JSON.
pub(crate) fn print(j: &JoinRow, out: &mut Map<String, Value>) {
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
    println!(
        "then, the idle session's model parked ({} bytes kept): one join {} ms",
        j.parked_bytes,
        ms(Some(j.parked_join.as_micros() as u64))
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
            "parked_join_us": j.parked_join.as_micros() as u64,
            "parked_bytes": j.parked_bytes,
        }),
    );
}
