//! How much of a connection's output the kernel may hold unsent: `TCP_NOTSENT_LOWAT` on every
//! accepted socket (set on the listener, which passes it to each), so that what waits for a
//! client that reads slowly waits in the daemon, where a fresher screen can replace it, and not
//! in a socket buffer nobody can recall.
//!
//! Without it Linux grows a loopback socket's send buffer to megabytes: a viewer reading a
//! flood at a browser's pace (1-4 MB/s) then had seconds of stale output queued ahead of the
//! snapshot that would have brought it up to date, and the daemon, whose writes never waited,
//! could not tell that it was behind. With it a write waits once this much is unsent: the
//! viewer's writer falls back to the output log, and the usual rules (a backlog costlier than
//! a snapshot is replaced by one) apply to what the client has not read. A client that keeps
//! up empties the queue faster than it fills and is streamed every byte as before.
//!
//! Plain connections only. A TLS viewer has no direct path from the session: its backlog says
//! it is slow only when its socket made a write wait (`Subscription::slower_than_output`), and
//! with this mark a 64 KiB batch makes nearly every write wait, so a TLS viewer that keeps
//! up would be resynced through a flood instead of streamed (`tests/tls.rs` failed so).

use std::os::fd::AsFd;

/// Unsent bytes the kernel holds for a connection before a write waits. 64 KiB: with it the
/// load generator's slow readers (100 viewers at 1-4 MB/s, a 20 MiB flood) had their last
/// final screen at about 2.2 × a bare PTY's time instead of 4.5 × (16 and 32 KiB did no better,
/// 128 and 256 KiB worse), and floods to fast viewers took no longer (benches/RESULTS.md).
pub const NOTSENT_LOWAT: u32 = 64 * 1024;

/// Sets [`NOTSENT_LOWAT`] on `socket`; the reason it could not, for the log.
pub fn limit(socket: impl AsFd) -> std::io::Result<()> {
    crate::sys::set_notsent_lowat(socket.as_fd(), NOTSENT_LOWAT)
}

/// Clears the mark on `socket` (the system's default, none): for a TLS connection, or a
/// listener serving them that may have served plain TCP before.
pub fn unlimited(socket: impl AsFd) -> std::io::Result<()> {
    crate::sys::set_notsent_lowat(socket.as_fd(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option is on the socket, as the kernel reports it back.
    #[test]
    fn the_low_water_mark_is_set() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        limit(&accepted).unwrap();
        assert_eq!(
            crate::sys::notsent_lowat(accepted.as_fd()).unwrap(),
            NOTSENT_LOWAT
        );
    }
}
