//! `ptyhub exec`: runs a program on the daemon's host in pipe mode (docs/protocol.md section 13)
//! as if it ran here: its stdout and stderr to ours, our stdin to it (end of file included),
//! Ctrl+C, SIGTERM and SIGHUP passed on as signals, and its exit status as ours (128 + the
//! signal's number when a signal ended it).

use std::io::Read;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use super::attach::signal_number;
use super::{one_line, ClientError, Server};

/// Bytes read from stdin at a time, and how many reads may wait for the socket.
const STDIN_CHUNK: usize = 64 * 1024;
const STDIN_QUEUE: usize = 4;
/// The exit status when the program could not be started, as a shell reports it.
const CANNOT_RUN: i32 = 127;

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The working directory on the daemon's host.
    pub cwd: Option<String>,
    /// Extra environment, `K=V`.
    pub env: Vec<String>,
}

/// Runs `req` through `server`; returns the exit status to leave with.
pub async fn run(server: &Server, req: &ExecRequest) -> Result<i32, ClientError> {
    let Some((prog, args)) = req.argv.split_first() else {
        return Err(ClientError::Local(
            "nothing to run: ptyhub exec -- PROG [ARGS…]".into(),
        ));
    };
    let mut url = server.ws_url("api/exec")?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("cmd", prog);
        for a in args {
            q.append_pair("arg", a);
        }
        if let Some(cwd) = &req.cwd {
            q.append_pair("cwd", cwd);
        }
        for kv in &req.env {
            q.append_pair("env", kv);
        }
    }
    let not_found = || ClientError::Server("this server has no exec endpoint".into());
    let ws = server.websocket(url, not_found).await?;
    let (mut tx, mut rx) = ws.split();

    let (stdin_tx, mut stdin) = mpsc::channel::<Vec<u8>>(STDIN_QUEUE);
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        let mut buf = vec![0u8; STDIN_CHUNK];
        loop {
            match input.read(&mut buf) {
                // End of input: the empty chunk says so.
                Ok(0) | Err(_) => {
                    let _ = stdin_tx.blocking_send(Vec::new());
                    break;
                }
                Ok(n) => {
                    if stdin_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let watch =
        |kind| signal(kind).map_err(|e| ClientError::Local(format!("cannot watch signals: {e}")));
    let (mut int, mut term, mut hup) = (
        watch(SignalKind::interrupt())?,
        watch(SignalKind::terminate())?,
        watch(SignalKind::hangup())?,
    );
    let (mut out, mut err) = (tokio::io::stdout(), tokio::io::stderr());
    let mut stdin_open = true;
    let mut status: Option<i32> = None;
    loop {
        let forward = tokio::select! {
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(bytes))) => {
                    let written = match bytes.split_first() {
                        Some((1, data)) => out.write_all(data).await.and(out.flush().await),
                        Some((2, data)) => err.write_all(data).await.and(err.flush().await),
                        _ => Ok(()),
                    };
                    // Our own stdout closed (a pager quit): stop the program as a pipe would.
                    if written.is_err() {
                        Some("SIGPIPE")
                    } else {
                        None
                    }
                }
                Some(Ok(Message::Text(text))) => {
                    let msg: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    match msg.get("type").and_then(Value::as_str) {
                        Some("exit") => {
                            let code = msg.get("code").and_then(Value::as_i64);
                            let sig = msg.get("signal").and_then(Value::as_str).and_then(signal_number);
                            status = Some(match (sig, code) {
                                (Some(n), _) => 128 + n,
                                (None, Some(c)) => i32::try_from(c).unwrap_or(1),
                                (None, None) => 0,
                            });
                        }
                        Some("error") => {
                            let message = msg.get("message").and_then(Value::as_str).unwrap_or("error");
                            eprintln!("ptyhub exec: {message}");
                        }
                        _ => {}
                    }
                    None
                }
                Some(Ok(Message::Close(frame))) => {
                    return match (status, frame) {
                        (Some(s), _) => Ok(s),
                        (None, Some(f)) if f.code == CloseCode::Library(4002) => Ok(CANNOT_RUN),
                        (None, Some(f)) => Err(ClientError::Server(format!(
                            "the connection closed before the program ended: {} ({})",
                            f.reason,
                            u16::from(f.code)
                        ))),
                        (None, None) => Err(ClientError::Server(
                            "the connection closed before the program ended".into(),
                        )),
                    };
                }
                Some(Ok(_)) => None,
                Some(Err(e)) => {
                    return status.ok_or_else(|| server.lost(one_line(&e)));
                }
                None => {
                    return status.ok_or_else(|| server.lost("the connection dropped"));
                }
            },
            chunk = stdin.recv(), if stdin_open => {
                match chunk {
                    Some(bytes) if !bytes.is_empty() => {
                        if tx.send(Message::Binary(bytes)).await.is_err() {
                            stdin_open = false;
                        }
                    }
                    _ => {
                        stdin_open = false;
                        let eof = json!({"type": "eof"}).to_string();
                        let _ = tx.send(Message::Text(eof)).await;
                    }
                }
                None
            }
            _ = int.recv() => Some("SIGINT"),
            _ = term.recv() => Some("SIGTERM"),
            _ = hup.recv() => Some("SIGHUP"),
        };
        if let Some(sig) = forward {
            let msg = json!({"type": "signal", "signal": sig}).to_string();
            let _ = tx.send(Message::Text(msg)).await;
        }
    }
}
