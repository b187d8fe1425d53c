//! The words of attention: a session's state, where it was learnt, the quick replies a waiting
//! screen offers, the state as everyone sees it, and a change of state as the daemon tells it.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Longest reason kept, in characters (a report's longer reason is refused; one the daemon
/// derives from a screen or an agent's hook is cut).
pub const MAX_REASON_CHARS: usize = 200;

/// Whether a session works, waits for its user, is done, or has ended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Busy: printing, running something, or an agent between its steps.
    #[default]
    Working,
    /// It needs its user: a permission or question prompt.
    Waiting,
    /// Done, at its prompt.
    Idle,
    /// The program has exited.
    Exited,
}

impl State {
    /// Every state, as the API spells it.
    pub const NAMES: [&'static str; 4] = ["working", "waiting", "idle", "exited"];

    /// As the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Working => "working",
            State::Waiting => "waiting",
            State::Idle => "idle",
            State::Exited => "exited",
        }
    }

    /// From its spelling.
    pub fn parse(name: &str) -> Option<State> {
        match name {
            "working" => Some(State::Working),
            "waiting" => Some(State::Waiting),
            "idle" => Some(State::Idle),
            "exited" => Some(State::Exited),
            _ => None,
        }
    }
}

/// Where a state was learnt, most trusted first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The agent said so: its hook, `ptyhub notify`, `POST /api/sessions/{id}/state`.
    Hook,
    /// The assistant's screen patterns matched.
    Screen,
    /// Output, quiet and the terminal's foreground process group.
    #[default]
    Terminal,
    /// The program exited.
    Exit,
}

impl Source {
    /// As the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Hook => "hook",
            Source::Screen => "screen",
            Source::Terminal => "terminal",
            Source::Exit => "exit",
        }
    }
}

/// A quick reply a waiting screen offers: what to show, and the keys that answer with it (as a
/// terminal sends them: Enter is a carriage return).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Choice {
    /// What the prompt calls it ("Yes", "No, and tell Claude what to do differently").
    pub label: String,
    /// What typing it sends ("1", "y\r").
    pub keys: String,
}

/// A session's state as everyone sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// The state.
    pub state: State,
    /// When the session entered it.
    pub since: SystemTime,
    /// Why, for people: "Claude wants to run: cargo test", "quiet for 3 s at a shell prompt".
    pub reason: String,
    /// Where it was learnt.
    pub source: Source,
    /// The quick replies, while `waiting` and the screen offers some.
    pub choices: Vec<Choice>,
}

impl SessionState {
    /// A session just started (or restarted): working, as the program starts.
    pub fn starting(reason: &str) -> Self {
        SessionState {
            state: State::Working,
            since: SystemTime::now(),
            reason: reason.to_owned(),
            source: Source::Terminal,
            choices: Vec::new(),
        }
    }

    /// `since` in milliseconds since the Unix epoch.
    pub fn since_ms(&self) -> u64 {
        unix_ms(self.since)
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A session entered a new state: what the daemon tells its subscribers (the journal's `state`
/// event, the notifier), once per change of state, never per redraw.
#[derive(Debug, Clone)]
pub struct Transition {
    /// The session.
    pub session: Uuid,
    /// Its number, if it has one.
    pub num: Option<u8>,
    /// Its name, possibly empty.
    pub name: String,
    /// The assistant's key.
    pub assistant: String,
    /// The assistant's display name.
    pub assistant_name: String,
    /// The state it left.
    pub from: State,
    /// The state it is in now: `since` is when it changed.
    pub to: SessionState,
}

/// `text` made fit for a reason: control characters become spaces, runs of blanks one space,
/// cut to [`MAX_REASON_CHARS`] (with an ellipsis).
pub fn reason_from(text: &str) -> String {
    let mut out = String::new();
    let mut blank = false;
    for c in text.trim().chars() {
        if c.is_control() || c.is_whitespace() {
            blank = true;
            continue;
        }
        if blank && !out.is_empty() {
            out.push(' ');
        }
        blank = false;
        out.push(c);
    }
    if out.chars().count() > MAX_REASON_CHARS {
        out = out.chars().take(MAX_REASON_CHARS - 1).collect();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_spelled_as_the_api_says() {
        for name in State::NAMES {
            assert_eq!(State::parse(name).map(State::as_str), Some(name));
            let json = serde_json::to_string(&State::parse(name)).unwrap();
            assert_eq!(json, format!("\"{name}\""));
        }
        assert_eq!(State::parse("busy"), None);
        assert_eq!(serde_json::to_string(&Source::Hook).unwrap(), "\"hook\"");
    }

    #[test]
    fn reasons_are_one_short_line() {
        assert_eq!(reason_from("  a\r\n\tb   c "), "a b c");
        let long = reason_from(&"x".repeat(500));
        assert_eq!(long.chars().count(), MAX_REASON_CHARS);
        assert!(long.ends_with('…'));
        assert_eq!(reason_from("\u{1b}[31m"), "[31m");
    }
}
