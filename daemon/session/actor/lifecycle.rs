//! How the session's program ends, restarts (YOLO toggle) and is cleaned up after, and how
//! the session itself ends: the actor's side of the phases in `phase.rs`, whose transitions
//! are `Program`'s.

use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Session;
use crate::session::attention::Changed;
use crate::session::events::{EndReason, ViewerEvent, ViewerId};
use crate::session::phase::{Ending, Then};
use crate::session::process::{self, ExitInfo, SpawnError, SpawnSpec};
use crate::session::program::end_leftovers;
use crate::session::refusal::Action;

impl Session {
    /// The program exited, as `status` says.
    pub(super) fn on_child_exit(&mut self, status: std::io::Result<ExitInfo>) {
        if self.program.exited(status) {
            self.finish_exit();
        }
    }

    /// The program has exited and its output is collected: restart it, or tell everyone.
    pub(super) fn finish_exit(&mut self) {
        let Some((info, then, pid)) = self.program.drained() else {
            return;
        };
        let id = self.identity.id();
        let then = if let Then::Restart(held) = then {
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
            match self.spawn_replacement() {
                Ok(()) => {
                    // What was typed while the old program went, in order, to the new one.
                    self.program.queue_held(held);
                    return;
                }
                Err(e) => {
                    warn!(session = %id, "restart failed: {e}");
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
        info!(session = %id, code = info.code, signal = ?info.signal, "session program exited");
        // On its own (not ended by someone, nor by the daemon stopping): nobody did it.
        if matches!(then, Then::Stay) {
            let detail = serde_json::json!({
                "how": "exit", "exitCode": info.code, "signal": info.signal,
            });
            let event = crate::audit::Event::new("session.end", &crate::audit::Actor::nobody());
            self.audit.record(event.on(id).with(detail));
        }
        self.program.set_exited(info.clone());
        // A daemon shutdown is no change of the session's state to tell anyone.
        let changed = match shutdown {
            true => Changed::Nothing,
            false => self.attention.exited(&info),
        };
        if !shutdown {
            self.broadcast(ViewerEvent::Exit {
                info,
                offset: self.log.head(),
            });
        }
        self.publish_info();
        self.tell_state(changed);
        if let Then::End(ending) = then {
            process::signal_session(pid, Some(id), Signal::SIGKILL);
            self.complete_end(ending);
        } else {
            // By kernel session only: the uuid marker could match a new session of the same
            // uuid once this one is gone. Marked escapees are killed when the session ends.
            let grace = self.cfg.session.kill_grace;
            tokio::spawn(async move { end_leftovers(pid, None, grace).await });
        }
    }

    /// Restarts the agent with or without its YOLO command.
    pub(super) fn toggle_yolo(&mut self, viewer: ViewerId) {
        if !self.permitted(viewer, Action::ToggleYolo) {
            return;
        }
        if let Some(refusal) = self.identity.yolo_refusal() {
            return self.viewers.refuse(viewer, refusal);
        }
        if let Err(refusal) = self.program.begin_restart(self.cfg.session.kill_grace) {
            return self.viewers.refuse(viewer, refusal);
        }
        let yolo = self.identity.toggle_yolo();
        info!(session = %self.identity.id(), yolo, "restarting agent for a YOLO toggle");
        self.broadcast_status();
        let notice = if yolo { "ON" } else { "OFF" };
        self.output(Bytes::from(format!(
            "\r\n[Switching YOLO mode {notice}, restarting agent...]\r\n"
        )));
        self.program.terminate_for_restart();
    }

    /// Starts the resume or YOLO command on a fresh PTY of the current size, wired to report
    /// its state.
    fn spawn_replacement(&mut self) -> Result<(), SpawnError> {
        let (argv, env) = self.identity.restart_command();
        let (wired, env) = self.identity.launch(&argv, &env);
        let (rows, cols) = self.viewers.size();
        let id = self.identity.id();
        let spawned = process::spawn(&SpawnSpec {
            argv: &wired,
            env: &env,
            cwd: self.identity.cwd(),
            rows,
            cols,
            session: id,
        })?;
        let yolo = self.identity.yolo_mode();
        info!(session = %id, pid = spawned.pid, yolo, "agent restarted");
        self.program.attach(spawned);
        self.identity.set_command(argv);
        let changed = self.attention.restarted(std::time::Instant::now());
        // Running again: tell the viewers the new agent is up.
        self.broadcast_status();
        self.tell_state(changed);
        Ok(())
    }

    /// Ends the session for `reason`; `done` is told once it has ended.
    pub(super) fn begin_end(&mut self, reason: EndReason, done: Option<oneshot::Sender<()>>) {
        let grace = self.cfg.session.kill_grace;
        if let Some(ending) = self.program.begin_end(reason, done, grace) {
            self.complete_end(ending);
        }
    }

    /// The session is over: its leftovers are killed, the registry told, then its viewers and
    /// everyone waiting for the end.
    fn complete_end(&mut self, ending: Ending) {
        self.program.end();
        self.identity.wiring().clean_up();
        let id = self.identity.id();
        // Out of the registry before any viewer hears of the end: a client told 4003 that asks
        // the API at once finds no session (404), never the one it was just told had ended.
        if let Some(on_end) = self.on_end.take() {
            on_end(id);
        }
        self.viewers.close_all(ending.reason);
        // The recorder sees the end once it has read what was queued.
        self.recorder.end();
        self.ended.cancel();
        info!(session = %id, "session ended");
        for waiter in ending.waiters {
            let _ = waiter.send(());
        }
    }
}
