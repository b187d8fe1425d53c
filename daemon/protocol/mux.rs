//! The multiplexed terminals dialect (docs/protocol.md section 11, seed 004): one connection carries
//! every session the token reaches, output and input as `[num][bytes]` binary frames, and
//! `terminal` channel JSON messages for the rest.

use std::ops::Range;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::Closing;
use super::state::StateFields;
use crate::session::EndReason;

/// Largest binary frame the server sends: the session number, then output.
pub const MAX_FRAME: usize = 64 * 1024;
/// Largest output payload in one frame.
pub const MAX_PAYLOAD: usize = MAX_FRAME - 1;
/// The only channel this dialect has.
pub const CHANNEL: &str = "terminal";
/// Longest id or type echoed back in an error.
const MAX_ECHOED: usize = 64;

/// One decoded client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MuxRequest {
    /// Input for session `num`.
    Input {
        /// The session's number.
        num: u8,
        /// The bytes, unchanged.
        data: Bytes,
    },
    /// This connection's terminal size for a session.
    Resize {
        /// The session, by number or uuid, as sent.
        id: String,
        /// Rows, at least 1 (saturated to `u16::MAX`).
        rows: u16,
        /// Columns, at least 1 (saturated to `u16::MAX`).
        cols: u16,
    },
    /// End the session (as REST `DELETE`).
    Close {
        /// The session, by number or uuid, as sent.
        id: String,
    },
}

/// A client message that could not be decoded: the error to answer with, and the session id
/// it named, when it named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMessage {
    /// The `id` of the message, if it had a readable one.
    pub id: Option<String>,
    /// Why, for people.
    pub message: String,
}

fn bad(id: Option<String>, message: impl Into<String>) -> BadMessage {
    BadMessage {
        id,
        message: message.into(),
    }
}

/// Decodes a binary client frame: `[num][input…]`.
pub fn decode_binary(frame: Bytes) -> Result<MuxRequest, BadMessage> {
    match frame.first() {
        None => Err(bad(
            None,
            "empty binary frame: input is [session number][bytes]",
        )),
        Some(&0) => Err(bad(
            Some("0".to_owned()),
            "session number 0 does not exist (numbers are 1 to 255)",
        )),
        Some(&num) => Ok(MuxRequest::Input {
            num,
            data: frame.slice(1..),
        }),
    }
}

/// Decodes a text client frame: a `terminal` channel JSON message.
pub fn decode_text(text: &str) -> Result<MuxRequest, BadMessage> {
    let obj = match serde_json::from_str(text) {
        Ok(Value::Object(obj)) => obj,
        Ok(_) => return Err(bad(None, "expected a JSON object")),
        Err(e) => return Err(bad(None, format!("invalid JSON: {e}"))),
    };
    let id = id_of(&obj);
    match obj.get("channel") {
        Some(Value::String(c)) if c == CHANNEL => {}
        Some(other) => return Err(bad(id, format!("unknown channel {}", shown(other)))),
        None => return Err(bad(id, "missing \"channel\": \"terminal\"")),
    }
    let kind = match obj.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(_) => return Err(bad(id, "the \"type\" field must be a string")),
        None => return Err(bad(id, "missing \"type\" field")),
    };
    let Some(id) = id else {
        return Err(bad(
            None,
            format!("{kind} needs an \"id\": a session number or uuid, as a string"),
        ));
    };
    match kind {
        "resize" => match (positive_u16(&obj, "cols"), positive_u16(&obj, "rows")) {
            (Some(cols), Some(rows)) => Ok(MuxRequest::Resize { id, rows, cols }),
            _ => Err(bad(
                Some(id),
                "resize needs positive integers cols and rows",
            )),
        },
        "close" => Ok(MuxRequest::Close { id }),
        other => Err(bad(
            Some(id),
            format!(
                "unknown message type {}",
                shown(&Value::String(other.to_owned()))
            ),
        )),
    }
}

/// The message's `id` as a string (a number is accepted too), shortened for echoing.
fn id_of(obj: &Map<String, Value>) -> Option<String> {
    let id = match obj.get("id")? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Some(id.chars().take(MAX_ECHOED).collect())
}

fn positive_u16(obj: &Map<String, Value>, key: &str) -> Option<u16> {
    let n = obj.get(key)?.as_u64().filter(|&n| n > 0)?;
    Some(u16::try_from(n).unwrap_or(u16::MAX))
}

/// A value as JSON, cut to a readable length.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() <= MAX_ECHOED {
        return s;
    }
    let mut cut: String = s.chars().take(MAX_ECHOED).collect();
    cut.push('…');
    cut
}

/// One message from the server, on the `terminal` channel.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// A session this connection carries: before its replay.
    Open {
        /// Its number, as a string.
        id: String,
        /// Its uuid.
        uuid: String,
        /// Its width.
        cols: u16,
        /// Its height.
        rows: u16,
        /// The program and arguments it runs.
        command: Vec<String>,
        /// Its state (working, waiting, idle, exited), since when and why.
        #[serde(flatten)]
        state: StateFields,
    },
    /// A session's state changed, or its reason or choices.
    State {
        /// The session's number.
        id: String,
        /// The state.
        #[serde(flatten)]
        state: StateFields,
    },
    /// A session's program ended.
    Exit {
        /// The session's number.
        id: String,
        /// Exit status, or 128 + the signal number.
        code: i32,
        /// The signal's name when a signal ended it.
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
    },
    /// A session was ended: nothing more comes for its number.
    Closed {
        /// The session's number.
        id: String,
    },
    /// Something was refused; the connection stays open.
    Error {
        /// The session it concerns, when there is one.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Explanation for people.
        message: String,
    },
}

/// [`ServerMessage`] with its channel, as sent.
#[derive(Serialize)]
struct OnChannel<'a> {
    channel: &'static str,
    #[serde(flatten)]
    message: &'a ServerMessage,
}

impl ServerMessage {
    /// The message as one JSON text.
    pub fn to_json(&self) -> String {
        let on = OnChannel {
            channel: CHANNEL,
            message: self,
        };
        // Strings and numbers only: serialising cannot fail.
        serde_json::to_string(&on).unwrap_or_else(|_| {
            r#"{"channel":"terminal","type":"error","message":"internal"}"#.to_owned()
        })
    }

    /// An `error` about session `id` (or none).
    pub fn error(id: Option<String>, message: impl Into<String>) -> Self {
        ServerMessage::Error {
            id,
            message: message.into(),
        }
    }
}

/// Byte ranges of `data` to send as one `[num][bytes]` frame each.
pub fn payload_ranges(data: &[u8]) -> impl Iterator<Item = Range<usize>> {
    let len = data.len();
    (0..len)
        .step_by(MAX_PAYLOAD)
        .map(move |start| start..(start + MAX_PAYLOAD).min(len))
}

/// The close code and reason that tell the client why the whole connection ends: the
/// browser dialect's.
pub fn close(why: Closing<'_>) -> (u16, &str) {
    super::swe::close(why)
}

/// What a session's end means for the connection: the close of the whole connection when the
/// daemon goes (or is replaced), else `None`, and only that session is said to be `closed`.
pub fn session_ended(reason: EndReason) -> Option<(u16, &'static str)> {
    match reason {
        EndReason::Shutdown | EndReason::Upgrade => Some(close(Closing::Ended(reason))),
        EndReason::Deleted | EndReason::Reaped => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_daemon_going_closes_the_connection() {
        assert_eq!(session_ended(EndReason::Deleted), None);
        assert_eq!(session_ended(EndReason::Reaped), None);
        assert_eq!(session_ended(EndReason::Upgrade).map(|c| c.0), Some(1012));
        assert_eq!(session_ended(EndReason::Shutdown).map(|c| c.0), Some(1001));
    }

    fn text(s: &str) -> Result<MuxRequest, BadMessage> {
        decode_text(s)
    }

    #[test]
    fn binary_is_tagged_input() {
        assert_eq!(
            decode_binary(Bytes::from_static(b"\x03ls\r")),
            Ok(MuxRequest::Input {
                num: 3,
                data: Bytes::from_static(b"ls\r")
            })
        );
        assert_eq!(
            decode_binary(Bytes::from_static(b"\xff")),
            Ok(MuxRequest::Input {
                num: 255,
                data: Bytes::new()
            })
        );
        assert!(decode_binary(Bytes::new()).is_err());
        assert_eq!(
            decode_binary(Bytes::from_static(b"\x00x")).unwrap_err().id,
            Some("0".to_owned())
        );
    }

    #[test]
    fn terminal_channel_messages() {
        assert_eq!(
            text(r#"{"channel":"terminal","type":"resize","id":"1","cols":160,"rows":50}"#),
            Ok(MuxRequest::Resize {
                id: "1".to_owned(),
                rows: 50,
                cols: 160
            })
        );
        assert_eq!(
            text(r#"{"channel":"terminal","type":"close","id":2}"#),
            Ok(MuxRequest::Close { id: "2".to_owned() })
        );
        for (bad_text, id) in [
            ("nope", None),
            ("[]", None),
            (r#"{"type":"close","id":"1"}"#, Some("1")),
            (r#"{"channel":"chat","type":"close","id":"1"}"#, Some("1")),
            (r#"{"channel":"terminal","type":"close"}"#, None),
            (
                r#"{"channel":"terminal","type":"nope","id":"4"}"#,
                Some("4"),
            ),
            (r#"{"channel":"terminal","type":7,"id":"4"}"#, Some("4")),
            (
                r#"{"channel":"terminal","type":"resize","id":"4","cols":0,"rows":5}"#,
                Some("4"),
            ),
            (
                r#"{"channel":"terminal","type":"resize","id":"4","cols":80}"#,
                Some("4"),
            ),
        ] {
            let e = text(bad_text).expect_err(bad_text);
            assert_eq!(e.id.as_deref(), id, "{bad_text}");
            assert!(!e.message.is_empty());
        }
        let long = format!(
            r#"{{"channel":"terminal","type":"close","id":"{}"}}"#,
            "9".repeat(500)
        );
        match text(&long) {
            Ok(MuxRequest::Close { id }) => assert_eq!(id.len(), MAX_ECHOED),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn server_messages_are_exact() {
        assert_eq!(
            ServerMessage::Open {
                id: "3".into(),
                uuid: "u".into(),
                cols: 80,
                rows: 24,
                command: vec!["bash".into()],
                state: StateFields {
                    state: crate::attention::State::Working,
                    state_since: "2026-11-25T09:14:03Z".into(),
                    state_since_ms: 1_795_770_843_000,
                    reason: "printing".into(),
                    state_source: crate::attention::Source::Terminal,
                    choices: vec![],
                },
            }
            .to_json(),
            concat!(
                r#"{"channel":"terminal","type":"open","id":"3","uuid":"u","cols":80,"rows":24,"command":["bash"],"#,
                r#""state":"working","stateSince":"2026-11-25T09:14:03Z","stateSinceMs":1795770843000,"#,
                r#""reason":"printing","stateSource":"terminal","choices":[]}"#
            )
        );
        assert_eq!(
            ServerMessage::State {
                id: "3".into(),
                state: StateFields {
                    state: crate::attention::State::Waiting,
                    state_since: "2026-11-25T09:14:05Z".into(),
                    state_since_ms: 1_795_770_845_000,
                    reason: "Claude asks: Do you want to proceed?".into(),
                    state_source: crate::attention::Source::Screen,
                    choices: vec![crate::attention::Choice {
                        label: "Yes".into(),
                        keys: "1".into(),
                    }],
                },
            }
            .to_json(),
            concat!(
                r#"{"channel":"terminal","type":"state","id":"3","state":"waiting","#,
                r#""stateSince":"2026-11-25T09:14:05Z","stateSinceMs":1795770845000,"#,
                r#""reason":"Claude asks: Do you want to proceed?","stateSource":"screen","#,
                r#""choices":[{"label":"Yes","keys":"1"}]}"#
            )
        );
        assert_eq!(
            ServerMessage::Exit {
                id: "1".into(),
                code: 0,
                signal: None
            }
            .to_json(),
            r#"{"channel":"terminal","type":"exit","id":"1","code":0}"#
        );
        assert_eq!(
            ServerMessage::Closed { id: "1".into() }.to_json(),
            r#"{"channel":"terminal","type":"closed","id":"1"}"#
        );
        assert_eq!(
            ServerMessage::error(Some("1".into()), "no").to_json(),
            r#"{"channel":"terminal","type":"error","id":"1","message":"no"}"#
        );
    }

    #[test]
    fn payloads_fit_a_frame_with_their_tag() {
        let data = vec![7u8; MAX_PAYLOAD * 2 + 1];
        let r: Vec<_> = payload_ranges(&data).collect();
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|r| r.len() < MAX_FRAME));
        assert_eq!(r[2].end, data.len());
    }
}
