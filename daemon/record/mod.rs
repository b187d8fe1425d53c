//! Session recordings: every session recorded as asciicast v2 into the configured directory,
//! by a task per session that follows its output log ([`writer`]); the files on disk listed,
//! served, deleted and pruned by age ([`catalog`]).

pub mod catalog;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;
use tracing::warn;
use uuid::Uuid;

use crate::config::RecordingConfig;
use crate::metrics::Metrics;
use crate::session::SessionHandle;
use crate::shutdown::Shutdown;
pub use catalog::RecordingInfo;

/// How often old recordings are pruned (besides at start).
const PRUNE_EVERY: Duration = Duration::from_secs(24 * 3600);

/// The daemon's recordings.
pub struct Recordings {
    cfg: RecordingConfig,
    /// The recorder tasks, so shutdown can let them finish their files.
    tasks: TaskTracker,
    /// The daemon's counters: recordings that stop early are counted.
    metrics: Arc<Metrics>,
}

impl Recordings {
    /// Recordings as configured, counted into `metrics`.
    pub fn new(cfg: RecordingConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            tasks: TaskTracker::new(),
            metrics,
        })
    }

    /// The directory of the `.cast` files.
    pub fn dir(&self) -> &PathBuf {
        &self.cfg.dir
    }

    /// Starts recording a session just created (nothing when recording is off).
    pub fn start(&self, handle: &SessionHandle) {
        self.record(handle, None);
    }

    /// Goes on recording a session adopted in a live upgrade: appends to its file from log
    /// offset `from`, `since_start` after the recording began.
    pub fn resume(&self, handle: &SessionHandle, since_start: Duration, from: u64) {
        self.record(handle, Some(writer::Resume { since_start, from }));
    }

    fn record(&self, handle: &SessionHandle, resume: Option<writer::Resume>) {
        if !self.cfg.enabled {
            return;
        }
        let Ok(feed) = handle.feed_recorder(self.cfg.input) else {
            return;
        };
        let job = writer::Job {
            id: handle.id(),
            assistant: handle.info().assistant.clone(),
            log: handle.log().clone(),
            feed,
            session: handle.downgrade(),
            dir: self.cfg.dir.clone(),
            max_bytes: self.cfg.max_bytes_per_session,
            resume,
            metrics: self.metrics.clone(),
        };
        self.tasks.spawn(writer::run(job));
    }

    /// The `.cast` file of session `id`, if it has one.
    pub fn file(&self, id: Uuid) -> Option<PathBuf> {
        let path = catalog::cast_path(&self.cfg.dir, id);
        path.is_file().then_some(path)
    }

    /// The listing of one recording; `live`: whether its session runs.
    pub async fn info(&self, id: Uuid, live: bool) -> Option<RecordingInfo> {
        let dir = self.cfg.dir.clone();
        tokio::task::spawn_blocking(move || catalog::info(&dir, id, live))
            .await
            .ok()
            .flatten()
    }

    /// Every recording on disk, oldest first; `live` says which sessions run.
    pub async fn list(&self, live: impl Fn(Uuid) -> bool) -> Vec<RecordingInfo> {
        let dir = self.cfg.dir.clone();
        let ids = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || catalog::ids(&dir)
        })
        .await
        .unwrap_or_default();
        let ids: Vec<(Uuid, bool)> = ids.into_iter().map(|id| (id, live(id))).collect();
        let mut all = tokio::task::spawn_blocking(move || {
            ids.into_iter()
                .filter_map(|(id, live)| catalog::info(&dir, id, live))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        all.sort_by(|a, b| a.started.cmp(&b.started).then(a.id.cmp(&b.id)));
        all
    }

    /// Deletes session `id`'s recording; false when it had none.
    pub async fn delete(&self, id: Uuid) -> std::io::Result<bool> {
        let dir = self.cfg.dir.clone();
        tokio::task::spawn_blocking(move || catalog::delete(&dir, id))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }

    /// Prunes recordings older than `keep_days` now and then daily, until shutdown; `live`
    /// says which sessions run (theirs are kept).
    pub async fn prune_daily(
        self: Arc<Self>,
        shutdown: Shutdown,
        live: impl Fn(Uuid) -> bool + Clone + Send + 'static,
    ) {
        loop {
            let (dir, keep, live) = (self.cfg.dir.clone(), self.cfg.keep, live.clone());
            if let Err(e) =
                tokio::task::spawn_blocking(move || catalog::prune(&dir, keep, live)).await
            {
                warn!("pruning recordings failed: {e}");
            }
            tokio::select! {
                _ = tokio::time::sleep(PRUNE_EVERY) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Waits, at most `limit`, for the recorders of ended sessions to finish their files.
    pub async fn finish(&self, limit: Duration) {
        self.tasks.close();
        if tokio::time::timeout(limit, self.tasks.wait())
            .await
            .is_err()
        {
            warn!("some recordings were not finished in time");
        }
    }
}
