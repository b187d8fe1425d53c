//! The terminal, pure (no tokio, no I/O, no counters): how the bytes a program writes to its
//! terminal are read, the screen they draw, and that screen written back out. It imports nothing
//! from the session, the HTTP layer, the viewers, the codecs or the metrics; the session's
//! screen thread (`session/screen_thread.rs`) is its bridge to them.
//!
//! - [`seq`]: the one escape-sequence and UTF-8 boundary scanner.
//! - [`pen`]: the pen grammar: plain text, colours and erases in the line, which the model may
//!   skip in a flood.
//! - [`model`]: the screen model: a vt100 parser kept exact at stream boundaries, parked when
//!   idle.
//! - [`render`]: the model's screen as the ANSI that rebuilds it in a fresh terminal.
//! - [`snapshot`]: that ANSI packed (gzip or plain) to fit what a dialect can carry.
//! - [`queries`]: the program's questions to its terminal, found and answered.
//! - [`lines`]: output as plain text lines, for the log stream.

pub mod lines;
pub mod model;
pub mod pen;
pub mod queries;
pub mod render;
#[cfg(test)]
mod screen_check;
pub mod seq;
pub mod snapshot;
