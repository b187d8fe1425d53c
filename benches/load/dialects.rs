//! dialects: echo and the flood through browser, raw and multiplexed clients side by side on
//! the same session in the same run, so each dialect's figures compare with the browser's.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::client::{connect, is_snapshot_chunk, Conn, Ws, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::flood::MarkerScan;
use crate::report::{fail, ms, pct_us, round3, Report};
use crate::{Ctx, Settings};

/// Echo round trips made before measuring, per dialect.
const WARMUP: usize = 20;
/// One echo sample.
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);

/// The dialects, in the order they are reported.
const NAMES: [&str; 3] = ["browser", "raw", "multiplexed"];

/// One dialect's figures.
pub(crate) struct DialectRow {
    name: &'static str,
    /// The typist's round trips through this dialect, sorted.
    rtt: Vec<Duration>,
    /// Seconds from the flood command to this dialect's viewer having the end marker, per run.
    flood: Vec<f64>,
}

/// A client of one dialect: sends input, and yields the output bytes it receives.
pub(crate) struct Client {
    ws: Ws,
    /// The session's number, for the multiplexed dialect.
    num: Option<u8>,
}

impl Client {
    /// Connects in `dialect` to session `id` (the multiplexed one carries every session) and
    /// reads until live output follows.
    pub(crate) async fn open(
        daemon_addr: std::net::SocketAddr,
        dialect: usize,
        id: Uuid,
    ) -> Result<Client> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let url = match dialect {
            1 => format!("ws://{daemon_addr}/ws/{id}/raw"),
            _ => format!("ws://{daemon_addr}/ws"),
        };
        let mut ws = connect(&url).await?;
        let mut num = None;
        loop {
            let msg = match timeout_at(deadline.into(), ws.next()).await {
                Ok(Some(Ok(msg))) => msg,
                _ => bail!("{url}: no ready/open within {STEP_TIMEOUT:?}"),
            };
            if let Message::Text(t) = msg {
                let v: Value = serde_json::from_str(&t).context("bad JSON")?;
                if dialect == 1 && v["type"] == "ready" {
                    break;
                }
                if dialect == 2 && v["type"] == "open" && v["uuid"] == id.to_string() {
                    let n = v["id"].as_str().and_then(|s| s.parse().ok());
                    num = Some(n.ok_or_else(|| anyhow!("open without a number: {t}"))?);
                    break;
                }
            }
        }
        Ok(Client { ws, num })
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let frame = match self.num {
            Some(n) => [&[n][..], bytes].concat(),
            None => bytes.to_vec(),
        };
        self.ws
            .send(Message::Binary(frame))
            .await
            .context("sending input")
    }

    /// The next output bytes (of this session), or `None` at the deadline.
    pub(crate) async fn output(&mut self, deadline: Instant) -> Result<Option<Vec<u8>>> {
        loop {
            let msg = match timeout_at(deadline.into(), self.ws.next()).await {
                Err(_) => return Ok(None),
                Ok(Some(Ok(msg))) => msg,
                Ok(_) => bail!("connection closed"),
            };
            if let Message::Binary(b) = msg {
                match self.num {
                    Some(n) if b.first() == Some(&n) => return Ok(Some(b[1..].to_vec())),
                    Some(_) => {}
                    None => return Ok(Some(b)),
                }
            }
        }
    }
}

/// A browser-dialect client as a [`Client`]: its frames are output, and a resync's snapshot
/// (a viewer behind a flood is sent the screen, which may hold the marker) counts as its ANSI.
async fn browser_output(conn: &mut Conn, deadline: Instant) -> Result<Option<Vec<u8>>> {
    loop {
        let msg = match timeout_at(deadline.into(), conn.ws.next()).await {
            Err(_) => return Ok(None),
            Ok(Some(Ok(msg))) => msg,
            Ok(_) => bail!("connection closed"),
        };
        if let Message::Binary(b) = msg {
            if !is_snapshot_chunk(&b) {
                return Ok(Some(b));
            }
            if let Some(ansi) = conn.snapshots.push(&b)? {
                return Ok(Some(ansi));
            }
        }
    }
}

/// A flood viewer of any dialect.
enum Viewer {
    Browser(Conn),
    Other(Client),
}

/// The three clients of one session, the browser one first.
struct Trio {
    browser: Conn,
    raw: Client,
    mux: Client,
}

impl Trio {
    async fn send(&mut self, dialect: usize, bytes: &[u8]) -> Result<()> {
        match dialect {
            0 => self.browser.send(bytes).await,
            1 => self.raw.send(bytes).await,
            _ => self.mux.send(bytes).await,
        }
    }

    async fn output(&mut self, dialect: usize, deadline: Instant) -> Result<Option<Vec<u8>>> {
        match dialect {
            0 => browser_output(&mut self.browser, deadline).await,
            1 => self.raw.output(deadline).await,
            _ => self.mux.output(deadline).await,
        }
    }

    /// Reads `dialect`'s output until a frame holds `byte`.
    async fn wait_byte(&mut self, dialect: usize, byte: u8, deadline: Instant) -> Result<()> {
        loop {
            match self.output(dialect, deadline).await? {
                None => bail!("{} got no {:?} in time", NAMES[dialect], byte as char),
                Some(b) if b.contains(&byte) => return Ok(()),
                Some(_) => {}
            }
        }
    }
}

/// Runs the echo comparison once and the flood comparison `--flood-repeat` times.
pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    eprintln!(
        "load: dialects, echo {} samples each, flood {} MiB x {}",
        s.samples, s.flood_mb, s.flood_repeat
    );
    match dialects_run(s, ctx, &mut report.notes).await {
        Ok(rows) => report.dialects = rows,
        Err(e) => fail(report, format!("dialects: {e:#}")),
    }
}

async fn dialects_run(s: &Settings, ctx: &Ctx, notes: &mut Vec<String>) -> Result<Vec<DialectRow>> {
    let mut daemon = Daemon::start(ctx, "dialects")?;
    let mut rows: Vec<DialectRow> = NAMES
        .iter()
        .map(|&name| DialectRow {
            name,
            rtt: Vec::new(),
            flood: Vec::new(),
        })
        .collect();

    // Echo: the three clients type in turn into one raw-mode cat; each waits for its own echo,
    // then the two others are read up to the same byte, so no queue builds between samples.
    let id = daemon.new_session();
    let mut browser = Conn::open(daemon.ws(id, "?assistant=echo"))
        .await
        .context("creating the echo session")?;
    browser.wait_text("ECHO-READY").await?;
    let raw = Client::open(daemon.addr, 1, id).await?;
    let mux = Client::open(daemon.addr, 2, id).await?;
    let mut trio = Trio { browser, raw, mux };
    for i in 0..(WARMUP + s.samples) * 3 {
        let dialect = i % 3;
        let byte = b'a' + ((i / 3) % 26) as u8;
        let sent = Instant::now();
        let deadline = sent + ECHO_TIMEOUT;
        trio.send(dialect, &[byte]).await?;
        trio.wait_byte(dialect, byte, deadline).await?;
        let rtt = sent.elapsed();
        for other in (0..3).filter(|&d| d != dialect) {
            trio.wait_byte(other, byte, deadline).await?;
        }
        if i / 3 >= WARMUP {
            rows[dialect].rtt.push(rtt);
        }
        tokio::time::sleep(s.pause).await;
    }
    drop(trio);

    // Flood: a browser typist and one viewer of each dialect, each reading on its own task.
    let flood = ctx.flood_file.clone().context("no flood file")?;
    let id = daemon.new_session();
    let mut typist = Conn::open(daemon.ws(id, "?assistant=shell")).await?;
    typist.send(b"echo SHELL-$((1+1))-UP\r").await?;
    typist.wait_text("SHELL-2-UP").await?;
    let limit = Duration::from_secs(60 + 3 * s.flood_mb as u64);
    for run in 0..s.flood_repeat {
        let marker = format!("DIALECT-FLOOD-{}-END", 1000 + run);
        let cmd = format!(
            "cat '{}'; echo DIALECT-FLOOD-$((1000+{run}))-END\r",
            flood.path.display()
        );
        let addr = daemon.addr;
        let browser_url = daemon.ws(id, "");
        let mut readers = Vec::new();
        for (dialect, &name) in NAMES.iter().enumerate() {
            let url = browser_url.clone();
            let marker = marker.clone().into_bytes();
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
            let task = ctx.pool.spawn(async move {
                let mut viewer = match dialect {
                    0 => Viewer::Browser(Conn::open(url).await?),
                    d => Viewer::Other(Client::open(addr, d, id).await?),
                };
                let _ = ready_tx.send(());
                let mut scan = MarkerScan::new(marker);
                let deadline = Instant::now() + limit;
                loop {
                    let out = match &mut viewer {
                        Viewer::Browser(c) => browser_output(c, deadline).await?,
                        Viewer::Other(c) => c.output(deadline).await?,
                    };
                    match out {
                        None => bail!("{}: no end marker in time", name),
                        Some(b) if scan.feed(&b) => return Ok(Instant::now()),
                        Some(_) => {}
                    }
                }
            });
            readers.push((task, ready_rx));
        }
        let mut tasks = Vec::new();
        for (task, ready) in readers {
            ready
                .await
                .map_err(|_| anyhow!("a flood viewer failed to join"))?;
            tasks.push(task);
        }
        let start = Instant::now();
        typist.send(cmd.as_bytes()).await?;
        // The typist reads too, as a browser tab does, until the marker.
        let mut scan = MarkerScan::new(marker.clone().into_bytes());
        let deadline = start + limit;
        while let Some(b) = browser_output(&mut typist, deadline).await? {
            if scan.feed(&b) {
                break;
            }
        }
        for (dialect, task) in tasks.into_iter().enumerate() {
            let done = task
                .await
                .map_err(|e| anyhow!("flood viewer task: {e}"))??;
            rows[dialect]
                .flood
                .push(done.saturating_duration_since(start).as_secs_f64());
        }
    }
    drop(typist);
    daemon.finish("dialects", notes);
    for r in &mut rows {
        r.rtt.sort();
    }
    Ok(rows)
}

/// The median of `v` (the lower middle one for an even count).
pub(crate) fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied()
}

/// The dialects table and its JSON.
pub(crate) fn print(s: &Settings, rows: &[DialectRow], out: &mut Map<String, Value>) {
    println!();
    println!(
        "dialects: the same session through each dialect; echo {} samples per dialect (ms), \
         flood {} MiB to one viewer of each, median of {} (s)",
        s.samples, s.flood_mb, s.flood_repeat
    );
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "dialect", "echo p50", "echo p99", "vs p50", "flood s", "vs flood"
    );
    let base_p50 = rows.first().and_then(|r| pct_us(&r.rtt, 0.5));
    let base_flood = rows.first().and_then(|r| median(&r.flood));
    let mut json_rows = Vec::new();
    for r in rows {
        let p50 = pct_us(&r.rtt, 0.5);
        let p99 = pct_us(&r.rtt, 0.99);
        let flood = median(&r.flood);
        let vs = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:+.1}%", (a / b - 1.0) * 100.0),
            _ => "-".to_owned(),
        };
        println!(
            "{:<12} {:>9} {:>9} {:>9} {:>10} {:>9}",
            r.name,
            ms(p50),
            ms(p99),
            vs(p50.map(|v| v as f64), base_p50.map(|v| v as f64)),
            flood.map_or("-".to_owned(), |f| format!("{f:.3}")),
            vs(flood, base_flood),
        );
        json_rows.push(json!({
            "dialect": r.name,
            "echo_p50_us": p50,
            "echo_p99_us": p99,
            "flood_seconds": r.flood.iter().map(|&f| round3(f)).collect::<Vec<_>>(),
        }));
    }
    out.insert("dialects".into(), Value::Array(json_rows));
}
