//! The daemon as one object: built from a configuration and a token, served on a listener,
//! and ended (every session signalled, every connection given time to close), or handed over
//! to a new image of itself (a live upgrade) and adopted there. The binary only parses flags
//! and calls it; tests hold it directly.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::auth::Auth;
use crate::config::Config;
use crate::exec::Execs;
use crate::http::connections::Connections;
use crate::http::{self, AppState};
use crate::registry::Registry;
use crate::session::EndReason;
use crate::shutdown::Shutdown;

/// How long open connections get to finish after every session has ended.
const CONNECTION_DRAIN: Duration = Duration::from_secs(2);

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

impl Daemon {
    /// Builds the daemon's parts; `token: None` turns authentication off.
    pub fn new(cfg: Arc<Config>, token: Option<String>) -> Self {
        let auth = Arc::new(Auth::new(
            token,
            cfg.limits.failed_auth_per_minute,
            cfg.auth.allowed_origins.clone(),
        ));
        let registry = Registry::new(cfg.clone(), auth.clone());
        let shutdown = Shutdown::new();
        let execs = Execs::new(
            cfg.limits.max_execs,
            cfg.session.kill_grace,
            shutdown.clone(),
            registry.journal().clone(),
        );
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
        self.tls = tls.clone();
        self.server = Some(tokio::spawn(http::run(listener, self.state.clone(), tls)));
        let registry = Arc::downgrade(&self.state.registry);
        let live = move |id| registry.upgrade().is_some_and(|r| r.get(&id).is_some());
        let recordings = self.state.registry.recordings().clone();
        tokio::spawn(recordings.prune_daily(self.state.shutdown.clone(), live));
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

    /// Live sessions.
    pub fn sessions(&self) -> usize {
        self.state.registry.len()
    }

    /// Hands everything over for a live upgrade: stops accepting (connections wait in the
    /// backlog), tells every viewer to reconnect (close 1012) and gives them a moment to
    /// deliver what they typed, ends execs and event streams as a shutdown would, and freezes
    /// every session into the image. The programs run on, untouched.
    pub async fn hand_over(mut self) -> std::io::Result<crate::upgrade::Handoff> {
        use crate::upgrade::image::{Blobs, Image};
        let st = self.state.clone();
        let listener = self
            .listener
            .take()
            .ok_or_else(|| std::io::Error::other("the daemon is not serving"))?;
        st.registry.close_creation();
        st.registry.journal().seal();
        st.shutdown.cancel();
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
        let status = crate::upgrade::status();
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
        Ok(crate::upgrade::Handoff {
            image,
            blobs,
            listener,
            ptys,
        })
    }

    /// Builds the daemon from a handoff (a new image after `execve`, or this one when the
    /// `execve` failed) and serves on its listener: every session adopted, share links and
    /// lifecycle events taken over. A session that cannot be adopted is ended cleanly.
    pub fn adopt(
        cfg: Arc<Config>,
        token: Option<String>,
        handoff: crate::upgrade::Handoff,
    ) -> std::io::Result<Self> {
        let crate::upgrade::Handoff {
            image,
            blobs,
            listener,
            ptys,
        } = handoff;
        let mut daemon = Daemon::new(cfg.clone(), token);
        let st = daemon.state.clone();
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
                std::thread::spawn(move || crate::upgrade::abandon(&one, grace));
            }
        }
        crate::upgrade::image_started(image.upgrades);
        let listener = std::net::TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        daemon.serve(TcpListener::from_std(listener)?)?;
        info!(
            sessions = daemon.sessions(),
            upgrades = image.upgrades,
            from = %image.version,
            "took over from the previous image"
        );
        Ok(daemon)
    }

    /// Stops accepting, ends every session and every exec (SIGTERM, SIGKILL after the grace
    /// period), and gives open connections a moment to deliver their close frames.
    pub async fn end(mut self) {
        self.state.shutdown.cancel();
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
