//! Where a session is in its program's life: one state at a time, with what each state waits
//! for. The transitions are `Program`'s (`program.rs`), driven by the actor
//! (`actor/lifecycle.rs`).
//!
//! ```text
//! Running ──(YOLO toggle or end: SIGHUP)──▶ Stopping ──(exit)──▶ Draining
//! Running ──(exit)──▶ Draining ──(PTY EOF, or 500 ms)──▶ then:
//!     Stay    ──▶ Exited ──(end, or reaped unwatched)──▶ Ended
//!     Restart ──▶ Running (the replacement; Exited if it cannot start)
//!     End     ──▶ Ended
//! ```

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::events::EndReason;
use super::input::HeldInput;
use super::process::ExitInfo;
use super::signal::StopLadder;

/// The session is ending: why, and who waits for it.
pub(super) struct Ending {
    pub(super) reason: EndReason,
    pub(super) waiters: Vec<oneshot::Sender<()>>,
}

/// What follows once the program has gone and its output is collected.
pub(super) enum Then {
    /// Report the exit; the session stays for its viewers (and is reaped when unwatched).
    Stay,
    /// Start the assistant again (a YOLO toggle), then give it the input typed meanwhile (held
    /// here, never written to the dying program; bounded by the input budget its permits hold).
    Restart(Vec<HeldInput>),
    /// End the session.
    End(Ending),
}

/// The session's state.
pub(super) enum Phase {
    /// The program runs.
    Running,
    /// The program was asked to stop (SIGHUP) so that `then` can follow; while it stays, it
    /// gets the next signal of `ladder` at `next_at` (none after SIGKILL).
    Stopping {
        then: Then,
        ladder: StopLadder,
        next_at: Option<Instant>,
    },
    /// The program exited with `status`; the rest of its output is read from the PTY until EOF
    /// or `until`.
    Draining {
        status: ExitInfo,
        then: Then,
        until: Instant,
    },
    /// No program: it exited with `exit`. Without viewers since `idle_since`, the session is
    /// reaped after `reap_after_exit`.
    Exited { exit: ExitInfo, idle_since: Instant },
    /// The session is over: the actor's loop stops.
    Ended,
}

impl Phase {
    /// Whether the program is alive (it may be on its way out).
    pub(super) fn running(&self) -> bool {
        matches!(self, Self::Running | Self::Stopping { .. })
    }

    /// Whether a YOLO restart is under way.
    pub(super) fn restarting(&self) -> bool {
        matches!(
            self,
            Self::Stopping {
                then: Then::Restart(_),
                ..
            } | Self::Draining {
                then: Then::Restart(_),
                ..
            }
        )
    }

    /// Where input typed during a YOLO restart waits for the new program.
    pub(super) fn held_input_mut(&mut self) -> Option<&mut Vec<HeldInput>> {
        match self {
            Self::Stopping {
                then: Then::Restart(held),
                ..
            }
            | Self::Draining {
                then: Then::Restart(held),
                ..
            } => Some(held),
            _ => None,
        }
    }

    /// How the program ended, once the session reports it.
    pub(super) fn exit(&self) -> Option<&ExitInfo> {
        match self {
            Self::Exited { exit, .. } => Some(exit),
            _ => None,
        }
    }

    /// The ending under way, if any.
    pub(super) fn ending_mut(&mut self) -> Option<&mut Ending> {
        match self {
            Self::Stopping {
                then: Then::End(ending),
                ..
            }
            | Self::Draining {
                then: Then::End(ending),
                ..
            } => Some(ending),
            _ => None,
        }
    }

    /// When the program gets the next, firmer signal.
    pub(super) fn escalate_at(&self) -> Option<Instant> {
        match self {
            Self::Stopping { next_at, .. } => *next_at,
            _ => None,
        }
    }

    /// When the actor stops waiting for the exited program's last output.
    pub(super) fn drain_until(&self) -> Option<Instant> {
        match self {
            Self::Draining { until, .. } => Some(*until),
            _ => None,
        }
    }

    /// Moves out the current state, leaving `Ended` until the caller puts the next one.
    pub(super) fn take(&mut self) -> Phase {
        std::mem::replace(self, Self::Ended)
    }
}
