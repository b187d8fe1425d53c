//! What the audit trail knows of each viewer: who it is (its user, or a guest, and its
//! credential) and when it last typed, so that typing is recorded once per spell: a viewer's
//! first key after [`TYPING_AUDIT_QUIET`] without one.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::audit::Actor;
use crate::session::events::{ViewerId, Who};

/// A viewer's key after this long without one is recorded as `typing` (its first key too).
/// Longer than presence's "is typing" spell: the trail says who typed into which session and
/// when they started, not each pause to think.
pub const TYPING_AUDIT_QUIET: Duration = Duration::from_secs(60);

/// Each viewer's identity and last key.
#[derive(Default)]
pub(in crate::session) struct Audited {
    viewers: HashMap<ViewerId, (Actor, Option<Instant>)>,
}

impl Audited {
    /// `viewer` joined as `who`.
    pub(in crate::session) fn join(&mut self, viewer: ViewerId, who: &Who) {
        let actor = Actor::viewer(who.user.as_deref(), &who.credential);
        self.viewers.insert(viewer, (actor, None));
    }

    /// `viewer` left.
    pub(in crate::session) fn leave(&mut self, viewer: ViewerId) {
        self.viewers.remove(&viewer);
    }

    /// Who `viewer` is, while it is here.
    pub(in crate::session) fn actor(&self, viewer: ViewerId) -> Option<&Actor> {
        self.viewers.get(&viewer).map(|(actor, _)| actor)
    }

    /// `viewer` typed at `now`: who it is, if this key starts a spell of typing.
    pub(in crate::session) fn typed(&mut self, viewer: ViewerId, now: Instant) -> Option<Actor> {
        let (actor, last) = self.viewers.get_mut(&viewer)?;
        let fresh = last.is_none_or(|t| now.duration_since(t) >= TYPING_AUDIT_QUIET);
        *last = Some(now);
        fresh.then(|| actor.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_of_each_spell_and_each_viewer() {
        let mut a = Audited::default();
        let who = Who {
            user: Some("alice".into()),
            credential: "daemon-token".into(),
        };
        a.join(1, &who);
        a.join(2, &Who::default());
        let t = Instant::now();
        assert_eq!(a.typed(1, t).map(|a| a.user), Some("alice".to_owned()));
        assert!(a.typed(1, t + Duration::from_secs(1)).is_none());
        assert_eq!(a.typed(2, t).map(|a| a.user), Some("guest".to_owned()));
        assert!(a
            .typed(1, t + Duration::from_secs(1) + TYPING_AUDIT_QUIET)
            .is_some());
        a.leave(1);
        assert!(a.typed(1, t).is_none() && a.actor(1).is_none());
    }
}
