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
use super::phase::{Ending, Phase, Then};
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
    pub(super) fn on_child_exit(&mut self, status: std::io::Result<ExitInfo>) {
        self.proc.exit = None;
        let info = status.unwrap_or_else(|e| {
            warn!(session = %self.id, "waiting for the program failed: {e}");
            ExitInfo::exited(-1)
        });
        // Background jobs may keep the terminal open; hang them up like a terminal would.
        process::signal_session(self.proc.pid, None, Signal::SIGHUP);
        let then = match self.phase.take() {
            Phase::Running => Then::Stay,
            Phase::Stopping { then, .. } => then,
            other => {
                // No program was watched in these states.
                self.phase = other;
                return;
            }
        };
        let drained = self.proc.reader.is_none();
        self.phase = Phase::Draining {
            status: info,
            then,
            until: Instant::now() + DRAIN_AFTER_EXIT,
        };
        if drained {
            self.finish_exit();
        }
    }

    /// The program has exited and its output is collected: restart it, or tell everyone.
    pub(super) fn finish_exit(&mut self) {
        let (info, then) = match self.phase.take() {
            Phase::Draining { status, then, .. } => (status, then),
            other => {
                self.phase = other;
                return;
            }
        };
        let pid = self.proc.pid;
        // Dropping the reader and the writer task's input closes the PTY master.
        self.proc = Proc::default();
        let then = if let Then::Restart(held) = then {
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
            match self.spawn_replacement() {
                Ok(()) => {
                    // What was typed while the old program went, in order, to the new one.
                    // Counted as queued for the new writer, so no key typed next overtakes them.
                    if let Some(input) = &self.proc.input {
                        for HeldInput { data, permit } in held {
                            let queued = &self.proc.input_queued;
                            let _ = input.send(PtyInput::new(data, permit, None, queued));
                        }
                    }
                    return;
                }
                Err(e) => {
                    warn!(session = %self.id, "restart failed: {e}");
                    self.output(Bytes::from(format!("\r\n[Restart failed: {e}]\r\n")));
                    // The input held for it has no program to go to.
                    Then::Stay
                }
            }
        } else {
            then
        };
        // A daemon shutdown ends the program, but the viewers are told the daemon stopped
        // (close 1001), not that their program ended by a signal they never sent.
        let shutdown = matches!(&then, Then::End(e) if matches!(e.reason, EndReason::Shutdown));
        let notice = if shutdown {
            "\r\n[ptyhub stopped]\r\n".to_owned()
        } else {
            format!("\r\n[Process exited (code {})]\r\n", info.code)
        };
        self.output(Bytes::from(notice));
        info!(session = %self.id, code = info.code, signal = ?info.signal, "session program exited");
        self.phase = Phase::Exited {
            exit: info.clone(),
            idle_since: Instant::now(),
        };
        if !shutdown {
            self.broadcast(ViewerEvent::Exit {
                info,
                offset: self.log.head(),
            });
        }
        self.publish_info();
        if let Then::End(ending) = then {
            process::signal_session(pid, Some(self.id), Signal::SIGKILL);
            self.complete_end(ending);
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
        if self.own_command {
            let message = "this session runs its own command, which has no YOLO mode".to_owned();
            return self.refuse(viewer, Refusal::YoloUnsupported(message));
        }
        if !self.assistant.yolo_supported() {
            let message = format!("{} has no YOLO mode", self.assistant.name);
            return self.refuse(viewer, Refusal::YoloUnsupported(message));
        }
        if self.phase.restarting() {
            return self.refuse(viewer, Refusal::RestartInProgress);
        }
        if !matches!(self.phase, Phase::Running) {
            return self.refuse(viewer, Refusal::NotRunning(Action::ToggleYolo));
        }
        self.yolo_mode = !self.yolo_mode;
        self.phase = Phase::Stopping {
            then: Then::Restart(Vec::new()),
            kill_at: Some(Instant::now() + self.cfg.session.kill_grace),
        };
        info!(session = %self.id, yolo = self.yolo_mode, "restarting agent for a YOLO toggle");
        self.broadcast_status();
        let notice = if self.yolo_mode { "ON" } else { "OFF" };
        self.output(Bytes::from(format!(
            "\r\n[Switching YOLO mode {notice}, restarting agent...]\r\n"
        )));
        process::signal_session(self.proc.pid, None, Signal::SIGTERM);
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
        self.command = argv;
        // Running again: tell the viewers the new agent is up.
        self.broadcast_status();
        Ok(())
    }

    pub(super) fn reap_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Exited { idle_since, .. } if self.viewers.is_empty() => {
                Some(idle_since + self.cfg.session.reap_after_exit)
            }
            _ => None,
        }
    }

    pub(super) fn begin_end(&mut self, reason: EndReason, done: Option<oneshot::Sender<()>>) {
        if let Some(ending) = self.phase.ending_mut() {
            ending.waiters.extend(done);
            return;
        }
        let ending = Ending {
            reason,
            waiters: done.into_iter().collect(),
        };
        info!(session = %self.id, ?reason, "ending session");
        match self.phase.take() {
            // An ongoing restart is abandoned: the session ends instead.
            Phase::Running | Phase::Stopping { .. } => {
                process::signal_session(self.proc.pid, Some(self.id), Signal::SIGHUP);
                process::signal_session(self.proc.pid, Some(self.id), Signal::SIGTERM);
                self.phase = Phase::Stopping {
                    then: Then::End(ending),
                    kill_at: Some(Instant::now() + self.cfg.session.kill_grace),
                };
            }
            // Exited and still draining: stop waiting for the output.
            Phase::Draining { status, .. } => {
                self.phase = Phase::Draining {
                    status,
                    then: Then::End(ending),
                    until: Instant::now(),
                };
            }
            Phase::Exited { .. } | Phase::Ended => self.complete_end(ending),
        }
    }

    pub(super) fn kill_now(&mut self) {
        // While restarting, the marker would also match the replacement: use the kernel session.
        let marker = (!self.phase.restarting()).then_some(self.id);
        if let Phase::Stopping { kill_at, .. } = &mut self.phase {
            *kill_at = None;
        }
        warn!(session = %self.id, "program still running after the grace period: SIGKILL");
        process::signal_session(self.proc.pid, marker, Signal::SIGKILL);
    }

    pub(super) fn complete_end(&mut self, ending: Ending) {
        self.phase = Phase::Ended;
        if self.last_pid > 0 {
            // Whatever the program left behind, escaped into its own session or not, goes with
            // the session (the registry still holds this uuid, so no other session shares it).
            process::signal_session(self.last_pid, Some(self.id), Signal::SIGKILL);
        }
        for viewer in self.viewers.values() {
            viewer.events.push(ViewerEvent::Close(ending.reason));
        }
        self.viewers.clear();
        // The tap's reader sees the end once it has read what was queued.
        self.tap = None;
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
