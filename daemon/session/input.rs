//! Input on its way to the PTY: a byte budget shared by the session's writers (a writer that
//! outpaces the program waits, nothing is dropped), and the writer task that owns the PTY's
//! write half.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::pty::PtyMaster;

/// Input bytes in flight to the PTY (queued in commands or for the writer task) before writers
/// wait: the input queue's memory bound. A writer that sends faster than the program reads is
/// slowed (its socket is not read, so TCP pushes back); its input is never dropped.
pub(super) const INPUT_QUEUE_BYTES: usize = 1 << 20;

/// What one input message costs against [`INPUT_QUEUE_BYTES`] beyond its bytes (its queue
/// entry), so a flood of tiny messages is bounded in memory too.
pub(super) const INPUT_MESSAGE_OVERHEAD: usize = 64;

/// Bytes of the daemon's own answers to terminal queries queued for a program that does not
/// read its input; past it further answers are dropped (the program asked, and did not listen).
pub(super) const ANSWER_QUEUE_BYTES: usize = 64 * 1024;

/// A writer's share of the session's input budget; `None` for the daemon's own answers.
pub(super) type InputPermit = Option<OwnedSemaphorePermit>;

/// Bytes for the PTY writer task and what they hold of a budget until written.
pub(super) struct PtyInput {
    data: Bytes,
    /// Returned to the input budget when dropped (after the last byte is written).
    _permit: InputPermit,
    /// For an answer: the answer-queue counter to give its bytes back to.
    answer: Option<Arc<AtomicUsize>>,
    /// The count of items the writer task holds, this one among them until it is dropped.
    queued: Arc<AtomicUsize>,
}

/// Input typed during a YOLO restart, waiting for the new program: its bytes and the share of
/// the input budget they hold (so the wait is bounded like any queued input).
pub(super) struct HeldInput {
    data: Bytes,
    permit: InputPermit,
}

impl HeldInput {
    /// `data`, holding `permit` while it waits.
    pub(super) fn new(data: Bytes, permit: InputPermit) -> Self {
        Self { data, permit }
    }

    /// The item for the new program's writer task, counted in `queued`.
    pub(super) fn into_pty_input(self, queued: &Arc<AtomicUsize>) -> Box<PtyInput> {
        PtyInput::new(self.data, self.permit, None, queued)
    }
}

impl PtyInput {
    /// An item for the writer task, counted in `queued` until it is written or dropped.
    /// Boxed: the writer's channel reserves room for 32 items at the program's start, and
    /// most programs never have one queued (a key goes straight to the PTY).
    pub(super) fn new(
        data: Bytes,
        permit: InputPermit,
        answer: Option<Arc<AtomicUsize>>,
        queued: &Arc<AtomicUsize>,
    ) -> Box<Self> {
        queued.fetch_add(1, Ordering::AcqRel);
        Box::new(PtyInput {
            data,
            _permit: permit,
            answer,
            queued: queued.clone(),
        })
    }

    /// Marks the first `n` bytes written.
    fn consume(&mut self, n: usize) {
        let n = n.min(self.data.len());
        let _ = self.data.split_to(n);
        if let Some(queued) = &self.answer {
            queued.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

impl Drop for PtyInput {
    fn drop(&mut self) {
        // Unwritten answer bytes (the program ended) leave the count too.
        if let Some(queued) = &self.answer {
            queued.fetch_sub(self.data.len(), Ordering::Relaxed);
        }
        // Released after the last byte is written: input may go straight to the PTY again.
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes input to the PTY, so a program that stops reading its input never blocks the actor
/// (resizes are the actor's own, so they never wait behind queued input). Its queue is
/// unbounded as a channel but bounded in bytes by the permits and counters its items hold.
pub(super) async fn pty_writer(
    pty: PtyMaster,
    mut input: mpsc::UnboundedReceiver<Box<PtyInput>>,
    stop: CancellationToken,
) -> Vec<u8> {
    let mut pending: Option<Box<PtyInput>> = None;
    loop {
        let writing = pending.as_ref().map(|p| p.data.clone()).unwrap_or_default();
        tokio::select! {
            biased;
            // A live upgrade: what is not written yet goes to the next image, in order.
            _ = stop.cancelled() => {
                let mut left = pending.map(|p| p.data.to_vec()).unwrap_or_default();
                while let Ok(item) = input.try_recv() {
                    left.extend_from_slice(&item.data);
                }
                return left;
            }
            written = pty.write(&writing), if !writing.is_empty() => match written {
                Ok(n) => {
                    if let Some(item) = &mut pending {
                        item.consume(n);
                        if item.data.is_empty() {
                            // Gives the permit back: the next writer may go on.
                            pending = None;
                        }
                    }
                }
                Err(e) => { debug!("pty write failed: {e}"); return Vec::new(); }
            },
            next = input.recv(), if pending.is_none() => match next {
                Some(item) if item.data.is_empty() => {}
                Some(item) => pending = Some(item),
                None => return Vec::new(),
            },
        }
    }
}
