//! The recordings on disk: one `{uuid}.cast` per session and its sidecar `{uuid}.json` (id,
//! name, assistant, times), so recordings from earlier daemon runs are listed like the
//! current ones; and pruning by age.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use uuid::Uuid;

/// What the sidecar keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The session id.
    pub id: Uuid,
    /// The session's name when last seen.
    pub name: String,
    /// The assistant key.
    pub assistant: String,
    /// Start, RFC 3339 UTC.
    pub started: String,
    /// Start, seconds since the Unix epoch (for durations).
    pub started_unix: u64,
    /// End, RFC 3339 UTC; `None` while recording (or when the daemon stopped without ending
    /// it: its file's last change time is the end then).
    pub ended: Option<String>,
    /// Seconds recorded, once ended.
    pub duration: Option<f64>,
}

/// A recording as `GET /api/recordings` lists it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RecordingInfo {
    /// The session id.
    pub id: Uuid,
    /// The session's name.
    pub name: String,
    /// The assistant key.
    pub assistant: String,
    /// Start, RFC 3339 UTC.
    pub started: String,
    /// End, RFC 3339 UTC; null while the session runs.
    pub ended: Option<String>,
    /// Seconds from start to end (to now while it runs).
    pub duration: f64,
    /// Size of the `.cast` file.
    pub bytes: u64,
}

/// The `.cast` file of session `id` in `dir`.
pub fn cast_path(dir: &Path, id: Uuid) -> PathBuf {
    dir.join(format!("{id}.cast"))
}

fn meta_path(dir: &Path, id: Uuid) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// Writes the sidecar (to a temporary name first, so a reader never sees half of it).
pub fn write_meta(dir: &Path, meta: &Meta) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{}.json.tmp", meta.id));
    let text = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(&text)?;
    std::fs::rename(&tmp, meta_path(dir, meta.id))
}

/// The sidecar of session `id`'s recording.
pub fn read_meta(dir: &Path, id: Uuid) -> Option<Meta> {
    let text = std::fs::read(meta_path(dir, id)).ok()?;
    serde_json::from_slice(&text).ok()
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The listing of session `id`'s recording, if there is one. `live`: whether the session
/// still runs (its end is not known yet).
pub fn info(dir: &Path, id: Uuid, live: bool) -> Option<RecordingInfo> {
    let file = std::fs::metadata(cast_path(dir, id)).ok()?;
    let changed = file.modified().unwrap_or_else(|_| SystemTime::now());
    let meta = read_meta(dir, id).unwrap_or_else(|| Meta {
        id,
        name: String::new(),
        assistant: String::new(),
        started: crate::session::rfc3339(changed),
        started_unix: unix(changed) as u64,
        ended: None,
        duration: None,
    });
    let (ended, duration) = match (live, meta.ended, meta.duration) {
        (false, Some(ended), Some(duration)) => (Some(ended), duration),
        // A daemon that stopped abruptly never wrote the end: the file's last change is it.
        (false, _, _) => (
            Some(crate::session::rfc3339(changed)),
            (unix(changed) - meta.started_unix as f64).max(0.0),
        ),
        (true, _, _) => (
            None,
            (unix(SystemTime::now()) - meta.started_unix as f64).max(0.0),
        ),
    };
    Some(RecordingInfo {
        id,
        name: meta.name,
        assistant: meta.assistant,
        started: meta.started,
        ended,
        duration,
        bytes: file.len(),
    })
}

/// The ids of every recording in `dir`.
pub fn ids(dir: &Path) -> Vec<Uuid> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            Uuid::parse_str(name.strip_suffix(".cast")?).ok()
        })
        .collect()
}

/// Deletes session `id`'s recording and sidecar; false when there was no recording.
pub fn delete(dir: &Path, id: Uuid) -> std::io::Result<bool> {
    let _ = std::fs::remove_file(meta_path(dir, id));
    match std::fs::remove_file(cast_path(dir, id)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes the recordings whose file last changed more than `keep` ago, except those of
/// `live` sessions; returns how many went.
pub fn prune(dir: &Path, keep: Duration, live: impl Fn(Uuid) -> bool) -> usize {
    let Some(cutoff) = SystemTime::now().checked_sub(keep) else {
        return 0;
    };
    let mut pruned = 0;
    for id in ids(dir) {
        let old = std::fs::metadata(cast_path(dir, id))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cutoff);
        if old && !live(id) {
            match delete(dir, id) {
                Ok(_) => pruned += 1,
                Err(e) => warn!(recording = %id, "could not prune recording: {e}"),
            }
        }
    }
    if pruned > 0 {
        info!(pruned, dir = %dir.display(), "pruned old recordings");
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_prunes_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        std::fs::write(cast_path(dir.path(), a), b"{}\n").unwrap();
        std::fs::write(cast_path(dir.path(), b), b"{}\n[1.0, \"o\", \"x\"]\n").unwrap();
        std::fs::write(dir.path().join("other.txt"), b"").unwrap();
        let meta = Meta {
            id: a,
            name: "build".into(),
            assistant: "shell".into(),
            started: "2026-01-01T00:00:00Z".into(),
            started_unix: 1_767_225_600,
            ended: Some("2026-01-01T00:01:00Z".into()),
            duration: Some(60.0),
        };
        write_meta(dir.path(), &meta).unwrap();
        let mut found = ids(dir.path());
        found.sort();
        let mut want = vec![a, b];
        want.sort();
        assert_eq!(found, want);
        let ia = info(dir.path(), a, false).unwrap();
        assert_eq!(
            (ia.name.as_str(), ia.duration, ia.bytes),
            ("build", 60.0, 3)
        );
        let ib = info(dir.path(), b, true).unwrap();
        assert_eq!(ib.ended, None);
        // An hour old: pruned with a keep of a minute, unless live.
        let old = SystemTime::now() - Duration::from_secs(3600);
        for id in [a, b] {
            let f = std::fs::File::options()
                .write(true)
                .open(cast_path(dir.path(), id))
                .unwrap();
            f.set_modified(old).unwrap();
        }
        assert_eq!(prune(dir.path(), Duration::from_secs(60), |id| id == b), 1);
        assert_eq!(ids(dir.path()), vec![b]);
        assert!(!meta_path(dir.path(), a).exists());
        assert!(delete(dir.path(), b).unwrap());
        assert!(!delete(dir.path(), b).unwrap());
    }
}
