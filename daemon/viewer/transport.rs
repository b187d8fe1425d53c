//! The wire a driver writes to: how a [`Transport`] frames a message, and the [`Sink`] that
//! writes whole frames to it and knows whether the wire is at a frame boundary.
//!
//! The drivers ([`super::run`], [`super::mux`]) are written against this, not against a
//! WebSocket: a transport is a framing (what a text, a binary or a control message looks like
//! on the wire), a way to write framed bytes in order, and optionally a socket the session
//! actor may write to without waiting (its direct path, see [`super::live`]).
//!
//! The trait stays here with the drivers rather than in [`crate::ws`]: it is what lets a
//! driver write to a wire other than a WebSocket (an SSE body, one channel of a multiplexed
//! connection), and the direct path is the session actor's. Only the WebSocket framing it
//! uses, [`crate::ws::frame`], is WebSocket plumbing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use fastwebsockets::OpCode;
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use crate::protocol::Outbound;
use crate::ws::frame::{push_close, push_frame, MAX_HEAD};
use crate::ws::socket::WriteSide;
use crate::ws::{CLOSE_DRAIN, CLOSE_GRACE};

/// What a message is, as a driver sees it; the transport says how it looks on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A text message (JSON control, chat).
    Text,
    /// A binary message (terminal output, a snapshot chunk).
    Binary,
    /// A control frame the transport's own rules oblige (a WebSocket pong or close reply).
    Control(OpCode),
}

/// A connection the drivers write to.
pub trait Transport: Send + 'static {
    /// Appends `payload` as one whole message of `kind`. A plain function, so the actor's
    /// direct path frames output without a call through a vtable.
    fn frame(out: &mut Vec<u8>, kind: MessageKind, payload: &[u8]);

    /// Appends the message that closes the connection with `code` and `reason`.
    fn close_frame(out: &mut Vec<u8>, code: u16, reason: &str);

    /// Writes framed bytes, all of them, in order, and onto the wire (a TLS layer's buffered
    /// records too); `true` when the socket made it wait, i.e. the peer reads slower than it
    /// is written to.
    fn write_all<'a>(
        &'a mut self,
        bytes: &'a [u8],
    ) -> impl Future<Output = io::Result<bool>> + Send + 'a;

    /// The socket the session actor may write to without waiting, when there is one.
    fn direct(&self) -> Option<Arc<TcpStream>>;
}

/// A server's side of a WebSocket: unmasked frames on the upgraded connection's write half.
pub struct WebSocket {
    write: WriteSide,
    tcp: Option<Arc<TcpStream>>,
}

impl WebSocket {
    /// The write half of an upgraded connection, and its TCP socket if it is one.
    pub fn new(write: WriteSide, tcp: Option<Arc<TcpStream>>) -> Self {
        WebSocket { write, tcp }
    }
}

impl Transport for WebSocket {
    fn frame(out: &mut Vec<u8>, kind: MessageKind, payload: &[u8]) {
        let opcode = match kind {
            MessageKind::Text => OpCode::Text,
            MessageKind::Binary => OpCode::Binary,
            MessageKind::Control(op) => op,
        };
        push_frame(out, opcode, payload);
    }

    fn close_frame(out: &mut Vec<u8>, code: u16, reason: &str) {
        push_close(out, code, reason);
    }

    async fn write_all<'a>(&'a mut self, mut bytes: &'a [u8]) -> io::Result<bool> {
        let (write, mut waited) = (&mut self.write, false);
        std::future::poll_fn(|cx| {
            let pending = |waited: &mut bool| {
                *waited = true;
                Poll::Pending
            };
            while !bytes.is_empty() {
                match Pin::new(&mut *write).poll_write(cx, bytes) {
                    Poll::Pending => return pending(&mut waited),
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => bytes = &bytes[n..],
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                }
            }
            // TLS: a write is done once rustls has the bytes, and the records it could not
            // put on the socket yet wait in its buffer until the next write or a flush; the
            // end of a flood or an echo must not. (A no-op on plain TCP.)
            match Pin::new(&mut *write).poll_flush(cx) {
                Poll::Pending => pending(&mut waited),
                Poll::Ready(done) => Poll::Ready(done),
            }
        })
        .await?;
        Ok(waited)
    }

    fn direct(&self) -> Option<Arc<TcpStream>> {
        self.tcp.clone()
    }
}

/// Writes whole messages to a transport, remembering whether a write was cut off part way
/// (then no further frame may follow it on the wire).
pub struct Sink<T> {
    transport: T,
    mid_frame: bool,
    /// Whether the latest write had to wait for the socket.
    waited: bool,
    /// Writes completed, for whoever decides whether the peer still reads.
    progress: Progress,
}

/// A count of a sink's completed writes, shared with whoever waits for the peer to stop
/// reading (a closing connection is dropped only once its writes stop going through).
#[derive(Clone, Default)]
pub struct Progress(Arc<AtomicU64>);

impl Progress {
    /// Resolves when a closing connection may be dropped: once `closing` has resolved, as
    /// soon as no write completed for [`CLOSE_GRACE`] (a client that stopped reading), or after
    /// [`CLOSE_DRAIN`] whatever its writes do (one still reading a backlog gets its close frame
    /// within reason).
    pub async fn stuck_after(&self, closing: impl Future<Output = ()>) {
        closing.await;
        self.stalled(CLOSE_GRACE, CLOSE_DRAIN).await;
    }

    /// Resolves once no write completed for `grace`, or after `most` in any case.
    pub async fn stalled(&self, grace: Duration, most: Duration) {
        let end = tokio::time::Instant::now() + most;
        loop {
            let before = self.0.load(Ordering::Relaxed);
            let check = (tokio::time::Instant::now() + grace).min(end);
            tokio::time::sleep_until(check).await;
            if check == end || self.0.load(Ordering::Relaxed) == before {
                return;
            }
        }
    }
}

/// Why writing stopped: the connection failed.
pub type WriteResult = io::Result<()>;

impl<T: Transport> Sink<T> {
    /// Writes to `transport`.
    pub fn new(transport: T) -> Self {
        Sink {
            transport,
            mid_frame: false,
            waited: false,
            progress: Progress::default(),
        }
    }

    /// Writes bytes already framed by `T` (a batch of frames goes in one write).
    pub async fn write(&mut self, framed: &[u8]) -> WriteResult {
        self.mid_frame = true;
        self.waited = true;
        self.waited = self.transport.write_all(framed).await?;
        self.mid_frame = false;
        self.progress.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The count of this sink's completed writes.
    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    /// Whether the latest write had to wait for the socket to take it (or failed): the peer
    /// was not reading as fast as it was written to.
    pub fn waited(&self) -> bool {
        self.waited
    }

    /// Writes one message of `kind`.
    pub async fn send(&mut self, kind: MessageKind, payload: &[u8]) -> WriteResult {
        let mut out = Vec::with_capacity(payload.len() + MAX_HEAD);
        T::frame(&mut out, kind, payload);
        self.write(&out).await
    }

    /// Writes a message a codec built.
    pub async fn message(&mut self, msg: &Outbound) -> WriteResult {
        match msg {
            Outbound::Text(t) => self.send(MessageKind::Text, t.as_bytes()).await,
            Outbound::Binary(b) => self.send(MessageKind::Binary, b).await,
        }
    }

    /// Closes the connection with `code` and `reason`.
    pub async fn close(&mut self, code: u16, reason: &str) -> WriteResult {
        let mut out = Vec::with_capacity(reason.len() + 2 + MAX_HEAD);
        T::close_frame(&mut out, code, reason);
        self.write(&out).await
    }

    /// Closes if the wire is at a frame boundary and the transport takes it within `grace`;
    /// for a connection about to be dropped.
    pub async fn try_close(&mut self, code: u16, reason: &str, grace: Duration) {
        if !self.mid_frame {
            let _ = tokio::time::timeout(grace, self.close(code, reason)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 10 ms a write goes through, `steps` times; the count of those done.
    fn writes(progress: &Progress, steps: Option<u32>) -> Arc<AtomicU64> {
        let done = Arc::new(AtomicU64::new(0));
        let (progress, count) = (progress.clone(), done.clone());
        tokio::spawn(async move {
            while steps.is_none_or(|s| count.load(Ordering::Relaxed) < u64::from(s)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
                progress.0.fetch_add(1, Ordering::Relaxed);
                count.fetch_add(1, Ordering::Relaxed);
            }
        });
        done
    }

    /// A peer still reading is waited for; once its writes stop, the wait ends.
    #[tokio::test]
    async fn a_close_waits_while_writes_go_through() {
        let progress = Progress::default();
        let done = writes(&progress, Some(30));
        progress
            .stalled(Duration::from_secs(1), Duration::from_secs(60))
            .await;
        assert_eq!(
            done.load(Ordering::Relaxed),
            30,
            "ended while writes went on"
        );
    }

    /// Writes that never stop are waited for no longer than the most.
    #[tokio::test]
    async fn a_close_waits_no_longer_than_the_most() {
        let progress = Progress::default();
        let _done = writes(&progress, None);
        tokio::time::timeout(
            Duration::from_secs(30),
            progress.stalled(Duration::from_secs(1), Duration::from_millis(300)),
        )
        .await
        .expect("the wait ends at the most");
    }
}
