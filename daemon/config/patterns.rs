//! An assistant's attention settings: the screen patterns of `[assistants.KEY.state]`
//! (regular expressions checked while the config is read, so that a bad one is a config error
//! at its file, line and column, and compiled for matching when a session first reads a screen
//! with them) and `state_hooks`, how ptyhub wires the agent's own hooks to tell it its state.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use regex::{Regex, RegexBuilder};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Largest compiled pattern (1 MiB of automaton): a pattern that needs more is surely a
/// mistake, and matching it on every screen change would cost the screen thread.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Most sources remembered as already checked (the default config has a few dozen).
const CHECKED_MAX: usize = 512;

/// The sources that compiled in this process ([`check`]).
static CHECKED: Mutex<BTreeSet<Box<str>>> = Mutex::new(BTreeSet::new());

/// The screen patterns of one assistant: a screen whose bottom rows match a `waiting` pattern
/// needs its user; else one matching a `working` pattern is busy (docs: README, "Attention").
///
/// Compiled on first use, not as the config is read: the default config's assistants' patterns
/// held about 1 MiB compiled, from start, in a daemon that may never run those assistants.
/// Cloning shares the compiled patterns *and their match caches*: a cloned `Regex` would start
/// a cache pool of its own (tens of KiB once used), which every session cloning its
/// assistant's patterns paid for.
#[derive(Debug, Clone, Default)]
pub struct ScreenPatterns(Arc<Patterns>);

/// The sources as written, and their compiled form once asked for.
#[derive(Debug, Default)]
struct Patterns {
    waiting: Box<[Box<str>]>,
    working: Box<[Box<str>]>,
    compiled: OnceLock<Compiled>,
}

#[derive(Debug)]
struct Compiled {
    waiting: Box<[Regex]>,
    working: Box<[Regex]>,
}

impl ScreenPatterns {
    /// Patterns from their sources, each already checked with [`compile`].
    fn from_sources(waiting: Vec<Box<str>>, working: Vec<Box<str>>) -> Self {
        Self(Arc::new(Patterns {
            waiting: waiting.into(),
            working: working.into(),
            compiled: OnceLock::new(),
        }))
    }

    /// Whether there is no pattern at all (the terminal rule alone decides).
    pub fn is_empty(&self) -> bool {
        self.0.waiting.is_empty() && self.0.working.is_empty()
    }

    /// Tried first (compiled on the first call).
    pub fn waiting(&self) -> &[Regex] {
        &self.compiled().waiting
    }

    /// Tried when no `waiting` pattern matched (compiled on the first call).
    pub fn working(&self) -> &[Regex] {
        &self.compiled().working
    }

    fn compiled(&self) -> &Compiled {
        self.0.compiled.get_or_init(|| {
            // Each source compiled once already, while the config was read: a failure now
            // cannot happen, and would only leave that pattern out.
            let all =
                |sources: &[Box<str>]| sources.iter().filter_map(|s| compile(s).ok()).collect();
            Compiled {
                waiting: all(&self.0.waiting),
                working: all(&self.0.working),
            }
        })
    }
}

/// Two sets of patterns are the same when their sources are.
impl PartialEq for ScreenPatterns {
    fn eq(&self, other: &Self) -> bool {
        self.0.waiting == other.0.waiting && self.0.working == other.0.working
    }
}

impl Eq for ScreenPatterns {}

/// How ptyhub tells an agent to report its state (`state_hooks`): by wiring the agent's own
/// hooks to `ptyhub notify` when it starts the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StateHooks {
    /// No wiring: the screen and the terminal decide (and the program may still call
    /// `ptyhub notify` itself).
    #[default]
    None,
    /// Claude Code: `--settings` with command hooks.
    Claude,
    /// Codex: `-c notify=[…]` (turn ends).
    Codex,
    /// Gemini CLI: a per-session system-defaults settings file with command hooks.
    Gemini,
}

impl StateHooks {
    /// The config's spelling of each.
    pub const NAMES: [&'static str; 4] = ["claude", "codex", "gemini", "none"];

    /// The config's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StateHooks::None => "none",
            StateHooks::Claude => "claude",
            StateHooks::Codex => "codex",
            StateHooks::Gemini => "gemini",
        }
    }

    /// Read back from its spelling (a live upgrade's image); unknown is `None`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(StateHooks::None),
            "claude" => Some(StateHooks::Claude),
            "codex" => Some(StateHooks::Codex),
            "gemini" => Some(StateHooks::Gemini),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for StateHooks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        StateHooks::parse(&name).ok_or_else(|| {
            de::Error::custom(format!(
                "unknown state_hooks {name:?}: expected one of {}",
                StateHooks::NAMES.join(", ")
            ))
        })
    }
}

/// One pattern as written: a regular expression (Rust `regex` syntax), checked as it is read
/// (compiled, then let go: see [`ScreenPatterns`]).
pub(super) struct Pattern(pub(super) Box<str>);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Pattern;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a regular expression string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                check(s).map_err(E::custom)?;
                Ok(Pattern(s.into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether `source` compiles, remembering the sources that did: every read of a config reads
/// the embedded default too, and compiling its patterns to check them was nine tenths of the
/// time (a reload, the fuzz target `config_toml`). Only successes are remembered, and only so
/// many, so a source is never taken for good without having compiled in this process.
fn check(source: &str) -> Result<(), String> {
    // A panic elsewhere while the set was held leaves it whole (an insert is all or nothing).
    let checked = || CHECKED.lock().unwrap_or_else(PoisonError::into_inner);
    if checked().contains(source) {
        return Ok(());
    }
    compile(source)?;
    let mut set = checked();
    if set.len() < CHECKED_MAX {
        set.insert(source.into());
    }
    Ok(())
}

/// `source` compiled, or why not, in one line.
pub fn compile(source: &str) -> Result<Regex, String> {
    RegexBuilder::new(source)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            // The crate's message draws the pattern with a caret over several lines; its last
            // line says what is wrong.
            let text = e.to_string();
            let why = text
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("invalid")
                .trim_start_matches("error: ")
                .to_owned();
            format!("invalid regular expression {source:?}: {why}")
        })
}

/// `[assistants.KEY.state]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPatterns {
    #[serde(default)]
    waiting: Vec<Pattern>,
    #[serde(default)]
    working: Vec<Pattern>,
}

impl RawPatterns {
    /// The patterns as the daemon reads them.
    pub(super) fn finish(self) -> ScreenPatterns {
        ScreenPatterns::from_sources(
            self.waiting.into_iter().map(|p| p.0).collect(),
            self.working.into_iter().map(|p| p.0).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_pattern_says_what_is_wrong_in_one_line() {
        let e = compile("(abc").unwrap_err();
        assert_eq!(e, "invalid regular expression \"(abc\": unclosed group");
        assert!(compile(r"(?m)^\s*Do you want to proceed\?").is_ok());
        // Look-around is not Rust regex syntax.
        assert!(compile("(?=x)").unwrap_err().contains("look-around"));
    }

    #[test]
    fn a_pattern_checked_once_is_not_compiled_again_and_a_bad_one_is_always_refused() {
        let good = r"(?m)^\s*a pattern only this test uses\?";
        assert!(check(good).is_ok());
        assert!(CHECKED.lock().unwrap().contains(good), "remembered");
        assert!(check(good).is_ok());
        for _ in 0..2 {
            let e = check("(only this test's").unwrap_err();
            assert!(e.contains("unclosed group"), "{e}");
        }
        assert!(!CHECKED.lock().unwrap().contains("(only this test's"));
    }

    #[test]
    fn patterns_are_compiled_when_first_used_and_shared_by_clones() {
        let config = crate::config::Config::default();
        let patterns = &config.assistants["claude"].state;
        assert!(!patterns.is_empty());
        assert!(
            patterns.0.compiled.get().is_none(),
            "nothing compiled as the config is read"
        );
        let clone = patterns.clone();
        assert_eq!(clone.waiting().len(), patterns.0.waiting.len());
        assert!(
            patterns.0.compiled.get().is_some(),
            "the clone compiled them for both"
        );
        assert!(std::ptr::eq(clone.working(), patterns.working()));
        assert!(clone.waiting()[0].as_str() == &*patterns.0.waiting[0]);
    }

    #[test]
    fn hook_kinds_are_spelled_as_in_the_config() {
        for name in StateHooks::NAMES {
            assert_eq!(StateHooks::parse(name).map(StateHooks::as_str), Some(name));
        }
        assert_eq!(StateHooks::parse("vim"), None);
    }
}
