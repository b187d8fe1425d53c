//! A soak viewer: its sending half with the waits a worker needs (for output, a JSON message,
//! the close), and its reading half, a task that verifies every counter it sees whole.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

use super::Env;
use crate::client::{connect, contains, is_snapshot_chunk, Snapshots, Ws, STEP_TIMEOUT};
use crate::flood::MarkerScan;

/// What a viewer's reader passes on to the task driving it.
pub(super) enum Event {
    Output(Vec<u8>),
    /// A snapshot's ANSI (on join, or a resync).
    Snapshot(Vec<u8>),
    Json(Value),
    /// A counter this viewer saw from its beginning marker to its end.
    Counted(u64, Checked),
    /// The connection ended: the close code, if a close frame came.
    Closed(Option<u16>),
}

/// A joined viewer: its sending half here, its reading half in a task that verifies every
/// counter it sees whole and passes events on (the typist's all of them; others' until `ready`).
pub(super) struct Peer {
    sink: SplitSink<Ws, Message>,
    events: mpsc::UnboundedReceiver<Event>,
    pub(super) reader: JoinHandle<()>,
    url: String,
    /// JSON messages that came while waiting for something else.
    pub(super) pending: VecDeque<Value>,
    /// The join's snapshot, for the typist's next wait (a marker may be in it).
    backlog: VecDeque<Event>,
    /// The counters the reader reported.
    pub(super) counted: Vec<(u64, Checked)>,
    /// The last output bytes and JSON messages seen, for error messages.
    recent: Vec<u8>,
    recent_json: VecDeque<String>,
    /// `yoloMode` of the newest `status`.
    pub(super) yolo: Option<bool>,
}

impl Peer {
    /// Joins and reads to `ready`. With `linger0`, dropping it resets the TCP connection
    /// instead of closing it.
    pub(super) async fn open(
        env: &Arc<Env>,
        url: String,
        linger0: bool,
        typist: bool,
    ) -> Result<Peer> {
        let ws = connect(&url).await?;
        if linger0 {
            if let MaybeTlsStream::Plain(tcp) = ws.get_ref() {
                tcp.set_zero_linger().context("SO_LINGER")?;
            }
        }
        let (sink, stream) = ws.split();
        let (tx, events) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_peer(stream, tx, env.clone(), typist));
        let mut peer = Peer {
            sink,
            events,
            reader,
            url,
            pending: VecDeque::new(),
            backlog: VecDeque::new(),
            counted: Vec::new(),
            recent: Vec::new(),
            recent_json: VecDeque::new(),
            yolo: None,
        };
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut early = VecDeque::new();
        loop {
            match peer.next(deadline, "ready").await? {
                Event::Json(v) if v["type"] == "ready" => break,
                Event::Json(v) if v["type"] == "error" => bail!("{}: {v}", peer.url),
                Event::Closed(code) => bail!("{}: closed ({code:?}) before ready", peer.url),
                e @ Event::Snapshot(_) if typist => early.push_back(e),
                _ => {}
            }
        }
        peer.backlog = early;
        Ok(peer)
    }

    pub(super) async fn send(&mut self, msg: Message) -> Result<()> {
        let limit = Duration::from_secs(30);
        tokio::time::timeout(limit, self.sink.send(msg))
            .await
            .map_err(|_| anyhow!("{}: a send blocked for {limit:?}", self.url))?
            .with_context(|| format!("sending to {}", self.url))
    }

    pub(super) async fn next(&mut self, deadline: Instant, waiting_for: &str) -> Result<Event> {
        if let Some(e) = self.backlog.pop_front() {
            return Ok(e);
        }
        let event = match timeout_at(deadline.into(), self.events.recv()).await {
            Err(_) => bail!(
                "{}: no {waiting_for} in time; {}",
                self.url,
                self.last_seen()
            ),
            Ok(None) => bail!("{}: the reader ended; {}", self.url, self.last_seen()),
            Ok(Some(e)) => e,
        };
        match &event {
            Event::Counted(k, c) => self.counted.push((*k, c.clone())),
            Event::Output(b) | Event::Snapshot(b) => {
                self.recent
                    .extend_from_slice(&b[b.len().saturating_sub(200)..]);
                let excess = self.recent.len().saturating_sub(200);
                self.recent.drain(..excess);
            }
            Event::Json(v) => {
                if v["type"] == "status" {
                    self.yolo = v["yoloMode"].as_bool();
                }
                if self.recent_json.len() >= 4 {
                    self.recent_json.pop_front();
                }
                self.recent_json.push_back(v.to_string());
            }
            Event::Closed(_) => {}
        }
        Ok(event)
    }

    /// The last output and messages, for an error message.
    pub(super) fn last_seen(&self) -> String {
        format!(
            "last output {:?}, last messages {:?}",
            String::from_utf8_lossy(&self.recent),
            self.recent_json
        )
    }

    /// Reads until `marker` has come, in live output or in a snapshot.
    pub(super) async fn wait_output(&mut self, marker: &str, deadline: Instant) -> Result<()> {
        let mut scan = MarkerScan::new(marker.as_bytes().to_vec());
        loop {
            match self.next(deadline, marker).await? {
                Event::Output(b) if scan.feed(&b) => return Ok(()),
                Event::Snapshot(ansi) => {
                    scan.tail.clear();
                    if contains(&ansi, marker.as_bytes()) {
                        return Ok(());
                    }
                }
                Event::Json(v) => self.keep(v),
                Event::Closed(code) => bail!("{}: closed ({code:?}) before {marker}", self.url),
                _ => {}
            }
        }
    }

    /// Reads until a JSON message matching `want` (kept ones first).
    pub(super) async fn wait_json(
        &mut self,
        what: &str,
        deadline: Instant,
        want: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        if let Some(i) = self.pending.iter().position(&want) {
            return Ok(self.pending.remove(i).expect("position in range"));
        }
        loop {
            match self.next(deadline, what).await? {
                Event::Json(v) if want(&v) => return Ok(v),
                Event::Json(v) if v["type"] == "error" => bail!("{}: {v}", self.url),
                Event::Json(v) => self.keep(v),
                Event::Closed(code) => bail!("{}: closed ({code:?}) before {what}", self.url),
                _ => {}
            }
        }
    }

    /// Reads until the reader has reported on counter `k`, the connection ended, or
    /// `deadline` (then the counter's beginning was not seen).
    pub(super) async fn wait_counted(&mut self, k: u64, deadline: Instant) {
        while !self.counted.iter().any(|(x, _)| *x == k) {
            match self.next(deadline, "a counter's check").await {
                Ok(Event::Json(v)) => self.keep(v),
                Ok(Event::Closed(_)) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Reads until the connection ends; returns the close code.
    pub(super) async fn wait_closed(&mut self, deadline: Instant) -> Result<Option<u16>> {
        loop {
            if let Event::Closed(code) = self.next(deadline, "the close").await? {
                return Ok(code);
            }
        }
    }

    pub(super) fn keep(&mut self, v: Value) {
        if self.pending.len() >= 256 {
            self.pending.pop_front();
        }
        self.pending.push_back(v);
    }

    /// Leaves with a close frame, and waits (bounded) for the daemon's answer.
    pub(super) async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.sink.close()).await;
        let _ = self
            .wait_closed(Instant::now() + Duration::from_secs(2))
            .await;
        self.reader.abort();
    }

    /// Goes without a close frame: the socket is closed (or reset) under the daemon.
    pub(super) fn drop_abruptly(self) {
        self.reader.abort();
    }
}

/// Reads a viewer's stream to its end: verifies counters, counts resyncs, passes events on.
pub(super) async fn read_peer(
    mut stream: SplitStream<Ws>,
    tx: mpsc::UnboundedSender<Event>,
    env: Arc<Env>,
    typist: bool,
) {
    let mut tx = Some(tx);
    let mut snaps = Snapshots::default();
    let mut check = CounterCheck::default();
    let mut ready = false;
    let send = |tx: &mut Option<mpsc::UnboundedSender<Event>>, e: Event| {
        if tx.as_ref().is_some_and(|t| t.send(e).is_err()) {
            *tx = None;
        }
    };
    let code = loop {
        let msg = match stream.next().await {
            None | Some(Err(_)) => break None,
            Some(Ok(msg)) => msg,
        };
        match msg {
            Message::Binary(b) if is_snapshot_chunk(&b) => match snaps.push(&b) {
                Ok(Some(ansi)) => {
                    if ready {
                        env.add(|c| &c.resyncs, 1);
                    }
                    for (k, c) in check.resync() {
                        record(&env, &c, typist);
                        send(&mut tx, Event::Counted(k, c));
                    }
                    send(&mut tx, Event::Snapshot(ansi));
                }
                Ok(None) => {}
                Err(e) => {
                    env.fail(format!("a bad snapshot: {e:#}"));
                    break None;
                }
            },
            Message::Binary(b) => {
                for (k, c) in check.feed(&b) {
                    record(&env, &c, typist);
                    send(&mut tx, Event::Counted(k, c));
                }
                send(&mut tx, Event::Output(b));
            }
            Message::Text(t) => {
                let Ok(v) = serde_json::from_str::<Value>(&t) else {
                    env.fail(format!("the daemon sent bad JSON: {t:?}"));
                    continue;
                };
                let is_ready = v["type"] == "ready";
                send(&mut tx, Event::Json(v));
                if is_ready {
                    ready = true;
                    if !typist {
                        // Others only verify and count from here on.
                        tx = None;
                    }
                }
            }
            Message::Close(frame) => break frame.map(|f| u16::from(f.code)),
            _ => {}
        }
    };
    send(&mut tx, Event::Closed(code));
}

/// Files a counter's result in the counts (every viewer's), and a failure for a wrong one.
pub(super) fn record(env: &Env, c: &Checked, typist: bool) {
    match c {
        Checked::Verified { lines, bytes } => {
            env.add(|c| &c.counter_checks, 1);
            env.add(|c| &c.counter_lines, *lines);
            env.add(|c| &c.counter_bytes, *bytes);
        }
        Checked::Skipped => env.add(|c| &c.counter_skipped, 1),
        Checked::Wrong(why) => {
            env.add(|c| &c.counter_failures, 1);
            // The typist's driver reports its own, with the session.
            if !typist {
                env.fail(format!("a viewer's counter: {why}"));
            }
        }
    }
}

/// What a viewer found in one counter.
#[derive(Debug, Clone)]
pub(super) enum Checked {
    Verified {
        lines: u64,
        bytes: u64,
    },
    /// A snapshot (resync) came between its markers: nothing to verify.
    Skipped,
    Wrong(String),
}

/// Verifies `CNT-k-N-BEGIN`, the lines `1` to `N`, `CNT-k-END` in a stream, line by line.
#[derive(Default)]
pub(super) struct CounterCheck {
    line: Vec<u8>,
    block: Option<Block>,
}

/// A counter under way.
pub(super) struct Block {
    k: u64,
    n: u64,
    /// The number due on the next line.
    next: u64,
    bytes: u64,
}

impl CounterCheck {
    pub(super) fn feed(&mut self, data: &[u8]) -> Vec<(u64, Checked)> {
        let mut out = Vec::new();
        for piece in data.split_inclusive(|&b| b == b'\n') {
            let whole = piece.last() == Some(&b'\n');
            if whole && self.line.is_empty() {
                // The common case: a whole line in one frame, checked where it lies.
                self.on_line(piece, &mut out);
                continue;
            }
            self.line.extend_from_slice(piece);
            if whole {
                let line = std::mem::take(&mut self.line);
                self.on_line(&line, &mut out);
            } else if self.block.is_some() && self.line.len() > 64 {
                let b = self.block.take().expect("a block");
                let why = format!("a line of over 64 bytes after {}", b.next - 1);
                out.push((b.k, Checked::Wrong(why)));
                self.line.clear();
            } else if self.line.len() > 4096 {
                // Outside a counter only the end of a long line can matter.
                self.line.drain(..self.line.len() - 256);
            }
        }
        out
    }

    pub(super) fn on_line(&mut self, raw: &[u8], out: &mut Vec<(u64, Checked)>) {
        let line = raw.strip_suffix(b"\n").unwrap_or(raw);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(b) = self.block.as_mut() else {
            if let Some((k, n)) = parse_begin(line) {
                self.block = Some(Block {
                    k,
                    n,
                    next: 1,
                    bytes: 0,
                });
            }
            return;
        };
        if line == format!("CNT-{}-END", b.k).as_bytes() {
            let result = if b.next == b.n + 1 {
                Checked::Verified {
                    lines: b.n,
                    bytes: b.bytes,
                }
            } else {
                Checked::Wrong(format!("ended after {} of {} lines", b.next - 1, b.n))
            };
            out.push((b.k, result));
            self.block = None;
            return;
        }
        let number = std::str::from_utf8(line)
            .ok()
            .and_then(|l| l.parse::<u64>().ok());
        if number == Some(b.next) && b.next <= b.n {
            b.next += 1;
            b.bytes += raw.len() as u64;
        } else {
            let why = format!(
                "{:?} where line {} was due",
                String::from_utf8_lossy(&line[..line.len().min(64)]),
                b.next
            );
            out.push((b.k, Checked::Wrong(why)));
            self.block = None;
        }
    }

    /// A snapshot replaced the stream: a counter under way cannot be verified.
    pub(super) fn resync(&mut self) -> Vec<(u64, Checked)> {
        self.line.clear();
        self.block
            .take()
            .map(|b| (b.k, Checked::Skipped))
            .into_iter()
            .collect()
    }
}

/// `…CNT-k-N-BEGIN` (whatever the terminal put before it) → `(k, N)`.
pub(super) fn parse_begin(line: &[u8]) -> Option<(u64, u64)> {
    if !line.ends_with(b"-BEGIN") {
        return None;
    }
    let text = std::str::from_utf8(line).ok()?;
    let rest = &text[text.rfind("CNT-")? + 4..];
    let mut parts = rest.strip_suffix("-BEGIN")?.split('-');
    let k = parts.next()?.parse().ok()?;
    let n = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((k, n))
}
