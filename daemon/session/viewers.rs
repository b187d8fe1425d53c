//! The session's viewers: who is connected with which role and size (each a `Member`, in
//! `viewers/member.rs`), the size that follows from theirs, who typed last, who is here by
//! name (presence), and the hand-out of events and (in `viewers/fanout.rs`) output to them;
//! who each is for the audit trail, in `viewers/audited.rs`.

mod audited;
mod fanout;
mod member;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::warn;
use uuid::Uuid;

use super::events::{EndReason, LiveOutput, PresenceInfo, Role, ViewerEvent, ViewerId, Who};
use super::presence::{Presence, Typed};
use super::refusal::{Action, Refusal};
use super::size;
use super::viewer_queue::EventSender;
use crate::term::queries::Query;
use audited::Audited;
pub use audited::TYPING_AUDIT_QUIET;
use fanout::Fanout;
pub use fanout::{FANOUT_PACE, FANOUT_PACED_FROM};
use member::Member;

/// The session's viewers.
pub(super) struct Viewers {
    members: HashMap<ViewerId, Member>,
    /// The session's size: the least over the writers' (see `size.rs`).
    size: (u16, u16),
    /// The presence numbers of the writers whose size the session's is, ascending.
    sized_by: Vec<u32>,
    /// The viewer that typed last, and when: its echo goes to it first.
    typist: Option<(ViewerId, Instant)>,
    /// Who is here, by name, role and device, and who typed last.
    presence: Presence,
    /// The latest chunk's hand-out to the viewers other than the typist, done a slice at a
    /// time between commands.
    fanout: Fanout,
    /// Who each is for the audit trail, and when it last typed.
    audited: Audited,
}

impl Viewers {
    /// No viewer yet; the session is `size` (rows, cols) until its writers say otherwise.
    pub(super) fn new(size: (u16, u16)) -> Self {
        Self {
            members: HashMap::new(),
            size,
            sized_by: Vec::new(),
            typist: None,
            presence: Presence::default(),
            fanout: Fanout::default(),
            audited: Audited::default(),
        }
    }

    /// How many are connected.
    pub(super) fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether none is.
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether `viewer` is connected.
    pub(super) fn contains(&self, viewer: ViewerId) -> bool {
        self.members.contains_key(&viewer)
    }

    /// The session's size, (rows, cols).
    pub(super) fn size(&self) -> (u16, u16) {
        self.size
    }

    /// Adds `viewer`: `events` receives everything addressed to it, `live` its output.
    pub(super) fn join(
        &mut self,
        viewer: ViewerId,
        role: Role,
        who: Who,
        events: EventSender,
        live: Arc<dyn LiveOutput>,
    ) {
        self.members.insert(viewer, Member::new(events, live, role));
        self.audited.join(viewer, &who);
        self.presence.join(viewer, who, role == Role::Writer);
    }

    /// Removes `viewer`; whether it was here.
    pub(super) fn leave(&mut self, viewer: ViewerId) -> bool {
        if self.members.remove(&viewer).is_none() {
            return false;
        }
        self.presence.leave(viewer);
        self.audited.leave(viewer);
        true
    }

    /// The one permission check: whether `viewer`'s role allows `action`. A viewer that is not
    /// here (it left, its request still queued) has no role and may do nothing: refused as a
    /// read-only one would be, which nobody hears (it is gone).
    pub(super) fn permit(&self, viewer: ViewerId, action: Action) -> Result<(), Refusal> {
        match self.members.get(&viewer) {
            Some(v) if v.role.may(action) => Ok(()),
            _ => Err(Refusal::ReadOnly(action)),
        }
    }

    /// Tells one viewer why what it asked was refused.
    pub(super) fn refuse(&self, viewer: ViewerId, refusal: Refusal) {
        if let Some(v) = self.members.get(&viewer) {
            v.events.push(ViewerEvent::Refused(refusal));
        }
    }

    /// Sends `event` to every viewer of session `session`.
    pub(super) fn broadcast(&self, event: ViewerEvent, session: Uuid) {
        for (id, viewer) in &self.members {
            if !viewer.events.push(event.clone()) {
                // Its writer has been stuck for long: rather than buffer for it without
                // bound, it is closed (its task sees the overrun) and may reconnect.
                warn!(%session, viewer = id, "viewer event queue full: closing it");
            }
        }
    }

    /// Sends `event` to every viewer that may write.
    pub(super) fn tell_writers(&self, event: ViewerEvent) {
        for viewer in self.members.values().filter(|v| v.role == Role::Writer) {
            viewer.events.push(event.clone());
        }
    }

    /// Tells every viewer to close for `reason`; they stay members until they leave.
    pub(super) fn ask_to_close(&self, reason: EndReason) {
        for viewer in self.members.values() {
            viewer.events.push(ViewerEvent::Close(reason));
        }
    }

    /// Tells every viewer to close for `reason`, and lets them all go.
    pub(super) fn close_all(&mut self, reason: EndReason) {
        self.ask_to_close(reason);
        self.members.clear();
    }

    /// `viewer` sent its size; whether it is here (and the size may have changed).
    pub(super) fn set_size(&mut self, viewer: ViewerId, rows: u16, cols: u16) -> bool {
        match self.members.get_mut(&viewer) {
            Some(member) => {
                member.size = Some(size::clamp(rows, cols));
                true
            }
            None => false,
        }
    }

    /// `viewer`'s size stops counting; whether it counted.
    pub(super) fn follow(&mut self, viewer: ViewerId) -> bool {
        self.members
            .get_mut(&viewer)
            .is_some_and(|member| member.size.take().is_some())
    }

    /// `viewer`'s size becomes the only one that counts.
    pub(super) fn take_size(&mut self, viewer: ViewerId, rows: u16, cols: u16) {
        for (id, member) in self.members.iter_mut() {
            member.size = (*id == viewer).then(|| size::clamp(rows, cols));
        }
    }

    /// Recomputes the session's size from the writers'; the new size, if it changed.
    pub(super) fn settle_size(&mut self) -> Option<(u16, u16)> {
        let writers = self.members.values().filter(|v| v.role == Role::Writer);
        let new = size::session_size(writers.filter_map(|v| v.size), self.size);
        if new == self.size {
            return None;
        }
        self.size = new;
        Some(new)
    }

    /// Recomputes who holds the session's size: the writers whose sent rows or cols is the
    /// session's (a size clamped up to 1 included). Whether that changed.
    pub(super) fn settle_holders(&mut self) -> bool {
        let (rows, cols) = self.size;
        let mut holders: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| m.role == Role::Writer)
            .filter(|(_, m)| m.size.is_some_and(|(r, c)| r == rows || c == cols))
            .filter_map(|(id, _)| self.presence.num(*id))
            .collect();
        holders.sort_unstable();
        if holders == self.sized_by {
            return false;
        }
        self.sized_by = holders;
        true
    }

    /// The presence numbers of the writers whose size the session's is (see
    /// [`Viewers::settle_holders`]).
    pub(super) fn sized_by(&self) -> &[u32] {
        &self.sized_by
    }

    /// Sets `viewer`'s name (from a chat line or a `presence` request); whether a presence
    /// event should go out now.
    pub(super) fn set_name(&mut self, viewer: ViewerId, name: Option<String>) -> bool {
        self.presence.set_name(viewer, name)
    }

    /// Sets `viewer`'s device kind; whether a presence event should go out now.
    pub(super) fn set_device(&mut self, viewer: ViewerId, device: Option<&'static str>) -> bool {
        self.presence.set_device(viewer, device)
    }

    /// The presence event: everyone; `typing`: the viewer whose keystrokes prompted it.
    pub(super) fn presence(&mut self, typing: Option<ViewerId>) -> Arc<PresenceInfo> {
        self.presence.info(typing)
    }

    /// When a presence change kept back by the rate limit is due to go out, if one is.
    pub(super) fn presence_held_until(&self) -> Option<tokio::time::Instant> {
        self.presence.held_until()
    }

    /// The names of the people here, for the session list.
    pub(super) fn people(&self) -> Vec<String> {
        self.presence.names()
    }

    /// Who `viewer` is (a user, or a guest), while it is here.
    pub(super) fn who(&self, viewer: ViewerId) -> Option<Who> {
        self.presence.who(viewer)
    }

    /// How `viewer` is named for people ("alice", "Bob (guest)", "guest 2"), while it is here.
    pub(super) fn label(&self, viewer: ViewerId) -> Option<String> {
        self.presence.label(viewer)
    }

    /// `viewer` typed `data`: it becomes the typist, and the replies its terminal owed are
    /// taken out. What is left for the program (none when it was only replies, or the viewer
    /// is not here), and what the keystroke means for presence.
    pub(super) fn typed(&mut self, viewer: ViewerId, data: Bytes) -> Option<(Bytes, Typed)> {
        let member = self.members.get_mut(&viewer)?;
        let now = Instant::now();
        let previous = self.typist.replace((viewer, now));
        let data = if member.expected.is_empty() {
            data
        } else {
            let kept = member.expected.filter(&data, now);
            if kept.is_empty() {
                return None;
            }
            Bytes::from(kept)
        };
        // After the filter: a terminal's answer to a query is not someone typing.
        let typing = self.presence.typed(viewer, previous, now);
        Some((data, typing))
    }

    /// Who `viewer` is for the audit trail, while it is here.
    pub(super) fn actor(&self, viewer: ViewerId) -> Option<&crate::audit::Actor> {
        self.audited.actor(viewer)
    }

    /// `viewer` typed: who it is, if this key starts a spell of typing the audit trail
    /// records ([`TYPING_AUDIT_QUIET`]).
    pub(super) fn starts_typing(&mut self, viewer: ViewerId) -> Option<crate::audit::Actor> {
        self.audited.typed(viewer, Instant::now())
    }

    /// Output with `queries` in it is about to be published: everyone who will see it owes
    /// their replies.
    pub(super) fn expect_replies(&mut self, queries: Vec<Query>) {
        if queries.is_empty() {
            return;
        }
        let now = Instant::now();
        for query in queries {
            for viewer in self.members.values_mut() {
                viewer.expected.expect(query, now);
            }
        }
    }
}

/// The hand-out of output (see `viewers/fanout.rs`).
impl Viewers {
    /// Hands `chunk`, just published at log offset `start`, to the typist at once (if one
    /// typed within the window); that viewer, if any.
    pub(super) fn push_to_typist(&self, start: u64, chunk: &[u8]) -> Option<ViewerId> {
        fanout::push_to_typist(self.typist, &self.members, start, chunk)
    }

    /// The lowest log offset a viewer still needs (0 when one's cannot be told now;
    /// `u64::MAX` without viewers).
    pub(super) fn lowest_offset(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.live.offset().unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Queues `chunk`, just published at log offset `start`, for everyone but `typist`.
    pub(super) fn queue_output(&mut self, start: u64, chunk: Bytes, typist: Option<ViewerId>) {
        self.fanout.queue(&mut self.members, start, chunk, typist);
    }

    /// When the pending output's next slice may go (`None`: after a yield).
    pub(super) fn fanout_due(&self) -> Option<Instant> {
        self.fanout.due()
    }

    /// Whether some viewers are still owed output.
    pub(super) fn fanout_pending(&self) -> bool {
        self.fanout.pending()
    }

    /// Hands the pending output to the next slice of viewers, stopping early once
    /// `input_waiting` says a command has come.
    pub(super) fn fan_out_slice(&mut self, input_waiting: impl Fn() -> bool) {
        self.fanout.hand_out(&mut self.members, input_waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, Refusal, Viewers};

    /// Only a member acts: a request that outlived its viewer's leave (an upload, a signal)
    /// is refused, whatever the role it joined with.
    #[test]
    fn a_viewer_that_is_not_here_may_do_nothing() {
        let viewers = Viewers::new((24, 80));
        for action in [
            Action::Input,
            Action::Upload,
            Action::Signal,
            Action::Rename,
        ] {
            assert_eq!(viewers.permit(7, action), Err(Refusal::ReadOnly(action)));
        }
    }
}
