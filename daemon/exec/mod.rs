//! Exec: one process per request (docs/protocol.md section 13), on pipes instead of a PTY, bound to
//! the client that asked for it. This module owns what every exec shares whatever its
//! transport: the running-exec limit, the tasks that shutdown waits for, and how an ended exec
//! is counted and journaled. [`child`] is the process; [`websocket`] drives pipe mode; the
//! SSE transport is in `http::exec`, next to the other event streams.

pub mod child;
pub mod websocket;

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;

use crate::journal::Journal;
use crate::metrics::{ExecOutcome, Metrics};
use crate::session::ExitInfo;
use crate::shutdown::Shutdown;

/// The id of the next exec, in this process (its `PTYHUB_EXEC` marker): unique across every
/// daemon a process holds (tests run several), as the marker must be.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Every exec of the daemon: how many run, and the tasks that own them.
pub struct Execs {
    /// Most running at once (`limits.max_execs`).
    max: usize,
    running: AtomicUsize,
    /// The task of every exec: shutdown waits until each has ended its processes.
    tasks: TaskTracker,
    /// Time between SIGTERM and SIGKILL when an exec's group is ended.
    pub kill_grace: Duration,
    /// Cancelled when the daemon shuts down: every exec ends its group.
    pub shutdown: Shutdown,
    journal: Arc<Journal>,
    /// The daemon's counters: execs running and ended, and their traffic.
    metrics: Arc<Metrics>,
}

impl Execs {
    /// No exec running yet; they will be counted in `metrics`.
    pub fn new(
        max: usize,
        kill_grace: Duration,
        shutdown: Shutdown,
        journal: Arc<Journal>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Execs {
            max,
            running: AtomicUsize::new(0),
            tasks: TaskTracker::new(),
            kill_grace,
            shutdown,
            journal,
            metrics,
        })
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The counters execs count in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A place for one more exec, `None` when `max` run already. `shown` is the command as the
    /// client wrote it, for the journal.
    pub fn admit(self: &Arc<Self>, shown: String) -> Option<Permit> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()?;
        self.metrics.execs_running.add(1);
        Some(Permit {
            execs: self.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shown,
            started: Instant::now(),
        })
    }

    /// Runs an exec's task; shutdown waits for it.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, task: F) {
        self.tasks.spawn(task);
    }

    /// Waits until every exec has ended (call after cancelling `shutdown`).
    pub async fn wait(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// One running exec's place under the limit; given back when dropped.
pub struct Permit {
    execs: Arc<Execs>,
    /// The exec's id.
    pub id: u64,
    shown: String,
    started: Instant,
}

impl Permit {
    /// Milliseconds since the exec was admitted.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts and journals the end of the exec (`exit: None`: it never started); gives the
    /// place back. Returns its duration, milliseconds.
    pub fn finish(self, exit: Option<&ExitInfo>, timed_out: bool) -> u64 {
        let ms = self.elapsed_ms();
        let outcome = match exit {
            None => ExecOutcome::FailedToStart,
            Some(_) if timed_out => ExecOutcome::TimedOut,
            Some(e) if e.signal.is_some() => ExecOutcome::Signalled,
            Some(_) => ExecOutcome::Exited,
        };
        self.execs.metrics.exec_ended(outcome);
        self.execs
            .journal
            .exec(&self.shown, exit.map(|e| e.code), ms);
        ms
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.execs.running.fetch_sub(1, Ordering::AcqRel);
        self.execs.metrics.execs_running.sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_holds_and_places_come_back() {
        let metrics = Arc::new(Metrics::default());
        let execs = Execs::new(2, Duration::ZERO, Shutdown::new(), Journal::new(), metrics);
        let a = execs.admit("a".into()).expect("first");
        let b = execs.admit("b".into()).expect("second");
        assert!(execs.admit("c".into()).is_none());
        assert_eq!(execs.metrics().execs_running.get(), 2);
        assert_ne!(a.id, b.id);
        a.finish(Some(&ExitInfo::exited(0)), false);
        assert!(execs.admit("d".into()).is_some());
        drop(b);
        assert_eq!(execs.metrics().execs_running.get(), 0);
    }
}
