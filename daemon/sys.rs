//! The crate's only `unsafe` code: registering an owned file descriptor (a PTY master, a
//! pidfd) with tokio's reactor, taking over the descriptors a live upgrade hands down, and
//! clearing the signal mask in a child before it runs its program.
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

/// Takes ownership of descriptor `raw`, inherited across `execve` from the previous image of
/// this daemon (a live upgrade), after checking that it is open; sets close-on-exec on it
/// again, so it goes no further than this image unless handed over once more.
///
/// The caller names each descriptor once (the image reader refuses duplicates), and nothing
/// else in this process owns inherited descriptors: the standard streams are 0 to 2 and the
/// image never names them.
pub fn adopt_inherited(raw: std::os::fd::RawFd) -> io::Result<OwnedFd> {
    use std::os::fd::{BorrowedFd, FromRawFd};
    if raw <= 2 {
        return Err(io::Error::other(format!(
            "descriptor {raw} is a standard stream"
        )));
    }
    // SAFETY: only used for the one `fcntl` below, which fails with EBADF (and touches
    // nothing) when `raw` is not open.
    let borrowed = unsafe { BorrowedFd::borrow_raw(raw) };
    rustix::io::fcntl_getfd(borrowed)?;
    // SAFETY: `raw` is open (checked above), was left open for this image by the previous
    // one, and is named once: this `OwnedFd` is its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    Ok(owned)
}

/// Runs in a child between `fork` and `exec`: an empty signal mask. The daemon's threads keep
/// the signals it handles blocked (a live upgrade holds them over its `execve`), a mask is
/// inherited across `exec`, and without this a session's shell would never see SIGHUP,
/// SIGINT or SIGTERM.
fn clean_signal_mask() -> io::Result<()> {
    nix::sys::signal::SigSet::empty()
        .thread_set_mask()
        .map_err(io::Error::from)
}

/// A session's program starts with an empty signal mask ([`clean_signal_mask`]).
pub fn clean_mask_pty(cmd: pty_process::blocking::Command) -> pty_process::blocking::Command {
    // SAFETY: the closure only calls `pthread_sigmask`, which is async-signal-safe, and
    // allocates nothing: it is sound between `fork` and `exec`.
    unsafe { cmd.pre_exec(clean_signal_mask) }
}

/// An exec's program starts with an empty signal mask ([`clean_signal_mask`]).
pub fn clean_mask(cmd: &mut tokio::process::Command) {
    // SAFETY: as in `clean_mask_pty`.
    unsafe {
        cmd.pre_exec(clean_signal_mask);
    }
}
