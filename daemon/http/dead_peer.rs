//! A client whose network vanished without a word (a laptop's lid closed, a phone off Wi-Fi: no
//! FIN, no reset) is noticed within `limits.dead_peer_timeout`, not at TCP's retransmission
//! timeout of many minutes: the socket options every accepted connection gets.
//!
//! Two cases, one bound. Data sent and unacknowledged: `TCP_USER_TIMEOUT` makes the kernel end
//! the connection once it has stayed so that long. Nothing outstanding (a quiet WebSocket):
//! keepalive probes after [`KEEP_IDLE`] of quiet, one every [`KEEP_INTERVAL`], and the same user
//! timeout ends the connection when none was answered that long. Either way the connection's
//! reader sees the error (`ETIMEDOUT`), hyper drops the connection, and what it carried ends as
//! on a close: a stream is uncounted, an exec's process group ended, a viewer let go.
//!
//! Data sent after the client vanished restarts the user timeout from that send, so streams
//! keep some outstanding: event streams and SSE execs send a comment, and quiet pipe-mode execs
//! a ping, [`HEARTBEAT`] after anything was last sent; their vanished clients are noticed within
//! the two together (5 s + 9 s by default).
//!
//! The user timeout also counts the time a client keeps its receive window shut (reads nothing
//! while data waits for it): such a client is closed after as long, as a vanished one would be.
//! So a connection from this machine (a loopback address) is left alone: its client cannot
//! vanish without its kernel closing the connection, and a local client that pauses (an exec
//! piped into `less`, a suspended `ptyhub attach`) is not cut off. A proxy on this machine
//! answers for its own clients (nginx: `send_timeout`).

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use rustix::net::sockopt;

/// How long after anything was last sent a long-lived stream sends something again (an event
/// stream's comment, a pipe-mode exec's ping), so that a vanished client always has data
/// unacknowledged within this.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Quiet before the first keepalive probe: as long as a stream's heartbeat, so a connection
/// with a heartbeat never needs one.
const KEEP_IDLE: Duration = HEARTBEAT;

/// Between unanswered keepalive probes: the user timeout, not a count of probes, decides when
/// the connection is given up, so this only sets how close to it that happens.
const KEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Sets the options on a connection accepted from `peer`, unless it is on this machine or
/// `timeout` is zero (the kernel's defaults, then). A socket that refuses them is served as it
/// is: the reason is returned for the log.
pub fn watch(socket: impl AsFd, peer: IpAddr, timeout: Duration) -> rustix::io::Result<()> {
    if timeout.is_zero() || peer.to_canonical().is_loopback() {
        return Ok(());
    }
    set(socket.as_fd(), timeout)
}

/// The options themselves.
fn set(fd: BorrowedFd<'_>, timeout: Duration) -> rustix::io::Result<()> {
    // The kernel takes milliseconds in 32 bits (49 days): longer is as good as forever.
    let ms = u32::try_from(timeout.as_millis())
        .unwrap_or(u32::MAX)
        .max(1);
    sockopt::set_tcp_user_timeout(fd, ms)?;
    sockopt::set_socket_keepalive(fd, true)?;
    // Whole seconds, at least one.
    let idle = KEEP_IDLE.min(timeout).max(Duration::from_secs(1));
    sockopt::set_tcp_keepidle(fd, idle)?;
    sockopt::set_tcp_keepintvl(fd, KEEP_INTERVAL)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options are on the socket as asked; zero, or a peer on this machine, leaves it
    /// untouched.
    #[test]
    fn options_are_set_only_for_other_machines() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let a = std::net::TcpStream::connect(addr).unwrap();
        let (b, _) = listener.accept().unwrap();
        let far: IpAddr = "198.18.0.2".parse().unwrap();
        let near: IpAddr = "::ffff:127.0.0.1".parse().unwrap();

        watch(&b, far, Duration::from_secs(9)).unwrap();
        assert_eq!(sockopt::tcp_user_timeout(&b).unwrap(), 9000);
        assert!(sockopt::socket_keepalive(&b).unwrap());
        assert_eq!(sockopt::tcp_keepidle(&b).unwrap(), Duration::from_secs(5));
        assert_eq!(sockopt::tcp_keepintvl(&b).unwrap(), Duration::from_secs(1));

        // A timeout shorter than the idle time probes sooner, never at zero seconds.
        watch(&b, far, Duration::from_millis(300)).unwrap();
        assert_eq!(sockopt::tcp_user_timeout(&b).unwrap(), 300);
        assert_eq!(sockopt::tcp_keepidle(&b).unwrap(), Duration::from_secs(1));

        for (peer, timeout) in [(far, Duration::ZERO), (near, Duration::from_secs(9))] {
            watch(&a, peer, timeout).unwrap();
            assert_eq!(sockopt::tcp_user_timeout(&a).unwrap(), 0);
            assert!(!sockopt::socket_keepalive(&a).unwrap());
        }
    }
}
