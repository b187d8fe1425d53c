//! The daemon as one object: built from a configuration and a token, served on a listener,
//! and ended (every session signalled, every connection given time to close). The binary only
//! parses flags and calls it; tests and, later, a live upgrade hold it directly.

use std::net::SocketAddr;
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
}

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
            connections: Connections::new(cfg.limits.max_connections_per_ip),
            cfg,
            shutdown,
            tasks: TaskTracker::new(),
            execs,
        });
        Self {
            state,
            server: None,
            addr: None,
        }
    }

    /// Binds the configured address.
    pub async fn bind(cfg: &Config) -> std::io::Result<TcpListener> {
        TcpListener::bind(cfg.listen).await
    }

    /// Starts accepting connections on `listener` (in a task of its own).
    pub fn serve(&mut self, listener: TcpListener) -> std::io::Result<SocketAddr> {
        let addr = listener.local_addr()?;
        self.addr = Some(addr);
        self.server = Some(tokio::spawn(http::run(listener, self.state.clone())));
        let registry = Arc::downgrade(&self.state.registry);
        let live = move |id| registry.upgrade().is_some_and(|r| r.get(&id).is_some());
        let recordings = self.state.registry.recordings().clone();
        tokio::spawn(recordings.prune_daily(self.state.shutdown.clone(), live));
        Ok(addr)
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
