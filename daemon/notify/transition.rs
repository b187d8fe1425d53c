//! What the notifier is told: one session's change of state ([`Transition`]), and the event
//! JSON it becomes (the `json` webhook's body and the command's stdin).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A session's state, as notifications and `[notify] on` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateName {
    /// The program is busy.
    Working,
    /// The program needs its user: a permission or a question prompt.
    Waiting,
    /// Done, at its prompt.
    Idle,
    /// The program has ended.
    Exited,
}

impl StateName {
    /// The name as written in the config and the event JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StateName::Working => "working",
            StateName::Waiting => "waiting",
            StateName::Idle => "idle",
            StateName::Exited => "exited",
        }
    }

    /// How a title says a session is in it: "is waiting", "has exited".
    pub(super) fn phrase(self) -> &'static str {
        match self {
            StateName::Working => "is working",
            StateName::Waiting => "is waiting",
            StateName::Idle => "is idle",
            StateName::Exited => "has exited",
        }
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
    pub from: Option<StateName>,
    /// The state it enters.
    pub to: StateName,
    /// Why, for people ("Claude wants to run: cargo test").
    pub reason: String,
    /// When it entered `to`.
    pub at: SystemTime,
    /// The session's page; `None`: made from `[notify] link` when that is set.
    pub url: Option<String>,
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
        format!("{num}{who} {}", self.to.phrase())
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
            from: Option<StateName>,
            state: StateName,
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
