//! What a user may do: the four scopes (`view`, `write`, `exec`, `admin`), how they are
//! written, and what each one implies.

use std::fmt;

/// A set of scopes. `admin` implies every other; `write` implies `view` (nobody types blind);
/// `exec` implies nothing (a script's token may run commands without watching sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Scopes(u8);

/// Each scope: its bit, its name, and the seed's name for it (`sandbox:…`, accepted as well).
const NAMES: [(u8, &str, &str); 4] = [
    (1, "view", "sandbox:view"),
    (2, "write", "sandbox:connect"),
    (4, "exec", "sandbox:exec"),
    (8, "admin", "sandbox:admin"),
];

impl Scopes {
    /// None.
    pub const NONE: Scopes = Scopes(0);
    /// Watch sessions: their screens, output, events, recordings, the session list.
    pub const VIEW: Scopes = Scopes(1);
    /// Type, resize, chat, upload, rename (and view).
    pub const WRITE: Scopes = Scopes(2 | 1);
    /// Run commands and language servers.
    pub const EXEC: Scopes = Scopes(4);
    /// Create and end sessions, share them, manage tokens, read the audit trail (and all).
    pub const ADMIN: Scopes = Scopes(8 | 4 | 2 | 1);

    /// Whether every scope of `other` is in this set.
    pub fn has(self, other: Scopes) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets together.
    pub fn with(self, other: Scopes) -> Scopes {
        Scopes(self.0 | other.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// One scope by name (`view`, `write`, `exec`, `admin`, or the seed's `sandbox:connect`,
    /// `sandbox:exec`, `sandbox:admin`), with what it implies.
    pub fn named(name: &str) -> Result<Scopes, String> {
        let name = name.trim();
        NAMES
            .iter()
            .zip([Self::VIEW, Self::WRITE, Self::EXEC, Self::ADMIN])
            .find(|((_, short, seed), _)| {
                name.eq_ignore_ascii_case(short) || name.eq_ignore_ascii_case(seed)
            })
            .map(|(_, scopes)| scopes)
            .ok_or_else(|| {
                format!("unknown scope {name:?}: the scopes are view, write, exec and admin")
            })
    }

    /// A list of scope names, separated by commas or spaces (an empty list is no scope).
    pub fn parse(list: &str) -> Result<Scopes, String> {
        list.split([',', ' '])
            .filter(|s| !s.is_empty())
            .try_fold(Scopes::NONE, |all, name| Ok(all.with(Scopes::named(name)?)))
    }

    /// The scopes from a list of names.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Scopes, String> {
        names.iter().try_fold(Scopes::NONE, |all, n| {
            Ok(all.with(Scopes::parse(n.as_ref())?))
        })
    }

    /// The names of the scopes in the set, implied ones included, in the order
    /// view, write, exec, admin.
    pub fn names(self) -> Vec<&'static str> {
        NAMES
            .iter()
            .filter(|(bit, _, _)| self.0 & bit != 0)
            .map(|(_, name, _)| *name)
            .collect()
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

impl serde::Serialize for Scopes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names())
    }
}

impl<'de> serde::Deserialize<'de> for Scopes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        Scopes::from_names(&names).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implications_and_names() {
        assert_eq!(
            Scopes::named("admin").unwrap().names(),
            ["view", "write", "exec", "admin"]
        );
        assert_eq!(Scopes::named("write").unwrap().names(), ["view", "write"]);
        assert_eq!(Scopes::named("exec").unwrap().names(), ["exec"]);
        assert!(!Scopes::EXEC.has(Scopes::VIEW));
        assert!(Scopes::WRITE.has(Scopes::VIEW) && !Scopes::VIEW.has(Scopes::WRITE));
        assert_eq!(
            Scopes::parse("view, exec").unwrap(),
            Scopes::VIEW.with(Scopes::EXEC)
        );
        assert_eq!(Scopes::parse("sandbox:connect").unwrap(), Scopes::WRITE);
        assert_eq!(Scopes::parse("").unwrap(), Scopes::NONE);
        assert!(Scopes::parse("root")
            .unwrap_err()
            .contains("view, write, exec and admin"));
        let json = serde_json::to_string(&Scopes::WRITE).unwrap();
        assert_eq!(json, r#"["view","write"]"#);
        assert_eq!(
            serde_json::from_str::<Scopes>(&json).unwrap(),
            Scopes::WRITE
        );
        assert_eq!(Scopes::ADMIN.to_string(), "view,write,exec,admin");
    }
}
