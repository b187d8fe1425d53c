//! `ptyhub attach`: the local terminal joined to a session over the raw dialect (docs/protocol.md
//! section 10), full screen, as `ssh` or `tmux attach` would.
//!
//! Raw mode is restored on every way out (detach, exit, a lost server, a signal, a panic:
//! [`RawMode`] and the hook [`restore_on_panic`] installs). The terminal's size goes with the
//! connection and again on every SIGWINCH. Ctrl+] detaches and leaves the session running. A
//! dropped connection is retried with backoff; the replay that opens every connection redraws
//! the screen from a reset, so nothing is doubled.

use std::io::{IsTerminal, Read, Write};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use super::{one_line, ClientError, Server, Session, Ws};

/// Ctrl+]: leaves the session running, as telnet's escape does.
pub const DETACH_KEY: u8 = 0x1d;
/// How long a lost connection is retried before the client gives up, by default.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(60);
/// The first wait before a reconnect, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// Bytes read from the terminal at a time; the channel holds a few reads, so a paste waits for
/// the socket rather than piling up.
const STDIN_CHUNK: usize = 16 * 1024;
const STDIN_QUEUE: usize = 4;
/// Keys typed while reconnecting are kept (up to this many bytes; past it the terminal is not
/// read until the connection is back) and sent first on the new connection.
const PENDING_MAX: usize = 64 * 1024;
/// Puts back what a full-screen program may have left switched on in the local terminal:
/// the main screen, a visible cursor, no mouse reporting, no bracketed paste, plain colours.
const TERMINAL_RESTORE: &str =
    "\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[0m";

/// How to attach.
#[derive(Debug, Clone, Copy)]
pub struct AttachOptions {
    /// Join as a viewer: see everything, type nothing, do not count towards the size.
    pub read_only: bool,
    /// How long a lost connection is retried.
    pub retry_for: Duration,
}

/// Raw mode on the local terminal while this lives (nothing when stdin is not a terminal).
pub struct RawMode {
    on: bool,
}

impl RawMode {
    /// Switches raw mode on if stdin is a terminal.
    pub fn enable() -> Result<Self, ClientError> {
        if !std::io::stdin().is_terminal() {
            return Ok(RawMode { on: false });
        }
        crossterm::terminal::enable_raw_mode()
            .map_err(|e| ClientError::Local(format!("cannot put the terminal in raw mode: {e}")))?;
        Ok(RawMode { on: true })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.on {
            restore_terminal();
        }
    }
}

/// Leaves raw mode and undoes the remote program's modes (safe to call more than once).
pub fn restore_terminal() {
    let _ = crossterm::terminal::disable_raw_mode();
    if std::io::stdout().is_terminal() {
        let mut out = std::io::stdout();
        let _ = out.write_all(TERMINAL_RESTORE.as_bytes());
        let _ = out.flush();
    }
}

/// Makes a panic restore the terminal before its message is printed.
pub fn restore_on_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
}

/// How an attachment ended.
enum Ended {
    /// Ctrl+]: the session keeps running.
    Detached,
    /// The program exited: the client's status.
    Exited(i32),
    /// The session was ended (deleted, or the daemon removed it).
    Over(String),
    /// A signal told the client to stop.
    Signalled(i32),
    /// The connection went; worth another try.
    Lost(String),
    /// The daemon is restarting (close 1012, a live upgrade): reconnect at once.
    Restarting(String),
}

/// Attaches to `session` until detach, exit, or a lost server; returns the exit status.
pub async fn run(
    server: &Server,
    session: &Session,
    opts: AttachOptions,
) -> Result<i32, ClientError> {
    let tty = std::io::stdin().is_terminal();
    let mut signals = Signals::new()?;
    let (stdin_tx, mut stdin) = mpsc::channel(STDIN_QUEUE);
    spawn_stdin_reader(stdin_tx);
    let raw = RawMode::enable()?;
    let label = if session.name.is_empty() {
        format!("session {}", session.label())
    } else {
        format!("session {} ({})", session.label(), session.name)
    };
    let mut backoff = Backoff::new();
    let mut lost_since: Option<Instant> = None;
    let mut pending: Vec<u8> = Vec::new();
    let ended = loop {
        let outcome = match connect(server, session, opts).await {
            Ok(ws) => {
                if lost_since.take().is_some() {
                    notice(tty, "[reconnected]");
                }
                backoff.reset();
                serve(ws, &mut stdin, &mut signals, opts, &mut pending).await
            }
            Err(e) if lost_since.is_none() && backoff.first() => return Err(e),
            // Retrying cannot mend these.
            Err(e @ (ClientError::Unauthorized(_) | ClientError::NoSuchSession(_))) => {
                return Err(e)
            }
            Err(e) => Ended::Lost(e.to_string()),
        };
        let (why, at_once) = match outcome {
            Ended::Lost(why) => (why, false),
            Ended::Restarting(why) => (why, true),
            other => break other,
        };
        let since = *lost_since.get_or_insert_with(|| {
            notice(tty, &format!("[connection lost: {why}; reconnecting…]"));
            Instant::now()
        });
        if since.elapsed() > opts.retry_for {
            drop(raw);
            return Err(ClientError::Unreachable(
                server.url("").map(|u| u.to_string()).unwrap_or_default(),
                format!(
                    "lost the connection for {}s ({why})",
                    opts.retry_for.as_secs()
                ),
            ));
        }
        // While waiting, Ctrl+] and signals still work. A restarting daemon's new image is
        // there within milliseconds (connections wait in its listener's backlog meanwhile).
        let pause = if at_once {
            Duration::ZERO
        } else {
            backoff.next()
        };
        if let Some(end) = wait(pause, &mut stdin, &mut signals, &mut pending).await {
            break end;
        }
    };
    drop(raw);
    match ended {
        Ended::Detached => {
            eprintln!("\n[detached from {label}; it keeps running]");
            Ok(0)
        }
        Ended::Exited(status) => Ok(status),
        Ended::Over(why) => {
            eprintln!("\n[{label} ended: {why}]");
            Ok(0)
        }
        Ended::Signalled(n) => Ok(128 + n),
        Ended::Lost(_) | Ended::Restarting(_) => Ok(1),
    }
}

/// A line for the user while the terminal is in raw mode (carriage return included).
fn notice(tty: bool, text: &str) {
    if tty {
        let mut err = std::io::stderr();
        let _ = write!(err, "\r\n{text}\r\n");
        let _ = err.flush();
    }
}

/// Opens the raw dialect's socket for `session`, with this terminal's size.
async fn connect(
    server: &Server,
    session: &Session,
    opts: AttachOptions,
) -> Result<Ws, ClientError> {
    let mut url = server.ws_url(&format!("ws/{}/raw", session.id))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("create", "0");
        if let Ok((cols, rows)) = crossterm::terminal::size() {
            if cols > 0 && rows > 0 {
                q.append_pair("cols", &cols.to_string());
                q.append_pair("rows", &rows.to_string());
            }
        }
        if opts.read_only {
            q.append_pair("role", "viewer");
        }
    }
    server
        .websocket(url, || ClientError::NoSuchSession(session.id.to_string()))
        .await
}

/// Pumps one connection: output to the terminal, keys and sizes to the session.
async fn serve(
    ws: Ws,
    stdin: &mut mpsc::Receiver<Vec<u8>>,
    signals: &mut Signals,
    opts: AttachOptions,
    pending: &mut Vec<u8>,
) -> Ended {
    let (mut tx, mut rx) = ws.split();
    let mut out = tokio::io::stdout();
    let mut stdin_open = true;
    // What was typed while the connection was down goes first.
    if !pending.is_empty()
        && !opts.read_only
        && tx.send(Message::Binary(pending.clone())).await.is_err()
    {
        return Ended::Lost("the connection failed".into());
    }
    pending.clear();
    loop {
        tokio::select! {
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(bytes))) => {
                    if out.write_all(&bytes).await.is_err() || out.flush().await.is_err() {
                        return Ended::Lost("cannot write to the terminal".into());
                    }
                }
                Some(Ok(Message::Text(text))) => {
                    if let Some(end) = control(&text) {
                        return end;
                    }
                }
                Some(Ok(Message::Close(frame))) => return closed(frame),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Ended::Lost(one_line(&e)),
                None => return Ended::Lost("the server closed the connection".into()),
            },
            chunk = stdin.recv(), if stdin_open => match chunk {
                Some(bytes) => {
                    let (keys, detach) = match bytes.iter().position(|&b| b == DETACH_KEY) {
                        Some(i) => (&bytes[..i], true),
                        None => (&bytes[..], false),
                    };
                    // A viewer's keys would only be refused: only Ctrl+] counts.
                    if !keys.is_empty() && !opts.read_only
                        && tx.send(Message::Binary(keys.to_vec())).await.is_err()
                    {
                        return Ended::Lost("the connection failed".into());
                    }
                    if detach {
                        let _ = tx.send(Message::Close(None)).await;
                        return Ended::Detached;
                    }
                }
                // Stdin is not a terminal and ran out: keep watching the output.
                None => stdin_open = false,
            },
            sig = signals.next() => match sig {
                Some(Sig::Resize) if !opts.read_only => {
                    if let Ok((cols, rows)) = crossterm::terminal::size() {
                        let msg = json!({"type": "resize", "cols": cols, "rows": rows});
                        let _ = tx.send(Message::Text(msg.to_string())).await;
                    }
                }
                Some(Sig::Resize) => {}
                Some(Sig::Stop(n)) => {
                    let _ = tx.send(Message::Close(None)).await;
                    return Ended::Signalled(n);
                }
                None => {}
            },
        }
    }
}

/// Acts on a control message; `Some` when it ends the attachment.
fn control(text: &str) -> Option<Ended> {
    let Ok(msg) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    match msg.get("type").and_then(Value::as_str) {
        Some("exit") => {
            let code = msg.get("code").and_then(Value::as_i64);
            let signal = msg.get("signal").and_then(Value::as_str);
            let status = match (signal.and_then(signal_number), code) {
                (Some(n), _) => 128 + n,
                (None, Some(c)) => i32::try_from(c).unwrap_or(1),
                (None, None) => 0,
            };
            Some(Ended::Exited(status))
        }
        Some("error") => {
            let message = msg
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error");
            notice(
                std::io::stdin().is_terminal(),
                &format!("[ptyhub: {message}]"),
            );
            None
        }
        _ => None,
    }
}

/// What the server's close means.
fn closed(frame: Option<tokio_tungstenite::tungstenite::protocol::CloseFrame<'_>>) -> Ended {
    let Some(frame) = frame else {
        return Ended::Lost("the server closed the connection".into());
    };
    let reason = frame.reason.to_string();
    match frame.code {
        CloseCode::Library(4003) => Ended::Over(reason),
        CloseCode::Library(4004) => Ended::Over("no such session any more".into()),
        CloseCode::Restart => Ended::Restarting(reason),
        // Anything else (shutdown, restart, a policy close) is worth another try: a link that
        // was revoked or expired is refused then, and that ends the client with its reason.
        _ => Ended::Lost(if reason.is_empty() {
            format!("closed ({})", u16::from(frame.code))
        } else {
            reason
        }),
    }
}

/// The number of a signal named as the protocol names them (`SIGTERM`).
pub fn signal_number(name: &str) -> Option<i32> {
    name.parse::<nix::sys::signal::Signal>()
        .ok()
        .map(|s| s as i32)
}

/// Waits `delay`, unless the user detaches or a signal arrives meanwhile; keys typed meanwhile
/// are kept in `pending`.
async fn wait(
    delay: Duration,
    stdin: &mut mpsc::Receiver<Vec<u8>>,
    signals: &mut Signals,
    pending: &mut Vec<u8>,
) -> Option<Ended> {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    let mut stdin_open = true;
    loop {
        let room = stdin_open && pending.len() < PENDING_MAX;
        tokio::select! {
            _ = &mut sleep => return None,
            chunk = stdin.recv(), if room => match chunk {
                Some(bytes) if bytes.contains(&DETACH_KEY) => return Some(Ended::Detached),
                Some(bytes) => pending.extend_from_slice(&bytes),
                None => stdin_open = false,
            },
            sig = signals.next() => if let Some(Sig::Stop(n)) = sig {
                return Some(Ended::Signalled(n));
            },
        }
    }
}

/// Reads the terminal on a thread of its own (a blocking read cannot be cancelled; the thread
/// ends with the process).
fn spawn_stdin_reader(tx: mpsc::Sender<Vec<u8>>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; STDIN_CHUNK];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// Signals the client acts on.
enum Sig {
    /// SIGWINCH: the terminal changed size.
    Resize,
    /// SIGTERM, SIGHUP or SIGINT: stop (status 128 + n).
    Stop(i32),
}

struct Signals {
    winch: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, ClientError> {
        let on = |kind: SignalKind| {
            signal(kind).map_err(|e| ClientError::Local(format!("cannot watch signals: {e}")))
        };
        Ok(Signals {
            winch: on(SignalKind::window_change())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
            int: on(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> Option<Sig> {
        tokio::select! {
            s = self.winch.recv() => s.map(|()| Sig::Resize),
            s = self.term.recv() => s.map(|()| Sig::Stop(libc_signal::TERM)),
            s = self.hup.recv() => s.map(|()| Sig::Stop(libc_signal::HUP)),
            s = self.int.recv() => s.map(|()| Sig::Stop(libc_signal::INT)),
        }
    }
}

/// Signal numbers for exit statuses.
mod libc_signal {
    use nix::sys::signal::Signal;
    pub const TERM: i32 = Signal::SIGTERM as i32;
    pub const HUP: i32 = Signal::SIGHUP as i32;
    pub const INT: i32 = Signal::SIGINT as i32;
}

/// Exponential backoff with jitter, capped, reset after a success.
struct Backoff {
    next: Duration,
    tries: u32,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            next: BACKOFF_FIRST,
            tries: 0,
        }
    }

    fn first(&self) -> bool {
        self.tries == 0
    }

    fn reset(&mut self) {
        *self = Backoff::new();
        self.tries = 1;
    }

    /// The next wait: the current step with up to half of it added at random.
    fn next(&mut self) -> Duration {
        self.tries += 1;
        let step = self.next;
        self.next = (self.next * 2).min(BACKOFF_CAP);
        let mut r = [0u8; 2];
        let _ = getrandom::fill(&mut r);
        let jitter = u64::from(u16::from_le_bytes(r)) * (step.as_millis() as u64 / 2) / 65535;
        step + Duration::from_millis(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        let mut b = Backoff::new();
        assert!(b.first());
        let waits: Vec<Duration> = (0..10).map(|_| b.next()).collect();
        assert!(waits[0] >= BACKOFF_FIRST && waits[0] <= BACKOFF_FIRST * 3 / 2);
        assert!(waits.iter().all(|w| *w <= BACKOFF_CAP * 3 / 2));
        assert!(waits[9] >= BACKOFF_CAP);
        b.reset();
        assert!(!b.first());
        assert!(b.next() <= BACKOFF_FIRST * 3 / 2);
    }

    #[test]
    fn exit_messages_become_statuses() {
        let status = |t: &str| match control(t) {
            Some(Ended::Exited(s)) => Some(s),
            _ => None,
        };
        assert_eq!(status(r#"{"type":"exit","code":3,"signal":null}"#), Some(3));
        assert_eq!(
            status(r#"{"type":"exit","code":null,"signal":"SIGKILL"}"#),
            Some(137)
        );
        assert_eq!(status(r#"{"type":"ready"}"#), None);
        assert_eq!(status("not json"), None);
    }
}
