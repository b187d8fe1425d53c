//! API tokens: named, scoped, revocable credentials for people and scripts (`ptyhub token`,
//! `/api/tokens`). A token is `ptyhub_` and 43 base64url characters (256 random bits), shown
//! once when it is made; only its SHA-256 is kept, in memory and in `<state dir>/tokens.json`
//! (mode 600, written whole under another name then renamed), so the file and the logs never
//! hold a token that works.
//!
//! Authorising is a hash lookup (a map from digest to token, then a constant-time compare of
//! the digest), and each token's [`User`] is built once: a request allocates nothing. When it
//! was last used is kept in memory and written lazily (at most once a minute, and at shutdown).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::{Scopes, User, Via};

/// What every API token starts with: tells it apart from the daemon token and share links.
pub const TOKEN_PREFIX: &str = "ptyhub_";
/// The file in the state directory that keeps the tokens' digests.
pub const TOKENS_FILE: &str = "tokens.json";
/// The longest a token may live: ten years.
pub const MAX_EXPIRES_IN_SECS: u64 = 10 * 365 * 24 * 3600;
/// The longest token name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// How often, at most, when tokens were last used is written to the file.
pub const LAST_USED_FLUSH: Duration = Duration::from_secs(60);

/// A SHA-256 digest.
type Digest = [u8; 32];

/// A fresh API token: the prefix and 256 random bits, base64url.
pub fn generate_api_token() -> String {
    let mut bytes = [0u8; 32];
    // The OS random source failing is not something a server can carry on without.
    getrandom::fill(&mut bytes).unwrap_or_else(|e| panic!("no OS randomness: {e}"));
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    format!("{TOKEN_PREFIX}{body}")
}

/// Whether `t` has the shape of an API token (the prefix and 43 base64url characters).
pub fn looks_like_api_token(t: &str) -> bool {
    t.strip_prefix(TOKEN_PREFIX).is_some_and(|b| {
        b.len() == 43
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    })
}

fn digest(token: &str) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A token's name, checked: 1 to 64 characters after trimming, none of them a control
/// character.
pub fn check_name(name: &str) -> Result<&str, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("name is empty".to_owned());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("name is longer than {MAX_NAME_CHARS} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("name contains a control character".to_owned());
    }
    Ok(name)
}

/// One token, as kept.
struct Entry {
    digest: Digest,
    name: String,
    created_at: SystemTime,
    created_by: String,
    expires_at: Option<SystemTime>,
    /// Unix milliseconds; 0: never used.
    last_used: AtomicU64,
    /// Its holder: built once, handed to every request that presents it.
    user: Arc<User>,
}

impl Entry {
    fn id(&self) -> &str {
        match &self.user.via {
            Via::Token { id, .. } => id,
            Via::DaemonToken | Via::Proxy => "",
        }
    }

    fn expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }

    fn info(&self) -> TokenInfo {
        let last = self.last_used.load(Ordering::Relaxed);
        TokenInfo {
            id: self.id().to_owned(),
            name: self.name.clone(),
            scopes: self.user.scopes,
            created_at: crate::session::rfc3339(self.created_at),
            created_by: self.created_by.clone(),
            last_used_at: (last != 0).then(|| crate::session::rfc3339(at_ms(last))),
            expires_at: self.expires_at.map(crate::session::rfc3339),
        }
    }

    fn stored(&self) -> StoredToken {
        let last = self.last_used.load(Ordering::Relaxed);
        StoredToken {
            id: self.id().to_owned(),
            name: self.name.clone(),
            scopes: self.user.scopes,
            sha256: self.digest.iter().map(|b| format!("{b:02x}")).collect(),
            created_ms: unix_ms(self.created_at),
            created_by: self.created_by.clone(),
            last_used_ms: (last != 0).then_some(last),
            expires_ms: self.expires_at.map(unix_ms),
        }
    }

    fn from_stored(s: StoredToken) -> Result<Entry, String> {
        let digest = parse_digest(&s.sha256).ok_or("sha256 is not 64 hex digits")?;
        let name = check_name(&s.name)?.to_owned();
        if s.id.is_empty() || s.id.len() > 64 || !s.id.bytes().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!("bad token id {:?}", s.id));
        }
        let expires_at = s.expires_ms.map(at_ms);
        Ok(Entry {
            digest,
            name,
            created_at: at_ms(s.created_ms),
            created_by: s.created_by,
            expires_at,
            last_used: AtomicU64::new(s.last_used_ms.unwrap_or(0)),
            user: Arc::new(User {
                name: s.name.trim().to_owned(),
                scopes: s.scopes,
                via: Via::Token {
                    id: s.id,
                    revoked: CancellationToken::new(),
                    expires_at,
                },
            }),
        })
    }
}

fn parse_digest(hex: &str) -> Option<Digest> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A token as `GET /api/tokens` lists it (never the token itself).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenInfo {
    /// Its id: what `DELETE /api/tokens/{token}` and `ptyhub token revoke` take.
    pub id: String,
    /// Its name, unique among live tokens.
    pub name: String,
    /// What it may do (implied scopes included: `write` lists `view` too).
    #[schema(value_type = Vec<String>)]
    pub scopes: Scopes,
    /// RFC 3339.
    pub created_at: String,
    /// The user who made it.
    pub created_by: String,
    /// RFC 3339, to the minute or so (written lazily); `null`: never used.
    pub last_used_at: Option<String>,
    /// RFC 3339; `null`: never expires.
    pub expires_at: Option<String>,
}

/// One token in `tokens.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredToken {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its scopes.
    pub scopes: Scopes,
    /// The SHA-256 of the token, hex.
    pub sha256: String,
    /// When it was made, Unix milliseconds.
    pub created_ms: u64,
    /// Who made it.
    pub created_by: String,
    /// When it was last used, Unix milliseconds.
    #[serde(default)]
    pub last_used_ms: Option<u64>,
    /// When it expires, Unix milliseconds.
    #[serde(default)]
    pub expires_ms: Option<u64>,
}

/// `tokens.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredFile {
    version: u32,
    tokens: Vec<StoredToken>,
}

/// Reads `tokens.json`: its tokens, or why the text is not such a file. Tokens that do not
/// check out (a bad digest, name or id, a second one with the same id or digest) are errors:
/// a file that was tampered with is refused as a whole, never half read.
pub fn parse_file(text: &str) -> Result<Vec<StoredToken>, String> {
    let file: StoredFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if file.version != 1 {
        return Err(format!("unknown version {}", file.version));
    }
    let mut ids = std::collections::HashSet::new();
    let mut digests = std::collections::HashSet::new();
    for t in &file.tokens {
        let digest = parse_digest(&t.sha256).ok_or("sha256 is not 64 hex digits")?;
        if !ids.insert(t.id.as_str()) || !digests.insert(digest) {
            return Err(format!("token {:?} is listed twice", t.id));
        }
    }
    Ok(file.tokens)
}

/// Why a token could not be made.
#[derive(Debug)]
pub enum CreateError {
    /// The request is wrong (400): says why.
    Bad(String),
    /// A live token has that name (409).
    Duplicate(String),
    /// `limits.max_api_tokens` are kept already (409).
    TooMany(usize),
    /// The file could not be written (500); nothing was made.
    Io(std::io::Error),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::Bad(why) => f.write_str(why),
            CreateError::Duplicate(name) => write!(f, "a token named {name:?} exists already"),
            CreateError::TooMany(max) => write!(
                f,
                "too many API tokens (limits.max_api_tokens = {max}): revoke some first"
            ),
            CreateError::Io(e) => write!(f, "the tokens file could not be written: {e}"),
        }
    }
}

/// A token just made: what lists it, and the token itself (shown this once).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Created {
    /// What the listing shows.
    #[serde(flatten)]
    pub info: TokenInfo,
    /// The token.
    pub token: String,
}

/// What presenting a token that looks like an API token comes to.
pub enum Lookup {
    /// A live token: its holder.
    User(Arc<User>),
    /// A token past its expiry.
    Expired,
    /// No such token (never made, or revoked).
    Unknown,
}

/// Every API token, by digest.
pub struct TokenStore {
    /// `None`: kept in memory only (a daemon in a test's process).
    path: Option<PathBuf>,
    max: usize,
    tokens: RwLock<HashMap<Digest, Arc<Entry>>>,
    /// Some token was used since the file was last written.
    used: AtomicBool,
}

impl TokenStore {
    /// A store that keeps nothing on disk, for at most `max` tokens.
    pub fn in_memory(max: usize) -> Self {
        Self {
            path: None,
            max,
            tokens: RwLock::new(HashMap::new()),
            used: AtomicBool::new(false),
        }
    }

    /// The store kept in `path`, read now (a missing file is no token yet). A file that cannot
    /// be read is an error: starting without its tokens would silently lock out every script.
    pub fn open(path: PathBuf, max: usize) -> std::io::Result<Self> {
        let mut map = HashMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let stored = parse_file(&text).map_err(|why| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: {why}", path.display()),
                    )
                })?;
                for s in stored {
                    let entry = Entry::from_stored(s).map_err(|why| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("{}: {why}", path.display()),
                        )
                    })?;
                    map.insert(entry.digest, Arc::new(entry));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Self {
            path: Some(path),
            max,
            tokens: RwLock::new(map),
            used: AtomicBool::new(false),
        })
    }

    /// The file the tokens are kept in, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Digest, Arc<Entry>>> {
        // Every critical section leaves the map consistent, so poisoning is harmless.
        self.tokens.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Digest, Arc<Entry>>> {
        self.tokens.write().unwrap_or_else(|e| e.into_inner())
    }

    /// How many tokens are kept.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no token is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Who `presented` names, if it is an API token: a hash and a map lookup, then a
    /// constant-time compare of the digests.
    pub fn lookup(&self, presented: &str) -> Lookup {
        if !presented.starts_with(TOKEN_PREFIX) {
            return Lookup::Unknown;
        }
        let d = digest(presented);
        let tokens = self.read();
        let Some(entry) = tokens.get(&d) else {
            return Lookup::Unknown;
        };
        if !bool::from(entry.digest.ct_eq(&d)) {
            return Lookup::Unknown;
        }
        let now = SystemTime::now();
        if entry.expired(now) {
            return Lookup::Expired;
        }
        entry.last_used.store(unix_ms(now), Ordering::Relaxed);
        self.used.store(true, Ordering::Relaxed);
        Lookup::User(entry.user.clone())
    }

    /// Every token, oldest first.
    pub fn list(&self) -> Vec<TokenInfo> {
        let mut all: Vec<_> = self.read().values().cloned().collect();
        all.sort_by(|a, b| (a.created_at, a.id()).cmp(&(b.created_at, b.id())));
        all.iter().map(|e| e.info()).collect()
    }

    /// Makes a token named `name` with `scopes`, expiring `expires_in` from now, on behalf of
    /// `created_by`; written to the file before it is answered.
    pub fn create(
        &self,
        name: &str,
        scopes: Scopes,
        expires_in: Option<Duration>,
        created_by: &str,
    ) -> Result<Created, CreateError> {
        let name = check_name(name).map_err(CreateError::Bad)?.to_owned();
        if scopes.is_empty() {
            return Err(CreateError::Bad(
                "scopes is empty: give at least one of view, write, exec, admin".to_owned(),
            ));
        }
        if expires_in.is_some_and(|e| e.is_zero() || e.as_secs() > MAX_EXPIRES_IN_SECS) {
            return Err(CreateError::Bad(format!(
                "expiresIn is 1 to {MAX_EXPIRES_IN_SECS} seconds (ten years)"
            )));
        }
        let now = SystemTime::now();
        let token = generate_api_token();
        let id = super::generate_token()[..16].to_owned();
        let expires_at = expires_in.and_then(|e| now.checked_add(e));
        let entry = Arc::new(Entry {
            digest: digest(&token),
            name: name.clone(),
            created_at: at_ms(unix_ms(now)),
            created_by: created_by.to_owned(),
            expires_at: expires_at.map(|t| at_ms(unix_ms(t))),
            last_used: AtomicU64::new(0),
            user: Arc::new(User {
                name: name.clone(),
                scopes,
                via: Via::Token {
                    id,
                    revoked: CancellationToken::new(),
                    expires_at: expires_at.map(|t| at_ms(unix_ms(t))),
                },
            }),
        });
        let mut tokens = self.write();
        if tokens.len() >= self.max {
            return Err(CreateError::TooMany(self.max));
        }
        if tokens
            .values()
            .any(|e| !e.expired(now) && e.name.eq_ignore_ascii_case(&name))
        {
            return Err(CreateError::Duplicate(name));
        }
        tokens.insert(entry.digest, entry.clone());
        if let Err(e) = self.save(&tokens) {
            tokens.remove(&entry.digest);
            return Err(CreateError::Io(e));
        }
        Ok(Created {
            info: entry.info(),
            token,
        })
    }

    /// Revokes the token with this id: it stops working at once and its open connections
    /// close. Returns its listing, or `None` if there is no such token.
    pub fn revoke(&self, id: &str) -> std::io::Result<Option<TokenInfo>> {
        let mut tokens = self.write();
        let Some(digest) = tokens.values().find(|e| e.id() == id).map(|e| e.digest) else {
            return Ok(None);
        };
        let Some(entry) = tokens.remove(&digest) else {
            return Ok(None);
        };
        if let Via::Token { revoked, .. } = &entry.user.via {
            revoked.cancel();
        }
        // Gone from memory whatever the disk says: a revocation must not wait on a full disk.
        // The error is the caller's to report, the file will be written by the next change.
        self.save(&tokens)?;
        Ok(Some(entry.info()))
    }

    /// Writes the file when a token was used since it was last written (when it was last
    /// used is kept lazily).
    pub fn flush(&self) -> std::io::Result<()> {
        if !self.used.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let tokens = self.read();
        self.save(&tokens)
    }

    /// Writes when tokens were last used every [`LAST_USED_FLUSH`] until `stop`, then once
    /// more.
    pub async fn flush_every_minute(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(LAST_USED_FLUSH) => {}
                _ = stop.cancelled() => break,
            }
            self.flush_logged();
        }
        self.flush_logged();
    }

    /// [`Self::flush`], a failure logged.
    pub fn flush_logged(&self) {
        if let Err(e) = self.flush() {
            tracing::warn!("could not write the API tokens' last use: {e}");
        }
    }

    /// Writes `tokens` whole under another name, then renames it over the file (mode 600).
    fn save(&self, tokens: &HashMap<Digest, Arc<Entry>>) -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut all: Vec<_> = tokens.values().collect();
        all.sort_by(|a, b| (a.created_at, a.id()).cmp(&(b.created_at, b.id())));
        let file = StoredFile {
            version: 1,
            tokens: all.iter().map(|e| e.stored()).collect(),
        };
        let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let tmp = path.with_extension("json.new");
        let _ = std::fs::remove_file(&tmp);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        out.write_all(text.as_bytes())?;
        out.write_all(b"\n")?;
        out.sync_all()?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_their_shape() {
        let t = generate_api_token();
        assert!(looks_like_api_token(&t), "{t}");
        assert_eq!(t.len(), TOKEN_PREFIX.len() + 43);
        assert_ne!(t, generate_api_token());
        assert!(!looks_like_api_token("ptyhub_short"));
    }

    #[test]
    fn create_lookup_revoke() {
        let store = TokenStore::in_memory(3);
        let made = store.create("ci", Scopes::EXEC, None, "alice").unwrap();
        match store.lookup(&made.token) {
            Lookup::User(u) => {
                assert_eq!((u.name.as_str(), u.scopes), ("ci", Scopes::EXEC));
            }
            _ => panic!("not found"),
        }
        assert!(store.list()[0].last_used_at.is_some());
        assert!(matches!(
            store.create(" CI ", Scopes::VIEW, None, "alice"),
            Err(CreateError::Duplicate(_))
        ));
        assert!(matches!(
            store.create("x", Scopes::NONE, None, "alice"),
            Err(CreateError::Bad(_))
        ));
        store.create("b", Scopes::VIEW, None, "alice").unwrap();
        store.create("c", Scopes::VIEW, None, "alice").unwrap();
        assert!(matches!(
            store.create("d", Scopes::VIEW, None, "alice"),
            Err(CreateError::TooMany(3))
        ));
        let Lookup::User(user) = store.lookup(&made.token) else {
            panic!()
        };
        assert!(store.revoke(&made.info.id).unwrap().is_some());
        assert!(matches!(&user.via, Via::Token { revoked, .. } if revoked.is_cancelled()));
        assert!(matches!(store.lookup(&made.token), Lookup::Unknown));
        assert!(store.revoke(&made.info.id).unwrap().is_none());
    }

    #[test]
    fn expired_tokens_say_so_and_free_their_name() {
        let store = TokenStore::in_memory(10);
        let made = store
            .create("soon", Scopes::VIEW, Some(Duration::from_millis(1)), "a")
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(matches!(store.lookup(&made.token), Lookup::Expired));
        store.create("soon", Scopes::VIEW, None, "a").unwrap();
    }

    #[test]
    fn the_file_keeps_digests_only_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKENS_FILE);
        let store = TokenStore::open(path.clone(), 10).unwrap();
        let made = store.create("ci", Scopes::WRITE, None, "alice").unwrap();
        let _ = store.lookup(&made.token);
        store.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&made.token[TOKEN_PREFIX.len()..]));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = TokenStore::open(path, 10).unwrap();
        assert!(matches!(again.lookup(&made.token), Lookup::User(u) if u.scopes == Scopes::WRITE));
        assert_eq!(again.list()[0].id, made.info.id);
        assert!(again.list()[0].last_used_at.is_some());
    }

    #[test]
    fn bad_files_are_refused() {
        assert!(parse_file("").is_err());
        assert!(parse_file(r#"{"version":2,"tokens":[]}"#).is_err());
        assert!(parse_file(r#"{"version":1,"tokens":[]}"#)
            .unwrap()
            .is_empty());
        let one = |id: &str, sha: &str| {
            format!(
                r#"{{"id":"{id}","name":"n","scopes":["view"],"sha256":"{sha}","createdMs":1,"createdBy":"a"}}"#
            )
        };
        let sha = "ab".repeat(32);
        let ok = format!(r#"{{"version":1,"tokens":[{}]}}"#, one("a1", &sha));
        assert_eq!(parse_file(&ok).unwrap().len(), 1);
        let twice = format!(
            r#"{{"version":1,"tokens":[{},{}]}}"#,
            one("a1", &sha),
            one("a2", &sha)
        );
        assert!(parse_file(&twice).is_err());
        let short = format!(r#"{{"version":1,"tokens":[{}]}}"#, one("a1", "abc"));
        assert!(parse_file(&short).is_err());
    }
}
