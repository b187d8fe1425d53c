//! A viewer's position in the live stream, shared by its writer task and the session actor,
//! and the wire frames both of them build.
//!
//! When the viewer is idle and caught up, the actor writes new output straight onto its
//! socket with a non-blocking write: no task wake-up, and the viewer that typed gets its echo
//! before the others are even looked at. Otherwise (the writer task is writing, the viewer is
//! behind, its socket is full, its flow-control budget is spent) the actor wakes the writer
//! task, which catches up from the output log. `busy` keeps the two from interleaving frames.

use std::sync::{Arc, Mutex, MutexGuard};

use fastwebsockets::{Frame, OpCode, Payload};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::metrics::METRICS;
use crate::protocol::Dialect;
use crate::session::LiveOutput;

/// Longest WebSocket frame header a server writes (no mask).
const MAX_HEAD: usize = 10;

/// What the actor and the writer task share about one viewer.
pub struct Live {
    state: Mutex<LiveState>,
    /// Wakes the writer task: output to catch up with.
    notify: Notify,
    /// The socket, for the actor's non-blocking writes (none: the actor only wakes the task).
    tcp: Option<Arc<TcpStream>>,
    /// `?flow=ack`: at most `budget` bytes sent and not acknowledged.
    flow_ack: bool,
    budget: u64,
    /// Frames output in the viewer's dialect ([`push_output`] for it): a plain function
    /// pointer, so the actor's per-chunk path costs the same for every dialect.
    frame_output: fn(&mut Vec<u8>, &[u8]),
}

/// The viewer's position; see [`Live`].
#[derive(Debug, Default)]
pub struct LiveState {
    /// Next log offset to send.
    pub offset: u64,
    /// Live output bytes sent, in total.
    pub sent: u64,
    /// Live output bytes the client acknowledged, in total.
    pub acked: u64,
    /// The writer task owns the socket: it is writing, or about to.
    pub busy: bool,
    /// Frame bytes the actor could not finish writing: the writer task sends them first.
    pub leftover: Vec<u8>,
    /// The actor's frame buffer, kept between chunks.
    scratch: Vec<u8>,
}

impl LiveState {
    /// Bytes that may still be sent before an acknowledgement (unbounded without flow=ack).
    pub fn budget_left(&self, live: &Live) -> u64 {
        if live.flow_ack {
            live.budget
                .saturating_sub(self.sent.saturating_sub(self.acked))
        } else {
            u64::MAX
        }
    }
}

impl Live {
    /// A viewer starting busy (its writer task greets it first), at offset 0.
    pub fn new(
        tcp: Option<Arc<TcpStream>>,
        flow_ack: bool,
        budget: u64,
        frame_output: fn(&mut Vec<u8>, &[u8]),
    ) -> Arc<Live> {
        Arc::new(Live {
            state: Mutex::new(LiveState {
                busy: true,
                ..LiveState::default()
            }),
            notify: Notify::new(),
            tcp,
            flow_ack,
            budget,
            frame_output,
        })
    }

    /// The shared state, for the writer task.
    pub fn lock(&self) -> MutexGuard<'_, LiveState> {
        // Every update completes before anything can panic: a poisoned lock is still sound.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves when the actor has woken the writer task (or already had, since it last waited).
    pub async fn woken(&self) {
        self.notify.notified().await;
    }
}

impl LiveOutput for Live {
    fn try_push(&self, start: u64, chunk: &[u8]) -> bool {
        let Some(tcp) = &self.tcp else {
            return false;
        };
        // The writer task holds the lock only for moments; never wait for it here.
        let Ok(mut st) = self.state.try_lock() else {
            return false;
        };
        let len = chunk.len() as u64;
        if st.busy || st.offset != start || !st.leftover.is_empty() || st.budget_left(self) < len {
            return false;
        }
        let mut frames = std::mem::take(&mut st.scratch);
        frames.clear();
        (self.frame_output)(&mut frames, chunk);
        let written = match tcp.try_write(&frames) {
            Ok(n) => n,
            // Full (or failing): the writer task waits for it, or finds the error.
            Err(_) => {
                st.scratch = frames;
                return false;
            }
        };
        st.offset += len;
        st.sent += len;
        METRICS.bytes_out.add(len);
        let done = written == frames.len();
        if !done {
            st.leftover.extend_from_slice(&frames[written..]);
        }
        st.scratch = frames;
        done
    }

    fn wake(&self) {
        self.notify.notify_one();
    }
}

/// Appends `payload` as one unmasked WebSocket frame.
pub fn push_frame(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    push_head(out, opcode, payload);
    out.extend_from_slice(payload);
}

/// Appends only the header of an unmasked, final frame carrying `payload`, for a writer that
/// sends the payload from where it is.
pub fn push_head(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    let mut head = [0u8; MAX_HEAD];
    let n = Frame::new(true, opcode, None, Payload::Borrowed(payload)).fmt_head(&mut head);
    out.extend_from_slice(&head[..n]);
}

/// Appends terminal output as binary frames, cut by the dialect's rules (at most 8 KiB each,
/// never 3+ bytes starting with 0x02).
pub fn push_output<D: Dialect>(out: &mut Vec<u8>, data: &[u8]) {
    for range in D::output_ranges(data) {
        push_frame(out, OpCode::Binary, &data[range]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::swe::Swe;

    #[test]
    fn frames_follow_the_output_rules() {
        let mut out = Vec::new();
        push_output::<Swe>(&mut out, b"\x02ab");
        // The 0x02 byte alone, then the rest.
        assert_eq!(out, [0x82, 1, 2, 0x82, 2, b'a', b'b']);
        out.clear();
        let big = vec![b'x'; 9000];
        push_output::<Swe>(&mut out, &big);
        assert_eq!(&out[..4], &[0x82, 126, 0x20, 0x00]);
        assert_eq!(out.len(), 4 + 8192 + 4 + 808);
    }
}
