//! The crate's only `unsafe` code: registering an owned file descriptor (a PTY master, a
//! pidfd, later descriptors handed over by a live upgrade) with tokio's reactor.
//!
//! tokio asks for `unsafe` there because an arbitrary `AsRawFd` type could close or swap its
//! descriptor behind the reactor's back. An [`OwnedFd`] cannot: it owns its descriptor and
//! closes it only when dropped, which for one inside an `AsyncFd` is when the `AsyncFd` goes.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;

/// Registers `fd` (read and write interest) with the current runtime's reactor.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is valid and open until dropped, it is moved into the `AsyncFd`
    // (so it lives exactly as long) and its `as_raw_fd` always returns the same descriptor.
    let registered = unsafe { AsyncFd::register(fd) };
    registered.map_err(io::Error::from)
}
