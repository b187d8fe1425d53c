//! One connected viewer as its session keeps it: where its events and output go, its role,
//! its size, and the replies its terminal owes.

use std::sync::Arc;

use crate::session::events::{LiveOutput, Role};
use crate::session::replies::Expected;
use crate::session::viewer_queue::EventSender;

/// One connected viewer.
pub(super) struct Member {
    pub(super) events: EventSender,
    pub(super) live: Arc<dyn LiveOutput>,
    pub(super) role: Role,
    /// `(rows, cols)` as last sent, clamped; `None` until the viewer sends one.
    pub(super) size: Option<(u16, u16)>,
    /// Replies this viewer's terminal owes to queries it was sent (dropped when they come).
    pub(super) expected: Expected,
    /// Whether it is in the fan-out's queue (see `fanout.rs`).
    pub(super) queued: bool,
}

impl Member {
    /// A viewer that just joined as `role`: `events` receives what is addressed to it, `live`
    /// its output.
    pub(super) fn new(events: EventSender, live: Arc<dyn LiveOutput>, role: Role) -> Self {
        Self {
            events,
            live,
            role,
            size: None,
            expected: Expected::default(),
            queued: false,
        }
    }
}
