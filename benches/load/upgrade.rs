//! upgrade: what a live upgrade costs its viewers. N sessions (10, then 100), one browser-dialect
//! viewer each, that reconnects at once when told 1012; one session runs a counter printing a
//! line every millisecond. Each SIGUSR2 is timed to the first reconnected viewer's full screen
//! (its `ready`, after the snapshot) and to the last one's. Then the counter's lines are checked:
//! what the counter's viewer sees after each reconnect (snapshot scrollback, then stream) goes
//! on from the last line it saw before the close, with no number missing: output lost, 0.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::client::{connect, is_snapshot_chunk, Snapshots, Tasks, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::report::{fail, Report};
use crate::{Ctx, Settings};

/// Counter lines printed (about 1 ms apart; the shell's `sleep` makes it 2–4 ms here).
const COUNTER_LINES: u64 = 1_000_000;

pub(crate) struct UpgradeRow {
    sessions: usize,
    /// SIGUSR2 to the first viewer's `ready`, per upgrade, ms.
    first_ms: Vec<f64>,
    /// SIGUSR2 to the last viewer's `ready`, per upgrade, ms.
    all_ms: Vec<f64>,
    /// Counter lines missing from what the counter's viewer saw, over every upgrade.
    lost_lines: u64,
    /// Counter lines checked across the reconnects.
    checked_lines: u64,
    /// Connection attempts refused or failed while reconnecting.
    failed_connects: u64,
}

/// What the viewers tell the driver.
#[derive(Default)]
struct Seen {
    /// When each viewer last got `ready`.
    ready: Vec<Option<Instant>>,
    /// The counter viewer: the highest line before each close, and the lines it saw after.
    counter_last: u64,
    lost: u64,
    checked: u64,
    failed_connects: u64,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    for &n in &s.upgrade_sessions {
        match upgrade_run(s, ctx, n, &mut report.notes).await {
            Ok(row) => report.upgrade.push(row),
            Err(e) => fail(report, format!("upgrade with {n} sessions: {e:#}")),
        }
    }
}

async fn upgrade_run(
    s: &Settings,
    ctx: &Ctx,
    n: usize,
    notes: &mut Vec<String>,
) -> Result<UpgradeRow> {
    eprintln!("load: upgrade, {n} sessions, {} upgrades", s.upgrades);
    let mut daemon = Daemon::start(ctx, &format!("upgrade-{n}"))?;
    let counter = daemon.create_session("shell").await?;
    let idle = daemon.idle_sessions(n - 1).await?;
    let seen = Arc::new(Mutex::new(Seen {
        ready: vec![None; n],
        ..Seen::default()
    }));
    let stop = CancellationToken::new();
    let mut tasks = Tasks::default();
    for (i, id) in std::iter::once(counter).chain(idle).enumerate() {
        let url = daemon.ws(id, "");
        let (seen, stop) = (seen.clone(), stop.clone());
        let task = ctx.pool.spawn(viewer(url, i, seen, stop));
        tasks.0.push(task.abort_handle());
    }
    wait_all_ready(&seen, None).await?;
    start_counter(&daemon, counter).await?;
    let pid = daemon.pid().context("daemon not running")?;
    let (mut first_ms, mut all_ms) = (Vec::new(), Vec::new());
    for u in 1..=s.upgrades {
        // Let the counter run a little between upgrades.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGUSR2,
        )
        .context("SIGUSR2")?;
        let (first, all) = wait_all_ready(&seen, Some(sent)).await?;
        eprintln!("load:   upgrade {u}: first viewer back after {first:.1} ms, all {all:.1} ms");
        first_ms.push(first);
        all_ms.push(all);
    }
    // The counter's viewer checks the lines after the last reconnect too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    drop(tasks);
    let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let row = UpgradeRow {
        sessions: n,
        first_ms,
        all_ms,
        lost_lines: seen.lost,
        checked_lines: seen.checked,
        failed_connects: seen.failed_connects,
    };
    drop(seen);
    daemon.finish(&format!("upgrade-{n}"), notes);
    Ok(row)
}

/// Types the counter into its session, through a connection of its own.
async fn start_counter(daemon: &Daemon, id: Uuid) -> Result<()> {
    let mut c = crate::client::Conn::open(daemon.ws(id, "")).await?;
    c.wait_text("$ ").await?;
    let cmd = format!("for ((i = 1; i <= {COUNTER_LINES}; i++)); do echo c$i; sleep 0.001; done\r");
    c.send(cmd.as_bytes()).await?;
    c.wait_text("c100\r\n").await?;
    crate::client::close_ws(c.ws).await;
    Ok(())
}

/// Waits until every viewer has been `ready` since `since` (`None`: at all); returns the first
/// and the last of those times after `since`, ms.
async fn wait_all_ready(seen: &Mutex<Seen>, since: Option<Instant>) -> Result<(f64, f64)> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        {
            let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            let after: Vec<Instant> = seen
                .ready
                .iter()
                .filter_map(|r| r.filter(|t| since.is_none_or(|s| *t > s)))
                .collect();
            if after.len() == seen.ready.len() {
                let base = since.unwrap_or_else(Instant::now);
                let ms = |t: &Instant| t.saturating_duration_since(base).as_secs_f64() * 1e3;
                let first = after.iter().map(ms).fold(f64::MAX, f64::min);
                let last = after.iter().map(ms).fold(0.0, f64::max);
                return Ok((first, last));
            }
        }
        if Instant::now() > deadline {
            bail!("viewers did not all come back within {STEP_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One viewer: joins, reads until closed, reconnects at once (as the UI does on 1012).
async fn viewer(url: String, i: usize, seen: Arc<Mutex<Seen>>, stop: CancellationToken) {
    let mut lines = Lines::default();
    while !stop.is_cancelled() {
        let Ok(mut ws) = connect(&url).await else {
            if let Ok(mut s) = seen.lock() {
                s.failed_connects += 1;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let mut snapshots = Snapshots::default();
        lines.reconnected();
        loop {
            let msg = tokio::select! {
                _ = stop.cancelled() => return,
                msg = ws.next() => msg,
            };
            let Some(Ok(msg)) = msg else { break };
            match msg {
                Message::Binary(b) if is_snapshot_chunk(&b) => {
                    if let Ok(Some(ansi)) = snapshots.push(&b) {
                        if i == 0 {
                            lines.snapshot(&ansi);
                        }
                    }
                }
                Message::Binary(b) if i == 0 => lines.output(&b),
                Message::Text(t) if t.contains("\"ready\"") => {
                    let now = Instant::now();
                    if let Ok(mut s) = seen.lock() {
                        s.ready[i] = Some(now);
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
            if i == 0 {
                if let Ok(mut s) = seen.lock() {
                    s.lost += std::mem::take(&mut lines.lost);
                    s.checked += std::mem::take(&mut lines.checked);
                    s.counter_last = lines.last;
                }
            }
        }
    }
}

/// The counter's lines as one viewer sees them: after a reconnect the snapshot's lines must
/// reach back to (or before) the last line seen, and from there on no number may be missing.
#[derive(Default)]
struct Lines {
    /// The highest line seen so far.
    last: u64,
    /// Set after a reconnect, until the snapshot has been checked.
    rejoined: bool,
    /// Partial line of the stream.
    partial: Vec<u8>,
    lost: u64,
    checked: u64,
}

impl Lines {
    fn reconnected(&mut self) {
        self.rejoined = self.last > 0;
        self.partial.clear();
    }

    /// The snapshot: its scrollback and screen, in order.
    fn snapshot(&mut self, ansi: &[u8]) {
        let mut parser = vt100::Parser::new(
            std::num::NonZeroU16::new(24).unwrap_or(std::num::NonZeroU16::MIN),
            std::num::NonZeroU16::new(80).unwrap_or(std::num::NonZeroU16::MIN),
            5000,
        );
        parser.process(ansi);
        let screen = parser.screen_mut();
        screen.set_scrollback(usize::MAX);
        let total = screen.scrollback();
        let mut numbers = Vec::new();
        for offset in (1..=total).rev() {
            screen.set_scrollback(offset);
            if let Some(row) = screen.rows(0, 80).next() {
                numbers.extend(number(row.as_bytes()));
            }
        }
        screen.set_scrollback(0);
        for row in screen.rows(0, 80) {
            numbers.extend(number(row.as_bytes()));
        }
        if self.rejoined {
            // The snapshot must still show the line seen last before the close.
            if numbers.first().is_some_and(|&f| f > self.last + 1) {
                let first = numbers[0];
                self.lost += first - self.last - 1;
            }
            self.rejoined = false;
        }
        for n in numbers {
            self.line(n);
        }
    }

    fn output(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            if let Some(n) = number(&line) {
                self.line(n);
            }
        }
    }

    fn line(&mut self, n: u64) {
        if n <= self.last {
            return;
        }
        if self.last > 0 && n > self.last + 1 {
            self.lost += n - self.last - 1;
        }
        self.checked += 1;
        self.last = n;
    }
}

/// The number of a counter line `c123`, if `line` is one.
fn number(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?.trim();
    let digits = text.strip_prefix('c')?;
    digits.parse().ok()
}

pub(crate) fn print(r: &[UpgradeRow], out: &mut Map<String, Value>) {
    println!();
    println!(
        "upgrade: SIGUSR2 to the viewers' full screens again, each viewer reconnecting at once on \
         1012 (target: first viewer at most 300 ms with 10 sessions; output lost: 0)"
    );
    let mut rows = Vec::new();
    for row in r {
        let mut first = row.first_ms.clone();
        let mut all = row.all_ms.clone();
        first.sort_by(f64::total_cmp);
        all.sort_by(f64::total_cmp);
        let median = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(0.0);
        let max = |v: &[f64]| v.last().copied().unwrap_or(0.0);
        println!(
            "  {:>3} sessions: first viewer back {:.1} ms median ({:.1} max), all back {:.1} ms \
             median ({:.1} max) over {} upgrades; counter lines checked {}, lost {}; failed \
             connects {}",
            row.sessions,
            median(&first),
            max(&first),
            median(&all),
            max(&all),
            first.len(),
            row.checked_lines,
            row.lost_lines,
            row.failed_connects
        );
        rows.push(json!({
            "sessions": row.sessions,
            "first_ms": row.first_ms,
            "all_ms": row.all_ms,
            "lost_lines": row.lost_lines,
            "checked_lines": row.checked_lines,
            "failed_connects": row.failed_connects,
        }));
    }
    out.insert("upgrade".into(), Value::Array(rows));
}
