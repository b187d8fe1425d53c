//! The session's viewers: the size policy applied, and what is sent to all or one of them.

use tracing::warn;

use super::actor::Session;
use super::*;

impl Session {
    /// The one permission check: whether `viewer`'s role allows `action`.
    pub(super) fn permit(&self, viewer: ViewerId, action: Action) -> Result<(), Refusal> {
        match self.viewers.get(&viewer) {
            Some(v) if !v.role.may(action) => Err(Refusal::ReadOnly(action)),
            _ => Ok(()),
        }
    }

    /// [`Self::permit`], telling the viewer when it is refused.
    pub(super) fn permitted(&self, viewer: ViewerId, action: Action) -> bool {
        match self.permit(viewer, action) {
            Ok(()) => true,
            Err(refusal) => {
                self.refuse(viewer, refusal);
                false
            }
        }
    }

    /// Recomputes the session size; returns whether it changed (status already sent).
    pub(super) fn apply_size(&mut self) -> bool {
        let writers = self.viewers.values().filter(|v| v.role == Role::Writer);
        let new = size::session_size(writers.filter_map(|v| v.size), self.size);
        if new == self.size {
            return false;
        }
        self.size = new;
        if let Some(screen) = &self.screen {
            screen.resize(new.0, new.1);
        }
        // Here, not in the writer task: a key right after a resize goes straight to the PTY
        // from this actor, and the program must see the new size first.
        if let Some(pty) = &self.proc.reader {
            if let Err(e) = pty.resize(new.0, new.1) {
                tracing::debug!(session = %self.id, "pty resize failed: {e}");
            }
        }
        self.broadcast_status();
        true
    }

    /// Tells everyone who is here; `typing`: the viewer whose keystrokes prompted it.
    pub(super) fn broadcast_presence(&mut self, typing: Option<ViewerId>) {
        let info = self.presence.info(typing);
        self.broadcast(ViewerEvent::Presence(info));
        // The session list shows the names too.
        self.publish_info();
    }

    pub(super) fn broadcast_status(&mut self) {
        // The REST view first: a viewer that reads the API on seeing the status sees it too.
        self.publish_info();
        let info = self.status();
        let offset = self.log.head();
        self.broadcast(ViewerEvent::Status { info, offset });
    }

    pub(super) fn broadcast(&self, event: ViewerEvent) {
        if let Some(tap) = &self.tap {
            tap.event(&event);
        }
        for (id, viewer) in &self.viewers {
            if !viewer.events.push(event.clone()) {
                // Its writer has been stuck for long: rather than buffer for it without
                // bound, it is closed (its task sees the overrun) and may reconnect.
                warn!(session = %self.id, viewer = id, "viewer event queue full: closing it");
            }
        }
    }

    /// Tells one viewer why what it asked was refused.
    pub(super) fn refuse(&self, viewer: ViewerId, refusal: Refusal) {
        if let Some(v) = self.viewers.get(&viewer) {
            v.events.push(ViewerEvent::Refused(refusal));
        }
    }
}
