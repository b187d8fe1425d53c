//! The one place a session's change of state leaves the session: the daemon's [`Transitions`],
//! which records each change as a `state` event in the journal (`GET /api/events`) and hands it
//! to every subscriber (the notifier), once per change of state, never per redraw.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::state::{State, Transition};
use crate::journal::Journal;

/// Changes a slow subscriber may fall behind by before it is told it lagged (and how many it
/// missed).
const BACKLOG: usize = 1024;

/// Every session's changes of state, for whoever follows them.
pub struct Transitions {
    journal: Arc<Journal>,
    sender: broadcast::Sender<Arc<Transition>>,
}

impl Transitions {
    /// Changes recorded in `journal`, and told to subscribers.
    pub fn new(journal: Arc<Journal>) -> Arc<Self> {
        Arc::new(Transitions {
            journal,
            sender: broadcast::channel(BACKLOG).0,
        })
    }

    /// Every change from now on. A subscriber that falls more than 1024 changes behind gets
    /// `RecvError::Lagged(n)` and goes on with the newest.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Transition>> {
        self.sender.subscribe()
    }

    /// A session changed state. Entering `exited` is journaled by the session's lifecycle
    /// watcher (its `exited` event carries the reason), so only subscribers hear it here.
    pub fn emit(&self, change: Transition) {
        if change.to.state != State::Exited {
            self.journal.transition(&change);
        }
        // No subscriber is fine: nobody listens right now.
        let _ = self.sender.send(Arc::new(change));
    }
}
