//! Telling systemd how the daemon is doing (`Type=notify`): ready, reloading (a live upgrade),
//! stopping, and the watchdog's pings. Each is a no-op when systemd did not start the daemon.

use std::time::Duration;

use sd_notify::NotifyState;
use tracing::warn;

/// Serving: after the start, and again once a live upgrade is done or refused.
pub fn ready() {
    notify(&[NotifyState::Ready]);
}

/// A live upgrade begins: `systemctl reload` then waits for the next [`ready`].
pub fn reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = i128::from(now.tv_sec) * 1_000_000 + i128::from(now.tv_nsec) / 1000;
    notify(&[NotifyState::Reloading, NotifyState::MonotonicUsec(usec)]);
}

/// Shutting down.
pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// When the unit has `WatchdogSec=`, pings it at half that period from a task of its own, for
/// as long as the runtime runs.
pub fn start_watchdog() {
    let mut watchdog_usec = 0;
    if sd_notify::watchdog_enabled(false, &mut watchdog_usec) {
        let every = Duration::from_micros(watchdog_usec / 2);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                notify(&[NotifyState::Watchdog]);
            }
        });
    }
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        warn!("could not notify systemd: {e}");
    }
}
