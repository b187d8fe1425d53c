//! What the notifier is told: one session's change of state ([`Transition`]), and the event
//! JSON it becomes (the `json` webhook's body and the command's stdin).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use uuid::Uuid;

use crate::attention::{self, State};

/// How a title says a session is in `state`: "is waiting", "has exited".
fn phrase(state: State) -> &'static str {
    match state {
        State::Working => "is working",
        State::Waiting => "is waiting",
        State::Idle => "is idle",
        State::Exited => "has exited",
    }
}

/// One session's change of state, as the session tells the notifier.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The session.
    pub session: Uuid,
    /// Its number, when it has one.
    pub num: Option<u8>,
    /// Its user-given name, possibly empty.
    pub name: String,
    /// Its assistant's key in the config.
    pub assistant: String,
    /// The state it leaves; `None` for its first.
    pub from: Option<State>,
    /// The state it enters.
    pub to: State,
    /// Why, for people ("Claude wants to run: cargo test").
    pub reason: String,
    /// When it entered `to`.
    pub at: SystemTime,
    /// The session's page; `None`: made from `[notify] link` when that is set.
    pub url: Option<String>,
}

impl From<&attention::Transition> for Transition {
    /// What the notifier is told of a change the session made (its page URL from `[notify]
    /// link`).
    fn from(t: &attention::Transition) -> Self {
        Transition {
            session: t.session,
            num: t.num,
            name: t.name.clone(),
            assistant: t.assistant.clone(),
            from: Some(t.from),
            to: t.to.state,
            reason: t.to.reason.clone(),
            at: t.to.since,
            url: None,
        }
    }
}

impl Transition {
    /// "#3 build (claude) has exited": what the session is and what became of it.
    pub(super) fn title(&self) -> String {
        let num = self.num.map_or(String::new(), |n| format!("#{n} "));
        let who = if self.name.is_empty() {
            self.assistant.clone()
        } else {
            format!("{} ({})", self.name, self.assistant)
        };
        format!("{num}{who} {}", phrase(self.to))
    }

    /// The reason, or the title when there is none (a message is never empty).
    pub(super) fn message(&self) -> String {
        if self.reason.is_empty() {
            self.title()
        } else {
            self.reason.clone()
        }
    }

    /// The event JSON: the `json` webhook's body and the command's stdin. The names are those
    /// of the `state` event of `GET /api/events`, so one script can read both.
    pub(super) fn to_json(&self) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Event<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            session: Uuid,
            num: Option<u8>,
            name: &'a str,
            assistant: &'a str,
            from: Option<State>,
            state: State,
            reason: &'a str,
            since: String,
            since_ms: u64,
            url: Option<&'a str>,
        }
        let since_ms = self
            .at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let event = Event {
            kind: "state",
            session: self.session,
            num: self.num,
            name: &self.name,
            assistant: &self.assistant,
            from: self.from,
            state: self.to,
            reason: &self.reason,
            since: crate::session::rfc3339(self.at),
            since_ms,
            url: self.url.as_deref(),
        };
        // A struct of strings, numbers and options: serialising it cannot fail.
        serde_json::to_vec(&event).unwrap_or_default()
    }
}
