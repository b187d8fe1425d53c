//! The `ptyhub` binary: flags, configuration, logging and signals around [`ptyhub::daemon::Daemon`].

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

use ptyhub::daemon::Daemon;

/// jemalloc rather than glibc's malloc: after large frees (multi-MiB uploads, pastes, floods)
/// glibc keeps the pages, so RSS at rest grew 56% over a 30-minute soak; jemalloc's background
/// thread gives them back within seconds, also while the daemon is idle.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// The access token (default: [auth] token in the config, else a random one per start).
    #[arg(long, env = "PTYHUB_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Turn authentication off. Accepted only when listening on a loopback address.
    #[arg(long)]
    no_auth: bool,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Where the token came from, which decides whether it is printed.
enum TokenSource {
    /// Authentication is off.
    Off,
    /// Given by flag, environment or config: the user knows it.
    Given(String),
    /// Generated now: printed once, in the URL to open.
    Generated(String),
}

fn token_source(args: &Args, cfg: &ptyhub::config::Config) -> anyhow::Result<TokenSource> {
    let loopback = cfg.listen.ip().is_loopback();
    if args.no_auth {
        anyhow::ensure!(
            loopback,
            "--no-auth is refused on {}: anyone who can reach that address could type into your shells; listen on 127.0.0.1 or use a token",
            cfg.listen
        );
        return Ok(TokenSource::Off);
    }
    if let Some(token) = args.token.clone().or_else(|| cfg.auth.token.clone()) {
        anyhow::ensure!(
            token.len() >= 16 && token.chars().all(|c| c.is_ascii_graphic()),
            "the token must be at least 16 printable ASCII characters without spaces"
        );
        return Ok(TokenSource::Given(token));
    }
    anyhow::ensure!(
        loopback,
        "refusing to listen on {} without a token: set one with --token, PTYHUB_TOKEN or [auth] token, since a generated token would have to be read off this machine's console",
        cfg.listen
    );
    Ok(TokenSource::Generated(ptyhub::auth::generate_token()))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    let cfg = ptyhub::config::load(args.config.as_deref(), args.listen.as_deref())?;
    let token = token_source(&args, &cfg)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve(Arc::new(cfg), token))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

/// Tells systemd (when it started us with `Type=notify`) how we are doing; a no-op otherwise.
fn notify(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(false, &[state]) {
        warn!("could not notify systemd: {e}");
    }
}

async fn serve(cfg: Arc<ptyhub::config::Config>, token: TokenSource) -> anyhow::Result<()> {
    let listener = Daemon::bind(&cfg)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let (secret, generated) = match &token {
        TokenSource::Off => (None, false),
        TokenSource::Given(t) => (Some(t.clone()), false),
        TokenSource::Generated(t) => (Some(t.clone()), true),
    };
    let mut daemon = Daemon::new(cfg.clone(), secret.clone());
    // Handlers first: a SIGTERM right after the URL is printed must shut down cleanly.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let addr = daemon.serve(listener)?;
    info!(%addr, config = %cfg.source, auth = secret.is_some(), "ptyhub listening");
    // stdout carries what to open (tests read the port from the first line). A generated token
    // is printed here once and never logged.
    let open = match (&secret, generated) {
        (Some(t), true) => format!("open http://{addr}/?token={t}"),
        (Some(_), false) => format!("open http://{addr}/ with your token"),
        (None, _) => format!("open http://{addr}/ (authentication is off)"),
    };
    // Not println!: a closed stdout (a service manager, a reader gone) must not stop the daemon.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "ptyhub listening on http://{addr}/\n{open}");
    let _ = stdout.flush();
    drop(stdout);
    notify(sd_notify::NotifyState::Ready);
    let mut watchdog_usec = 0;
    if sd_notify::watchdog_enabled(false, &mut watchdog_usec) {
        let every = Duration::from_micros(watchdog_usec / 2);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                notify(sd_notify::NotifyState::Watchdog);
            }
        });
    }

    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(
        signal = which,
        sessions = daemon.sessions(),
        "shutting down"
    );
    notify(sd_notify::NotifyState::Stopping);
    daemon.end().await;
    info!("bye");
    Ok(())
}
