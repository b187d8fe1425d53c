//! When each user (by name and credential) was last seen, so that a login is recorded once
//! per sitting: a first authenticated request, or one after [`QUIET`] without any. Bounded:
//! past [`MAX_KEPT`] users, those quiet for [`QUIET`] are forgotten (they would log in anew
//! anyway), and if none is, the table starts over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A request after this long without one from the same user and credential is a login.
pub const QUIET: Duration = Duration::from_secs(30 * 60);

/// Most users remembered at once.
pub const MAX_KEPT: usize = 10_000;

/// Who was last seen when.
#[derive(Default)]
pub struct Logins {
    seen: Mutex<HashMap<(String, String), Instant>>,
}

impl Logins {
    /// `user` with `credential` made a request at `now`: whether it is a login.
    pub fn seen(&self, user: &str, credential: &str, now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = seen.get_mut(&(user.to_owned(), credential.to_owned())) {
            let login = now.duration_since(*last) >= QUIET;
            *last = now;
            return login;
        }
        if seen.len() >= MAX_KEPT {
            seen.retain(|_, last| now.duration_since(*last) < QUIET);
            if seen.len() >= MAX_KEPT {
                seen.clear();
            }
        }
        seen.insert((user.to_owned(), credential.to_owned()), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_sitting_per_user_and_credential() {
        let logins = Logins::default();
        let t = Instant::now();
        assert!(logins.seen("alice", "daemon-token", t));
        assert!(!logins.seen("alice", "daemon-token", t + Duration::from_secs(60)));
        assert!(logins.seen("alice", "token:x", t + Duration::from_secs(61)));
        assert!(!logins.seen("alice", "daemon-token", t + QUIET));
        assert!(logins.seen("alice", "daemon-token", t + QUIET * 3));
    }
}
