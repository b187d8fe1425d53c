//! Signals a viewer may send to the program's foreground process group.

use nix::sys::signal::Signal;

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
