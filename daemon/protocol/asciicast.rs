//! asciicast v2, the recording format of asciinema and its player: a JSON header line, then
//! one JSON array per event (`[time, code, data]`). A pure codec: no I/O, no clock.
//!
//! Terminal output is bytes; an event's data is a JSON string. [`Utf8Carry`] turns a stream of
//! byte chunks into strings without ever cutting a character in two: an incomplete character
//! at the end of a chunk waits for the next one. Bytes that are not UTF-8 at all become
//! U+FFFD, as every terminal shows them.

use serde::{Deserialize, Serialize};

/// The media type of a `.cast` file.
pub const MEDIA_TYPE: &str = "application/x-asciicast";

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always 2.
    pub version: u32,
    /// Columns at the start.
    pub width: u16,
    /// Rows at the start.
    pub height: u16,
    /// Start, in seconds since the Unix epoch.
    pub timestamp: u64,
    /// The session's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `TERM` and `SHELL` of the recorded program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Env>,
}

/// The header's `env`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub struct Env {
    /// The terminal type the program saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<String>,
    /// The user's shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
}

/// What an event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Output (`o`).
    Output,
    /// Input (`i`).
    Input,
    /// A size change (`r`), data `COLSxROWS`.
    Resize,
    /// A marker (`m`), data a label.
    Marker,
}

impl Code {
    /// The one-letter code on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Output => "o",
            Code::Input => "i",
            Code::Resize => "r",
            Code::Marker => "m",
        }
    }

    /// The code a letter names.
    pub fn parse(s: &str) -> Option<Code> {
        Some(match s {
            "o" => Code::Output,
            "i" => Code::Input,
            "r" => Code::Resize,
            "m" => Code::Marker,
            _ => return None,
        })
    }
}

/// One event as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the start.
    pub time: f64,
    /// What it is.
    pub code: Code,
    /// Its data.
    pub data: String,
}

/// A line that is not an asciicast v2 header or event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not asciicast v2: {0}")]
pub struct Malformed(pub String);

/// Appends the header line (with its newline).
pub fn write_header(out: &mut Vec<u8>, header: &Header) {
    // A struct of strings and integers always serialises.
    if serde_json::to_writer(&mut *out, header).is_ok() {
        out.push(b'\n');
    }
}

/// Appends one event line: `[time, code, data]` with the time in seconds, to the microsecond.
pub fn write_event(out: &mut Vec<u8>, time: f64, code: Code, data: &str) {
    let time = if time.is_finite() && time > 0.0 {
        time
    } else {
        0.0
    };
    out.push(b'[');
    // Microseconds, as asciinema writes them; whole numbers keep a decimal point.
    out.extend_from_slice(format!("{time:.6}").as_bytes());
    out.extend_from_slice(b", \"");
    out.extend_from_slice(code.as_str().as_bytes());
    out.extend_from_slice(b"\", ");
    // Serialising a &str cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"]\n");
}

/// The data of a resize event.
pub fn resize_data(cols: u16, rows: u16) -> String {
    format!("{cols}x{rows}")
}

/// Reads a header line.
pub fn parse_header(line: &str) -> Result<Header, Malformed> {
    let header: Header =
        serde_json::from_str(line).map_err(|e| Malformed(format!("header: {e}")))?;
    if header.version != 2 {
        return Err(Malformed(format!("version {}", header.version)));
    }
    Ok(header)
}

/// Reads an event line.
pub fn parse_event(line: &str) -> Result<Event, Malformed> {
    let (time, code, data): (f64, String, String) =
        serde_json::from_str(line).map_err(|e| Malformed(format!("event: {e}")))?;
    let code = Code::parse(&code).ok_or_else(|| Malformed(format!("event code {code:?}")))?;
    if !time.is_finite() || time < 0.0 {
        return Err(Malformed(format!("event time {time}")));
    }
    Ok(Event { time, code, data })
}

/// The time of the last whole event line in `tail` (the end of a recording), if any.
pub fn last_time(tail: &[u8]) -> Option<f64> {
    tail.split(|&b| b == b'\n')
        .rev()
        .filter_map(|line| std::str::from_utf8(line).ok())
        .find_map(|line| parse_event(line).ok())
        .map(|event| event.time)
}

/// Turns byte chunks into text without splitting a character: an incomplete UTF-8 sequence at
/// the end of a chunk is held (at most 3 bytes) and completed by the next.
#[derive(Debug, Default, Clone)]
pub struct Utf8Carry {
    held: Vec<u8>,
}

impl Utf8Carry {
    /// The text of `bytes` after what was held, up to (not including) an incomplete character
    /// at its end, which is held. Empty when everything was held.
    pub fn feed(&mut self, bytes: &[u8]) -> String {
        self.feed_owned(bytes.to_vec())
    }

    /// [`Utf8Carry::feed`] taking the bytes by value: valid UTF-8 becomes the text without a
    /// copy.
    pub fn feed_owned(&mut self, mut bytes: Vec<u8>) -> String {
        if !self.held.is_empty() {
            let mut all = std::mem::take(&mut self.held);
            all.extend_from_slice(&bytes);
            bytes = all;
        }
        // Whole characters, the usual case, are validated once and kept as they are.
        let mut bytes = match String::from_utf8(bytes) {
            Ok(text) => return text,
            Err(e) => e.into_bytes(),
        };
        let cut = complete_len(&bytes);
        self.held = bytes.split_off(cut);
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// What is still held, as text (an incomplete character is shown as U+FFFD): for the end.
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        String::from_utf8_lossy(&held).into_owned()
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// How many leading bytes of `bytes` end at a character boundary: all but an incomplete (yet
/// possibly valid) UTF-8 sequence at the end.
fn complete_len(bytes: &[u8]) -> usize {
    let mut rest = bytes;
    let mut done = 0;
    loop {
        match std::str::from_utf8(rest) {
            Ok(_) => return bytes.len(),
            Err(e) => match e.error_len() {
                // Invalid bytes: they stay (shown as U+FFFD); look past them.
                Some(bad) => {
                    let skip = e.valid_up_to() + bad;
                    done += skip;
                    rest = &rest[skip..];
                }
                // The input ends inside a character.
                None => return done + e.valid_up_to(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_events_round_trip() {
        let header = Header {
            version: 2,
            width: 80,
            height: 24,
            timestamp: 1_700_000_000,
            title: Some("build \"x\"".into()),
            env: Some(Env {
                term: Some("xterm-256color".into()),
                shell: Some("/bin/bash".into()),
            }),
        };
        let mut out = Vec::new();
        write_header(&mut out, &header);
        write_event(&mut out, 0.0, Code::Output, "a\u{1b}[0m\r\n\"é\"");
        write_event(&mut out, 1.5, Code::Resize, &resize_data(100, 30));
        write_event(&mut out, f64::NAN, Code::Marker, "Ann: hi");
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("\"TERM\":\"xterm-256color\""),
            "{}",
            lines[0]
        );
        assert_eq!(parse_header(lines[0]).unwrap(), header);
        assert_eq!(lines[1], r#"[0.000000, "o", "a\u001b[0m\r\n\"é\""]"#);
        let r = parse_event(lines[2]).unwrap();
        assert_eq!(
            (r.time, r.code, r.data.as_str()),
            (1.5, Code::Resize, "100x30")
        );
        assert_eq!(parse_event(lines[3]).unwrap().time, 0.0);
        assert!(parse_event(r#"[1, "x", ""]"#).is_err());
        assert!(parse_event(r#"[-1, "o", ""]"#).is_err());
        assert!(parse_header(r#"{"version":1,"width":1,"height":1,"timestamp":0}"#).is_err());
    }

    #[test]
    fn a_character_split_between_chunks_is_held_until_complete() {
        let mut carry = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(carry.feed(&[b'a', euro[0]]), "a");
        assert_eq!(carry.held(), 1);
        assert_eq!(carry.feed(&euro[1..2]), "");
        assert_eq!(carry.feed(&[euro[2], b'b']), "€b");
        assert_eq!(carry.held(), 0);
        // Invalid bytes are not held: they are shown, and what follows them is not delayed.
        assert_eq!(carry.feed(&[0xff, b'c', 0xe2]), "\u{fffd}c");
        assert_eq!(carry.finish(), "\u{fffd}");
        assert_eq!(carry.finish(), "");
    }
}
