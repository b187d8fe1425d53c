//! One language server connection: the reader task checks each client message (a JSON text
//! frame) and writes it to the server's stdin with its `Content-Length` header; the writer
//! reads the server's stdout through the [`Decoder`] and sends each message as a text frame.
//! The server's stderr goes to the log. The connection ends, and the server's process group
//! with it, when the client goes, the session ends, the daemon stops or the server exits
//! (closed with a reason that says how).
//!
//! Backpressure both ways without a queue, as in pipe-mode exec: stdout is read only after
//! the previous message went to the socket (a client that does not read stalls the server's
//! writes), and the next client message is taken only after stdin took the previous one.

use std::sync::Arc;

use fastwebsockets::{Frame, OpCode};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::framing::{self, Decoder, FramingError};
use super::Served;
use crate::exec::child::{Event, ExecChild};
use crate::exec::websocket::{answer_local, peer_gone, send, send_output};
use crate::exec::{Execs, Permit};
use crate::metrics::Metrics;
use crate::protocol::pipe::Stream;
use crate::protocol::{Inbound, Outbound};
use crate::session::ExitInfo;
use crate::ws::reader::{read_loop, Gone, Local, OnMessage, Replies};
use crate::ws::{socket, Accepted, CLOSE_GRACE};

/// The close code when the server could not start (as exec's).
pub const CLOSE_NOT_STARTED: u16 = 4002;
/// Longest close reason RFC 6455 allows, bytes.
const MAX_REASON: usize = 123;
/// Longest stderr line kept for the close reason, characters.
const LAST_LINE_CHARS: usize = 200;

/// Tells the client its server could not start (a `window/showMessage` error, which an editor
/// shows), then closes with 4002 and the reason; counted in `metrics`.
pub async fn refuse(mut ws: Accepted, why: &str, metrics: &Metrics) {
    metrics.error("lsp_failed");
    let shown = framing::show_error(&format!("the language server could not start: {why}"));
    let _ = ws.write_frame(Frame::text(shown.into_bytes().into())).await;
    let reason = fit(format!("the language server could not start: {why}"));
    let _ = ws
        .write_frame(Frame::close(CLOSE_NOT_STARTED, reason.as_bytes()))
        .await;
}

/// What a connection is bound to besides its client.
pub struct Bounds {
    /// Largest message either way, bytes (`limits.lsp_message_bytes`).
    pub max_message: usize,
    /// How long a reply may wait for the writer (`viewer.stall_deadline`).
    pub stall: std::time::Duration,
    /// Cancelled when the session the server works for ends (`None`: a directory's server).
    pub session_ended: Option<CancellationToken>,
    /// The caller's API token's revocation or expiry: the server is ended, close 1008.
    pub limits: crate::auth::Limits,
}

/// Why the writer stopped.
enum End {
    /// The server exited and its output was all sent.
    Exited(ExitInfo),
    /// The server broke the base protocol or sent a message over the bound.
    Framing(FramingError),
    /// The client went, closed, broke a frame rule or sent a message over the bound; the
    /// close to send, if any.
    ClientGone(Option<(u16, &'static str)>),
    /// The session ended.
    SessionEnded,
    /// The daemon is shutting down.
    Shutdown,
}

/// Serves one language server until it exits or the connection ends; either way its process
/// group is ended and reaped before this returns.
pub async fn run(
    ws: Accepted,
    mut child: ExecChild,
    permit: Permit,
    served: Served,
    bounds: Bounds,
    execs: Arc<Execs>,
) {
    let halves = socket::split(ws.into_inner());
    let mut write = halves.write;
    let overrun = CancellationToken::new();
    let (replies, mut local) = Replies::channel(bounds.stall, overrun.clone());
    let metrics = execs.metrics().clone();
    let messages = LspMessages {
        stdin: child.take_stdin(),
        metrics: metrics.clone(),
    };
    let read_task = tokio::spawn(read_loop(
        halves.read,
        replies,
        bounds.max_message,
        messages,
    ));
    let pid = child.pid();
    let mut decoder = Decoder::new(bounds.max_message);
    let mut last_line = String::new();
    let mut out = Vec::with_capacity(64);
    let pump = async {
        loop {
            tokio::select! {
                l = local.recv() => {
                    if let Some(close) = answer_local(&mut write, &mut out, l).await? {
                        return Ok(End::ClientGone(close));
                    }
                }
                ev = child.next() => match ev {
                    Event::Output(Stream::Stdout, bytes) => {
                        decoder.feed(&bytes[1..]);
                        drop(bytes);
                        loop {
                            match decoder.next_message() {
                                Ok(Some(msg)) => {
                                    send_output(&mut write, &mut out, OpCode::Text, msg.as_bytes()).await?;
                                    metrics.lsp_messages_out.inc();
                                }
                                Ok(None) => break,
                                Err(e) => return Ok(End::Framing(e)),
                            }
                        }
                    }
                    Event::Output(_, bytes) => {
                        log_stderr(&served, pid, &bytes[1..], &mut last_line);
                    }
                    Event::Exited(info) => return Ok::<_, std::io::Error>(End::Exited(info)),
                },
            }
        }
    };
    let session_ended = async {
        match &bounds.session_ended {
            Some(ended) => ended.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        end = pump => end.unwrap_or(End::ClientGone(None)),
        _ = overrun.cancelled() => End::ClientGone(Some((1008, "not reading: too much queued for this connection"))),
        _ = execs.shutdown.cancelled() => End::Shutdown,
        _ = session_ended => End::SessionEnded,
        _ = peer_gone(halves.tcp) => End::ClientGone(None),
        why = bounds.limits.wait() => End::ClientGone(Some((1008, why.reason()))),
    };
    let (exit, close) = match end {
        End::Exited(info) => {
            let close = exited(&served, &info, &last_line);
            (info, Some(close))
        }
        End::Framing(e) => {
            info!(lang = %served.lang, pid, "language server broke the protocol: {e}");
            let code = if matches!(e, FramingError::TooLarge { .. }) {
                1009
            } else {
                1011
            };
            let why = fit(format!("the language server sent {e}"));
            (child.terminate(execs.kill_grace).await, Some((code, why)))
        }
        End::ClientGone(close) => {
            debug!(pid, "language server client gone: ending its process group");
            let close = close.map(|(code, why)| (code, why.to_owned()));
            (child.terminate(execs.kill_grace).await, close)
        }
        End::SessionEnded => (
            child.terminate(execs.kill_grace).await,
            Some((1001, "the session ended".to_owned())),
        ),
        End::Shutdown => (
            child.terminate(execs.kill_grace).await,
            Some((1001, "the daemon is shutting down".to_owned())),
        ),
    };
    permit.finish(Some(&exit), false);
    if let Some((code, reason)) = close {
        let frame = Frame::close(code, reason.as_bytes());
        let closing = send(&mut write, &mut out, OpCode::Close, &frame.payload);
        let _ = tokio::time::timeout(CLOSE_GRACE, closing).await;
    }
    child.end_leftovers(execs.kill_grace).await;
    crate::ws::reader::finish(read_task, true).await;
}

/// The close for a server that exited by itself: 1000 after a clean exit (the client's `exit`
/// notification), else 1011 with the code or signal and the last line it wrote to stderr.
fn exited(served: &Served, info: &ExitInfo, last_line: &str) -> (u16, String) {
    info!(lang = %served.lang, code = info.code, signal = ?info.signal, "language server exited");
    let how = match &info.signal {
        Some(signal) => format!("was killed by {signal}"),
        None => format!("exited with code {}", info.code),
    };
    let code = if info.code == 0 && info.signal.is_none() {
        1000
    } else {
        1011
    };
    let mut why = format!("the language server ({}) {how}", served.program);
    if code != 1000 && !last_line.is_empty() {
        why = format!("{why}: {last_line}");
    }
    (code, fit(why))
}

/// Logs what the server wrote to stderr, a line at a time, and keeps its last line.
fn log_stderr(served: &Served, pid: i32, bytes: &[u8], last_line: &mut String) {
    let text = String::from_utf8_lossy(bytes);
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        info!(lang = %served.lang, pid, "language server: {line}");
        *last_line = line.chars().take(LAST_LINE_CHARS).collect();
    }
}

/// `reason` cut (at a character) to what a close frame carries.
fn fit(mut reason: String) -> String {
    if reason.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// The client's messages: checked, then written to the server's stdin, framed.
struct LspMessages {
    stdin: Option<ChildStdin>,
    /// The daemon's counters: messages, and errors told to the client.
    metrics: Arc<Metrics>,
}

impl OnMessage for LspMessages {
    async fn on_message(&mut self, message: Inbound, replies: &Replies) -> Result<(), Gone> {
        let body = match framing::client_message(message) {
            Ok(body) => body,
            Err(rejected) => {
                self.metrics.error("bad_message");
                let reply = Local::Send(Outbound::Text(rejected.reply()));
                return replies.send(reply).await;
            }
        };
        // Once the server has closed its stdin it is exiting: the writer reports how, so what
        // the client sends meanwhile is dropped rather than ending the connection first.
        let Some(stdin) = self.stdin.as_mut() else {
            return Ok(());
        };
        let head = framing::header(body.len());
        // Waits while the server is not reading: the client is slowed, nothing dropped.
        let written = async {
            stdin.write_all(head.as_bytes()).await?;
            stdin.write_all(body.as_bytes()).await
        };
        if let Err(e) = written.await {
            debug!("language server's stdin closed: {e}");
            self.stdin = None;
            return Ok(());
        }
        self.metrics.lsp_messages_in.inc();
        Ok(())
    }
}
