//! Signals: those a viewer may send to the program's foreground process group, and the
//! ladder that ends a program (sessions', execs' and their leftovers').

use std::fmt::Display;
use std::time::Duration;

use nix::sys::signal::Signal;
use tracing::debug;

use super::refusal::Refusal;

/// Signals a viewer may send to the foreground process group.
pub const ALLOWED_SIGNALS: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGKILL,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// The allowed signal named `name` (`SIGINT`...), or why there is none.
pub(super) fn allowed_signal(name: &str) -> Result<Signal, Refusal> {
    ALLOWED_SIGNALS
        .iter()
        .copied()
        .find(|s| s.as_str() == name)
        .ok_or_else(|| {
            let allowed: Vec<&str> = ALLOWED_SIGNALS.iter().map(|s| s.as_str()).collect();
            Refusal::BadSignal(format!(
                "signal {name:?} is not allowed (use one of {})",
                allowed.join(", ")
            ))
        })
}

/// The signals that end a program, gentlest first: SIGHUP (what closing its terminal does; an
/// interactive bash ignores SIGTERM but not this; a session's program has its terminal hung
/// up with it, `Program::hang_up`), SIGTERM, then SIGKILL.
const LADDER: [Signal; 3] = [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGKILL];

/// How a program is ended: each signal of the ladder in turn, the next one only if it is still
/// there after its share of the grace period. Each escalation is logged once, at debug: a
/// program that needs SIGTERM or SIGKILL is no fault of the daemon's.
#[derive(Debug, Clone)]
pub struct StopLadder {
    /// Index in [`LADDER`] of the next signal.
    next: usize,
    /// How long each signal but the last is given.
    share: Duration,
    /// Whether a signal was sent yet (the next one is an escalation).
    sent: bool,
}

/// The next rung of a [`StopLadder`]: the signal to send now, and how long to wait for the
/// program to go before the next one (`None` after SIGKILL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rung {
    /// The signal to send.
    pub signal: Signal,
    /// How long it is given; `None` for the last.
    pub wait: Option<Duration>,
}

impl StopLadder {
    /// For a program on a terminal (a session's): SIGHUP, SIGTERM, SIGKILL, the `grace`
    /// period shared between the first two.
    pub fn for_terminal(grace: Duration) -> Self {
        Self::from(0, grace)
    }

    /// For a program without a terminal (an exec, like `timeout(1)`), or processes that
    /// already had the SIGHUP (an exited session program's leftovers): SIGTERM, then SIGKILL
    /// after `grace`.
    pub fn without_terminal(grace: Duration) -> Self {
        Self::from(1, grace)
    }

    fn from(next: usize, grace: Duration) -> Self {
        // Rungs that wait: all but the last. Never zero, so no division by zero.
        let waits = (LADDER.len() - 1 - next) as u32;
        Self {
            next,
            share: grace / waits,
            sent: false,
        }
    }

    /// The next rung, `None` once SIGKILL was sent; `what` names the program in the log line
    /// of an escalation.
    pub fn next_rung(&mut self, what: &dyn Display) -> Option<Rung> {
        let signal = *LADDER.get(self.next)?;
        if self.sent {
            debug!(
                "{what} still running after {}: {}",
                LADDER[self.next - 1].as_str(),
                signal.as_str()
            );
        }
        self.next += 1;
        self.sent = true;
        let wait = (self.next < LADDER.len()).then_some(self.share);
        Some(Rung { signal, wait })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_program_gets_hup_then_term_then_kill_in_the_grace_period() {
        let mut l = StopLadder::for_terminal(Duration::from_secs(4));
        let rungs: Vec<Rung> = std::iter::from_fn(|| l.next_rung(&"test")).collect();
        let two = Some(Duration::from_secs(2));
        assert_eq!(
            rungs,
            [
                Rung {
                    signal: Signal::SIGHUP,
                    wait: two
                },
                Rung {
                    signal: Signal::SIGTERM,
                    wait: two
                },
                Rung {
                    signal: Signal::SIGKILL,
                    wait: None
                },
            ]
        );
        let mut l = StopLadder::without_terminal(Duration::from_secs(4));
        let signals: Vec<Signal> = std::iter::from_fn(|| l.next_rung(&"test"))
            .map(|r| r.signal)
            .collect();
        assert_eq!(signals, [Signal::SIGTERM, Signal::SIGKILL]);
    }
}
