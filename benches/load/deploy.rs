//! deploy: the echo round trip (p50/p99) and the flood through ptyhub's own TLS against plain
//! WebSockets, and through nginx (the shipped `config/nginx/ptyhub.conf`, TLS terminated there)
//! against direct, in the same run: three paths, measured one after the other, each repeated.
//! The flood goes to `--deploy-viewers` viewers on each path.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::runtime::Handle;
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::client::{is_snapshot_chunk, on_pool, Conn, Tasks, STEP_TIMEOUT};
use crate::daemon::{config, Daemon};
use crate::flood::{flood_reader, MarkerScan, Progress};
use crate::report::{fail, ms, pct_us, round3, Report};
use crate::{Ctx, Settings};

/// Where the daemons are mounted, as behind the shipped nginx file.
const BASE: &str = "/ptyhub";

/// One path's figures.
pub(crate) struct DeployRow {
    path: &'static str,
    /// Echo round trips, sorted.
    rtt: Vec<Duration>,
    /// Flood seconds of each run, in order.
    flood: Vec<f64>,
    /// Output bytes each flood streamed to the viewer (the rest was skipped by a resync
    /// snapshot when the viewer fell behind), in order.
    streamed: Vec<u64>,
    /// Resync snapshots over all floods.
    resyncs: usize,
}

/// How a client reaches the daemon.
struct Path3 {
    name: &'static str,
    /// `ws://…` or `wss://…` up to and including the base path.
    root: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

pub(crate) async fn run(s: &Settings, ctx: &Ctx, report: &mut Report) {
    match deploy(s, ctx, &mut report.notes).await {
        Ok(rows) => report.deploy = rows,
        Err(e) => fail(report, format!("deploy: {e:#}")),
    }
}

async fn deploy(s: &Settings, ctx: &Ctx, notes: &mut Vec<String>) -> Result<Vec<DeployRow>> {
    let (ca, cert, key) = certificate(&ctx.dir)?;
    let common = format!(
        "{}\n[server]\nbase_path = {BASE:?}\n[proxy]\ntrusted = [\"127.0.0.1/32\"]\n",
        config()
    );
    std::fs::write(ctx.dir.join("ptyhub-deploy.toml"), &common)?;
    std::fs::write(
        ctx.dir.join("ptyhub-deploy-tls.toml"),
        format!("{common}\n[tls]\ncert = {cert:?}\nkey = {key:?}\n"),
    )?;
    let plain = Daemon::start_config(ctx, "deploy-plain", "ptyhub-deploy.toml")?;
    let tls = Daemon::start_config(ctx, "deploy-tls", "ptyhub-deploy-tls.toml")?;
    let trust = client_tls(&ca)?;
    let mut paths = vec![
        Path3 {
            name: "plain ws://",
            root: format!("ws://{}{BASE}", plain.addr),
            tls: None,
        },
        Path3 {
            name: "ptyhub TLS wss://",
            root: format!("wss://{}{BASE}", tls.addr),
            tls: Some(trust.clone()),
        },
    ];
    let nginx = match crate::nginx::binary() {
        Some(bin) => Some(crate::nginx::Nginx::start(&bin, |port| {
            crate::nginx::single_host_site(plain.addr, port, &cert, &key)
        })?),
        None => {
            notes.push("deploy: nginx is not installed, its path was not measured".into());
            None
        }
    };
    if let Some(n) = &nginx {
        paths.push(Path3 {
            name: "nginx TLS -> plain",
            root: format!("wss://127.0.0.1:{}{BASE}", n.port),
            tls: Some(trust),
        });
    }
    let file = ctx
        .flood_file
        .as_ref()
        .ok_or_else(|| anyhow!("no flood file"))?;
    let mut rows: Vec<DeployRow> = paths
        .iter()
        .map(|p| DeployRow {
            path: p.name,
            rtt: Vec::new(),
            flood: Vec::new(),
            streamed: Vec::new(),
            resyncs: 0,
        })
        .collect();
    // Rounds across the paths, so that each path's figures come from the same moments.
    for round in 1..=s.flood_repeat.max(1) {
        for (p, row) in paths.iter().zip(rows.iter_mut()) {
            eprintln!("load: deploy, {}, round {round}", p.name);
            row.rtt.extend(
                echo(p, s.samples)
                    .await
                    .with_context(|| format!("echo {}", p.name))?,
            );
            let (secs, streamed, resyncs) = flood(p, &file.path, s.deploy_viewers, &ctx.pool)
                .await
                .with_context(|| format!("flood {}", p.name))?;
            row.flood.push(secs);
            row.streamed.push(streamed);
            row.resyncs += resyncs;
        }
    }
    for row in &mut rows {
        row.rtt.sort();
    }
    drop(nginx);
    plain.finish("deploy (plain)", notes);
    tls.finish("deploy (tls)", notes);
    Ok(rows)
}

/// `samples` one-byte round trips through a raw-mode `cat`.
async fn echo(p: &Path3, samples: usize) -> Result<Vec<Duration>> {
    let id = Uuid::new_v4();
    let url = format!("{}/ws/{id}?assistant=echo", p.root);
    let mut conn = Conn::open_tls(url, p.tls.clone()).await?;
    conn.wait_text("ECHO-READY").await?;
    let mut rtt = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        let byte = b'a' + (i % 26) as u8;
        let start = Instant::now();
        conn.send(&[byte]).await?;
        let deadline = start + STEP_TIMEOUT;
        loop {
            match timeout_at(deadline.into(), conn.ws.next()).await {
                Err(_) => bail!("no echo within {STEP_TIMEOUT:?}"),
                Ok(None) | Ok(Some(Err(_))) => bail!("the connection ended"),
                Ok(Some(Ok(Message::Binary(b)))) if !is_snapshot_chunk(&b) && b.contains(&byte) => {
                    break
                }
                Ok(Some(Ok(_))) => {}
            }
        }
        // The first ones warm up caches and windows.
        if i >= 20 {
            rtt.push(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let _ = conn.ws.close(None).await;
    Ok(rtt)
}

/// Seconds from typing `cat FILE; echo MARK` to the marker's arrival at the last of `viewers`
/// viewers (the first types; all read on the viewer runtime), output bytes streamed to each
/// viewer on average, and resync snapshots over all of them.
async fn flood(p: &Path3, file: &Path, viewers: usize, pool: &Handle) -> Result<(f64, u64, usize)> {
    let id = Uuid::new_v4();
    let (url, tls) = (format!("{}/ws/{id}?assistant=shell", p.root), p.tls.clone());
    let typist = on_pool(pool, async move {
        let mut conn = Conn::open_tls(url, tls).await?;
        conn.wait_text("$ ").await?;
        Ok(conn)
    })
    .await?;
    let mut conns = Vec::with_capacity(viewers);
    for v in 1..viewers {
        let (url, tls) = (format!("{}/ws/{id}", p.root), p.tls.clone());
        let conn = on_pool(pool, Conn::open_tls(url, tls))
            .await
            .with_context(|| format!("joining viewer {v}"))?;
        conns.push(conn);
    }
    // Everyone counted in, so no join lands inside the measurement.
    let expect = viewers as u64;
    let typist = on_pool(pool, async move {
        let mut typist = typist;
        typist.wait_viewers(expect).await?;
        Ok(typist)
    })
    .await?;
    conns.insert(0, typist);
    let n = id.as_u128() % 1000;
    let cmd = format!(
        "cat '{}'; echo FLOOD-END-$((1000+{n}))-MARK\r",
        file.display()
    );
    let marker = format!("FLOOD-END-{}-MARK", 1000 + n).into_bytes();
    let (mut sinks, mut readers, mut progress, mut tasks) =
        (Vec::new(), Vec::new(), Vec::new(), Tasks::default());
    for conn in conns {
        let (sink, stream) = conn.ws.split();
        sinks.push(sink);
        let got = Arc::new(Progress::default());
        let task = pool.spawn(flood_reader(
            stream,
            MarkerScan::new(marker.clone()),
            got.clone(),
        ));
        tasks.0.push(task.abort_handle());
        readers.push(task);
        progress.push(got);
    }
    let start = Instant::now();
    let typing = sinks[0].send(Message::Binary(cmd.into_bytes()));
    tokio::time::timeout(STEP_TIMEOUT, typing)
        .await
        .map_err(|_| anyhow!("typing the flood command: send blocked"))?
        .context("typing the flood command")?;
    let deadline = start + Duration::from_secs(300);
    let mut last = start;
    for (v, reader) in readers.iter_mut().enumerate() {
        match timeout_at(deadline.into(), reader).await {
            Ok(Ok(Ok(at))) => last = last.max(at),
            Ok(Ok(Err(e))) => bail!("viewer {v}: {e:#}"),
            Ok(Err(e)) => bail!("viewer {v}: reader task failed: {e}"),
            Err(_) => bail!("viewer {v}: the flood did not end within 300 s"),
        }
    }
    let secs = last.duration_since(start).as_secs_f64();
    let streamed = progress
        .iter()
        .map(|g| g.bytes.load(Ordering::Relaxed))
        .sum::<u64>()
        / viewers as u64;
    let resyncs = progress
        .iter()
        .map(|g| g.snapshots.load(Ordering::Relaxed))
        .sum();
    eprintln!(
        "load:   {:.3} s, {:.1} MiB streamed per viewer, {resyncs} resyncs",
        secs,
        streamed as f64 / 1048576.0
    );
    drop(tasks);
    for mut sink in sinks {
        let _ = sink.close().await;
    }
    Ok((secs, streamed, resyncs))
}

pub(crate) fn print(s: &Settings, rows: &[DeployRow], out: &mut Map<String, Value>) {
    println!();
    println!(
        "deploy: echo ({} round trips per path per round) and {} MiB flood to {} viewers ({} rounds), paths side by side",
        s.samples,
        s.flood_mb,
        s.deploy_viewers,
        s.flood_repeat.max(1)
    );
    println!(
        "(a viewer that falls behind is resynced by a snapshot: 'streamed' is the output each got)"
    );
    println!(
        "{:<20} {:>9} {:>9} {:>11} {:>13} {:>13} {:>8}",
        "path", "echo p50", "echo p99", "flood med s", "flood / plain", "streamed MiB", "resyncs"
    );
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get((v.len().max(1) - 1) / 2).copied().unwrap_or(f64::NAN)
    };
    let plain = rows.first().map_or(f64::NAN, |r| median(&r.flood));
    let mut json_rows = Vec::new();
    for r in rows {
        let m = median(&r.flood);
        let streamed: Vec<f64> = r.streamed.iter().map(|&b| b as f64 / 1048576.0).collect();
        println!(
            "{:<20} {:>9} {:>9} {:>11.3} {:>13.2} {:>13.1} {:>8}",
            r.path,
            ms(pct_us(&r.rtt, 0.50)),
            ms(pct_us(&r.rtt, 0.99)),
            m,
            m / plain,
            median(&streamed),
            r.resyncs
        );
        json_rows.push(json!({
            "path": r.path,
            "echo_p50_us": pct_us(&r.rtt, 0.50),
            "echo_p99_us": pct_us(&r.rtt, 0.99),
            "flood_seconds": r.flood.iter().map(|&x| round3(x)).collect::<Vec<_>>(),
            "flood_median_over_plain": round3(m / plain),
            "flood_streamed_bytes": r.streamed,
            "flood_resyncs": r.resyncs,
        }));
    }
    out.insert("deploy".into(), Value::Array(json_rows));
}

/// A CA and a certificate for 127.0.0.1 it signed, made now: (CA PEM, cert path, key path).
fn certificate(dir: &Path) -> Result<(String, PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = params.signed_by(&key, &issuer)?;
    let (cert_path, key_path) = (dir.join("deploy-cert.pem"), dir.join("deploy-key.pem"));
    std::fs::write(&cert_path, leaf.pem())?;
    std::fs::write(&key_path, key.serialize_pem())?;
    Ok((ca.pem(), cert_path, key_path))
}

fn client_tls(ca_pem: &str) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
