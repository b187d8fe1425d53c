//! A viewer's queue of session events, bounded in bytes as well as in messages: a viewer that
//! stops reading is told to leave (its `overrun` token is cancelled) instead of being buffered
//! for, so no client can grow the daemon's memory through what is addressed to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ViewerEvent;

/// Events queued for one viewer, at most.
pub const MAX_EVENTS: usize = 1024;
/// Bytes of events queued for one viewer, at most (counted by [`ViewerEvent::cost`]).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;

/// The session's end of a viewer's event queue.
#[derive(Debug)]
pub struct EventSender {
    tx: mpsc::Sender<ViewerEvent>,
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
    overrun: CancellationToken,
}

/// The viewer's end of its event queue.
#[derive(Debug)]
pub struct EventReceiver {
    rx: mpsc::Receiver<ViewerEvent>,
    queued: Arc<AtomicUsize>,
    overrun: CancellationToken,
}

/// A queue of at most `max_events` events and `max_bytes` bytes.
pub fn channel(max_events: usize, max_bytes: usize) -> (EventSender, EventReceiver) {
    let (tx, rx) = mpsc::channel(max_events.max(1));
    let queued = Arc::new(AtomicUsize::new(0));
    let overrun = CancellationToken::new();
    (
        EventSender {
            tx,
            queued: queued.clone(),
            max_bytes,
            overrun: overrun.clone(),
        },
        EventReceiver {
            rx,
            queued,
            overrun,
        },
    )
}

impl EventSender {
    /// Queues `event` without waiting. When the queue is full the viewer is marked overrun
    /// (it is closed by its own task) and false is returned.
    pub fn push(&self, event: ViewerEvent) -> bool {
        let cost = event.cost();
        let before = self.queued.fetch_add(cost, Ordering::Relaxed);
        if before + cost > self.max_bytes || self.tx.try_send(event).is_err() {
            self.queued.fetch_sub(cost, Ordering::Relaxed);
            self.overrun.cancel();
            return false;
        }
        true
    }
}

impl EventReceiver {
    /// The next event; `None` once the session dropped its end.
    pub async fn recv(&mut self) -> Option<ViewerEvent> {
        let ev = self.rx.recv().await?;
        self.queued.fetch_sub(ev.cost(), Ordering::Relaxed);
        Some(ev)
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<ViewerEvent> {
        let ev = self.rx.try_recv().ok()?;
        self.queued.fetch_sub(ev.cost(), Ordering::Relaxed);
        Some(ev)
    }

    /// Cancelled once an event could not be queued: the viewer fell too far behind.
    pub fn overrun(&self) -> CancellationToken {
        self.overrun.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{ChatLine, EndReason};

    fn chat(len: usize) -> ViewerEvent {
        ViewerEvent::Chat(ChatLine {
            user_name: "a".into(),
            text: "x".repeat(len),
            timestamp: String::new(),
        })
    }

    #[tokio::test]
    async fn bounded_in_bytes_and_counts_back_on_receive() {
        let (tx, mut rx) = channel(100, 10_000);
        let mut pushed = 0;
        while tx.push(chat(1000)) {
            pushed += 1;
        }
        assert!(
            (8..10).contains(&pushed),
            "{pushed} events of ~1 KB fit 10 KB"
        );
        assert!(rx.overrun().is_cancelled());
        while rx.try_recv().is_some() {}
        assert_eq!(rx.queued.load(Ordering::Relaxed), 0);
        assert!(tx.push(ViewerEvent::Close(EndReason::Deleted)));
        assert!(rx.recv().await.is_some());
    }

    #[test]
    fn bounded_in_messages() {
        let (tx, rx) = channel(3, usize::MAX);
        assert!(tx.push(chat(1)) && tx.push(chat(1)) && tx.push(chat(1)));
        assert!(!tx.push(chat(1)));
        assert!(rx.overrun().is_cancelled());
    }
}
