//! Who may do what: the daemon token (its holder is the owner, an admin), session-scoped
//! share links (guests), each session's capability token (it can set that session's state,
//! nothing else), the origin check, and the failed-authentication rate limit.
//!
//! Tokens arrive as `Authorization: Bearer`, a `token` / `access_token` query parameter
//! (browsers cannot set headers on a WebSocket), or the cookie set when a page is opened
//! with a query token. They are compared in constant time and never logged.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hyper::header::{HeaderMap, AUTHORIZATION, COOKIE, HOST, ORIGIN};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::session::Role;

mod access;
mod ending;
pub mod proxied;
mod scopes;
mod share;
pub mod tokens;
mod user;

pub use access::Access;
pub use ending::{Credential, Ended, Limits};
pub use proxied::SignIn;
pub use scopes::Scopes;
pub use share::{Share, ShareInfo};
pub use tokens::TokenStore;
pub use user::{owner_name, User, Via};

/// The cookie that carries a token after a page was opened with `?token=`.
pub const COOKIE_NAME: &str = "ptyhub_token";
/// The window of the failed-authentication rate limit.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The hold on the answer to an address's first failure in [`FAILURE_WINDOW`]; each further
/// one doubles it, up to the configured most (`limits.failed_auth_delay_max`).
const FIRST_FAILURE_DELAY: Duration = Duration::from_millis(25);
/// Query parameters that carry a token.
pub const TOKEN_PARAMS: [&str; 2] = ["token", "access_token"];

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No token at all.
    Missing,
    /// A token that matches nothing (wrong, revoked).
    Invalid,
    /// A share token past its expiry.
    Expired,
    /// An API token past its expiry.
    TokenExpired,
    /// Too many failures from this address lately; retry after this many seconds.
    RateLimited(u64),
    /// Signed in by the trusted proxy as this user, who has no scopes here (403, not 401).
    NoScopes(String),
}

impl Denied {
    /// For people (and the log).
    pub fn reason(&self) -> String {
        match self {
            Denied::Missing => "no token: open the link with ?token= that ptyhub printed".into(),
            Denied::Invalid => "invalid or revoked token".into(),
            Denied::Expired => "this share link has expired".into(),
            Denied::TokenExpired => "token expired".into(),
            Denied::RateLimited(s) => {
                format!("too many failed attempts from this address: retry in {s} s")
            }
            Denied::NoScopes(name) => format!(
                "signed in as {name}, who may not use ptyhub here: an admin can add them to \
                 [auth.users]"
            ),
        }
    }
}

/// The daemon's authentication state.
pub struct Auth {
    /// `None`: authentication is off (`--no-auth`, loopback only).
    token: Option<String>,
    /// Who holds the daemon token (everyone, with authentication off).
    owner: Arc<User>,
    shares: Mutex<Vec<Arc<Share>>>,
    /// Each live session's capability token.
    state_tokens: Mutex<Vec<(Uuid, String)>>,
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
    failed_per_minute: usize,
    /// The longest hold on a failed attempt's answer ([`Auth::failure_delay`]).
    failure_delay_max: Duration,
    allowed_origins: Vec<String>,
    /// Single sign-on: who the people a trusted proxy names are.
    sign_in: SignIn,
    /// The API tokens.
    tokens: Arc<TokenStore>,
}

/// A fresh random token: 256 bits, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    // The OS random source failing is not something a server can carry on without.
    getrandom::fill(&mut bytes).unwrap_or_else(|e| panic!("no OS randomness: {e}"));
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file in the state directory that keeps a generated token across restarts.
pub const TOKEN_FILE: &str = "token";

/// Whether `t` is acceptable as a token: at least 16 printable ASCII characters, no spaces.
pub fn valid_token(t: &str) -> bool {
    t.len() >= 16 && t.chars().all(|c| c.is_ascii_graphic())
}

/// The generated token kept in `path` (mode 600), so that open pages, bookmarks and links
/// survive a restart: read when it holds a valid token, else (or with `rotate`) a new one is
/// generated and written there first. Returns the token and whether it is new.
pub fn stored_token(path: &std::path::Path, rotate: bool) -> std::io::Result<(String, bool)> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
    if !rotate {
        match std::fs::read_to_string(path) {
            Ok(text) if valid_token(text.trim()) => {
                // Kept private even if someone loosened it: the token is the key to every shell.
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
                return Ok((text.trim().to_owned(), false));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let token = generate_token();
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    // Written whole under another name, then renamed: a crash never leaves half a token.
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(format!("{token}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok((token, true))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here leaves the data consistent, so poisoning is harmless.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Auth {
    /// `token: None` disables authentication.
    pub fn new(
        token: Option<String>,
        failed_per_minute: usize,
        allowed_origins: Vec<String>,
    ) -> Self {
        Self {
            token,
            owner: Arc::new(User::owner(owner_name())),
            shares: Mutex::new(Vec::new()),
            state_tokens: Mutex::new(Vec::new()),
            failures: Mutex::new(HashMap::new()),
            failed_per_minute,
            failure_delay_max: Duration::ZERO,
            allowed_origins,
            sign_in: SignIn::default(),
            tokens: Arc::new(TokenStore::in_memory(10_000)),
        }
    }

    /// People a trusted proxy signs in are named and scoped by `sign_in`.
    pub fn with_sign_in(mut self, sign_in: SignIn) -> Self {
        self.sign_in = sign_in;
        self
    }

    /// Single sign-on's users and header.
    pub fn sign_in(&self) -> &SignIn {
        &self.sign_in
    }

    /// The API tokens are `tokens` (by default, none, kept in memory).
    pub fn with_tokens(mut self, tokens: TokenStore) -> Self {
        self.tokens = Arc::new(tokens);
        self
    }

    /// The API tokens.
    pub fn tokens(&self) -> &Arc<TokenStore> {
        &self.tokens
    }

    /// Failed attempts are answered after [`Auth::failure_delay`], at most `max` (zero: at once).
    pub fn with_failure_delay(mut self, max: Duration) -> Self {
        self.failure_delay_max = max;
        self
    }

    /// How long the answer to a failure from `peer` that [`Auth::authenticate`] just refused
    /// (not one without a credential) is held back: 25 ms for the address's first failure in
    /// the window, doubling with each one before it, up to the configured most; the most once
    /// it is limited. Only the answer waits (the caller's own request, holding no lock): a
    /// correct token from the address is never delayed.
    pub fn failure_delay(&self, peer: IpAddr) -> Duration {
        let failures = lock(&self.failures).get(&peer).map_or(0, |list| list.len());
        if failures >= self.failed_per_minute {
            return self.failure_delay_max;
        }
        let doublings = u32::try_from(failures.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(16);
        (FIRST_FAILURE_DELAY * 2u32.pow(doublings)).min(self.failure_delay_max)
    }

    /// The live share links, for a live upgrade's image.
    pub fn share_images(&self) -> Vec<crate::upgrade::image::ShareImage> {
        let ms = |t: SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        };
        lock(&self.shares)
            .iter()
            .map(|s| crate::upgrade::image::ShareImage {
                id: s.id.clone(),
                session: s.session,
                writer: s.role == Role::Writer,
                record: s.record,
                token: s.token.clone(),
                created_unix_ms: ms(s.created_at),
                expires_unix_ms: s.expires_at.map(ms),
                created_by: s.created_by.clone(),
            })
            .collect()
    }

    /// Takes over the share links of a previous image: the same links keep working.
    pub fn restore_shares(&self, shares: &[crate::upgrade::image::ShareImage]) {
        let at = |ms: u64| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        let mut mine = lock(&self.shares);
        for s in shares {
            mine.push(Arc::new(Share {
                id: s.id.clone(),
                session: s.session,
                role: if s.writer { Role::Writer } else { Role::Viewer },
                record: s.record,
                token: s.token.clone(),
                created_at: at(s.created_unix_ms),
                expires_at: s.expires_unix_ms.map(at),
                created_by: s.created_by.clone(),
                revoked: CancellationToken::new(),
            }));
        }
    }

    /// The owner: who holds the daemon token.
    pub fn owner(&self) -> &Arc<User> {
        &self.owner
    }

    /// The daemon token (for a live upgrade's image).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Whether authentication is on.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Checks the token presented (if any) from `peer`: the daemon token, then the API
    /// tokens (a hash lookup), then share links and capability tokens; and else the user a
    /// trusted proxy signed in (`proxied_user`: the guard passes it only from a trusted peer).
    ///
    /// A correct token always passes, even from an address over the failure limit: every local
    /// client is 127.0.0.1, so limiting before the comparison would let any web page that makes
    /// the browser send bad tokens lock the owner out. Only failures are limited, and a request
    /// without a credential guesses nothing, so it is neither counted nor limited.
    ///
    /// A valid token wins over the proxied user (a script through the proxy is its token's);
    /// a stale cookie or token beside a proxied user is no failure: they are who the proxy says.
    pub fn authenticate(
        &self,
        presented: Option<&str>,
        proxied_user: Option<&str>,
        peer: IpAddr,
    ) -> Result<Access, Denied> {
        let Some(token) = &self.token else {
            return Ok(Access::User(self.owner.clone()));
        };
        let Some(presented) = presented else {
            return match proxied_user {
                Some(name) => self.proxied(name),
                None => Err(Denied::Missing),
            };
        };
        let presented_str = presented;
        let presented = presented.as_bytes();
        if bool::from(presented.ct_eq(token.as_bytes())) {
            return Ok(Access::User(self.owner.clone()));
        }
        let api = match self.tokens.lookup(presented_str) {
            tokens::Lookup::User(user) => return Ok(Access::User(user)),
            tokens::Lookup::Expired => Some(Denied::TokenExpired),
            tokens::Lookup::Unknown => None,
        };
        let found = lock(&self.shares)
            .iter()
            .find(|s| bool::from(presented.ct_eq(s.token.as_bytes())))
            .cloned();
        let state = lock(&self.state_tokens)
            .iter()
            .find(|(_, t)| bool::from(presented.ct_eq(t.as_bytes())))
            .map(|(id, _)| *id);
        if let (None, Some(id)) = (&found, state) {
            return Ok(Access::StateToken(id));
        }
        let denied = match (api, found) {
            (Some(expired), _) => expired,
            (None, Some(share)) if share.expires_at.is_some_and(|t| t <= SystemTime::now()) => {
                Denied::Expired
            }
            (None, Some(share)) => return Ok(Access::Share(share)),
            (None, None) => Denied::Invalid,
        };
        if let Some(name) = proxied_user {
            return self.proxied(name);
        }
        // Failures while limited are not recorded, so the limit lifts a window after the
        // failures that caused it, however fast the address keeps failing.
        if let Some(wait) = self.limited(peer) {
            return Err(Denied::RateLimited(wait));
        }
        self.record_failure(peer);
        Err(denied)
    }

    /// The user a trusted proxy signed in as `name`, if they have any scope here.
    fn proxied(&self, name: &str) -> Result<Access, Denied> {
        let user = self.sign_in.user(name);
        if user.scopes.is_empty() {
            return Err(Denied::NoScopes(user.name.clone()));
        }
        Ok(Access::User(user))
    }

    /// Seconds until `peer` may try again, when it is over the limit.
    fn limited(&self, peer: IpAddr) -> Option<u64> {
        let mut failures = lock(&self.failures);
        let list = failures.get_mut(&peer)?;
        let now = Instant::now();
        while list
            .front()
            .is_some_and(|t| now.duration_since(*t) >= FAILURE_WINDOW)
        {
            list.pop_front();
        }
        if list.is_empty() {
            failures.remove(&peer);
            return None;
        }
        (list.len() >= self.failed_per_minute).then(|| {
            let oldest = list.front().copied().unwrap_or(now);
            (FAILURE_WINDOW.saturating_sub(now.duration_since(oldest))).as_secs() + 1
        })
    }

    fn record_failure(&self, peer: IpAddr) {
        let mut failures = lock(&self.failures);
        // Bound the table: an address flood cannot grow it without limit.
        if failures.len() > 10_000 {
            failures.clear();
        }
        let list = failures.entry(peer).or_default();
        list.push_back(Instant::now());
        while list.len() > self.failed_per_minute {
            list.pop_front();
        }
    }

    /// Whether the request's `Origin` (if any) is the server's own or an allowed one. Requests
    /// without an Origin are not from a browser page and pass (they still need a token).
    pub fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let host = headers.get(HOST).and_then(|v| v.to_str().ok());
        self.origin_allowed_for(headers, host)
    }

    /// [`Self::origin_allowed`] against the host the client asked for (behind a trusted
    /// proxy, its `X-Forwarded-Host` rather than the `Host` the proxy sent us).
    pub fn origin_allowed_for(&self, headers: &HeaderMap, host: Option<&str>) -> bool {
        let Some(origin) = headers.get(ORIGIN).and_then(|v| v.to_str().ok()) else {
            return true;
        };
        if self
            .allowed_origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(origin))
        {
            return true;
        }
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
    }

    /// With authentication off, a request must name a loopback host: otherwise a web page could
    /// rebind its own host name to 127.0.0.1 and pass the origin check with matching headers.
    pub fn host_allowed(&self, headers: &HeaderMap) -> bool {
        if self.token.is_some() {
            return true;
        }
        let Some(host) = headers.get(HOST).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        // Strip the port: "[::1]:1977", "127.0.0.1:1977", "localhost:1977".
        let name = match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => {
                name
            }
            _ => host,
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// Makes a share link for `session`; `record`: whether it may download the recording;
    /// `created_by`: the user who made it.
    pub fn create_share(
        &self,
        session: Uuid,
        role: Role,
        ttl: Option<Duration>,
        record: bool,
        created_by: &str,
    ) -> Arc<Share> {
        let now = SystemTime::now();
        let share = Arc::new(Share {
            id: generate_token()[..12].to_owned(),
            session,
            role,
            record,
            token: generate_token(),
            created_by: created_by.to_owned(),
            created_at: now,
            expires_at: ttl.and_then(|t| now.checked_add(t)),
            revoked: CancellationToken::new(),
        });
        let mut shares = lock(&self.shares);
        shares.retain(|s| s.expires_at.is_none_or(|t| t > now));
        shares.push(share.clone());
        share
    }

    /// The live shares of `session`.
    pub fn shares_of(&self, session: Uuid) -> Vec<ShareInfo> {
        let now = SystemTime::now();
        lock(&self.shares)
            .iter()
            .filter(|s| s.session == session && s.expires_at.is_none_or(|t| t > now))
            .map(|s| s.info())
            .collect()
    }

    /// Revokes one share; its open connections close. Returns whether it existed.
    pub fn revoke(&self, session: Uuid, id: &str) -> bool {
        let mut shares = lock(&self.shares);
        let before = shares.len();
        shares.retain(|s| {
            let hit = s.session == session && s.id == id;
            if hit {
                s.revoked.cancel();
            }
            !hit
        });
        shares.len() != before
    }

    /// `token` is `session`'s capability token from now on (until the session ends).
    pub fn add_state_token(&self, session: Uuid, token: &str) {
        let mut tokens = lock(&self.state_tokens);
        tokens.retain(|(id, _)| *id != session);
        tokens.push((session, token.to_owned()));
    }

    /// Forgets every share and the capability token of an ended session.
    ///
    /// The links stop working, but their connections are not closed as revoked: the session's
    /// own end closes them, with 4003 `session ended`. Cancelling here raced that close, so a
    /// link's page could be told "share link revoked" for a session that was ended.
    pub fn forget_session(&self, session: Uuid) {
        lock(&self.state_tokens).retain(|(id, _)| *id != session);
        lock(&self.shares).retain(|s| s.session != session);
    }
}

/// The token a request presents: header first, then query, then cookie.
pub fn presented_token(headers: &HeaderMap, query: &[(String, String)]) -> Option<String> {
    if let Some(bearer) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim().to_owned());
    }
    if let Some((_, v)) = query
        .iter()
        .find(|(k, _)| TOKEN_PARAMS.contains(&k.as_str()))
    {
        return Some(v.clone());
    }
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE_NAME)
        .map(|(_, v)| v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn ip() -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    #[test]
    fn daemon_token_and_shares() {
        let auth = Auth::new(Some("s3cret-token-0123456789".into()), 10, vec![]);
        assert!(matches!(
            auth.authenticate(Some("s3cret-token-0123456789"), None, ip()),
            Ok(Access::User(_))
        ));
        assert_eq!(
            auth.authenticate(None, None, ip()).unwrap_err(),
            Denied::Missing
        );
        assert_eq!(
            auth.authenticate(Some("nope"), None, ip()).unwrap_err(),
            Denied::Invalid
        );
        let id = Uuid::new_v4();
        let share = auth.create_share(id, Role::Viewer, None, false, "alice");
        let token = share.token().to_owned();
        match auth.authenticate(Some(&token), None, ip()) {
            Ok(Access::Share(s)) => assert_eq!((s.session, s.role), (id, Role::Viewer)),
            other => panic!("{other:?}"),
        }
        assert_eq!(auth.shares_of(id).len(), 1);
        assert!(auth.revoke(id, &share.id));
        assert!(share.revoked.is_cancelled());
        assert_eq!(
            auth.authenticate(Some(&token), None, ip()).unwrap_err(),
            Denied::Invalid
        );
        let expired = auth.create_share(id, Role::Writer, Some(Duration::ZERO), false, "alice");
        assert_eq!(
            auth.authenticate(Some(expired.token()), None, ip())
                .unwrap_err(),
            Denied::Expired
        );
    }

    #[test]
    fn a_state_token_reports_its_session_and_reaches_nothing() {
        let auth = Auth::new(Some("s3cret-token-0123456789".into()), 10, vec![]);
        let (mine, other) = (Uuid::new_v4(), Uuid::new_v4());
        let token = generate_token();
        auth.add_state_token(mine, &token);
        let access = auth.authenticate(Some(&token), None, ip()).unwrap();
        assert!(matches!(access, Access::StateToken(id) if id == mine));
        assert!(access.may_report(mine) && !access.may_report(other));
        assert!(!access.reaches(mine) && !access.may_write(mine) && !access.may_record(mine));
        assert!(Access::User(auth.owner().clone()).may_report(other));
        let share = Access::Share(auth.create_share(mine, Role::Writer, None, true, "alice"));
        assert!(!share.may_report(mine));
        let Access::Share(link) = share else {
            panic!("a share link's access")
        };
        auth.forget_session(mine);
        assert_eq!(
            auth.authenticate(Some(&token), None, ip()).unwrap_err(),
            Denied::Invalid
        );
        // The link no longer works, but its connections are left to the session's own end.
        assert_eq!(
            auth.authenticate(Some(link.token()), None, ip())
                .unwrap_err(),
            Denied::Invalid
        );
        assert!(!link.revoked.is_cancelled());
    }

    #[test]
    fn failures_are_rate_limited_per_address() {
        let auth = Auth::new(Some("s3cret-token-0123456789".into()), 3, vec![]);
        for _ in 0..3 {
            assert_eq!(
                auth.authenticate(Some("bad"), None, ip()).unwrap_err(),
                Denied::Invalid
            );
        }
        assert!(
            matches!(auth.authenticate(Some("bad"), None, ip()), Err(Denied::RateLimited(s)) if (1..=61).contains(&s))
        );
        let other = IpAddr::from([127, 0, 0, 2]);
        assert_eq!(
            auth.authenticate(Some("bad"), None, other).unwrap_err(),
            Denied::Invalid,
            "another address is not limited"
        );
    }

    #[test]
    fn a_correct_token_passes_from_a_limited_address() {
        let auth = Auth::new(Some("s3cret-token-0123456789".into()), 3, vec![]);
        let id = Uuid::new_v4();
        let share = auth.create_share(id, Role::Writer, None, false, "alice");
        let expired = auth.create_share(id, Role::Writer, Some(Duration::ZERO), false, "alice");
        for _ in 0..12 {
            let _ = auth.authenticate(Some("bad"), None, ip());
        }
        for _ in 0..3 {
            assert!(matches!(
                auth.authenticate(Some("s3cret-token-0123456789"), None, ip()),
                Ok(Access::User(_))
            ));
            assert!(matches!(
                auth.authenticate(Some(share.token()), None, ip()),
                Ok(Access::Share(s)) if s.session == id
            ));
            // Passing does not lift the limit for failures.
            assert!(matches!(
                auth.authenticate(Some("bad"), None, ip()),
                Err(Denied::RateLimited(_))
            ));
            assert!(matches!(
                auth.authenticate(Some(expired.token()), None, ip()),
                Err(Denied::RateLimited(_))
            ));
        }
        // No credential: nothing guessed, so not limited either (the login page still loads).
        assert_eq!(
            auth.authenticate(None, None, ip()).unwrap_err(),
            Denied::Missing
        );
    }

    #[test]
    fn each_failure_waits_longer_up_to_the_most() {
        let auth = Auth::new(Some("s3cret-token-0123456789".into()), 8, vec![])
            .with_failure_delay(Duration::from_millis(300));
        let other = IpAddr::from([127, 0, 0, 2]);
        let mut waits = Vec::new();
        for _ in 0..9 {
            let _ = auth.authenticate(Some("bad"), None, ip());
            waits.push(auth.failure_delay(ip()).as_millis());
        }
        // 25 ms doubling, capped; the most once limited (the eighth failure and the 429).
        assert_eq!(waits, [25, 50, 100, 200, 300, 300, 300, 300, 300]);
        assert_eq!(auth.failure_delay(other), Duration::from_millis(25));
        assert!(matches!(
            auth.authenticate(Some("s3cret-token-0123456789"), None, ip()),
            Ok(Access::User(_))
        ));
        let off = Auth::new(Some("s3cret-token-0123456789".into()), 8, vec![]);
        let _ = off.authenticate(Some("bad"), None, ip());
        assert_eq!(off.failure_delay(ip()), Duration::ZERO);
    }

    #[test]
    fn requests_without_a_credential_are_not_counted() {
        let auth = Auth::new(Some("s3cret-token-0123456789".into()), 3, vec![]);
        for _ in 0..20 {
            assert_eq!(
                auth.authenticate(None, None, ip()).unwrap_err(),
                Denied::Missing
            );
        }
        assert_eq!(
            auth.authenticate(Some("bad"), None, ip()).unwrap_err(),
            Denied::Invalid,
            "the first wrong token after many bare requests is not limited"
        );
    }

    fn with_sso() -> Auth {
        let users = std::collections::BTreeMap::from([
            ("alice@example.com".to_owned(), Scopes::ADMIN),
            ("viewer@example.com".to_owned(), Scopes::VIEW),
            ("gone@example.com".to_owned(), Scopes::NONE),
        ]);
        let header = hyper::header::HeaderName::from_static("x-forwarded-email");
        Auth::new(Some("s3cret-token-0123456789".into()), 3, vec![]).with_sign_in(SignIn::new(
            Some(header),
            &users,
            Scopes::VIEW,
        ))
    }

    #[test]
    fn a_proxied_user_is_named_and_scoped_by_the_config() {
        let auth = with_sso();
        let user = |access: Result<Access, Denied>| match access {
            Ok(Access::User(u)) => (u.name.clone(), u.scopes, u.credential()),
            other => panic!("{other:?}"),
        };
        let alice = auth.authenticate(None, Some("alice@example.com"), ip());
        assert_eq!(
            user(alice),
            ("alice@example.com".into(), Scopes::ADMIN, "proxy".into())
        );
        let viewer = auth.authenticate(None, Some("viewer@example.com"), ip());
        assert_eq!(user(viewer).1, Scopes::VIEW);
        // Unlisted: the default scopes.
        let carol = auth.authenticate(None, Some("carol@example.com"), ip());
        assert_eq!(
            user(carol),
            ("carol@example.com".into(), Scopes::VIEW, "proxy".into())
        );
        // No scopes: 403's reason says who they are signed in as.
        let gone = auth.authenticate(None, Some("gone@example.com"), ip());
        assert_eq!(
            gone.unwrap_err(),
            Denied::NoScopes("gone@example.com".into())
        );
        assert!(Denied::NoScopes("gone@example.com".into())
            .reason()
            .contains("signed in as gone@example.com"));
        let refused = Auth::new(Some("s3cret-token-0123456789".into()), 3, vec![])
            .with_sign_in(SignIn::new(None, &Default::default(), Scopes::NONE));
        assert!(matches!(
            refused.authenticate(None, Some("carol@example.com"), ip()),
            Err(Denied::NoScopes(n)) if n == "carol@example.com"
        ));
    }

    #[test]
    fn a_valid_token_wins_and_a_stale_one_does_not_lock_a_proxied_user_out() {
        let auth = with_sso();
        // A script through the proxy: its token, not the person the proxy signed in.
        let owner = auth.authenticate(
            Some("s3cret-token-0123456789"),
            Some("viewer@example.com"),
            ip(),
        );
        assert!(
            matches!(owner, Ok(Access::User(u)) if u.scopes == Scopes::ADMIN && u.credential() == "daemon-token")
        );
        let share = auth.create_share(Uuid::new_v4(), Role::Viewer, None, false, "alice");
        assert!(matches!(
            auth.authenticate(Some(share.token()), Some("alice@example.com"), ip()),
            Ok(Access::Share(_))
        ));
        // A stale cookie, many times over the failure limit: neither refused nor counted.
        for _ in 0..10 {
            assert!(matches!(
                auth.authenticate(Some("stale-cookie"), Some("viewer@example.com"), ip()),
                Ok(Access::User(u)) if u.name == "viewer@example.com"
            ));
        }
        assert_eq!(
            auth.authenticate(Some("bad"), None, ip()).unwrap_err(),
            Denied::Invalid,
            "the stale cookies were not counted as failures"
        );
    }

    #[test]
    fn disabled_auth_allows_everything() {
        let auth = Auth::new(None, 1, vec![]);
        assert!(matches!(
            auth.authenticate(None, None, ip()),
            Ok(Access::User(_))
        ));
    }

    #[test]
    fn token_sources() {
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_static("a=b; ptyhub_token=fromcookie"),
        );
        assert_eq!(presented_token(&h, &[]).as_deref(), Some("fromcookie"));
        let q = vec![("access_token".to_owned(), "fromquery".to_owned())];
        assert_eq!(presented_token(&h, &q).as_deref(), Some("fromquery"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer fromheader"));
        assert_eq!(presented_token(&h, &q).as_deref(), Some("fromheader"));
    }

    #[test]
    fn hosts_without_auth_must_be_loopback() {
        let auth = Auth::new(None, 1, vec![]);
        let ok = |h: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(HOST, HeaderValue::from_static(h));
            auth.host_allowed(&m)
        };
        assert!(
            ok("127.0.0.1:1977") && ok("localhost:1977") && ok("[::1]:1977") && ok("localhost")
        );
        assert!(!ok("rebind.evil.example:1977") && !ok("10.0.0.1:1977"));
        assert!(Auth::new(Some("x".repeat(20)), 1, vec![]).host_allowed(&HeaderMap::new()));
    }

    #[test]
    fn origins() {
        let auth = Auth::new(None, 1, vec!["https://proxy.example".into()]);
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:1977"));
        assert!(auth.origin_allowed(&h));
        h.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:1977"));
        assert!(auth.origin_allowed(&h));
        h.insert(ORIGIN, HeaderValue::from_static("https://proxy.example"));
        assert!(auth.origin_allowed(&h));
        h.insert(ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(!auth.origin_allowed(&h));
        h.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(!auth.origin_allowed(&h));
    }
}
