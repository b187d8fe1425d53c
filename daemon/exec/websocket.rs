//! Pipe mode over a WebSocket (docs/protocol.md section 13, seed 001): the connection's reader
//! writes the client's binary messages to the process's stdin, and its writer sends each piece
//! of stdout and stderr as it is read, then `exit` and close 1000; at a `timeout_sec`, the
//! group is ended, what it wrote sent, then an `exit` saying `"timed_out":true`.
//!
//! Backpressure both ways without a queue: the writer reads the pipes only after the previous
//! piece went to the socket, so a client that does not read stalls only its own process (its
//! pipes fill); the reader takes the next message only after stdin took the previous one, so
//! input is never dropped and a fast sender is slowed to the program's pace.
//!
//! A quiet exec pings its client every [`Bounds::heartbeat`], so a client whose network
//! vanished has data unacknowledged and the connection's user timeout ends it (the daemon's
//! `http/dead_peer.rs`), its process group with it.

use std::sync::Arc;
use std::time::Duration;

use fastwebsockets::{Frame, OpCode};
use nix::sys::signal::Signal;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::child::{Event, ExecChild};
use super::{Execs, Permit};
use crate::auth::Limits;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::pipe::{self, PipeRequest, ServerMessage};
use crate::protocol::{Inbound, Outbound};
use crate::session::ExitInfo;
use crate::ws::frame::{push_frame, push_head};
use crate::ws::reader::{read_loop, Gone, Local, OnMessage, Replies};
use crate::ws::{socket, Accepted, CLOSE_GRACE};

/// Signals from the reader waiting for the writer, which owns the process.
const SIGNAL_QUEUE: usize = 8;
/// How often a connection with unread input is looked at for its client having gone.
const PEER_CHECK: Duration = Duration::from_secs(1);

/// Tells the client its program could not start (`error`), then closes with 4002; the error
/// is counted in `metrics`.
pub async fn refuse(mut ws: Accepted, why: &str, metrics: &Metrics) {
    metrics.error("exec_failed");
    let error = ServerMessage::error("exec_failed", why).to_json();
    let _ = ws.write_frame(Frame::text(error.into_bytes().into())).await;
    let _ = ws
        .write_frame(Frame::close(4002, b"the program could not start"))
        .await;
}

/// Why the writer stopped.
enum End {
    /// The program exited and its output was all sent.
    Exited(ExitInfo),
    /// The program ran out of its time.
    TimedOut,
    /// The client went, closed, broke a frame rule or stopped reading its replies; the close
    /// to send, if any.
    ClientGone(Option<(u16, &'static str)>),
    /// The daemon is shutting down.
    Shutdown,
}

/// What ends a pipe-mode exec besides its program and its client.
pub struct Bounds {
    /// `timeout_sec`: the group is ended after this long.
    pub timeout: Option<Duration>,
    /// The caller's API token's revocation or expiry: the group is ended, close 1008.
    pub limits: Limits,
    /// A ping goes out this long after anything was last sent.
    pub heartbeat: Duration,
}

/// Serves one pipe-mode exec until the program ends, the client goes, `bounds.timeout` passes
/// or the caller's token ends; either way the process group is ended and reaped before this
/// returns.
pub async fn run(
    ws: Accepted,
    mut child: ExecChild,
    permit: Permit,
    cfg: Arc<Config>,
    execs: Arc<Execs>,
    bounds: Bounds,
) {
    let Bounds {
        timeout,
        limits,
        heartbeat,
    } = bounds;
    let halves = socket::split(ws.into_inner());
    let mut write = halves.write;
    let tcp = halves.tcp;
    let overrun = CancellationToken::new();
    let (replies, mut local) = Replies::channel(cfg.viewer.stall_deadline, overrun.clone());
    let (signal_tx, mut signals) = mpsc::channel(SIGNAL_QUEUE);
    let metrics = execs.metrics().clone();
    let messages = PipeMessages {
        stdin: child.take_stdin(),
        signals: signal_tx,
        metrics: metrics.clone(),
    };
    let read_task = tokio::spawn(read_loop(
        halves.read,
        replies,
        cfg.viewer.max_message_bytes,
        messages,
    ));
    let mut out = Vec::with_capacity(super::child::READ_BYTES + 16);
    let pump = async {
        loop {
            tokio::select! {
                l = local.recv() => {
                    if let Some(close) = answer_local(&mut write, &mut out, l).await? {
                        return Ok(End::ClientGone(close));
                    }
                }
                Some(signal) = signals.recv() => {
                    if let Err(e) = child.signal(signal) {
                        let why = format!("could not send {}: {e}", signal.as_str());
                        metrics.error("signal_failed");
                        let error = ServerMessage::error("signal_failed", why).to_json();
                        send(&mut write, &mut out, OpCode::Text, error.as_bytes()).await?;
                    }
                }
                ev = child.next() => match ev {
                    Event::Output(_, bytes) => {
                        send_output(&mut write, &mut out, OpCode::Binary, &bytes).await?;
                        metrics.bytes_out.add(bytes.len() as u64 - 1);
                    }
                    Event::Exited(info) => return Ok::<_, std::io::Error>(End::Exited(info)),
                },
                // Every turn of the loop starts a new wait: only a quiet connection is pinged.
                _ = tokio::time::sleep(heartbeat) => {
                    send(&mut write, &mut out, OpCode::Ping, b"").await?;
                }
            }
        }
    };
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        end = pump => end.unwrap_or(End::ClientGone(None)),
        _ = deadline => End::TimedOut,
        _ = overrun.cancelled() => End::ClientGone(Some((1008, "not reading: too much queued for this connection"))),
        _ = execs.shutdown.cancelled() => End::Shutdown,
        _ = peer_gone(tcp) => End::ClientGone(None),
        why = limits.wait() => End::ClientGone(Some((1008, why.reason()))),
    };
    let timed_out = matches!(end, End::TimedOut);
    let (exit, close) = match end {
        End::Exited(info) => {
            let exit = ServerMessage::Exit {
                code: info.code,
                signal: info.signal.clone(),
            };
            let exit = exit.to_json();
            let _ = send(&mut write, &mut out, OpCode::Text, exit.as_bytes()).await;
            (info, Some((1000, "")))
        }
        End::TimedOut => {
            debug!(
                pid = child.pid(),
                "exec timed out: ending its process group"
            );
            let info = child.terminate(execs.kill_grace).await;
            // What the group wrote before it died is still in the pipes: pass it on.
            let drain = async {
                while let Event::Output(_, bytes) = child.next().await {
                    send_output(&mut write, &mut out, OpCode::Binary, &bytes).await?;
                    metrics.bytes_out.add(bytes.len() as u64 - 1);
                }
                Ok::<_, std::io::Error>(())
            };
            let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
            let exit = pipe::timed_out_exit_json(info.code, info.signal.as_deref());
            let _ = send(&mut write, &mut out, OpCode::Text, exit.as_bytes()).await;
            (info, Some((1000, "")))
        }
        End::ClientGone(close) => {
            debug!(
                pid = child.pid(),
                "exec client gone: ending its process group"
            );
            (child.terminate(execs.kill_grace).await, close)
        }
        End::Shutdown => (
            child.terminate(execs.kill_grace).await,
            Some((1001, "the daemon is shutting down")),
        ),
    };
    permit.finish(Some(&exit), timed_out);
    if let Some((code, reason)) = close {
        let frame = Frame::close(code, reason.as_bytes());
        let closing = send(&mut write, &mut out, OpCode::Close, &frame.payload);
        let _ = tokio::time::timeout(CLOSE_GRACE, closing).await;
    }
    child.end_leftovers(execs.kill_grace).await;
    crate::ws::reader::finish(read_task, true).await;
}

/// Resolves once the client's side of the TCP connection is closed (within about
/// [`PEER_CHECK`]). The reader notices a closed connection by itself, but not while it waits
/// for stdin to take a message: a program that neither reads nor writes would otherwise
/// outlive its client. (TCP delivers the client's FIN after the input it sent, so a client
/// that vanishes with more unread input than the socket buffers hold is noticed only once
/// the program reads, writes or exits.)
pub(crate) async fn peer_gone(tcp: Option<Arc<TcpStream>>) {
    let Some(tcp) = tcp else {
        return std::future::pending().await;
    };
    loop {
        match tcp.ready(Interest::READABLE).await {
            Ok(ready) if ready.is_read_closed() => return,
            // Data the reader has not taken yet: look again later, not in a busy loop.
            Ok(_) => tokio::time::sleep(PEER_CHECK).await,
            Err(_) => return,
        }
    }
}

/// Writes one message as a frame.
pub(crate) async fn send(
    write: &mut socket::WriteSide,
    out: &mut Vec<u8>,
    opcode: OpCode,
    payload: &[u8],
) -> std::io::Result<()> {
    out.clear();
    push_frame(out, opcode, payload);
    write.write_all(out).await
}

/// Does what the connection's reader asked (`None`: it is gone): a reply or control frame is
/// written; `Some(close)` when the client is gone, with the close code to send if any.
pub(crate) async fn answer_local(
    write: &mut socket::WriteSide,
    out: &mut Vec<u8>,
    local: Option<Local>,
) -> std::io::Result<Option<Option<(u16, &'static str)>>> {
    match local {
        Some(Local::Send(Outbound::Text(t))) => {
            send(write, out, OpCode::Text, t.as_bytes()).await?
        }
        Some(Local::Send(Outbound::Binary(b))) => send(write, out, OpCode::Binary, &b).await?,
        Some(Local::Control(op, payload)) => send(write, out, op, &payload).await?,
        Some(Local::Ack(_)) => {}
        Some(Local::Done(close)) => return Ok(Some(close)),
        None => return Ok(Some(None)),
    }
    Ok(None)
}

/// Writes a piece of output as a frame of `opcode`: its header and the bytes as read, in one
/// vectored write (no copy of the bytes into a frame buffer).
pub(crate) async fn send_output(
    write: &mut socket::WriteSide,
    head: &mut Vec<u8>,
    opcode: OpCode,
    payload: &[u8],
) -> std::io::Result<()> {
    head.clear();
    push_head(head, opcode, payload);
    let mut parts = [std::io::IoSlice::new(head), std::io::IoSlice::new(payload)];
    let mut parts = &mut parts[..];
    while !parts.is_empty() {
        let n = write.write_vectored(parts).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

/// The client's messages: stdin written here, signals handed to the writer (which owns the
/// process and knows whether it still runs).
struct PipeMessages {
    stdin: Option<ChildStdin>,
    signals: mpsc::Sender<Signal>,
    /// The daemon's counters: input, and errors told to the client.
    metrics: Arc<Metrics>,
}

impl PipeMessages {
    async fn reply(&self, replies: &Replies, msg: ServerMessage) -> Result<(), Gone> {
        if let ServerMessage::Error { code, .. } = &msg {
            self.metrics.error(code);
        }
        replies
            .send(Local::Send(Outbound::Text(msg.to_json())))
            .await
    }
}

impl OnMessage for PipeMessages {
    async fn on_message(&mut self, message: Inbound, replies: &Replies) -> Result<(), Gone> {
        match pipe::decode(message) {
            Ok(PipeRequest::Stdin(bytes)) => {
                let Some(stdin) = self.stdin.as_mut() else {
                    let closed = ServerMessage::error("stdin_closed", "stdin is closed");
                    return self.reply(replies, closed).await;
                };
                // Waits while the program is not reading: the client is slowed, nothing dropped.
                if let Err(e) = stdin.write_all(&bytes).await {
                    self.stdin = None;
                    let why = format!("stdin is closed: {e}");
                    let closed = ServerMessage::error("stdin_closed", why);
                    return self.reply(replies, closed).await;
                }
                self.metrics.bytes_in.add(bytes.len() as u64);
                Ok(())
            }
            Ok(PipeRequest::Eof) => {
                self.stdin = None;
                Ok(())
            }
            Ok(PipeRequest::Signal(signal)) => self.signals.send(signal).await.map_err(|_| Gone),
            Ok(PipeRequest::Resize) => Ok(()),
            Err(bad) => self.reply(replies, bad.into()).await,
        }
    }
}
