//! The browser-dialect WebSocket client every scenario uses: connect, join until `ready`,
//! reassemble snapshots, wait for text, close cleanly.

use std::future::Future;
use std::io::Read;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::wire::{Stamped, WireClock};

/// Connecting, joining, and waiting for a session to start.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(20);

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub(crate) fn is_snapshot_chunk(frame: &[u8]) -> bool {
    frame.len() >= 3 && frame[0] == 0x02
}

pub(crate) async fn connect(url: &str) -> Result<Ws> {
    connect_tls(url, None).await
}

/// `connect`, over TLS trusting what `tls` trusts (`wss://` to a test certificate).
pub(crate) async fn connect_tls(
    url: &str,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Result<Ws> {
    // No Nagle: a 1-byte keystroke must leave at once, as it does from a browser.
    let connecting = tokio_tungstenite::connect_async_tls_with_config(
        url,
        None,
        true,
        tls.map(tokio_tungstenite::Connector::Rustls),
    );
    let (ws, _) = tokio::time::timeout(STEP_TIMEOUT, connecting)
        .await
        .map_err(|_| anyhow!("connecting to {url}: no answer within {STEP_TIMEOUT:?}"))?
        .with_context(|| format!("connecting to {url}"))?;
    Ok(ws)
}

/// Runs `fut` on the viewer runtime, so the sockets it opens are driven there.
pub(crate) async fn on_pool<T: Send + 'static>(
    pool: &Handle,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    pool.spawn(fut)
        .await
        .map_err(|e| anyhow!("viewer task failed: {e}"))?
}

/// Aborts the tasks when dropped, so an early error leaves nothing reading.
#[derive(Default)]
pub(crate) struct Tasks(pub(crate) Vec<AbortHandle>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Reassembles snapshot chunks `[0x02, index, total, gzip…]`.
#[derive(Default)]
pub(crate) struct Snapshots {
    gz: Vec<u8>,
    next: usize,
}

impl Snapshots {
    /// Adds a chunk; returns the snapshot's ANSI when it was the last one.
    pub(crate) fn push(&mut self, frame: &[u8]) -> Result<Option<Vec<u8>>> {
        let (index, total) = (frame[1] as usize, frame[2] as usize);
        if index != self.next || index >= total {
            bail!(
                "snapshot chunk {index}/{total} arrived, expected chunk {}",
                self.next
            );
        }
        self.gz.extend_from_slice(&frame[3..]);
        self.next += 1;
        if self.next < total {
            return Ok(None);
        }
        self.next = 0;
        let mut ansi = Vec::new();
        flate2::read::GzDecoder::new(&self.gz[..])
            .read_to_end(&mut ansi)
            .context("gunzip of a snapshot")?;
        self.gz.clear();
        Ok(Some(ansi))
    }
}

/// A client while it sets up: joins, waits for text, types. Measuring loops read `ws` directly.
/// `S` is the socket: TCP or TLS (`open`, `open_tls`), or TCP keeping wire times (`open_wire`).
pub(crate) struct Conn<S = MaybeTlsStream<TcpStream>> {
    pub(crate) ws: WebSocketStream<S>,
    url: String,
    ready: bool,
    /// Output and snapshot text seen so far (set-up only, so small).
    seen: Vec<u8>,
    /// Snapshot chunks being reassembled (the join's, then any resync's).
    pub(crate) snapshots: Snapshots,
    /// Connect to `ready`.
    pub(crate) join_time: Duration,
    /// `viewers` of the newest `status`.
    viewers: u64,
}

impl Conn {
    /// Connects and reads until `ready`.
    pub(crate) async fn open(url: String) -> Result<Conn> {
        Self::open_tls(url, None).await
    }

    /// `open`, over TLS trusting what `tls` trusts.
    pub(crate) async fn open_tls(
        url: String,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Conn> {
        let start = Instant::now();
        let ws = connect_tls(&url, tls).await?;
        Conn::join(ws, url, start).await
    }

    /// `open` over a socket whose reads keep their kernel receive time, in the returned clock.
    pub(crate) async fn open_wire(url: String) -> Result<(Conn<Stamped>, WireClock)> {
        let start = Instant::now();
        let request = url.as_str().into_client_request()?;
        let authority = request
            .uri()
            .authority()
            .with_context(|| format!("{url}: no host"))?
            .to_string();
        let connecting = async {
            let tcp = TcpStream::connect(&authority).await?;
            tcp.set_nodelay(true)?;
            let (stamped, clock) = Stamped::new(tcp)?;
            let (ws, _) = tokio_tungstenite::client_async(request, stamped).await?;
            Ok::<_, anyhow::Error>((ws, clock))
        };
        let (ws, clock) = tokio::time::timeout(STEP_TIMEOUT, connecting)
            .await
            .map_err(|_| anyhow!("connecting to {url}: no answer within {STEP_TIMEOUT:?}"))?
            .with_context(|| format!("connecting to {url}"))?;
        Ok((Conn::join(ws, url, start).await?, clock))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Reads until `ready`; the join time counts from `start`.
    async fn join(ws: WebSocketStream<S>, url: String, start: Instant) -> Result<Conn<S>> {
        let mut conn = Conn {
            ws,
            url,
            ready: false,
            seen: Vec::new(),
            snapshots: Snapshots::default(),
            join_time: Duration::ZERO,
            viewers: 0,
        };
        let deadline = start + STEP_TIMEOUT;
        while !conn.ready {
            conn.read_one(deadline, "ready").await?;
        }
        conn.join_time = start.elapsed();
        Ok(conn)
    }

    /// Reads until `needle` has been drawn (in output or a snapshot).
    pub(crate) async fn wait_text(&mut self, needle: &str) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while !contains(&self.seen, needle.as_bytes()) {
            self.read_one(deadline, needle).await?;
        }
        Ok(())
    }

    /// Reads until the newest `status` counts `n` viewers.
    pub(crate) async fn wait_viewers(&mut self, n: u64) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while self.viewers != n {
            self.read_one(deadline, &format!("status with {n} viewers"))
                .await?;
        }
        Ok(())
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let sending = self.ws.send(Message::Binary(bytes.to_vec()));
        tokio::time::timeout(STEP_TIMEOUT, sending)
            .await
            .map_err(|_| anyhow!("{}: send blocked for {STEP_TIMEOUT:?}", self.url))?
            .with_context(|| format!("sending to {}", self.url))
    }

    async fn read_one(&mut self, deadline: Instant, waiting_for: &str) -> Result<()> {
        let msg = match timeout_at(deadline.into(), self.ws.next()).await {
            Err(_) => bail!(
                "{}: no {waiting_for:?} within {STEP_TIMEOUT:?}; last output {}",
                self.url,
                tail(&self.seen)
            ),
            Ok(None) => bail!("{}: connection closed", self.url),
            Ok(Some(Err(e))) => bail!("{}: connection failed: {e}", self.url),
            Ok(Some(Ok(msg))) => msg,
        };
        match msg {
            Message::Binary(b) if is_snapshot_chunk(&b) => {
                if let Some(ansi) = self.snapshots.push(&b)? {
                    self.seen.extend_from_slice(&ansi);
                }
            }
            Message::Binary(b) => self.seen.extend_from_slice(&b),
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t)
                    .with_context(|| format!("{}: server sent bad JSON {t:?}", self.url))?;
                match v["type"].as_str() {
                    Some("ready") => self.ready = true,
                    Some("status") => self.viewers = v["viewers"].as_u64().unwrap_or(0),
                    Some("error") => bail!("{}: server error {t}", self.url),
                    _ => {}
                }
            }
            Message::Close(frame) => bail!("{}: server closed the connection: {frame:?}", self.url),
            _ => {}
        }
        Ok(())
    }
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    // memmem, not a naive scan: 100 readers look for the end marker in every snapshot and
    // output frame of a flood, on the cores the daemon runs on.
    memchr::memmem::find(hay, needle).is_some()
}

pub(crate) fn tail(b: &[u8]) -> String {
    format!(
        "{:?}",
        String::from_utf8_lossy(&b[b.len().saturating_sub(200)..])
    )
}

/// Closes with a close frame and reads to the server's answer, bounded, so that the daemon sees
/// a clean leave before the next join.
pub(crate) async fn close_ws(mut ws: Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = ws.close(None).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}
