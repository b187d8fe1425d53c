//! Every live session by uuid and by number: lookup, create-if-absent, and removal when a
//! session ends.

use std::sync::{Arc, Mutex, Weak};

use dashmap::DashMap;
use uuid::Uuid;

use crate::attention::Transitions;
use crate::auth::Auth;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::session::{
    self, CreateError, CreateSpec, EndReason, RecentKeys, SessionHandle, SessionInfo, StateLinks,
};

/// How many session numbers there are: 1 to 255, so a number fits the one-byte tag of the
/// multiplexed dialect. Sessions past them have no number and are reached by uuid.
pub const MAX_NUM: usize = u8::MAX as usize;

/// Session uuid → handle.
pub struct Registry {
    sessions: DashMap<Uuid, SessionHandle>,
    /// Which numbers are taken, and by which session.
    nums: Mutex<Numbers>,
    cfg: Arc<Config>,
    /// Share links die with their session.
    auth: Arc<Auth>,
    /// Lets a session remove itself when it ends without keeping the registry alive.
    me: Weak<Registry>,
    /// Set once shutdown has begun: no more sessions are created.
    closing: std::sync::atomic::AtomicBool,
    /// Announces each session created, for connections that carry every session.
    created: tokio::sync::broadcast::Sender<Uuid>,
    /// Lifecycle events of every session (and of execs).
    journal: Arc<crate::journal::Journal>,
    /// Every session's recording.
    recordings: Arc<crate::record::Recordings>,
    /// The latest keys typed into this daemon's sessions, shared by all of them (a session
    /// printing a lot yields to a typist elsewhere).
    recent_keys: Arc<RecentKeys>,
    /// The daemon's counters, handed to every session and recorder.
    metrics: Arc<Metrics>,
    /// The audit trail, handed to every session.
    audit: Arc<crate::audit::Audit>,
    /// Every session's changes of state (to the journal and the notifier).
    transitions: Arc<Transitions>,
    /// How a session's program reaches this daemon (`PTYHUB_URL`), once it serves.
    url: std::sync::OnceLock<String>,
    /// The `ptyhub` binary agents' hooks run.
    ptyhub: Mutex<std::path::PathBuf>,
}

/// The session numbers in use. A number is taken before its session starts and given back
/// after the session has left `sessions`, so it also counts the sessions being created: the
/// session limit is checked against it exactly, however many creators race.
struct Numbers {
    /// `by_num[n - 1]`: the session numbered `n`.
    by_num: [Option<Uuid>; MAX_NUM],
    /// Sessions (being) created while every number was taken.
    unnumbered: std::collections::HashSet<Uuid>,
    /// How many sessions there are, numbered or not.
    used: usize,
}

impl Numbers {
    /// Counts `id` in, if the session limit `max` allows one more, with the smallest free
    /// number; with none if all 255 are taken.
    fn take(&mut self, id: Uuid, max: usize) -> Result<Option<u8>, CreateError> {
        if self.used >= max {
            return Err(CreateError::TooMany(max));
        }
        self.used += 1;
        match self.by_num.iter().position(Option::is_none) {
            Some(free) => {
                self.by_num[free] = Some(id);
                // `free` < 255, so the number is 1..=255.
                Ok(Some(free as u8 + 1))
            }
            None => {
                self.unnumbered.insert(id);
                Ok(None)
            }
        }
    }

    /// Counts `id` in with number `num` (a session adopted in a live upgrade keeps its number,
    /// or its lack of one).
    fn take_exact(&mut self, num: Option<u8>, id: Uuid) -> Result<(), CreateError> {
        match num {
            Some(num) => {
                let slot = usize::from(num)
                    .checked_sub(1)
                    .and_then(|i| self.by_num.get_mut(i))
                    .filter(|slot| slot.is_none())
                    .ok_or(CreateError::NoFreeNumber(MAX_NUM))?;
                *slot = Some(id);
            }
            None => {
                self.unnumbered.insert(id);
            }
        }
        self.used += 1;
        Ok(())
    }

    /// Counts `id` out and gives `num` back, if `id` still holds it.
    fn free(&mut self, num: Option<u8>, id: Uuid) {
        let held = match num {
            Some(num) => usize::from(num)
                .checked_sub(1)
                .and_then(|i| self.by_num.get_mut(i))
                .filter(|slot| **slot == Some(id))
                .map(|slot| *slot = None)
                .is_some(),
            None => self.unnumbered.remove(&id),
        };
        if held {
            self.used -= 1;
        }
    }

    fn get(&self, num: u8) -> Option<Uuid> {
        usize::from(num)
            .checked_sub(1)
            .and_then(|i| self.by_num.get(i).copied().flatten())
    }
}

/// Announcements a slow listener may miss before it is told it lagged (it then lists again).
const CREATED_BACKLOG: usize = 64;

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

/// Why a session id from a path or a message names no session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Neither a uuid nor a number from 1 to 255.
    #[error("{0:?} is not a UUID or a session number (1 to 255)")]
    BadId(String),
    /// A well-formed number that no session has now.
    #[error("no such session")]
    NoSuchNumber(u8),
}

/// A session id as written in a path or a message: the uuid, or the number (decimal digits
/// only, 1 to 255; a uuid is never that short, so the two cannot be confused).
pub fn parse_session_id(id: &str) -> Result<SessionId, ResolveError> {
    let bad = || ResolveError::BadId(id.to_owned());
    if !id.is_empty() && id.len() <= 3 && id.bytes().all(|b| b.is_ascii_digit()) {
        return match id.parse::<u8>() {
            Ok(num) if num >= 1 => Ok(SessionId::Num(num)),
            _ => Err(bad()),
        };
    }
    Uuid::parse_str(id).map(SessionId::Uuid).map_err(|_| bad())
}

/// A session id as written: see [`parse_session_id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionId {
    /// The session's uuid (it may not exist yet: a uuid can name a session to create).
    Uuid(Uuid),
    /// The session's number.
    Num(u8),
}

impl Registry {
    /// An empty registry whose sessions and recorders count into `metrics`, and record what
    /// people do in them in `audit`.
    pub fn new(
        cfg: Arc<Config>,
        auth: Arc<Auth>,
        metrics: Arc<Metrics>,
        audit: Arc<crate::audit::Audit>,
    ) -> Arc<Self> {
        let journal = crate::journal::Journal::new();
        Arc::new_cyclic(|me| Registry {
            sessions: DashMap::new(),
            nums: Mutex::new(Numbers {
                by_num: [None; MAX_NUM],
                unnumbered: Default::default(),
                used: 0,
            }),
            auth,
            me: me.clone(),
            closing: Default::default(),
            created: tokio::sync::broadcast::channel(CREATED_BACKLOG).0,
            transitions: Transitions::new(journal.clone()),
            journal,
            url: std::sync::OnceLock::new(),
            ptyhub: Mutex::new(running_binary()),
            recordings: crate::record::Recordings::new(cfg.recording.clone(), metrics.clone()),
            recent_keys: Arc::new(RecentKeys::new()),
            metrics,
            audit,
            cfg,
        })
    }

    /// The daemon's audit trail.
    pub fn audit(&self) -> &Arc<crate::audit::Audit> {
        &self.audit
    }

    /// The daemon's configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.cfg
    }

    /// Every session's changes of state: subscribe to hear each (the notifier does).
    pub fn transitions(&self) -> &Arc<Transitions> {
        &self.transitions
    }

    /// How sessions' programs reach this daemon (`PTYHUB_URL`): set once it serves.
    pub fn set_url(&self, url: String) {
        let _ = self.url.set(url);
    }

    /// The `ptyhub` binary agents' hooks run (by default the one running; a test running the
    /// daemon in its own process names the real binary).
    pub fn set_ptyhub(&self, path: std::path::PathBuf) {
        *self.ptyhub.lock().unwrap_or_else(|e| e.into_inner()) = path;
    }

    /// What a session is given to tell its state, with capability token `token` (registered
    /// with the auth until the session ends).
    fn links(&self, id: Uuid, token: String) -> StateLinks {
        self.auth.add_state_token(id, &token);
        let url = self.url.get().cloned().unwrap_or_else(|| {
            crate::attention::wiring::daemon_url(
                self.cfg.listen,
                self.cfg.tls.is_some(),
                &self.cfg.server.base_path,
            )
        });
        StateLinks {
            transitions: self.transitions.clone(),
            url,
            ptyhub: self
                .ptyhub
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            token,
            dir: crate::config::state_dir().join("sessions"),
            audit: self.audit.clone(),
        }
    }

    /// The session with this id.
    pub fn get(&self, id: &Uuid) -> Option<SessionHandle> {
        self.sessions.get(id).map(|h| h.clone())
    }

    /// The session with this number.
    pub fn get_by_num(&self, num: u8) -> Option<SessionHandle> {
        // The uuid is copied out first: the numbers' lock is never held with a shard's.
        let id = self.numbers().get(num)?;
        self.get(&id)
    }

    /// The uuid a path's or message's session id names: a uuid as it is (it may name a session
    /// still to be created), a number only when a session has it now.
    pub fn resolve(&self, id: &str) -> Result<Uuid, ResolveError> {
        match parse_session_id(id)? {
            SessionId::Uuid(id) => Ok(id),
            SessionId::Num(num) => self
                .get_by_num(num)
                .map(|h| h.id())
                .ok_or(ResolveError::NoSuchNumber(num)),
        }
    }

    fn numbers(&self) -> std::sync::MutexGuard<'_, Numbers> {
        // Every update completes before anything can panic: a poisoned table is still whole.
        self.nums.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates a session; `Err` if the id is taken is reported as `Found::Existing`.
    pub fn get_or_create(&self, spec: CreateSpec) -> Result<Found, CreateError> {
        if self.is_closing() {
            return Err(CreateError::ShuttingDown);
        }
        // The entry lock makes two racing creators of one uuid start one program.
        match self.sessions.entry(spec.id) {
            dashmap::Entry::Occupied(e) => Ok(Found::Existing(e.get().clone())),
            dashmap::Entry::Vacant(e) => {
                let id = spec.id;
                // Taken under the numbers' own lock, so racing creators of different uuids
                // never share a number, and the session limit holds exactly.
                let num = self.numbers().take(id, self.cfg.limits.max_sessions)?;
                let (keys, metrics) = (self.recent_keys.clone(), self.metrics.clone());
                let on_end = self.on_end(num);
                // Known to the auth before the program starts, so its first report passes.
                let links = self.links(id, crate::auth::generate_token());
                let cfg = self.cfg.clone();
                let started = session::start(cfg, spec, num, keys, metrics, links, on_end);
                match started {
                    Ok(handle) => {
                        // Before anyone else can reach it: the recording misses nothing.
                        self.recordings.start(&handle);
                        e.insert(handle.clone());
                        // No listener is fine: nobody carries every session right now.
                        let _ = self.created.send(handle.id());
                        self.journal.watch(&handle);
                        Ok(Found::Created(handle))
                    }
                    Err(err) => {
                        self.auth.forget_session(id);
                        self.numbers().free(num, id);
                        Err(err)
                    }
                }
            }
        }
    }

    /// What a session numbered `num` does when it ends: leaves the registry.
    fn on_end(&self, num: Option<u8>) -> session::OnEnd {
        let me = self.me.clone();
        Box::new(move |id| {
            if let Some(registry) = me.upgrade() {
                registry.sessions.remove(&id);
                registry.auth.forget_session(id);
                // Given back only once the uuid has left the map: a number never names two
                // sessions.
                registry.numbers().free(num, id);
            }
        })
    }

    /// Adopts a session handed over by a live upgrade: same uuid, number, screen and log; its
    /// recording goes on in the same file, its lifecycle events go on from the journal.
    pub fn adopt(
        &self,
        image: &crate::upgrade::image::SessionImage,
        blobs: &crate::upgrade::image::Blobs,
        pty: Option<std::os::fd::OwnedFd>,
    ) -> Result<SessionHandle, session::AdoptError> {
        let (id, num) = (image.id, image.num);
        self.numbers()
            .take_exact(num, id)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let (keys, metrics) = (self.recent_keys.clone(), self.metrics.clone());
        let on_end = self.on_end(num);
        // The token its program has in its environment (a new one for an image from before
        // tokens: no program has it, but the session's state can still be reported with the
        // daemon token).
        let token = image
            .attention
            .as_ref()
            .map(|a| a.token.clone())
            .filter(|t| crate::auth::valid_token(t))
            .unwrap_or_else(crate::auth::generate_token);
        let links = self.links(id, token);
        let cfg = self.cfg.clone();
        let adopted = session::adopt(cfg, image, blobs, pty, keys, metrics, links, on_end);
        let handle = match adopted {
            Ok(handle) => handle,
            Err(e) => {
                self.auth.forget_session(id);
                self.numbers().free(num, id);
                return Err(e);
            }
        };
        let since_start = std::time::SystemTime::now()
            .duration_since(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(image.created_unix_ms),
            )
            .unwrap_or_default();
        self.recordings
            .resume(&handle, since_start, image.log_start + image.log.len);
        self.sessions.insert(id, handle.clone());
        self.journal.watch_adopted(&handle);
        Ok(handle)
    }

    /// Every session's handle.
    pub fn handles(&self) -> Vec<SessionHandle> {
        self.sessions.iter().map(|h| h.clone()).collect()
    }

    /// Refuses every session creation from now on (shutdown, or a live upgrade).
    pub fn close_creation(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether creation was refused for good: the daemon is stopping, or handing its sessions
    /// to a new image (a live upgrade).
    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The lifecycle events.
    pub fn journal(&self) -> &Arc<crate::journal::Journal> {
        &self.journal
    }

    /// The recordings.
    pub fn recordings(&self) -> &Arc<crate::record::Recordings> {
        &self.recordings
    }

    /// Announces every session created from now on (its uuid, once it can be looked up).
    pub fn subscribe_created(&self) -> tokio::sync::broadcast::Receiver<Uuid> {
        self.created.subscribe()
    }

    /// Every session's metadata, oldest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let mut all: Vec<SessionInfo> = self
            .sessions
            .iter()
            .map(|h| {
                let mut info = SessionInfo::clone(&h.info());
                // The log's head moves with every byte of output; the info is published only
                // on changes of state, so read the head now.
                info.output_bytes = h.log().head();
                info
            })
            .collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.num.cmp(&b.num)));
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

/// The binary this process runs, for agents' hooks to run: its path as the kernel has it,
/// without the " (deleted)" a binary replaced on disk (an upgrade installed over it) gets.
fn running_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|_| "ptyhub".into());
    match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
        Some(path) => path.into(),
        None => exe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_parse_as_uuid_or_number() {
        let id = Uuid::new_v4();
        assert_eq!(parse_session_id(&id.to_string()), Ok(SessionId::Uuid(id)));
        assert_eq!(
            parse_session_id(&id.simple().to_string()),
            Ok(SessionId::Uuid(id))
        );
        assert_eq!(parse_session_id("1"), Ok(SessionId::Num(1)));
        assert_eq!(parse_session_id("255"), Ok(SessionId::Num(255)));
        assert_eq!(parse_session_id("007"), Ok(SessionId::Num(7)));
        for bad in [
            "", "0", "000", "256", "999", "1000", "-1", "+1", " 1", "1.0", "xyz",
        ] {
            assert!(
                matches!(parse_session_id(bad), Err(ResolveError::BadId(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn numbers_are_the_smallest_free_and_bounded() {
        let mut n = Numbers {
            by_num: [None; MAX_NUM],
            unnumbered: Default::default(),
            used: 0,
        };
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
        assert_eq!(n.take(ids[0], 10).unwrap(), Some(1));
        assert_eq!(n.take(ids[1], 10).unwrap(), Some(2));
        assert_eq!(n.take(ids[2], 10).unwrap(), Some(3));
        n.free(Some(2), ids[1]);
        assert_eq!(n.get(2), None);
        assert_eq!(
            n.take(ids[3], 10).unwrap(),
            Some(2),
            "a freed number is reused first"
        );
        // Freeing on behalf of a session that no longer holds the number changes nothing.
        n.free(Some(2), ids[1]);
        assert_eq!(n.get(2), Some(ids[3]));
        n.free(Some(0), ids[0]);
        n.free(None, ids[0]);
        assert_eq!(n.used, 3);
        assert!(matches!(
            n.take(Uuid::new_v4(), 3),
            Err(CreateError::TooMany(3))
        ));
        for _ in 3..MAX_NUM {
            assert!(n.take(Uuid::new_v4(), 100_000).unwrap().is_some());
        }
        assert!(n.get(255).is_some());
        // Past 255, sessions have no number, and still count against the limit.
        let extra: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
        for id in &extra {
            assert_eq!(n.take(*id, 258).unwrap(), None);
        }
        assert!(matches!(
            n.take(Uuid::new_v4(), 258),
            Err(CreateError::TooMany(258))
        ));
        n.free(None, extra[1]);
        n.free(None, extra[1]);
        assert_eq!(n.used, 257);
        // A number freed goes to the next session created.
        n.free(Some(7), n.get(7).unwrap());
        assert_eq!(n.take(Uuid::new_v4(), 258).unwrap(), Some(7));
        assert_eq!(n.take(Uuid::new_v4(), 258).unwrap(), None);
    }
}
