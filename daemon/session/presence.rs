//! Who is in a session: each viewer's number ("viewer 3"), who it is (a user's verified name,
//! or a guest and the display name it picked), role and device kind, and who typed last; sent to the viewers as a `presence` event (its types are in
//! `events.rs`) on join, leave, a name or device change, a viewer's first keystroke after a
//! quiet spell and every [`TYPING_QUIET`] while it keeps typing, rate-limited.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::chat::validate_chat;
use super::events::{Person, PresenceInfo, ViewerId, Who};
use crate::config::LimitsConfig;

/// Keystrokes after this much quiet from the same viewer say "is typing" again; so does a
/// viewer that keeps typing this long after it was last said (clients show it a little
/// longer, so "is typing" stays while the person types).
pub const TYPING_QUIET: Duration = Duration::from_secs(2);
/// At most one presence event per this much time for typing and for each viewer's own
/// changes: a change within it is kept and goes out with the next event.
pub const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// A device kind as a client says it; anything else is unknown.
pub const DEVICES: [&str; 3] = ["desktop", "tablet", "phone"];

/// The session's presence state (owned by the actor).
#[derive(Default)]
pub(super) struct Presence {
    people: HashMap<ViewerId, (Person, Option<Instant>)>,
    /// Joining order.
    order: Vec<ViewerId>,
    last_typing_event: Option<Instant>,
    /// The typist the last typing event named, and when.
    announced: Option<(ViewerId, Instant)>,
    /// Each viewer's last keystroke: one after [`TYPING_QUIET`] starts a spell of typing.
    last_key: HashMap<ViewerId, Instant>,
    /// Who each viewer is, as it joined (its user and credential).
    who: HashMap<ViewerId, Who>,
    /// When a change kept back by [`MIN_INTERVAL`] is due to go out, if one is: it goes then
    /// even if nothing else happens (a guest's name given right after its device kind).
    held: Option<Instant>,
}

/// What a keystroke means for presence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Typed {
    /// A "typing" event should go out now.
    pub(super) event: bool,
    /// The viewer starts typing after a quiet spell of its own (a recording marks it).
    pub(super) started: bool,
}

impl Presence {
    /// A viewer joined: a user is named by its user name from the start, a guest once it
    /// picks a display name.
    pub(super) fn join(&mut self, viewer: ViewerId, who: Who, writer: bool) {
        let mut num = 1;
        while self.people.values().any(|(p, _)| p.num == num) {
            num += 1;
        }
        self.who.insert(viewer, who.clone());
        let person = Person {
            viewer,
            num,
            name: who.user.clone(),
            user: who.user,
            writer,
            device: None,
        };
        self.people.insert(viewer, (person, None));
        self.order.push(viewer);
    }

    /// A viewer left; whether it was here.
    pub(super) fn leave(&mut self, viewer: ViewerId) -> bool {
        self.order.retain(|v| *v != viewer);
        self.last_key.remove(&viewer);
        self.who.remove(&viewer);
        self.people.remove(&viewer).is_some()
    }

    /// Sets a guest's display name (from a chat line or a `presence` request); whether an
    /// event should go out now. A user keeps its user name.
    pub(super) fn set_name(&mut self, viewer: ViewerId, name: Option<String>) -> bool {
        self.change(viewer, |p| {
            let changed = p.user.is_none() && p.name != name;
            if !changed {
                return false;
            }
            p.name = name;
            changed
        })
    }

    /// Sets a viewer's device kind; whether an event should go out now.
    pub(super) fn set_device(&mut self, viewer: ViewerId, device: Option<&'static str>) -> bool {
        self.change(viewer, |p| {
            let changed = p.device != device;
            p.device = device;
            changed
        })
    }

    fn change(&mut self, viewer: ViewerId, f: impl FnOnce(&mut Person) -> bool) -> bool {
        let Some((person, last)) = self.people.get_mut(&viewer) else {
            return false;
        };
        if !f(person) {
            return false;
        }
        let now = Instant::now();
        if let Some(t) = last.filter(|t| now.duration_since(*t) < MIN_INTERVAL) {
            let due = t + MIN_INTERVAL;
            self.held = Some(self.held.map_or(due, |h| h.min(due)));
            return false;
        }
        *last = Some(now);
        true
    }

    /// When a kept-back change is due to go out (see [`Presence::info`]).
    pub(super) fn held_until(&self) -> Option<Instant> {
        self.held
    }

    /// A keystroke from `viewer`; `previous` is the last typist and when it typed.
    pub(super) fn typed(
        &mut self,
        viewer: ViewerId,
        previous: Option<(ViewerId, Instant)>,
        now: Instant,
    ) -> Typed {
        if !self.people.contains_key(&viewer) {
            return Typed::default();
        }
        let started = self
            .last_key
            .insert(viewer, now)
            .is_none_or(|t| now.duration_since(t) >= TYPING_QUIET);
        let no_event = Typed {
            event: false,
            started,
        };
        let fresh =
            previous.is_none_or(|(v, t)| v != viewer || now.duration_since(t) >= TYPING_QUIET);
        let still = self
            .announced
            .is_some_and(|(v, t)| v == viewer && now.duration_since(t) >= TYPING_QUIET);
        if !(fresh || still) {
            return no_event;
        }
        if self
            .last_typing_event
            .is_some_and(|t| now.duration_since(t) < MIN_INTERVAL)
        {
            return no_event;
        }
        self.last_typing_event = Some(now);
        self.announced = Some((viewer, now));
        Typed {
            event: true,
            started,
        }
    }

    /// The event to send: it carries every change kept back until now.
    pub(super) fn info(&mut self, typing: Option<ViewerId>) -> Arc<PresenceInfo> {
        self.held = None;
        let people = self
            .order
            .iter()
            .filter_map(|v| self.people.get(v).map(|(p, _)| p.clone()))
            .collect();
        Arc::new(PresenceInfo { people, typing })
    }

    /// `viewer`'s number ("viewer 3"), while it is here.
    pub(super) fn num(&self, viewer: ViewerId) -> Option<u32> {
        self.people.get(&viewer).map(|(p, _)| p.num)
    }

    /// Who `viewer` is, while it is here.
    pub(super) fn who(&self, viewer: ViewerId) -> Option<Who> {
        self.who.get(&viewer).cloned()
    }

    /// How `viewer` is named for people (the session list, a recording's markers), while it
    /// is here: see [`label`].
    pub(super) fn label(&self, viewer: ViewerId) -> Option<String> {
        self.people.get(&viewer).map(|(p, _)| label(p))
    }

    /// The names of the people here, for the session list, in joining order (see [`label`]).
    pub(super) fn names(&self) -> Vec<String> {
        self.order
            .iter()
            .filter_map(|v| self.people.get(v))
            .map(|(p, _)| label(p))
            .collect()
    }
}

/// A person as people read it: a user by its name; a guest as "NAME (guest)", or "guest N"
/// before it picked a name. A guest calling itself a user's name never reads as that user.
pub fn label(p: &Person) -> String {
    match (&p.user, &p.name) {
        (Some(user), _) => user.clone(),
        (None, Some(name)) => format!("{name} (guest)"),
        (None, None) => format!("guest {}", p.num),
    }
}

/// A `presence` request's name, checked as a chat name: trimmed, 1–32 characters; empty
/// clears it.
pub fn validate_presence_name(name: &str, limits: &LimitsConfig) -> Result<Option<String>, String> {
    if name.trim().is_empty() {
        return Ok(None);
    }
    validate_chat(name, "-", limits).map(|(n, _)| Some(n))
}

/// A device kind as sent: one of [`DEVICES`], else unknown.
pub fn device_kind(device: &str) -> Option<&'static str> {
    DEVICES.iter().copied().find(|d| *d == device)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{device_kind, Presence, Who, TYPING_QUIET};

    /// A change the rate limit keeps back is not lost: it is due half a second after the
    /// viewer's last one, and the next event (which carries it) clears it.
    #[test]
    fn a_change_kept_back_is_due_later() {
        let mut p = Presence::default();
        p.join(1, Who::default(), true);
        assert!(
            p.set_device(1, Some("desktop")),
            "the first change goes out"
        );
        assert_eq!(p.held_until(), None);
        assert!(!p.set_name(1, Some("Sam".into())), "too soon: kept back");
        let due = p.held_until().expect("due later");
        assert!(due > Instant::now() && due <= Instant::now() + super::MIN_INTERVAL);
        let info = p.info(None);
        assert_eq!(info.people[0].name.as_deref(), Some("Sam"));
        assert_eq!(p.held_until(), None, "sent with the event");
    }

    #[test]
    fn numbers_are_the_smallest_free() {
        let mut p = Presence::default();
        p.join(10, Who::default(), true);
        p.join(11, Who::default(), false);
        p.join(12, Who::default(), true);
        assert!(p.leave(11));
        p.join(13, Who::default(), true);
        let nums: Vec<u32> = p.info(None).people.iter().map(|x| x.num).collect();
        assert_eq!(nums, vec![1, 3, 2]);
        assert_eq!(p.names(), vec!["guest 1", "guest 3", "guest 2"]);
    }

    #[test]
    fn typing_is_told_after_quiet_and_rate_limited() {
        let mut p = Presence::default();
        p.join(1, Who::default(), true);
        p.join(2, Who::default(), true);
        let t0 = Instant::now();
        assert!(p.typed(1, None, t0).event);
        // Still typing: no new event...
        assert!(
            !p.typed(1, Some((1, t0)), t0 + Duration::from_millis(900))
                .event
        );
        // Another typist, but too soon after the last event.
        assert!(
            !p.typed(2, Some((1, t0)), t0 + Duration::from_millis(100))
                .event
        );
        assert!(
            p.typed(2, Some((1, t0)), t0 + Duration::from_millis(600))
                .event
        );
        // Back after a quiet spell.
        let later = t0 + TYPING_QUIET + Duration::from_millis(600);
        assert!(p.typed(2, Some((2, t0)), later).event);
        // Typing on without a pause: told again once TYPING_QUIET has passed since the last
        // event about it, not sooner.
        let key = |ms| later + Duration::from_millis(ms);
        assert!(!p.typed(2, Some((2, key(1500))), key(1700)).event);
        assert!(p.typed(2, Some((2, key(1900))), key(2000)).event);
        assert!(!p.typed(2, Some((2, key(2000))), key(2100)).event);
        // Someone not (or no longer) here.
        assert!(!p.typed(9, None, later + TYPING_QUIET).event);
    }

    #[test]
    fn typing_starts_after_the_typists_own_quiet() {
        let mut p = Presence::default();
        p.join(1, Who::default(), true);
        p.join(2, Who::default(), true);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(p.typed(1, None, t0).started);
        assert!(!p.typed(1, Some((1, t0)), at(500)).started);
        // Another typist in between does not make 1's next key a start...
        assert!(p.typed(2, Some((1, at(500))), at(600)).started);
        assert!(!p.typed(1, Some((2, at(600))), at(700)).started);
        // ...its own quiet spell does, even when no event may go out.
        let late = at(700) + TYPING_QUIET;
        assert!(p.typed(1, Some((1, at(700))), late).started);
        assert!(!p.typed(1, Some((1, late)), late).started);
    }

    #[test]
    fn own_changes_are_rate_limited_but_kept() {
        let mut p = Presence::default();
        p.join(1, Who::default(), true);
        p.join(2, Who::default(), true);
        assert!(p.set_name(1, Some("Alice".into())));
        assert!(
            !p.set_name(1, Some("Alicia".into())),
            "too soon: kept, not sent"
        );
        assert_eq!(p.names(), vec!["Alicia (guest)", "guest 2"]);
        assert!(!p.set_name(2, None), "no change");
        assert!(p.set_device(2, Some("phone")));
        // A user is named by its user name, and keeps it.
        let alice = Who {
            user: Some("alice".into()),
            credential: "token:abc".into(),
        };
        p.join(3, alice.clone(), true);
        assert!(!p.set_name(3, Some("mallory".into())));
        assert_eq!(p.who(3), Some(alice));
        assert_eq!(p.label(3).as_deref(), Some("alice"));
        assert_eq!(p.names(), vec!["Alicia (guest)", "guest 2", "alice"]);
        assert_eq!(device_kind("phone"), Some("phone"));
        assert_eq!(device_kind("toaster"), None);
    }
}
