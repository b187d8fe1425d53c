//! Counters for `GET /metrics`, in the Prometheus text format. Each daemon has its own
//! [`Metrics`] (two daemons in one process never share a count), handed to whatever counts:
//! the sessions, the viewer drivers, exec, event streams, the recorder and the HTTP side. It
//! imports nothing of the daemon: what it shows about the sessions is given to [`Metrics::render`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (open streams).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes `n` away (never below zero).
    pub fn sub(&self, n: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Everything a daemon counts. Counting is a relaxed atomic add (errors by code take a lock:
/// they are rare).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Bytes from viewers to programs (input and pasted text).
    pub bytes_in: Counter,
    /// Live output bytes sent to viewers.
    pub bytes_out: Counter,
    /// Snapshots sent (joins and resyncs).
    pub snapshots: Counter,
    /// Viewers resynced with a snapshot because they fell behind.
    pub resyncs: Counter,
    /// Output bytes the screen model did not need to parse (plain text that scrolled away
    /// unseen while the parser was behind).
    pub parse_skipped: Counter,
    /// Times a session printing a lot gave its worker back after a read, so that a key
    /// typed into another session went first.
    pub turns_given: Counter,
    /// Times the idle daemon let go of its mapped code pages (`idle_pages.rs`).
    pub idle_page_releases: Counter,
    /// Files saved by uploads.
    pub uploads: Counter,
    /// Uploads refused or failed.
    pub upload_failures: Counter,
    /// Requests with a missing, wrong, expired or rate-limited token.
    pub auth_failures: Counter,
    /// Requests with `[auth] user_header` that was not believed: from a peer that is not a
    /// trusted proxy, or with a value that is no user name.
    pub user_header_ignored: Counter,
    /// Recordings stopped early: a failing disk, or their size cap.
    pub recording_failures: Counter,
    /// Server-sent event streams open now.
    pub sse_streams: Gauge,
    /// Exec processes running now.
    pub execs_running: Gauge,
    /// Language servers running now.
    pub lsp_running: Gauge,
    /// JSON-RPC messages passed from clients to language servers.
    pub lsp_messages_in: Counter,
    /// JSON-RPC messages passed from language servers to clients.
    pub lsp_messages_out: Counter,
    /// Idle sessions' screen models put away as snapshots.
    pub screens_parked: Gauge,
    /// Bytes those snapshots keep.
    pub screens_parked_bytes: Gauge,
    /// Execs that ended, by outcome, in [`ExecOutcome`] order.
    execs: [Counter; 4],
    /// Language servers that ended, by outcome, in [`ExecOutcome`] order.
    lsp: [Counter; 4],
    /// Notifications by outcome, in [`NotifyOutcome`] order.
    notifications: [Counter; 3],
    /// Error messages sent to viewers and refused requests, by code.
    errors: Mutex<BTreeMap<String, u64>>,
}

/// What `/metrics` shows about the sessions, read from the registry when it is rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounts {
    /// Sessions whose program runs.
    pub running: u64,
    /// Sessions whose program has exited.
    pub exited: u64,
    /// Viewers connected to any session.
    pub viewers: u64,
}

/// How an exec (or a language server) ended, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecOutcome {
    /// The process exited by itself (any code).
    Exited,
    /// A signal ended it (a client's, or the kill when its client went or the daemon stopped).
    Signalled,
    /// Its timeout ended it.
    TimedOut,
    /// It could not be started.
    FailedToStart,
}

impl ExecOutcome {
    const ALL: [ExecOutcome; 4] = [
        ExecOutcome::Exited,
        ExecOutcome::Signalled,
        ExecOutcome::TimedOut,
        ExecOutcome::FailedToStart,
    ];

    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            ExecOutcome::Exited => "exited",
            ExecOutcome::Signalled => "signalled",
            ExecOutcome::TimedOut => "timed_out",
            ExecOutcome::FailedToStart => "failed_to_start",
        }
    }
}

/// What became of one notification to one receiver, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyOutcome {
    /// The receiver took it.
    Sent,
    /// Every attempt failed, or the receiver refused it.
    Failed,
    /// Never attempted: pushed out of a full queue, or still queued when the daemon stopped.
    Dropped,
}

impl NotifyOutcome {
    const ALL: [NotifyOutcome; 3] = [
        NotifyOutcome::Sent,
        NotifyOutcome::Failed,
        NotifyOutcome::Dropped,
    ];

    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            NotifyOutcome::Sent => "sent",
            NotifyOutcome::Failed => "failed",
            NotifyOutcome::Dropped => "dropped",
        }
    }
}

impl Metrics {
    /// Counts `n` notifications that came to `outcome`.
    pub fn notified(&self, outcome: NotifyOutcome, n: u64) {
        self.notifications[outcome as usize].add(n);
    }

    /// Notifications counted so far with `outcome`.
    pub fn notifications(&self, outcome: NotifyOutcome) -> u64 {
        self.notifications[outcome as usize].get()
    }

    /// Counts an exec that ended.
    pub fn exec_ended(&self, outcome: ExecOutcome) {
        self.execs[outcome as usize].inc();
    }

    /// Counts a language server that ended.
    pub fn lsp_ended(&self, outcome: ExecOutcome) {
        self.lsp[outcome as usize].inc();
    }

    /// Counts an error by its code.
    pub fn error(&self, code: &str) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        *errors.entry(code.to_owned()).or_default() += 1;
    }

    /// Counts a refused HTTP request by status.
    pub fn refused(&self, status: u16) {
        self.error(&format!("http_{status}"));
    }

    /// The text exposition.
    pub fn render(&self, sessions: SessionCounts) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, values: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (labels, v) in values {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        gauge(
            "ptyhub_sessions",
            "Sessions by state.",
            &[
                ("{state=\"running\"}", sessions.running),
                ("{state=\"exited\"}", sessions.exited),
            ],
        );
        gauge(
            "ptyhub_viewers",
            "Connected viewers.",
            &[("", sessions.viewers)],
        );
        gauge(
            "ptyhub_sse_streams",
            "Open server-sent event streams (events, logs).",
            &[("", self.sse_streams.get())],
        );
        gauge(
            "ptyhub_execs_running",
            "Exec processes running now.",
            &[("", self.execs_running.get())],
        );
        gauge(
            "ptyhub_lsp_running",
            "Language servers running now.",
            &[("", self.lsp_running.get())],
        );
        gauge(
            "ptyhub_screens_parked",
            "Idle sessions whose screen model is kept as a snapshot until their next output.",
            &[("", self.screens_parked.get())],
        );
        gauge(
            "ptyhub_screens_parked_bytes",
            "Bytes of the snapshots parked screen models keep.",
            &[("", self.screens_parked_bytes.get())],
        );
        let counters = [
            (
                "ptyhub_bytes_in_total",
                "Bytes from viewers to programs.",
                &self.bytes_in,
            ),
            (
                "ptyhub_bytes_out_total",
                "Live output bytes sent to viewers.",
                &self.bytes_out,
            ),
            (
                "ptyhub_snapshots_total",
                "Snapshots sent (joins and resyncs).",
                &self.snapshots,
            ),
            (
                "ptyhub_resyncs_total",
                "Viewers resynced because they fell behind.",
                &self.resyncs,
            ),
            (
                "ptyhub_parse_skipped_bytes_total",
                "Output bytes the screen model skipped: plain text that scrolled away unseen.",
                &self.parse_skipped,
            ),
            (
                "ptyhub_turns_given_total",
                "Times a session printing a lot gave its worker back so a key typed elsewhere went first.",
                &self.turns_given,
            ),
            (
                "ptyhub_idle_page_releases_total",
                "Times the daemon, quiet, let go of its mapped code pages.",
                &self.idle_page_releases,
            ),
            (
                "ptyhub_uploads_total",
                "Files saved by uploads.",
                &self.uploads,
            ),
            (
                "ptyhub_upload_failures_total",
                "Uploads refused or failed.",
                &self.upload_failures,
            ),
            (
                "ptyhub_recording_failures_total",
                "Recordings stopped early (disk failure or size cap).",
                &self.recording_failures,
            ),
            (
                "ptyhub_lsp_messages_in_total",
                "JSON-RPC messages passed from clients to language servers.",
                &self.lsp_messages_in,
            ),
            (
                "ptyhub_lsp_messages_out_total",
                "JSON-RPC messages passed from language servers to clients.",
                &self.lsp_messages_out,
            ),
            (
                "ptyhub_auth_failures_total",
                "Requests refused for their token.",
                &self.auth_failures,
            ),
            (
                "ptyhub_user_header_ignored_total",
                "Requests whose [auth] user_header was ignored (untrusted peer or bad value).",
                &self.user_header_ignored,
            ),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.get()
            );
        }
        let _ = writeln!(
            out,
            "# HELP ptyhub_execs_total Execs that ended, by outcome.\n# TYPE ptyhub_execs_total counter"
        );
        for outcome in ExecOutcome::ALL {
            let n = self.execs[outcome as usize].get();
            let _ = writeln!(
                out,
                "ptyhub_execs_total{{outcome=\"{}\"}} {n}",
                outcome.label()
            );
        }
        let _ = writeln!(
            out,
            "# HELP ptyhub_lsp_total Language servers that ended, by outcome.\n# TYPE ptyhub_lsp_total counter"
        );
        for outcome in ExecOutcome::ALL {
            let n = self.lsp[outcome as usize].get();
            let _ = writeln!(
                out,
                "ptyhub_lsp_total{{outcome=\"{}\"}} {n}",
                outcome.label()
            );
        }
        let _ = writeln!(
            out,
            "# HELP ptyhub_notifications_total Notifications to webhooks and the command, by outcome.\n# TYPE ptyhub_notifications_total counter"
        );
        for outcome in NotifyOutcome::ALL {
            let _ = writeln!(
                out,
                "ptyhub_notifications_total{{outcome=\"{}\"}} {}",
                outcome.label(),
                self.notifications(outcome)
            );
        }
        let errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            out,
            "# HELP ptyhub_errors_total Errors sent to viewers and refused requests, by code.\n# TYPE ptyhub_errors_total counter"
        );
        for (code, n) in errors.iter() {
            let _ = writeln!(out, "ptyhub_errors_total{{code=\"{code}\"}} {n}");
        }
        out
    }
}
