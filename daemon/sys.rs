//! The crate's only `unsafe` code: registering an owned file descriptor (a PTY master, a
//! pidfd) with tokio's reactor, taking over the descriptors a live upgrade hands down,
//! clearing the signal mask and the ignored signals in a child before it runs its program,
//! the socket option and queue size no safe crate here names (`TCP_NOTSENT_LOWAT`,
//! `SIOCOUTQNSD`), and finding and
//! dropping the pages of the process's read-only code and data (`idle_pages.rs`).
//!
//! tokio asks for `unsafe` there because an arbitrary `AsRawFd` type could close or swap its
//! descriptor behind the reactor's back. An [`OwnedFd`] cannot: it owns its descriptor and
//! closes it only when dropped, which for one inside an `AsyncFd` is when the `AsyncFd` goes.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

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
    use std::os::fd::FromRawFd;
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

/// Runs in a child between `fork` and `exec`: an empty signal mask and every signal's default
/// action, as a terminal gives the program it starts. The daemon's threads keep the signals it
/// handles blocked (a live upgrade holds them over its `execve`), and a mask is inherited
/// across `exec`: without the clean mask a session's shell would never see SIGHUP, SIGINT or
/// SIGTERM. A signal *ignored* is inherited too (handlers are reset by `exec`, ignoring is
/// not): a daemon started with `nohup` or from a non-interactive shell's `&` ignores SIGHUP
/// or SIGINT and SIGQUIT, and without the reset Ctrl+C would never stop a program in its
/// sessions, nor a forwarded SIGINT an exec.
fn clean_signal_mask() -> io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for sig in Signal::iterator() {
        if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: `sigaction` is async-signal-safe, and SIG_DFL installs no handler that
        // could run in this half-made process.
        unsafe { sigaction(sig, &default) }.map_err(io::Error::from)?;
    }
    // The real-time signals, which `Signal` does not name (32 and 33 are the C library's own:
    // it refuses them, and no program can use them through it).
    let mut raw: nix::libc::sigaction = unsafe { std::mem::zeroed() };
    raw.sa_sigaction = nix::libc::SIG_DFL;
    for n in nix::libc::SIGRTMIN()..=nix::libc::SIGRTMAX() {
        // SAFETY: as above; `raw` is a valid, fully initialised `sigaction` (SIG_DFL, no
        // flags, an empty mask), and a null old-action pointer is allowed.
        if unsafe { nix::libc::sigaction(n, &raw, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    SigSet::empty().thread_set_mask().map_err(io::Error::from)
}

/// A session's program starts with an empty signal mask and default signal actions
/// ([`clean_signal_mask`]).
pub fn clean_mask_pty(cmd: pty_process::blocking::Command) -> pty_process::blocking::Command {
    // SAFETY: the closure only calls `sigaction` and `pthread_sigmask`, which are
    // async-signal-safe, and allocates nothing: it is sound between `fork` and `exec`.
    unsafe { cmd.pre_exec(clean_signal_mask) }
}

/// An exec's program starts with an empty signal mask and default signal actions
/// ([`clean_signal_mask`]).
pub fn clean_mask(cmd: &mut tokio::process::Command) {
    // SAFETY: as in `clean_mask_pty`.
    unsafe {
        cmd.pre_exec(clean_signal_mask);
    }
}

/// Sets `TCP_NOTSENT_LOWAT` on `socket`: a write waits once `bytes` are queued unsent.
pub fn set_notsent_lowat(socket: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is borrowed for the call; the option's value is a c_int that
    // outlives it, passed with its size.
    let done = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The `TCP_NOTSENT_LOWAT` of `socket`, as the kernel reports it.
pub fn notsent_lowat(socket: BorrowedFd<'_>) -> io::Result<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed for the call; `value` and `len` are live and `len`
    // holds `value`'s size, which the kernel writes at most.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            std::ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    };
    if done == 0 {
        Ok(u32::try_from(value).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Bytes written to `socket` that the kernel has not sent yet (`SIOCOUTQNSD`): what
/// `TCP_NOTSENT_LOWAT` bounds, whatever the peer has acknowledged.
pub fn unsent_bytes(socket: BorrowedFd<'_>) -> io::Result<u32> {
    let mut value: libc::c_int = 0;
    // SAFETY: the descriptor is borrowed for the call; SIOCOUTQNSD writes one int to the
    // live `value`.
    let done = unsafe {
        libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCOUTQNSD,
            std::ptr::from_mut(&mut value),
        )
    };
    if done == 0 {
        Ok(u32::try_from(value).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An address range of pages, `[start, end)`, page-aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pages {
    /// The first byte of the first page.
    pub start: usize,
    /// One past the last byte of the last page.
    pub end: usize,
}

/// The pages of every segment the program and its shared libraries were loaded with that has
/// no write permission (code, read-only data, unwind tables): mapped from their files and
/// never written, since lld refuses text relocations and `GNU_RELRO` data (written once, by
/// the dynamic linker, before `main`) lies in writable segments. Each range is the pages wholly
/// inside one such segment, so none holds a byte of a writable one. The vDSO, which is no file,
/// is left out.
pub fn read_only_segments() -> Vec<Pages> {
    let page = rustix::param::page_size();
    let mut found: Vec<Pages> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: glibc calls this with a valid `info` for the duration of the call, and
        // `data` is the `(&mut Vec<Pages>, usize)` passed to `dl_iterate_phdr` below, which
        // outlives the iteration and is used by nothing else meanwhile.
        let (info, (found, page)) =
            unsafe { (&*info, &mut *data.cast::<(&mut Vec<Pages>, usize)>()) };
        // The program itself has an empty name; a library its path; the vDSO a bare name.
        let name: &[u8] = if info.dlpi_name.is_null() {
            b""
        } else {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string glibc keeps for the
            // object's lifetime.
            unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
        };
        if !(name.is_empty() || name.starts_with(b"/")) || info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers of the loaded object.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        for h in headers {
            if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
                continue;
            }
            let from = info.dlpi_addr as usize + h.p_vaddr as usize;
            let to = from + h.p_memsz as usize;
            // Inward: a page shared with a neighbouring segment is left alone.
            let (start, end) = (from.next_multiple_of(*page), to / *page * *page);
            if start < end {
                found.push(Pages { start, end });
            }
        }
        0
    }
    let mut data = (&mut found, page);
    // SAFETY: `each` is the callback glibc expects; it only reads what glibc hands it and
    // writes only into `data`, which lives across the call.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::from_mut(&mut data).cast()) };
    found
}

/// Drops this process's mapping of `pages`, one of [`read_only_segments`]: their contents are
/// their file's, so the next access maps the same bytes again from the page cache (or reads
/// them from the file). Only the process's own page tables change; the page cache keeps them
/// for as long as the kernel sees fit. (A debugger's breakpoints, private copies of such
/// pages, would be dropped with them.)
pub fn drop_read_only(pages: Pages) -> io::Result<()> {
    // SAFETY: `pages` is wholly inside a loaded segment without write permission (see
    // `read_only_segments`): no byte of it was ever written in this process, so dropping its
    // pages loses nothing, and no Rust reference can observe a change: the bytes read after
    // the next fault are the same.
    let done = unsafe {
        libc::madvise(
            pages.start as *mut libc::c_void,
            pages.end - pages.start,
            libc::MADV_DONTNEED,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
