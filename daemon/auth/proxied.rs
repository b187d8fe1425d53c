//! Single sign-on: the user a trusted reverse proxy names in `[auth] user_header`, read from
//! a request's headers, and who that name is here (`[auth.users]`, else `[auth]
//! default_scopes`). Whether the peer is trusted is the guard's to say; this only reads values
//! and maps names to users.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::header::{HeaderMap, HeaderName};

use super::{lock, Scopes, User, Via};

/// Longest user name a proxy may send, characters.
pub const MAX_NAME_CHARS: usize = 255;
/// Most unlisted users kept as `Arc<User>` at once: past it the cache starts again (each entry
/// is only a name and its scopes, so remaking them costs nothing that matters).
const UNLISTED_CACHE: usize = 1024;
/// How often an address sending the user header without being trusted is logged, at most.
const IGNORED_LOG_EVERY: Duration = Duration::from_secs(60);
/// Most addresses remembered for that (a flood of addresses cannot grow the table).
const IGNORED_ADDRESSES: usize = 4096;
/// Characters of a refused value shown in the log: enough to recognise, not to replay.
const LOGGED_PREFIX_CHARS: usize = 8;

/// Why a user header's value was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadName {
    /// Not visible text (bytes that are not UTF-8).
    NotText,
    /// Blank once trimmed.
    Empty,
    /// More than [`MAX_NAME_CHARS`] characters.
    TooLong,
    /// A control character inside.
    Control,
}

impl BadName {
    /// For the log.
    pub fn reason(self) -> &'static str {
        match self {
            BadName::NotText => "not UTF-8 text",
            BadName::Empty => "empty",
            BadName::TooLong => "longer than 255 characters",
            BadName::Control => "contains a control character",
        }
    }
}

/// Whether `name` (already trimmed) is a user name a proxy may send: 1..=255 characters,
/// no control characters.
pub fn valid_name(name: &str) -> Result<(), BadName> {
    if name.is_empty() {
        return Err(BadName::Empty);
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(BadName::TooLong);
    }
    if name.chars().any(char::is_control) {
        return Err(BadName::Control);
    }
    Ok(())
}

/// The user `header` names in `headers`: `Ok(None)` when absent; else its last value (the
/// one the nearest proxy set: the last header line, and its last comma-separated item, as for
/// `X-Forwarded-*`), trimmed, if it is a valid name.
pub fn user_in(headers: &HeaderMap, header: &HeaderName) -> Result<Option<String>, BadName> {
    let Some(value) = headers.get_all(header).iter().next_back() else {
        return Ok(None);
    };
    let text = std::str::from_utf8(value.as_bytes()).map_err(|_| BadName::NotText)?;
    let name = text.rsplit(',').next().unwrap_or_default().trim();
    valid_name(name)?;
    Ok(Some(name.to_owned()))
}

/// A short, printable prefix of a header's value, for a log line about it.
pub fn logged_prefix(headers: &HeaderMap, header: &HeaderName) -> String {
    let value = headers
        .get_all(header)
        .iter()
        .next_back()
        .map_or(&[][..], |v| v.as_bytes());
    let text = String::from_utf8_lossy(value);
    let mut shown: String = text
        .chars()
        .take(LOGGED_PREFIX_CHARS)
        .flat_map(char::escape_default)
        .collect();
    if text.chars().count() > LOGGED_PREFIX_CHARS {
        shown.push('…');
    }
    shown
}

/// Who the people a proxy signs in are: listed users with their scopes, anyone else with the
/// default; and when the header last came from an address that may not send it.
pub struct SignIn {
    /// `[auth] user_header`; `None`: single sign-on is off.
    header: Option<HeaderName>,
    /// `[auth.users]`, keyed by the name in ASCII lowercase (emails are matched so).
    listed: HashMap<String, Arc<User>>,
    /// `[auth] default_scopes`.
    default: Scopes,
    /// Unlisted users met lately, bounded by [`UNLISTED_CACHE`].
    unlisted: Mutex<HashMap<String, Arc<User>>>,
    /// When each address was last logged for sending the header untrusted.
    ignored: Mutex<HashMap<IpAddr, Instant>>,
}

impl Default for SignIn {
    fn default() -> Self {
        Self::new(None, &BTreeMap::new(), Scopes::NONE)
    }
}

impl SignIn {
    /// Single sign-on by `header` (`None`: off), for `users` and everyone else with `default`.
    pub fn new(
        header: Option<HeaderName>,
        users: &BTreeMap<String, Scopes>,
        default: Scopes,
    ) -> Self {
        let listed = users
            .iter()
            .map(|(name, scopes)| (name.to_ascii_lowercase(), Arc::new(proxied(name, *scopes))))
            .collect();
        Self {
            header,
            listed,
            default,
            unlisted: Mutex::new(HashMap::new()),
            ignored: Mutex::new(HashMap::new()),
        }
    }

    /// The header people are named in, if single sign-on is on.
    pub fn header(&self) -> Option<&HeaderName> {
        self.header.as_ref()
    }

    /// The user the proxy named `name`: listed, or one with the default scopes (possibly
    /// none: the caller refuses them).
    pub fn user(&self, name: &str) -> Arc<User> {
        let key = name.to_ascii_lowercase();
        if let Some(user) = self.listed.get(&key) {
            return user.clone();
        }
        let mut unlisted = lock(&self.unlisted);
        if let Some(user) = unlisted.get(&key) {
            return user.clone();
        }
        if unlisted.len() >= UNLISTED_CACHE {
            unlisted.clear();
        }
        let user = Arc::new(proxied(name, self.default));
        unlisted.insert(key, user.clone());
        user
    }

    /// Whether to log now that `peer` sent the header without being trusted: at most once a
    /// [`IGNORED_LOG_EVERY`] per address.
    pub fn log_ignored(&self, peer: IpAddr) -> bool {
        let now = Instant::now();
        let mut ignored = lock(&self.ignored);
        if ignored
            .get(&peer)
            .is_some_and(|at| now.duration_since(*at) < IGNORED_LOG_EVERY)
        {
            return false;
        }
        if ignored.len() >= IGNORED_ADDRESSES {
            ignored.retain(|_, at| now.duration_since(*at) < IGNORED_LOG_EVERY);
            if ignored.len() >= IGNORED_ADDRESSES {
                // All recent: forgetting them only means logging them again a little sooner.
                ignored.clear();
            }
        }
        ignored.insert(peer, now);
        true
    }
}

fn proxied(name: &str, scopes: Scopes) -> User {
    User {
        name: name.to_owned(),
        scopes,
        via: Via::Proxy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn email() -> HeaderName {
        HeaderName::from_static("x-forwarded-email")
    }

    fn with(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(email(), HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn header_values() {
        let read = |values: &[&[u8]]| user_in(&with(values), &email());
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[b" alice@example.com "]),
            Ok(Some("alice@example.com".into()))
        );
        // Repeated: the last line, its last item.
        assert_eq!(read(&[b"mallory", b"alice"]), Ok(Some("alice".into())));
        assert_eq!(read(&[b"mallory, alice"]), Ok(Some("alice".into())));
        assert_eq!(read(&[b"   "]), Err(BadName::Empty));
        assert_eq!(read(&[b"alice,"]), Err(BadName::Empty));
        assert_eq!(read(&[b"al\tice"]), Err(BadName::Control));
        assert_eq!(read(&["al\u{85}ice".as_bytes()]), Err(BadName::Control));
        assert_eq!(read(&[b"\xff\xfe"]), Err(BadName::NotText));
        assert_eq!(
            read(&["é".repeat(255).as_bytes()]),
            Ok(Some("é".repeat(255)))
        );
        assert_eq!(read(&["a".repeat(256).as_bytes()]), Err(BadName::TooLong));
        assert_eq!(
            logged_prefix(&with(&[b"alice@example.com"]), &email()),
            "alice@ex…"
        );
        assert_eq!(logged_prefix(&with(&[b"a\tb"]), &email()), "a\\tb");
    }

    #[test]
    fn listed_unlisted_and_cached() {
        let users = BTreeMap::from([("Alice@Example.com".to_owned(), Scopes::ADMIN)]);
        let sign_in = SignIn::new(Some(email()), &users, Scopes::VIEW);
        let alice = sign_in.user("alice@example.com");
        assert_eq!(
            (alice.name.as_str(), alice.scopes),
            ("Alice@Example.com", Scopes::ADMIN)
        );
        assert!(matches!(alice.via, Via::Proxy));
        assert!(Arc::ptr_eq(&alice, &sign_in.user("ALICE@example.com")));
        let bob = sign_in.user("bob@example.com");
        assert_eq!(
            (bob.name.as_str(), bob.scopes),
            ("bob@example.com", Scopes::VIEW)
        );
        assert!(
            Arc::ptr_eq(&bob, &sign_in.user("bob@example.com")),
            "cached"
        );
        for i in 0..UNLISTED_CACHE * 2 {
            sign_in.user(&format!("user{i}"));
        }
        assert!(lock(&sign_in.unlisted).len() <= UNLISTED_CACHE, "bounded");
    }

    #[test]
    fn ignored_headers_are_logged_once_a_minute_per_address() {
        let sign_in = SignIn::default();
        let (a, b) = (IpAddr::from([192, 0, 2, 1]), IpAddr::from([192, 0, 2, 2]));
        assert!(sign_in.log_ignored(a));
        assert!(!sign_in.log_ignored(a));
        assert!(sign_in.log_ignored(b));
        for i in 0..IGNORED_ADDRESSES as u32 * 2 {
            sign_in.log_ignored(IpAddr::from(i.to_be_bytes()));
        }
        assert!(lock(&sign_in.ignored).len() <= IGNORED_ADDRESSES, "bounded");
    }
}
