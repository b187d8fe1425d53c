//! attach: `ptyhub attach` on a PTY the generator owns, side by side with a raw-dialect client
//! in the same run: the keystroke echo (byte written to that PTY → the echoed byte read back
//! from it) and the 50 MiB flood (to the end marker on that PTY).

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use serde_json::{json, Map, Value};
use tokio::io::unix::AsyncFd;

use crate::bare::{end_group, read_fd, read_until, spawn_on_pty};
use crate::client::{Conn, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::dialects::{median, Client};
use crate::flood::MarkerScan;
use crate::report::{fail, ms, pct_us, round3, Report};
use crate::{Ctx, Settings};

/// Echo round trips made before measuring, per client.
const WARMUP: usize = 20;
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);

/// The figures of one run.
pub(crate) struct AttachRow {
    /// Round trips through `ptyhub attach`, sorted.
    attach_rtt: Vec<Duration>,
    /// Round trips through a raw-dialect client, sorted.
    raw_rtt: Vec<Duration>,
    /// Seconds to the flood's end marker: through attach, and at a raw client, per run.
    attach_flood: Vec<f64>,
    raw_flood: Vec<f64>,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    eprintln!(
        "load: attach, echo {} samples, flood {} MiB x {}",
        s.samples, s.flood_mb, s.flood_repeat
    );
    match attach_run(s, ctx, &mut report.notes).await {
        Ok(row) => report.attach = Some(row),
        Err(e) => fail(report, format!("attach: {e:#}")),
    }
}

/// `ptyhub attach SESSION` on a PTY of its own, 80×24.
fn spawn_attach(
    ctx: &Ctx,
    daemon: &Daemon,
    id: uuid::Uuid,
) -> Result<(std::process::Child, OwnedFd)> {
    let cmd = format!(
        "exec '{}' attach --server http://{} {id}",
        ctx.bin.display(),
        daemon.addr
    );
    spawn_on_pty(&cmd)
}

async fn attach_run(s: &Settings, ctx: &Ctx, notes: &mut Vec<String>) -> Result<AttachRow> {
    let mut daemon = Daemon::start(ctx, "attach")?;
    let mut row = AttachRow {
        attach_rtt: Vec::new(),
        raw_rtt: Vec::new(),
        attach_flood: Vec::new(),
        raw_flood: Vec::new(),
    };

    // Echo: the raw-mode cat, typed into in turn through attach and through a raw client.
    let id = daemon.new_session();
    let mut browser = Conn::open(daemon.ws(id, "?assistant=echo"))
        .await
        .context("creating the echo session")?;
    browser.wait_text("ECHO-READY").await?;
    drop(browser);
    let mut raw = Client::open(daemon.addr, 1, id).await?;
    let (mut child, master) = spawn_attach(ctx, &daemon, id)?;
    let echo = async {
        fcntl(master.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).context("O_NONBLOCK")?;
        // SAFETY: `master` is an OwnedFd moved into the AsyncFd, so it stays open and the same
        // descriptor until the AsyncFd is dropped.
        let fd = unsafe { AsyncFd::register(master) }
            .map_err(|e| anyhow!("registering the PTY master: {e}"))?;
        let ready = Instant::now() + STEP_TIMEOUT;
        read_until(async |buf| read_fd(&fd, buf).await, b"ECHO-READY", ready)
            .await
            .context("the attach client's replay")?;
        for i in 0..(WARMUP + s.samples) * 2 {
            let through_attach = i % 2 == 0;
            let byte = b'a' + ((i / 2) % 26) as u8;
            let sent = Instant::now();
            let deadline = sent + ECHO_TIMEOUT;
            let attach_got = async |fd: &AsyncFd<OwnedFd>| {
                read_until(async |buf| read_fd(fd, buf).await, &[byte], deadline).await
            };
            let raw_got = async |raw: &mut Client| loop {
                match raw.output(deadline).await? {
                    None => bail!("the raw client got no {:?} in time", byte as char),
                    Some(b) if b.contains(&byte) => return Ok(()),
                    Some(_) => {}
                }
            };
            let rtt = if through_attach {
                nix::unistd::write(fd.get_ref(), &[byte]).context("writing to the PTY")?;
                attach_got(&fd)
                    .await
                    .with_context(|| format!("sample {i}"))?;
                let rtt = sent.elapsed();
                raw_got(&mut raw).await?;
                rtt
            } else {
                raw.send(&[byte]).await?;
                raw_got(&mut raw).await?;
                let rtt = sent.elapsed();
                attach_got(&fd)
                    .await
                    .with_context(|| format!("sample {i}"))?;
                rtt
            };
            if i / 2 >= WARMUP {
                if through_attach {
                    row.attach_rtt.push(rtt);
                } else {
                    row.raw_rtt.push(rtt);
                }
            }
            tokio::time::sleep(s.pause).await;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    end_group(&mut child, true);
    echo?;
    drop(raw);

    // Flood: a raw typist starts `cat`; a raw viewer and the attach client's PTY each read to
    // the end marker.
    let flood = ctx.flood_file.clone().context("no flood file")?;
    let id = daemon.new_session();
    let mut typist = Conn::open(daemon.ws(id, "?assistant=shell")).await?;
    typist.send(b"echo SHELL-$((1+1))-UP\r").await?;
    typist.wait_text("SHELL-2-UP").await?;
    drop(typist);
    let mut raw_typist = Client::open(daemon.addr, 1, id).await?;
    let limit = Duration::from_secs(60 + 3 * s.flood_mb as u64);
    // The last line on the screen, which the attach client's replay shows once it is live.
    let mut on_screen = "SHELL-2-UP".to_owned();
    for run in 0..s.flood_repeat {
        let marker = format!("ATTACH-FLOOD-{}-END", 1000 + run);
        let cmd = format!(
            "cat '{}'; echo ATTACH-FLOOD-$((1000+{run}))-END\r",
            flood.path.display()
        );
        let mut viewer = Client::open(daemon.addr, 1, id).await?;
        let (mut child, master) = spawn_attach(ctx, &daemon, id)?;
        let mut master = File::from(master);
        // The attach client is live once its replay has come: the screen's last line.
        let (tx, rx) = std::sync::mpsc::channel();
        let scan_marker = marker.clone().into_bytes();
        let ready_marker = std::mem::replace(&mut on_screen, marker.clone()).into_bytes();
        let reader = std::thread::spawn(move || {
            let mut ready = MarkerScan::new(ready_marker);
            let mut scan = MarkerScan::new(scan_marker);
            let mut buf = vec![0u8; 64 * 1024];
            let mut live = false;
            loop {
                match master.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Err(anyhow!("attach ended before the end marker")));
                        return;
                    }
                    Ok(n) => {
                        if !live && ready.feed(&buf[..n]) {
                            live = true;
                            let _ = tx.send(Ok(None));
                        } else if live && scan.feed(&buf[..n]) {
                            let _ = tx.send(Ok(Some(Instant::now())));
                            return;
                        }
                    }
                }
            }
        });
        let got = |timeout: Duration| {
            rx.recv_timeout(timeout)
                .map_err(|_| anyhow!("attach: nothing in {timeout:?}"))?
        };
        let result = async {
            if got(STEP_TIMEOUT)?.is_some() {
                bail!("attach: the marker before the replay");
            }
            let start = Instant::now();
            raw_typist.send(cmd.as_bytes()).await?;
            let mut scan = MarkerScan::new(marker.clone().into_bytes());
            let deadline = start + limit;
            loop {
                match viewer.output(deadline).await? {
                    None => bail!("the raw viewer got no end marker in time"),
                    Some(b) if scan.feed(&b) => break,
                    Some(_) => {}
                }
            }
            let raw_done = start.elapsed().as_secs_f64();
            let left = limit.saturating_sub(start.elapsed());
            let attach_done = got(left)?
                .ok_or_else(|| anyhow!("attach: no marker"))?
                .duration_since(start)
                .as_secs_f64();
            Ok((raw_done, attach_done))
        }
        .await;
        end_group(&mut child, true);
        let _ = reader.join();
        let (raw_done, attach_done) = result?;
        row.raw_flood.push(raw_done);
        row.attach_flood.push(attach_done);
    }
    daemon.finish("attach", notes);
    row.attach_rtt.sort();
    row.raw_rtt.sort();
    Ok(row)
}

/// The attach table and its JSON.
pub(crate) fn print(s: &Settings, r: &AttachRow, out: &mut Map<String, Value>) {
    println!();
    println!(
        "attach: `ptyhub attach` on the generator's PTY vs a raw-dialect client, same session, \
         same run; echo {} samples each (ms), flood {} MiB, median of {} (s)",
        s.samples, s.flood_mb, s.flood_repeat
    );
    println!(
        "{:<8} {:>9} {:>9} {:>10}",
        "client", "echo p50", "echo p99", "flood s"
    );
    let rows = [
        ("raw", &r.raw_rtt, &r.raw_flood),
        ("attach", &r.attach_rtt, &r.attach_flood),
    ];
    for (name, rtt, flood) in rows {
        println!(
            "{:<8} {:>9} {:>9} {:>10}",
            name,
            ms(pct_us(rtt, 0.5)),
            ms(pct_us(rtt, 0.99)),
            median(flood).map_or("-".to_owned(), |f| format!("{f:.3}")),
        );
    }
    let added = match (pct_us(&r.attach_rtt, 0.5), pct_us(&r.raw_rtt, 0.5)) {
        (Some(a), Some(b)) => Some(a as i64 - b as i64),
        _ => None,
    };
    let ratio = match (median(&r.attach_flood), median(&r.raw_flood)) {
        (Some(a), Some(b)) if b > 0.0 => Some(round3(a / b)),
        _ => None,
    };
    println!(
        "attach adds {} µs at p50; its flood takes {}× the raw client's",
        added.map_or("-".to_owned(), |v| v.to_string()),
        ratio.map_or("-".to_owned(), |v| v.to_string())
    );
    out.insert(
        "attach".into(),
        json!({
            "attach_echo_p50_us": pct_us(&r.attach_rtt, 0.5),
            "attach_echo_p99_us": pct_us(&r.attach_rtt, 0.99),
            "raw_echo_p50_us": pct_us(&r.raw_rtt, 0.5),
            "raw_echo_p99_us": pct_us(&r.raw_rtt, 0.99),
            "added_p50_us": added,
            "attach_flood_seconds": r.attach_flood.iter().map(|&f| round3(f)).collect::<Vec<_>>(),
            "raw_flood_seconds": r.raw_flood.iter().map(|&f| round3(f)).collect::<Vec<_>>(),
            "flood_ratio": ratio,
        }),
    );
}
