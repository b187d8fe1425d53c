//! The audit trail: who created, renamed, shared and ended sessions, ran commands and language
//! servers, uploaded files, typed into a session, signed in and was refused; one JSON line per
//! event in `audit.jsonl` (`trail.rs`, bounded and rotated), each also logged with the target
//! `audit`, and read back for `GET /api/audit` (`query.rs`).
//!
//! [`Audit`] is made once per daemon and handed to whatever records: the HTTP side (its
//! handlers and the guard), the sessions (renames, uploads, typing, a program's own exit),
//! exec and language servers. Recording is one short write under a mutex; a failing disk is
//! logged once (the lines still reach the log) and the daemon goes on.

mod event;
mod logins;
mod query;
mod trail;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tracing::{error, info};

pub use event::{credential_of, timestamp, Actor, Event, GUEST, NOBODY};
pub use logins::QUIET as LOGIN_QUIET;
pub use query::{instant, Query, DEFAULT_LIMIT, INSTANT_PATTERN, MAX_LIMIT};
pub use trail::FILE_NAME;

use crate::auth::Access;
use crate::config::AuditConfig;

/// Longest line written, bytes: a longer event has its detail's strings and lists shortened.
pub const MAX_LINE: usize = 16 * 1024;

/// The daemon's audit trail.
pub struct Audit {
    trail: trail::Trail,
    logins: logins::Logins,
    /// Whether the last write failed (its error was logged; the next success says so).
    failing: AtomicBool,
    /// Lines that could not be written since the last success (they were logged).
    lost: AtomicU64,
}

impl Audit {
    /// The trail `cfg` describes; its file is opened at the first event.
    pub fn new(cfg: &AuditConfig) -> Arc<Self> {
        Arc::new(Self {
            trail: trail::Trail::new(cfg.dir.clone(), cfg.max_bytes, cfg.files),
            logins: logins::Logins::default(),
            failing: AtomicBool::new(false),
            lost: AtomicU64::new(0),
        })
    }

    /// Where the current file is.
    pub fn path(&self) -> PathBuf {
        self.trail.path()
    }

    /// Records `event`: a line in the file and in the log.
    pub fn record(&self, event: Event) {
        let line = line_of(event);
        info!(target: "audit", "{line}");
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        match self.trail.append(&bytes) {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    let lost = self.lost.swap(0, Ordering::Relaxed);
                    info!(
                        path = %self.trail.path().display(),
                        lost, "audit trail writable again; the lines missing from it are in the log"
                    );
                }
            }
            Err(e) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    error!(
                        path = %self.trail.path().display(),
                        "cannot write the audit trail ({e}): its lines go to the log only \
                         until it can"
                    );
                }
            }
        }
    }

    /// Records `action` by `access` from `peer`, about `session`, with `detail`: the short
    /// form for a handler.
    pub fn by(
        &self,
        access: &Access,
        peer: SocketAddr,
        action: &str,
        session: Option<uuid::Uuid>,
        detail: Option<Value>,
    ) {
        let mut event = Event::new(action, &Actor::of(access, peer));
        event.session = session;
        event.detail = detail;
        self.record(event);
    }

    /// An authenticated request from `access`: recorded as a `login` when it is the user's
    /// first after [`LOGIN_QUIET`] without one (by name and credential). A session's
    /// capability token is a program, not a person: never.
    pub fn seen(&self, access: &Access, peer: SocketAddr) {
        if matches!(access, Access::StateToken(_)) {
            return;
        }
        let mut actor = Actor::holding(access);
        if self
            .logins
            .seen(&actor.user, &actor.credential, Instant::now())
        {
            actor.peer = peer.to_string();
            self.record(Event::new("login", &actor));
        }
    }

    /// A refused request: its status, why, its method and path (never its query string),
    /// and who, if the caller was known.
    pub fn refused(
        &self,
        actor: Option<Actor>,
        peer: SocketAddr,
        status: u16,
        reason: &str,
        method: &str,
        path: &str,
    ) {
        let actor = actor.unwrap_or_else(|| Actor {
            peer: peer.to_string(),
            ..Actor::nobody()
        });
        let detail = json!({"status": status, "reason": reason, "method": method, "path": path});
        self.record(Event::new("refused", &actor).with(detail));
    }

    /// `actor` created the session `info` describes: its name, assistant, command and working
    /// directory.
    pub fn created(&self, actor: &Actor, info: &crate::session::SessionInfo) {
        let detail = json!({
            "name": info.name, "assistant": info.assistant, "command": info.command,
            "cwd": info.work_dir,
        });
        self.record(Event::new("session.create", actor).on(info.id).with(detail));
    }

    /// The events `query` asks for, newest first, from the current and the rotated files.
    /// Blocking: call it off the runtime.
    pub fn read(&self, query: &Query) -> std::io::Result<Vec<Event>> {
        let mut found = Vec::new();
        for (file, len) in self.trail.files_now() {
            if found.len() >= query.limit {
                break;
            }
            let bytes = trail::read_prefix(file, len)?;
            query.scan(&bytes, &mut found);
        }
        Ok(found)
    }
}

/// `event` as one JSON line (no newline), at most [`MAX_LINE`] bytes.
fn line_of(mut event: Event) -> String {
    let line = serde_json::to_string(&event).unwrap_or_default();
    if line.len() <= MAX_LINE {
        return line;
    }
    if let Some(detail) = event.detail.as_mut() {
        shorten(detail);
        detail["truncated"] = Value::Bool(true);
    }
    let line = serde_json::to_string(&event).unwrap_or_default();
    if line.len() <= MAX_LINE {
        return line;
    }
    event.detail = Some(json!({"truncated": true}));
    // The remaining fields are the daemon's own and short; a user name is bounded by auth.
    serde_json::to_string(&event).unwrap_or_default()
}

/// Cuts every string of `v` to 256 characters and every list to 64 items.
fn shorten(v: &mut Value) {
    match v {
        Value::String(s) if s.chars().count() > 256 => {
            *s = s.chars().take(256).chain(std::iter::once('…')).collect();
        }
        Value::Array(items) => {
            items.truncate(64);
            items.iter_mut().for_each(shorten);
        }
        Value::Object(map) => map.values_mut().for_each(shorten),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit(dir: &std::path::Path, max_bytes: u64) -> Arc<Audit> {
        Audit::new(&AuditConfig {
            dir: dir.to_owned(),
            max_bytes,
            files: 3,
        })
    }

    #[test]
    fn a_long_detail_is_shortened_to_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let audit = audit(dir.path(), 1 << 20);
        let argv: Vec<String> = (0..1000)
            .map(|i| format!("{i}{}", "x".repeat(500)))
            .collect();
        audit.record(Event::new("exec", &Actor::nobody()).with(json!({ "argv": argv })));
        let text = std::fs::read_to_string(audit.path()).unwrap();
        assert!(text.len() <= MAX_LINE + 1, "{}", text.len());
        let event: Event = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(event.detail.unwrap()["truncated"], true);
    }

    #[test]
    fn reads_across_rotations_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let audit = audit(dir.path(), 4096);
        for i in 0..100 {
            audit.record(Event::new("typing", &Actor::nobody()).with(json!({ "i": i })));
        }
        assert!(dir.path().join("audit.jsonl.1").exists());
        let q = Query {
            limit: 1000,
            ..Query::default()
        };
        let found = audit.read(&q).unwrap();
        let is: Vec<i64> = found
            .iter()
            .map(|e| e.detail.as_ref().unwrap()["i"].as_i64().unwrap())
            .collect();
        assert!(!is.is_empty());
        assert_eq!(is[0], 99);
        assert!(is.windows(2).all(|w| w[0] == w[1] + 1), "{is:?}");
    }

    #[test]
    fn a_failing_disk_does_not_stop_recording() {
        let dir = tempfile::tempdir().unwrap();
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, b"").unwrap();
        // A directory that is a file: every open fails.
        let audit = audit(&blocked, 4096);
        audit.record(Event::new("login", &Actor::nobody()));
        audit.record(Event::new("login", &Actor::nobody()));
        assert_eq!(audit.lost.load(Ordering::Relaxed), 2);
        assert!(audit.read(&Query::default()).unwrap().is_empty());
    }
}
