//! footprint: what one idle shell session costs in all (the daemon's PSS and its children's,
//! as `smem` counts it), and whether the daemon's RSS comes back to that idle figure 10 s
//! after a 50 MiB flood to one viewer.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{close_ws, is_snapshot_chunk, on_pool, Conn, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::flood::{flood_command, make_flood_file, MarkerScan};
use crate::procfs::{descendants, pss_kib, MemSample};
use crate::Ctx;

/// The flood's size, as issue 39 states the target.
const FLOOD_MIB: usize = 50;
/// RSS is read this long after the flood's last byte reached the viewer.
const AFTER_FLOOD: Duration = Duration::from_secs(10);
/// jemalloc's default `dirty_decay_ms` and a little more: what the start-up and the session's
/// creation freed is given back by then.
const SETTLE: Duration = Duration::from_secs(12);

pub(crate) struct FootprintRow {
    /// The daemon with one idle shell session and nobody watching.
    idle: MemSample,
    daemon_pss_kib: u64,
    /// The shell (and anything it started).
    children_pss_kib: u64,
    /// The daemon 10 s after the flood's end, its viewer still connected.
    after_flood: MemSample,
    flood_seconds: f64,
}

/// A fresh daemon, one shell session (its typist gone), settled; then a viewer and the flood.
pub(crate) async fn footprint_run(ctx: &Ctx, notes: &mut Vec<String>) -> Result<FootprintRow> {
    let dir = ctx.dir.join("footprint");
    std::fs::create_dir_all(&dir).context("creating the footprint directory")?;
    let flood = make_flood_file(&dir, FLOOD_MIB)?;
    let mut daemon = Daemon::start(ctx, "footprint")?;
    let pid = daemon.pid().context("daemon not running")?;
    let id = daemon.new_session();

    let typist_url = daemon.ws(id, "?assistant=shell");
    on_pool(&ctx.pool, async move {
        let mut c = Conn::open(typist_url).await?;
        c.send(b"echo SHELL-$((1+1))-UP\r").await?;
        c.wait_text("SHELL-2-UP").await?;
        close_ws(c.ws).await;
        Ok(())
    })
    .await
    .context("starting the shell session")?;
    daemon.wait_viewer_gauge(0, STEP_TIMEOUT).await?;
    tokio::time::sleep(SETTLE).await;
    let idle = daemon.settled_memory().await?;
    let daemon_pss_kib = pss_kib(pid)?;
    let children_pss_kib = descendants(pid)
        .into_iter()
        .filter_map(|p| pss_kib(p).ok())
        .sum();

    let (cmd, marker) = flood_command(&flood.path);
    let url = daemon.ws(id, "");
    let limit = STEP_TIMEOUT + Duration::from_secs(FLOOD_MIB as u64);
    let (conn, flood_seconds) = on_pool(&ctx.pool, async move {
        let mut c = Conn::open(url).await?;
        let start = Instant::now();
        c.send(format!("{cmd}\r").as_bytes()).await?;
        let (deadline, mut scan) = (start + limit, MarkerScan::new(marker));
        loop {
            let msg = match timeout_at(deadline.into(), c.ws.next()).await {
                Err(_) => bail!("the flood's end marker did not arrive within {limit:?}"),
                Ok(None) => bail!("the viewer's connection closed during the flood"),
                Ok(Some(msg)) => msg.context("the viewer's connection failed")?,
            };
            let found = match msg {
                Message::Binary(b) if is_snapshot_chunk(&b) => match c.snapshots.push(&b)? {
                    Some(ansi) => scan.feed(&ansi),
                    None => false,
                },
                Message::Binary(b) => scan.feed(&b),
                _ => false,
            };
            if found {
                return Ok((c, start.elapsed().as_secs_f64()));
            }
        }
    })
    .await
    .context("the flood")?;
    tokio::time::sleep(AFTER_FLOOD).await;
    let after_flood = daemon.memory()?;
    drop(conn);
    daemon.finish("footprint", notes);
    std::fs::remove_file(&flood.path).ok();
    Ok(FootprintRow {
        idle,
        daemon_pss_kib,
        children_pss_kib,
        after_flood,
        flood_seconds,
    })
}

/// The footprint lines and their JSON.
pub(crate) fn print(f: &FootprintRow, out: &mut Map<String, Value>) {
    let total = f.daemon_pss_kib + f.children_pss_kib;
    let ratio = f.after_flood.rss_kib as f64 / f.idle.rss_kib.max(1) as f64;
    println!();
    println!(
        "footprint: one idle shell session, total PSS {total} KiB (daemon {} KiB, its children \
         {} KiB; daemon RSS {} KiB, anon {} KiB)",
        f.daemon_pss_kib, f.children_pss_kib, f.idle.rss_kib, f.idle.anon_kib
    );
    println!(
        "footprint: daemon RSS {} KiB {}s after a {FLOOD_MIB} MiB flood to one viewer \
         ({:.2} s): {ratio:.2}x idle",
        f.after_flood.rss_kib,
        AFTER_FLOOD.as_secs(),
        f.flood_seconds
    );
    out.insert(
        "footprint".into(),
        json!({
            "total_pss_kib": total,
            "daemon_pss_kib": f.daemon_pss_kib,
            "children_pss_kib": f.children_pss_kib,
            "idle_rss_kib": f.idle.rss_kib,
            "idle_anon_kib": f.idle.anon_kib,
            "after_flood_rss_kib": f.after_flood.rss_kib,
            "after_flood_anon_kib": f.after_flood.anon_kib,
            "after_flood_vs_idle": (ratio * 1000.0).round() / 1000.0,
            "flood_mib": FLOOD_MIB,
            "flood_seconds": (f.flood_seconds * 1000.0).round() / 1000.0,
        }),
    );
}
