//! `GET /api/version` (public): the daemon's version, this image's start, the live upgrades so
//! far and the last one that failed.

use super::AppState;

/// `GET /api/version` reply.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Version {
    /// The daemon's version.
    version: &'static str,
    /// Its process id (the same across live upgrades).
    pid: u32,
    /// When the running image started, RFC 3339.
    image_started: String,
    /// The same, milliseconds since the Unix epoch.
    image_started_ms: u64,
    /// Live upgrades so far.
    upgrades: u64,
    /// Sessions now.
    sessions: usize,
    /// The last upgrade that failed, if any.
    last_upgrade_error: Option<UpgradeError>,
}

/// A failed live upgrade.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpgradeError {
    /// When, RFC 3339.
    at: String,
    /// When, milliseconds since the Unix epoch.
    at_ms: u64,
    /// What went wrong.
    message: String,
}

/// What `/api/version` says: the version, this image's start, the upgrades so far and the
/// last one that failed.
pub(super) fn version(state: &AppState) -> Version {
    let status = state.upgrades.status();
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    Version {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        image_started: crate::session::rfc3339(status.image_started),
        image_started_ms: ms(status.image_started),
        upgrades: status.upgrades,
        sessions: state.registry.len(),
        last_upgrade_error: status.last_error.map(|(at, message)| UpgradeError {
            at: crate::session::rfc3339(at),
            at_ms: ms(at),
            message,
        }),
    }
}
