//! Exec: one process per request (docs/protocol.md section 13), on pipes instead of a PTY, bound to
//! the client that asked for it. This module owns what every exec shares whatever its
//! transport: the running-exec limit, the tasks that shutdown waits for, and how an ended exec
//! is counted and journaled. [`child`] is the process; [`websocket`] drives pipe mode; the
//! SSE transport is in `http::exec`, next to the other event streams. Language servers
//! (`crate::lsp`) are run the same way, under a limit of their own ([`Kind::Lsp`]).

pub mod child;
pub mod websocket;

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;

use serde_json::json;

use crate::audit::{Actor, Audit, Event as AuditEvent};
use crate::journal::Journal;
use crate::metrics::{ExecOutcome, Metrics};
use crate::session::ExitInfo;
use crate::shutdown::Shutdown;

/// The id of the next exec, in this process (its `PTYHUB_EXEC` marker): unique across every
/// daemon a process holds (tests run several), as the marker must be.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a process is run for: each kind has its own limit and its own counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/api/exec` (`limits.max_execs`).
    Exec,
    /// A language server (`limits.max_lsp`).
    Lsp,
}

/// Every exec and language server of the daemon: how many run, and the tasks that own them.
pub struct Execs {
    /// Most running at once, by [`Kind`] (`limits.max_execs`, `limits.max_lsp`).
    max: [usize; 2],
    running: [AtomicUsize; 2],
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
    /// No exec running yet; they will be counted in `metrics`. At most `max` execs and
    /// `max_lsp` language servers run at once.
    pub fn new(
        max: usize,
        max_lsp: usize,
        kill_grace: Duration,
        shutdown: Shutdown,
        journal: Arc<Journal>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Execs {
            max: [max, max_lsp],
            running: [AtomicUsize::new(0), AtomicUsize::new(0)],
            tasks: TaskTracker::new(),
            kill_grace,
            shutdown,
            journal,
            metrics,
        })
    }

    /// The limit of `kind`.
    pub fn max(&self, kind: Kind) -> usize {
        self.max[kind as usize]
    }

    /// The counters execs count in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A place for one more process of `kind`, `None` when its limit run already. `shown` is
    /// the command as the client wrote it, for the journal.
    pub fn admit(self: &Arc<Self>, kind: Kind, shown: String) -> Option<Permit> {
        let max = self.max(kind);
        self.running[kind as usize]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        self.running_gauge(kind).add(1);
        Some(Permit {
            execs: self.clone(),
            kind,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shown,
            started: Instant::now(),
            witness: None,
        })
    }

    /// Runs an exec's task; shutdown waits for it.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, task: F) {
        self.tasks.spawn(task);
    }

    fn running_gauge(&self, kind: Kind) -> &crate::metrics::Gauge {
        match kind {
            Kind::Exec => &self.metrics.execs_running,
            Kind::Lsp => &self.metrics.lsp_running,
        }
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
    kind: Kind,
    /// The exec's id.
    pub id: u64,
    shown: String,
    started: Instant,
    /// Where its end is recorded, and as whom (an exec whose start was recorded).
    witness: Option<(Arc<Audit>, Actor)>,
}

impl Permit {
    /// Records the exec's start (`exec`: its id, `argv` and working directory) in `audit`
    /// as `actor`'s, and its end (`exec.exit`) once it is over.
    pub fn audited(
        mut self,
        audit: &Arc<Audit>,
        actor: Actor,
        argv: &[String],
        cwd: Option<&str>,
    ) -> Self {
        let detail = json!({"id": self.id, "argv": argv, "cwd": cwd});
        audit.record(AuditEvent::new("exec", &actor).with(detail));
        self.witness = Some((audit.clone(), actor));
        self
    }

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
        match self.kind {
            Kind::Exec => self.execs.metrics.exec_ended(outcome),
            Kind::Lsp => self.execs.metrics.lsp_ended(outcome),
        }
        self.execs
            .journal
            .exec(&self.shown, exit.map(|e| e.code), ms);
        if let Some((audit, actor)) = &self.witness {
            let detail = json!({
                "id": self.id, "started": exit.is_some(), "exitCode": exit.map(|e| e.code),
                "signal": exit.and_then(|e| e.signal.clone()), "timedOut": timed_out,
                "durationMs": ms,
            });
            audit.record(AuditEvent::new("exec.exit", actor).with(detail));
        }
        ms
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.execs.running[self.kind as usize].fetch_sub(1, Ordering::AcqRel);
        self.execs.running_gauge(self.kind).sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_holds_and_places_come_back() {
        let metrics = Arc::new(Metrics::default());
        let execs = Execs::new(
            2,
            1,
            Duration::ZERO,
            Shutdown::new(),
            Journal::new(),
            metrics,
        );
        let a = execs.admit(Kind::Exec, "a".into()).expect("first");
        let b = execs.admit(Kind::Exec, "b".into()).expect("second");
        assert!(execs.admit(Kind::Exec, "c".into()).is_none());
        assert_eq!(execs.metrics().execs_running.get(), 2);
        assert_ne!(a.id, b.id);
        // Language servers have their own limit.
        let lsp = execs
            .admit(Kind::Lsp, "lsp".into())
            .expect("a language server");
        assert!(execs.admit(Kind::Lsp, "lsp 2".into()).is_none());
        assert_eq!(execs.metrics().lsp_running.get(), 1);
        a.finish(Some(&ExitInfo::exited(0)), false);
        assert!(execs.admit(Kind::Exec, "d".into()).is_some());
        drop(b);
        lsp.finish(None, false);
        assert_eq!(execs.metrics().execs_running.get(), 0);
        assert_eq!(execs.metrics().lsp_running.get(), 0);
    }
}
