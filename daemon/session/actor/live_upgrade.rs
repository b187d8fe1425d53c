//! The actor in a live upgrade: letting its viewers go, then (once no restart or exit is
//! under way) handing the session over as its image, and stopping; the program runs on.

use tokio::sync::oneshot;
use tracing::info;

use super::Session;
use crate::session::events::EndReason;
use crate::session::handoff::SessionHandoff;
use crate::upgrade::image::SessionImage;

/// Output kept in the image beyond what the snapshot needs: enough for a log follower
/// (`/api/sessions/{id}/log`) to resume across the upgrade after a short gap.
const LOG_TAIL_KEPT: u64 = 256 * 1024;

impl Session {
    /// Tells every viewer the daemon is restarting (close 1012); the session goes on, so input
    /// they sent before they saw the close still reaches the program.
    pub(super) fn detach_viewers(&mut self) {
        self.viewers.ask_to_close(EndReason::Upgrade);
    }

    /// Hands over once the phase is settled (checked after each turn of the loop).
    pub(super) fn hand_over_when_settled(&mut self, reply: oneshot::Sender<SessionHandoff>) {
        self.hand_over = Some(reply);
    }

    /// Hands the session over as its image and lets go of everything but the program.
    pub(super) async fn hand_over_now(&mut self) -> SessionHandoff {
        // Input first: what the writer has not written goes along, in order.
        let input = self.program.take_unwritten().await;
        let head = self.log.head();
        let id = self.identity.id();
        let (snapshot, snapshot_offset) = self.screen.handoff_snapshot(&self.log, head, id).await;
        let log_start = head
            .saturating_sub(LOG_TAIL_KEPT)
            .min(snapshot_offset)
            .max(self.log.start());
        let mut log = Vec::new();
        if self.log.read(log_start, usize::MAX, &mut log).is_err() {
            log.clear();
        }
        let pty = self.program.dup_pty();
        let running = self.program.runs();
        let (rows, cols) = self.viewers.size();
        let mut image = SessionImage {
            rows,
            cols,
            chat: self.chat.image(),
            screen: self.screen.has_model(),
            drawn: self.screen.drawn(),
            snapshot: None,
            snapshot_offset,
            log_start,
            ..Default::default()
        };
        self.identity.write_image(&mut image);
        self.program.write_image(&mut image);
        image.attention = Some(self.attention.image(self.gate.token()));
        self.viewers.close_all(EndReason::Upgrade);
        self.recorder.suspend();
        // Lets go of the session's own PTY descriptors and pidfd (never the program: the
        // duplicate above keeps the terminal open, and nothing is signalled).
        self.program.release();
        info!(session = %id, "session frozen for the upgrade");
        SessionHandoff {
            image,
            snapshot,
            log,
            input,
            pty: if running { pty } else { None },
        }
    }
}
