//! Values: one newtype per kind of setting that checks itself while it is deserialised (so the
//! TOML parser attaches the position of a bad value for us), and [`Checked`], which turns each
//! into the type the daemon reads. The bound each key is held to is written at the key, in
//! `keys`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Longest accepted duration (365 days): larger values are surely typos, and adding them to an
/// `Instant` could overflow.
const MAX_DURATION_MS: u64 = 365 * 24 * 3600 * 1000;

/// `usize::MAX` as a bound: sizes held in a `usize` can be no larger on this platform.
pub(super) const USIZE_MAX: u64 = usize::MAX as u64;

/// A value that checked itself while it was read, turned into the type the daemon reads (`T`,
/// the type of the key's field in its section).
pub(super) trait Checked<T> {
    /// The value as the daemon reads it.
    fn into_value(self) -> T;
}

/// A key that may be left unset (`#[unset = None]`) holds the checked value when it is set.
impl<C: Checked<T>, T> Checked<Option<T>> for C {
    fn into_value(self) -> Option<T> {
        Some(self.into_value())
    }
}

/// A list checks each of its items.
impl<C: Checked<T>, T> Checked<Vec<T>> for Vec<C> {
    fn into_value(self) -> Vec<T> {
        self.into_iter().map(Checked::into_value).collect()
    }
}

/// Types that any value of their kind is valid for: serde's own check (the TOML type) is all.
macro_rules! unchecked {
    ($($t:ty),*) => {$(
        impl Checked<$t> for $t {
            fn into_value(self) -> $t {
                self
            }
        }
    )*};
}
unchecked!(bool, String, std::path::PathBuf);

/// An integer in `MIN..=MAX`.
pub(super) struct Int<const MIN: u64, const MAX: u64>(pub(super) u64);

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Int<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const MIN: u64, const MAX: u64>;
        impl<const MIN: u64, const MAX: u64> V<MIN, MAX> {
            fn check<E: de::Error>(v: i128) -> Result<Int<MIN, MAX>, E> {
                match u64::try_from(v) {
                    Ok(n) if (MIN..=MAX).contains(&n) => Ok(Int(n)),
                    _ => Err(E::custom(format!(
                        "{v} is out of range: expected {}",
                        Self::range()
                    ))),
                }
            }
            fn range() -> String {
                if MAX == u64::MAX || MAX == USIZE_MAX {
                    format!("an integer of at least {MIN}")
                } else {
                    format!("an integer from {MIN} to {MAX}")
                }
            }
        }
        impl<const MIN: u64, const MAX: u64> Visitor<'_> for V<MIN, MAX> {
            type Value = Int<MIN, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&Self::range())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Self::check(i128::from(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Self::check(i128::from(v))
            }
        }
        d.deserialize_any(V::<MIN, MAX>)
    }
}

impl<const MIN: u64, const MAX: u64> Checked<u64> for Int<MIN, MAX> {
    fn into_value(self) -> u64 {
        self.0
    }
}

impl<const MIN: u64, const MAX: u64> Checked<usize> for Int<MIN, MAX> {
    fn into_value(self) -> usize {
        // Keys read as a usize are bounded by USIZE_MAX at most, so this always fits.
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<const MIN: u64, const MAX: u64> Checked<u16> for Int<MIN, MAX> {
    fn into_value(self) -> u16 {
        const { assert!(MAX <= u16::MAX as u64, "the key's bound does not fit a u16") };
        u16::try_from(self.0).unwrap_or(u16::MAX)
    }
}

/// A whole number of days in `MIN..=MAX`, read as a duration.
pub(super) struct Days<const MIN: u64, const MAX: u64>(Int<MIN, MAX>);

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Days<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Int::deserialize(d).map(Days)
    }
}

impl<const MIN: u64, const MAX: u64> Checked<Duration> for Days<MIN, MAX> {
    fn into_value(self) -> Duration {
        const {
            assert!(
                MAX <= u64::MAX / 86_400,
                "the key's bound overflows a duration"
            )
        };
        Duration::from_secs(self.0 .0 * 86_400)
    }
}

/// A duration written as a string ("5s", "500ms", "1h30m"), at least `MIN_MS` milliseconds.
pub(super) struct Dur<const MIN_MS: u64>(pub(super) Duration);

impl<'de, const MIN_MS: u64> Deserialize<'de> for Dur<MIN_MS> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const MIN_MS: u64>;
        impl<const MIN_MS: u64> Visitor<'_> for V<MIN_MS> {
            type Value = Dur<MIN_MS>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"500ms\", \"5s\" or \"1h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                let d = parse_duration(s).map_err(E::custom)?;
                if d.as_millis() < u128::from(MIN_MS) {
                    return Err(E::custom(format!("duration {s:?} must be more than 0")));
                }
                Ok(Dur(d))
            }
        }
        d.deserialize_any(V::<MIN_MS>)
    }
}

impl<const MIN_MS: u64> Checked<Duration> for Dur<MIN_MS> {
    fn into_value(self) -> Duration {
        self.0
    }
}

/// Parse "500ms", "5s", "10m", "1h", "2d" and sums such as "1h30m" or "1m 30s", to whole
/// milliseconds, at most 365 days (`ptyhub wait --timeout` reads its value this way too).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {s:?}: {why}");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad("it is empty (write e.g. \"5s\")"));
    }
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad(
                "expected a whole number followed by a unit (ms, s, m, h, d)",
            ));
        }
        let (number, tail) = rest.split_at(digits);
        let n: u64 = number.parse().map_err(|_| bad("the number is too large"))?;
        if tail.starts_with('.') {
            return Err(bad(
                "fractions are not supported: use a smaller unit (\"1500ms\")",
            ));
        }
        let tail = tail.trim_start();
        let unit_len = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" | "sec" | "secs" => 1000,
            "m" | "min" | "mins" => 60 * 1000,
            "h" | "hour" | "hours" => 3600 * 1000,
            "d" | "day" | "days" => 24 * 3600 * 1000,
            "" => return Err(bad("a unit is missing (ms, s, m, h or d)")),
            other => {
                return Err(bad(&format!(
                    "unknown unit {other:?} (use ms, s, m, h or d)"
                )))
            }
        };
        total_ms = n
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .filter(|&ms| ms <= MAX_DURATION_MS)
            .ok_or_else(|| bad("longer than 365 days"))?;
        rest = tail.trim_start();
    }
    Ok(Duration::from_millis(total_ms))
}

/// A socket address `IP:port`.
pub(super) struct Listen(pub(super) SocketAddr);

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Listen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address string IP:port, e.g. \"127.0.0.1:1977\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                s.trim().parse().map(Listen).map_err(|e| {
                    E::custom(format!(
                        "invalid listen address {s:?}: {e} (expected IP:port, e.g. \"127.0.0.1:1977\")"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Checked<SocketAddr> for Listen {
    fn into_value(self) -> SocketAddr {
        self.0
    }
}

/// An assistant's key: `[a-z0-9_-]+`, because it travels in URLs and JSON unescaped.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct AssistantKey(pub(super) String);

impl<'de> Deserialize<'de> for AssistantKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        table_key(d, "assistant").map(AssistantKey)
    }
}

/// A language's key (`[lsp.KEY]`, the `{lang}` of its path): as an assistant's.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct LangKey(pub(super) String);

impl<'de> Deserialize<'de> for LangKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        table_key(d, "language").map(LangKey)
    }
}

/// A table's key: lowercase letters, digits, `_` and `-`, as a `what` key.
fn table_key<'de, D: Deserializer<'de>>(d: D, what: &str) -> Result<String, D::Error> {
    let key = String::deserialize(d)?;
    let valid = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if valid {
        Ok(key)
    } else {
        Err(de::Error::custom(format!(
            "invalid {what} key {key:?}: use only a-z, 0-9, \"_\" and \"-\""
        )))
    }
}

/// A display name: not blank.
pub(super) struct DisplayName(pub(super) String);

impl<'de> Deserialize<'de> for DisplayName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name.trim().is_empty() {
            return Err(de::Error::custom("name must not be empty"));
        }
        Ok(DisplayName(name))
    }
}

/// An argument array: at least the program, which is not empty; no NUL anywhere (it cannot be
/// passed to `execve`).
pub(super) struct Argv(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for Argv {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(d)?;
        match super::assistants::argv_problem(&argv) {
            Some(problem) => Err(de::Error::custom(problem)),
            None => Ok(Argv(argv)),
        }
    }
}

/// Environment variables: names non-empty without `=` or NUL, values without NUL.
#[derive(Default)]
pub(super) struct EnvVars(pub(super) BTreeMap<String, String>);

impl<'de> Deserialize<'de> for EnvVars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let vars = BTreeMap::<String, String>::deserialize(d)?;
        for (name, value) in &vars {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(de::Error::custom(format!(
                    "invalid environment variable name {name:?}: it must be non-empty, \
                     without \"=\" or NUL"
                )));
            }
            if value.contains('\0') {
                return Err(de::Error::custom(format!(
                    "environment variable {name} cannot contain NUL"
                )));
            }
        }
        Ok(EnvVars(vars))
    }
}

/// A configured token: long enough to be worth having.
pub(super) struct Token(pub(super) String);

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = String::deserialize(d)?;
        if t.len() < 16 || !t.chars().all(|c| c.is_ascii_graphic()) {
            return Err(de::Error::custom(
                "token must be at least 16 printable ASCII characters without spaces",
            ));
        }
        Ok(Token(t))
    }
}

impl Checked<String> for Token {
    fn into_value(self) -> String {
        self.0
    }
}

/// A list of scope names (`["view", "exec"]`): a name that is not a scope is refused here, at
/// start, with the scopes there are.
pub(super) struct ScopeList(crate::auth::Scopes);

impl<'de> Deserialize<'de> for ScopeList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        crate::auth::Scopes::from_names(&names)
            .map(ScopeList)
            .map_err(de::Error::custom)
    }
}

impl Checked<crate::auth::Scopes> for ScopeList {
    fn into_value(self) -> crate::auth::Scopes {
        self.0
    }
}

/// `[auth.users]`: each user the proxy signs in by name (1 to 255 characters, no control
/// characters or commas, as the header's value must be) and their scopes.
pub(super) struct UserScopes(BTreeMap<String, crate::auth::Scopes>);

impl<'de> Deserialize<'de> for UserScopes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = BTreeMap::<String, ScopeList>::deserialize(d)?;
        let mut users = BTreeMap::new();
        for (name, scopes) in table {
            // A comma never reaches us inside a name: the header's last item is the name.
            if crate::auth::proxied::valid_name(&name).is_err()
                || name.trim() != name
                || name.contains(',')
            {
                return Err(de::Error::custom(format!(
                    "invalid user name {name:?}: 1 to 255 characters, no control characters \
                     or commas, no spaces around it"
                )));
            }
            users.insert(name, scopes.0);
        }
        Ok(UserScopes(users))
    }
}

impl Checked<BTreeMap<String, crate::auth::Scopes>> for UserScopes {
    fn into_value(self) -> BTreeMap<String, crate::auth::Scopes> {
        self.0
    }
}

/// An HTTP header's name (`X-Forwarded-Email`, `Remote-User`).
pub(super) struct HeaderField(hyper::header::HeaderName);

impl<'de> Deserialize<'de> for HeaderField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        hyper::header::HeaderName::from_bytes(name.trim().as_bytes())
            .map(HeaderField)
            .map_err(|_| {
                de::Error::custom(format!(
                    "invalid header name {name:?}: letters, digits and \"-\", e.g. \
                     \"X-Forwarded-Email\""
                ))
            })
    }
}

impl Checked<hyper::header::HeaderName> for HeaderField {
    fn into_value(self) -> hyper::header::HeaderName {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("5s"), Duration::from_secs(5));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("10m"), Duration::from_secs(600));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("2d"), Duration::from_secs(2 * 86400));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok(" 1m 30s "), Duration::from_secs(90));
        assert_eq!(ok("5 sec"), Duration::from_secs(5));
        assert_eq!(ok("365d"), Duration::from_secs(365 * 86400));
        for bad in [
            "",
            " ",
            "5",
            "s",
            "-1s",
            "1.5s",
            "5x",
            "1h 30",
            "365d1ms",
            "99999999999999999999s",
            "1e3s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
