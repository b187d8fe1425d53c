//! Who a request is from, once authenticated: a named user with scopes, and the credential
//! that made it so (the daemon token, an API token, or the trusted proxy's user header).

use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use super::Scopes;

/// A named user.
#[derive(Debug)]
pub struct User {
    /// The name people see in presence, chat, the session list and the audit trail.
    pub name: String,
    /// What the user may do.
    pub scopes: Scopes,
    /// The credential that names them.
    pub via: Via,
}

/// The credential a user came with.
#[derive(Debug)]
pub enum Via {
    /// The daemon token (or authentication off): the owner, an admin.
    DaemonToken,
    /// An API token.
    Token {
        /// Its id (listed, revoked by).
        id: String,
        /// Cancelled on revocation: connections using it close.
        revoked: CancellationToken,
        /// When it stops working, if ever.
        expires_at: Option<SystemTime>,
    },
    /// The user header set by a trusted reverse proxy (single sign-on).
    Proxy,
}

impl User {
    /// The owner: whoever holds the daemon token, named after the account running the daemon.
    pub fn owner(name: String) -> Self {
        Self {
            name,
            scopes: Scopes::ADMIN,
            via: Via::DaemonToken,
        }
    }

    /// How the user came in, for the audit trail and logs: `daemon-token`, `token:ID`, `proxy`.
    pub fn credential(&self) -> String {
        match &self.via {
            Via::DaemonToken => "daemon-token".to_owned(),
            Via::Token { id, .. } => format!("token:{id}"),
            Via::Proxy => "proxy".to_owned(),
        }
    }
}

/// The owner's name: the account the daemon runs as (`$USER`, `$LOGNAME`), else `owner`.
pub fn owner_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .map(|v| v.trim().to_owned())
        .find(|v| !v.is_empty() && v.chars().count() <= 64)
        .unwrap_or_else(|| "owner".to_owned())
}
