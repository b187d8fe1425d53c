//! The session's chat: a line's rules, and the history (owned by the actor) a joiner is
//! replayed.

use std::collections::VecDeque;

use crate::upgrade::image::ChatImage;

/// One chat message as kept in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatLine {
    /// Who wrote it: a user's verified name, or the name a guest gave (trimmed).
    pub user_name: String,
    /// Whether a guest (a share link's holder) wrote it: `user_name` is then only what it
    /// calls itself, never a user's name.
    pub guest: bool,
    /// What they wrote (trimmed).
    pub text: String,
    /// When the session received it, RFC 3339 UTC.
    pub timestamp: String,
}

/// Chat lines a joiner receives before `ready`.
pub const CHAT_REPLAY: usize = 50;

/// Trims and checks a chat message against the configured lengths.
pub fn validate_chat(
    user_name: &str,
    text: &str,
    limits: &crate::config::LimitsConfig,
) -> Result<(String, String), String> {
    let (user, text) = (user_name.trim(), text.trim());
    let (max_user, max_text) = (limits.max_name_chars, limits.max_chat_chars);
    let user_len = user.chars().count();
    if user_len == 0 || user_len > max_user {
        return Err(format!("chat userName must be 1 to {max_user} characters"));
    }
    let text_len = text.chars().count();
    if text_len == 0 || text_len > max_text {
        return Err(format!("chat text must be 1 to {max_text} characters"));
    }
    Ok((user.to_owned(), text.to_owned()))
}

/// The session's chat history: the latest lines, at most `keep` (`session.chat_history`).
pub(super) struct Chat {
    lines: VecDeque<ChatLine>,
    keep: usize,
}

impl Chat {
    /// An empty history keeping `keep` lines.
    pub(super) fn new(keep: usize) -> Self {
        Self {
            lines: VecDeque::new(),
            keep,
        }
    }

    /// A history keeping `keep` lines, starting with those of a live upgrade's image.
    pub(super) fn from_image(keep: usize, lines: &[ChatImage]) -> Self {
        let lines = lines
            .iter()
            .map(|c| ChatLine {
                user_name: c.user_name.clone(),
                guest: c.guest,
                text: c.text.clone(),
                timestamp: c.timestamp.clone(),
            })
            .collect();
        Self { lines, keep }
    }

    /// Every line kept, oldest first, for a live upgrade's image.
    pub(super) fn image(&self) -> Vec<ChatImage> {
        self.lines
            .iter()
            .map(|c| ChatImage {
                user_name: c.user_name.clone(),
                guest: c.guest,
                text: c.text.clone(),
                timestamp: c.timestamp.clone(),
            })
            .collect()
    }

    /// Keeps `line`, dropping the oldest one when the history is full (nothing is kept when
    /// its length is 0).
    pub(super) fn add(&mut self, line: &ChatLine) {
        if self.lines.len() == self.keep {
            self.lines.pop_front();
        }
        if self.keep > 0 {
            self.lines.push_back(line.clone());
        }
    }

    /// The latest [`CHAT_REPLAY`] lines, oldest first, for a joiner.
    pub(super) fn replay(&self) -> Vec<ChatLine> {
        let from = self.lines.len().saturating_sub(CHAT_REPLAY);
        self.lines.iter().skip(from).cloned().collect()
    }
}
