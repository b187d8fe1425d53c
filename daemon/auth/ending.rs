//! When a connection's credential stops letting it in: a share link's or an API token's
//! revocation or expiry. Every long-lived connection (WebSockets, event streams, execs,
//! language servers) waits on its [`Limits`] beside its work and closes saying why.

use std::time::SystemTime;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The kind of credential a connection came with, for the words of its close.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Credential {
    /// A share link (the words people already know: "share link revoked").
    #[default]
    ShareLink,
    /// An API token.
    ApiToken,
}

/// Why a connection's credential stopped letting it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Revoked.
    Revoked(Credential),
    /// Past its expiry.
    Expired(Credential),
}

impl Ended {
    /// The close reason: `share link revoked`, `share link expired`, `token revoked`,
    /// `token expired`.
    pub fn reason(self) -> &'static str {
        match self {
            Ended::Revoked(Credential::ShareLink) => "share link revoked",
            Ended::Expired(Credential::ShareLink) => "share link expired",
            Ended::Revoked(Credential::ApiToken) => "token revoked",
            Ended::Expired(Credential::ApiToken) => "token expired",
        }
    }
}

/// When a connection's credential stops letting it in (the default: never).
#[derive(Debug, Clone, Default)]
pub struct Limits {
    revoked: CancellationToken,
    at: Option<Instant>,
    credential: Credential,
}

impl Limits {
    /// For a credential revoked through `revoked` and expiring at `expires` (neither: never
    /// ends).
    pub fn new(
        credential: Credential,
        revoked: Option<CancellationToken>,
        expires: Option<SystemTime>,
    ) -> Self {
        Limits {
            revoked: revoked.unwrap_or_default(),
            at: expires
                .map(|t| Instant::now() + t.duration_since(SystemTime::now()).unwrap_or_default()),
            credential,
        }
    }

    /// Why it has ended already, if it has.
    pub fn ended(&self) -> Option<Ended> {
        if self.revoked.is_cancelled() {
            Some(Ended::Revoked(self.credential))
        } else if self.at.is_some_and(|at| at <= Instant::now()) {
            Some(Ended::Expired(self.credential))
        } else {
            None
        }
    }

    /// Whether it has ended already.
    pub fn is_over(&self) -> bool {
        self.ended().is_some()
    }

    /// Resolves with why, once the credential is revoked or expires.
    pub async fn wait(&self) -> Ended {
        let expiry = async {
            match self.at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.revoked.cancelled() => Ended::Revoked(self.credential),
            _ = expiry => Ended::Expired(self.credential),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn revocation_and_expiry_say_which() {
        let never = Limits::default();
        assert!(!never.is_over());
        let revoked = CancellationToken::new();
        let token = Limits::new(Credential::ApiToken, Some(revoked.clone()), None);
        revoked.cancel();
        assert_eq!(token.wait().await.reason(), "token revoked");
        let soon = SystemTime::now() + Duration::from_millis(20);
        let share = Limits::new(Credential::ShareLink, None, Some(soon));
        assert_eq!(share.wait().await.reason(), "share link expired");
        assert_eq!(share.ended(), Some(Ended::Expired(Credential::ShareLink)));
    }
}
