//! The daemon's lifecycle events (docs/protocol.md section 14): a bounded ring of `state`, `exec`,
//! `rename`, `yolo` and `viewers` events with increasing ids, for `GET /api/events`, the
//! per-session watcher that turns a session's metadata changes into events, and the sessions'
//! changes of state (working, waiting, idle) as `state` events too.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{json, Value};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::session::{SessionHandle, SessionInfo};

/// Events kept: older ones are dropped (a reader resuming before them gets `reset`).
pub const KEPT: usize = 1000;

/// One lifecycle event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Increasing from 1 over the daemon's life.
    pub id: u64,
    /// `state`, `exec`, `rename`, `yolo` or `viewers`.
    pub kind: &'static str,
    /// The session it concerns (none for `exec`): share links see only their own.
    pub session: Option<Uuid>,
    /// The event's JSON object.
    pub data: Value,
}

/// Where a reader starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Since {
    /// These events, oldest first.
    Events(Vec<Event>),
    /// The id asked for is no longer kept: start over from the oldest kept one (`reset`).
    Reset {
        /// The oldest id still kept (or the next id, when none is).
        oldest: u64,
        /// Every event kept, oldest first.
        events: Vec<Event>,
    },
}

/// The ring and its readers' wake-up.
#[derive(Debug, Default)]
pub struct Journal {
    ring: Mutex<Ring>,
    grew: Notify,
}

#[derive(Debug, Default)]
struct Ring {
    events: VecDeque<Event>,
    /// The id of the next event (ids start at 1).
    next: u64,
    /// Set while a live upgrade hands over: sessions freezing are not ending, so what their
    /// watchers see then is not recorded.
    sealed: bool,
}

/// The kinds of event there are (an image's kinds are mapped back onto them).
const KINDS: [&str; 5] = ["state", "exec", "rename", "yolo", "viewers"];

/// RFC 3339 UTC time, second precision.
fn ts() -> String {
    crate::session::rfc3339(SystemTime::now())
}

impl Journal {
    /// An empty journal.
    pub fn new() -> Arc<Self> {
        Arc::new(Journal::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Each push completes before anything can panic: a poisoned lock is still sound.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an event; `data` gets its `ts`.
    pub fn push(&self, kind: &'static str, session: Option<Uuid>, mut data: Value) {
        if let Value::Object(obj) = &mut data {
            obj.insert("ts".into(), Value::String(ts()));
        }
        {
            let mut ring = self.lock();
            if ring.sealed {
                return;
            }
            ring.next = ring.next.max(1);
            let id = ring.next;
            ring.next += 1;
            if ring.events.len() == KEPT {
                ring.events.pop_front();
            }
            ring.events.push_back(Event {
                id,
                kind,
                session,
                data,
            });
        }
        self.grew.notify_waiters();
    }

    /// A session changed state (`created`, `exited`, `ended`).
    pub fn state(&self, info: &SessionInfo, state: &str) {
        let mut data = json!({
            "session": info.id.to_string(),
            "num": info.num,
            "state": state,
        });
        if state == "created" {
            data["created_by"] = json!(info.created_by);
        }
        if state == "exited" {
            data["exit_code"] = json!(info.exit_code);
            data["since"] = json!(info.state_since);
            data["since_ms"] = json!(info.state_since_ms);
            data["reason"] = json!(info.reason);
            data["source"] = json!(info.state_source.as_str());
        }
        self.push("state", Some(info.id), data);
    }

    /// A session entered a new state (`working`, `waiting`, `idle`): when, why, where it was
    /// learnt, and the state it left. (Entering `exited` is the `exited` event below.)
    pub fn transition(&self, change: &crate::attention::Transition) {
        let to = &change.to;
        let data = json!({
            "session": change.session.to_string(),
            "num": change.num,
            "state": to.state.as_str(),
            "from": change.from.as_str(),
            "since": crate::session::rfc3339(to.since),
            "since_ms": to.since_ms(),
            "reason": to.reason,
            "source": to.source.as_str(),
        });
        self.push("state", Some(change.session), data);
    }

    /// An exec finished.
    pub fn exec(&self, cmd: &str, exit_code: Option<i32>, duration_ms: u64) {
        let data = json!({"cmd": cmd, "exit_code": exit_code, "duration_ms": duration_ms});
        self.push("exec", None, data);
    }

    /// The id of the newest event (0 before the first).
    pub fn newest(&self) -> u64 {
        self.lock().next.saturating_sub(1)
    }

    /// The events after `after` (the last id a reader has; `None`: the newest `tail`).
    pub fn since(&self, after: Option<u64>, tail: usize) -> Since {
        let ring = self.lock();
        let oldest = ring.events.front().map_or(ring.next.max(1), |e| e.id);
        match after {
            None => {
                let skip = ring.events.len().saturating_sub(tail);
                Since::Events(ring.events.iter().skip(skip).cloned().collect())
            }
            // Next to the oldest kept, or none missed: continue right after it.
            Some(id) if id.saturating_add(1) >= oldest && id < ring.next.max(1) => {
                Since::Events(ring.events.iter().filter(|e| e.id > id).cloned().collect())
            }
            // Lost (dropped from the ring), or from before this daemon started.
            Some(_) => Since::Reset {
                oldest,
                events: ring.events.iter().cloned().collect(),
            },
        }
    }

    /// Resolves once an event newer than `last` exists.
    pub async fn wait_past(&self, last: u64) {
        loop {
            let grew = self.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            if self.lock().next > last + 1 {
                return;
            }
            grew.await;
        }
    }

    /// Follows `handle`'s metadata for as long as the session lives: `created` now, then
    /// `exited`, `rename`, `yolo` and `viewers` as they change, and `ended` last.
    pub fn watch(self: &Arc<Self>, handle: &SessionHandle) {
        self.state(&handle.info(), "created");
        self.watch_adopted(handle);
    }

    /// Stops recording events (a live upgrade hands over; see [`Ring::sealed`]).
    pub fn seal(&self) {
        self.lock().sealed = true;
    }

    /// The events, for a live upgrade's image.
    pub fn image(&self) -> crate::upgrade::image::JournalImage {
        let ring = self.lock();
        crate::upgrade::image::JournalImage {
            next: ring.next,
            events: ring
                .events
                .iter()
                .map(|e| crate::upgrade::image::EventImage {
                    id: e.id,
                    kind: e.kind.to_owned(),
                    session: e.session,
                    data: e.data.clone(),
                })
                .collect(),
        }
    }

    /// Goes on from a previous image's events: ids continue, so `Last-Event-ID` resumes.
    pub fn restore(&self, image: &crate::upgrade::image::JournalImage) {
        let mut ring = self.lock();
        ring.events = image
            .events
            .iter()
            .rev()
            .take(KEPT)
            .rev()
            .filter_map(|e| {
                let kind = KINDS.into_iter().find(|k| *k == e.kind)?;
                Some(Event {
                    id: e.id,
                    kind,
                    session: e.session,
                    data: e.data.clone(),
                })
            })
            .collect();
        let after_last = ring.events.back().map_or(1, |e| e.id + 1);
        ring.next = image.next.max(after_last);
    }

    /// Follows a session adopted in a live upgrade (its creation was told before).
    pub fn watch_adopted(self: &Arc<Self>, handle: &SessionHandle) {
        let journal = self.clone();
        let mut info = handle.watch_info();
        let ended = handle.ended();
        let mut last = info.borrow_and_update().clone();
        tokio::spawn(async move {
            loop {
                let gone = tokio::select! {
                    changed = info.changed() => changed.is_err(),
                    _ = ended.cancelled() => true,
                };
                let now = info.borrow_and_update().clone();
                journal.diff(&last, &now);
                last = now;
                if gone {
                    journal.state(&last, "ended");
                    return;
                }
            }
        });
    }

    /// The events between two versions of a session's metadata.
    fn diff(&self, old: &SessionInfo, new: &SessionInfo) {
        let session = Some(new.id);
        let id = new.id.to_string();
        if old.alive && !new.alive {
            self.state(new, "exited");
        }
        if old.name != new.name {
            self.push("rename", session, json!({"session": id, "name": new.name}));
        }
        if old.yolo_mode != new.yolo_mode {
            self.push("yolo", session, json!({"session": id, "on": new.yolo_mode}));
        }
        if old.viewers != new.viewers {
            self.push(
                "viewers",
                session,
                json!({"session": id, "viewers": new.viewers}),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &Since) -> Vec<u64> {
        match s {
            Since::Events(e) | Since::Reset { events: e, .. } => e.iter().map(|e| e.id).collect(),
        }
    }

    #[test]
    fn resumes_right_after_an_id_and_resets_a_lost_one() {
        let j = Journal::default();
        assert_eq!(j.since(None, 10), Since::Events(vec![]));
        assert_eq!(j.since(Some(0), 10), Since::Events(vec![]));
        for i in 0..KEPT + 5 {
            j.push("exec", None, json!({"i": i}));
        }
        // Ids 6..=1005 are kept.
        assert_eq!(ids(&j.since(None, 3)), [1003, 1004, 1005]);
        assert_eq!(ids(&j.since(Some(1003), 100)), [1004, 1005]);
        assert_eq!(ids(&j.since(Some(1005), 100)), Vec::<u64>::new());
        // 5 is just before the oldest kept: nothing was missed.
        assert!(matches!(j.since(Some(5), 1), Since::Events(e) if e.len() == KEPT));
        match j.since(Some(4), 1) {
            Since::Reset { oldest, events } => {
                assert_eq!(oldest, 6);
                assert_eq!(events.len(), KEPT);
            }
            other => panic!("{other:?}"),
        }
        // An id from a daemon that ran before this one.
        assert!(matches!(j.since(Some(99_999), 1), Since::Reset { .. }));
        // The largest id a client can send (Schemathesis did) is no overflow.
        assert!(matches!(j.since(Some(u64::MAX), 1), Since::Reset { .. }));
        let e = &match j.since(None, 1) {
            Since::Events(e) => e,
            other => panic!("{other:?}"),
        }[0];
        assert!(e.data["ts"].as_str().is_some_and(|t| t.ends_with('Z')));
    }
}
