//! A session's tap: a copy of what it tells every viewer (sizes, names, chat, restarts, the
//! exit) and, when asked, its input, for a reader that is not a viewer (the recorder). Output
//! is not carried here: the reader follows the output log from its own offset.
//!
//! The actor never waits on it: the queue is bounded in items and bytes, and what does not
//! fit is counted as lost, for the reader to say so.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::handle::Command;
use super::ViewerEvent;

/// Items queued before further ones are lost.
const TAP_ITEMS: usize = 1024;
/// Input bytes queued before further input is lost (1 MiB, the session's own input bound).
const TAP_INPUT_BYTES: usize = 1 << 20;

/// What the tap carries.
#[derive(Debug)]
pub enum Tapped {
    /// An event every viewer was sent.
    Event(ViewerEvent),
    /// Input written to the program, after output up to `offset`.
    Input {
        /// The bytes.
        data: Bytes,
        /// The log's head when it was written.
        offset: u64,
    },
    /// The session was frozen for a live upgrade: the next image of the daemon goes on with
    /// the recording, so it is not ended.
    Suspended,
}

/// The session's end.
#[derive(Debug)]
pub struct Tap {
    tx: mpsc::Sender<Tapped>,
    shared: Arc<Shared>,
    /// Whether input is copied.
    input: bool,
}

/// The reader's end.
#[derive(Debug)]
pub struct TapReceiver {
    rx: mpsc::Receiver<Tapped>,
    shared: Arc<Shared>,
    /// The session, without keeping it alive: for [`TapReceiver::report_failure`].
    session: mpsc::WeakSender<Command>,
}

#[derive(Debug, Default)]
struct Shared {
    input_bytes: AtomicUsize,
    lost: AtomicU64,
}

/// A tap; `input`: whether input is copied too; `session`: the actor's queue.
pub(super) fn tap(input: bool, session: mpsc::WeakSender<Command>) -> (Tap, TapReceiver) {
    let (tx, rx) = mpsc::channel(TAP_ITEMS);
    let shared = Arc::new(Shared::default());
    (
        Tap {
            tx,
            shared: shared.clone(),
            input,
        },
        TapReceiver {
            rx,
            shared,
            session,
        },
    )
}

impl Tap {
    /// Copies an event, without waiting.
    pub(super) fn event(&self, event: &ViewerEvent) {
        if self.tx.try_send(Tapped::Event(event.clone())).is_err() {
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The session is frozen for a live upgrade (the last item).
    pub(super) fn suspend(&self) {
        if self.tx.try_send(Tapped::Suspended).is_err() {
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Copies input, when asked to, without waiting.
    pub(super) fn input(&self, data: &Bytes, offset: u64) {
        if !self.input {
            return;
        }
        let queued = self.shared.input_bytes.load(Ordering::Relaxed);
        if queued + data.len() > TAP_INPUT_BYTES {
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.shared
            .input_bytes
            .fetch_add(data.len(), Ordering::Relaxed);
        let item = Tapped::Input {
            data: data.clone(),
            offset,
        };
        if let Err(e) = self.tx.try_send(item) {
            if let Tapped::Input { data, .. } = e.into_inner() {
                self.shared
                    .input_bytes
                    .fetch_sub(data.len(), Ordering::Relaxed);
            }
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl TapReceiver {
    /// The next item; `None` once the session has ended and everything was read.
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Option<Tapped> {
        let item = self.rx.recv().await?;
        if let Tapped::Input { data, .. } = &item {
            self.shared
                .input_bytes
                .fetch_sub(data.len(), Ordering::Relaxed);
        }
        Some(item)
    }

    /// Tells the session's writers (those connected and those who join later, each once)
    /// that the reader failed: its recording stopped, and why.
    pub async fn report_failure(&self, message: String) {
        if let Some(session) = self.session.upgrade() {
            let _ = session.send(Command::RecordingFailed { message }).await;
        }
    }

    /// How many items were lost since the last call (the queue was full).
    pub fn take_lost(&self) -> u64 {
        self.shared.lost.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::EndReason;

    #[tokio::test]
    async fn copies_input_only_when_asked_and_counts_what_does_not_fit() {
        let (none, _) = mpsc::channel(1);
        let (tap_without, mut rx) = tap(false, none.downgrade());
        tap_without.input(&Bytes::from_static(b"secret"), 0);
        tap_without.event(&ViewerEvent::Close(EndReason::Deleted));
        drop(tap_without);
        assert!(matches!(rx.recv().await, Some(Tapped::Event(_))));
        assert!(rx.recv().await.is_none());

        let (tap, mut rx) = tap(true, none.downgrade());
        let big = Bytes::from(vec![b'x'; TAP_INPUT_BYTES]);
        tap.input(&big, 5);
        tap.input(&Bytes::from_static(b"y"), 6);
        assert_eq!(rx.take_lost(), 1, "past the byte bound");
        assert!(matches!(
            rx.recv().await,
            Some(Tapped::Input { offset: 5, .. })
        ));
        tap.input(&Bytes::from_static(b"y"), 6);
        assert!(matches!(
            rx.recv().await,
            Some(Tapped::Input { offset: 6, .. })
        ));
        for _ in 0..TAP_ITEMS + 3 {
            tap.event(&ViewerEvent::Close(EndReason::Deleted));
        }
        assert_eq!(rx.take_lost(), 3);
        assert_eq!(rx.take_lost(), 0);
    }
}
