//! The rule for session names.

/// Trims and checks a session name: up to `max` (config, default 32) characters of
/// `[A-Za-z0-9 _-]`; empty clears the name.
pub fn validate_name(name: &str, max: usize) -> Result<String, String> {
    let name = name.trim();
    if name.chars().count() > max {
        return Err(format!("session name is longer than {max} characters"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-')))
    {
        return Err(format!(
            "session name may only hold letters, digits, spaces, '-' and '_' (found {bad:?})"
        ));
    }
    Ok(name.to_owned())
}
