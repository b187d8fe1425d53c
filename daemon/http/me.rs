//! `GET /api/me`: who the caller is, as its credential says (its name, scopes, whether it is a
//! guest, which credential), so a client can greet it and show only what it may do.

use hyper::{Response, StatusCode};
use serde::Serialize;
use utoipa::ToSchema;

use super::reply::{error, json};
use super::Body;
use crate::auth::{Access, Scopes, Via};
use crate::session::Role;

/// The caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(super) struct Me {
    /// A user's verified name; `null` for a guest (a share link's holder), who picks a
    /// display name.
    pub(super) name: Option<String>,
    /// What it may do: a user's scopes (`view`, `write`, `exec`, `admin`, with what each
    /// implies); a guest's are its link's role (`view`, or `view` and `write`) on that
    /// link's session only.
    pub(super) scopes: Vec<&'static str>,
    /// Whether it came with a share link.
    pub(super) guest: bool,
    /// How it came in: `daemon-token`, `token:ID` (an API token), `proxy` (signed in by a
    /// trusted reverse proxy) or `share:ID` (a share link).
    #[schema(pattern = "^(daemon-token|proxy|token:.+|share:.+)$")]
    pub(super) credential: String,
}

impl Me {
    /// Who `access` is; `None` for a session's capability token (the route admits none).
    pub(super) fn of(access: &Access) -> Option<Self> {
        match access {
            Access::User(user) => Some(Self {
                name: Some(user.name.clone()),
                scopes: user.scopes.names(),
                guest: false,
                credential: match &user.via {
                    Via::DaemonToken => "daemon-token".to_owned(),
                    Via::Token { id, .. } => format!("token:{id}"),
                    Via::Proxy => "proxy".to_owned(),
                },
            }),
            Access::Share(share) => Some(Self {
                name: None,
                scopes: match share.role {
                    Role::Writer => Scopes::WRITE.names(),
                    Role::Viewer => Scopes::VIEW.names(),
                },
                guest: true,
                credential: format!("share:{}", share.id),
            }),
            Access::StateToken(_) => None,
        }
    }
}

/// `GET /api/me`.
pub(super) fn me(access: &Access) -> Response<Body> {
    match Me::of(access) {
        Some(me) => json(StatusCode::OK, &me),
        None => error(StatusCode::FORBIDDEN, "a capability token is no one"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::auth::User;

    #[test]
    fn the_owner_is_an_admin_by_the_daemon_token() {
        let me = Me::of(&Access::User(Arc::new(User::owner("alice".into())))).unwrap();
        assert_eq!(me.name.as_deref(), Some("alice"));
        assert_eq!(me.scopes, vec!["view", "write", "exec", "admin"]);
        assert!(!me.guest);
        assert_eq!(me.credential, "daemon-token");
        assert!(Me::of(&Access::StateToken(uuid::Uuid::nil())).is_none());
    }
}
