//! Server-sent event streams (docs/protocol.md section 14): the wire encoding, `Last-Event-ID`
//! resume, heartbeat comments, and the two streams: the daemon's lifecycle events and a
//! session's output as text lines.
//!
//! hyper polls each stream's body as the client reads: a client that stops reading stalls only
//! its own stream, never a session (the log stream reads the session's output log like any
//! viewer, and is resynced with `reset` if it falls out of it).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::connections::Slot;
use crate::auth::{Access, Ended, Limits};
use crate::journal::{Since, KEPT};
use crate::session::output_log::FellBehind;
use crate::term::lines::{Line, Lines};

use super::*;

/// How often a quiet stream sends a comment: proxies keep it open, and a client whose network
/// vanished always has data unacknowledged, so `limits.dead_peer_timeout` bounds how long it
/// takes to notice it (`dead_peer.rs`).
pub use super::dead_peer::HEARTBEAT;
/// The comment, which every client ignores.
pub const HEARTBEAT_LINE: &str = ": keep-alive\n\n";
/// Events sent when the client names no starting point.
const DEFAULT_TAIL: usize = 100;
/// Output read from the log per step.
const LOG_BATCH: usize = 64 * 1024;

/// Appends one event in the wire format: `id:`, `event:` (none: a `message`), and one `data:`
/// line per line of `data`, then the blank line that ends it.
pub fn encode(out: &mut String, id: Option<u64>, event: Option<&str>, data: &str) {
    if let Some(id) = id {
        out.push_str(&format!("id: {id}\n"));
    }
    if let Some(event) = event {
        out.push_str("event: ");
        out.push_str(event);
        out.push('\n');
    }
    // Any of the spec's line ends (CRLF, CR, LF) splits data lines; a reader joins them with
    // "\n". One pass over the text for both ends (an exec's output is mostly short lines).
    let bytes = data.as_bytes();
    let mut start = 0;
    let mut lf_of_crlf = None;
    for end in memchr::memchr2_iter(b'\r', b'\n', bytes) {
        if lf_of_crlf == Some(end) {
            start = end + 1;
            continue;
        }
        out.push_str("data: ");
        out.push_str(&data[start..end]);
        out.push('\n');
        if bytes[end] == b'\r' && bytes.get(end + 1) == Some(&b'\n') {
            lf_of_crlf = Some(end + 1);
        }
        start = end + 1;
    }
    out.push_str("data: ");
    out.push_str(&data[start..]);
    out.push('\n');
    out.push('\n');
}

/// The client side of a stream: what its task writes to.
pub(super) struct Sink(mpsc::Sender<Bytes>);

impl Sink {
    /// Sends text; `false` once the client is gone.
    pub(super) async fn send(&self, text: String) -> bool {
        text.is_empty() || self.0.send(Bytes::from(text)).await.is_ok()
    }

    /// Resolves once the client is gone.
    pub(super) async fn closed(&self) {
        self.0.closed().await
    }
}

/// A stream's two ends: the sink its task writes to, and the `text/event-stream` response
/// hyper drains as the client reads (at most `queue` writes wait in between).
pub(super) fn channel(queue: usize) -> (Sink, Response<Body>) {
    let (tx, rx) = mpsc::channel(queue);
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let bytes = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), rx))
    });
    let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
    event_stream_headers(&mut resp);
    (Sink(tx), resp)
}

/// The headers every event stream's response carries.
fn event_stream_headers(resp: &mut Response<Body>) {
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tells proxies such as nginx not to buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// What a long-lived stream produces: its next piece of text, or `None` at its end.
///
/// `next` keeps everything in `self` across its awaits, so dropping it at one (for a
/// keep-alive comment, or at shutdown) loses nothing: the next call carries on.
trait Follower: Send + 'static {
    fn next(&mut self) -> impl std::future::Future<Output = Option<String>> + Send;
}

/// Counts a stream in `ptyhub_sse_streams` of the metrics it holds while it lives.
struct Counted(Arc<crate::metrics::Metrics>);

impl Counted {
    fn new(metrics: Arc<crate::metrics::Metrics>) -> Counted {
        metrics.sse_streams.add(1);
        Counted(metrics)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.sse_streams.sub(1);
    }
}

/// A `text/event-stream` response whose body hyper polls straight from `follower` as the
/// client reads: no task or queue of its own, so an idle follower costs only its state. A
/// comment goes out after [`HEARTBEAT`] without anything sent. It ends when the follower
/// does, the daemon shuts down, or the client goes (hyper drops it).
fn stream<F: Follower>(
    state: &Arc<AppState>,
    slot: &Slot,
    follower: F,
    limits: Limits,
) -> Response<Body> {
    if let Err(e) = long_lived(slot, &state.metrics) {
        return e.response();
    }
    let shutdown = state.shutdown.clone();
    let ping_at = tokio::time::Instant::now() + HEARTBEAT;
    let counted = Counted::new(state.metrics.clone());
    let start = (follower, shutdown, counted, ping_at, Some(limits));
    let frames = futures_util::stream::unfold(start, |state| async move {
        let (mut follower, shutdown, counted, ping_at, limits) = state;
        // Ended by its credential's end: the event that says why was the last.
        let limits = limits?;
        // The follower first: what it has ready is sent, also while the daemon shuts down.
        let (text, limits) = tokio::select! {
            biased;
            text = follower.next() => (text?, Some(limits)),
            _ = tokio::time::sleep_until(ping_at) => (HEARTBEAT_LINE.to_owned(), Some(limits)),
            _ = shutdown.cancelled() => return None,
            why = limits.wait() => (access_ended(why), None),
        };
        let frame = Ok::<_, Infallible>(Frame::data(Bytes::from(text)));
        let ping_at = tokio::time::Instant::now() + HEARTBEAT;
        Some((frame, (follower, shutdown, counted, ping_at, limits)))
    });
    let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
    event_stream_headers(&mut resp);
    resp
}

/// The last event of a stream whose share link or API token was revoked or expired:
/// `event: access_ended`, `data: {"reason":"token revoked"}`.
pub(super) fn access_ended(why: Ended) -> String {
    let mut out = String::new();
    let data = json!({"reason": why.reason()}).to_string();
    encode(&mut out, None, Some("access_ended"), &data);
    out
}

/// The query and header every stream takes.
struct StreamQuery {
    follow: bool,
    tail: Option<usize>,
    last_id: Option<u64>,
}

fn stream_query(req: &Request<Incoming>) -> Result<StreamQuery, ApiError> {
    let mut q = StreamQuery {
        follow: false,
        tail: None,
        last_id: None,
    };
    let bad = |what: &str| ApiError(StatusCode::BAD_REQUEST, what.to_owned());
    for (k, v) in query_pairs(req) {
        match k.as_str() {
            "follow" => q.follow = matches!(v.as_str(), "1" | "true" | "yes"),
            "tail" => {
                q.tail = Some(
                    v.parse()
                        .map_err(|_| bad("tail must be a non-negative integer"))?,
                )
            }
            "lastEventId" => {
                q.last_id = Some(
                    v.parse()
                        .map_err(|_| bad("lastEventId must be an event id (an integer)"))?,
                )
            }
            _ => {}
        }
    }
    if let Some(v) = req.headers().get("last-event-id") {
        let id = v.to_str().ok().and_then(|s| s.trim().parse().ok());
        q.last_id = Some(id.ok_or_else(|| bad("Last-Event-ID must be an event id (an integer)"))?);
    }
    Ok(q)
}

/// `GET /api/events`: the lifecycle events, the last `tail` (or those after `Last-Event-ID`),
/// then with `follow=1` live ones. A share link sees only its own session's.
pub(super) fn events(
    req: Request<Incoming>,
    access: &Access,
    state: &Arc<AppState>,
    slot: &Slot,
) -> Response<Body> {
    let q = match stream_query(&req) {
        Ok(q) => q,
        Err(e) => return e.response(),
    };
    let only: Option<Uuid> = access.only();
    let journal = state.registry.journal().clone();
    let tail = q.tail.unwrap_or(DEFAULT_TAIL).min(KEPT);
    // Read before `since`: what it returns is at least this new. Not the id asked for, which
    // may be from another run of the daemon (reset) or past a `tail`.
    let last = journal.newest();
    let first = Some(journal.since(q.last_id, tail));
    let follower = Events {
        journal,
        only,
        follow: q.follow,
        first,
        last,
        done: false,
    };
    stream(state, slot, follower, access.limits())
}

/// The lifecycle event stream's state between reads.
struct Events {
    journal: Arc<crate::journal::Journal>,
    only: Option<Uuid>,
    follow: bool,
    /// What the request asked for, until it is sent.
    first: Option<Since>,
    /// The newest event id sent, skipped, or older than what the client asked for.
    last: u64,
    done: bool,
}

impl Follower for Events {
    async fn next(&mut self) -> Option<String> {
        loop {
            if self.done {
                return None;
            }
            let since = match self.first.take() {
                Some(first) => first,
                None => self.journal.since(Some(self.last), KEPT),
            };
            let mut out = String::new();
            let events = match since {
                Since::Events(events) => events,
                Since::Reset { oldest, events } => {
                    let data = json!({"oldest": oldest}).to_string();
                    encode(&mut out, None, Some("reset"), &data);
                    events
                }
            };
            for e in events {
                self.last = self.last.max(e.id);
                if self.only.is_none_or(|s| e.session == Some(s)) {
                    encode(&mut out, Some(e.id), Some(e.kind), &e.data.to_string());
                }
            }
            self.done = !self.follow;
            if !out.is_empty() {
                return Some(out);
            }
            if self.done {
                return None;
            }
            self.journal.wait_past(self.last).await;
        }
    }
}

/// `GET /api/sessions/{id}/log`: the session's output as text lines (escape sequences removed,
/// carriage returns applied), each with the stream offset after it as its id; then, with
/// `follow=1`, new lines as they come; `exit` when the program ends.
pub(super) fn log(
    req: Request<Incoming>,
    id: Uuid,
    access: &Access,
    state: &Arc<AppState>,
    slot: &Slot,
) -> Response<Body> {
    let q = match stream_query(&req) {
        Ok(q) => q,
        Err(e) => return e.response(),
    };
    let Some(handle) = state.registry.get(&id) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    let log = handle.log().clone();
    let mut out = String::new();
    // Where to start, and how many of the first lines to show.
    let (at, keep) = match q.last_id {
        Some(id) if id >= log.start() && id <= log.head() => (id, None),
        Some(_) => {
            let data = json!({"oldest": log.start()}).to_string();
            encode(&mut out, None, Some("reset"), &data);
            (log.start(), None)
        }
        None => (log.start(), Some(q.tail.unwrap_or(DEFAULT_TAIL))),
    };
    let follower = LogLines {
        cursor: log.cursor(at),
        log,
        info: handle.watch_info(),
        ended: handle.ended(),
        follow: q.follow,
        out,
        at,
        keep,
        lines: Lines::new(),
        found: Vec::new(),
        done: false,
    };
    stream(state, slot, follower, access.limits())
}

/// The session log stream's state between reads.
struct LogLines {
    log: Arc<crate::session::output_log::SharedLog>,
    /// `at`, for the log: it keeps what this stream has still to read.
    cursor: crate::session::output_log::Cursor,
    info: tokio::sync::watch::Receiver<Arc<crate::session::SessionInfo>>,
    ended: tokio_util::sync::CancellationToken,
    follow: bool,
    /// Text not yet sent (a `reset`).
    out: String,
    /// The stream offset read up to.
    at: u64,
    /// How many of the first lines to show (`tail`), until they are sent.
    keep: Option<usize>,
    lines: Lines,
    found: Vec<Line>,
    done: bool,
}

impl Follower for LogLines {
    async fn next(&mut self) -> Option<String> {
        loop {
            if self.done {
                return None;
            }
            // Everything the log holds past `at`, as lines. The buffer lives only while there
            // is output to read: an idle follower holds next to nothing.
            let mut buf = Vec::new();
            loop {
                buf.clear();
                let next = match self.log.read(self.at, LOG_BATCH, &mut buf) {
                    Ok(next) => next,
                    Err(FellBehind) => {
                        // This reader was too slow for the window: start over at its oldest.
                        let data = json!({"oldest": self.log.start()}).to_string();
                        encode(&mut self.out, None, Some("reset"), &data);
                        self.at = self.log.start();
                        self.cursor.set(self.at);
                        self.lines = Lines::new();
                        self.found.clear();
                        continue;
                    }
                };
                if next == self.at {
                    break;
                }
                self.lines.feed(&buf, self.at, &mut self.found);
                self.at = next;
                self.cursor.set(next);
                if self.keep.is_none() && !self.found.is_empty() {
                    for line in self.found.drain(..) {
                        encode(&mut self.out, Some(line.offset), None, &line.text);
                    }
                    return Some(std::mem::take(&mut self.out));
                }
                // A tail of a full log reads megabytes: the thread is shared.
                tokio::task::yield_now().await;
            }
            if let Some(n) = self.keep.take() {
                let skip = self.found.len().saturating_sub(n);
                for line in self.found.drain(..).skip(skip) {
                    encode(&mut self.out, Some(line.offset), None, &line.text);
                }
                // Every line of the log may have been here: its room is not kept.
                self.found = Vec::new();
            }
            let now = self.info.borrow_and_update().clone();
            if !now.alive || self.ended.is_cancelled() {
                let data = json!({"exit_code": now.exit_code, "signal": now.exit_signal});
                encode(&mut self.out, None, Some("exit"), &data.to_string());
                self.done = true;
                return Some(std::mem::take(&mut self.out));
            }
            self.done = !self.follow;
            if !self.out.is_empty() {
                return Some(std::mem::take(&mut self.out));
            }
            if self.done {
                return None;
            }
            tokio::select! {
                _ = self.log.wait_past(self.at) => {}
                _ = self.info.changed() => {}
                _ = self.ended.cancelled() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Every line end the spec knows splits a data line, exactly as replacing CRLF and CR
        /// by LF and splitting there would.
        #[test]
        fn data_lines_split_at_every_line_end(data in "[a\\r\\n\u{e9}]{0,40}") {
            let mut out = String::new();
            encode(&mut out, None, None, &data);
            let mut want = String::new();
            for line in data.replace("\r\n", "\n").replace('\r', "\n").split('\n') {
                want.push_str("data: ");
                want.push_str(line);
                want.push('\n');
            }
            want.push('\n');
            proptest::prop_assert_eq!(out, want);
        }
    }

    #[test]
    fn events_in_the_wire_format() {
        let mut out = String::new();
        encode(&mut out, Some(7), Some("state"), "{\"a\":1}");
        assert_eq!(out, "id: 7\nevent: state\ndata: {\"a\":1}\n\n");
        out.clear();
        encode(&mut out, None, None, "two\nlines\r\nand\rmore");
        assert_eq!(out, "data: two\ndata: lines\ndata: and\ndata: more\n\n");
        out.clear();
        encode(&mut out, Some(1), None, "");
        assert_eq!(out, "id: 1\ndata: \n\n");
    }
}
