//! A viewer's queue of session events, bounded in bytes as well as in messages: a viewer that
//! stops reading is told to leave (its `overrun` token is cancelled) instead of being buffered
//! for, so no client can grow the daemon's memory through what is addressed to it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::events::ViewerEvent;

/// Events queued for one viewer, at most.
pub const MAX_EVENTS: usize = 1024;
/// Bytes of events queued for one viewer, at most (counted by [`ViewerEvent::cost`]).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;

/// The session's end of a viewer's event queue.
#[derive(Debug)]
pub struct EventSender {
    shared: Arc<Shared>,
}

/// The viewer's end of its event queue.
#[derive(Debug)]
pub struct EventReceiver {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// A permit is stored when nobody waits, so a push between a check and a wait is not lost.
    ready: Notify,
    overrun: CancellationToken,
    max_events: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<ViewerEvent>,
    bytes: usize,
    /// The sender is gone: after what is queued, nothing more comes.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every update completes before anything can panic: a poisoned queue is consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A queue of at most `max_events` events and `max_bytes` bytes.
pub fn channel(max_events: usize, max_bytes: usize) -> (EventSender, EventReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Notify::new(),
        overrun: CancellationToken::new(),
        max_events: max_events.max(1),
        max_bytes,
    });
    (
        EventSender {
            shared: shared.clone(),
        },
        EventReceiver { shared },
    )
}

impl EventSender {
    /// Queues `event` without waiting. When the queue is full the viewer is marked overrun
    /// (it is closed by its own task) and false is returned.
    ///
    /// A status that follows a status still queued (with at most a presence between them), at
    /// the same size, replaces it: the newer one says all the older did (a burst of joins is
    /// one status per viewer, not one per join). Statuses of different sizes are all kept, since each tells the client the size
    /// the output before it was written at.
    ///
    /// Presence is state too: a newer one replaces one still queued, wherever it is, so a
    /// viewer that reads slowly while a crowd joins holds one, not one per join. So is the
    /// session's state (working, waiting, …): a newer one replaces one still queued.
    pub fn push(&self, event: ViewerEvent) -> bool {
        let cost = event.cost();
        let mut q = self.shared.lock();
        let same_kind = |e: &ViewerEvent| match &event {
            ViewerEvent::Presence(_) => matches!(e, ViewerEvent::Presence(_)),
            ViewerEvent::State(_) => matches!(e, ViewerEvent::State(_)),
            _ => false,
        };
        if let Some(at) = q.events.iter().position(same_kind) {
            if let Some(old) = q.events.remove(at) {
                q.bytes -= old.cost();
            }
        }
        if let ViewerEvent::Status { info: newer, .. } = &event {
            // The last event, or the one before a presence (which says nothing of sizes).
            let mut at = q.events.len().checked_sub(1);
            if let Some(i) = at.filter(|&i| matches!(q.events[i], ViewerEvent::Presence(_))) {
                at = i.checked_sub(1);
            }
            if let Some(i) = at {
                if let ViewerEvent::Status { info: queued, .. } = &q.events[i] {
                    if (queued.rows, queued.cols) == (newer.rows, newer.cols) {
                        if let Some(old) = q.events.remove(i) {
                            q.bytes -= old.cost();
                        }
                    }
                }
            }
        }
        if q.events.len() >= self.shared.max_events || q.bytes + cost > self.shared.max_bytes {
            drop(q);
            self.shared.overrun.cancel();
            return false;
        }
        q.events.push_back(event);
        q.bytes += cost;
        drop(q);
        self.shared.ready.notify_one();
        true
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_one();
    }
}

impl EventReceiver {
    /// The next event; `None` once the session dropped its end and the queue is empty.
    /// Cancel-safe: an event is taken only when it is returned.
    pub async fn recv(&mut self) -> Option<ViewerEvent> {
        loop {
            {
                let mut q = self.shared.lock();
                if let Some(ev) = q.events.pop_front() {
                    q.bytes -= ev.cost();
                    return Some(ev);
                }
                if q.closed {
                    return None;
                }
            }
            self.shared.ready.notified().await;
        }
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<ViewerEvent> {
        let mut q = self.shared.lock();
        let ev = q.events.pop_front()?;
        q.bytes -= ev.cost();
        Some(ev)
    }

    /// Cancelled once an event could not be queued: the viewer fell too far behind.
    pub fn overrun(&self) -> CancellationToken {
        self.shared.overrun.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{channel, MAX_EVENTS, MAX_EVENT_BYTES};
    use crate::session::chat::ChatLine;
    use crate::session::events::{EndReason, ViewerEvent};

    fn chat(len: usize) -> ViewerEvent {
        ViewerEvent::Chat(ChatLine {
            user_name: "a".into(),
            guest: false,
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
        assert_eq!(rx.shared.lock().bytes, 0);
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

    fn status(viewers: usize, rows: u16, offset: u64) -> ViewerEvent {
        crate::session::events::test_status(viewers, rows, offset)
    }

    #[tokio::test]
    async fn a_newer_state_replaces_one_still_queued() {
        use crate::attention::{SessionState, State};
        let (tx, mut rx) = channel(10, usize::MAX);
        let state = |s: State| {
            let mut now = SessionState::starting("x");
            now.state = s;
            ViewerEvent::State(std::sync::Arc::new(now))
        };
        assert!(tx.push(state(State::Working)));
        assert!(tx.push(chat(1)));
        assert!(tx.push(state(State::Waiting)));
        assert!(matches!(rx.recv().await, Some(ViewerEvent::Chat(_))));
        match rx.recv().await {
            Some(ViewerEvent::State(s)) => assert_eq!(s.state, State::Waiting),
            other => panic!("{other:?}"),
        }
    }

    fn viewers_and_rows(ev: Option<ViewerEvent>) -> (usize, u16, u64) {
        match ev {
            Some(ViewerEvent::Status { info, offset }) => (info.viewers, info.rows, offset),
            other => panic!("expected a status, got {other:?}"),
        }
    }

    fn presence(people: u32) -> ViewerEvent {
        use crate::session::events::{Person, PresenceInfo};
        ViewerEvent::Presence(std::sync::Arc::new(PresenceInfo {
            people: (1..=people)
                .map(|n| Person {
                    viewer: n.into(),
                    num: n,
                    name: None,
                    user: None,
                    writer: true,
                    device: None,
                })
                .collect(),
            typing: None,
        }))
    }

    /// A crowd joining one by one, each join a status and a presence, takes two places in a
    /// viewer's queue that is not read meanwhile, not two per join: the viewer is not closed
    /// for other people's joins, and reads the latest of each.
    #[tokio::test]
    async fn presence_is_replaced_wherever_it_waits() {
        let (tx, mut rx) = channel(MAX_EVENTS, MAX_EVENT_BYTES);
        for n in 1..=3000 {
            assert!(tx.push(status(n as usize, 24, 0)), "status {n}");
            assert!(tx.push(presence(n)), "presence {n}");
        }
        assert_eq!(viewers_and_rows(rx.recv().await), (3000, 24, 0));
        match rx.recv().await {
            Some(ViewerEvent::Presence(p)) => assert_eq!(p.people.len(), 3000),
            other => panic!("expected the latest presence, got {other:?}"),
        }
        assert!(rx.try_recv().is_none() && !rx.overrun().is_cancelled());
        assert_eq!(rx.shared.lock().bytes, 0);
    }

    /// A join burst (many statuses at one size) takes one place in the queue, not one per
    /// join, so a reading viewer is never closed for other people's joins; a size change is
    /// never folded away.
    #[tokio::test]
    async fn statuses_of_one_size_coalesce_and_sizes_are_kept() {
        let (tx, mut rx) = channel(4, usize::MAX);
        for n in 1..=1000 {
            assert!(tx.push(status(n, 24, n as u64)), "status {n} queued");
        }
        assert!(tx.push(status(1000, 30, 2000)));
        assert!(tx.push(chat(1)));
        assert!(tx.push(status(999, 30, 2001)));
        assert_eq!(viewers_and_rows(rx.recv().await), (1000, 24, 1000));
        assert_eq!(viewers_and_rows(rx.recv().await), (1000, 30, 2000));
        assert!(matches!(rx.recv().await, Some(ViewerEvent::Chat(_))));
        assert_eq!(viewers_and_rows(rx.recv().await), (999, 30, 2001));
        assert!(!rx.overrun().is_cancelled());
        assert_eq!(rx.shared.lock().bytes, 0);
    }

    /// The receiver sees the end once the sender is gone and the queue is drained.
    #[tokio::test]
    async fn ends_after_the_last_event_once_the_sender_goes() {
        let (tx, mut rx) = channel(8, usize::MAX);
        assert!(tx.push(chat(1)));
        drop(tx);
        assert!(rx.recv().await.is_some());
        assert!(rx.recv().await.is_none());
    }
}
