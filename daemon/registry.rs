//! Every live session by uuid: lookup, create-if-absent, and removal when a session ends.

use std::sync::{Arc, Weak};

use dashmap::DashMap;
use uuid::Uuid;

use crate::auth::Auth;
use crate::config::Config;
use crate::session::{self, CreateError, CreateSpec, EndReason, SessionHandle, SessionInfo};

/// Session uuid → handle.
pub struct Registry {
    sessions: DashMap<Uuid, SessionHandle>,
    cfg: Arc<Config>,
    /// Share links die with their session.
    auth: Arc<Auth>,
    /// Lets a session remove itself when it ends without keeping the registry alive.
    me: Weak<Registry>,
    /// Set once shutdown has begun: no more sessions are created.
    closing: std::sync::atomic::AtomicBool,
}

/// Whether `get_or_create` found the session or made it.
pub enum Found {
    /// It already existed.
    Existing(SessionHandle),
    /// It was created now.
    Created(SessionHandle),
}

impl Found {
    /// The handle either way.
    pub fn handle(self) -> SessionHandle {
        match self {
            Found::Existing(h) | Found::Created(h) => h,
        }
    }
}

impl Registry {
    /// An empty registry.
    pub fn new(cfg: Arc<Config>, auth: Arc<Auth>) -> Arc<Self> {
        Arc::new_cyclic(|me| Registry {
            sessions: DashMap::new(),
            cfg,
            auth,
            me: me.clone(),
            closing: Default::default(),
        })
    }

    /// The daemon's configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.cfg
    }

    /// The session with this id.
    pub fn get(&self, id: &Uuid) -> Option<SessionHandle> {
        self.sessions.get(id).map(|h| h.clone())
    }

    /// Creates a session; `Err` if the id is taken is reported as `Found::Existing`.
    pub fn get_or_create(&self, spec: CreateSpec) -> Result<Found, CreateError> {
        if self.closing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(CreateError::ShuttingDown);
        }
        let max = self.cfg.limits.max_sessions;
        // Checked before taking the entry: `len` locks every shard, the entry holds one.
        // Racing creators can overshoot by a few; the bound still holds well enough.
        if !self.sessions.contains_key(&spec.id) && self.sessions.len() >= max {
            return Err(CreateError::TooMany(max));
        }
        // The entry lock makes two racing creators of one uuid start one program.
        match self.sessions.entry(spec.id) {
            dashmap::Entry::Occupied(e) => Ok(Found::Existing(e.get().clone())),
            dashmap::Entry::Vacant(e) => {
                let me = self.me.clone();
                let handle = session::start(
                    self.cfg.clone(),
                    spec,
                    Box::new(move |id| {
                        if let Some(registry) = me.upgrade() {
                            registry.sessions.remove(&id);
                            registry.auth.forget_session(id);
                        }
                    }),
                )?;
                e.insert(handle.clone());
                Ok(Found::Created(handle))
            }
        }
    }

    /// Every session's metadata, oldest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let mut all: Vec<SessionInfo> = self.sessions.iter().map(|h| h.info()).collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        all
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether there are no sessions.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Stops creating sessions, then ends every session and waits for all of them.
    pub async fn end_all(&self, reason: EndReason) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // A creation that was already past the check may still land: go again, a few times.
        for _ in 0..3 {
            if self.sessions.is_empty() {
                break;
            }
            let handles: Vec<SessionHandle> = self.sessions.iter().map(|h| h.clone()).collect();
            let ends = handles.iter().map(|h| h.end(reason));
            futures_util::future::join_all(ends).await;
        }
    }
}
