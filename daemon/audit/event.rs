//! One audit event as it is written (a JSON line) and read back, and who did it: the actor's
//! name, the credential it came with and its address.

use std::net::SocketAddr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::auth::Access;

/// What the trail writes for "nobody" or "not known": a program's own exit, a signal.
pub const NOBODY: &str = "-";

/// Who did something: a user's name (`guest` for a share link), how they came in, and from
/// where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The user's name, `guest` for a share link's visitor, `-` for the daemon itself.
    pub user: String,
    /// `daemon-token`, `token:ID`, `proxy`, `share:ID`, or `-`.
    pub credential: String,
    /// The client's address (behind a trusted proxy, the forwarded one), or `-`.
    pub peer: String,
}

impl Actor {
    /// Whoever holds `access`, calling from `peer`.
    pub fn of(access: &Access, peer: SocketAddr) -> Self {
        Self {
            peer: peer.to_string(),
            ..Self::holding(access)
        }
    }

    /// Whoever holds `access`, from an address not known here (`-`).
    pub fn holding(access: &Access) -> Self {
        Self {
            user: user_of(access),
            credential: credential_of(access),
            peer: NOBODY.to_owned(),
        }
    }

    /// The daemon itself: a program that exited on its own, a signal, a live upgrade.
    pub fn nobody() -> Self {
        Self {
            user: NOBODY.to_owned(),
            credential: NOBODY.to_owned(),
            peer: NOBODY.to_owned(),
        }
    }

    /// A session's viewer, as the session knows it: its user (a guest when `None`) and the
    /// credential it joined with; its address is not kept by the session.
    pub fn viewer(user: Option<&str>, credential: &str) -> Self {
        Self {
            user: user.unwrap_or(GUEST).to_owned(),
            credential: if credential.is_empty() {
                NOBODY.to_owned()
            } else {
                credential.to_owned()
            },
            peer: NOBODY.to_owned(),
        }
    }
}

/// The user name the trail gives a share link's visitor.
pub const GUEST: &str = "guest";

/// The name `access` is recorded under: the user's, `guest` for a share link, `session UUID`
/// for a session's capability token.
fn user_of(access: &Access) -> String {
    match access {
        Access::Share(_) => GUEST.to_owned(),
        _ => access.who(),
    }
}

/// The credential `access` came with, as the trail writes it.
pub fn credential_of(access: &Access) -> String {
    match access {
        Access::User(u) => u.credential(),
        Access::Share(s) => format!("share:{}", s.id),
        Access::StateToken(_) => NOBODY.to_owned(),
    }
}

/// One line of the audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    /// When, RFC 3339 UTC with milliseconds: `2026-05-01T12:00:00.123Z`.
    pub ts: String,
    /// What happened: `session.create`, `session.rename`, `session.share`, `share.revoke`,
    /// `session.end`, `exec`, `exec.exit`, `lsp.start`, `upload`, `typing`, `login`,
    /// `refused`, `upgrade` (and whatever later versions add).
    pub action: String,
    /// Who: a user's name, `guest` for a share link's visitor, `-` for the daemon itself.
    pub user: String,
    /// How they came in: `daemon-token`, `token:ID`, `proxy`, `share:ID`, or `-`.
    pub credential: String,
    /// The client's address, or `-`.
    pub peer: String,
    /// The session it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Uuid>,
    /// What else there is to say, by action (never a token, a query string or typed bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub detail: Option<Value>,
}

impl Event {
    /// `action` by `actor`, now.
    pub fn new(action: &str, actor: &Actor) -> Self {
        Self {
            ts: timestamp(SystemTime::now()),
            action: action.to_owned(),
            user: actor.user.clone(),
            credential: actor.credential.clone(),
            peer: actor.peer.clone(),
            session: None,
            detail: None,
        }
    }

    /// About `session`.
    pub fn on(mut self, session: Uuid) -> Self {
        self.session = Some(session);
        self
    }

    /// With `detail` (an object).
    pub fn with(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// RFC 3339 UTC with milliseconds, as every event's `ts`.
pub fn timestamp(t: SystemTime) -> String {
    crate::session::rfc3339_millis(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_has_milliseconds_in_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_777_636_800_123);
        assert_eq!(timestamp(t), "2026-05-01T12:00:00.123Z");
    }

    #[test]
    fn an_event_is_one_json_line_without_empty_fields() {
        let e = Event::new("login", &Actor::nobody());
        let line = serde_json::to_string(&e).unwrap();
        assert!(!line.contains('\n') && !line.contains("session") && !line.contains("detail"));
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
    }
}
