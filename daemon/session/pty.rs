//! The PTY master as an owned, non-blocking file descriptor on tokio's reactor: read, write
//! and resize, shared by the actor (reads, resizes, a key with nothing queued) and the writer
//! task (queued input).
//!
//! An owned fd rather than the PTY crate's async wrapper, so that a live upgrade can hand the
//! descriptor itself to the next image and adopt it there.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;

/// The master side of a session's PTY. Clones share the descriptor, which closes when the
/// last clone goes (the program then reads EOF and gets SIGHUP from the kernel).
#[derive(Clone)]
pub struct PtyMaster(Arc<AsyncFd<OwnedFd>>);

impl PtyMaster {
    /// Opens a PTY of the given size: the master, and the terminal side for the program.
    pub fn open(rows: u16, cols: u16) -> io::Result<(Self, pty_process::blocking::Pts)> {
        let (pty, pts) = pty_process::blocking::open().map_err(io::Error::other)?;
        let master = Self::adopt(OwnedFd::from(pty))?;
        master.resize(rows, cols)?;
        Ok((master, pts))
    }

    /// Takes over an open PTY master (close-on-exec is the caller's): makes it non-blocking
    /// and registers it with the reactor.
    pub fn adopt(fd: OwnedFd) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(Self(Arc::new(crate::sys::register(fd)?)))
    }

    /// Reads what the program wrote into the spare capacity of `buf` (at least `want` bytes
    /// of it); `Ok(0)` or an error (EIO) once no process holds the terminal side any more.
    pub async fn read(&self, buf: &mut Vec<u8>, want: usize) -> io::Result<usize> {
        buf.reserve(want);
        loop {
            let mut ready = self.0.readable().await?;
            let read = ready.try_io(|fd| {
                Ok(rustix::io::read(
                    fd.get_ref(),
                    rustix::buffer::spare_capacity(&mut *buf),
                )?)
            });
            if let Ok(result) = read {
                return result;
            }
        }
    }

    /// Writes as much of `data` as the PTY takes now, waiting until it takes something.
    pub async fn write(&self, data: &[u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.0.writable().await?;
            if let Ok(result) = ready.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), data)?)) {
                return result;
            }
        }
    }

    /// Writes what the PTY takes now, without waiting (`WouldBlock` when it takes nothing):
    /// the actor's direct path for a key, so input never waits for the writer task's turn.
    pub fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        Ok(rustix::io::write(self.0.get_ref(), data)?)
    }

    /// Sets the terminal's size; the kernel sends the program SIGWINCH.
    pub fn resize(&self, rows: u16, cols: u16) -> io::Result<()> {
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        Ok(rustix::termios::tcsetwinsize(self.0.get_ref(), size)?)
    }
}

impl AsFd for PtyMaster {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.get_ref().as_fd()
    }
}
