//! Wire dialects: pure codecs between frames and session commands/events.
//!
//! Each dialect turns what a client sends into messages the session understands, and what the
//! session reports into frames, without doing any I/O itself or touching a session or a
//! counter: the viewer task owns the socket and applies requests, and counts what a codec says
//! to count ([`Encoded::error`]), so every codec can be unit-tested and fuzzed on its own. The browser dialect of
//! `docs/protocol.md` is the first; later dialects sit next to it on the same session core.

pub mod asciicast;
pub mod board;
pub mod dialect;
pub mod exec_sse;
pub mod mux;
pub mod pipe;
pub mod raw;
pub mod request;
pub mod state;
pub mod swe;

pub use dialect::{Closing, Dialect, Encoded, Inbound, Notice, Outbound};
pub use request::{Outcome, Request};
