//! Terminal streams, pure (no tokio, no I/O): how the bytes a program writes to its terminal
//! are read, shared by the screen thread, the query detector, and next the raw replay, the log
//! stream and recordings.
//!
//! - [`seq`]: the one escape-sequence and UTF-8 boundary scanner.
//! - [`pen`]: the pen grammar: plain text, colours and erases in the line, which the screen
//!   model may skip in a flood.
//! - [`queries`]: the program's questions to its terminal, found and answered.
//! - [`lines`]: output as plain text lines, for the log stream.

pub mod lines;
pub mod pen;
pub mod queries;
pub mod seq;
