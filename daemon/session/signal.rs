//! Signals a viewer may send to the program's foreground process group.

use nix::sys::signal::Signal;
use tracing::debug;

use super::actor::Session;
use super::*;

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

impl Session {
    pub(super) fn send_signal(&mut self, viewer: ViewerId, name: &str) {
        if !self.permitted(viewer, Action::Signal) {
            return;
        }
        let Some(signal) = ALLOWED_SIGNALS.iter().copied().find(|s| s.as_str() == name) else {
            let allowed: Vec<&str> = ALLOWED_SIGNALS.iter().map(|s| s.as_str()).collect();
            let message = format!(
                "signal {name:?} is not allowed (use one of {})",
                allowed.join(", ")
            );
            return self.refuse(viewer, Refusal::BadSignal(message));
        };
        if !self.phase.running() {
            return self.refuse(viewer, Refusal::NotRunning(Action::Signal));
        }
        match process::foreground_group(self.proc.pid) {
            Some(pgrp) => {
                debug!(session = %self.id, ?signal, pgrp, "signal from viewer");
                if let Err(e) = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgrp), signal) {
                    self.refuse(
                        viewer,
                        Refusal::SignalFailed(format!("could not send {name}: {e}")),
                    );
                }
            }
            None => self.refuse(
                viewer,
                Refusal::SignalFailed("the terminal has no foreground process group".to_owned()),
            ),
        }
    }
}
