//! What an authenticated request may reach: a named user's scopes, a share link's one
//! session and role, or a session's capability token; and who it is, by name.

use std::sync::Arc;

use uuid::Uuid;

use super::{Credential, Limits, Scopes, Share, User, Via};
use crate::session::Role;

/// What an authenticated request may reach.
#[derive(Debug, Clone)]
pub enum Access {
    /// A named user (the daemon token's owner, an API token, a person the proxy signed in):
    /// every session, as far as the user's scopes go.
    User(Arc<User>),
    /// One session, in one role: a guest, who picks a display name.
    Share(Arc<Share>),
    /// A session's capability token: it may report that session's state, and nothing else.
    StateToken(Uuid),
}

impl Access {
    /// The user's scopes (a share link and a capability token have none: they are judged by
    /// their session).
    fn scopes(&self) -> Scopes {
        match self {
            Access::User(u) => u.scopes,
            Access::Share(_) | Access::StateToken(_) => Scopes::NONE,
        }
    }

    /// Whether this is a user with every one of `scopes`.
    pub fn has(&self, scopes: Scopes) -> bool {
        matches!(self, Access::User(_)) && self.scopes().has(scopes)
    }

    /// Whether it may administer: create and end sessions, share, manage tokens, audit.
    pub fn is_admin(&self) -> bool {
        self.has(Scopes::ADMIN)
    }

    /// Whether it may run commands and language servers.
    pub fn may_exec(&self) -> bool {
        self.has(Scopes::EXEC)
    }

    /// Whether it watches sessions at all: a user with `view`, or a share link (its own
    /// session only: see [`Access::only`]).
    pub fn watches(&self) -> bool {
        match self {
            Access::User(u) => u.scopes.has(Scopes::VIEW),
            Access::Share(_) => true,
            Access::StateToken(_) => false,
        }
    }

    /// Whether this access reaches `session` (sees it: its page, screen, output, events).
    pub fn reaches(&self, session: Uuid) -> bool {
        match self {
            Access::User(u) => u.scopes.has(Scopes::VIEW),
            Access::Share(s) => s.session == session,
            Access::StateToken(_) => false,
        }
    }

    /// Whether it may download `session`'s recording (a share link only when made so).
    pub fn may_record(&self, session: Uuid) -> bool {
        match self {
            Access::User(u) => u.scopes.has(Scopes::VIEW),
            Access::Share(s) => s.session == session && s.record,
            Access::StateToken(_) => false,
        }
    }

    /// Whether it may change `session` (input, resize, rename, ...).
    pub fn may_write(&self, session: Uuid) -> bool {
        match self {
            Access::User(u) => u.scopes.has(Scopes::WRITE),
            Access::Share(s) => s.session == session && s.role == Role::Writer,
            Access::StateToken(_) => false,
        }
    }

    /// Whether it may report `session`'s state: an admin, or that session's capability token.
    pub fn may_report(&self, session: Uuid) -> bool {
        match self {
            Access::User(u) => u.scopes.has(Scopes::ADMIN),
            Access::Share(_) => false,
            Access::StateToken(id) => *id == session,
        }
    }

    /// The session a scoped access is limited to (`None`: a user's, every one).
    pub fn only(&self) -> Option<Uuid> {
        match self {
            Access::User(_) => None,
            Access::Share(s) => Some(s.session),
            Access::StateToken(id) => Some(*id),
        }
    }

    /// What ends its long-lived connections early: a share link's or an API token's
    /// revocation and expiry (never, for the others).
    pub fn limits(&self) -> Limits {
        match self {
            Access::Share(s) => {
                Limits::new(Credential::ShareLink, Some(s.revoked.clone()), s.expires_at)
            }
            Access::User(u) => match &u.via {
                Via::Token {
                    revoked,
                    expires_at,
                    ..
                } => Limits::new(Credential::ApiToken, Some(revoked.clone()), *expires_at),
                Via::DaemonToken | Via::Proxy => Limits::default(),
            },
            Access::StateToken(_) => Limits::default(),
        }
    }

    /// The role its connections join a session with (a share link's only on its session).
    pub fn role(&self) -> Role {
        match self {
            Access::User(u) if u.scopes.has(Scopes::WRITE) => Role::Writer,
            Access::User(_) => Role::Viewer,
            Access::Share(s) => s.role,
            Access::StateToken(_) => Role::Viewer,
        }
    }

    /// The verified name, for a user (a guest has none: it picks a display name).
    pub fn user_name(&self) -> Option<&str> {
        match self {
            Access::User(u) => Some(&u.name),
            Access::Share(_) | Access::StateToken(_) => None,
        }
    }

    /// Whether this is a guest: someone who came with a share link.
    pub fn is_guest(&self) -> bool {
        matches!(self, Access::Share(_))
    }

    /// Who, for the audit trail and logs: the user's name, `guest (share ID)`, or
    /// `session UUID` for a capability token.
    pub fn who(&self) -> String {
        match self {
            Access::User(u) => u.name.clone(),
            Access::Share(s) => format!("guest (share {})", s.id),
            Access::StateToken(id) => format!("session {id}"),
        }
    }
}
