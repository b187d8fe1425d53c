//! flood: `cat` of a base64 file to 1, 10 and 100 viewers, timed to the last viewer's end
//! marker, against the same `cat` on a bare PTY in the same run; a joiner then checks the screen.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::bare::bare_pty;
use crate::client::{
    connect, contains, is_snapshot_chunk, on_pool, Conn, Snapshots, Tasks, Ws, STEP_TIMEOUT,
};
use crate::daemon::Daemon;
use crate::join::join_once;
use crate::launcher::log_tail;
use crate::procfs::{process_cpu_seconds, CpuTimes};
use crate::report::{fail, median_by, round3, spread, Report};
use crate::{Ctx, Settings};

/// Runs each `--flood-viewers` configuration `--flood-repeat` times; reports the median run.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    // The bare PTY alone varies by about ±20% from run to run on a 2-core machine,
    // so one run's ratio says little: report the median run and the spread.
    'config: for &k in &s.flood_viewers {
        let mut runs = Vec::with_capacity(s.flood_repeat);
        for r in 1..=s.flood_repeat {
            eprintln!(
                "load: flood, {k} viewers, {} MiB, run {r} of {}",
                s.flood_mb, s.flood_repeat
            );
            match flood_run(ctx, k, false, true, s.flood_mb, &mut report.notes).await {
                Ok(row) => {
                    eprintln!(
                        "load:   {:.3} s, bare {:.3} s, ratio {:.2}, busy {:.2}, \
                             bare busy {:.2}",
                        row.seconds, row.bare_seconds, row.ratio, row.busy, row.bare_busy
                    );
                    runs.push(row);
                }
                Err(e) => {
                    fail(report, format!("flood to {k} viewers, run {r}: {e:#}"));
                    continue 'config;
                }
            }
        }
        report.flood.extend(median_run(runs));
    }
}

/// The text every flood `cat`s.
#[derive(Clone)]
pub(crate) struct FloodFile {
    pub(crate) path: PathBuf,
    pub(crate) len: u64,
    /// Its last 3 lines, each with its newline: what the screen shows above the end marker.
    pub(crate) last_lines: String,
}

/// Writes about `mb` MiB of base64 (76-char lines) of random bytes.
pub(crate) fn make_flood_file(dir: &Path, mb: usize) -> Result<FloodFile> {
    // base64 makes one 77-byte line (76 chars and '\n') of each 57 raw bytes.
    let raw_len = (mb * 1024 * 1024 / 77) * 57;
    let raw = dir.join("flood.raw");
    let mut random = Vec::with_capacity(raw_len);
    File::open("/dev/urandom")
        .and_then(|f| f.take(raw_len as u64).read_to_end(&mut random))
        .context("reading /dev/urandom")?;
    std::fs::write(&raw, &random).context("writing the random file")?;
    let out = dir.join("flood.b64");
    let status = Command::new("base64")
        .args(["-w", "76"])
        .arg(&raw)
        .stdout(File::create(&out).context("creating the flood file")?)
        .status()
        .context("running base64")?;
    if !status.success() {
        bail!("base64 failed: {status}");
    }
    std::fs::remove_file(&raw).ok();
    let mut file = File::open(&out).context("opening the flood file")?;
    let len = file.metadata()?.len();
    // Three 77-byte lines fit in the last KiB.
    file.seek(SeekFrom::Start(len.saturating_sub(1024)))?;
    let mut end = Vec::new();
    file.read_to_end(&mut end)?;
    let lines: Vec<&[u8]> = end.split(|&b| b == b'\n').rev().skip(1).take(3).collect();
    let mut last_lines = String::new();
    for line in lines.iter().rev() {
        last_lines.push_str(&String::from_utf8_lossy(line));
        last_lines.push('\n');
    }
    Ok(FloodFile {
        path: out,
        len,
        last_lines,
    })
}

/// `plain` coloured as `ls --color`, `grep --color` and compilers colour their output: each
/// 19-character word in an SGR of its own (16, 256 and RGB colours, bold), resets, an erase in
/// the line now and then; cut to `mb` MiB at a line's end.
pub(crate) fn colour_flood_file(dir: &Path, plain: &FloodFile, mb: usize) -> Result<FloodFile> {
    let text = std::fs::read(&plain.path).context("reading the flood file")?;
    let limit = mb * 1024 * 1024;
    let mut out = Vec::with_capacity(limit + 256);
    let mut shown: Vec<&[u8]> = Vec::new();
    for (i, line) in text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let start = out.len();
        for (w, word) in line.chunks(19).enumerate() {
            let sgr = match (i + w) % 5 {
                0 => format!("\x1b[01;3{}m", (i + w) % 8),
                1 => format!("\x1b[38;5;{}m", (i * 7 + w) % 256),
                2 => format!("\x1b[38;2;{};{};{}m", i % 256, w * 40, 200),
                3 => "\x1b[0m".to_owned(),
                _ => format!("\x1b[4{}m\x1b[K", i % 8),
            };
            out.extend_from_slice(sgr.as_bytes());
            out.extend_from_slice(word);
            if w % 2 == 1 {
                out.extend_from_slice(b"\x1b[m");
            }
        }
        out.push(b'\n');
        if out.len() > limit {
            out.truncate(start);
            break;
        }
        shown.push(line);
    }
    let path = dir.join("flood-colour.txt");
    std::fs::write(&path, &out).context("writing the coloured flood file")?;
    let mut last_lines = String::new();
    for line in &shown[shown.len().saturating_sub(3)..] {
        last_lines.push_str(&String::from_utf8_lossy(line));
        last_lines.push('\n');
    }
    Ok(FloodFile {
        path,
        len: out.len() as u64,
        last_lines,
    })
}

/// The shell command of one flood and the end marker it prints last. The command computes the
/// marker (`$((…))`) so that its own echo on the terminal does not contain it.
pub(crate) fn flood_command(file: &Path) -> (String, Vec<u8>) {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    let cmd = format!(
        "cat '{}'; echo FLOOD-END-$((1000+{n}))-MARK",
        file.display()
    );
    (cmd, format!("FLOOD-END-{}-MARK", 1000 + n).into_bytes())
}

/// Finds the end marker in a stream, also when it is split across reads.
pub(crate) struct MarkerScan {
    pub(crate) marker: Vec<u8>,
    /// The last `marker.len() - 1` bytes seen.
    pub(crate) tail: Vec<u8>,
}

impl MarkerScan {
    pub(crate) fn new(marker: Vec<u8>) -> MarkerScan {
        assert!(marker.contains(&b'-') && marker.len() > 1);
        MarkerScan {
            marker,
            tail: Vec::new(),
        }
    }

    /// True when the marker ends in `data`.
    pub(crate) fn feed(&mut self, data: &[u8]) -> bool {
        let keep = self.marker.len() - 1;
        // Quick reject: base64 never holds '-' and the marker does, so any piece of it (or the
        // whole) has one; `contains` on bytes is a memchr, cheap next to a window scan per byte.
        let found = (data.contains(&b'-') || self.tail.contains(&b'-')) && {
            let mut joined = self.tail.clone();
            joined.extend_from_slice(&data[..data.len().min(keep)]);
            contains(&joined, &self.marker) || contains(data, &self.marker)
        };
        if data.len() >= keep {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - keep..]);
        } else {
            self.tail.extend_from_slice(data);
            let excess = self.tail.len().saturating_sub(keep);
            self.tail.drain(..excess);
        }
        found
    }
}

/// How far one flood viewer got, readable while it runs (for a clear timeout message).
#[derive(Default)]
pub(crate) struct Progress {
    /// Live output bytes (frame payloads).
    pub(crate) bytes: AtomicU64,
    /// Snapshot chunk bytes (frame payloads, headers included).
    pub(crate) snapshot_bytes: AtomicU64,
    pub(crate) snapshots: AtomicUsize,
}

pub(crate) struct FloodRow {
    viewers: usize,
    mb: usize,
    file_bytes: u64,
    pub(crate) seconds: f64,
    pub(crate) daemon_cpu_s: f64,
    /// The generator's own CPU seconds (all its threads) in the same window.
    pub(crate) gen_cpu_s: f64,
    /// How busy the whole machine was in that window, as a fraction of all cores.
    pub(crate) busy: f64,
    /// Output bytes received, mean and minimum over the viewers (snapshots excluded).
    bytes_mean: u64,
    bytes_min: u64,
    /// Everything delivered: output and snapshot bytes, summed over the viewers.
    bytes_total: u64,
    /// Snapshots received after `ready`, all viewers together.
    pub(crate) snapshots: usize,
    /// The daemon's own counts during the flood (`/metrics`, after minus before).
    pub(crate) snapshots_sent: u64,
    pub(crate) resyncs: u64,
    /// Output bytes the daemon's screen model skipped (plain text that scrolled away unseen).
    parse_skipped: u64,
    bare_seconds: f64,
    /// `busy` during the bare-PTY run.
    bare_busy: f64,
    ratio: f64,
    /// The ratio of every run of this configuration (`--flood-repeat`), in run order; this row is
    /// the run with the median.
    ratios: Vec<f64>,
    pub(crate) daemon_resyncs: usize,
}

/// The run with the median ratio, carrying every run's ratio.
/// Opens session `id` as a shell, answering once it reads its input, and joins `viewers - 1`
/// more viewers: the typist first.
pub(crate) async fn shell_with_viewers(
    ctx: &Ctx,
    daemon: &Daemon,
    id: uuid::Uuid,
    viewers: usize,
) -> Result<Vec<Conn>> {
    let typist_url = daemon.ws(id, "?assistant=shell");
    let typist = on_pool(&ctx.pool, async move {
        let mut c = Conn::open(typist_url).await?;
        // The shell answers: it is up and reading its input.
        c.send(b"echo SHELL-$((1+1))-UP\r").await?;
        c.wait_text("SHELL-2-UP").await?;
        Ok(c)
    })
    .await
    .context("creating the shell session")?;
    let mut conns = vec![typist];
    for v in 1..viewers {
        let conn = on_pool(&ctx.pool, Conn::open(daemon.ws(id, "")))
            .await
            .with_context(|| format!("joining viewer {v}"))?;
        conns.push(conn);
    }
    Ok(conns)
}

fn median_run(runs: Vec<FloodRow>) -> Option<FloodRow> {
    let (mut row, ratios) = median_by(runs, |r| r.ratio)?;
    row.ratios = ratios;
    Some(row)
}

/// One flood to `viewers` viewers (the first types the command); with `stalled`, one more viewer
/// joins and never reads; `recording`: whether the daemon records sessions.
pub(crate) async fn flood_run(
    ctx: &Ctx,
    viewers: usize,
    stalled: bool,
    recording: bool,
    mb: usize,
    notes: &mut Vec<String>,
) -> Result<FloodRow> {
    let flood = ctx.flood_file.clone().context("no flood file")?;
    let (file, file_bytes) = (flood.path, flood.len);
    // Generous: a 2-core box with 100 viewers may take minutes; the point is never to hang.
    let limit = Duration::from_secs(60 + (mb * viewers) as u64);

    // The physical limit first, in the same run: the same command on a PTY of our own.
    let (bare_cmd, bare_marker) = flood_command(&file);
    let (bare_time, bare_busy) =
        bare_pty(&bare_cmd, bare_marker, limit).context("the bare-PTY baseline")?;
    let bare_seconds = bare_time.as_secs_f64();

    let what = format!(
        "flood to {viewers} viewers{}{}",
        if stalled { " + 1 stalled" } else { "" },
        if recording { "" } else { " unrecorded" }
    );
    let config = if recording {
        crate::daemon::CONFIG
    } else {
        crate::daemon::NO_RECORDING_CONFIG
    };
    let mut daemon = Daemon::start_config(ctx, &what.replace(' ', "-"), config)?;
    let id = daemon.new_session();
    let mut tasks = Tasks::default();

    let mut conns = shell_with_viewers(ctx, &daemon, id, viewers).await?;
    // Held, never read: the daemon's writes to it fill the socket buffers and then block.
    let _stalled_ws = if stalled {
        let url = daemon.ws(id, "");
        Some(on_pool(&ctx.pool, async move { connect(&url).await }).await?)
    } else {
        None
    };
    // Everyone counted in, so no join lands inside the measurement.
    let expect = (viewers + usize::from(stalled)) as u64;
    let mut typist = conns.remove(0);
    let typist = on_pool(&ctx.pool, async move {
        typist.wait_viewers(expect).await?;
        Ok(typist)
    })
    .await?;
    conns.insert(0, typist);

    let (cmd, marker) = flood_command(&file);
    let mut sinks = Vec::new();
    let mut readers = Vec::new();
    let mut progress = Vec::new();
    for conn in conns {
        let (sink, stream) = conn.ws.split();
        sinks.push(sink);
        let p = Arc::new(Progress::default());
        let task = ctx.pool.spawn(flood_reader(
            stream,
            MarkerScan::new(marker.clone()),
            p.clone(),
        ));
        tasks.0.push(task.abort_handle());
        readers.push(task);
        progress.push(p);
    }

    let metrics_before = daemon.metrics().await?;
    let cpu_before = daemon.cpu_seconds()?;
    let gen_cpu_before = process_cpu_seconds("self")?;
    let machine_before = CpuTimes::now()?;
    let start = Instant::now();
    let typing = sinks[0].send(Message::Binary(format!("{cmd}\r").into_bytes()));
    tokio::time::timeout(STEP_TIMEOUT, typing)
        .await
        .map_err(|_| anyhow!("typing the flood command: send blocked for {STEP_TIMEOUT:?}"))?
        .context("typing the flood command")?;
    let deadline = start + limit;
    let mut last = start;
    for (v, reader) in readers.iter_mut().enumerate() {
        let done = match timeout_at(deadline.into(), reader).await {
            Ok(Ok(Ok(at))) => at,
            Ok(Ok(Err(e))) => bail!("viewer {v}: {e:#}"),
            Ok(Err(e)) => bail!("viewer {v}: reader task failed: {e}"),
            Err(_) => {
                let got: Vec<String> = progress
                    .iter()
                    .map(|p| {
                        format!(
                            "{} B/{} snapshots",
                            p.bytes.load(Ordering::Relaxed),
                            p.snapshots.load(Ordering::Relaxed)
                        )
                    })
                    .collect();
                bail!(
                    "viewer {v} did not see the end marker within {limit:?} (file {file_bytes} B; \
                     per viewer: {got:?}); daemon log:\n{}",
                    log_tail(&daemon.log)
                );
            }
        };
        last = last.max(done);
    }
    let seconds = last.duration_since(start).as_secs_f64();
    // Read as the last reader is done (the driver wakes on it), before anything else runs.
    let busy = CpuTimes::now()?.busy_since(&machine_before);
    let gen_cpu_s = process_cpu_seconds("self")? - gen_cpu_before;
    let daemon_cpu_s = daemon.cpu_seconds()? - cpu_before;
    let metrics_after = daemon.metrics().await?;
    // The right screen: what a joiner now gets (the daemon's model, which skipped most of the
    // flood unparsed) ends with the file's last lines and the marker. Every viewer got the
    // same byte count and no resync (checked by the caller's table), so the same stream.
    let url = daemon.ws(id, "");
    let joined = on_pool(&ctx.pool, async move { join_once(&url).await })
        .await
        .context("joining after the flood")?;
    let mut term = vt100::Parser::new(
        std::num::NonZeroU16::new(24).context("rows")?,
        std::num::NonZeroU16::new(80).context("cols")?,
        0,
    );
    term.process(&joined.ansi()?);
    let contents = term.screen().contents();
    let expect = format!("{}{}", flood.last_lines, String::from_utf8_lossy(&marker));
    if !contents.contains(&expect) {
        bail!("after the flood a joiner sees the wrong screen:\n{contents}\nexpected it to contain:\n{expect}");
    }

    drop(tasks);
    drop(sinks);
    let daemon_resyncs = daemon.finish(&what, notes);
    let bytes: Vec<u64> = progress
        .iter()
        .map(|p| p.bytes.load(Ordering::Relaxed))
        .collect();
    Ok(FloodRow {
        viewers,
        mb,
        file_bytes,
        seconds,
        daemon_cpu_s,
        gen_cpu_s,
        busy,
        bytes_mean: bytes.iter().sum::<u64>() / bytes.len() as u64,
        bytes_min: bytes.iter().copied().min().unwrap_or(0),
        bytes_total: progress
            .iter()
            .map(|p| p.bytes.load(Ordering::Relaxed) + p.snapshot_bytes.load(Ordering::Relaxed))
            .sum(),
        snapshots_sent: metrics_after.since(&metrics_before, "ptyhub_snapshots_total"),
        resyncs: metrics_after.since(&metrics_before, "ptyhub_resyncs_total"),
        parse_skipped: metrics_after.since(&metrics_before, "ptyhub_parse_skipped_bytes_total"),
        snapshots: progress
            .iter()
            .map(|p| p.snapshots.load(Ordering::Relaxed))
            .sum(),
        bare_seconds,
        bare_busy,
        ratio: seconds / bare_seconds,
        ratios: vec![seconds / bare_seconds],
        daemon_resyncs,
    })
}

/// Reads one viewer's stream until the end marker; returns when it arrived.
pub(crate) async fn flood_reader(
    mut stream: SplitStream<Ws>,
    mut scan: MarkerScan,
    progress: Arc<Progress>,
) -> Result<Instant> {
    let mut snaps = Snapshots::default();
    while let Some(msg) = stream.next().await {
        match msg.context("connection failed during the flood")? {
            Message::Binary(b) if is_snapshot_chunk(&b) => {
                progress
                    .snapshot_bytes
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                // A resync: the screen (which may already show the marker) replaces the backlog.
                if let Some(ansi) = snaps.push(&b)? {
                    progress.snapshots.fetch_add(1, Ordering::Relaxed);
                    scan.tail.clear();
                    if contains(&ansi, &scan.marker) {
                        return Ok(Instant::now());
                    }
                }
            }
            Message::Binary(b) => {
                progress.bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
                if scan.feed(&b) {
                    return Ok(Instant::now());
                }
            }
            Message::Text(t) if t.contains("\"error\"") => bail!("server error: {t}"),
            Message::Close(f) => bail!("server closed the connection: {f:?}"),
            _ => {}
        }
    }
    bail!("connection closed before the end marker")
}

/// The flood table and its JSON.
pub(crate) fn print(s: &Settings, rows: &[FloodRow], out: &mut Map<String, Value>) {
    println!();
    println!("flood: `cat` of base64 text to every viewer, against the same on a bare PTY");
    println!(
        "  (every run checks that a joiner then sees the file's last lines and the marker; \
         seconds: until every viewer has the end marker; the median run by ratio of {}, \
         ratio_min/max over them; cpu_s: the daemon's CPU seconds, gen_cpu_s: the \
         generator's; busy, bare_busy: the whole machine, fraction of all cores; delivered: \
         output and snapshot bytes, all viewers; skip_MiB: output the daemon's screen model \
         did not need to parse; snapshots, resyncs: the daemon's /metrics during the flood)",
        s.flood_repeat
    );
    println!(
        "{:>7} {:>4} {:>9} {:>9} {:>6} {:>9} {:>9} {:>8} {:>9} {:>5} {:>9} {:>14} {:>12} {:>12} {:>8} {:>9} {:>8}",
        "viewers",
        "MiB",
        "seconds",
        "bare_s",
        "ratio",
        "ratio_min",
        "ratio_max",
        "cpu_s",
        "gen_cpu_s",
        "busy",
        "bare_busy",
        "delivered",
        "bytes_mean",
        "bytes_min",
        "skip_MiB",
        "snapshots",
        "resyncs"
    );
    let mut json_rows = Vec::new();
    for f in rows {
        let (ratio_min, ratio_max) = spread(&f.ratios);
        println!(
            "{:>7} {:>4} {:>9.3} {:>9.3} {:>6.2} {:>9.2} {:>9.2} {:>8.2} {:>9.2} {:>5.2} {:>9.2} {:>14} {:>12} {:>12} {:>8.1} {:>9} {:>8}",
            f.viewers,
            f.mb,
            f.seconds,
            f.bare_seconds,
            f.ratio,
            ratio_min,
            ratio_max,
            f.daemon_cpu_s,
            f.gen_cpu_s,
            f.busy,
            f.bare_busy,
            f.bytes_total,
            f.bytes_mean,
            f.bytes_min,
            f.parse_skipped as f64 / f64::from(1 << 20),
            f.snapshots_sent,
            f.resyncs
        );
        json_rows.push(json!({
            "viewers": f.viewers,
            "mb": f.mb,
            "file_bytes": f.file_bytes,
            "seconds": round3(f.seconds),
            "daemon_cpu_s": round3(f.daemon_cpu_s),
            "gen_cpu_s": round3(f.gen_cpu_s),
            "busy": round3(f.busy),
            "bytes_per_viewer": f.bytes_mean,
            "bytes_min": f.bytes_min,
            "bytes_delivered": f.bytes_total,
            "snapshots_used": f.snapshots_sent,
            "resyncs_used": f.resyncs,
            "parse_skipped_bytes": f.parse_skipped,
            "snapshots": f.snapshots,
            "bare_pty_seconds": round3(f.bare_seconds),
            "bare_busy": round3(f.bare_busy),
            "ratio": round3(f.ratio),
            "ratio_min": round3(ratio_min),
            "ratio_max": round3(ratio_max),
            "ratios": f.ratios.iter().map(|&r| round3(r)).collect::<Vec<_>>(),
            "daemon_resyncs": f.daemon_resyncs,
        }));
    }
    out.insert("flood".into(), Value::Array(json_rows));
}
