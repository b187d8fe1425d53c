//! A connection's reader task: reads whole WebSocket messages (joining fragments, checking
//! RFC 6455's rules, answering pings and closes) and hands each to an [`OnMessage`] handler;
//! replies go to the writer task through [`Replies`].
//!
//! A fastwebsockets read is not cancel-safe, so reading runs on a task of its own.

use std::time::Duration;

use bytes::Bytes;
use fastwebsockets::{Frame, OpCode};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{frame_rules, socket, CLOSE_GRACE};
use crate::protocol::{Inbound, Outbound};

/// The writer, or whatever a connection's messages feed, is gone: the reader stops.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the connection's writer or session is gone")]
pub struct Gone;

/// The reader's way to the writer: waits for room while the writer is busy, but not past the
/// stall deadline; a client that lets its replies pile up that long is overrun and closed.
pub struct Replies {
    /// To the writer task.
    pub tx: mpsc::Sender<Local>,
    /// How long a reply may wait for room.
    pub patience: Duration,
    /// Cancelled when a reply waited too long.
    pub overrun: CancellationToken,
}

/// Replies queued from the reader task to the writer task. Each is small (a pong's data is
/// capped, control payloads are at most 125 bytes, errors are short), so this bounds them in
/// bytes too.
pub const REPLY_QUEUE: usize = 64;

impl Replies {
    /// A reader's way to its writer, and the writer's end: replies wait at most `patience` for
    /// room before `overrun` is cancelled.
    pub fn channel(
        patience: Duration,
        overrun: CancellationToken,
    ) -> (Replies, mpsc::Receiver<Local>) {
        let (tx, rx) = mpsc::channel(REPLY_QUEUE);
        let replies = Replies {
            tx,
            patience,
            overrun,
        };
        (replies, rx)
    }

    /// Hands `l` to the writer; `Err` when the writer is gone or the client is overrun.
    pub async fn send(&self, l: Local) -> Result<(), Gone> {
        match tokio::time::timeout(self.patience, self.tx.send(l)).await {
            Ok(sent) => sent.map_err(|_| Gone),
            Err(_) => {
                self.overrun.cancel();
                Err(Gone)
            }
        }
    }
}

/// What the reader task hands the writer task.
pub enum Local {
    /// A reply to this client only.
    Send(Outbound),
    /// A control frame fastwebsockets obliges us to send (pong, close reply).
    Control(OpCode, Vec<u8>),
    /// The client has drawn this many more bytes (a dialect with flow control).
    Ack(u64),
    /// The reader stopped; close with this code if given.
    Done(Option<(u16, &'static str)>),
}

/// What a connection does with each whole message a client sends.
pub trait OnMessage: Send {
    /// Handles one message (replying through `replies` if it needs to); `Err` ends the reader.
    fn on_message(
        &mut self,
        message: Inbound,
        replies: &Replies,
    ) -> impl std::future::Future<Output = Result<(), Gone>> + Send;
}

/// Ends a connection's reader task once its writer is done. The reader ends by itself when
/// the client answers our close, so it gets [`CLOSE_GRACE`] for that; when no close was sent
/// (`close_sent` false: the writer was dropped because its client stopped reading), nothing
/// will answer and it is aborted at once.
pub async fn finish(read_task: tokio::task::JoinHandle<()>, close_sent: bool) {
    let abort = read_task.abort_handle();
    if !close_sent || tokio::time::timeout(CLOSE_GRACE, read_task).await.is_err() {
        abort.abort();
    }
}

/// Reads whole messages from the client and hands each to `handler`, answering pings and
/// closes itself, until the client closes, breaks a frame rule, or the handler stops.
pub async fn read_loop<H: OnMessage>(
    mut raw: socket::ReadSide,
    replies: Replies,
    max_message: usize,
    mut handler: H,
) {
    let (mut reader, _) = fastwebsockets::after_handshake_split(
        &mut raw,
        tokio::io::sink(),
        fastwebsockets::Role::Server,
    );
    reader.set_max_message_size(max_message);
    // Close and ping are answered here, after the checks of `frame_rules`, so a violation
    // gets its close code (the library would echo an unmasked or oversized close as is).
    reader.set_auto_close(false);
    reader.set_auto_pong(false);
    let mut never_called = |_: Frame<'_>| async { Ok::<(), Gone>(()) };
    // A fragmented message being collected: its opcode and the bytes so far.
    let mut partial: Option<(OpCode, Vec<u8>)> = None;
    // Whether the client closed the connection itself: then the closing handshake is complete
    // once our close goes out, and the TCP connection is dropped at once (a browser reports the
    // close only when the server has closed TCP).
    let mut client_closed = false;
    let done = loop {
        let mut frame = match reader.read_frame(&mut never_called).await {
            Ok(frame) => frame,
            Err(e) => {
                debug!("read ended: {e}");
                break frame_rules::read_error(&e);
            }
        };
        if let Err(violation) = frame_rules::check(&mut frame) {
            break Some(violation);
        }
        let (opcode, payload) = match frame.opcode {
            OpCode::Close => match frame_rules::close_reply(&frame.payload) {
                Ok(code) => {
                    client_closed = true;
                    break Some((code, ""));
                }
                Err(violation) => break Some(violation),
            },
            OpCode::Ping => {
                let pong = Local::Control(OpCode::Pong, frame.payload.to_vec());
                if replies.send(pong).await.is_err() {
                    break None;
                }
                continue;
            }
            OpCode::Pong => continue,
            OpCode::Text | OpCode::Binary if partial.is_some() => {
                break Some((1002, "a new message inside a fragmented one"));
            }
            OpCode::Text | OpCode::Binary if frame.fin => (frame.opcode, frame.payload.to_vec()),
            OpCode::Text | OpCode::Binary => {
                partial = Some((frame.opcode, frame.payload.to_vec()));
                continue;
            }
            OpCode::Continuation => {
                let Some((op, mut bytes)) = partial.take() else {
                    break Some((1002, "continuation frame without a message"));
                };
                bytes.extend_from_slice(&frame.payload);
                if bytes.len() >= max_message {
                    break Some((1009, "message too large"));
                }
                if !frame.fin {
                    partial = Some((op, bytes));
                    continue;
                }
                (op, bytes)
            }
        };
        let message = match opcode {
            OpCode::Text => match String::from_utf8(payload) {
                Ok(text) => Inbound::Text(text),
                Err(_) => break Some((1007, "invalid UTF-8 in a text frame")),
            },
            _ => Inbound::Binary(Bytes::from(payload)),
        };
        if handler.on_message(message, &replies).await.is_err() {
            break None;
        }
    };
    let _ = replies.send(Local::Done(done)).await;
    if done.is_some() && !client_closed {
        // Let the client finish sending (and read our close frame); its close ends this.
        let mut sink = tokio::io::sink();
        let _ = tokio::time::timeout(CLOSE_GRACE, tokio::io::copy(&mut raw, &mut sink)).await;
    }
}
