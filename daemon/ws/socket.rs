//! An upgraded connection, split: a read half for the reader task, a write half for the writer
//! task, and (for TCP, the daemon's own listener) the socket itself, which a session actor
//! writes a viewer's output to without blocking (`crate::viewer::live`) and an exec watches for
//! its client's going.
//!
//! hyper hands the upgrade back as an opaque `Upgraded`; downcasting it to the TCP stream the
//! server accepted gives `try_write` on a shared socket, and halves without the lock of a
//! generic `tokio::io::split`.

use std::io::{Cursor, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The read half.
pub type ReadSide = Box<dyn AsyncRead + Send + Unpin>;
/// The write half.
pub type WriteSide = Box<dyn AsyncWrite + Send + Unpin>;

/// The connection, split.
pub struct Halves {
    /// For the reader task (bytes hyper read past the upgrade request come first).
    pub read: ReadSide,
    /// For the writer task.
    pub write: WriteSide,
    /// The socket, when the connection is a plain TCP stream.
    pub tcp: Option<Arc<TcpStream>>,
}

/// Splits an upgraded connection.
pub fn split(io: TokioIo<Upgraded>) -> Halves {
    match io.into_inner().downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let tcp = Arc::new(parts.io.into_inner());
            let read = Cursor::new(parts.read_buf).chain(SharedTcp(tcp.clone()));
            Halves {
                read: Box::new(read),
                write: Box::new(SharedTcp(tcp.clone())),
                tcp: Some(tcp),
            }
        }
        Err(upgraded) => {
            let (read, write) = tokio::io::split(TokioIo::new(upgraded));
            Halves {
                read: Box::new(read),
                write: Box::new(write),
                tcp: None,
            }
        }
    }
}

/// One direction of a TCP stream shared by reference: tokio's readiness API works through
/// `&TcpStream`. The reader task alone waits for read readiness and the writer task alone for
/// write readiness; the actor only ever calls `try_write`, which never waits.
struct SharedTcp(Arc<TcpStream>);

impl AsyncRead for SharedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl SharedTcp {
    /// Waits until the socket is writable, then writes with `write`, which does not block.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&TcpStream) -> std::io::Result<usize>,
    ) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match write(&self.0) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }
}

impl AsyncWrite for SharedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // Unbuffered: every write went to the socket.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // The socket closes when the last half is dropped.
        Poll::Ready(Ok(()))
    }
}
