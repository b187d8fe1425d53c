//! The daemon as one object: built from a configuration and a token, served on a listener,
//! run until a signal stops it (reloading its certificate on SIGHUP, upgrading itself on
//! SIGUSR2), and ended (every session signalled, every connection given time to close), or
//! handed over to a new image of itself (a live upgrade) and adopted there. The binary only
//! parses flags and calls it; tests hold it directly.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::auth::{Auth, SignIn, TokenStore};
use crate::config::Config;
use crate::exec::Execs;
use crate::http::connections::Connections;
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::registry::Registry;
use crate::session::EndReason;
use crate::shutdown::Shutdown;
use crate::systemd;
use crate::upgrade::{self, Handoff, Upgrades};
use serde_json::json;

/// How long open connections get to finish after every session has ended: a viewer still
/// reading drains for up to [`crate::ws::CLOSE_DRAIN`], then its reader waits
/// [`crate::ws::CLOSE_GRACE`] for the client's close. A connection whose writes stop going
/// through (its client does not read) is dropped after `CLOSE_GRACE` by its own driver
/// ([`crate::viewer::transport::Progress::stuck_after`]), so only a client still reading
/// keeps a shutdown waiting, and never past this.
const CONNECTION_DRAIN: Duration = crate::ws::CLOSE_DRAIN.saturating_add(crate::ws::CLOSE_GRACE);

/// A running (or ready to run) ptyhub: its sessions, its auth, its connection tasks.
pub struct Daemon {
    state: Arc<AppState>,
    server: Option<JoinHandle<()>>,
    addr: Option<SocketAddr>,
    /// A duplicate of the listening socket: it stays open (connections wait in its backlog)
    /// when the accept loop stops for a live upgrade, and is what is handed over.
    listener: Option<OwnedFd>,
    /// `[tls]` once serving: its certificate is re-read by [`Daemon::reload_tls`].
    tls: Option<Arc<http::tls::Tls>>,
}

/// How long viewers told of an upgrade get to answer the close (and so to deliver the input
/// they sent before it) before the sessions freeze.
const DETACH_WAIT: Duration = Duration::from_millis(300);
/// How long recorders get to write what they have before the new image appends to their files.
const RECORDERS_WAIT: Duration = Duration::from_secs(2);

/// Why the daemon could not start, or could not go on after a live upgrade failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configured address cannot be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving on the bound listener failed (its TLS files, most likely).
    #[error("cannot start serving")]
    Serve(#[source] std::io::Error),
    /// The sessions a previous image handed over could not be taken on.
    #[error("adopting the sessions handed over")]
    Adopt(#[source] std::io::Error),
    /// A live upgrade could not hand the sessions over.
    #[error(transparent)]
    HandOver(std::io::Error),
    /// After a failed `execve`, this image could not take its own sessions back.
    #[error("taking the sessions back after a failed upgrade")]
    TakeBack(#[source] std::io::Error),
    /// The API tokens' file (`tokens.json` in the state directory) cannot be read.
    #[error("reading the API tokens")]
    Tokens(#[source] std::io::Error),
}

/// The API tokens kept in the state directory (`tokens.json`), as [`Daemon::start`] and a
/// live upgrade's new image read them.
pub fn stored_tokens(cfg: &Config) -> std::io::Result<TokenStore> {
    let path = crate::config::state_dir().join(crate::auth::tokens::TOKENS_FILE);
    TokenStore::open(path, cfg.limits.max_api_tokens)
}

/// The signals the running daemon answers: SIGTERM and SIGINT end it, SIGHUP reloads its
/// certificate, SIGUSR2 upgrades it live. The same ones `upgrade` holds across an `execve`.
pub struct Signals {
    term: Signal,
    int: Signal,
    usr2: Signal,
    hup: Signal,
}

/// What a signal asks of the daemon.
enum Request {
    /// End, named by the signal that asked.
    Stop(&'static str),
    /// Re-read the TLS certificate and key.
    ReloadTls,
    /// Replace the binary in place.
    Upgrade,
}

impl Signals {
    /// Installs the handlers, then lets the signals through: any held since the process
    /// started (or across the `execve` of a live upgrade) is handled now, not lost.
    pub fn install() -> std::io::Result<Self> {
        let signals = Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr2: signal(SignalKind::user_defined2())?,
            hup: signal(SignalKind::hangup())?,
        };
        upgrade::release_signals();
        Ok(signals)
    }

    /// The next request.
    async fn next(&mut self) -> Request {
        tokio::select! {
            _ = self.term.recv() => Request::Stop("SIGTERM"),
            _ = self.int.recv() => Request::Stop("SIGINT"),
            _ = self.usr2.recv() => Request::Upgrade,
            _ = self.hup.recv() => Request::ReloadTls,
        }
    }
}

impl Daemon {
    /// Builds the daemon's parts; `token: None` turns authentication off. Its API tokens are
    /// kept in memory only ([`Daemon::start`] keeps them in the state directory).
    pub fn new(cfg: Arc<Config>, token: Option<String>) -> Self {
        let tokens = TokenStore::in_memory(cfg.limits.max_api_tokens);
        Self::with_tokens(cfg, token, tokens)
    }

    /// [`Daemon::new`] with these API tokens.
    pub fn with_tokens(cfg: Arc<Config>, token: Option<String>, tokens: TokenStore) -> Self {
        let metrics = Arc::new(Metrics::default());
        Self::build(cfg, token, tokens, Upgrades::default(), metrics)
    }

    /// Builds the daemon's parts for an image that comes after `upgrades`, counting into
    /// `metrics` (its own, or, when this process takes its sessions back after a failed
    /// upgrade, the ones it counted into before).
    fn build(
        cfg: Arc<Config>,
        token: Option<String>,
        tokens: TokenStore,
        upgrades: Upgrades,
        metrics: Arc<Metrics>,
    ) -> Self {
        let auth = Arc::new(
            Auth::new(
                token,
                cfg.limits.failed_auth_per_minute,
                cfg.auth.allowed_origins.clone(),
            )
            .with_failure_delay(cfg.limits.failed_auth_delay_max)
            .with_sign_in(SignIn::new(
                cfg.auth.user_header.clone(),
                &cfg.auth.users,
                cfg.auth.default_scopes,
            ))
            .with_tokens(tokens),
        );
        let audit = crate::audit::Audit::new(&cfg.audit);
        let registry = Registry::new(cfg.clone(), auth.clone(), metrics.clone(), audit.clone());
        let shutdown = Shutdown::new();
        let execs = Execs::new(
            cfg.limits.max_execs,
            cfg.limits.max_lsp,
            cfg.session.kill_grace,
            shutdown.clone(),
            registry.journal().clone(),
            metrics.clone(),
        );
        let notifier = Notifier::new(&cfg.notify, metrics.clone(), shutdown.clone());
        notifier.follow(registry.transitions(), shutdown.clone());
        let state = Arc::new(AppState {
            registry,
            auth,
            connections: Connections::new(
                cfg.limits.max_connections_per_ip,
                cfg.proxy.max_connections,
            ),
            cfg,
            shutdown,
            tasks: TaskTracker::new(),
            execs,
            upgrades,
            metrics,
            notifier,
            audit,
        });
        Self {
            state,
            server: None,
            addr: None,
            listener: None,
            tls: None,
        }
    }

    /// Binds the configured address.
    pub async fn bind(cfg: &Config) -> std::io::Result<TcpListener> {
        TcpListener::bind(cfg.listen).await
    }

    /// The daemon the binary runs, serving: the sessions a previous image handed over,
    /// adopted on its listener, or a new daemon on the configured address.
    pub async fn start(
        cfg: Arc<Config>,
        token: Option<String>,
        handoff: Option<Handoff>,
    ) -> Result<Self, DaemonError> {
        if let Some(handoff) = handoff {
            return Self::adopt(cfg, token, handoff).map_err(DaemonError::Adopt);
        }
        let listener = Self::bind(&cfg)
            .await
            .map_err(|source| DaemonError::Listen {
                addr: cfg.listen,
                source,
            })?;
        let tokens = stored_tokens(&cfg).map_err(DaemonError::Tokens)?;
        let mut daemon = Self::with_tokens(cfg, token, tokens);
        daemon.serve(listener).map_err(DaemonError::Serve)?;
        Ok(daemon)
    }

    /// Serves until SIGTERM or SIGINT, then ends: SIGHUP re-reads the certificate, SIGUSR2
    /// replaces the binary in place ([`Daemon::live_upgrade`]) with `exe`, started with this
    /// process's arguments. Tells systemd each step.
    pub async fn run(mut self, mut signals: Signals, exe: &Path) -> Result<(), DaemonError> {
        systemd::ready();
        systemd::start_watchdog();
        tokio::spawn(crate::idle_pages::release_when_quiet(
            self.state.shutdown.clone(),
            self.state.metrics.clone(),
        ));
        let args = upgrade::own_args();
        let which = loop {
            match signals.next().await {
                Request::Stop(which) => break which,
                Request::ReloadTls => match self.reload_tls() {
                    Ok(true) => info!("TLS certificate and key reloaded"),
                    Ok(false) => info!("SIGHUP: nothing to reload (no [tls])"),
                    Err(e) => warn!("TLS reload failed, keeping the previous certificate: {e}"),
                },
                Request::Upgrade => self = self.live_upgrade(exe, &args).await?,
            }
        };
        info!(signal = which, sessions = self.sessions(), "shutting down");
        systemd::stopping();
        self.end().await;
        info!("bye");
        Ok(())
    }

    /// Starts accepting connections on `listener` (in a task of its own), over TLS when the
    /// configuration has `[tls]` (its files are read here: a missing file or a key that does
    /// not match the certificate is the error).
    pub fn serve(&mut self, listener: TcpListener) -> std::io::Result<SocketAddr> {
        let tls = match &self.state.cfg.tls {
            Some(files) => Some(http::tls::Tls::load(files).map_err(std::io::Error::other)?),
            None => None,
        };
        let addr = listener.local_addr()?;
        self.listener = Some(rustix::io::fcntl_dupfd_cloexec(&listener, 3)?);
        self.addr = Some(addr);
        let base = &self.state.cfg.server.base_path;
        let url = crate::attention::wiring::daemon_url(addr, tls.is_some(), base);
        self.state.registry.set_url(url);
        self.tls = tls.clone();
        self.server = Some(tokio::spawn(http::run(listener, self.state.clone(), tls)));
        let registry = Arc::downgrade(&self.state.registry);
        let live = move |id| registry.upgrade().is_some_and(|r| r.get(&id).is_some());
        let recordings = self.state.registry.recordings().clone();
        tokio::spawn(recordings.prune_daily(self.state.shutdown.clone(), live));
        let tokens = self.state.auth.tokens().clone();
        tokio::spawn(tokens.flush_every_minute(self.state.shutdown.clone()));
        Ok(addr)
    }

    /// Re-reads the TLS certificate and key (SIGHUP): new handshakes get the new pair, open
    /// connections keep theirs; on failure the old pair stays and the error says why. Without
    /// `[tls]`, nothing to do.
    pub fn reload_tls(&self) -> Result<bool, String> {
        match &self.tls {
            Some(tls) => tls.reload().map(|()| true),
            None => Ok(false),
        }
    }

    /// Whether it serves over its own TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The address it serves on, once serving.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The shared state every request handler sees.
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// What tells webhooks and the command of sessions' changes of state.
    pub fn notifier(&self) -> &Notifier {
        &self.state.notifier
    }

    /// Every session's changes of state, once per change: subscribe to hear each (what the
    /// notifier does). The journal records them too (`GET /api/events`).
    pub fn transitions(&self) -> &Arc<crate::attention::Transitions> {
        self.state.registry.transitions()
    }

    /// Live sessions.
    pub fn sessions(&self) -> usize {
        self.state.registry.len()
    }

    /// A live upgrade to `exe`, started with `args`: the new binary checks the configuration
    /// and the image format (`--check-config`), this image hands everything over and `execve`s
    /// it, and the new image adopts the sessions. Does not return when that works: the process
    /// is the new image. Returns the daemon that goes on otherwise: this one when the new
    /// binary refused, or the one that took the sessions back when the `execve` failed; each
    /// failure is reported by `/api/version`.
    pub async fn live_upgrade(self, exe: &Path, args: &[OsString]) -> Result<Self, DaemonError> {
        info!(sessions = self.sessions(), exe = %exe.display(), "live upgrade requested");
        // A signal from here on is handled after the upgrade (or its refusal), not lost.
        upgrade::hold_signals();
        systemd::reloading();
        if let Err(e) = upgrade::check(exe, args).await {
            upgrade::release_signals();
            warn!("live upgrade refused, going on as before: {e}");
            self.audit_upgrade(json!({"phase": "refused", "error": e.to_string()}));
            self.state.upgrades.failed(e.to_string());
            systemd::ready();
            return Ok(self);
        }
        let cfg = self.state.cfg.clone();
        let token = self.state.auth.token().map(str::to_owned);
        let metrics = self.state.metrics.clone();
        // Recorded before handing over: the new image appends after it, in the same file.
        let exe_shown = exe.display().to_string();
        let detail = json!({"phase": "begin", "sessions": self.sessions(), "exe": exe_shown});
        self.audit_upgrade(detail);
        let mut handoff = self.hand_over().await.map_err(DaemonError::HandOver)?;
        info!(
            sessions = handoff.image.sessions.len(),
            "handing over to the new image"
        );
        let failed = handoff.exec(exe, args);
        // Only reached when execve failed (or never ran): this image takes its own sessions
        // back, and the signals held since the request.
        upgrade::release_signals();
        tracing::error!("live upgrade failed, resuming: {failed}");
        handoff.last_error = Some((SystemTime::now(), failed.to_string()));
        // The same process goes on: so do its counters.
        let daemon =
            Self::adopt_counting(cfg, token, handoff, metrics).map_err(DaemonError::TakeBack)?;
        daemon.audit_upgrade(json!({"phase": "failed", "error": failed.to_string()}));
        systemd::ready();
        Ok(daemon)
    }

    /// Records a step of a live upgrade in the audit trail (asked for by a signal: nobody).
    fn audit_upgrade(&self, detail: serde_json::Value) {
        let event = crate::audit::Event::new("upgrade", &crate::audit::Actor::nobody());
        self.state.audit.record(event.with(detail));
    }

    /// Hands everything over for a live upgrade: stops accepting (connections wait in the
    /// backlog), tells every viewer to reconnect (close 1012) and gives them a moment to
    /// deliver what they typed, ends execs and event streams as a shutdown would, and freezes
    /// every session into the image. The programs run on, untouched.
    pub async fn hand_over(mut self) -> std::io::Result<Handoff> {
        use crate::upgrade::image::{Blobs, Image};
        let st = self.state.clone();
        let listener = self
            .listener
            .take()
            .ok_or_else(|| std::io::Error::other("the daemon is not serving"))?;
        st.registry.close_creation();
        st.registry.journal().seal();
        st.shutdown.cancel();
        // When tokens were last used, for the image that reads the file next.
        st.auth.tokens().flush_logged();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        let handles = st.registry.handles();
        futures_util::future::join_all(handles.iter().map(|h| h.detach_for_upgrade())).await;
        let left = async {
            let mut infos: Vec<_> = handles.iter().map(|h| h.watch_info()).collect();
            for info in &mut infos {
                let _ = info.wait_for(|i| i.viewers == 0).await;
            }
        };
        if tokio::time::timeout(DETACH_WAIT, left).await.is_err() {
            info!("some viewers did not answer the close in time");
        }
        let frozen = futures_util::future::join_all(handles.iter().map(|h| h.hand_over())).await;
        let limit = st.cfg.session.kill_grace + Duration::from_secs(3);
        if tokio::time::timeout(limit, st.execs.wait()).await.is_err() {
            warn!("some execs did not end in time");
        }
        st.registry.recordings().finish(RECORDERS_WAIT).await;
        st.tasks.close();
        let _ = tokio::time::timeout(Duration::from_millis(200), st.tasks.wait()).await;

        let mut blobs = Blobs::default();
        let mut sessions = Vec::new();
        let mut ptys = Vec::new();
        for f in frozen.into_iter().flatten() {
            let mut image = f.image;
            image.snapshot = f.snapshot.as_deref().map(|s| blobs.add(s));
            image.log = blobs.add(&f.log);
            image.input = blobs.add(&f.input);
            if let Some(pty) = f.pty {
                ptys.push((image.id, pty));
            }
            sessions.push(image);
        }
        sessions.sort_by_key(|s| s.num);
        let status = st.upgrades.status();
        let image = Image {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            upgrades: status.upgrades + 1,
            token: st.auth.token().map(str::to_owned),
            token_generated: false,
            listener_fd: -1,
            sessions,
            shares: st.auth.share_images(),
            journal: st.registry.journal().image(),
        };
        Ok(Handoff {
            image,
            blobs,
            listener,
            ptys,
            last_error: status.last_error,
        })
    }

    /// Builds the daemon from a handoff (a new image after `execve`, or this one when the
    /// `execve` failed) and serves on its listener: every session adopted, share links and
    /// lifecycle events taken over. A session that cannot be adopted is ended cleanly.
    pub fn adopt(
        cfg: Arc<Config>,
        token: Option<String>,
        handoff: Handoff,
    ) -> std::io::Result<Self> {
        Self::adopt_counting(cfg, token, handoff, Arc::new(Metrics::default()))
    }

    /// [`Daemon::adopt`], counting into `metrics`.
    fn adopt_counting(
        cfg: Arc<Config>,
        token: Option<String>,
        handoff: Handoff,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let Handoff {
            image,
            blobs,
            listener,
            ptys,
            last_error,
        } = handoff;
        let upgrades = Upgrades::new(image.upgrades, last_error);
        // Read again: the image before wrote them out as it handed over.
        let tokens = stored_tokens(&cfg)?;
        let mut daemon = Daemon::build(cfg.clone(), token, tokens, upgrades, metrics);
        let st = daemon.state.clone();
        let listener = std::net::TcpListener::from(listener);
        // Before the sessions: a program an adopted session restarts reaches this address.
        let url = crate::attention::wiring::daemon_url(
            listener.local_addr()?,
            cfg.tls.is_some(),
            &cfg.server.base_path,
        );
        st.registry.set_url(url);
        st.auth.restore_shares(&image.shares);
        st.registry.journal().restore(&image.journal);
        let mut ptys: std::collections::HashMap<uuid::Uuid, OwnedFd> = ptys.into_iter().collect();
        for s in &image.sessions {
            if let Err(e) = st.registry.adopt(s, &blobs, ptys.remove(&s.id)) {
                warn!(session = %s.id, "could not adopt the session, ending it: {e}");
                let one = crate::upgrade::image::Image {
                    sessions: vec![s.clone()],
                    ..Default::default()
                };
                // On a thread of its own: it waits out the grace period for the programs.
                let grace = cfg.session.kill_grace;
                std::thread::spawn(move || upgrade::abandon(&one, grace));
            }
        }
        listener.set_nonblocking(true)?;
        daemon.serve(TcpListener::from_std(listener)?)?;
        info!(
            sessions = daemon.sessions(),
            upgrades = image.upgrades,
            from = %image.version,
            "took over from the previous image"
        );
        daemon.audit_upgrade(json!({
            "phase": "adopted", "sessions": daemon.sessions(), "upgrades": image.upgrades,
            "from": image.version, "to": env!("CARGO_PKG_VERSION"),
        }));
        Ok(daemon)
    }

    /// Stops accepting, ends every session and every exec (SIGTERM, SIGKILL after the grace
    /// period), and gives open connections a moment to deliver their close frames.
    pub async fn end(mut self) {
        self.state.shutdown.cancel();
        self.state.auth.tokens().flush_logged();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        // Sessions and execs end together, each group given the same grace.
        let limit = self.state.cfg.session.kill_grace + Duration::from_secs(3);
        let sessions = self.state.registry.end_all(EndReason::Shutdown);
        let execs = self.state.execs.wait();
        let (sessions, execs) = tokio::join!(
            tokio::time::timeout(limit, sessions),
            tokio::time::timeout(limit, execs)
        );
        if sessions.is_err() {
            warn!("some sessions did not end in time");
        }
        if execs.is_err() {
            warn!("some execs did not end in time");
        }
        // Every session has ended: their recorders write their last events.
        self.state
            .registry
            .recordings()
            .finish(CONNECTION_DRAIN)
            .await;
        self.state.tasks.close();
        if tokio::time::timeout(CONNECTION_DRAIN, self.state.tasks.wait())
            .await
            .is_err()
        {
            info!("closing connections that did not finish");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_daemon_keeps_its_own_upgrade_status() {
        let cfg = Arc::new(crate::config::from_toml_str("", "test").expect("config"));
        let refused = Daemon::new(cfg.clone(), None);
        let other = Daemon::new(cfg, None);
        let refused = refused
            .live_upgrade(Path::new("/nonexistent/ptyhub"), &[])
            .await
            .expect("a refused upgrade goes on as before");
        let status = refused.state().upgrades.status();
        let why = status.last_error.map(|(_, why)| why).unwrap_or_default();
        assert!(
            why.starts_with("cannot run the new binary /nonexistent/ptyhub"),
            "{why}"
        );
        assert_eq!(status.upgrades, 0);
        assert!(other.state().upgrades.status().last_error.is_none());
    }
}
