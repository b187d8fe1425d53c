//! A session's state as every dialect that tells it spells it (docs/protocol.md sections 2 and
//! 11): the same fields in the browser dialect's `status` and `state` messages and in the
//! multiplexed dialect's `open` and `state` messages, as in the REST session object.

use serde::Serialize;

use crate::attention::{Choice, SessionState, Source, State};
use crate::session::SessionInfo;

/// The state fields of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateFields {
    /// `working`, `waiting`, `idle` or `exited`.
    pub state: State,
    /// When the session entered it, RFC 3339 UTC.
    pub state_since: String,
    /// The same, milliseconds since the Unix epoch.
    pub state_since_ms: u64,
    /// Why, for people.
    pub reason: String,
    /// `hook`, `screen`, `terminal` or `exit`.
    pub state_source: Source,
    /// Quick replies a waiting screen offers (keys as a terminal sends them).
    pub choices: Vec<Choice>,
}

impl From<&SessionState> for StateFields {
    fn from(s: &SessionState) -> Self {
        StateFields {
            state: s.state,
            state_since: crate::session::rfc3339(s.since),
            state_since_ms: s.since_ms(),
            reason: s.reason.clone(),
            state_source: s.source,
            choices: s.choices.clone(),
        }
    }
}

impl From<&SessionInfo> for StateFields {
    fn from(s: &SessionInfo) -> Self {
        StateFields {
            state: s.state,
            state_since: s.state_since.clone(),
            state_since_ms: s.state_since_ms,
            reason: s.reason.clone(),
            state_source: s.state_source,
            choices: s.choices.clone(),
        }
    }
}
