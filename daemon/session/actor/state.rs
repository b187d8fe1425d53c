//! The actor's side of its attention (`session/attention.rs`): what feeds it (the screen's
//! readings, the agent's reports, the timer; output, keys, exits and restarts are fed where
//! they happen), and telling everyone its state when it changes: the session list, every
//! viewer (a `state` event), and the daemon's transitions (the journal, the notifier).

use std::sync::Arc;
use std::time::Instant;

use super::Session;
use crate::attention::report::Report;
use crate::attention::screen::Reading;
use crate::attention::Transition;
use crate::session::attention::Changed;
use crate::session::events::ViewerEvent;

impl Session {
    /// The screen thread read a changed screen.
    pub(super) fn on_reading(&mut self, reading: Reading) {
        let changed = self.attention.read(reading);
        self.tell_state(changed);
    }

    /// The agent reported its state.
    pub(super) fn on_report(&mut self, report: Report) {
        let changed = self.attention.reported(report, Instant::now());
        self.tell_state(changed);
    }

    /// The attention's timer fired: a quiet check (who is in the terminal's foreground), or a
    /// rule's time running out.
    pub(super) fn on_attention_timer(&mut self) {
        let program = &self.program;
        let changed = self
            .attention
            .timer_fired(Instant::now(), || program.foreground());
        self.tell_state(changed);
    }

    /// Tells everyone what `changed`: the session list, the viewers, and, for a new state, the
    /// daemon's transitions.
    pub(super) fn tell_state(&mut self, changed: Changed) {
        if changed == Changed::Nothing {
            return;
        }
        self.publish_info();
        let now = self.attention.now().clone();
        // Not the recorder's: a state is no part of a recording.
        self.viewers.broadcast(
            ViewerEvent::State(Arc::new(now.clone())),
            self.identity.id(),
        );
        if let Changed::State(from) = changed {
            let info = self.info.borrow();
            let change = Transition {
                session: info.id,
                num: info.num,
                name: info.name.clone(),
                assistant: info.assistant.clone(),
                assistant_name: info.assistant_name.clone(),
                from,
                to: now,
            };
            drop(info);
            self.transitions.emit(change);
        }
    }
}
