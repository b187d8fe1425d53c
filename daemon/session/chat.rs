//! The session's chat: a line's rules and the history a joiner is replayed.

/// One chat message as kept in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatLine {
    /// Who wrote it (trimmed).
    pub user_name: String,
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
