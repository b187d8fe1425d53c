//! exec: throughput of one exec's output through pipe mode (WebSocket) and through SSE, each
//! against the same program writing to a pipe read by `cat` in the same run; and short execs
//! (`true`) started at a steady rate, with their start-to-`done` latency.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{connect, STEP_TIMEOUT};
use crate::daemon::Daemon;
use crate::flood::make_flood_file;
use crate::report::{fail, median_by, ms, pct_us, round3, spread, Report};
use crate::{Ctx, Settings};

/// One throughput run: seconds for the bare pipe, pipe mode and SSE, on the same file.
#[derive(Clone)]
struct Run {
    bare: f64,
    pipe: f64,
    sse: f64,
}

/// What the exec scenario measured.
pub(crate) struct ExecRow {
    bytes: u64,
    /// Every run, in order.
    runs: Vec<Run>,
    /// Start-to-`done` latency of each short exec, sorted.
    short: Vec<Duration>,
    /// Short execs started, and how many failed.
    short_started: usize,
    short_failed: usize,
    short_seconds: f64,
}

pub(crate) async fn run(s: &Settings, ctx: &mut Ctx, report: &mut Report) {
    match measure(s, ctx, report).await {
        Ok(row) => report.exec = Some(row),
        Err(e) => fail(report, format!("exec: {e:#}")),
    }
}

async fn measure(s: &Settings, ctx: &mut Ctx, report: &mut Report) -> Result<ExecRow> {
    let dir = ctx.dir.join("exec");
    std::fs::create_dir_all(&dir).context("creating the exec dir")?;
    eprintln!("load: exec: writing {} MiB of base64", s.exec_mb);
    let file = make_flood_file(&dir, s.exec_mb)?;
    let path = file.path.to_str().context("a UTF-8 temp path")?.to_owned();
    let daemon = Daemon::start(ctx, "exec")?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("building the HTTP client")?;
    let mut runs = Vec::new();
    for i in 0..s.flood_repeat {
        eprintln!("load: exec: throughput run {}/{}", i + 1, s.flood_repeat);
        let bare = bare_pipe(&path)?;
        let pipe = pipe_mode(&daemon, &path, file.len).await?;
        let sse = sse(&daemon, &http, &path, file.len).await?;
        runs.push(Run { bare, pipe, sse });
    }
    eprintln!(
        "load: exec: {} short execs per second for {} s",
        s.exec_rate, s.exec_seconds
    );
    let (short, started, failed, seconds) = short_execs(&daemon, &http, s).await;
    daemon.finish("exec", &mut report.notes);
    let _ = std::fs::remove_file(&file.path);
    Ok(ExecRow {
        bytes: file.len,
        runs,
        short,
        short_started: started,
        short_failed: failed,
        short_seconds: seconds,
    })
}

/// Seconds for `cat FILE | cat > /dev/null`: the program writing to a pipe that `cat` reads.
fn bare_pipe(path: &str) -> Result<f64> {
    let started = Instant::now();
    let status = Command::new("sh")
        .args(["-c", "cat \"$1\" | cat > /dev/null", "sh", path])
        .stdin(Stdio::null())
        .status()
        .context("running the bare pipe")?;
    if !status.success() {
        bail!("the bare pipe failed: {status}");
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Seconds from connecting to `GET /api/exec?cmd=cat&arg=FILE` to its `exit`, every stdout
/// byte counted.
async fn pipe_mode(daemon: &Daemon, path: &str, len: u64) -> Result<f64> {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("cmd", "cat").append_pair("arg", path);
    let url = format!("ws://{}/api/exec?{}", daemon.addr, q.finish());
    let started = Instant::now();
    let deadline = started + STEP_TIMEOUT * 10;
    let mut ws = connect(&url).await?;
    let mut got = 0u64;
    loop {
        let msg = match timeout_at(deadline.into(), ws.next()).await {
            Ok(Some(Ok(msg))) => msg,
            Ok(_) => bail!("pipe mode: closed before exit, after {got} bytes"),
            Err(_) => bail!("pipe mode: no exit in time, after {got} bytes"),
        };
        match msg {
            Message::Binary(b) if b.first() == Some(&1) => got += b.len() as u64 - 1,
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).context("exit JSON")?;
                if v["type"] == "exit" {
                    if v["code"] != 0 || got != len {
                        bail!("pipe mode: {t} after {got} of {len} bytes");
                    }
                    return Ok(started.elapsed().as_secs_f64());
                }
            }
            _ => {}
        }
    }
}

/// Seconds from `POST /api/exec {"cmd":["cat",FILE]}` to the end of its stream.
async fn sse(daemon: &Daemon, http: &reqwest::Client, path: &str, len: u64) -> Result<f64> {
    let url = format!("http://{}/api/exec", daemon.addr);
    let started = Instant::now();
    let mut resp = http
        .post(&url)
        .json(&json!({"cmd": ["cat", path]}))
        .send()
        .await
        .context("POST /api/exec")?;
    if resp.status() != 200 {
        bail!("SSE: status {}", resp.status());
    }
    // Counted, not parsed: the generator shares the cores with the daemon, and what is
    // measured is the daemon. The body is the file's lines, each as a `data:` line, then
    // `done`; its end is kept to check that.
    let (mut total, mut end) = (0u64, Vec::new());
    while let Some(chunk) = resp.chunk().await.context("reading the stream")? {
        total += chunk.len() as u64;
        end.extend_from_slice(&chunk[chunk.len().saturating_sub(256)..]);
        let keep = end.len().saturating_sub(256);
        end.drain(..keep);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let end = String::from_utf8_lossy(&end);
    if total < len || !end.contains("event: done") || !end.contains("\"exit_code\":0") {
        bail!("SSE: {total} bytes for a {len}-byte file, ending {end:?}");
    }
    Ok(elapsed)
}

/// `exec_rate` execs of `true` per second over SSE for `exec_seconds`, each started on time
/// whatever the others do; their start-to-`done` latencies, sorted, how many started and
/// failed, and the seconds the starts took.
async fn short_execs(
    daemon: &Daemon,
    http: &reqwest::Client,
    s: &Settings,
) -> (Vec<Duration>, usize, usize, f64) {
    let url = format!("http://{}/api/exec", daemon.addr);
    let total = s.exec_rate * s.exec_seconds as usize;
    let period = Duration::from_secs_f64(1.0 / s.exec_rate as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        tokio::time::sleep_until(start + period * i as u32).await;
        let (http, url) = (http.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let began = Instant::now();
            let resp = http
                .post(&url)
                .json(&json!({"cmd": ["true"]}))
                .timeout(STEP_TIMEOUT)
                .send()
                .await
                .ok()?;
            if resp.status() != 200 {
                return None;
            }
            let body = resp.text().await.ok()?;
            (body.contains("event: done") && body.contains("\"exit_code\":0"))
                .then(|| began.elapsed())
        }));
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut times = Vec::with_capacity(total);
    let mut failed = 0;
    for t in tasks {
        match t.await {
            Ok(Some(d)) => times.push(d),
            _ => failed += 1,
        }
    }
    times.sort();
    (times, total, failed, seconds)
}

pub(crate) fn print(s: &Settings, row: &ExecRow, out: &mut Map<String, Value>) {
    let mib = row.bytes as f64 / (1 << 20) as f64;
    println!();
    println!(
        "exec: {mib:.0} MiB of base64 through `cat FILE`, against `cat FILE | cat > /dev/null` \
         in the same run ({} runs, median by ratio; best: the fastest run of each, as noise on a \
         shared machine only ever adds time)",
        row.runs.len()
    );
    println!(
        "{:>10} {:>8} {:>8} {:>7} {:>17} {:>6}",
        "transport", "bare_s", "exec_s", "MiB/s", "ratio", "best"
    );
    let mut json_rows = Vec::new();
    for (name, pick) in [
        ("websocket", (|r: &Run| r.pipe) as fn(&Run) -> f64),
        ("sse", |r: &Run| r.sse),
    ] {
        let Some((median, ratios)) = median_by(row.runs.clone(), |r| pick(r) / r.bare) else {
            continue;
        };
        let (lo, hi) = spread(&ratios);
        let t = pick(&median);
        let fastest =
            |f: &dyn Fn(&Run) -> f64| row.runs.iter().map(f).fold(f64::INFINITY, f64::min);
        let best = fastest(&pick) / fastest(&|r: &Run| r.bare);
        println!(
            "{:>10} {:>8.3} {:>8.3} {:>7.0} {:>5.2} ({:.2}-{:.2}) {:>6.2}",
            name,
            median.bare,
            t,
            mib / t,
            t / median.bare,
            lo,
            hi,
            best
        );
        json_rows.push(json!({
            "transport": name,
            "bare_s": round3(median.bare),
            "exec_s": round3(t),
            "mib_per_s": round3(mib / t),
            "ratio": round3(t / median.bare),
            "ratios": ratios.iter().map(|r| round3(*r)).collect::<Vec<_>>(),
            "best_ratio": round3(best),
        }));
    }
    println!();
    println!(
        "exec: `true` over SSE, {} per second for {} s, start to `done`",
        s.exec_rate, s.exec_seconds
    );
    println!(
        "{:>7} {:>7} {:>8} {:>7} {:>7} {:>7}",
        "execs", "failed", "rate/s", "p50_ms", "p99_ms", "max_ms"
    );
    let rate = row.short_started as f64 / row.short_seconds.max(f64::EPSILON);
    println!(
        "{:>7} {:>7} {:>8.1} {:>7} {:>7} {:>7}",
        row.short_started,
        row.short_failed,
        rate,
        ms(pct_us(&row.short, 0.5)),
        ms(pct_us(&row.short, 0.99)),
        ms(pct_us(&row.short, 1.0)),
    );
    out.insert(
        "exec".into(),
        json!({
            "bytes": row.bytes,
            "throughput": json_rows,
            "short": {
                "started": row.short_started,
                "failed": row.short_failed,
                "rate_per_s": round3(rate),
                "p50_us": pct_us(&row.short, 0.5),
                "p99_us": pct_us(&row.short, 0.99),
                "max_us": pct_us(&row.short, 1.0),
            },
        }),
    );
}
