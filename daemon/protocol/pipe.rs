//! The pipe-mode exec dialect (docs/protocol.md section 13, seed 001): stdin bytes and a few JSON
//! control messages from the client; `[0x01|0x02][bytes]` output, `exit` and `error` from the
//! server. Pure: no I/O, no clock.
//!
//! There is no PTY: stdout and stderr stay apart, tagged by their first byte, and `resize` is
//! accepted and ignored so that clients written for a terminal can use it unchanged.

use bytes::Bytes;
use nix::sys::signal::Signal;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::Inbound;
use crate::session::ALLOWED_SIGNALS;

/// The first byte of a binary message carrying stdout bytes.
pub const STDOUT: u8 = 0x01;
/// The first byte of a binary message carrying stderr bytes.
pub const STDERR: u8 = 0x02;
/// Longest message type echoed back in an error.
const MAX_ECHOED_TYPE: usize = 64;

/// Which output stream of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// File descriptor 1.
    Stdout,
    /// File descriptor 2.
    Stderr,
}

impl Stream {
    /// The tag byte that starts this stream's binary messages.
    pub fn tag(self) -> u8 {
        match self {
            Stream::Stdout => STDOUT,
            Stream::Stderr => STDERR,
        }
    }

    /// The SSE event name (`stdout`, `stderr`).
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One decoded client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipeRequest {
    /// Bytes for the process's stdin (never empty).
    Stdin(Bytes),
    /// Close stdin: an empty binary message, or `{"type":"eof"}`.
    Eof,
    /// Signal the process group: a signal of [`ALLOWED_SIGNALS`].
    Signal(Signal),
    /// `resize`: accepted and ignored (there is no PTY).
    Resize,
}

/// A message that could not be understood: the `error` to answer with; the connection stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMessage {
    /// Short machine word: `bad_message` or `bad_signal`.
    pub code: &'static str,
    /// Explanation for people.
    pub message: String,
}

impl BadMessage {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        BadMessage {
            code,
            message: message.into(),
        }
    }
}

/// Decodes one client message: binary is stdin (empty: end of stdin), text is a JSON control
/// message of a known type; anything else is refused with the reason.
pub fn decode(message: Inbound) -> Result<PipeRequest, BadMessage> {
    let text = match message {
        Inbound::Binary(b) if b.is_empty() => return Ok(PipeRequest::Eof),
        Inbound::Binary(b) => return Ok(PipeRequest::Stdin(b)),
        Inbound::Text(text) => text,
    };
    let obj: Map<String, Value> = match serde_json::from_str(&text) {
        Ok(Value::Object(obj)) => obj,
        _ => {
            return Err(BadMessage::new(
                "bad_message",
                "text messages are JSON control objects; send stdin as binary messages",
            ))
        }
    };
    match obj.get("type") {
        Some(Value::String(t)) if t == "eof" => Ok(PipeRequest::Eof),
        Some(Value::String(t)) if t == "resize" => Ok(PipeRequest::Resize),
        Some(Value::String(t)) if t == "signal" => match obj.get("signal") {
            Some(Value::String(name)) => signal(name).map(PipeRequest::Signal),
            _ => Err(BadMessage::new(
                "bad_message",
                "signal needs a string field signal (e.g. \"SIGINT\")",
            )),
        },
        Some(Value::String(t)) => {
            let mut shown: String = t.chars().take(MAX_ECHOED_TYPE).collect();
            if shown.len() < t.len() {
                shown.push('…');
            }
            Err(BadMessage::new(
                "bad_message",
                format!(
                    "unknown message type {} (expected eof, signal or resize)",
                    Value::String(shown)
                ),
            ))
        }
        _ => Err(BadMessage::new(
            "bad_message",
            "a control message needs a string field type",
        )),
    }
}

/// The signal of that name, if clients may send it.
pub fn signal(name: &str) -> Result<Signal, BadMessage> {
    ALLOWED_SIGNALS
        .iter()
        .copied()
        .find(|s| s.as_str() == name)
        .ok_or_else(|| {
            let allowed: Vec<&str> = ALLOWED_SIGNALS.iter().map(|s| s.as_str()).collect();
            let shown: String = name.chars().take(MAX_ECHOED_TYPE).collect();
            BadMessage::new(
                "bad_signal",
                format!(
                    "signal {shown:?} is not allowed (use one of {})",
                    allowed.join(", ")
                ),
            )
        })
}

/// The stream a server binary message belongs to, and its bytes; `None` for a message that
/// is not output (empty, or an unknown tag). For clients and tests.
pub fn split_output(message: &[u8]) -> Option<(Stream, &[u8])> {
    match message.split_first()? {
        (&STDOUT, rest) => Some((Stream::Stdout, rest)),
        (&STDERR, rest) => Some((Stream::Stderr, rest)),
        _ => None,
    }
}

/// The server's text messages: `exit` and `error`, exactly as the raw dialect writes them.
pub use super::raw::ServerMessage;

/// The `exit` message of a program ended at its `timeout_sec`: the raw dialect's `exit` with
/// `"timed_out":true` (an exit without it did not time out).
pub fn timed_out_exit_json(code: i32, signal: Option<&str>) -> String {
    #[derive(Serialize)]
    struct Exit<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        code: i32,
        signal: Option<&'a str>,
        timed_out: bool,
    }
    let exit = Exit {
        kind: "exit",
        code,
        signal,
        timed_out: true,
    };
    serde_json::to_string(&exit).unwrap_or_default()
}

impl From<BadMessage> for ServerMessage {
    fn from(bad: BadMessage) -> Self {
        ServerMessage::error(bad.code, bad.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Result<PipeRequest, BadMessage> {
        decode(Inbound::Text(s.to_owned()))
    }

    #[test]
    fn binary_is_stdin_and_empty_binary_is_eof() {
        assert_eq!(
            decode(Inbound::Binary(Bytes::from_static(
                b"\x01{\"type\":\"eof\"}"
            ))),
            Ok(PipeRequest::Stdin(Bytes::from_static(
                b"\x01{\"type\":\"eof\"}"
            )))
        );
        assert_eq!(decode(Inbound::Binary(Bytes::new())), Ok(PipeRequest::Eof));
    }

    #[test]
    fn control_messages() {
        assert_eq!(text(r#"{"type":"eof"}"#), Ok(PipeRequest::Eof));
        assert_eq!(
            text(r#"{"type":"signal","signal":"SIGINT"}"#),
            Ok(PipeRequest::Signal(Signal::SIGINT))
        );
        assert_eq!(
            text(r#"{"type":"signal","signal":"SIGKILL"}"#),
            Ok(PipeRequest::Signal(Signal::SIGKILL))
        );
        // Whatever its fields: there is no terminal to size.
        assert_eq!(
            text(r#"{"type":"resize","cols":80,"rows":24}"#),
            Ok(PipeRequest::Resize)
        );
        assert_eq!(text(r#"{"type":"resize"}"#), Ok(PipeRequest::Resize));
    }

    #[test]
    fn everything_else_is_an_error_with_a_code() {
        for (bad, code) in [
            ("ls\n", "bad_message"),
            ("[1]", "bad_message"),
            ("{}", "bad_message"),
            (r#"{"type":7}"#, "bad_message"),
            (r#"{"type":"ping"}"#, "bad_message"),
            (r#"{"type":"signal"}"#, "bad_message"),
            (r#"{"type":"signal","signal":9}"#, "bad_message"),
            (r#"{"type":"signal","signal":"SIGSTOP"}"#, "bad_signal"),
            (r#"{"type":"signal","signal":"sigint"}"#, "bad_signal"),
        ] {
            let e = text(bad).expect_err(bad);
            assert_eq!(e.code, code, "{bad}");
            assert!(!e.message.is_empty());
        }
        let long = format!(r#"{{"type":"{}"}}"#, "x".repeat(5000));
        assert!(text(&long).expect_err("long").message.len() < 200);
    }

    #[test]
    fn server_messages_are_exact() {
        let exit = ServerMessage::Exit {
            code: 0,
            signal: None,
        };
        assert_eq!(exit.to_json(), r#"{"type":"exit","code":0,"signal":null}"#);
        let killed = ServerMessage::Exit {
            code: 137,
            signal: Some("SIGKILL".to_owned()),
        };
        assert_eq!(
            killed.to_json(),
            r#"{"type":"exit","code":137,"signal":"SIGKILL"}"#
        );
        assert_eq!(
            timed_out_exit_json(143, Some("SIGTERM")),
            r#"{"type":"exit","code":143,"signal":"SIGTERM","timed_out":true}"#
        );
        assert_eq!(
            ServerMessage::error("exec_failed", "no").to_json(),
            r#"{"type":"error","message":"no","code":"exec_failed"}"#
        );
    }

    #[test]
    fn output_tags() {
        assert_eq!(split_output(b"\x01hi"), Some((Stream::Stdout, &b"hi"[..])));
        assert_eq!(split_output(b"\x02"), Some((Stream::Stderr, &b""[..])));
        assert_eq!(split_output(b"\x03x"), None);
        assert_eq!(split_output(b""), None);
        assert_eq!(Stream::Stderr.tag(), STDERR);
    }
}
