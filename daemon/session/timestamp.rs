//! Times as the protocol writes them: RFC 3339, UTC, to the second.

use std::time::SystemTime;

/// RFC 3339 UTC, second precision.
pub fn rfc3339(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&fmt).unwrap_or_default()
}
