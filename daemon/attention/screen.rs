//! Reading a screen for attention, on the screen thread: its text (the visible rows as plain
//! text, kept in a [`ScreenSlot`] for whoever shows a miniature), the verdict of the
//! assistant's patterns on its bottom rows, whether the cursor's line looks like a prompt, and
//! the quick replies the screen offers.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use regex::Regex;

use super::state::{reason_from, Choice, State};
use crate::config::ScreenPatterns;

/// Most quick replies read off one screen.
const MAX_CHOICES: usize = 9;
/// Longest label of a quick reply, characters.
const MAX_LABEL_CHARS: usize = 80;

/// The visible screen as plain text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScreenText {
    /// Counts the texts a slot has held (0: none yet): a reader that saw this number has seen
    /// this text.
    pub generation: u64,
    /// Each visible row, without trailing blanks.
    pub rows: Vec<String>,
    /// The cursor, (row, column), from 0.
    pub cursor: (u16, u16),
}

impl ScreenText {
    /// The text of `screen` as it stands.
    pub fn of(screen: &vt100::Screen) -> ScreenText {
        let cols = screen.size().1.get();
        ScreenText {
            generation: 0,
            rows: screen
                .rows(0, cols)
                .map(|mut row| {
                    let kept = row.trim_end().len();
                    row.truncate(kept);
                    row
                })
                .collect(),
            cursor: screen.cursor_position(),
        }
    }

    /// Whether the rows are the same (the generation and the cursor aside).
    pub fn same_rows(&self, other: &ScreenText) -> bool {
        self.rows == other.rows
    }

    /// The bottom `n` non-empty rows, oldest first, no-break spaces read as spaces, joined with
    /// newlines: what the screen patterns are matched on.
    pub fn bottom(&self, n: usize) -> String {
        let mut kept: Vec<&str> = self
            .rows
            .iter()
            .rev()
            .filter(|r| !r.trim().is_empty())
            .take(n)
            .map(String::as_str)
            .collect();
        kept.reverse();
        kept.join("\n").replace('\u{a0}', " ")
    }

    /// The text of the cursor's row, trimmed.
    pub fn cursor_line(&self) -> &str {
        self.rows
            .get(usize::from(self.cursor.0))
            .map_or("", |r| r.trim())
    }
}

/// The latest text of a session's screen, shared: readers take it without waking the screen
/// thread.
#[derive(Debug, Default)]
pub struct ScreenSlot {
    text: Mutex<Arc<ScreenText>>,
}

impl ScreenSlot {
    /// The latest text (generation 0 and no rows before the first).
    pub fn get(&self) -> Arc<ScreenText> {
        self.lock().clone()
    }

    /// Puts `text` in, numbered after the one it replaces.
    pub fn put(&self, mut text: ScreenText) {
        let mut slot = self.lock();
        text.generation = slot.generation + 1;
        *slot = Arc::new(text);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arc<ScreenText>> {
        // Replaced whole under the lock: a poisoned slot still holds a whole text.
        self.text.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a screen's patterns say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `Waiting` or `Working`.
    pub state: State,
    /// For a `waiting` screen, the question it asks (the last line ending in `?` at or above
    /// the match, else the line that matched), as a reason.
    pub question: String,
}

/// One reading of a screen, made when it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// When it was made.
    pub at: Instant,
    /// What the assistant's patterns say, if any matched.
    pub verdict: Option<Verdict>,
    /// The cursor's line, when it looks like a prompt.
    pub prompt: Option<String>,
    /// The quick replies the bottom rows offer.
    pub choices: Vec<Choice>,
}

/// Reads `text` with `patterns` on its bottom `rows` non-empty rows.
pub fn read(text: &ScreenText, patterns: &ScreenPatterns, rows: usize, at: Instant) -> Reading {
    let bottom = text.bottom(rows);
    let verdict = judge(&bottom, patterns);
    let line = text.cursor_line();
    let prompt = prompt_like(line).then(|| line.to_owned());
    let waiting = matches!(&verdict, Some(v) if v.state == State::Waiting);
    let choices = if waiting || prompt.is_some() {
        choices(&bottom)
    } else {
        Vec::new()
    };
    Reading {
        at,
        verdict,
        prompt,
        choices,
    }
}

/// The patterns' verdict on `bottom`: waiting patterns first, then working ones.
pub fn judge(bottom: &str, patterns: &ScreenPatterns) -> Option<Verdict> {
    if let Some(found) = patterns.waiting().iter().find_map(|p| p.find(bottom)) {
        return Some(Verdict {
            state: State::Waiting,
            question: question(bottom, found.start()),
        });
    }
    patterns
        .working()
        .iter()
        .any(|p| p.is_match(bottom))
        .then(|| Verdict {
            state: State::Working,
            question: String::new(),
        })
}

/// The question a waiting screen asks: the last line ending in `?` at or above the line where
/// the match at byte `at` starts, else that line; without box-drawing edges.
fn question(bottom: &str, at: usize) -> String {
    let line_end = bottom[at..].find('\n').map_or(bottom.len(), |i| at + i);
    let upto = &bottom[..line_end];
    let clean = |l: &str| {
        l.trim_matches(|c: char| c.is_whitespace() || ('\u{2500}'..='\u{257f}').contains(&c))
            .to_owned()
    };
    let asked = upto.lines().rev().map(clean).find(|l| l.ends_with('?'));
    let line = upto.lines().next_back().map(clean).unwrap_or_default();
    reason_from(&asked.unwrap_or(line))
}

/// Whether the cursor's line looks like a prompt: it ends in `?`, `:`, `>`, `$`, `#`, `]` or
/// `)` (after trimming), or offers `[y/n]`, `(y/n)` in any case.
pub fn prompt_like(line: &str) -> bool {
    static YES_NO: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\[[yY]/[nN]\]|\([yY]/[nN]\)").unwrap_or_else(|e| panic!("{e}"))
    });
    let line = line.trim();
    line.ends_with(['?', ':', '>', '$', '#', ']', ')']) || YES_NO.is_match(line)
}

/// The quick replies `bottom` offers: numbered options ("❯ 1. Yes", keys "1"), else Aider's
/// `(Y)es/(N)o/…` (keys "y" and Enter), else a `[y/N]`-style question (y or n, and Enter).
pub fn choices(bottom: &str) -> Vec<Choice> {
    static NUMBERED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)^\s*[│┃]?\s*[❯›>●○]?\s*(\d)\.\s+(\S[^\n]*?)\s*[│┃]?\s*$")
            .unwrap_or_else(|e| panic!("{e}"))
    });
    static LETTERED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\(([A-Z])\)([^/\[\n]*)").unwrap_or_else(|e| panic!("{e}")));
    static YES_NO: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\[[yY]/[nN]\]|\([yY]/[nN]\)").unwrap_or_else(|e| panic!("{e}"))
    });
    let label = |s: &str| s.trim().chars().take(MAX_LABEL_CHARS).collect::<String>();
    let mut found: Vec<Choice> = Vec::new();
    for c in NUMBERED.captures_iter(bottom) {
        let (key, text) = (&c[1], label(&c[2]));
        // A number seen again (a list redrawn further down) is the newer one.
        found.retain(|f| f.keys != key);
        found.push(Choice {
            label: text,
            keys: key.to_owned(),
        });
    }
    if !found.is_empty() {
        found.truncate(MAX_CHOICES);
        return found;
    }
    let last = bottom.lines().next_back().unwrap_or_default();
    if last.contains("(Y)es/(N)o") {
        return LETTERED
            .captures_iter(last)
            .take(MAX_CHOICES)
            .map(|c| Choice {
                label: label(&format!("{}{}", &c[1], &c[2])),
                keys: format!("{}\r", c[1].to_ascii_lowercase()),
            })
            .collect();
    }
    if YES_NO.is_match(last) {
        return vec![
            Choice {
                label: "yes".to_owned(),
                keys: "y\r".to_owned(),
            },
            Choice {
                label: "no".to_owned(),
                keys: "n\r".to_owned(),
            },
        ];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A screen of `rows` × `cols` after `text` (lines joined with CR LF).
    fn screen(rows: u16, cols: u16, lines: &[&str]) -> ScreenText {
        let mut vt = vt100::Parser::new(
            std::num::NonZeroU16::new(rows).unwrap(),
            std::num::NonZeroU16::new(cols).unwrap(),
            0,
        );
        vt.process(lines.join("\r\n").as_bytes());
        ScreenText::of(vt.screen())
    }

    fn patterns(key: &str) -> ScreenPatterns {
        Config::default().assistants[key].state.clone()
    }

    /// What `key`'s default patterns say of a screen showing `lines`.
    fn verdict(key: &str, lines: &[&str]) -> Option<State> {
        let text = screen(40, 120, lines);
        read(&text, &patterns(key), 15, Instant::now())
            .verdict
            .map(|v| v.state)
    }

    #[test]
    fn text_bottom_and_cursor_line() {
        let text = screen(6, 20, &["one  ", "", "two\u{a0}x", "$ "]);
        assert_eq!(text.rows[0], "one");
        assert_eq!(text.bottom(2), "two x\n$");
        assert_eq!(text.bottom(15), "one\ntwo x\n$");
        assert_eq!(text.cursor, (3, 2));
        assert_eq!(text.cursor_line(), "$");
    }

    #[test]
    fn the_slot_numbers_what_it_holds() {
        let slot = ScreenSlot::default();
        assert_eq!(slot.get().generation, 0);
        slot.put(screen(2, 10, &["a"]));
        slot.put(screen(2, 10, &["b"]));
        let now = slot.get();
        assert_eq!((now.generation, now.rows[0].as_str()), (2, "b"));
    }

    /// Claude Code's screens as captured in its users' tests (the research file, 1.4).
    #[test]
    fn claude() {
        let dialog = [
            "╭──────────────────────────────────────────────╮",
            "│ Bash command                                 │",
            "│                                              │",
            "│   touch /tmp/fixture-test-file.txt           │",
            "│   Create empty test file in /tmp             │",
            "│                                              │",
            "│ Do you want to proceed?                      │",
            "│ ❯ 1. Yes                                     │",
            "│   2. Yes, and always allow access to tmp/ from this project │",
            "│   3. No                                      │",
            "╰──────────────────────────────────────────────╯",
            " Esc to cancel · Tab to amend · ctrl+e to explain",
        ];
        assert_eq!(verdict("claude", &dialog), Some(State::Waiting));
        let text = screen(40, 120, &dialog);
        let r = read(&text, &patterns("claude"), 15, Instant::now());
        assert_eq!(r.verdict.unwrap().question, "Do you want to proceed?");
        let keys: Vec<&str> = r.choices.iter().map(|c| c.keys.as_str()).collect();
        assert_eq!(keys, ["1", "2", "3"]);
        assert_eq!(r.choices[0].label, "Yes");
        assert_eq!(r.choices[2].label, "No");
        let edit = [" Do you want to make this edit to main.rs?", " ❯ 1. Yes"];
        assert_eq!(verdict("claude", &edit), Some(State::Waiting));
        let older = [
            " ❯ 1. Yes",
            "   3. No, and tell Claude what to do differently (esc)",
        ];
        assert_eq!(verdict("claude", &older), Some(State::Waiting));
        let question = [
            " ❯ 1. Rust",
            "   2. Go",
            " Enter to select · ↑/↓ to navigate · Esc to cancel",
        ];
        assert_eq!(verdict("claude", &question), Some(State::Waiting));
        let trust = [
            " Is this a project you created or one you trust?",
            " ❯ 1. Yes, I trust this folder",
        ];
        assert_eq!(verdict("claude", &trust), Some(State::Waiting));
        let busy = [
            "⏺ Reading the tests.",
            "",
            "✳ Brewing… (5s · ↓ 1.2k tokens · esc to interrupt)",
            "",
            "────────────────────────────────",
            "❯\u{a0}",
            "────────────────────────────────",
        ];
        assert_eq!(verdict("claude", &busy), Some(State::Working));
        let custom_status_line = ["✶ Combobulating… (12s · ↑ 3.4k tokens)", "❯"];
        assert_eq!(verdict("claude", &custom_status_line), Some(State::Working));
        let idle = [
            "⏺ Done: the tests pass.",
            "",
            "✻ Cooked for 3s · done 8:04 AM",
            "────────────────────────────────",
            "❯\u{a0}Try \"fix lint errors\"",
            "────────────────────────────────",
            "  ? for shortcuts",
        ];
        assert_eq!(verdict("claude", &idle), None);
    }

    /// Codex CLI's (strings of `approval_overlay.rs`; layout from captures of 0.157).
    #[test]
    fn codex() {
        let approval = [
            "  Would you like to run the following command?",
            "",
            "  Environment: local",
            "  $ pnpm exec playwright test",
            "",
            "› 1. Yes, proceed (y)",
            "  2. Yes, and don't ask again for commands that start with `pnpm exec` (p)",
            "  3. No, and tell Codex what to do differently (esc)",
            "",
            "  Press enter to confirm or esc to cancel",
        ];
        assert_eq!(verdict("codex", &approval), Some(State::Waiting));
        let busy = [
            "• Working (0s • esc to interrupt)",
            "",
            "› Ask Codex to do anything",
        ];
        assert_eq!(verdict("codex", &busy), Some(State::Working));
        let idle = [
            "─ Worked for 1m 02s ─",
            "",
            "› Ask Codex to do anything",
            "",
            "  ? for shortcuts   100% context left",
        ];
        assert_eq!(verdict("codex", &idle), None);
    }

    /// Gemini CLI's (`ToolConfirmationMessage.tsx`, `LoadingIndicator.tsx`).
    #[test]
    fn gemini() {
        let confirm = [
            "│ ?  Shell ls -la                                     │",
            "│                                                     │",
            "│ Allow execution of [Shell]?                         │",
            "│                                                     │",
            "│ ● 1. Allow once                                     │",
            "│   2. Allow for this session                         │",
            "│   3. No, suggest changes (esc)                      │",
            "⠏ Waiting for user confirmation...",
        ];
        assert_eq!(verdict("gemini", &confirm), Some(State::Waiting));
        let busy = [
            "⠋ Thinking... (esc to cancel, 12s)",
            "",
            ">   Type your message",
        ];
        assert_eq!(verdict("gemini", &busy), Some(State::Working));
        let idle = [">   Type your message or @path/to/file", "? for shortcuts"];
        assert_eq!(verdict("gemini", &idle), None);
    }

    /// Aider's (`aider/io.py`).
    #[test]
    fn aider() {
        let ask = ["Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]: "];
        assert_eq!(verdict("aider", &ask), Some(State::Waiting));
        let text = screen(40, 120, &ask);
        let r = read(&text, &patterns("aider"), 15, Instant::now());
        let got: Vec<(&str, &str)> = r
            .choices
            .iter()
            .map(|c| (c.label.as_str(), c.keys.as_str()))
            .collect();
        assert_eq!(
            got,
            [("Yes", "y\r"), ("No", "n\r"), ("Don't ask again", "d\r")]
        );
        let group = ["Run shell commands? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]: "];
        assert_eq!(verdict("aider", &group), Some(State::Waiting));
        // Quoted higher up, followed by the input prompt: not a question now.
        let quoted = ["It asks: Add file? (Y)es/(N)o [Yes]:", "", "> "];
        assert_eq!(verdict("aider", &quoted), None);
        assert_eq!(
            verdict("aider", &["Waiting for gpt-4o"]),
            Some(State::Working)
        );
        assert_eq!(verdict("aider", &["diff> "]), None);
    }

    /// Goose's (cliclack prompts of goose-cli).
    #[test]
    fn goose() {
        let ask = [
            "◆  Goose would like to call the above tool, do you allow?",
            "│  ● Allow",
            "│  ○ Always Allow",
            "│  ○ Deny",
        ];
        assert_eq!(verdict("goose", &ask), Some(State::Waiting));
        let answered = [
            "◇  Goose would like to call the above tool, do you allow?",
            "│  Allow",
            "( O)> ",
        ];
        assert_eq!(verdict("goose", &answered), None);
        assert_eq!(verdict("goose", &["◐  Thinking..."]), Some(State::Working));
    }

    /// OpenCode's (captures in ccmanager's `opencode.ts`).
    #[test]
    fn opencode() {
        let ask = [
            "△ Permission required",
            "$ git status",
            "Allow once   Allow always   Reject",
            "⇆ select   enter confirm   esc reject",
        ];
        assert_eq!(verdict("opencode", &ask), Some(State::Waiting));
        let busy = ["  Generating...                 esc interrupt"];
        assert_eq!(verdict("opencode", &busy), Some(State::Working));
        assert_eq!(
            verdict("opencode", &["  Ask anything", "  enter send"]),
            None
        );
    }

    #[test]
    fn a_shell_has_no_patterns_but_prompts_and_questions() {
        assert!(patterns("shell").is_empty());
        for line in [
            "$",
            "user@host:~/src#",
            "Password:",
            ">>>",
            "remove regular file 'x'?",
            "Continue [y/N]",
        ] {
            assert!(prompt_like(line), "{line}");
        }
        for line in ["", "compiling ptyhub", "50%"] {
            assert!(!prompt_like(line), "{line}");
        }
        let yn = choices("Proceed? [y/N] ");
        assert_eq!(yn.len(), 2);
        assert_eq!(yn[0].keys, "y\r");
    }
}
