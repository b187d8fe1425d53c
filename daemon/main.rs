//! The `ptyhub` binary: the daemon (flags, configuration, the token and logging, then
//! [`ptyhub::daemon::Daemon`] runs) and the command-line client's subcommands
//! ([`ptyhub::client`]).

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args as ClapArgs, CommandFactory, Parser, Subcommand};
use tracing::{info, warn};

use ptyhub::daemon::{Daemon, Signals};

/// jemalloc rather than glibc's malloc: after large frees (multi-MiB uploads, pastes, floods)
/// glibc keeps the pages, so RSS at rest grew 56% over a 30-minute soak; jemalloc's background
/// thread gives them back within seconds, also while the daemon is idle.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, compiled in (it reads them before `main`; `_RJEM_MALLOC_CONF` in the
/// environment still overrides each):
/// - freed pages go back to the system a second after their last use rather than ten
///   (`dirty_decay_ms`), off the session's path on one background thread;
/// - no thread caches (`tcache:false`): each worker's cache kept megabytes freed by a flood
///   (nothing flushes an idle thread's), and every session a share of them; without them an
///   idle session costs about 16 KiB less, with no difference seen in CPU per MB printed;
/// - one arena (`narenas:1`) rather than one per thread up to eight: each arena's metadata
///   and part-used pages are paid again, about 530 KiB in an idle daemon. The price is the
///   workers sharing its locks: a flood to 100 viewers took 0-9% more time and CPU (well
///   within its target); slow readers and echoes measured no slower;
/// - slabs of one page for the size classes up to 4 KiB (`slab_sizes`) rather than of up to
///   several: a slab stays resident while one object in it lives, so a session's few
///   long-lived objects held whole multi-page slabs (an idle session 58.6 -> 51.6 KiB, the
///   idle daemon 0.3 MiB less; no cost seen to floods or slow readers). Two classes keep
///   slabs of several pages: 2560 B (a screen row of 80 cells: 8 to 5 pages, where a page
///   holds one and wastes 1.5 KiB) and 4096 B (a PTY read: 4 to 4 pages). A flood has a
///   thousand of each alive; every slab has 128 B of metadata that jemalloc never gives back,
///   which held 440 KiB after a 50 MiB flood, 115 KiB with these two;
/// - and once the daemon is quiet, [`release_allocator_pages`] purges at once: jemalloc's
///   decay alone still held the pages a flood freed 10 s later.
///
/// Figures: benches/RESULTS.md, "Footprint".
#[export_name = "_rjem_malloc_conf"]
#[allow(non_upper_case_globals)]
// SAFETY: the pointer is a C string literal's, valid and unchanging for the whole program.
pub static malloc_conf: Option<&'static std::ffi::c_char> = Some(unsafe { &*MALLOC_CONF.as_ptr() });
const MALLOC_CONF: &std::ffi::CStr =
    c"background_thread:true,max_background_threads:1,narenas:1,slab_sizes:1-4096:1|2560-2560:5|4096-4096:4,tcache:false,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// Gives the allocator's free pages back to the system, every arena's, at once
/// (`idle_pages.rs` calls it once the daemon is quiet; while it works, jemalloc keeps freed
/// pages `dirty_decay_ms` for reuse).
fn release_allocator_pages() {
    // SAFETY: a jemalloc control that takes and returns nothing (null pointers and a zero
    // length); 4096 is MALLCTL_ARENAS_ALL. An error code changes nothing.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

/// Share live terminal sessions (shells and AI coding agents) with browser viewers.
///
/// With no subcommand (or `serve`) runs the daemon; the other subcommands are its client.
#[derive(Debug, Parser)]
#[command(
    name = "ptyhub",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    serve: Args,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon (what `ptyhub` alone does).
    Serve(Args),
    /// Join a session from this terminal, full screen; Ctrl+] leaves it running.
    Attach {
        #[command(flatten)]
        conn: Conn,
        /// The session: its number, uuid, name (when only one session has it) or URL.
        session: String,
        /// Watch only: type nothing, and leave the session's size to its writers.
        #[arg(long)]
        read_only: bool,
        /// How long to keep reconnecting after the connection drops, in seconds.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        retry_for: u64,
    },
    /// Run a program on the daemon's host with its output, input and exit status as if local.
    Exec {
        #[command(flatten)]
        conn: Conn,
        /// Working directory on the daemon's host.
        #[arg(long)]
        cwd: Option<String>,
        /// Extra environment for the program, KEY=VALUE (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROG [ARGS]")]
        argv: Vec<String>,
    },
    /// List the sessions.
    Ls {
        #[command(flatten)]
        conn: Conn,
        /// Print the server's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Start a session; prints its number, uuid and URL.
    New {
        #[command(flatten)]
        conn: Conn,
        /// The assistant to run (a key of the daemon's [assistants] table).
        #[arg(long, default_value = "shell")]
        assistant: String,
        /// A name for the session.
        #[arg(long)]
        name: Option<String>,
        /// Working directory on the daemon's host.
        #[arg(long)]
        cwd: Option<String>,
        /// Attach to it right away.
        #[arg(long)]
        attach: bool,
    },
    /// End a session (its program gets SIGHUP, then SIGTERM, then SIGKILL).
    Kill {
        #[command(flatten)]
        conn: Conn,
        /// The session: number, uuid, unique name or URL.
        session: String,
    },
    /// Make a share link to a session; prints the link.
    Share {
        #[command(flatten)]
        conn: Conn,
        /// The session: number, uuid, unique name or URL.
        session: String,
        /// The link may type and resize (default: watch only).
        #[arg(long)]
        writer: bool,
        /// Seconds until the link stops working (default: until revoked or the session ends).
        #[arg(long, value_name = "SECONDS")]
        ttl: Option<u64>,
    },
    /// Wait until a session is waiting, idle or exited (or working).
    ///
    /// Exits 0 when it is (at once if it is already), 1 on timeout, 2 when the session does
    /// not exist or ends first (or exits, unless waiting for that). Follows the daemon's event
    /// stream: a CI job or another agent hands work to an agent and waits for it this way.
    Wait {
        #[command(flatten)]
        conn: Conn,
        /// The session: number, uuid, unique name or URL.
        session: String,
        /// The state to wait for.
        #[arg(long, value_parser = ["waiting", "idle", "exited", "working"])]
        until: String,
        /// How long to wait at most: "90s", "10m", "2h".
        #[arg(long, default_value = "10m", value_name = "DURATION")]
        timeout: String,
    },
    /// Tell the daemon this session's state, from a program or an agent's hook running in it.
    ///
    /// Reads PTYHUB_URL, PTYHUB_SESSION and PTYHUB_STATE_TOKEN, which every session's program
    /// gets. With --from, reads the agent's own hook JSON: on stdin for claude and gemini, as
    /// the last argument for codex. Always exits 0 and prints nothing unless --verbose (a
    /// failing hook would print into the agent's transcript).
    Notify(NotifyArgs),
    /// Replace the local daemon's binary in place: sessions keep running, viewers reconnect.
    ///
    /// Install the new binary over the old one first; this signals the daemon (SIGUSR2, as
    /// `systemctl reload ptyhub` does), waits until the new image answers and prints the
    /// versions. A daemon that refuses (bad config, missing binary) goes on as it was.
    Upgrade {
        #[command(flatten)]
        conn: Conn,
        /// The daemon's pid (default: what its /api/version says).
        #[arg(long)]
        pid: Option<i32>,
        /// How long to wait for the new image, in seconds.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        timeout: u64,
    },
    /// Make, list and revoke API tokens (needs an admin's token).
    Token {
        /// What to do.
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// `ptyhub token`'s subcommands.
#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Make a token; prints it (once) on stdout, and how to use it on stderr.
    Create {
        #[command(flatten)]
        conn: Conn,
        /// Its name (unique among live tokens), e.g. the script or person it is for.
        #[arg(long)]
        name: String,
        /// A scope: view, write, exec or admin (repeatable).
        #[arg(long = "scope", required = true, value_name = "SCOPE")]
        scopes: Vec<String>,
        /// When it stops working: "30d", "12h", "90m" (default: never, until revoked).
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
    },
    /// List the tokens (never the tokens themselves).
    List {
        #[command(flatten)]
        conn: Conn,
        /// Print the server's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: it stops working, its open connections close.
    Revoke {
        #[command(flatten)]
        conn: Conn,
        /// The token's id (see `ptyhub token list`).
        id: String,
    },
}

/// `ptyhub notify`'s flags.
#[derive(Debug, ClapArgs)]
struct NotifyArgs {
    /// The state: working, waiting or idle.
    #[arg(long)]
    state: Option<String>,
    /// Why, for people: one line, at most 200 characters.
    #[arg(long)]
    reason: Option<String>,
    /// Report an agent's own hook JSON instead: claude, codex or gemini.
    #[arg(long, value_name = "AGENT")]
    from: Option<String>,
    /// The daemon (default: $PTYHUB_URL).
    #[arg(long)]
    url: Option<String>,
    /// The session's uuid (default: $PTYHUB_SESSION).
    #[arg(long)]
    session: Option<String>,
    /// The session's capability token (default: $PTYHUB_STATE_TOKEN).
    #[arg(long)]
    token: Option<String>,
    /// Say on stderr what happened.
    #[arg(long)]
    verbose: bool,
    /// The hook's JSON, when the agent passes it as an argument (codex).
    #[arg(value_name = "JSON")]
    json: Option<String>,
}

/// `ptyhub notify`, run before anything else: whatever its arguments, it exits 0 and says
/// nothing unless `--verbose` (an agent shows a failing hook's output in its transcript).
fn notify() -> ! {
    let verbose = std::env::args_os().any(|a| a == "--verbose");
    let status = match Cli::try_parse() {
        Ok(Cli {
            command: Some(Command::Notify(a)),
            ..
        }) => ptyhub::client::notify::run(ptyhub::client::notify::Notify {
            state: a.state,
            reason: a.reason,
            from: a.from,
            json: a.json,
            url: a.url,
            session: a.session,
            token: a.token,
            verbose: a.verbose,
        }),
        Ok(_) => 0,
        Err(e) => {
            let asked = matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            if verbose || asked {
                let _ = e.print();
            }
            0
        }
    };
    std::process::exit(status)
}

/// Which daemon a client subcommand talks to.
#[derive(Debug, ClapArgs)]
struct Conn {
    /// The daemon's address (a session URL given as SESSION also names it).
    #[arg(long, env = "PTYHUB_URL", default_value = ptyhub::client::DEFAULT_SERVER)]
    server: String,
    /// The access token.
    #[arg(long, env = "PTYHUB_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// The daemon's flags.
#[derive(Debug, Clone, ClapArgs)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:1977 (port 0 picks a free port).
    #[arg(long, env = "PTYHUB_LISTEN")]
    listen: Option<String>,
    /// TOML configuration file, layered over the embedded default.
    #[arg(long, env = "PTYHUB_CONFIG")]
    config: Option<PathBuf>,
    /// The access token (default: [auth] token in the config, else a generated one kept in the
    /// state directory's `token` file, e.g. ~/.local/state/ptyhub/token).
    #[arg(long, env = "PTYHUB_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Replace the kept generated token with a new one (signs out every page and link).
    #[arg(long)]
    new_token: bool,
    /// Turn authentication off. Accepted only when listening on a loopback address.
    #[arg(long)]
    no_auth: bool,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Load and validate the configuration, print what is wrong (or the image formats this
    /// binary reads, for a live upgrade), and exit.
    #[arg(long)]
    check_config: bool,
    /// Set by a live upgrade: the descriptor of the image handed over.
    #[arg(long = "upgrade-image", hide = true, value_name = "FD")]
    upgrade_image: Option<i32>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
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
            ptyhub::auth::valid_token(&token),
            "the token must be at least 16 printable ASCII characters without spaces"
        );
        return Ok(TokenSource::Given(token));
    }
    anyhow::ensure!(
        loopback,
        "refusing to listen on {} without a token: set one with --token, PTYHUB_TOKEN or [auth] token, since a generated token would have to be read off this machine's console",
        cfg.listen
    );
    if args.check_config {
        // A check (before a live upgrade) neither reads nor rotates the kept token.
        return Ok(TokenSource::Generated(ptyhub::auth::generate_token()));
    }
    let path = ptyhub::config::state_dir().join(ptyhub::auth::TOKEN_FILE);
    // A live upgrade keeps the running token, whatever flags the daemon was started with.
    let rotate = args.new_token && args.upgrade_image.is_none();
    match ptyhub::auth::stored_token(&path, rotate) {
        Ok((token, _)) => Ok(TokenSource::Generated(token)),
        Err(e) => {
            // Still usable, only not kept: say so, and go on with a token for this run.
            warn!(path = %path.display(), "cannot keep the generated token: {e}");
            Ok(TokenSource::Generated(ptyhub::auth::generate_token()))
        }
    }
}

fn main() -> anyhow::Result<()> {
    if std::env::args_os().nth(1).is_some_and(|a| a == "notify") {
        notify();
    }
    let cli = Cli::parse();
    let args = match cli.command {
        None => cli.serve,
        Some(Command::Serve(args)) => args,
        Some(Command::Completions { shell }) => {
            clap_complete::generate(shell, &mut Cli::command(), "ptyhub", &mut std::io::stdout());
            return Ok(());
        }
        Some(Command::Man) => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            return Ok(());
        }
        Some(client) => std::process::exit(run_client(client)),
    };
    // Before any thread exists: the runtime's threads inherit the mask, and `serve` lets the
    // signals through on its own thread once their handlers are in.
    ptyhub::upgrade::hold_signals();
    init_logging(args.log_format);
    // Before anything could replace it: the path a live upgrade runs again.
    let exe = std::env::current_exe().context("finding this program's path")?;
    let handoff = match args.upgrade_image {
        Some(fd) => Some(receive_handoff(fd)?),
        None => None,
    };
    let loaded = ptyhub::config::load(args.config.as_deref(), args.listen.as_deref())
        .map_err(anyhow::Error::from)
        .and_then(|cfg| token_source(&args, &cfg).map(|token| (cfg, token)))
        // The certificate and key are read here too, so that `--check-config` (and with it a
        // live upgrade) refuses a pair the daemon could not serve with.
        .and_then(|(cfg, token)| match &cfg.tls {
            Some(files) => ptyhub::http::tls::Tls::load(files)
                .map(|_| (cfg, token))
                .map_err(anyhow::Error::msg),
            None => Ok((cfg, token)),
        });
    let (cfg, token) = match loaded {
        Ok(loaded) => loaded,
        Err(e) if args.check_config => {
            eprintln!("ptyhub: the configuration is refused: {e:#}");
            std::process::exit(1);
        }
        Err(e) => {
            if let Some(handoff) = &handoff {
                // The old image checked this config a moment ago; it changed since. The
                // sessions cannot be adopted without one: end them, leave nothing behind.
                tracing::error!("the new image cannot load its configuration ({e:#}): ending the sessions it was handed");
                ptyhub::upgrade::abandon(&handoff.image, Duration::from_secs(5));
            }
            return Err(e);
        }
    };
    // Peers are asked with this daemon's token: over plain http beyond this machine anyone on
    // the path reads it. Refused by the config unless `allow_cleartext_peers` (a private
    // network may be trusted), and then said every time.
    let cleartext = cfg.cluster.cleartext_peers();
    if args.check_config {
        for peer in &cleartext {
            println!(
                "warning: cluster peer {peer} is plain http: the token is sent to it unencrypted"
            );
        }
        println!("configuration OK: {}", cfg.source);
        println!("{}", ptyhub::upgrade::check_report());
        return Ok(());
    }
    for peer in &cleartext {
        warn!(%peer, "cluster peer over plain http: the token is sent to it unencrypted (use https:// or a private network)");
    }
    ptyhub::idle_pages::also_release(release_allocator_pages);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Wakes start the watch that lets go of an idle daemon's pages (`idle_pages.rs`).
        .on_thread_unpark(ptyhub::idle_pages::woke)
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(Arc::new(cfg), token, handoff, exe))
}

/// Reads the image a previous image of this daemon handed over. One that cannot be read ends
/// the sessions it can find (this process's children) rather than orphan them.
fn receive_handoff(fd: i32) -> anyhow::Result<ptyhub::upgrade::Handoff> {
    match ptyhub::upgrade::receive(fd) {
        Ok(handoff) => Ok(handoff),
        Err(e) => {
            tracing::error!(
                "cannot read the upgrade image ({e}): ending every session this process runs"
            );
            ptyhub::upgrade::abandon_children(Duration::from_secs(5));
            Err(anyhow::anyhow!("cannot read the upgrade image: {e}"))
        }
    }
}

/// Runs a client subcommand; returns the process's exit status. Errors are one line on
/// stderr, never a trace.
fn run_client(command: Command) -> i32 {
    use ptyhub::client::attach::{self, AttachOptions};
    attach::restore_on_panic();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ptyhub: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Attach {
                conn,
                session,
                read_only,
                retry_for,
            } => {
                let server = server_for(&conn, Some(&session))?;
                let found = server.resolve(&session).await?;
                let opts = AttachOptions {
                    read_only,
                    retry_for: Duration::from_secs(retry_for),
                };
                attach::run(&server, &found, opts).await
            }
            Command::Exec {
                conn,
                cwd,
                env,
                argv,
            } => {
                let server = server_for(&conn, None)?;
                let req = ptyhub::client::exec::ExecRequest { argv, cwd, env };
                ptyhub::client::exec::run(&server, &req).await
            }
            Command::Ls { conn, json } => {
                let server = server_for(&conn, None)?;
                if json {
                    let list = server.list_json().await?;
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&list).unwrap_or_default()
                    );
                } else {
                    let sessions = server.list().await?;
                    let now = time::OffsetDateTime::now_utc();
                    print!("{}", ptyhub::client::table::render(&sessions, now));
                }
                Ok(0)
            }
            Command::New {
                conn,
                assistant,
                name,
                cwd,
                attach: then_attach,
            } => {
                let server = server_for(&conn, None)?;
                let mut body = serde_json::json!({ "assistant": assistant });
                if let Some(name) = name {
                    body["name"] = name.into();
                }
                if let Some(cwd) = cwd {
                    body["cwd"] = cwd.into();
                }
                let created = server.create(body).await?;
                let session: ptyhub::client::Session =
                    serde_json::from_value(created).map_err(|e| {
                        ptyhub::client::ClientError::Server(format!("unexpected answer: {e}"))
                    })?;
                println!(
                    "{} {} {}",
                    session
                        .num
                        .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                    session.id,
                    server.page(session.id)
                );
                if then_attach {
                    let opts = AttachOptions {
                        read_only: false,
                        retry_for: attach::DEFAULT_RETRY_FOR,
                    };
                    return attach::run(&server, &session, opts).await;
                }
                Ok(0)
            }
            Command::Kill { conn, session } => {
                let server = server_for(&conn, Some(&session))?;
                let found = server.resolve(&session).await?;
                server.kill(found.id).await?;
                Ok(0)
            }
            Command::Share {
                conn,
                session,
                writer,
                ttl,
            } => {
                let server = server_for(&conn, Some(&session))?;
                let found = server.resolve(&session).await?;
                println!("{}", server.share(found.id, writer, ttl).await?);
                Ok(0)
            }
            Command::Wait {
                conn,
                session,
                until,
                timeout,
            } => {
                let server = server_for(&conn, Some(&session))?;
                let until = ptyhub::attention::State::parse(&until).ok_or_else(|| {
                    ptyhub::client::ClientError::Local(format!("unknown state {until:?}"))
                })?;
                let timeout = ptyhub::config::parse_duration(&timeout)
                    .map_err(|e| ptyhub::client::ClientError::Local(format!("--timeout: {e}")))?;
                ptyhub::client::wait::run(&server, &session, until, timeout).await
            }
            Command::Upgrade { conn, pid, timeout } => {
                let server = server_for(&conn, None)?;
                ptyhub::client::upgrade::run(&server, pid, Duration::from_secs(timeout)).await
            }
            Command::Token { action } => token(action).await,
            Command::Serve(_) | Command::Completions { .. } | Command::Man | Command::Notify(_) => {
                Ok(0)
            }
        }
    });
    match result {
        Ok(status) => status,
        Err(e) => {
            eprintln!("ptyhub: {e}");
            1
        }
    }
}

/// `ptyhub token ...`.
async fn token(action: TokenAction) -> Result<i32, ptyhub::client::ClientError> {
    use ptyhub::client::{tokens, ClientError};
    match action {
        TokenAction::Create {
            conn,
            name,
            scopes,
            expires,
        } => {
            let server = server_for(&conn, None)?;
            let expires_in = expires
                .map(|e| {
                    ptyhub::config::parse_duration(&e)
                        .map(|d| d.as_secs().max(1))
                        .map_err(|e| ClientError::Local(format!("--expires: {e}")))
                })
                .transpose()?;
            let made = server
                .create_token(&name, &tokens::scope_names(&scopes), expires_in)
                .await?;
            let (token, help) = tokens::created_lines(&made);
            println!("{token}");
            eprintln!("{help}");
        }
        TokenAction::List { conn, json } => {
            let server = server_for(&conn, None)?;
            if json {
                let value = server.tokens_json().await?;
                println!(
                    "{}",
                    serde_json::to_string_pretty(&value).unwrap_or_default()
                );
            } else {
                let list = server.tokens().await?;
                let now = time::OffsetDateTime::now_utc();
                print!("{}", tokens::render(&list, now));
            }
        }
        TokenAction::Revoke { conn, id } => {
            let server = server_for(&conn, None)?;
            server.revoke_token(&id).await?;
            eprintln!("token {id} revoked");
        }
    }
    Ok(0)
}

/// The server a client talks to: the one a session URL names (with its token, unless one is
/// given), else `--server` / `PTYHUB_URL`.
fn server_for(
    conn: &Conn,
    target: Option<&str>,
) -> Result<ptyhub::client::Server, ptyhub::client::ClientError> {
    if let Some((url, token)) = target.and_then(ptyhub::client::server_of) {
        return ptyhub::client::Server::new(&url, conn.token.clone().or(token));
    }
    ptyhub::client::Server::new(&conn.server, conn.token.clone())
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

async fn serve(
    cfg: Arc<ptyhub::config::Config>,
    token: TokenSource,
    handoff: Option<ptyhub::upgrade::Handoff>,
    exe: PathBuf,
) -> anyhow::Result<()> {
    // A generated token survives an upgrade: open tabs and links stay signed in.
    let token = match (token, handoff.as_ref().and_then(|h| h.image.token.clone())) {
        (TokenSource::Generated(_), Some(kept)) => TokenSource::Given(kept),
        (token, _) => token,
    };
    let (secret, generated) = match &token {
        TokenSource::Off => (None, false),
        TokenSource::Given(t) => (Some(t.clone()), false),
        TokenSource::Generated(t) => (Some(t.clone()), true),
    };
    // Handlers first: a SIGTERM right after the URL is printed must shut down cleanly.
    let signals = Signals::install()?;
    let upgraded = handoff.is_some();
    let daemon = Daemon::start(cfg.clone(), secret.clone(), handoff).await?;
    let addr = daemon
        .addr()
        .context("the daemon has no listening address")?;
    let tls = daemon.is_tls();
    info!(%addr, config = %cfg.source, auth = secret.is_some(), tls, upgraded, "ptyhub listening");
    if !addr.ip().is_loopback() && !tls && cfg.proxy.trusted.is_empty() {
        warn!(
            %addr,
            "listening beyond loopback over plain HTTP with no trusted proxy in front: tokens \
             and terminals cross the network in the clear; set [tls] cert and key, or put a TLS \
             proxy in front and list it in [proxy] trusted"
        );
    }
    // stdout carries what to open (tests read the port from the first line). A generated token
    // is printed here once and never logged.
    let scheme = if tls { "https" } else { "http" };
    let root = format!("{scheme}://{addr}{}/", cfg.server.base_path);
    let open = match (&secret, generated) {
        (Some(t), true) => format!("open {root}?token={t}"),
        (Some(_), false) => format!("open {root} with your token"),
        (None, _) => format!("open {root} (authentication is off)"),
    };
    if !upgraded {
        // Not println!: a closed stdout (a service manager, a reader gone) must not stop the
        // daemon.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "ptyhub listening on {root}\n{open}");
        let _ = stdout.flush();
    }
    daemon.run(signals, &exe).await?;
    Ok(())
}
