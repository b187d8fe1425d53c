//! One receiver's queue of transitions to deliver: bounded, the oldest dropped when full, so
//! that telling it never waits and a receiver that fell behind gets the latest news first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::transition::Transition;

/// A bounded queue with one consumer (the receiver's delivery task).
pub(super) struct Inbox {
    /// Most transitions held.
    bound: usize,
    queued: Mutex<Queued>,
    /// Woken on every push.
    ready: Notify,
}

struct Queued {
    items: VecDeque<Arc<Transition>>,
    /// The delivery task has ended: nothing pushed now is ever delivered.
    closed: bool,
}

impl Inbox {
    /// An empty inbox holding at most `bound` (at least 1).
    pub(super) fn new(bound: usize) -> Self {
        let bound = bound.max(1);
        Inbox {
            bound,
            queued: Mutex::new(Queued {
                items: VecDeque::with_capacity(bound.min(64)),
                closed: false,
            }),
            ready: Notify::new(),
        }
    }

    /// Queues `t`; returns how many transitions were dropped for it: the oldest when full, or
    /// `t` itself once the inbox is closed.
    pub(super) fn push(&self, t: Arc<Transition>) -> u64 {
        let mut queued = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        if queued.closed {
            return 1;
        }
        let dropped = if queued.items.len() >= self.bound {
            queued.items.pop_front();
            1
        } else {
            0
        };
        queued.items.push_back(t);
        drop(queued);
        self.ready.notify_one();
        dropped
    }

    /// The oldest transition, once there is one.
    pub(super) async fn pop(&self) -> Arc<Transition> {
        loop {
            if let Some(t) = self
                .queued
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .items
                .pop_front()
            {
                return t;
            }
            // A push between the check and here leaves a permit: this returns at once.
            self.ready.notified().await;
        }
    }

    /// Refuses every later push; returns how many were queued and will not be delivered.
    pub(super) fn close(&self) -> u64 {
        let mut queued = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        queued.closed = true;
        let left = queued.items.len() as u64;
        queued.items.clear();
        left
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use uuid::Uuid;

    use super::*;
    use crate::attention::State as StateName;

    fn numbered(n: u8) -> Arc<Transition> {
        Arc::new(Transition {
            session: Uuid::nil(),
            num: Some(n),
            name: String::new(),
            assistant: "shell".to_owned(),
            from: None,
            to: StateName::Waiting,
            reason: String::new(),
            at: UNIX_EPOCH,
            url: None,
        })
    }

    #[tokio::test]
    async fn full_drops_the_oldest_and_says_so() {
        let inbox = Inbox::new(3);
        let dropped: u64 = (1..=5).map(|n| inbox.push(numbered(n))).sum();
        assert_eq!(dropped, 2);
        for want in 3..=5 {
            assert_eq!(inbox.pop().await.num, Some(want));
        }
        assert_eq!(inbox.push(numbered(6)), 0);
        assert_eq!(inbox.close(), 1, "the one left is not delivered");
        assert_eq!(inbox.push(numbered(7)), 1, "closed: dropped at once");
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let inbox = Arc::new(Inbox::new(2));
        let popper = tokio::spawn({
            let inbox = inbox.clone();
            async move { inbox.pop().await.num }
        });
        tokio::task::yield_now().await;
        inbox.push(numbered(9));
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), popper).await;
        assert_eq!(got.unwrap().unwrap(), Some(9));
    }
}
