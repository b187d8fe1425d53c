//! The accept loop: each connection gets a place in the per-address pools, the header and
//! idle timeout, a TLS handshake when `[tls]` is set, and an HTTP/1.1 server with upgrades.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use super::*;

/// How long a connection accepted just before shutdown (or a live upgrade) has to send its
/// first request before it is closed.
const FIRST_REQUEST_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a refused connection's request is read (and dropped) after the 429, and how much
/// of it at most: enough for a request head, so that closing sends no reset.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// Accepts connections until shutdown; with `tls`, each one is a TLS connection.
pub async fn run(listener: TcpListener, state: Arc<AppState>, tls: Option<Arc<super::tls::Tls>>) {
    let inherited = match set_inherited_options(&listener, tls.is_none()) {
        Ok(()) => true,
        Err(e) => {
            debug!("socket options not set on the listener, set on each connection: {e}");
            false
        }
    };
    loop {
        let (stream, peer) = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving the others.
                    warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if !inherited {
            if let Err(e) = set_inherited_options(&stream, tls.is_none()) {
                debug!(%peer, "socket options not set: {e}");
            }
        }
        if let Err(e) =
            super::dead_peer::watch(&stream, peer.ip(), state.cfg.limits.dead_peer_timeout)
        {
            debug!(%peer, "dead-peer socket options not set: {e}");
        }
        // A trusted proxy's connection carries many clients: it is counted under each
        // request's forwarded address instead (see `Slot::from_client`), and under the proxy
        // only against `[proxy] max_connections`.
        let proxied = state.cfg.proxy.trusts(peer.ip());
        let admitted = if proxied {
            state.connections.admit_proxied(peer.ip())
        } else {
            state.connections.admit(peer.ip())
        };
        let Some(slot) = admitted else {
            if proxied {
                info!(%peer, "refused connection: the trusted proxy has [proxy] max_connections open");
            } else {
                info!(%peer, "refused connection: too many from this address");
            }
            state.metrics.refused(429);
            state
                .tasks
                .spawn(too_many_connections(stream, state.cfg.cluster.host.clone()));
            continue;
        };
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        let state2 = state.clone();
        // One deadline from the accept for the TLS handshake and the first request's head
        // together: a client on TLS holds a connection no longer than one on plain TCP.
        let first_request_by = tokio::time::Instant::now() + state.cfg.limits.header_timeout;
        state.tasks.spawn(async move {
            match acceptor {
                None => serve(stream, peer, false, state2, slot, first_request_by).await,
                // Boxed: a TLS connection's state is several times a plain one's, and a
                // task is as big as its largest path.
                Some(acceptor) => {
                    let serving = serve_tls(acceptor, stream, peer, state2, slot, first_request_by);
                    Box::pin(serving).await
                }
            }
        });
    }
}

/// Sets on `listener` the options every connection it accepts gets (Linux copies a listening
/// socket's options to each accepted one): `TCP_NODELAY`, and on plain TCP the send queue's
/// low-water mark ([`super::send_queue`]). Once here instead of two system calls an accept,
/// on the path of every connection's first request. Under TLS the mark is cleared: a
/// listener handed over by a live upgrade may have served plain TCP before.
/// Also what a connection gets itself when its listener refused them.
fn set_inherited_options(socket: impl std::os::fd::AsFd, plain: bool) -> std::io::Result<()> {
    rustix::net::sockopt::set_tcp_nodelay(&socket, true)?;
    if plain {
        super::send_queue::limit(&socket)
    } else {
        super::send_queue::unlimited(&socket)
    }
}

/// The TLS handshake, then [`serve`] on the encrypted stream.
async fn serve_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    state: Arc<AppState>,
    slot: super::connections::Slot,
    first_request_by: tokio::time::Instant,
) {
    // The handshake yields to eviction and shutdown like a request's head.
    let evicted = slot.evicted();
    let handshake = tokio::time::timeout_at(first_request_by, acceptor.accept(stream));
    let tls_stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return debug!(%peer, "TLS handshake failed: {e}"),
            Err(_) => return debug!(%peer, "TLS handshake timed out"),
        },
        _ = evicted.cancelled() => return,
        _ = state.shutdown.cancelled() => return,
    };
    serve(tls_stream, peer, true, state, slot, first_request_by).await
}

/// Serves HTTP/1.1 (with upgrades) on one connection until it closes, it is evicted, the
/// daemon shuts down, or its first request's head is not in by `first_request_by`; `tls`:
/// whether `io` is our own TLS.
async fn serve<I>(
    io: I,
    peer: std::net::SocketAddr,
    tls: bool,
    state: Arc<AppState>,
    slot: super::connections::Slot,
    first_request_by: tokio::time::Instant,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Shared with an upgraded WebSocket, which outlives the HTTP connection task.
    let slot = Arc::new(slot);
    let mine = slot.clone();
    let evicted = slot.evicted();
    let header_timeout = state.cfg.limits.header_timeout;
    let shutdown = state.shutdown.clone();
    let service = service_fn(move |req| {
        let state = state.clone();
        let slot = slot.clone();
        // Boxed: hyper keeps room for one request's future for the connection's whole life,
        // and `route`'s is kilobytes; a box lives only while a request is being answered.
        Box::pin(async move {
            let mut resp = route(req, peer, tls, &state, slot.clone()).await;
            cluster::stamp(&mut resp, &state);
            Ok::<_, Infallible>(until_sent(resp, slot))
        })
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // Also bounds the idle time between requests: hyper starts it when it waits
        // for the next request's head.
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    // hyper's own timer starts when it begins reading the head, after the handshake; this one
    // started at the accept. Once a request has begun it never fires.
    let first_request_late = async {
        tokio::time::sleep_until(first_request_by).await;
        if mine.has_requested() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        done = conn.as_mut() => if let Err(e) = done {
            debug!(%peer, "http connection: {e}");
        },
        () = first_request_late => debug!(%peer, "no request within header_timeout of the connection"),
        // Only connections that never sent a request are evicted: nothing is lost.
        _ = evicted.cancelled() => debug!(%peer, "idle connection closed for a newcomer"),
        // An idle keep-alive connection closes at once, so the daemon does not wait
        // out its drain for it; a request under way is answered first.
        _ = shutdown.cancelled() => {
            // Accepted a moment ago, its request may not have been read yet: a close
            // now would look like a refusal (a live upgrade must refuse no one).
            if !mine.has_requested() {
                if let Ok(done) = tokio::time::timeout(FIRST_REQUEST_GRACE, conn.as_mut()).await {
                    if let Err(e) = done {
                        debug!(%peer, "http connection at shutdown: {e}");
                    }
                    return;
                }
            }
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                debug!(%peer, "http connection at shutdown: {e}");
            }
        }
    }
}

/// `resp`, telling `slot` when its body has been sent or dropped: the request is over then
/// (a stream's body lives as long as the stream). An upgrade's 101 is not the end: the
/// WebSocket holds its place until it closes. Only a proxied connection's count changes
/// between requests, so any other response goes out as it is.
fn until_sent(
    resp: hyper::Response<Body>,
    slot: Arc<super::connections::Slot>,
) -> hyper::Response<Body> {
    use http_body_util::BodyExt;
    if resp.status() == hyper::StatusCode::SWITCHING_PROTOCOLS || !slot.is_proxied() {
        return resp;
    }
    resp.map(|inner| {
        Held {
            inner,
            _done: RequestDone(slot),
        }
        .boxed_unsync()
    })
}

/// A response body that ends its request's hold on the connection's place when dropped; its
/// size is the inner body's, so a whole body keeps its `content-length`.
struct Held {
    inner: Body,
    _done: RequestDone,
}

impl hyper::body::Body for Held {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Ends a request's hold on its connection's place when dropped.
struct RequestDone(Arc<super::connections::Slot>);

impl Drop for RequestDone {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// Answers a connection over the per-address limit with a plain 429 and closes it; written
/// by hand (no HTTP connection is served), so it names the host itself like every response.
pub(super) async fn too_many_connections(mut stream: tokio::net::TcpStream, host: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"error":"too many connections from this address"}"#;
    // The name was checked to be header-safe when the config was read.
    let reply = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 5\r\n{}: {host}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        cluster::HOST_HEADER,
        body.len()
    );
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.write_all(reply.as_bytes()),
    )
    .await;
    // Closed with the client's request unread, the socket would answer with a reset, which
    // can reach the client before it reads the 429 ("connection reset" instead of a refusal
    // it can act on). So: the end of the reply, then what the client sends is read and
    // dropped until it closes (bounded in bytes and time, like nginx's lingering close).
    let _ = stream.shutdown().await;
    let mut scratch = [0u8; 4096];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER, async {
        while left > 0 {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    /// What the accept loop no longer sets on each connection, every accepted one still has.
    #[tokio::test]
    async fn an_accepted_connection_has_the_options_set_on_its_listener() {
        // The plain listener then under TLS: as after a live upgrade that turned `[tls]` on.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        for plain in [true, false] {
            set_inherited_options(&listener, plain).unwrap();
            let addr = listener.local_addr().unwrap();
            let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (accepted, _) = listener.accept().await.unwrap();
            assert!(accepted.nodelay().unwrap(), "plain: {plain}");
            let lowat = crate::sys::notsent_lowat(accepted.as_fd()).unwrap();
            if plain {
                assert_eq!(lowat, super::super::send_queue::NOTSENT_LOWAT);
            } else {
                // TLS: the kernel's default (see `send_queue` for why not the mark).
                assert_ne!(lowat, super::super::send_queue::NOTSENT_LOWAT);
            }
        }
    }
}
