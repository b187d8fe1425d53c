//! The raw terminal dialect (docs/protocol.md section 10, seeds 000 and 003): terminal bytes both
//! ways, a few JSON control messages, and a plain-ANSI replay of the screen on connect.
//!
//! For clients that want a terminal and nothing else: xterm.js's AttachAddon (keys as text
//! frames), sandbox-style addons (a `0x01` byte before a JSON control message), `websocat`,
//! the command-line client. Output is sent byte for byte: there is no in-band rule to escape.

use std::ops::Range;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::{refusal_code, Closing, Dialect, Encoded, Inbound, Notice, Outbound};
use super::request::{Outcome, Request};
use crate::term::snapshot::SnapshotForm;

/// Largest binary frame of output or replay the server sends (a log batch fits in one).
pub const MAX_OUTPUT_FRAME: usize = 64 * 1024;
/// Largest replay, bytes of ANSI: scrollback is trimmed to fit. Ordinary sessions (1000 lines
/// of scrollback at 200 columns) stay well under it, so they replay exactly what a browser
/// joiner's snapshot holds.
pub const REPLAY_LIMIT: usize = 8 << 20;
/// The magic byte of seed 003: a frame starting with it and then a JSON object is control.
pub const CONTROL_PREFIX: u8 = 0x01;
/// Largest `data` a ping may carry back, as JSON bytes (it is echoed).
pub const MAX_PING_DATA_BYTES: usize = 1024;
/// Longest message type echoed back in an error.
const MAX_ECHOED_TYPE: usize = 64;

/// A control message that could not be understood: the `error` to answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadControl(pub String);

/// One message from the server to a raw client, one JSON text frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The replay is complete; live output follows.
    Ready,
    /// The program ended.
    Exit {
        /// Exit status, or 128 + the signal number.
        code: i32,
        /// The signal's name when a signal ended it, else `null`.
        signal: Option<String>,
    },
    /// The answer to a `ping`.
    Pong {
        /// The ping's `data`, when it had one.
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// Something the client sent or asked was refused; the connection stays open.
    Error {
        /// Explanation for people.
        message: String,
        /// Short machine word, e.g. `bad_message`, `read_only`.
        code: String,
    },
}

impl ServerMessage {
    /// `{"type":"error",…}`.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        ServerMessage::Error {
            message: message.into(),
            code: code.to_owned(),
        }
    }

    /// The message as one JSON text.
    pub fn to_json(&self) -> String {
        // Plain strings, numbers and JSON values: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| r#"{"type":"error"}"#.to_owned())
    }
}

/// Decodes one client message: a control message as a [`Request`], anything else as input.
/// `Err` for a control message that is malformed (bad fields, an unknown type after `0x01`).
pub fn decode(message: Inbound) -> Result<Request, BadControl> {
    let (bytes, is_text) = match message {
        Inbound::Text(text) => (Bytes::from(text.into_bytes()), true),
        Inbound::Binary(bytes) => (bytes, false),
    };
    if bytes.first() == Some(&CONTROL_PREFIX) {
        if let Some(obj) = json_object(&bytes[1..]) {
            // After the magic byte an object is meant as control: an unknown type is refused.
            return control(&obj).unwrap_or_else(|| {
                Err(BadControl(format!(
                    "unknown control message type {}",
                    type_shown(&obj)
                )))
            });
        }
    } else if is_text {
        if let Some(known) = json_object(&bytes).and_then(|obj| control(&obj)) {
            return known;
        }
    }
    Ok(Request::Input(bytes))
}

/// The JSON object `bytes` holds, if it is one (else they are input). Keys and pastes that
/// do not start like an object are not parsed at all.
fn json_object(bytes: &[u8]) -> Option<Map<String, Value>> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(obj)) => Some(obj),
        _ => None,
    }
}

/// The request for a control message of a known type (`None` for any other type).
fn control(obj: &Map<String, Value>) -> Option<Result<Request, BadControl>> {
    let kind = obj.get("type")?.as_str()?;
    Some(match kind {
        "resize" => match (positive_u16(obj, "cols"), positive_u16(obj, "rows")) {
            (Some(cols), Some(rows)) => Ok(Request::Resize { rows, cols }),
            _ => Err(BadControl(
                "resize needs positive integers cols and rows".to_owned(),
            )),
        },
        "signal" => match obj.get("signal") {
            Some(Value::String(signal)) => Ok(Request::Signal {
                signal: signal.clone(),
            }),
            _ => Err(BadControl(
                "signal needs a string field signal (e.g. \"SIGINT\")".to_owned(),
            )),
        },
        "ping" => {
            let data = obj.get("data").cloned();
            if data
                .as_ref()
                .is_some_and(|d| d.to_string().len() > MAX_PING_DATA_BYTES)
            {
                Err(BadControl(format!(
                    "ping data is at most {MAX_PING_DATA_BYTES} bytes of JSON"
                )))
            } else {
                Ok(Request::Ping { data })
            }
        }
        _ => return None,
    })
}

/// A strictly positive JSON integer, saturated to `u16::MAX`; the size policy clamps it.
fn positive_u16(obj: &Map<String, Value>, key: &str) -> Option<u16> {
    let n = obj.get(key)?.as_u64().filter(|&n| n > 0)?;
    Some(u16::try_from(n).unwrap_or(u16::MAX))
}

/// The object's `type` as a JSON literal, shortened: for an error message.
fn type_shown(obj: &Map<String, Value>) -> String {
    match obj.get("type") {
        Some(Value::String(s)) => {
            let mut shown: String = s.chars().take(MAX_ECHOED_TYPE).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            Value::String(shown).to_string()
        }
        Some(_) => "(not a string)".to_owned(),
        None => "(missing)".to_owned(),
    }
}

/// Byte ranges of `data` to send as one binary frame each (at most [`MAX_OUTPUT_FRAME`]).
pub fn frame_ranges(data: &[u8]) -> impl Iterator<Item = Range<usize>> {
    let len = data.len();
    (0..len)
        .step_by(MAX_OUTPUT_FRAME)
        .map(move |start| start..(start + MAX_OUTPUT_FRAME).min(len))
}

/// The raw dialect as a [`Dialect`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

/// A JSON message as a text message, with its code if it is an error (counted for `/metrics`).
fn text(msg: ServerMessage) -> Encoded {
    let error = match &msg {
        ServerMessage::Error { code, .. } => Some(code.clone()),
        _ => None,
    };
    Encoded {
        message: Outbound::Text(msg.to_json()),
        error,
    }
}

impl Dialect for Raw {
    fn decode(&self, message: Inbound) -> Result<Request, Encoded> {
        decode(message).map_err(|BadControl(why)| text(ServerMessage::error("bad_message", why)))
    }

    fn outcome(&self, outcome: Outcome) -> Option<Encoded> {
        let msg = match outcome {
            Outcome::Done | Outcome::Acked(_) => return None,
            Outcome::Pong(data) => ServerMessage::Pong { data },
            Outcome::Refused(r) => ServerMessage::error(refusal_code(&r), r.message()),
            // Raw clients cannot upload or rename; say so rather than nothing, should it happen.
            Outcome::Uploaded { .. } | Outcome::UploadFailed { .. } | Outcome::BadName(_) => {
                ServerMessage::error("unsupported", "not available in the raw dialect")
            }
        };
        Some(text(msg))
    }

    fn notice(&self, notice: Notice<'_>) -> Option<Encoded> {
        let msg = match notice {
            Notice::Ready => ServerMessage::Ready,
            Notice::Exit(info) => ServerMessage::Exit {
                code: info.code,
                signal: info.signal.clone(),
            },
            Notice::Refused(r) => ServerMessage::error(refusal_code(r), r.message()),
            Notice::Closing(Closing::TooManyViewers(why)) => {
                ServerMessage::error("too_many_viewers", why)
            }
            Notice::Closing(Closing::CreateFailed(why)) => {
                ServerMessage::error("session_create_failed", why)
            }
            Notice::Closing(Closing::NoSuchSession) => {
                ServerMessage::error("not_found", "Session not found")
            }
            // A raw client has a terminal and nothing else to show these in.
            Notice::Status { .. }
            | Notice::Chat(_)
            | Notice::Presence { .. }
            | Notice::State(_) => return None,
            // The close code says it all.
            Notice::Closing(_) => return None,
        };
        Some(text(msg))
    }

    fn output_ranges(data: &[u8]) -> impl Iterator<Item = Range<usize>> {
        frame_ranges(data)
    }

    fn snapshot_form(&self) -> SnapshotForm {
        SnapshotForm::plain(REPLAY_LIMIT)
    }

    fn snapshot(&self, packed: &[u8]) -> Vec<Vec<u8>> {
        frame_ranges(packed).map(|r| packed[r].to_vec()).collect()
    }

    /// The browser dialect's close codes.
    fn close<'a>(&self, why: Closing<'a>) -> (u16, &'a str) {
        super::swe::close(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_in(s: &str) -> Result<Request, BadControl> {
        decode(Inbound::Text(s.to_owned()))
    }

    fn bin_in(b: &[u8]) -> Result<Request, BadControl> {
        decode(Inbound::Binary(Bytes::copy_from_slice(b)))
    }

    fn input(b: &[u8]) -> Result<Request, BadControl> {
        Ok(Request::Input(Bytes::copy_from_slice(b)))
    }

    #[test]
    fn text_frames_are_keys_unless_a_known_control_object() {
        assert_eq!(text_in("ls\r"), input(b"ls\r"));
        assert_eq!(text_in("{"), input(b"{"));
        assert_eq!(text_in(r#"{"type":"nope"}"#), input(br#"{"type":"nope"}"#));
        assert_eq!(text_in(r#"{"a":1}"#), input(br#"{"a":1}"#));
        assert_eq!(text_in("[1,2]"), input(b"[1,2]"));
        assert_eq!(
            text_in(r#"{"type":"resize","cols":120,"rows":40}"#),
            Ok(Request::Resize {
                rows: 40,
                cols: 120
            })
        );
        assert_eq!(
            text_in(r#" {"type":"ping"}"#),
            Ok(Request::Ping { data: None })
        );
        assert_eq!(
            text_in(r#"{"type":"signal","signal":"SIGINT"}"#),
            Ok(Request::Signal {
                signal: "SIGINT".to_owned()
            })
        );
    }

    #[test]
    fn binary_frames_are_input_unless_0x01_then_an_object() {
        assert_eq!(bin_in(b"\x01"), input(b"\x01"));
        assert_eq!(bin_in(b"\x01abc"), input(b"\x01abc"));
        assert_eq!(
            bin_in(b"\x00\x00\x18\x00\x50"),
            input(b"\x00\x00\x18\x00\x50")
        );
        // No prefix: a JSON object in a binary frame is input.
        assert_eq!(bin_in(br#"{"type":"ping"}"#), input(br#"{"type":"ping"}"#));
        assert_eq!(
            bin_in(b"\x01{\"type\":\"resize\",\"cols\":3,\"rows\":2}"),
            Ok(Request::Resize { rows: 2, cols: 3 })
        );
        // After the magic byte an object is control: an unknown type is an error, not input.
        assert!(bin_in(b"\x01{\"type\":\"nope\"}").is_err());
        assert!(bin_in(b"\x01{}").is_err());
        // And so is a text frame with the prefix.
        assert_eq!(
            text_in("\u{1}{\"type\":\"ping\",\"data\":7}"),
            Ok(Request::Ping {
                data: Some(Value::from(7))
            })
        );
        assert!(text_in("\u{1}{\"type\":\"nope\"}").is_err());
        assert_eq!(text_in("\u{1}"), input(b"\x01"));
    }

    #[test]
    fn bad_control_fields_are_errors() {
        for bad in [
            r#"{"type":"resize","cols":0,"rows":1}"#,
            r#"{"type":"resize","cols":-1,"rows":1}"#,
            r#"{"type":"resize","cols":1.5,"rows":1}"#,
            r#"{"type":"resize","cols":"80","rows":24}"#,
            r#"{"type":"resize","cols":80}"#,
            r#"{"type":"signal"}"#,
            r#"{"type":"signal","signal":9}"#,
        ] {
            assert!(text_in(bad).is_err(), "{bad}");
        }
        let big = format!(r#"{{"type":"ping","data":"{}"}}"#, "x".repeat(2000));
        assert!(text_in(&big).is_err());
        // Sizes saturate; the size policy clamps them.
        assert_eq!(
            text_in(r#"{"type":"resize","cols":99999,"rows":70000}"#),
            Ok(Request::Resize {
                rows: u16::MAX,
                cols: u16::MAX
            })
        );
    }

    #[test]
    fn server_messages_are_exact() {
        assert_eq!(ServerMessage::Ready.to_json(), r#"{"type":"ready"}"#);
        assert_eq!(
            ServerMessage::Exit {
                code: 143,
                signal: Some("SIGTERM".to_owned())
            }
            .to_json(),
            r#"{"type":"exit","code":143,"signal":"SIGTERM"}"#
        );
        assert_eq!(
            ServerMessage::Exit {
                code: 0,
                signal: None
            }
            .to_json(),
            r#"{"type":"exit","code":0,"signal":null}"#
        );
        assert_eq!(
            ServerMessage::Pong { data: None }.to_json(),
            r#"{"type":"pong"}"#
        );
        assert_eq!(
            ServerMessage::error("read_only", "no").to_json(),
            r#"{"type":"error","message":"no","code":"read_only"}"#
        );
    }

    #[test]
    fn output_is_cut_only_by_size() {
        let data = vec![0x02u8; MAX_OUTPUT_FRAME * 2 + 5];
        let ranges: Vec<_> = frame_ranges(&data).collect();
        assert_eq!(
            ranges,
            [
                0..MAX_OUTPUT_FRAME,
                MAX_OUTPUT_FRAME..2 * MAX_OUTPUT_FRAME,
                2 * MAX_OUTPUT_FRAME..2 * MAX_OUTPUT_FRAME + 5
            ]
        );
        assert_eq!(frame_ranges(b"").count(), 0);
        let one: Vec<_> = frame_ranges(b"\x02ab").collect();
        assert_eq!((one.len(), one[0].clone()), (1, 0..3));
    }
}
