//! A viewer's position in the live stream, shared by its writer task and the session actor,
//! and the actor's direct path onto the viewer's socket.
//!
//! When the viewer is idle and caught up, the actor writes new output straight onto its
//! socket with a non-blocking write: no task wake-up, and the viewer that typed gets its echo
//! before the others are even looked at. Otherwise (the writer task is writing, the viewer is
//! behind, its socket is full, its flow-control budget is spent) the actor wakes the writer
//! task, which catches up from the output log. `busy` keeps the two from interleaving frames.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::transport::{MessageKind, Transport};
use crate::metrics::Metrics;
use crate::protocol::Dialect;
use crate::session::LiveOutput;

/// What the actor and the writer task share about one viewer.
pub struct Live {
    state: Mutex<LiveState>,
    /// Wakes the writer task: output to catch up with (shared by every session a
    /// multiplexed connection carries).
    notify: Arc<Notify>,
    /// The socket, for the actor's non-blocking writes, and the daemon's counters they count
    /// in (none: the actor only wakes the task).
    tcp: Option<(Arc<TcpStream>, Arc<Metrics>)>,
    /// `?flow=ack`: at most `budget` bytes sent and not acknowledged.
    flow_ack: bool,
    budget: u64,
    /// Frames output in the viewer's dialect and transport ([`push_output`] for them): a plain
    /// function pointer, so the actor's per-chunk path costs the same for every dialect.
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
    /// Whether the actor's frame buffer for this viewer holds more than an idle viewer keeps
    /// (a flood's chunks grow it).
    pub fn holds_large_buffer(&self) -> bool {
        self.scratch.capacity() > super::subscription::KEEP_WHEN_IDLE
    }

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
    /// A viewer starting busy (its writer task greets it first), at offset 0; what the actor
    /// writes to it is counted in `metrics`.
    pub fn new(
        tcp: Option<Arc<TcpStream>>,
        flow_ack: bool,
        budget: u64,
        frame_output: fn(&mut Vec<u8>, &[u8]),
        metrics: Arc<Metrics>,
    ) -> Arc<Live> {
        Arc::new(Live {
            state: Mutex::new(LiveState {
                busy: true,
                ..LiveState::default()
            }),
            notify: Arc::new(Notify::new()),
            tcp: tcp.map(|tcp| (tcp, metrics)),
            flow_ack,
            budget,
            frame_output,
        })
    }

    /// A position the actor never writes for: it only wakes `notify`, and the writer copies
    /// from the log itself (a multiplexed connection, whose frames the actor cannot build).
    pub fn waking(notify: Arc<Notify>) -> Arc<Live> {
        Arc::new(Live {
            state: Mutex::new(LiveState::default()),
            notify,
            tcp: None,
            flow_ack: false,
            budget: u64::MAX,
            frame_output: |_, _| {},
        })
    }

    /// Whether the actor writes new output to the viewer's socket itself (see [`Live`]).
    pub fn is_direct(&self) -> bool {
        self.tcp.is_some()
    }

    /// The shared state, for the writer task.
    pub fn lock(&self) -> MutexGuard<'_, LiveState> {
        // Every update completes before anything can panic: a poisoned lock is still sound.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives back the actor's frame buffer if it grew past what an idle viewer keeps: it
    /// grows again with the next large chunk.
    pub fn release_large_buffer(&self) {
        let mut st = self.lock();
        if st.holds_large_buffer() {
            st.scratch = Vec::new();
        }
        if st.leftover.is_empty() {
            st.leftover = Vec::new();
        }
    }

    /// Resolves when the actor has woken the writer task (or already had, since it last waited).
    pub async fn woken(&self) {
        self.notify.notified().await;
    }
}

impl LiveOutput for Live {
    fn try_push(&self, start: u64, chunk: &[u8]) -> bool {
        let Some((tcp, metrics)) = &self.tcp else {
            return false;
        };
        // The writer task holds the lock only for moments; never wait for it here.
        let Ok(mut st) = self.state.try_lock() else {
            return false;
        };
        // What the viewer lacks of the chunk: all of it, its end, or (already sent) nothing.
        let Some(skip) = st.offset.checked_sub(start) else {
            return false;
        };
        let Some(chunk) = usize::try_from(skip).ok().and_then(|s| chunk.get(s..)) else {
            return false;
        };
        if chunk.is_empty() {
            return true;
        }
        let len = chunk.len() as u64;
        if st.busy || !st.leftover.is_empty() || st.budget_left(self) < len {
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
        metrics.bytes_out.add(len);
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

    fn offset(&self) -> Option<u64> {
        // Asked only when the session is quiet; the writer task holds the lock for moments,
        // and a position that cannot be told now keeps the log's window (asked again later).
        self.state.try_lock().ok().map(|st| st.offset)
    }
}

/// Appends terminal output as binary messages of transport `T`, cut by dialect `D`'s rules
/// (for the browser dialect: at most 8 KiB each, never 3+ bytes starting with 0x02).
pub fn push_output<D: Dialect, T: Transport>(out: &mut Vec<u8>, data: &[u8]) {
    for range in D::output_ranges(data) {
        T::frame(out, MessageKind::Binary, &data[range]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::swe::Swe;
    use crate::viewer::transport::WebSocket;

    /// A joined fan-out chunk: the viewer is sent only what it lacks of it.
    #[tokio::test]
    async fn a_push_sends_only_what_the_viewer_lacks() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let mut client = client.expect("connect");
        let server = Arc::new(accepted.expect("accept").0);
        let metrics = Arc::new(Metrics::default());
        let frame = push_output::<Swe, WebSocket>;
        let live = Live::new(Some(server), false, 0, frame, metrics.clone());
        live.lock().busy = false;
        assert!(live.try_push(0, b"abc"));
        // Joined with what came next: only "de" goes.
        assert!(live.try_push(0, b"abcde"));
        // All of it sent already: nothing to do.
        assert!(live.try_push(3, b"de"));
        // A chunk the viewer is not yet at (or is past): its task must catch up.
        assert!(!live.try_push(9, b"x"));
        assert!(!live.try_push(0, b"ab"));
        assert_eq!(live.lock().offset, 5);
        assert_eq!(metrics.bytes_out.get(), 5, "each byte counted once");
        let mut got = [0u8; 7];
        client.read_exact(&mut got).await.expect("read");
        assert_eq!(got, [0x82, 3, b'a', b'b', b'c', 0x82, 2]);
        let mut rest = [0u8; 2];
        client.read_exact(&mut rest).await.expect("read");
        assert_eq!(&rest, b"de");
    }

    #[test]
    fn frames_follow_the_output_rules() {
        let mut out = Vec::new();
        push_output::<Swe, WebSocket>(&mut out, b"\x02ab");
        // The 0x02 byte alone, then the rest.
        assert_eq!(out, [0x82, 1, 2, 0x82, 2, b'a', b'b']);
        out.clear();
        let big = vec![b'x'; 9000];
        push_output::<Swe, WebSocket>(&mut out, &big);
        assert_eq!(&out[..4], &[0x82, 126, 0x20, 0x00]);
        assert_eq!(out.len(), 4 + 8192 + 4 + 808);
    }
}
