//! The PTY master as an owned, non-blocking file descriptor on tokio's reactor: read, write
//! and resize, shared by the actor (reads, resizes, a key with nothing queued) and the writer
//! task (queued input).
//!
//! An owned fd rather than the PTY crate's async wrapper, so that a live upgrade can hand the
//! descriptor itself to the next image and adopt it there.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::unix::AsyncFd;

/// Bytes asked of the PTY per read; PTY reads return at most about 4 KiB anyway.
const MAX_READ: usize = 16 * 1024;

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

    /// Reads what the program wrote (at most `MAX_READ` bytes), copied out at its own size;
    /// an empty chunk or an error (EIO) once no process holds the terminal side any more.
    ///
    /// The read goes through a buffer on the stack, taken only once the PTY is readable, so an
    /// idle session holds no read buffer (16 KiB each, a sixth of an idle session's memory),
    /// and the chunk is the one copy the log keeps, bounded by its own size.
    pub async fn read(&self) -> io::Result<Bytes> {
        loop {
            let mut ready = self.0.readable().await?;
            let read = ready.try_io(|fd| {
                let mut buf = [MaybeUninit::<u8>::uninit(); MAX_READ];
                let (got, _) = rustix::io::read(fd.get_ref(), &mut buf)?;
                Ok(Bytes::copy_from_slice(got))
            });
            if let Ok(result) = read {
                return result;
            }
        }
    }

    /// What the program wrote and is readable now, up to about `max` bytes, without waiting:
    /// what is left to collect before the terminal is hung up (closing the master discards
    /// it). Stops at the first read that would wait, fails or finds the end.
    pub fn read_now(&self, max: usize) -> Bytes {
        let mut got = bytes::BytesMut::new();
        let mut buf = [MaybeUninit::<u8>::uninit(); MAX_READ];
        while got.len() < max {
            match rustix::io::read(self.0.get_ref(), &mut buf) {
                Ok((read, _)) if !read.is_empty() => got.extend_from_slice(read),
                _ => break,
            }
        }
        got.freeze()
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::PtyMaster;

    /// What the program wrote is collected without waiting, at most about what was asked
    /// for, and the collecting stops at a closed terminal side rather than spinning on it.
    #[tokio::test]
    async fn read_now_collects_what_is_left_and_stops() {
        let (master, pts) = PtyMaster::open(24, 80).expect("a pty");
        assert!(
            master.read_now(1024).is_empty(),
            "nothing written, nothing waited for"
        );
        let written = vec![b'x'; 8 * 1024];
        let mut at = 0;
        while at < written.len() {
            at += rustix::io::write(pts.as_fd(), &written[at..]).expect("write");
        }
        drop(pts);
        // The kernel hands the bytes to the master side on its own time.
        let ready = tokio::time::timeout(std::time::Duration::from_secs(10), master.0.readable());
        ready
            .await
            .expect("readable in time")
            .expect("readable")
            .retain_ready();
        let first = master.read_now(1);
        assert!(
            !first.is_empty() && first.len() <= super::MAX_READ,
            "{}",
            first.len()
        );
        let mut got = first.len();
        // The rest arrives as the kernel moves it along; then EIO ends each collection.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got < written.len() && std::time::Instant::now() < deadline {
            got += master.read_now(usize::MAX).len();
            tokio::task::yield_now().await;
        }
        assert_eq!(got, written.len());
        assert!(master.read_now(usize::MAX).is_empty());
    }
}
