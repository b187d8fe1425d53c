//! The browser dialect of docs/protocol.md (swe-swe compatible): binary and JSON frames <-> messages.
//!
//! Client frames are decoded into [`ClientMessage`]s, server events are encoded from
//! [`ServerMessage`]s, and raw terminal output and snapshots are cut into binary frames that a
//! client can never mistake for one another. Everything here is pure: no I/O, no clock, no
//! session state, so a malformed frame can only ever produce a [`DecodeError`], never a panic.

use std::ops::Range;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

/// Largest live-output frame, in bytes (8 KiB): iOS Safari drops a WebSocket that receives a
/// larger single message.
pub const MAX_OUTPUT_FRAME: usize = 8 * 1024;

/// Largest payload of one snapshot chunk, in bytes (8 KiB), for the same reason as
/// [`MAX_OUTPUT_FRAME`].
pub const MAX_SNAPSHOT_PAYLOAD: usize = 8 * 1024;

/// Most chunks one snapshot may take: `index` and `total` are single bytes on the wire.
pub const MAX_SNAPSHOT_CHUNKS: usize = 255;
/// The largest gzip stream one snapshot can be in this dialect.
pub const SNAPSHOT_LIMIT: usize = MAX_SNAPSHOT_PAYLOAD * MAX_SNAPSHOT_CHUNKS;

/// First byte of a client binary resize frame.
const RESIZE: u8 = 0x00;
/// First byte of a client binary upload frame.
const UPLOAD: u8 = 0x01;
/// First byte of a server snapshot chunk (when the frame is 3 bytes or longer).
const SNAPSHOT_CHUNK: u8 = 0x02;

/// Longest message `type` echoed back in an error, in characters: a client could send a huge
/// one, and the error is for people.
const MAX_ECHOED_TYPE: usize = 64;

use super::dialect::{Closing, Dialect, Encoded, Inbound, Notice, Outbound};
use super::request::Outcome;
/// The browser dialect decodes into the domain requests every dialect shares.
pub use super::request::Request as ClientMessage;
use super::state::StateFields;
use crate::session::Role;

/// Why a client frame could not be decoded. Each variant maps to one reply
/// ([`DecodeError::reply`]); the connection always stays open.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// -> {"type":"error","code":"bad_message","message":...}
    #[error("{0}")]
    BadMessage(String),
    /// -> file_upload success:false, error "invalid upload frame"
    #[error("invalid upload frame")]
    InvalidUpload,
}

impl DecodeError {
    /// The message to send back to the client that sent the bad frame.
    pub fn reply(&self) -> ServerMessage {
        match self {
            DecodeError::BadMessage(message) => ServerMessage::bad_message(message.clone()),
            DecodeError::InvalidUpload => ServerMessage::FileUpload {
                success: false,
                // The name cannot be trusted when the framing around it is wrong.
                filename: String::new(),
                error: Some(self.to_string()),
            },
        }
    }
}

/// The `error` message that tells a client why the session refused what it asked.
pub fn refusal(r: &crate::session::Refusal) -> ServerMessage {
    ServerMessage::error(super::dialect::refusal_code(r), r.message())
}

/// The close code and reason that tell a client why its connection ends (docs/protocol.md: the
/// same in the raw and multiplexed dialects).
pub fn close(why: Closing<'_>) -> (u16, &str) {
    use crate::session::EndReason;
    match why {
        Closing::Ended(EndReason::Deleted | EndReason::Reaped) => (4003, "session ended"),
        Closing::Ended(EndReason::Shutdown) => (1001, "ptyhub is shutting down"),
        Closing::Ended(EndReason::Upgrade) => (1012, "ptyhub is restarting"),
        Closing::CreateFailed(message) => (4002, message),
        Closing::NoSuchSession => (4004, "session not found"),
        Closing::TooManyViewers(_) => (1013, "too many viewers"),
        // RFC 6455's "internal error".
        Closing::ScreenFailed => (1011, "the screen could not be drawn; join again"),
        Closing::NotReading => (1008, "not reading: too much queued for this connection"),
        Closing::AccessEnded(why) => (1008, why.reason()),
    }
}

/// Largest `data` a ping may carry, as JSON bytes: it is echoed, so it is what a client could
/// make the daemon hold for it.
pub const MAX_PING_DATA_BYTES: usize = 1024;

/// Length of `v` written as JSON, without building the text.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

fn bad(message: impl Into<String>) -> DecodeError {
    DecodeError::BadMessage(message.into())
}

/// Decode one binary frame from a client (docs/protocol.md section 2, "Client → server, binary").
///
/// Takes the frame by value so that input and upload data are slices of it, not copies.
pub fn decode_binary(frame: Bytes) -> Result<ClientMessage, DecodeError> {
    match *frame.as_ref() {
        [] => Err(bad("empty binary frame")),
        [RESIZE, rows_hi, rows_lo, cols_hi, cols_lo] => Ok(ClientMessage::Resize {
            // A client terminal is never 0 wide or high; treat 0 as the smallest real size
            // rather than refusing the frame, as the seed's server did.
            rows: u16::from_be_bytes([rows_hi, rows_lo]).max(1),
            cols: u16::from_be_bytes([cols_hi, cols_lo]).max(1),
        }),
        [UPLOAD, name_hi, name_lo, ..] => {
            let name_len = usize::from(u16::from_be_bytes([name_hi, name_lo]));
            let name_end = 3 + name_len;
            // `name_len >= 1` and `name_end <= len` together imply a frame of 4 bytes or more.
            if name_len == 0 || name_end > frame.len() {
                return Err(DecodeError::InvalidUpload);
            }
            let name = frame
                .get(3..name_end)
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
            Ok(ClientMessage::Upload {
                name,
                data: frame.slice(name_end..),
            })
        }
        // Everything else is input: other first bytes, 0x00 frames that are not exactly
        // 5 bytes, and 1-2 byte frames (our client sends a lone 0x00 or 0x01 keystroke this way).
        _ => Ok(ClientMessage::Input(frame)),
    }
}

/// Decode one text frame from a client: a JSON object with a `type` field (docs/protocol.md
/// section 2, "Client → server, JSON"). Unknown extra fields are ignored.
pub fn decode_text(text: &str) -> Result<ClientMessage, DecodeError> {
    // serde_json limits nesting depth, so hostile input cannot overflow the stack here.
    let value: Value = serde_json::from_str(text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(bad("expected a JSON object with a \"type\" field"));
    };
    let kind = match obj.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(bad("the \"type\" field must be a string")),
        None => return Err(bad("missing \"type\" field")),
    };
    match kind.as_str() {
        "ping" => {
            let data = obj.remove("data");
            if data
                .as_ref()
                .is_some_and(|d| json_len(d) > MAX_PING_DATA_BYTES)
            {
                return Err(bad(format!(
                    "ping data is at most {MAX_PING_DATA_BYTES} bytes of JSON"
                )));
            }
            Ok(ClientMessage::Ping { data })
        }
        // `{"type":"resize","follow":true}`: an addition to the seed's dialect (its clients
        // never send it) for viewers that scale the session's screen instead of sizing it.
        "resize" if obj.get("follow") == Some(&Value::Bool(true)) => Ok(ClientMessage::Follow),
        "resize" => match (positive_u16(&obj, "rows"), positive_u16(&obj, "cols")) {
            // `"control":true`: the same addition's "take control of the size".
            (Some(rows), Some(cols)) if obj.get("control") == Some(&Value::Bool(true)) => {
                Ok(ClientMessage::TakeSize { rows, cols })
            }
            (Some(rows), Some(cols)) => Ok(ClientMessage::Resize { rows, cols }),
            _ => Err(bad("resize needs positive integers cols and rows")),
        },
        "chat" => match (
            take_string(&mut obj, "userName"),
            take_string(&mut obj, "text"),
        ) {
            (Some(user_name), Some(text)) => Ok(ClientMessage::Chat { user_name, text }),
            _ => Err(bad("chat needs string fields userName and text")),
        },
        "rename_session" => take_string(&mut obj, "name")
            .map(|name| ClientMessage::Rename { name })
            .ok_or_else(|| bad("rename_session needs a string field name")),
        "toggle_yolo" => Ok(ClientMessage::ToggleYolo),
        // An addition to the seed's dialect: this client's name and device kind for the
        // others' viewer lists (each optional; the name is checked as a chat name).
        "presence" => {
            let name = match obj.remove("name") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(_) => return Err(bad("presence name must be a string")),
            };
            let device = match obj.remove("device") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(_) => return Err(bad("presence device must be a string")),
            };
            Ok(ClientMessage::Presence { name, device })
        }
        "ack" => obj
            .get("bytes")
            .and_then(Value::as_u64)
            .map(|bytes| ClientMessage::Ack { bytes })
            .ok_or_else(|| bad("ack needs a non-negative integer field bytes")),
        "signal" => take_string(&mut obj, "signal")
            .map(|signal| ClientMessage::Signal { signal })
            .ok_or_else(|| bad("signal needs a string field signal (e.g. \"SIGINT\")")),
        other => Err(bad(format!(
            "unknown message type {}",
            quoted_prefix(other)
        ))),
    }
}

/// A strictly positive JSON integer, saturated to `u16::MAX`. Floats (even `24.0`), negative
/// numbers, zero and non-numbers are `None`.
fn positive_u16(obj: &Map<String, Value>, key: &str) -> Option<u16> {
    let n = obj.get(key)?.as_u64().filter(|&n| n > 0)?;
    Some(u16::try_from(n).unwrap_or(u16::MAX))
}

/// Move a string field out of the object (no copy), `None` when absent or not a string.
fn take_string(obj: &mut Map<String, Value>, key: &str) -> Option<String> {
    match obj.remove(key)? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// `s` as a JSON string literal (so control characters stay visible), cut to a readable length.
fn quoted_prefix(s: &str) -> String {
    let mut shown: String = s.chars().take(MAX_ECHOED_TYPE).collect();
    if shown.len() < s.len() {
        shown.push('…');
    }
    Value::String(shown).to_string()
}

/// One message from the server to a client, serialised as one JSON text frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// Reply to `ping`, to the pinging client only.
    Pong {
        /// The ping's `data`, as sent; omitted when the ping had none.
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// The session's state as this client sees it.
    Status(Status),
    /// A chat line, broadcast to every client, sender included.
    Chat {
        /// The sender's name: a user's verified name whatever it sent, or a guest's display
        /// name.
        #[serde(rename = "userName")]
        user_name: String,
        /// Whether a guest (a share link's holder) sent it: `userName` is then only what it
        /// calls itself (an addition to the seed's dialect).
        guest: bool,
        /// The message text.
        text: String,
        /// When the server received it, RFC 3339 in UTC.
        timestamp: String,
    },
    /// Result of a file upload, to the uploader only.
    FileUpload {
        /// Whether the file was saved.
        success: bool,
        /// The name it was saved under (or the name asked for, on failure).
        filename: String,
        /// Why it failed; `null` on success.
        error: Option<String>,
    },
    /// The session's process has ended (not sent when it is replaced by a YOLO restart).
    Exit {
        /// Exit status, or 128 + the signal number when a signal ended it.
        #[serde(rename = "exitCode")]
        exit_code: i32,
        /// The signal that ended it, e.g. `"SIGKILL"`; `null` for a normal exit.
        signal: Option<String>,
    },
    /// The join sequence (snapshot, chat history) is complete; live output follows.
    Ready,
    /// The session's state changed, or its reason or choices (an addition to the seed's
    /// dialect).
    State(StateFields),
    /// Who is here (an addition to the seed's dialect: its clients ignore unknown types).
    Presence {
        /// Everyone connected, in joining order; past [`PRESENCE_LISTED`] people, the first
        /// of them and always the receiving client and the typist.
        viewers: Vec<PresencePerson>,
        /// How many are connected (more than `viewers` holds in a crowd).
        total: usize,
        /// The `id` of the viewer whose first keystroke after a quiet spell prompted this
        /// message; `null` for a join, leave, name or device change.
        typing: Option<u32>,
    },
    /// A request was refused; the connection stays open.
    Error {
        /// Short machine word, e.g. `bad_message`.
        code: String,
        /// Explanation for people.
        message: String,
    },
}

/// One viewer in a `presence` message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PresencePerson {
    /// Small and stable while it is connected ("viewer 3").
    pub id: u32,
    /// Its chat name, `null` before it set one.
    pub name: Option<String>,
    /// Its verified user name; `null` for a guest (a share link's), whose `name` is only
    /// what it calls itself.
    pub user: Option<String>,
    /// Whether it came with a share link.
    pub guest: bool,
    /// `writer` or `viewer`.
    pub role: &'static str,
    /// `desktop`, `tablet`, `phone`, or `null` when the client did not say.
    pub device: Option<&'static str>,
    /// Whether this entry is the receiving client itself.
    pub you: bool,
}

/// The `status` message's fields (docs/protocol.md section 2).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Number of clients connected to the session.
    pub viewers: usize,
    /// PTY width in columns.
    pub cols: u16,
    /// PTY height in rows.
    pub rows: u16,
    /// Display name of the assistant.
    pub assistant: String,
    /// User-assigned session name, empty when unnamed.
    pub session_name: String,
    /// First 5 characters of the session uuid.
    pub uuid_short: String,
    /// The full session uuid.
    #[serde(rename = "sessionUUID")]
    pub session_uuid: String,
    /// The session's working directory.
    pub work_dir: String,
    /// Whether the agent runs its YOLO command now.
    pub yolo_mode: bool,
    /// Whether the assistant has a YOLO command at all.
    pub yolo_supported: bool,
    /// Whether this client may only watch (its own role, so it differs between clients).
    pub read_only: bool,
    /// Whether the agent is being restarted (YOLO toggle); an addition to swe-swe's status.
    pub restarting: bool,
    /// The presence ids of the writers whose window sizes the session (their rows or cols
    /// is the session's); an addition to swe-swe's status.
    pub sized_by: Vec<u32>,
    /// The session's state (working, waiting, idle, exited), since when and why; an addition
    /// to swe-swe's status.
    #[serde(flatten)]
    pub state: StateFields,
}

impl ServerMessage {
    /// The message as one JSON text frame.
    pub fn to_json(&self) -> String {
        // These types always serialise (string keys, no fallible Serialize impls); keep a
        // well-formed frame anyway rather than panicking if that ever changes.
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"type\":\"error\",\"code\":\"internal\",\"message\":{}}}",
                Value::String(e.to_string())
            )
        })
    }

    /// `{"type":"error","code":"bad_message","message":…}`: the reply to a malformed frame.
    pub fn bad_message(msg: impl Into<String>) -> Self {
        Self::error("bad_message", msg)
    }

    /// `{"type":"error","code":…,"message":…}` with any code.
    pub fn error(code: impl Into<String>, message: impl Into<String>) -> Self {
        ServerMessage::Error {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// The frame boundaries of raw terminal output, as byte ranges of the input (see
/// [`output_frame_ranges`]).
#[derive(Debug, Clone)]
pub struct OutputFrameRanges<'a> {
    /// The output being cut.
    data: &'a [u8],
    /// Start of the next frame.
    pos: usize,
}

impl Iterator for OutputFrameRanges<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let rest = self.data.get(self.pos..)?;
        let len = match rest {
            [] => return None,
            // A frame of 3+ bytes starting with 0x02 would be read as a snapshot chunk: send
            // that byte alone (1-2 byte frames are always output) and re-check what follows.
            [SNAPSHOT_CHUNK, _, _, ..] => 1,
            _ => rest.len().min(MAX_OUTPUT_FRAME),
        };
        let start = self.pos;
        self.pos += len;
        Some(start..self.pos)
    }
}

/// Cut raw terminal output into live-output frames without copying: yields ranges of `data`,
/// each non-empty and at most [`MAX_OUTPUT_FRAME`] bytes, none of 3+ bytes starting with 0x02,
/// together covering `data` in order. Suits callers that slice a `Bytes` buffer.
pub fn output_frame_ranges(data: &[u8]) -> OutputFrameRanges<'_> {
    OutputFrameRanges { data, pos: 0 }
}

/// Split raw terminal output into live-output frames: each ≤ MAX_OUTPUT_FRAME bytes, and no frame of
/// 3+ bytes starts with 0x02 (such output is sent with its first byte as a 1-byte frame of its own, and
/// the rest continues in the next frame, re-checking the rule). Appends to `out`.
pub fn push_output_frames(data: &[u8], out: &mut Vec<Vec<u8>>) {
    out.extend(output_frame_ranges(data).filter_map(|r| data.get(r).map(<[u8]>::to_vec)));
}

/// Cut a gzip-compressed snapshot into `[0x02, index, total, payload…]` frames of at most
/// [`MAX_SNAPSHOT_PAYLOAD`] payload bytes each. `None` when that needs more than
/// [`MAX_SNAPSHOT_CHUNKS`] chunks: the caller drops scrollback and compresses again, because
/// chunks never grow. An empty input still gives one (empty) chunk, so `total` is never 0.
pub fn snapshot_frames(gzip: &[u8]) -> Option<Vec<Vec<u8>>> {
    if gzip.is_empty() {
        return Some(vec![vec![SNAPSHOT_CHUNK, 0, 1]]);
    }
    let total = u8::try_from(gzip.len().div_ceil(MAX_SNAPSHOT_PAYLOAD)).ok()?;
    gzip.chunks(MAX_SNAPSHOT_PAYLOAD)
        .enumerate()
        .map(|(index, payload)| {
            let index = u8::try_from(index).ok()?;
            let mut frame = Vec::with_capacity(3 + payload.len());
            frame.extend_from_slice(&[SNAPSHOT_CHUNK, index, total]);
            frame.extend_from_slice(payload);
            Some(frame)
        })
        .collect()
}

/// Client side: the binary resize frame `[0x00, rows_hi, rows_lo, cols_hi, cols_lo]` (for
/// tests, benchmarks and tools that play the browser).
pub fn encode_resize(rows: u16, cols: u16) -> [u8; 5] {
    let [rows_hi, rows_lo] = rows.to_be_bytes();
    let [cols_hi, cols_lo] = cols.to_be_bytes();
    [RESIZE, rows_hi, rows_lo, cols_hi, cols_lo]
}

/// Client side: the binary upload frame `[0x01, name_len_hi, name_len_lo, name…, data…]`.
/// `None` when the name is empty or longer than `u16::MAX` bytes (not expressible).
pub fn encode_upload(name: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    let name_len = u16::try_from(name.len()).ok().filter(|&n| n > 0)?;
    let mut frame = Vec::with_capacity(3 + name.len() + data.len());
    frame.push(UPLOAD);
    frame.extend_from_slice(&name_len.to_be_bytes());
    frame.extend_from_slice(name);
    frame.extend_from_slice(data);
    Some(frame)
}

/// The browser dialect as a [`Dialect`]: what the connection driver calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Swe;

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

impl Dialect for Swe {
    fn decode(&self, message: Inbound) -> Result<ClientMessage, Encoded> {
        match message {
            Inbound::Text(t) => decode_text(&t),
            Inbound::Binary(b) => decode_binary(b),
        }
        .map_err(|e| text(e.reply()))
    }

    fn outcome(&self, outcome: Outcome) -> Option<Encoded> {
        let msg = match outcome {
            Outcome::Done | Outcome::Acked(_) => return None,
            Outcome::Pong(data) => ServerMessage::Pong { data },
            Outcome::Uploaded { filename } => ServerMessage::FileUpload {
                success: true,
                filename,
                error: None,
            },
            Outcome::UploadFailed { filename, error } => ServerMessage::FileUpload {
                success: false,
                filename,
                error: Some(error),
            },
            Outcome::Refused(r) => refusal(&r),
            Outcome::BadName(message) => ServerMessage::error("invalid_name", message),
        };
        Some(text(msg))
    }

    fn notice(&self, notice: Notice<'_>) -> Option<Encoded> {
        let msg = match notice {
            Notice::Ready => ServerMessage::Ready,
            Notice::Status {
                info,
                session,
                role,
            } => status(info, session, role),
            Notice::Exit(info) => ServerMessage::Exit {
                exit_code: info.code,
                signal: info.signal.clone(),
            },
            Notice::Chat(line) => ServerMessage::Chat {
                user_name: line.user_name.clone(),
                guest: line.guest,
                text: line.text.clone(),
                timestamp: line.timestamp.clone(),
            },
            Notice::Presence { info, me } => presence(info, me),
            Notice::Refused(r) => refusal(r),
            Notice::State(s) => ServerMessage::State(StateFields::from(s)),
            Notice::Closing(Closing::TooManyViewers(why)) => {
                ServerMessage::error("too_many_viewers", why)
            }
            Notice::Closing(Closing::CreateFailed(why)) => {
                ServerMessage::error("session_create_failed", why)
            }
            Notice::Closing(Closing::NoSuchSession) => {
                ServerMessage::error("not_found", "Session not found")
            }
            // The close code says it all.
            Notice::Closing(_) => return None,
        };
        Some(text(msg))
    }

    fn output_ranges(data: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> {
        output_frame_ranges(data)
    }

    fn snapshot_form(&self) -> crate::term::snapshot::SnapshotForm {
        crate::term::snapshot::SnapshotForm::gzip(SNAPSHOT_LIMIT)
    }

    fn snapshot(&self, gzip: &[u8]) -> Vec<Vec<u8>> {
        // The session keeps the stream within the form's limit; an empty list would mean a
        // bug there, and the viewer then just goes on with live output.
        snapshot_frames(gzip).unwrap_or_default()
    }

    fn close<'a>(&self, why: Closing<'a>) -> (u16, &'a str) {
        close(why)
    }

    /// The browser client acknowledges what xterm.js has drawn (`ack`).
    fn flow_ack(&self) -> bool {
        true
    }
}

/// People a `presence` message lists at most: a crowd of thousands (a demo watched by many)
/// would otherwise cost every viewer a message the size of the crowd at every change.
pub const PRESENCE_LISTED: usize = 100;

/// The `presence` message for viewer `me`.
fn presence(info: &crate::session::PresenceInfo, me: crate::session::ViewerId) -> ServerMessage {
    let total = info.people.len();
    // The first ones, leaving room for the receiver and the typist wherever they are.
    let mut room = PRESENCE_LISTED.saturating_sub(2);
    let listed = info.people.iter().filter(|p| {
        let always = p.viewer == me || Some(p.viewer) == info.typing;
        let take = always || room > 0;
        if take && !always {
            room -= 1;
        }
        take
    });
    ServerMessage::Presence {
        total,
        viewers: listed
            .map(|p| PresencePerson {
                id: p.num,
                name: p.name.clone(),
                user: p.user.clone(),
                guest: p.user.is_none(),
                role: if p.writer { "writer" } else { "viewer" },
                device: p.device,
                you: p.viewer == me,
            })
            .collect(),
        typing: info
            .typing
            .and_then(|v| info.people.iter().find(|p| p.viewer == v))
            .map(|p| p.num),
    }
}

/// The `status` message for one viewer.
fn status(s: &crate::session::StatusInfo, id: uuid::Uuid, role: Role) -> ServerMessage {
    let uuid = id.to_string();
    ServerMessage::Status(Status {
        viewers: s.viewers,
        cols: s.cols,
        rows: s.rows,
        assistant: s.assistant.clone(),
        session_name: s.session_name.clone(),
        uuid_short: uuid[..5].to_owned(),
        session_uuid: uuid,
        work_dir: s.work_dir.clone(),
        yolo_mode: s.yolo_mode,
        yolo_supported: s.yolo_supported,
        read_only: role == Role::Viewer,
        restarting: s.restarting,
        sized_by: s.sized_by.clone(),
        state: StateFields::from(&s.state),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bin(bytes: &[u8]) -> Result<ClientMessage, DecodeError> {
        decode_binary(Bytes::copy_from_slice(bytes))
    }

    fn input(bytes: &[u8]) -> Result<ClientMessage, DecodeError> {
        Ok(ClientMessage::Input(Bytes::copy_from_slice(bytes)))
    }

    fn is_bad(r: Result<ClientMessage, DecodeError>) -> bool {
        matches!(r, Err(DecodeError::BadMessage(_)))
    }

    fn bad_text(text: &str) -> String {
        match decode_text(text) {
            Err(DecodeError::BadMessage(m)) => m,
            other => panic!("{text}: expected BadMessage, got {other:?}"),
        }
    }

    // ---- binary ------------------------------------------------------------------------

    #[test]
    fn empty_binary_frame_is_bad_message() {
        assert!(is_bad(bin(&[])));
    }

    /// Every length 1..=6 with each interesting first byte. The 0x01 frames carry name_len 1,
    /// so they are valid uploads as soon as the name fits (4 bytes).
    #[test]
    fn binary_rule_boundaries() {
        for len in 1..=6usize {
            // 0x00 with non-zero payload: only exactly 5 bytes is a resize.
            let mut f = vec![0x00, 0x00, 0x18, 0x00, 0x50, 0x07];
            f.truncate(len);
            let expect = if len == 5 {
                Ok(ClientMessage::Resize { rows: 24, cols: 80 })
            } else {
                input(&f)
            };
            assert_eq!(bin(&f), expect, "0x00 len {len}");

            // 0x01 with name_len = 1.
            let mut f = vec![0x01, 0x00, 0x01, b'a', b'x', b'y'];
            f.truncate(len);
            let expect = match len {
                1 | 2 => input(&f),
                3 => Err(DecodeError::InvalidUpload),
                _ => Ok(ClientMessage::Upload {
                    name: b"a".to_vec(),
                    data: Bytes::copy_from_slice(&f[4..]),
                }),
            };
            assert_eq!(bin(&f), expect, "0x01 len {len}");

            // 0x02 (server-only marker) and an ordinary byte: always input from a client.
            for first in [0x02u8, 0x03, b'a', 0x1b, 0xff] {
                let mut f = vec![first, 0x00, 0x01, 0x02, 0x03, 0x04];
                f.truncate(len);
                assert_eq!(bin(&f), input(&f), "{first:#04x} len {len}");
            }
        }
    }

    #[test]
    fn binary_resize_is_big_endian_and_zero_saturates_to_one() {
        assert_eq!(
            bin(&[0x00, 0x01, 0x02, 0x03, 0x04]),
            Ok(ClientMessage::Resize {
                rows: 0x0102,
                cols: 0x0304
            })
        );
        assert_eq!(
            bin(&[0x00, 0, 0, 0, 0]),
            Ok(ClientMessage::Resize { rows: 1, cols: 1 })
        );
        assert_eq!(
            bin(&[0x00, 0, 0, 0, 9]),
            Ok(ClientMessage::Resize { rows: 1, cols: 9 })
        );
        assert_eq!(
            bin(&[0x00, 0xff, 0xff, 0xff, 0xff]),
            Ok(ClientMessage::Resize {
                rows: u16::MAX,
                cols: u16::MAX
            })
        );
        assert_eq!(
            bin(&encode_resize(30, 120)),
            Ok(ClientMessage::Resize {
                rows: 30,
                cols: 120
            })
        );
    }

    #[test]
    fn input_is_passed_unchanged_without_copy() {
        let frame = Bytes::from_static(b"\x1b[A\x00\x01ls\r");
        match decode_binary(frame.clone()) {
            Ok(ClientMessage::Input(b)) => {
                assert_eq!(b, frame);
                assert_eq!(b.as_ptr(), frame.as_ptr());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn upload_name_len_edges() {
        // name_len 0 is never valid, whatever follows.
        assert_eq!(bin(&[0x01, 0, 0]), Err(DecodeError::InvalidUpload));
        assert_eq!(
            bin(&[0x01, 0, 0, b'x', b'y', b'z']),
            Err(DecodeError::InvalidUpload)
        );
        // name exactly fills the frame: an empty file.
        assert_eq!(
            bin(&[0x01, 0, 3, b'a', b'.', b'b']),
            Ok(ClientMessage::Upload {
                name: b"a.b".to_vec(),
                data: Bytes::new()
            })
        );
        // name one byte longer than the frame.
        assert_eq!(
            bin(&[0x01, 0, 4, b'a', b'.', b'b']),
            Err(DecodeError::InvalidUpload)
        );
        // huge name_len on a short frame.
        assert_eq!(
            bin(&[0x01, 0xff, 0xff, b'a', b'b']),
            Err(DecodeError::InvalidUpload)
        );
        // big-endian name_len: 0x0100 = 256 bytes of name.
        let name = vec![b'n'; 256];
        let frame = encode_upload(&name, b"DATA").unwrap();
        assert_eq!(&frame[..3], &[0x01, 0x01, 0x00]);
        assert_eq!(
            bin(&frame),
            Ok(ClientMessage::Upload {
                name,
                data: Bytes::from_static(b"DATA")
            })
        );
        // the name is raw bytes: no UTF-8 check, no sanitising here.
        assert_eq!(
            bin(&[0x01, 0, 2, 0xff, b'/', 0]),
            Ok(ClientMessage::Upload {
                name: vec![0xff, b'/'],
                data: Bytes::from_static(&[0])
            })
        );
        // data that itself starts with control bytes stays intact.
        assert_eq!(
            bin(&encode_upload("é.txt".as_bytes(), &[0x00, 0x01, 0x02]).unwrap()),
            Ok(ClientMessage::Upload {
                name: "é.txt".as_bytes().to_vec(),
                data: Bytes::from_static(&[0x00, 0x01, 0x02])
            })
        );
        assert_eq!(encode_upload(b"", b"x"), None);
        assert_eq!(encode_upload(&vec![b'a'; 65536], b"x"), None);
    }

    #[test]
    fn invalid_upload_reply() {
        assert_eq!(
            DecodeError::InvalidUpload.reply().to_json(),
            r#"{"type":"file_upload","success":false,"filename":"","error":"invalid upload frame"}"#
        );
        assert_eq!(
            DecodeError::BadMessage("nope".into()).reply().to_json(),
            r#"{"type":"error","code":"bad_message","message":"nope"}"#
        );
    }

    // ---- JSON --------------------------------------------------------------------------

    #[test]
    fn json_ping() {
        assert_eq!(
            decode_text(r#"{"type":"ping","data":{"ts":1703318400000}}"#),
            Ok(ClientMessage::Ping {
                data: Some(json!({"ts": 1703318400000u64}))
            })
        );
        assert_eq!(
            decode_text(r#"{"type":"ping"}"#),
            Ok(ClientMessage::Ping { data: None })
        );
        assert_eq!(
            decode_text(r#"{"type":"ping","data":null}"#),
            Ok(ClientMessage::Ping {
                data: Some(Value::Null)
            })
        );
        assert_eq!(
            decode_text(r#"{"type":"ping","data":[1,"two",3.5]}"#),
            Ok(ClientMessage::Ping {
                data: Some(json!([1, "two", 3.5]))
            })
        );
    }

    #[test]
    fn json_ping_data_is_capped() {
        let fits = "x".repeat(MAX_PING_DATA_BYTES - 2);
        assert!(decode_text(&json!({"type": "ping", "data": fits}).to_string()).is_ok());
        let over = "x".repeat(MAX_PING_DATA_BYTES - 1);
        let msg = bad_text(&json!({"type": "ping", "data": over}).to_string());
        assert!(msg.contains("at most 1024 bytes"), "{msg}");
    }

    #[test]
    fn ui_additions_decode() {
        assert_eq!(
            decode_text(r#"{"type":"resize","follow":true}"#),
            Ok(ClientMessage::Follow)
        );
        // Anything but `true` is an ordinary resize, checked as one.
        assert!(decode_text(r#"{"type":"resize","follow":1}"#).is_err());
        assert_eq!(
            decode_text(r#"{"type":"resize","follow":false,"cols":80,"rows":24}"#),
            Ok(ClientMessage::Resize { rows: 24, cols: 80 })
        );
        assert_eq!(
            decode_text(r#"{"type":"resize","cols":120,"rows":30,"control":true}"#),
            Ok(ClientMessage::TakeSize {
                rows: 30,
                cols: 120
            })
        );
        assert!(decode_text(r#"{"type":"resize","control":true}"#).is_err());
        assert_eq!(
            decode_text(r#"{"type":"presence","name":"Alice","device":"phone"}"#),
            Ok(ClientMessage::Presence {
                name: Some("Alice".into()),
                device: Some("phone".into())
            })
        );
        assert_eq!(
            decode_text(r#"{"type":"presence","name":null}"#),
            Ok(ClientMessage::Presence {
                name: None,
                device: None
            })
        );
        for bad in [
            r#"{"type":"presence","name":7}"#,
            r#"{"type":"presence","device":["phone"]}"#,
        ] {
            assert!(
                matches!(decode_text(bad), Err(DecodeError::BadMessage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn presence_encodes_who_is_here_and_who_typed() {
        use crate::session::{Person, PresenceInfo};
        let info = PresenceInfo {
            people: vec![
                Person {
                    viewer: 7,
                    num: 1,
                    name: Some("Alice".into()),
                    user: Some("alice".into()),
                    writer: true,
                    device: Some("desktop"),
                },
                Person {
                    viewer: 9,
                    num: 2,
                    name: None,
                    user: None,
                    writer: false,
                    device: None,
                },
            ],
            typing: Some(7),
        };
        let v: Value = serde_json::from_str(&presence(&info, 9).to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"presence","typing":1,"total":2,"viewers":[
                {"id":1,"name":"Alice","user":"alice","guest":false,"role":"writer",
                 "device":"desktop","you":false},
                {"id":2,"name":null,"user":null,"guest":true,"role":"viewer","device":null,
                 "you":true}
            ]})
        );
    }

    /// A crowd is listed in part, always with the receiver and the typist, and counted whole.
    #[test]
    fn presence_of_a_crowd_lists_a_part_and_counts_all() {
        use crate::session::{Person, PresenceInfo};
        let people: Vec<Person> = (1..=5000u32)
            .map(|n| Person {
                viewer: u64::from(n) + 100,
                num: n,
                name: None,
                user: None,
                writer: false,
                device: None,
            })
            .collect();
        let info = PresenceInfo {
            people,
            typing: Some(4100),
        };
        let v: Value = serde_json::from_str(&presence(&info, 3100).to_json()).unwrap();
        assert_eq!(v["total"], 5000);
        let listed = v["viewers"].as_array().unwrap();
        assert_eq!(listed.len(), PRESENCE_LISTED);
        let ids: Vec<u64> = listed.iter().map(|p| p["id"].as_u64().unwrap()).collect();
        assert!(
            ids.contains(&3000) && ids.contains(&4000) && ids.contains(&1),
            "{ids:?}"
        );
        assert_eq!(listed.iter().filter(|p| p["you"] == true).count(), 1);
        assert_eq!(v["typing"], 4000);
    }

    #[test]
    fn json_resize() {
        assert_eq!(
            decode_text(r#"{"type":"resize","cols":120,"rows":30}"#),
            Ok(ClientMessage::Resize {
                rows: 30,
                cols: 120
            })
        );
        assert_eq!(
            decode_text(r#"{"type":"resize","cols":1,"rows":70000}"#),
            Ok(ClientMessage::Resize {
                rows: u16::MAX,
                cols: 1
            })
        );
        for bad in [
            r#"{"type":"resize","cols":0,"rows":30}"#,
            r#"{"type":"resize","cols":80,"rows":0}"#,
            r#"{"type":"resize","cols":-1,"rows":30}"#,
            r#"{"type":"resize","cols":80.5,"rows":30}"#,
            r#"{"type":"resize","cols":80.0,"rows":30}"#,
            r#"{"type":"resize","cols":"80","rows":30}"#,
            r#"{"type":"resize","cols":80}"#,
            r#"{"type":"resize","rows":30}"#,
            r#"{"type":"resize","cols":null,"rows":30}"#,
            r#"{"type":"resize","cols":1e3,"rows":30}"#,
        ] {
            assert_eq!(
                bad_text(bad),
                "resize needs positive integers cols and rows",
                "{bad}"
            );
        }
        // A number JSON itself cannot hold is a JSON error.
        assert!(
            bad_text(r#"{"type":"resize","cols":1e400,"rows":30}"#).starts_with("invalid JSON: ")
        );
    }

    #[test]
    fn json_chat() {
        assert_eq!(
            decode_text(r#"{"type":"chat","userName":"Alice","text":"Hello everyone!"}"#),
            Ok(ClientMessage::Chat {
                user_name: "Alice".into(),
                text: "Hello everyone!".into()
            })
        );
        // As sent: trimming and length rules are the session's.
        assert_eq!(
            decode_text(r#"{"type":"chat","userName":"  ","text":""}"#),
            Ok(ClientMessage::Chat {
                user_name: "  ".into(),
                text: String::new()
            })
        );
        for bad in [
            r#"{"type":"chat","text":"hi"}"#,
            r#"{"type":"chat","userName":"Alice"}"#,
            r#"{"type":"chat","userName":7,"text":"hi"}"#,
            r#"{"type":"chat","userName":"Alice","text":null}"#,
            r#"{"type":"chat","user_name":"Alice","text":"hi"}"#,
        ] {
            assert_eq!(
                bad_text(bad),
                "chat needs string fields userName and text",
                "{bad}"
            );
        }
    }

    #[test]
    fn json_rename() {
        assert_eq!(
            decode_text(r#"{"type":"rename_session","name":"my-feature"}"#),
            Ok(ClientMessage::Rename {
                name: "my-feature".into()
            })
        );
        assert_eq!(
            decode_text(r#"{"type":"rename_session","name":""}"#),
            Ok(ClientMessage::Rename {
                name: String::new()
            })
        );
        for bad in [
            r#"{"type":"rename_session"}"#,
            r#"{"type":"rename_session","name":3}"#,
            r#"{"type":"rename_session","name":["a"]}"#,
        ] {
            assert_eq!(
                bad_text(bad),
                "rename_session needs a string field name",
                "{bad}"
            );
        }
    }

    #[test]
    fn json_toggle_yolo_and_signal() {
        assert_eq!(
            decode_text(r#"{"type":"toggle_yolo"}"#),
            Ok(ClientMessage::ToggleYolo)
        );
        assert_eq!(
            decode_text(r#"{"type":"toggle_yolo","on":true}"#),
            Ok(ClientMessage::ToggleYolo)
        );
        assert_eq!(
            decode_text(r#"{"type":"signal","signal":"SIGINT"}"#),
            Ok(ClientMessage::Signal {
                signal: "SIGINT".into()
            })
        );
        assert!(bad_text(r#"{"type":"signal"}"#).starts_with("signal needs a string field signal"));
        assert!(bad_text(r#"{"type":"signal","signal":2}"#).starts_with("signal needs"));
    }

    #[test]
    fn json_ack() {
        assert_eq!(
            decode_text(r#"{"type":"ack","bytes":262144}"#),
            Ok(ClientMessage::Ack { bytes: 262144 })
        );
        assert_eq!(
            decode_text(r#"{"type":"ack","bytes":0}"#),
            Ok(ClientMessage::Ack { bytes: 0 })
        );
        assert_eq!(
            decode_text(r#"{"type":"ack","bytes":18446744073709551615}"#),
            Ok(ClientMessage::Ack { bytes: u64::MAX })
        );
        for bad in [
            r#"{"type":"ack"}"#,
            r#"{"type":"ack","bytes":-1}"#,
            r#"{"type":"ack","bytes":1.5}"#,
            r#"{"type":"ack","bytes":"10"}"#,
            r#"{"type":"ack","bytes":18446744073709551616}"#,
        ] {
            assert_eq!(
                bad_text(bad),
                "ack needs a non-negative integer field bytes",
                "{bad}"
            );
        }
    }

    #[test]
    fn json_envelope_errors() {
        assert!(bad_text("").starts_with("invalid JSON: "));
        assert!(bad_text("{").starts_with("invalid JSON: "));
        assert!(bad_text("{\"type\":\"ping\"} x").starts_with("invalid JSON: "));
        assert!(bad_text("ping").starts_with("invalid JSON: "));
        for not_object in [
            "[]",
            "\"ping\"",
            "42",
            "null",
            "true",
            r#"[{"type":"ping"}]"#,
        ] {
            assert_eq!(
                bad_text(not_object),
                "expected a JSON object with a \"type\" field",
                "{not_object}"
            );
        }
        assert_eq!(bad_text(r#"{"data":1}"#), "missing \"type\" field");
        assert_eq!(
            bad_text(r#"{"type":1}"#),
            "the \"type\" field must be a string"
        );
        assert_eq!(
            bad_text(r#"{"type":null}"#),
            "the \"type\" field must be a string"
        );
        assert_eq!(
            bad_text(r#"{"type":"foo"}"#),
            r#"unknown message type "foo""#
        );
        assert_eq!(
            bad_text(r#"{"type":"PING"}"#),
            r#"unknown message type "PING""#
        );
        assert_eq!(
            bad_text(r#"{"type":"a\nb"}"#),
            r#"unknown message type "a\nb""#
        );
        let long = format!(r#"{{"type":"{}"}}"#, "x".repeat(10_000));
        let msg = bad_text(&long);
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.ends_with("…\""), "{msg}");
    }

    #[test]
    fn json_extra_fields_are_ignored() {
        assert_eq!(
            decode_text(r#"{"type":"resize","cols":80,"rows":24,"dpr":2,"extra":{"a":[1]}}"#),
            Ok(ClientMessage::Resize { rows: 24, cols: 80 })
        );
    }

    #[test]
    fn deeply_nested_json_is_an_error_not_a_crash() {
        let deep = format!(
            r#"{{"type":"ping","data":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(bad_text(&deep).starts_with("invalid JSON: "));
    }

    // ---- server messages ---------------------------------------------------------------

    #[test]
    fn server_message_json_is_exact() {
        let cases: Vec<(ServerMessage, &str)> = vec![
            (
                ServerMessage::Pong {
                    data: Some(json!({"ts": 1703318400000u64})),
                },
                r#"{"type":"pong","data":{"ts":1703318400000}}"#,
            ),
            (ServerMessage::Pong { data: None }, r#"{"type":"pong"}"#),
            (
                ServerMessage::Pong {
                    data: Some(Value::Null),
                },
                r#"{"type":"pong","data":null}"#,
            ),
            (
                ServerMessage::Status(Status {
                    viewers: 2,
                    cols: 120,
                    rows: 30,
                    assistant: "Claude".into(),
                    session_name: "my-feature".into(),
                    uuid_short: "a3c12".into(),
                    session_uuid: "a3c12f00-0000-4000-8000-000000000000".into(),
                    work_dir: "/home/me/src".into(),
                    yolo_mode: false,
                    yolo_supported: true,
                    read_only: false,
                    restarting: false,
                    sized_by: vec![1, 3],
                    state: StateFields {
                        state: crate::attention::State::Waiting,
                        state_since: "2026-11-25T09:14:03Z".into(),
                        state_since_ms: 1_795_770_843_000,
                        reason: "Claude wants to run: cargo test".into(),
                        state_source: crate::attention::Source::Hook,
                        choices: vec![crate::attention::Choice {
                            label: "Yes".into(),
                            keys: "1".into(),
                        }],
                    },
                }),
                concat!(
                    r#"{"type":"status","viewers":2,"cols":120,"rows":30,"assistant":"Claude","#,
                    r#""sessionName":"my-feature","uuidShort":"a3c12","#,
                    r#""sessionUUID":"a3c12f00-0000-4000-8000-000000000000","#,
                    r#""workDir":"/home/me/src","yoloMode":false,"yoloSupported":true,"readOnly":false,"#,
                    r#""restarting":false,"sizedBy":[1,3],"state":"waiting","stateSince":"2026-11-25T09:14:03Z","#,
                    r#""stateSinceMs":1795770843000,"reason":"Claude wants to run: cargo test","#,
                    r#""stateSource":"hook","choices":[{"label":"Yes","keys":"1"}]}"#
                ),
            ),
            (
                ServerMessage::State(StateFields {
                    state: crate::attention::State::Idle,
                    state_since: "2026-11-25T09:15:00Z".into(),
                    state_since_ms: 1_795_770_900_000,
                    reason: "quiet for 3 s at a shell prompt".into(),
                    state_source: crate::attention::Source::Terminal,
                    choices: vec![],
                }),
                concat!(
                    r#"{"type":"state","state":"idle","stateSince":"2026-11-25T09:15:00Z","#,
                    r#""stateSinceMs":1795770900000,"reason":"quiet for 3 s at a shell prompt","#,
                    r#""stateSource":"terminal","choices":[]}"#
                ),
            ),
            (
                ServerMessage::Chat {
                    user_name: "Alice".into(),
                    guest: true,
                    text: "Hello \"everyone\"!".into(),
                    timestamp: "2025-12-24T16:03:13Z".into(),
                },
                r#"{"type":"chat","userName":"Alice","guest":true,"text":"Hello \"everyone\"!","timestamp":"2025-12-24T16:03:13Z"}"#,
            ),
            (
                ServerMessage::FileUpload {
                    success: true,
                    filename: "document.pdf".into(),
                    error: None,
                },
                r#"{"type":"file_upload","success":true,"filename":"document.pdf","error":null}"#,
            ),
            (
                ServerMessage::FileUpload {
                    success: false,
                    filename: "document.pdf".into(),
                    error: Some("Failed to save file: permission denied".into()),
                },
                r#"{"type":"file_upload","success":false,"filename":"document.pdf","error":"Failed to save file: permission denied"}"#,
            ),
            (
                ServerMessage::Exit {
                    exit_code: 0,
                    signal: None,
                },
                r#"{"type":"exit","exitCode":0,"signal":null}"#,
            ),
            (
                ServerMessage::Exit {
                    exit_code: 137,
                    signal: Some("SIGKILL".into()),
                },
                r#"{"type":"exit","exitCode":137,"signal":"SIGKILL"}"#,
            ),
            (ServerMessage::Ready, r#"{"type":"ready"}"#),
            (
                ServerMessage::error("session_create_failed", "unknown assistant \"x\""),
                r#"{"type":"error","code":"session_create_failed","message":"unknown assistant \"x\""}"#,
            ),
            (
                ServerMessage::bad_message("unknown message type \"foo\""),
                r#"{"type":"error","code":"bad_message","message":"unknown message type \"foo\""}"#,
            ),
        ];
        for (msg, want) in cases {
            assert_eq!(msg.to_json(), want);
        }
    }

    // ---- output framing ----------------------------------------------------------------

    fn frames(data: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        push_output_frames(data, &mut out);
        out
    }

    /// The invariants every output framing must keep.
    fn check_frames(data: &[u8], out: &[Vec<u8>]) {
        assert_eq!(out.concat(), data, "frames must cover the data in order");
        for f in out {
            assert!(!f.is_empty());
            assert!(f.len() <= MAX_OUTPUT_FRAME, "frame of {} bytes", f.len());
            assert!(
                !(f.len() >= 3 && f[0] == 0x02),
                "frame reads as a snapshot chunk"
            );
        }
    }

    #[test]
    fn output_empty_gives_no_frames() {
        assert!(frames(b"").is_empty());
        let mut out = vec![b"kept".to_vec()];
        push_output_frames(b"ab", &mut out);
        assert_eq!(out, vec![b"kept".to_vec(), b"ab".to_vec()], "appends");
    }

    #[test]
    fn output_8192_and_8193() {
        let d = vec![b'x'; 8192];
        assert_eq!(frames(&d), vec![d.clone()]);
        let d = vec![b'x'; 8193];
        let f = frames(&d);
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), vec![8192, 1]);
        check_frames(&d, &f);
        let d = vec![b'x'; 3 * 8192 + 5];
        let f = frames(&d);
        assert_eq!(
            f.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![8192, 8192, 8192, 5]
        );
    }

    #[test]
    fn output_0x02_rule() {
        // 1 and 2 byte frames starting with 0x02 are output, not chunks.
        assert_eq!(frames(&[0x02]), vec![vec![0x02]]);
        assert_eq!(frames(&[0x02, b'a']), vec![vec![0x02, b'a']]);
        // 3+ bytes: the 0x02 goes alone.
        assert_eq!(
            frames(&[0x02, b'a', b'b']),
            vec![vec![0x02], vec![b'a', b'b']]
        );
        // 0x02 not first is harmless.
        assert_eq!(frames(b"a\x02bc"), vec![b"a\x02bc".to_vec()]);
        // many 0x02 bytes: each alone until two remain.
        let d = vec![0x02; 5];
        assert_eq!(
            frames(&d),
            vec![vec![0x02], vec![0x02], vec![0x02], vec![0x02, 0x02]]
        );
        let d = vec![0x02; 20_000];
        let f = frames(&d);
        check_frames(&d, &f);
        assert_eq!(f.len(), 19_999);
        // 0x02 landing at the start of the second 8 KiB frame.
        let mut d = vec![b'x'; 8192];
        d.extend_from_slice(&[0x02, b'y', b'z', b'w']);
        let f = frames(&d);
        check_frames(&d, &f);
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), vec![8192, 1, 3]);
        // ...and with exactly two bytes after the boundary, no split is needed.
        let mut d = vec![b'x'; 8192];
        d.extend_from_slice(&[0x02, b'y']);
        assert_eq!(
            frames(&d).iter().map(Vec::len).collect::<Vec<_>>(),
            vec![8192, 2]
        );
        // 0x02 first, followed by a long run: 1 byte, then full frames.
        let mut d = vec![0x02];
        d.extend(vec![b'x'; 10_000]);
        let f = frames(&d);
        check_frames(&d, &f);
        assert_eq!(
            f.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 8192, 1808]
        );
    }

    #[test]
    fn output_ranges_match_frames() {
        let d = b"\x02\x02abc".repeat(3000);
        let from_ranges: Vec<Vec<u8>> = output_frame_ranges(&d).map(|r| d[r].to_vec()).collect();
        assert_eq!(from_ranges, frames(&d));
    }

    #[test]
    fn snapshot_chunking() {
        assert_eq!(snapshot_frames(b""), Some(vec![vec![0x02, 0, 1]]));
        assert_eq!(
            snapshot_frames(b"gz"),
            Some(vec![vec![0x02, 0, 1, b'g', b'z']])
        );
        let d = vec![7u8; 8192];
        let f = snapshot_frames(&d).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(&f[0][..3], &[0x02, 0, 1]);
        let d = vec![7u8; 8193];
        let f = snapshot_frames(&d).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(&f[1][..], &[0x02, 1, 2, 7]);
        let d = vec![7u8; 255 * 8192];
        let f = snapshot_frames(&d).unwrap();
        assert_eq!(f.len(), 255);
        assert!(f.iter().all(|c| c.len() == 3 + 8192));
        assert_eq!(&f[254][..3], &[0x02, 254, 255]);
        assert_eq!(snapshot_frames(&vec![7u8; 255 * 8192 + 1]), None);
    }

    // ---- never panic -------------------------------------------------------------------

    /// xorshift64*: deterministic, dependency-free randomness for the fuzz loops.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn bytes(&mut self, max_len: usize) -> Vec<u8> {
            let len = self.below(max_len + 1);
            // Bias towards the bytes the rules care about.
            (0..len)
                .map(|_| match self.below(4) {
                    0 => self.below(3) as u8,
                    _ => self.next() as u8,
                })
                .collect()
        }
    }

    #[test]
    fn random_frames_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"type\"",
            "\"ping\"",
            "\"resize\"",
            "\"chat\"",
            "\"ack\"",
            "\"signal\"",
            "\"rename_session\"",
            "\"toggle_yolo\"",
            "\"cols\"",
            "\"rows\"",
            "\"bytes\"",
            "\"data\"",
            "\"userName\"",
            "\"text\"",
            "\"name\"",
            "0",
            "-1",
            "1e999",
            "65536",
            "3.5",
            "null",
            "true",
            "\"\\u0000\"",
            "\"é\"",
            "\\",
        ];
        for _ in 0..20_000 {
            let frame = rng.bytes(40);
            let _ = decode_binary(Bytes::from(frame.clone()));
            let _ = decode_text(&String::from_utf8_lossy(&frame));
            let mut out = Vec::new();
            push_output_frames(&frame, &mut out);
            check_frames(&frame, &out);

            let n = rng.below(12);
            let text: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
            let _ = decode_text(&text);
            let _ = decode_text(&format!("{{\"type\":{text}}}"));
        }
        // Structured: a known type with random field values must decode or be BadMessage.
        let types = [
            "ping",
            "resize",
            "chat",
            "rename_session",
            "toggle_yolo",
            "ack",
            "signal",
        ];
        let fields = [
            "cols", "rows", "bytes", "data", "userName", "text", "name", "signal",
        ];
        for _ in 0..20_000 {
            let mut obj = Map::new();
            obj.insert(
                "type".into(),
                Value::String(types[rng.below(types.len())].into()),
            );
            for _ in 0..rng.below(4) {
                let v = match rng.below(5) {
                    0 => json!(rng.next() as i64),
                    1 => json!(rng.below(100)),
                    2 => json!(rng.next() as f64 / 7.0),
                    3 => json!(String::from_utf8_lossy(&rng.bytes(8))),
                    _ => Value::Null,
                };
                obj.insert(fields[rng.below(fields.len())].into(), v);
            }
            match decode_text(&Value::Object(obj).to_string()) {
                Ok(_) | Err(DecodeError::BadMessage(_)) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }

    // ---- as a Dialect ------------------------------------------------------------------

    fn json_of(o: Option<Encoded>) -> Value {
        match o.map(|e| e.message) {
            Some(Outbound::Text(t)) => serde_json::from_str(&t).expect("json"),
            other => panic!("expected a text message, got {other:?}"),
        }
    }

    #[test]
    fn dialect_decodes_and_explains() {
        let d = Swe;
        assert_eq!(
            d.decode(Inbound::Binary(Bytes::from_static(b"ls\r"))),
            Ok(ClientMessage::Input(Bytes::from_static(b"ls\r")))
        );
        let reply = d.decode(Inbound::Text("{".into())).expect_err("bad JSON");
        assert_eq!(json_of(Some(reply))["code"], "bad_message");
    }

    #[test]
    fn dialect_encodes_outcomes_and_notices_as_before() {
        let d = Swe;
        assert_eq!(d.outcome(Outcome::Done), None);
        assert_eq!(d.outcome(Outcome::Acked(5)), None);
        assert_eq!(
            json_of(d.outcome(Outcome::Pong(Some(json!(1))))),
            json!({"type": "pong", "data": 1})
        );
        assert_eq!(
            json_of(d.outcome(Outcome::UploadFailed {
                filename: "a".into(),
                error: "no".into()
            })),
            json!({"type": "file_upload", "success": false, "filename": "a", "error": "no"})
        );
        let refused = crate::session::Refusal::ReadOnly(crate::session::Action::Rename);
        assert_eq!(
            json_of(d.notice(Notice::Refused(&refused))),
            json!({"type": "error", "code": "read_only", "message": "this link is read-only: rename ignored"})
        );
        assert_eq!(json_of(d.notice(Notice::Ready)), json!({"type": "ready"}));
        assert_eq!(
            d.close(Closing::Ended(crate::session::EndReason::Shutdown)),
            (1001, "ptyhub is shutting down")
        );
    }

    #[test]
    fn errors_carry_their_code_to_count_and_closings_their_words() {
        let d = Swe;
        let bad = d.decode(Inbound::Text("{".into())).expect_err("bad JSON");
        assert_eq!(bad.error.as_deref(), Some("bad_message"));
        assert_eq!(d.notice(Notice::Ready).and_then(|e| e.error), None);
        let full = d.notice(Notice::Closing(Closing::TooManyViewers("full")));
        assert_eq!(json_of(full)["code"], "too_many_viewers");
        assert_eq!(d.notice(Notice::Closing(Closing::ScreenFailed)), None);
        assert_eq!(d.close(Closing::CreateFailed("no such assistant")).0, 4002);
        assert_eq!(d.close(Closing::NoSuchSession), (4004, "session not found"));
        assert!(d.flow_ack());
    }
}
