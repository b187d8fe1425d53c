//! What a session hands the next image of the daemon in a live upgrade: its image (metadata,
//! the screen as ANSI at an exact log offset, the log's tail, input not yet written) and its
//! PTY master; and why such an image could not become a session again. The actor hands over
//! in `actor/live_upgrade.rs`; `adopt` (in `mod.rs`) builds a session from the image.

use std::os::fd::OwnedFd;

use crate::upgrade::image::{ImageError, SessionImage};

/// A session handed over: its image (blob fields unset) and the bytes and descriptor that go
/// with it.
pub struct SessionHandoff {
    /// Everything but the byte areas.
    pub image: SessionImage,
    /// The screen as ANSI at `image.snapshot_offset`.
    pub snapshot: Option<Vec<u8>>,
    /// The log from `image.log_start` to its head.
    pub log: Vec<u8>,
    /// Input accepted and not yet written.
    pub input: Vec<u8>,
    /// The PTY master (a duplicate: the session's own descriptors are closed).
    pub pty: Option<OwnedFd>,
}

/// Why an image could not become a session.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// The image is inconsistent.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The screen thread or the descriptors could not be set up.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
