//! Wire arrival times: a TCP stream that reads with `recvmsg` and keeps the kernel's receive
//! timestamp (`SO_TIMESTAMPNS`) of the newest bytes, so a viewer's figure can be taken where the
//! bytes reached its socket as well as where its (niced, CPU-starved) task got to read them.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use nix::sys::time::TimeSpec;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The kernel's receive time of the newest bytes read, in ns since the Unix epoch (0: none).
/// A frame read with later bytes gets their time, so a wire figure errs late, never early.
#[derive(Clone, Default)]
pub(crate) struct WireClock(Arc<AtomicU64>);

impl WireClock {
    /// The newest bytes' receive time on this process's monotonic clock. The kernel stamps with
    /// the real-time clock; the offset is taken now, so a clock step between the stamp and this
    /// call (microseconds) is the only error.
    pub(crate) fn arrival(&self) -> Option<Instant> {
        let ns = self.0.load(Ordering::Relaxed);
        if ns == 0 {
            return None;
        }
        let (now, real) = (Instant::now(), SystemTime::now());
        let real_ns = real.duration_since(UNIX_EPOCH).ok()?.as_nanos() as u64;
        let ago = Duration::from_nanos(real_ns.saturating_sub(ns));
        Some(now.checked_sub(ago).unwrap_or(now))
    }
}

/// A TCP stream whose reads record their bytes' kernel receive time in a [`WireClock`].
pub(crate) struct Stamped {
    io: TcpStream,
    clock: WireClock,
}

impl Stamped {
    pub(crate) fn new(io: TcpStream) -> io::Result<(Stamped, WireClock)> {
        setsockopt(&io.as_fd(), sockopt::ReceiveTimestampns, &true)?;
        let clock = WireClock::default();
        Ok((
            Stamped {
                io,
                clock: clock.clone(),
            },
            clock,
        ))
    }

    /// One `recvmsg`: the bytes read and, when the kernel attached one, their receive time.
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut space = nix::cmsg_space!(TimeSpec);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(
            self.io.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_DONTWAIT,
        )?;
        // A read without a stamp clears the clock: an older stamp would flatter the figure.
        let mut ns = 0;
        for cmsg in msg.cmsgs()? {
            if let ControlMessageOwned::ScmTimestampns(ts) = cmsg {
                ns = ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64;
            }
        }
        if msg.bytes > 0 {
            self.clock.0.store(ns, Ordering::Relaxed);
        }
        Ok(msg.bytes)
    }
}

impl AsyncRead for Stamped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.io.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match self.io.try_io(Interest::READABLE, || self.recv(unfilled)) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
