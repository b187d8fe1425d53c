//! The framing of a language server bridge, as a pure codec: the LSP base protocol on the
//! server's stdio (`Content-Length: N\r\n\r\n` then N bytes of JSON) against one JSON-RPC
//! message per WebSocket text frame on the client's side (the convention of vscode-ws-jsonrpc,
//! which monaco-languageclient uses). Both ways are bounded: a message longer than the bound
//! is an error, never buffered.
//!
//! No I/O, no clock, no counter: a malformed or oversized message is an error value.

use bytes::BytesMut;

use crate::protocol::Inbound;

/// Longest header section a server may send before its body, bytes: the base protocol's two
/// headers take under a hundred.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// What the server's stdout broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The headers did not end within [`MAX_HEADER_BYTES`].
    #[error("a header section longer than {MAX_HEADER_BYTES} bytes")]
    HeaderTooLong,
    /// A header section without `Content-Length`.
    #[error("a message without Content-Length")]
    NoLength,
    /// A header line that is not `Name: value` in ASCII, or a length that is not a number.
    #[error("a malformed header {0:?}")]
    BadHeader(String),
    /// A message longer than the bound.
    #[error("a message of {len} bytes, over the bound of {max}")]
    TooLarge {
        /// Its `Content-Length`.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A body that is not UTF-8, which a text frame cannot carry.
    #[error("a message that is not UTF-8")]
    NotUtf8,
}

/// Reads the base protocol from a server's stdout, as pieces of it arrive. Holds at most one
/// header section and one body (the bound) besides the piece last fed.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    /// The current message's body length, once its headers are read.
    body: Option<usize>,
    max: usize,
}

impl Decoder {
    /// A decoder of messages of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Decoder {
            buf: BytesMut::new(),
            body: None,
            max,
        }
    }

    /// Adds the next bytes the server wrote.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held, not yet given out as messages.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, `None` until one has arrived. After an error the stream
    /// cannot be resynchronised: the caller ends the server.
    pub fn next_message(&mut self) -> Result<Option<String>, FramingError> {
        let len = match self.body {
            Some(len) => len,
            None => {
                let Some((head, len)) = self.header()? else {
                    return Ok(None);
                };
                let _ = self.buf.split_to(head);
                self.body = Some(len);
                len
            }
        };
        if self.buf.len() < len {
            // The whole body will be held: take its room at once, not by doublings.
            self.buf.reserve(len - self.buf.len());
            return Ok(None);
        }
        self.body = None;
        let body = self.buf.split_to(len);
        String::from_utf8(body.to_vec())
            .map(Some)
            .map_err(|_| FramingError::NotUtf8)
    }

    /// The length of the header section and the body's, once the section has all arrived.
    fn header(&self) -> Result<Option<(usize, usize)>, FramingError> {
        let window = &self.buf[..self.buf.len().min(MAX_HEADER_BYTES + 4)];
        let Some(end) = window.windows(4).position(|w| w == b"\r\n\r\n") else {
            return if self.buf.len() > MAX_HEADER_BYTES {
                Err(FramingError::HeaderTooLong)
            } else {
                Ok(None)
            };
        };
        let text = std::str::from_utf8(&window[..end])
            .map_err(|_| FramingError::BadHeader("not ASCII".to_owned()))?;
        let mut len = None;
        for line in text.split("\r\n") {
            let bad = || FramingError::BadHeader(line.chars().take(80).collect());
            let (name, value) = line.split_once(':').ok_or_else(bad)?;
            if name.eq_ignore_ascii_case("content-length") {
                let value = value.trim();
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                // More digits than a usize holds is over any bound.
                let n = value.parse::<usize>().unwrap_or(usize::MAX);
                len = Some(n);
            }
        }
        let len = len.ok_or(FramingError::NoLength)?;
        if len > self.max {
            return Err(FramingError::TooLarge { len, max: self.max });
        }
        Ok(Some((end + 4, len)))
    }
}

/// The base protocol's header for a body of `len` bytes.
pub fn header(len: usize) -> String {
    format!("Content-Length: {len}\r\n\r\n")
}

/// A client's message the bridge does not pass on, answered with a JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The JSON-RPC error code: -32700 (parse error) or -32600 (invalid request).
    pub code: i32,
    /// Why, for people.
    pub message: String,
}

impl Rejected {
    /// The JSON-RPC error response (`id` null: the request's id could not be read) that
    /// answers it.
    pub fn reply(&self) -> String {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": self.code, "message": self.message},
        })
        .to_string()
    }
}

/// The body of a client's message, if it is one: a text frame holding a JSON object (a
/// message) or array (a batch).
pub fn client_message(message: Inbound) -> Result<String, Rejected> {
    let text = match message {
        Inbound::Text(text) => text,
        Inbound::Binary(_) => {
            return Err(Rejected {
                code: -32600,
                message: "send each JSON-RPC message as a text frame".to_owned(),
            })
        }
    };
    let first = text.bytes().find(|b| !b.is_ascii_whitespace());
    if !matches!(first, Some(b'{' | b'[')) {
        return Err(Rejected {
            code: -32600,
            message: "a JSON-RPC message is a JSON object (or an array of them)".to_owned(),
        });
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
        Ok(_) => Ok(text),
        Err(e) => Err(Rejected {
            code: -32700,
            message: format!("parse error: {e}"),
        }),
    }
}

/// A `window/showMessage` notification of an error: the one message a client shows before
/// `initialize` is answered (used when the server could not start).
pub fn show_error(text: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "window/showMessage",
        "params": {"type": 1, "message": text},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(body: &str) -> Vec<u8> {
        let mut out = header(body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }

    #[test]
    fn messages_come_out_whole_whatever_the_pieces() {
        let mut all = framed(r#"{"a":1}"#);
        all.extend(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n");
        all.extend(framed(r#"{"b":"\u00e9"}"#));
        for cut in 0..all.len() {
            let mut d = Decoder::new(100);
            let mut got = Vec::new();
            for piece in [&all[..cut], &all[cut..]] {
                d.feed(piece);
                while let Some(m) = d.next_message().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, [r#"{"a":1}"#, r#"{"b":"\u00e9"}"#], "cut at {cut}");
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn bad_streams_are_errors() {
        let err = |bytes: &[u8], max| {
            let mut d = Decoder::new(max);
            d.feed(bytes);
            d.next_message().unwrap_err()
        };
        assert_eq!(
            err(b"Content-Length: 11\r\n\r\n", 10),
            FramingError::TooLarge { len: 11, max: 10 }
        );
        assert_eq!(
            err(b"Content-Length: 99999999999999999999999\r\n\r\n", 10),
            FramingError::TooLarge {
                len: usize::MAX,
                max: 10
            }
        );
        assert_eq!(err(b"Content-Type: x\r\n\r\n", 10), FramingError::NoLength);
        assert!(matches!(
            err(b"Content-Length: -1\r\n\r\n", 10),
            FramingError::BadHeader(_)
        ));
        assert!(matches!(
            err(b"garbage\r\n\r\n", 10),
            FramingError::BadHeader(_)
        ));
        assert_eq!(
            err(&vec![b'x'; MAX_HEADER_BYTES + 1], 10),
            FramingError::HeaderTooLong
        );
        assert_eq!(
            err(b"Content-Length: 1\r\n\r\n\xff", 10),
            FramingError::NotUtf8
        );
    }

    #[test]
    fn client_messages_are_json_text() {
        assert!(client_message(Inbound::Text(r#" {"id":1}"#.into())).is_ok());
        assert!(client_message(Inbound::Text("[]".into())).is_ok());
        let bad = client_message(Inbound::Text("{nope".into())).unwrap_err();
        assert_eq!(bad.code, -32700);
        let reply: serde_json::Value = serde_json::from_str(&bad.reply()).unwrap();
        assert_eq!(reply["error"]["code"], -32700);
        assert!(reply["id"].is_null());
        assert_eq!(
            client_message(Inbound::Text("42".into())).unwrap_err().code,
            -32600
        );
        assert_eq!(
            client_message(Inbound::Binary(bytes::Bytes::from_static(b"{}")))
                .unwrap_err()
                .code,
            -32600
        );
    }
}
