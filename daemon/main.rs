//! The `ptyhub` binary: flags, configuration, logging and signals around [`ptyhub::server::run`].

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use ptyhub::registry::Registry;
use ptyhub::server::{self, AppState};
use ptyhub::session::EndReason;
use ptyhub::shutdown::Shutdown;

/// Share live terminal sessions (shells and AI coding agents) with browser viewers.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:1977 (port 0 picks a free port).
    #[arg(long, env = "PTYHUB_LISTEN")]
    listen: Option<String>,
    /// TOML configuration file, layered over the embedded default.
    #[arg(long, env = "PTYHUB_CONFIG")]
    config: Option<PathBuf>,
}

/// How long open connections get to finish after every session has ended.
const CONNECTION_DRAIN: Duration = Duration::from_secs(2);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging();
    let cfg = ptyhub::config::load(args.config.as_deref(), args.listen.as_deref())?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve(Arc::new(cfg)))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

async fn serve(cfg: Arc<ptyhub::config::Config>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let shutdown = Shutdown::new();
    let state = Arc::new(AppState {
        registry: Registry::new(cfg.clone()),
        cfg: cfg.clone(),
        shutdown: shutdown.clone(),
        tasks: TaskTracker::new(),
    });
    info!(%addr, config = %cfg.source, "ptyhub listening");
    // The one line on stdout: what to open (tests read the port from it too).
    println!("ptyhub listening on http://{addr}/");

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let server = tokio::spawn(server::run(listener, state.clone()));
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(
        signal = which,
        sessions = state.registry.len(),
        "shutting down"
    );
    shutdown.cancel();
    let _ = server.await;
    // Each session gets SIGHUP+SIGTERM, then SIGKILL after the grace period.
    let limit = cfg.session.kill_grace + Duration::from_secs(3);
    if tokio::time::timeout(limit, state.registry.end_all(EndReason::Shutdown))
        .await
        .is_err()
    {
        warn!("some sessions did not end in time");
    }
    state.tasks.close();
    if tokio::time::timeout(CONNECTION_DRAIN, state.tasks.wait())
        .await
        .is_err()
    {
        info!("closing connections that did not finish");
    }
    info!("bye");
    Ok(())
}
