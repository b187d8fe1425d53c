//! slow: a flood to many viewers that read at a browser's pace (`--slow-pace-mbps` each, every
//! fourth at a quarter of it), timed to the last viewer's final screen, against the same `cat` on
//! a bare PTY in the same run; every viewer's screen (its last snapshot and the output after it)
//! must end with the file's last lines and the marker.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::bare::bare_pty;
use crate::client::{contains, is_snapshot_chunk, on_pool, Snapshots, Tasks, Ws};
use crate::daemon::Daemon;
use crate::flood::{make_flood_file, FloodFile, MarkerScan};
use crate::procfs::{process_cpu_seconds, CpuTimes};
use crate::report::{fail, median_by, round3, spread, Report};
use crate::{Ctx, Settings};

/// Output a reader keeps after its last snapshot: more than a screen of the flood's lines, so
/// the screen drawn from it is the one drawn from everything.
const TAIL: usize = 64 * 1024;

/// One configuration's median run, with every run's ratio.
pub(crate) struct SlowRow {
    viewers: usize,
    mb: usize,
    pace_mbps: f64,
    seconds: f64,
    bare_seconds: f64,
    ratio: f64,
    ratios: Vec<f64>,
    daemon_cpu_s: f64,
    /// The load generator's own CPU seconds meanwhile (its 100 readers share the cores).
    gen_cpu_s: f64,
    busy: f64,
    /// Output bytes received, mean over the viewers (snapshots excluded).
    bytes_mean: u64,
    /// Snapshots received after `ready`, all viewers together.
    snapshots: usize,
    /// Bytes the viewer that finished last read, and the output bytes among them: output
    /// queued in its socket buffers before it was found behind, which it reads first.
    last_read: (u64, u64),
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    let dir = ctx.dir.join("slow");
    let file = match std::fs::create_dir_all(&dir)
        .context("creating its directory")
        .and_then(|()| make_flood_file(&dir, s.slow_mb))
    {
        Ok(file) => file,
        Err(e) => return fail(report, format!("slow: the flood file: {e:#}")),
    };
    let mut runs = Vec::new();
    for r in 1..=s.flood_repeat {
        eprintln!(
            "load: slow readers, {} viewers at {} MB/s, {} MiB, run {r} of {}",
            s.slow_viewers, s.slow_pace_mbps, s.slow_mb, s.flood_repeat
        );
        match slow_run(s, ctx, &file).await {
            Ok(row) => {
                eprintln!(
                    "load:   {:.3} s, bare {:.3} s, ratio {:.2}, daemon CPU {:.2} s, generator CPU {:.2} s",
                    row.seconds, row.bare_seconds, row.ratio, row.daemon_cpu_s, row.gen_cpu_s
                );
                runs.push(row);
            }
            Err(e) => return fail(report, format!("slow readers, run {r}: {e:#}")),
        }
    }
    if let Some((mut row, ratios)) = median_by(runs, |r| r.ratio) {
        row.ratios = ratios;
        report.slow = Some(row);
    }
    let _ = std::fs::remove_file(&file.path);
}

async fn slow_run(s: &Settings, ctx: &Ctx, file: &FloodFile) -> Result<SlowRow> {
    let viewers = s.slow_viewers;
    let limit = Duration::from_secs(60 + (s.slow_mb * viewers) as u64 / 10);
    let (cmd, marker) = command(&file.path);
    let (bare, _) = bare_pty(&cmd, marker, limit).context("the bare-PTY baseline")?;
    let mut daemon = Daemon::start_config(ctx, "slow", crate::daemon::CONFIG)?;
    let id = daemon.new_session();
    let mut conns = crate::flood::shell_with_viewers(ctx, &daemon, id, viewers).await?;
    let mut typist = conns.remove(0);
    let typist = on_pool(&ctx.pool, async move {
        typist.wait_viewers(viewers as u64).await?;
        Ok(typist)
    })
    .await?;
    conns.insert(0, typist);

    let (cmd, marker) = command(&file.path);
    let expect = format!("{}{}", file.last_lines, String::from_utf8_lossy(&marker));
    let snapshots = std::sync::Arc::new(AtomicUsize::new(0));
    let (mut sinks, mut readers, mut tasks) = (Vec::new(), Vec::new(), Tasks::default());
    for (v, conn) in conns.into_iter().enumerate() {
        let (sink, stream) = conn.ws.split();
        sinks.push(sink);
        // Every fourth viewer is a slower machine or a busier tab.
        let pace = s.slow_pace_mbps * 1e6 / if v % 4 == 3 { 4.0 } else { 1.0 };
        let task = ctx.pool.spawn(paced_reader(
            stream,
            MarkerScan::new(marker.clone()),
            pace,
            snapshots.clone(),
        ));
        tasks.0.push(task.abort_handle());
        readers.push(task);
    }
    let cpu_before = daemon.cpu_seconds()?;
    let gen_cpu_before = process_cpu_seconds("self")?;
    let machine_before = CpuTimes::now()?;
    let start = Instant::now();
    sinks[0]
        .send(Message::Binary(format!("{cmd}\r").into_bytes()))
        .await
        .context("typing the flood command")?;
    let deadline = start + limit;
    let (mut last, mut bytes, mut screens) = (start, 0, Vec::with_capacity(viewers));
    // What the viewer that finished last read, and how much of it was output (not screens).
    let mut last_read = (0, 0);
    for (v, reader) in readers.iter_mut().enumerate() {
        match timeout_at(deadline.into(), reader).await {
            Ok(Ok(Ok(end))) => {
                if end.at >= last {
                    last_read = (end.read, end.output);
                }
                last = last.max(end.at);
                bytes += end.output;
                screens.push(end.screen);
            }
            Ok(Ok(Err(e))) => bail!("viewer {v}: {e:#}"),
            Ok(Err(e)) => bail!("viewer {v}: reader task failed: {e}"),
            Err(_) => bail!("viewer {v}: no final screen within {limit:?}"),
        }
    }
    let seconds = last.duration_since(start).as_secs_f64();
    let busy = CpuTimes::now()?.busy_since(&machine_before);
    let daemon_cpu_s = daemon.cpu_seconds()? - cpu_before;
    let gen_cpu_s = process_cpu_seconds("self")? - gen_cpu_before;
    for (v, screen) in screens.iter().enumerate() {
        screen
            .check(&expect)
            .with_context(|| format!("viewer {v}"))?;
    }
    drop(tasks);
    drop(sinks);
    daemon.finish("slow readers", &mut Vec::new());
    let ratio = seconds / bare.as_secs_f64();
    Ok(SlowRow {
        viewers,
        mb: s.slow_mb,
        pace_mbps: s.slow_pace_mbps,
        seconds,
        bare_seconds: bare.as_secs_f64(),
        ratio,
        ratios: vec![ratio],
        daemon_cpu_s,
        gen_cpu_s,
        busy,
        bytes_mean: bytes / viewers as u64,
        snapshots: snapshots.load(Ordering::Relaxed),
        last_read,
    })
}

/// The flood's command and its end marker (computed by the shell, so the command's echo does
/// not hold it).
fn command(file: &Path) -> (String, Vec<u8>) {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    (
        format!("cat '{}'; echo SLOW-END-$((2000+{n}))-MARK", file.display()),
        format!("SLOW-END-{}-MARK", 2000 + n).into_bytes(),
    )
}

/// What a viewer had when it saw the end marker: its last snapshot and the output after it.
struct FinalScreen {
    snapshot: Option<Vec<u8>>,
    tail: Vec<u8>,
}

impl FinalScreen {
    /// Checks that the screen drawn from it ends with `expect`.
    fn check(&self, expect: &str) -> Result<()> {
        let mut term = vt100::Parser::new(
            std::num::NonZeroU16::new(50).context("rows")?,
            std::num::NonZeroU16::new(200).context("cols")?,
            0,
        );
        term.process(self.snapshot.as_deref().unwrap_or_default());
        term.process(&self.tail);
        let contents = term.screen().contents();
        if !contents.contains(expect) {
            bail!("wrong final screen:\n{contents}\nexpected it to contain:\n{expect}");
        }
        Ok(())
    }
}

/// A viewer's end: when it saw the marker, the output bytes it got, and its screen then.
struct ViewerEnd {
    at: Instant,
    output: u64,
    /// Bytes read, screens included.
    read: u64,
    screen: FinalScreen,
}

/// Reads one viewer's stream no faster than `pace` bytes a second (snapshots included) until
/// the end marker. Its screen is checked once every viewer is done: drawing 100 screens as the
/// viewers finish would take the cores the last ones still need.
async fn paced_reader(
    mut stream: SplitStream<Ws>,
    mut scan: MarkerScan,
    pace: f64,
    snapshots: std::sync::Arc<AtomicUsize>,
) -> Result<ViewerEnd> {
    let (mut snaps, mut last_snapshot, mut tail) = (Snapshots::default(), None, Vec::new());
    let (start, mut read, mut output) = (Instant::now(), 0u64, 0u64);
    while let Some(msg) = stream.next().await {
        let found = match msg.context("connection failed during the flood")? {
            Message::Binary(b) if is_snapshot_chunk(&b) => {
                read += b.len() as u64;
                match snaps.push(&b)? {
                    Some(ansi) => {
                        snapshots.fetch_add(1, Ordering::Relaxed);
                        scan.tail.clear();
                        tail.clear();
                        let found = contains(&ansi, &scan.marker);
                        last_snapshot = Some(ansi);
                        found
                    }
                    None => false,
                }
            }
            Message::Binary(b) => {
                read += b.len() as u64;
                output += b.len() as u64;
                tail.extend_from_slice(&b);
                if tail.len() > 2 * TAIL {
                    // Lines enough to fill the screen remain: the snapshot is off it.
                    tail.drain(..tail.len() - TAIL);
                    last_snapshot = None;
                }
                scan.feed(&b)
            }
            Message::Text(t) if t.contains("\"error\"") => bail!("server error: {t}"),
            Message::Close(f) => bail!("server closed the connection: {f:?}"),
            _ => false,
        };
        if found {
            return Ok(ViewerEnd {
                at: Instant::now(),
                output,
                read,
                screen: FinalScreen {
                    snapshot: last_snapshot,
                    tail,
                },
            });
        }
        // A browser drawing at its pace: the next read waits until this one would be drawn.
        let due = start + Duration::from_secs_f64(read as f64 / pace);
        tokio::time::sleep_until(due.into()).await;
    }
    Err(anyhow!("connection closed before the end marker"))
}

/// The slow-readers table and its JSON.
pub(crate) fn print(s: &Settings, r: &SlowRow, out: &mut Map<String, Value>) {
    println!();
    println!(
        "slow readers: {} MiB flood to {} viewers reading at {} MB/s (every fourth at a quarter), \
         median of {} runs",
        r.mb, r.viewers, r.pace_mbps, s.flood_repeat
    );
    let (lo, hi) = spread(&r.ratios);
    println!(
        "{:>10} {:>8} {:>7} {:>13} {:>12} {:>9} {:>6} {:>15} {:>9} {:>16}",
        "last s",
        "bare s",
        "ratio",
        "ratio spread",
        "daemon CPU",
        "gen CPU",
        "busy",
        "MiB per viewer",
        "snapshots",
        "last read KiB"
    );
    println!(
        "{:>10.3} {:>8.3} {:>7.2} {:>13} {:>12.2} {:>9.2} {:>6.2} {:>15.2} {:>9} {:>16}",
        r.seconds,
        r.bare_seconds,
        r.ratio,
        format!("{lo:.2}-{hi:.2}"),
        r.daemon_cpu_s,
        r.gen_cpu_s,
        r.busy,
        r.bytes_mean as f64 / 1048576.0,
        r.snapshots,
        format!("{} ({} output)", r.last_read.0 / 1024, r.last_read.1 / 1024)
    );
    out.insert(
        "slow".into(),
        json!({
            "viewers": r.viewers,
            "mb": r.mb,
            "pace_mbps": r.pace_mbps,
            "seconds": round3(r.seconds),
            "bare_seconds": round3(r.bare_seconds),
            "ratio": round3(r.ratio),
            "ratios": r.ratios.iter().map(|&x| round3(x)).collect::<Vec<_>>(),
            "daemon_cpu_s": round3(r.daemon_cpu_s),
            "gen_cpu_s": round3(r.gen_cpu_s),
            "busy": round3(r.busy),
            "bytes_mean": r.bytes_mean,
            "snapshots": r.snapshots,
            "last_read_bytes": r.last_read.0,
            "last_read_output_bytes": r.last_read.1,
        }),
    );
}
