//! How far a session's recorder may fall behind the output, and the wait that keeps it within:
//! the recorder says how far it has taken the output log; once it is [`Pace::lead`] bytes behind
//! (half the log's window), the actor reads no more of the PTY until it catches up, so the
//! program waits for the recording as it would under `script`, and the log's window never
//! passes over output the recorder has not taken.
//!
//! The wait is bounded: a recorder that takes nothing for [`STALL`] while the session waits for
//! it is let go (its recording is declared failed and the session reads on), and a recorder
//! that stops (a full disk, the size cap, a deleted file) lets go by itself. Viewers are not
//! paced: only the recorder, the one reader nobody can resync.
//!
//! While the recorder keeps up this costs the actor one atomic load per turn of its loop, and
//! nothing without a recorder; the recorder's report is a store and a `notify_one` that wakes
//! nobody unless the actor waits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Longest the session waits for a recorder that takes nothing at all before letting it go
/// (and declaring its recording failed): a disk that hangs, not one that is merely slow.
pub const STALL: Duration = Duration::from_secs(10);

/// What the two sides share.
#[derive(Debug, Default)]
struct Shared {
    /// The log offset the recorder has taken output up to; `u64::MAX` once it is gone.
    taken: AtomicU64,
    /// Signalled when the recorder takes more or goes.
    took: Notify,
    /// Set when the session let the recorder go: it stops.
    let_go: AtomicBool,
}

/// A pace: the session's side and the recorder's.
pub(super) fn pair() -> (Pace, PaceReport) {
    let shared = Arc::new(Shared::default());
    (
        Pace {
            shared: shared.clone(),
            lead: u64::MAX,
            stalled_since: None,
        },
        PaceReport(shared),
    )
}

/// The session's side: whether it may read more output, and until when it waits.
#[derive(Debug)]
pub(super) struct Pace {
    shared: Arc<Shared>,
    /// Bytes the recorder may be behind the log's head before the PTY waits.
    lead: u64,
    /// While the session waits: the recorder's offset when the wait began or it last moved,
    /// and when.
    stalled_since: Option<(u64, Instant)>,
}

impl Pace {
    /// Starts pacing a recorder that follows from the log's `head`, in a log that keeps
    /// `window` bytes. Half the window: one more PTY read (16 KiB, a quarter of the smallest
    /// window) still leaves the recorder's next byte in it.
    pub(super) fn start(&mut self, head: u64, window: usize) {
        // Before the recorder's first report; it only reads once connected, so never after it.
        self.shared.taken.store(head, Ordering::SeqCst);
        self.lead = (u64::try_from(window).unwrap_or(u64::MAX) / 2).max(1);
    }

    /// `None` while the recorder is within the lead of `head` (the PTY may be read); else
    /// when the session stops waiting for it: [`STALL`] after it last took anything.
    pub(super) fn behind(&mut self, head: u64) -> Option<Instant> {
        let taken = self.shared.taken.load(Ordering::SeqCst);
        if head.saturating_sub(taken) < self.lead {
            self.stalled_since = None;
            return None;
        }
        match self.stalled_since {
            Some((at, since)) if at == taken => Some(since + STALL),
            _ => {
                let now = Instant::now();
                self.stalled_since = Some((taken, now));
                Some(now + STALL)
            }
        }
    }

    /// The log offset the recorder has taken output up to (`u64::MAX` once it is gone).
    pub(super) fn taken(&self) -> u64 {
        self.shared.taken.load(Ordering::SeqCst)
    }

    /// Resolves when the recorder may have taken more (or gone).
    pub(super) async fn took(&self) {
        self.shared.took.notified().await;
    }

    /// The session waits no longer: the recorder stops when it next looks.
    pub(super) fn let_go(self) {
        self.shared.let_go.store(true, Ordering::SeqCst);
    }
}

/// The recorder's side: it reports what it has taken, and learns whether it was let go.
/// Dropping it (the recorder stopped) lets the session read on.
#[derive(Debug)]
pub struct PaceReport(Arc<Shared>);

impl PaceReport {
    /// Output up to log offset `offset` is taken (encoded, out of the log's window's way).
    pub fn took(&self, offset: u64) {
        let before = self.0.taken.swap(offset, Ordering::SeqCst);
        if before != offset {
            // Sets a permit when the actor is not waiting: it wakes no one.
            self.0.took.notify_one();
        }
    }

    /// Whether the session stopped waiting for this recorder (it took nothing for
    /// [`STALL`]): the recording is over, and the session has said so.
    pub fn was_let_go(&self) -> bool {
        self.0.let_go.load(Ordering::SeqCst)
    }
}

impl Drop for PaceReport {
    fn drop(&mut self) {
        self.0.taken.store(u64::MAX, Ordering::SeqCst);
        self.0.took.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{pair, STALL};

    #[tokio::test]
    async fn the_session_waits_for_a_lagging_recorder_until_it_stalls() {
        let (mut pace, report) = pair();
        pace.start(100, 64 * 1024);
        assert_eq!(
            pace.behind(100 + 32 * 1024 - 1),
            None,
            "within half the window"
        );
        let since = tokio::time::Instant::now();
        let deadline = pace.behind(100 + 32 * 1024).expect("half a window behind");
        assert!(deadline >= since + STALL);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            pace.behind(100 + 40 * 1024),
            Some(deadline),
            "no progress: same deadline"
        );

        // Taking more wakes the waiting session and moves the deadline on.
        let waiting = async { pace.took().await };
        report.took(200);
        waiting.await;
        let later = pace.behind(100 + 64 * 1024).expect("still behind");
        assert!(later >= deadline + Duration::from_millis(20), "moved on");
        assert_eq!(pace.behind(200 + 1024), None, "caught up");

        // Let go: the recorder learns it.
        assert!(!report.was_let_go());
        pace.let_go();
        assert!(report.was_let_go());
    }

    #[tokio::test]
    async fn a_recorder_that_stops_lets_the_session_read_on() {
        let (mut pace, report) = pair();
        pace.start(0, 64 * 1024);
        assert!(pace.behind(1 << 20).is_some());
        drop(report);
        pace.took().await;
        assert_eq!(pace.behind(u64::MAX - 1), None);
    }
}
