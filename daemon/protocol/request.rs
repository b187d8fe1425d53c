//! What a client of any dialect can ask, in domain words, and what it came to: each codec
//! decodes its frames into a [`Request`] and encodes the [`Outcome`]. The driver applies the
//! one to its session and gets the other (`crate::viewer::apply`).

use bytes::Bytes;
use serde_json::Value;

use crate::session::Refusal;

/// One decoded client request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Keystrokes or other raw input, to be written to the PTY unchanged.
    Input(Bytes),
    /// The client's terminal size. Values above `u16::MAX` saturate and a binary 0 becomes 1;
    /// clamping to the session limits is the size policy's job.
    Resize {
        /// Terminal height in rows, at least 1.
        rows: u16,
        /// Terminal width in columns, at least 1.
        cols: u16,
    },
    /// The client's name (its chat name; empty clears it) and device kind, each only when
    /// sent, for the others' viewer lists.
    Presence {
        /// The name as sent; the session checks it.
        name: Option<String>,
        /// `desktop`, `tablet` or `phone`; anything else is unknown.
        device: Option<String>,
    },
    /// The client's size stops counting in the size policy: it follows the session's size
    /// (scaled or scrolled on its side) until it sends a size again.
    Follow,
    /// "Take control of the size": the session takes this client's size, and every other
    /// viewer follows it until that viewer sends a size of its own again.
    TakeSize {
        /// Terminal height in rows, at least 1.
        rows: u16,
        /// Terminal width in columns, at least 1.
        cols: u16,
    },
    /// A file upload. Nothing is checked beyond the framing.
    Upload {
        /// The file name exactly as sent (raw bytes, UTF-8 by contract but unchecked); the
        /// upload module sanitises it.
        name: Vec<u8>,
        /// The file contents (may be empty).
        data: Bytes,
    },
    /// Heartbeat: answered with [`Outcome::Pong`] carrying the same `data`.
    Ping {
        /// Whatever JSON the client sent in `data` (`Some(Value::Null)` for an explicit
        /// `null`), `None` when the field was absent.
        data: Option<Value>,
    },
    /// A chat line, as sent: the session checks the length rules (they are config limits).
    Chat {
        /// The sender's display name.
        user_name: String,
        /// The message text.
        text: String,
    },
    /// A new session name as sent; the session validates it.
    Rename {
        /// The requested name; empty (after trimming) clears it.
        name: String,
    },
    /// Restart the agent with or without its YOLO command.
    ToggleYolo,
    /// Flow control: the client's terminal has drawn this many more bytes.
    Ack {
        /// Bytes drawn since the previous ack.
        bytes: u64,
    },
    /// Send a signal to the session's foreground process group; the session checks the name.
    Signal {
        /// The signal name as sent, e.g. `"SIGINT"`.
        signal: String,
    },
}

/// What a request came to, for the requesting client alone; the dialect encodes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing to tell this client (its effect reaches everyone as session events).
    Done,
    /// The answer to a ping.
    Pong(Option<Value>),
    /// The client has drawn this many more bytes (for the connection's flow control).
    Acked(u64),
    /// A file was saved (and its path typed for the program).
    Uploaded {
        /// The name it was saved under.
        filename: String,
    },
    /// A file was not saved.
    UploadFailed {
        /// The name asked for, lossily decoded and shortened for display.
        filename: String,
        /// Why, for people.
        error: String,
    },
    /// The viewer's role or the session's state refused it.
    Refused(Refusal),
    /// A rename's name broke the rule; says how.
    BadName(String),
}

/// Longest file name echoed back in an upload's outcome, bytes.
const MAX_ECHOED_NAME: usize = 255;

/// A file name as an upload's outcome shows it back: shortened, lossily decoded.
pub fn echoed_name(name: &[u8]) -> String {
    let shown = &name[..name.len().min(MAX_ECHOED_NAME)];
    String::from_utf8_lossy(shown).into_owned()
}
