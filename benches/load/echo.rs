//! echo: the 1-byte round trip through a raw-mode `cat`, from the typist and to every idle
//! viewer, with the same on a bare PTY and through a bare relay in the same run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::bare::{bare_echo, relay_echo};
use crate::client::{is_snapshot_chunk, on_pool, Conn, Snapshots, Tasks};
use crate::daemon::Daemon;
use crate::report::{fail, ms, opt, pct_us, Report};
use crate::wire::{Stamped, WireClock};
use crate::{Ctx, Settings};

/// One echo sample, writer and all viewers.
pub(crate) const ECHO_TIMEOUT: Duration = Duration::from_secs(5);
/// Echo round trips made before measuring (first allocations, caches, TCP windows).
const ECHO_WARMUP: usize = 20;

/// When a viewer got a frame: when its task read it, and when its bytes reached the viewer's
/// socket (the kernel's receive time, `None` where the socket does not keep it). Viewers share
/// these two cores with the daemon at a lower priority, so the read can come well after the
/// wire; a browser on another machine reads at the wire time plus the network.
#[derive(Clone, Copy)]
pub(crate) struct Arrival {
    pub(crate) read: Instant,
    pub(crate) wire: Option<Instant>,
}

impl Arrival {
    fn max(self, other: Arrival) -> Arrival {
        Arrival {
            read: self.read.max(other.read),
            wire: match (self.wire, other.wire) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            },
        }
    }
}

/// What a viewer task reports: each frame with its arrival.
pub(crate) type Frames = mpsc::UnboundedReceiver<(Arrival, Vec<u8>)>;

/// An echo run's figures, each sorted: the typist's round trips, and the times from each key
/// to the last viewer's read of it and to its reaching the last viewer's socket (both empty
/// without viewers; `wire` also when a viewer's socket keeps no receive times).
#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) rtt: Vec<Duration>,
    pub(crate) all: Vec<Duration>,
    pub(crate) wire: Vec<Duration>,
}

/// Runs echo once per `--viewers` count.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    for &k in &s.viewers {
        // The gaps side by side, so that their figures share the machine's moment.
        for &gap in &s.echo_gaps {
            let ms = gap.as_millis();
            eprintln!(
                "load: echo, {k} idle viewers, {ms} ms gap, {} samples",
                s.samples
            );
            match echo_run(ctx, k, s.samples, gap, &mut report.notes).await {
                Ok(row) => report.echo.push(row),
                Err(e) => fail(report, format!("echo with {k} viewers, {ms} ms gap: {e:#}")),
            }
        }
    }
}

/// Raw mode without echo: cat gets each byte as it arrives and writes it straight back, so the
/// round trip is the daemon's (and the PTY's), not a line editor's. Run by the daemon's `echo`
/// assistant and, for the baseline, on a bare PTY.
pub(crate) const ECHO_SCRIPT: &str = "stty raw -echo && printf ECHO-READY && exec cat";

pub(crate) struct EchoRow {
    viewers: usize,
    /// Between a key's echo (and, with a gap, every viewer's) and the next key.
    gap: Duration,
    samples: usize,
    /// Writer's round trips, sorted.
    rtt: Vec<Duration>,
    /// The same round trip on a bare PTY, sorted.
    bare: Vec<Duration>,
    /// The same round trip and time to the last viewer through a bare relay, sorted.
    relay: Samples,
    /// Send to the last viewer having the byte (read, and on the wire), sorted (empty without
    /// viewers).
    all: Vec<Duration>,
    wire: Vec<Duration>,
    /// Viewers' connect-to-ready times, sorted.
    joins: Vec<Duration>,
    /// Snapshots the idle viewers got after joining (resyncs; should be 0).
    snapshots: usize,
    daemon_resyncs: usize,
}

pub(crate) async fn echo_run(
    ctx: &Ctx,
    viewers: usize,
    samples: usize,
    pause: Duration,
    notes: &mut Vec<String>,
) -> Result<EchoRow> {
    // The physical limit first, in the same run and on the same runtime as the writer.
    let bare = bare_echo(samples, pause)
        .await
        .context("the bare-PTY baseline")?;
    let relay = relay_echo(ctx, viewers, samples, pause)
        .await
        .context("the bare-relay baseline")?;
    let mut daemon = Daemon::start(ctx, &format!("echo-{viewers}"))?;
    let id = daemon.new_session();
    let mut tasks = Tasks::default();

    // The writer is opened here, on the driver's runtime, not on the viewers' pool.
    let mut writer = Conn::open(daemon.ws(id, "?assistant=echo"))
        .await
        .context("creating the echo session")?;
    writer
        .wait_text("ECHO-READY")
        .await
        .context("waiting for the raw-mode cat")?;

    let snapshots = Arc::new(AtomicUsize::new(0));
    let mut rxs = Vec::with_capacity(viewers);
    let mut joins = Vec::with_capacity(viewers);
    // One at a time, so the join times are not a thundering herd.
    for v in 0..viewers {
        let (conn, clock) = on_pool(&ctx.echo_pool, Conn::open_wire(daemon.ws(id, "")))
            .await
            .with_context(|| format!("joining idle viewer {v}"))?;
        joins.push(conn.join_time);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = ctx
            .echo_pool
            .spawn(idle_viewer(conn.ws, clock, tx, snapshots.clone()));
        tasks.0.push(task.abort_handle());
        rxs.push(rx);
    }

    let measured = echo_samples(samples, pause, &mut rxs, async |i, byte, deadline| {
        writer.send(&[byte]).await?;
        loop {
            match timeout_at(deadline.into(), writer.ws.next()).await {
                Err(_) => bail!(
                    "sample {i}: the writer got no echo of {:?} within {ECHO_TIMEOUT:?}",
                    byte as char
                ),
                Ok(None) | Ok(Some(Err(_))) => bail!("sample {i}: the writer's connection closed"),
                Ok(Some(Ok(Message::Binary(b)))) if !is_snapshot_chunk(&b) && b.contains(&byte) => {
                    return Ok(())
                }
                Ok(Some(Ok(Message::Close(f)))) => bail!("sample {i}: server closed: {f:?}"),
                Ok(Some(Ok(_))) => {}
            }
        }
    })
    .await?;

    drop(tasks);
    drop(writer);
    let daemon_resyncs = daemon.finish(&format!("echo with {viewers} viewers"), notes);
    joins.sort();
    Ok(EchoRow {
        viewers,
        gap: pause,
        samples,
        rtt: measured.rtt,
        bare,
        relay,
        all: measured.all,
        wire: measured.wire,
        joins,
        snapshots: snapshots.load(Ordering::Relaxed),
        daemon_resyncs,
    })
}

/// An echo run's samples, after `ECHO_WARMUP` unmeasured ones: `round_trip(sample, byte,
/// deadline)` sends the byte and returns once the typist has its echo. With a gap, every
/// viewer must get it too before the gap and the next key; with no gap the next key goes at
/// once (typing fast: the previous key's fan-out to the viewers overlaps it) and the viewers'
/// arrivals are matched to the keys afterwards, in order.
pub(crate) async fn echo_samples(
    samples: usize,
    pause: Duration,
    rxs: &mut [Frames],
    mut round_trip: impl AsyncFnMut(usize, u8, Instant) -> Result<()>,
) -> Result<Samples> {
    let mut rtt = Vec::with_capacity(samples);
    let mut last_at: Vec<Arrival> = Vec::with_capacity(samples);
    let mut sent_at = Vec::with_capacity(ECHO_WARMUP + samples);
    for i in 0..ECHO_WARMUP + samples {
        let byte = sample_byte(i);
        let sent = Instant::now();
        let deadline = sent + ECHO_TIMEOUT;
        round_trip(i, byte, deadline).await?;
        let elapsed = sent.elapsed();
        sent_at.push(sent);
        if i >= ECHO_WARMUP {
            rtt.push(elapsed);
        }
        if !pause.is_zero() {
            let last = last_arrival(rxs, byte, deadline, i).await?;
            if let (true, Some(last)) = (i >= ECHO_WARMUP, last) {
                last_at.push(last);
            }
            tokio::time::sleep(pause).await;
        }
    }
    if pause.is_zero() && !rxs.is_empty() {
        let deadline = Instant::now() + ECHO_TIMEOUT;
        let mut last: Vec<Option<Arrival>> = vec![None; sent_at.len()];
        for (v, rx) in rxs.iter_mut().enumerate() {
            let arrivals = arrivals_in_order(rx, sent_at.len(), deadline)
                .await
                .with_context(|| format!("viewer {v}"))?;
            for (slot, at) in last.iter_mut().zip(arrivals) {
                *slot = Some(slot.map_or(at, |l| l.max(at)));
            }
        }
        for (i, at) in last.into_iter().enumerate().skip(ECHO_WARMUP) {
            last_at.push(at.with_context(|| format!("sample {i}: no arrival"))?);
        }
    }
    let sent = &sent_at[sent_at.len() - last_at.len()..];
    let mut all: Vec<Duration> = (sent.iter().zip(&last_at))
        .map(|(s, at)| at.read.saturating_duration_since(*s))
        .collect();
    let mut wire: Vec<Duration> = (sent.iter().zip(&last_at))
        .map_while(|(s, at)| Some(at.wire?.saturating_duration_since(*s)))
        .collect();
    if wire.len() < all.len() {
        wire.clear();
    }
    rtt.sort();
    all.sort();
    wire.sort();
    Ok(Samples { rtt, all, wire })
}

/// Sample `i`'s key: one that differs from the previous sample's, so a late frame is never
/// taken for it; always a lowercase letter, which nothing else the echo program prints is.
fn sample_byte(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

/// The arrival time of each of the first `keys` keys at one viewer: its frames carry the keys'
/// echoes in order (other output has no lowercase letter and is skipped).
async fn arrivals_in_order(
    rx: &mut Frames,
    keys: usize,
    deadline: Instant,
) -> Result<Vec<Arrival>> {
    let mut arrivals = Vec::with_capacity(keys);
    while arrivals.len() < keys {
        let (at, frame) = match timeout_at(deadline.into(), rx.recv()).await {
            Err(_) => bail!(
                "had {} of {keys} echoes within {ECHO_TIMEOUT:?}",
                arrivals.len()
            ),
            Ok(None) => bail!(
                "connection closed after {} of {keys} echoes",
                arrivals.len()
            ),
            Ok(Some(got)) => got,
        };
        for &b in frame.iter().filter(|b| b.is_ascii_lowercase()) {
            let want = sample_byte(arrivals.len());
            if b != want || arrivals.len() == keys {
                bail!(
                    "echo {} was {:?}, not {:?}: a key lost or repeated",
                    arrivals.len(),
                    b as char,
                    want as char
                );
            }
            arrivals.push(at);
        }
    }
    Ok(arrivals)
}

/// Waits until every viewer has a frame containing `byte`; returns when the last one got it
/// (`None` without viewers).
async fn last_arrival(
    rxs: &mut [Frames],
    byte: u8,
    deadline: Instant,
    sample: usize,
) -> Result<Option<Arrival>> {
    let mut last: Option<Arrival> = None;
    for (v, rx) in rxs.iter_mut().enumerate() {
        let at = loop {
            match timeout_at(deadline.into(), rx.recv()).await {
                Err(_) => bail!(
                    "sample {sample}: viewer {v} did not get {:?} within {ECHO_TIMEOUT:?}",
                    byte as char
                ),
                Ok(None) => bail!("sample {sample}: viewer {v}'s connection closed"),
                Ok(Some((at, b))) if b.contains(&byte) => break at,
                Ok(Some(_)) => {}
            }
        };
        last = Some(last.map_or(at, |l| l.max(at)));
    }
    Ok(last)
}

/// Reads all the time, like a browser tab; reports every output frame with its arrival.
async fn idle_viewer(
    mut ws: WebSocketStream<Stamped>,
    clock: WireClock,
    tx: mpsc::UnboundedSender<(Arrival, Vec<u8>)>,
    snapshots: Arc<AtomicUsize>,
) {
    let mut snaps = Snapshots::default();
    while let Some(Ok(msg)) = ws.next().await {
        let at = Arrival {
            read: Instant::now(),
            wire: clock.arrival(),
        };
        if let Message::Binary(b) = msg {
            if is_snapshot_chunk(&b) {
                if let Ok(Some(_)) = snaps.push(&b) {
                    snapshots.fetch_add(1, Ordering::Relaxed);
                }
            } else if tx.send((at, b)).is_err() {
                return;
            }
        }
    }
    // Dropping `tx` tells the driver this viewer is gone.
}

/// The echo table and its JSON.
pub(crate) fn print(s: &Settings, rows: &[EchoRow], out: &mut Map<String, Value>) {
    println!();
    println!(
        "echo: 1-byte round trip through raw-mode cat, {} samples (µs); gap: ms from one echo to \
         the next key (0: at once, not waiting for the viewers)",
        s.samples,
    );
    println!(
        "  (all_*: to the last idle viewer's read, its threads at nice {}; wire_*: to the \
         bytes reaching the last viewer's socket (kernel receive time); bare_*: the same cat \
         on a bare PTY; relay_*: through a bare relay, plain TCP and two copying threads, to \
         as many viewers)",
        s.viewer_nice
    );
    println!(
        "{:>7} {:>4} {:>7} {:>7} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>11} {:>10} {:>11} {:>11} {:>7}",
        "viewers",
        "gap",
        "p50_us",
        "p99_us",
        "max_us",
        "all_p50_us",
        "all_p99_us",
        "wire_p50",
        "wire_p99",
        "bare_p50",
        "bare_p99",
        "relay_p50",
        "relay_p99",
        "relay_all99",
        "relay_wire99",
        "join_p50_ms",
        "join_max_ms",
        "resyncs"
    );
    let mut json_rows = Vec::new();
    for e in rows {
        let join_max = e.joins.last().map(|d| d.as_micros() as u64);
        println!(
            "{:>7} {:>4} {:>7} {:>7} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>11} {:>10} {:>11} {:>11} {:>7}",
            e.viewers,
            e.gap.as_millis(),
            opt(pct_us(&e.rtt, 0.5)),
            opt(pct_us(&e.rtt, 0.99)),
            opt(pct_us(&e.rtt, 1.0)),
            opt(pct_us(&e.all, 0.5)),
            opt(pct_us(&e.all, 0.99)),
            opt(pct_us(&e.wire, 0.5)),
            opt(pct_us(&e.wire, 0.99)),
            opt(pct_us(&e.bare, 0.5)),
            opt(pct_us(&e.bare, 0.99)),
            opt(pct_us(&e.relay.rtt, 0.5)),
            opt(pct_us(&e.relay.rtt, 0.99)),
            opt(pct_us(&e.relay.all, 0.99)),
            opt(pct_us(&e.relay.wire, 0.99)),
            ms(pct_us(&e.joins, 0.5)),
            ms(join_max),
            e.snapshots + e.daemon_resyncs
        );
        json_rows.push(json!({
            "viewers": e.viewers,
            "gap_ms": e.gap.as_millis() as u64,
            "samples": e.samples,
            "p50_us": pct_us(&e.rtt, 0.5),
            "p99_us": pct_us(&e.rtt, 0.99),
            "max_us": pct_us(&e.rtt, 1.0),
            "all_p50_us": pct_us(&e.all, 0.5),
            "all_p99_us": pct_us(&e.all, 0.99),
            "all_max_us": pct_us(&e.all, 1.0),
            "wire_p50_us": pct_us(&e.wire, 0.5),
            "wire_p99_us": pct_us(&e.wire, 0.99),
            "wire_max_us": pct_us(&e.wire, 1.0),
            "bare_pty_p50_us": pct_us(&e.bare, 0.5),
            "bare_pty_p99_us": pct_us(&e.bare, 0.99),
            "bare_pty_max_us": pct_us(&e.bare, 1.0),
            "relay_p50_us": pct_us(&e.relay.rtt, 0.5),
            "relay_p99_us": pct_us(&e.relay.rtt, 0.99),
            "relay_max_us": pct_us(&e.relay.rtt, 1.0),
            "relay_all_p50_us": pct_us(&e.relay.all, 0.5),
            "relay_all_p99_us": pct_us(&e.relay.all, 0.99),
            "relay_wire_p50_us": pct_us(&e.relay.wire, 0.5),
            "relay_wire_p99_us": pct_us(&e.relay.wire, 0.99),
            "join_p50_us": pct_us(&e.joins, 0.5),
            "join_max_us": join_max,
            "viewer_snapshots": e.snapshots,
            "daemon_resyncs": e.daemon_resyncs,
            "viewer_nice": s.viewer_nice,
        }));
    }
    out.insert("echo".into(), Value::Array(json_rows));
}
