//! How a session's program ends, restarts (YOLO toggle) and is cleaned up after, and how the
//! session itself ends.

use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{info, warn};
use uuid::Uuid;

use super::actor::Session;
use super::*;

/// After the program exits, how long output still arriving from its PTY is collected.
pub(super) const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// After leftover processes got SIGHUP at the program's exit, when they get SIGTERM.
pub(super) const LEFTOVER_TERM_AFTER: Duration = Duration::from_secs(1);

/// Processes left behind by an exited program got SIGHUP; give them SIGTERM, then SIGKILL.
/// `marker` is `None` after a restart, when the replacement carries the same marker.
pub(super) async fn end_leftovers(pid: i32, marker: Option<Uuid>, grace: Duration) {
    tokio::time::sleep(LEFTOVER_TERM_AFTER).await;
    if process::signal_session(pid, marker, Signal::SIGTERM) == 0 {
        return;
    }
    tokio::time::sleep(grace).await;
    let killed = process::signal_session(pid, marker, Signal::SIGKILL);
    if killed > 0 {
        warn!(session = ?marker, killed, "killed processes left behind by the session's program");
    }
}

impl Session {
    pub(super) fn on_child_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        self.proc.child = None;
        let info = match status {
            Ok(status) => ExitInfo::from_status(status),
            Err(e) => {
                warn!(session = %self.id, "waiting for the program failed: {e}");
                ExitInfo {
                    code: -1,
                    signal: None,
                }
            }
        };
        self.proc.status = Some(info);
        self.kill_at = None;
        // Background jobs may keep the terminal open; hang them up like a terminal would.
        process::signal_session(self.proc.pid, None, Signal::SIGHUP);
        if self.proc.reader.is_none() {
            self.finish_exit();
        } else {
            self.proc.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
        }
    }

    /// The program has exited and its output is collected: tell everyone.
    pub(super) fn finish_exit(&mut self) {
        let Some(info) = self.proc.status.take() else {
            return;
        };
        let pid = self.proc.pid;
        // Dropping the reader and the writer task's input closes the PTY master.
        self.proc = Proc::default();
        if self.restarting {
            self.restarting = false;
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
            match self.spawn_replacement() {
                Ok(()) => return,
                Err(e) => {
                    warn!(session = %self.id, "restart failed: {e}");
                    self.output(Bytes::from(format!("\r\n[Restart failed: {e}]\r\n")));
                }
            }
        }
        self.output(Bytes::from(format!(
            "\r\n[Process exited (code {})]\r\n",
            info.code
        )));
        info!(session = %self.id, code = info.code, signal = ?info.signal, "session program exited");
        self.exit = Some(info.clone());
        self.idle_since = Instant::now();
        self.broadcast(ViewerEvent::Exit {
            info,
            offset: self.log.head(),
        });
        self.publish_info();
        if self.ending.is_some() {
            process::signal_session(pid, Some(self.id), Signal::SIGKILL);
            self.complete_end();
        } else {
            // By kernel session only: the uuid marker could match a new session of the same
            // uuid once this one is gone. Marked escapees are killed when the session ends.
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
        }
    }

    pub(super) fn toggle_yolo(&mut self, viewer: ViewerId) {
        if !self.permitted(viewer, Action::ToggleYolo) {
            return;
        }
        if !self.assistant.yolo_supported() {
            let message = format!("{} has no YOLO mode", self.assistant.name);
            return self.refuse(viewer, Refusal::YoloUnsupported(message));
        }
        if self.restarting {
            return self.refuse(viewer, Refusal::RestartInProgress);
        }
        if self.proc.child.is_none() || self.ending.is_some() {
            return self.refuse(viewer, Refusal::NotRunning(Action::ToggleYolo));
        }
        self.yolo_mode = !self.yolo_mode;
        self.restarting = true;
        info!(session = %self.id, yolo = self.yolo_mode, "restarting agent for a YOLO toggle");
        self.broadcast_status();
        let notice = if self.yolo_mode { "ON" } else { "OFF" };
        self.output(Bytes::from(format!(
            "\r\n[Switching YOLO mode {notice}, restarting agent...]\r\n"
        )));
        process::signal_session(self.proc.pid, None, Signal::SIGTERM);
        self.kill_at = Some(Instant::now() + self.cfg.session.kill_grace);
    }

    /// Starts the resume or YOLO command on a fresh PTY of the current size.
    pub(super) fn spawn_replacement(&mut self) -> Result<(), process::SpawnError> {
        let argv = self
            .assistant
            .restart_argv(self.yolo_mode)
            .unwrap_or_else(|| self.assistant.resume_argv());
        let env = self.assistant.env_for(self.yolo_mode);
        let spawned = process::spawn(&process::SpawnSpec {
            argv: &argv,
            env: &env,
            cwd: &self.cwd,
            rows: self.size.0,
            cols: self.size.1,
            session: self.id,
        })?;
        info!(session = %self.id, pid = spawned.pid, yolo = self.yolo_mode, "agent restarted");
        self.attach(spawned);
        // `restarting` is already false: tell the viewers the new agent is up.
        self.broadcast_status();
        Ok(())
    }

    pub(super) fn reap_at(&self) -> Option<Instant> {
        (self.exit.is_some() && self.viewers.is_empty() && self.ending.is_none())
            .then(|| self.idle_since + self.cfg.session.reap_after_exit)
    }

    pub(super) fn begin_end(&mut self, reason: EndReason, done: Option<oneshot::Sender<()>>) {
        if let Some(ending) = &mut self.ending {
            ending.waiters.extend(done);
            return;
        }
        info!(session = %self.id, ?reason, "ending session");
        let alive = self.proc.child.is_some() || self.proc.status.is_some();
        // An ongoing restart is abandoned: the session ends instead.
        self.restarting = false;
        if self.proc.child.is_some() {
            process::signal_session(self.proc.pid, Some(self.id), Signal::SIGHUP);
            process::signal_session(self.proc.pid, Some(self.id), Signal::SIGTERM);
            self.kill_at = Some(Instant::now() + self.cfg.session.kill_grace);
        } else if self.proc.status.is_some() {
            // Exited and still draining: stop waiting for the output.
            self.proc.drain_until = Some(Instant::now());
        }
        self.ending = Some(Ending {
            reason,
            waiters: done.into_iter().collect(),
        });
        if !alive {
            self.complete_end();
        }
    }

    pub(super) fn kill_now(&mut self) {
        self.kill_at = None;
        warn!(session = %self.id, "program still running after the grace period: SIGKILL");
        // While restarting, the marker would also match the replacement: use the kernel session.
        let marker = (!self.restarting).then_some(self.id);
        process::signal_session(self.proc.pid, marker, Signal::SIGKILL);
    }

    pub(super) fn complete_end(&mut self) {
        let Some(ending) = self.ending.take() else {
            return;
        };
        if self.last_pid > 0 {
            // Whatever the program left behind, escaped into its own session or not, goes with
            // the session (the registry still holds this uuid, so no other session shares it).
            process::signal_session(self.last_pid, Some(self.id), Signal::SIGKILL);
        }
        for viewer in self.viewers.values() {
            viewer.events.push(ViewerEvent::Close(ending.reason));
        }
        self.viewers.clear();
        if let Some(on_end) = self.on_end.take() {
            on_end(self.id);
        }
        self.ended.cancel();
        info!(session = %self.id, "session ended");
        for waiter in ending.waiters {
            let _ = waiter.send(());
        }
    }
}
