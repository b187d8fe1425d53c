//! The wire a driver writes to: how a [`Transport`] frames a message, and the [`Sink`] that
//! writes whole frames to it and knows whether the wire is at a frame boundary.
//!
//! The drivers ([`super::run`], [`super::mux`]) are written against this, not against a
//! WebSocket: a transport is a framing (what a text, a binary or a control message looks like
//! on the wire), a way to write framed bytes in order, and optionally a socket the session
//! actor may write to without waiting (its direct path, see [`super::live`]).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use fastwebsockets::{Frame, OpCode, Payload};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::socket::WriteSide;
use crate::protocol::Outbound;

/// What a message is, as a driver sees it; the transport says how it looks on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
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
    fn frame(out: &mut Vec<u8>, kind: Kind, payload: &[u8]);

    /// Appends the message that closes the connection with `code` and `reason`.
    fn close_frame(out: &mut Vec<u8>, code: u16, reason: &str);

    /// Writes framed bytes, all of them, in order.
    fn write_all<'a>(
        &'a mut self,
        bytes: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + Send + 'a;

    /// The socket the session actor may write to without waiting, when there is one.
    fn direct(&self) -> Option<Arc<TcpStream>>;
}

/// The longest WebSocket frame header a server writes (no mask).
const MAX_WS_HEAD: usize = 10;

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
    fn frame(out: &mut Vec<u8>, kind: Kind, payload: &[u8]) {
        let opcode = match kind {
            Kind::Text => OpCode::Text,
            Kind::Binary => OpCode::Binary,
            Kind::Control(op) => op,
        };
        push_frame(out, opcode, payload);
    }

    fn close_frame(out: &mut Vec<u8>, code: u16, reason: &str) {
        let frame = Frame::close(code, reason.as_bytes());
        Self::frame(out, Kind::Control(OpCode::Close), &frame.payload);
    }

    async fn write_all<'a>(&'a mut self, bytes: &'a [u8]) -> io::Result<()> {
        self.write.write_all(bytes).await
    }

    fn direct(&self) -> Option<Arc<TcpStream>> {
        self.tcp.clone()
    }
}

/// Appends `payload` as one unmasked, final WebSocket frame.
pub fn push_frame(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    push_head(out, opcode, payload);
    out.extend_from_slice(payload);
}

/// Appends only the header of an unmasked, final WebSocket frame carrying `payload`, for a
/// writer that sends the payload from where it is (vectored).
pub fn push_head(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    let mut head = [0u8; MAX_WS_HEAD];
    let n = Frame::new(true, opcode, None, Payload::Borrowed(payload)).fmt_head(&mut head);
    out.extend_from_slice(&head[..n]);
}

/// Writes whole messages to a transport, remembering whether a write was cut off part way
/// (then no further frame may follow it on the wire).
pub struct Sink<T> {
    transport: T,
    mid_frame: bool,
}

/// Why writing stopped: the connection failed.
pub type WriteResult = io::Result<()>;

impl<T: Transport> Sink<T> {
    /// Writes to `transport`.
    pub fn new(transport: T) -> Self {
        Sink {
            transport,
            mid_frame: false,
        }
    }

    /// Writes bytes already framed by `T` (a batch of frames goes in one write).
    pub async fn write(&mut self, framed: &[u8]) -> WriteResult {
        self.mid_frame = true;
        self.transport.write_all(framed).await?;
        self.mid_frame = false;
        Ok(())
    }

    /// Writes one message of `kind`.
    pub async fn send(&mut self, kind: Kind, payload: &[u8]) -> WriteResult {
        let mut out = Vec::with_capacity(payload.len() + MAX_WS_HEAD);
        T::frame(&mut out, kind, payload);
        self.write(&out).await
    }

    /// Writes a message a codec built.
    pub async fn message(&mut self, msg: &Outbound) -> WriteResult {
        match msg {
            Outbound::Text(t) => self.send(Kind::Text, t.as_bytes()).await,
            Outbound::Binary(b) => self.send(Kind::Binary, b).await,
        }
    }

    /// Closes the connection with `code` and `reason`.
    pub async fn close(&mut self, code: u16, reason: &str) -> WriteResult {
        let mut out = Vec::with_capacity(reason.len() + 2 + MAX_WS_HEAD);
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

    #[test]
    fn websocket_frames_are_unmasked_and_whole() {
        let mut out = Vec::new();
        WebSocket::frame(&mut out, Kind::Binary, b"ab");
        assert_eq!(out, [0x82, 2, b'a', b'b']);
        out.clear();
        WebSocket::frame(&mut out, Kind::Text, &[b'x'; 200]);
        assert_eq!(&out[..4], &[0x81, 126, 0, 200]);
        assert_eq!(out.len(), 4 + 200);
        out.clear();
        WebSocket::close_frame(&mut out, 1000, "bye");
        assert_eq!(out, [0x88, 5, 0x03, 0xe8, b'b', b'y', b'e']);
    }
}
