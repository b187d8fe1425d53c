//! Share links: a token that reaches one session, in one role, made by an admin, until it
//! is revoked, expires or the session ends.

use std::time::SystemTime;

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::session::Role;

/// A session-scoped token.
#[derive(Debug)]
pub struct Share {
    /// Short id, for listing and revoking.
    pub id: String,
    /// The one session it reaches.
    pub session: Uuid,
    /// What it allows.
    pub role: Role,
    /// Whether it may download its session's recording.
    pub record: bool,
    pub(super) token: String,
    /// The user who made it.
    pub created_by: String,
    /// When it was made.
    pub created_at: SystemTime,
    /// When it stops working, if ever.
    pub expires_at: Option<SystemTime>,
    /// Cancelled on revocation: connections using it close.
    pub revoked: CancellationToken,
}

/// A share as the API lists it (without its token).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareInfo {
    /// Short id.
    pub id: String,
    /// The session.
    pub session: Uuid,
    /// Its role.
    pub role: Role,
    /// Whether it may download its session's recording.
    pub record: bool,
    /// The user who made it.
    pub created_by: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, or null for no expiry.
    pub expires_at: Option<String>,
}

impl Share {
    /// Its listing.
    pub fn info(&self) -> ShareInfo {
        ShareInfo {
            id: self.id.clone(),
            session: self.session,
            role: self.role,
            record: self.record,
            created_by: self.created_by.clone(),
            created_at: crate::session::rfc3339(self.created_at),
            expires_at: self.expires_at.map(crate::session::rfc3339),
        }
    }

    /// The token, to hand out once when the share is created.
    pub fn token(&self) -> &str {
        &self.token
    }
}
