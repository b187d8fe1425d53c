//! One WebSocket connection of any dialect: decodes its messages into requests (through the
//! [`Dialect`]), applies them with [`crate::protocol::apply`], and writes it the session's
//! output from its own position in the output log.
//!
//! Reads and writes run on separate tasks because a fastwebsockets read is not cancel-safe.
//! The writer never holds the session up: it copies from the shared log at its own pace, and
//! when it has fallen out of the log's window, stayed unwritable past the stall deadline, or
//! used up its flow-control budget, it is resynced with a snapshot instead of the backlog.
//! While it is idle and caught up, the session actor writes new output to its socket itself
//! ([`live`]).

pub mod frame_rules;
pub mod live;
pub mod mux;
pub mod reader;
pub mod socket;

use std::sync::Arc;
use std::time::Duration;

use fastwebsockets::{Frame, OpCode, WebSocket, WebSocketError};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::metrics::METRICS;

use crate::config::Config;
use crate::protocol::{Dialect, Notice, Outbound};
use crate::session::event_queue::{self, EventReceiver};
use crate::session::output_log::FellBehind;
use crate::session::{
    EncodedSnapshot, EndReason, JoinError, JoinReply, Role, SessionHandle, ViewerEvent,
};
use live::Live;
use reader::{read_loop, Local, Replies, SessionMessages};

type Io = TokioIo<Upgraded>;

/// Bytes of output copied from the log per write batch.
const BATCH_BYTES: usize = 64 * 1024;
/// After the session has ended, how long a stuck writer may take to deliver its close frame.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How this viewer connected.
#[derive(Debug, Clone, Default)]
pub struct ViewerOptions {
    /// `?flow=ack`: the client acknowledges drawn bytes and the server bounds what is unacknowledged.
    pub flow_ack: bool,
    /// The viewer may watch and chat but not change the session.
    pub read_only: bool,
    /// Cancelled when the share link it connected with is revoked.
    pub revoked: Option<CancellationToken>,
    /// When the share link it connected with expires.
    pub expires: Option<std::time::SystemTime>,
    /// The client's terminal size given when connecting (rows, cols), applied as its first
    /// resize once it has joined.
    pub initial_size: Option<(u16, u16)>,
}

/// Tells the client why (in its dialect) and closes with `code`; for connections refused
/// after the upgrade.
pub async fn refuse<D: Dialect>(
    mut ws: WebSocket<Io>,
    dialect: &D,
    code: u16,
    notice: Notice<'_>,
    reason: &str,
) {
    let frame = match dialect.notice(notice) {
        Some(Outbound::Text(t)) => Some(Frame::text(t.into_bytes().into())),
        Some(Outbound::Binary(b)) => Some(Frame::binary(b.into())),
        None => None,
    };
    if let Some(frame) = frame {
        let _ = ws.write_frame(frame).await;
    }
    let _ = ws.write_frame(Frame::close(code, reason.as_bytes())).await;
}

/// Serves one viewer of `session`, speaking `dialect`, until either side closes.
pub async fn run<D: Dialect>(
    ws: WebSocket<Io>,
    session: SessionHandle,
    cfg: Arc<Config>,
    opts: ViewerOptions,
    dialect: D,
) {
    let dialect = Arc::new(dialect);
    // Split by hand rather than with `WebSocket::split`: the reader task keeps the raw read
    // half, so after refusing a message it can drain what the client is still sending and
    // the close frame reaches it (closing with unread input would reset the connection). The
    // writer builds its frames itself, to send a whole batch in one write.
    let halves = socket::split(ws.into_inner());
    let live = Live::new(
        halves.tcp,
        opts.flow_ack,
        cfg.viewer.flow_budget_bytes,
        live::push_output::<D>,
    );
    let share_end = ShareEnd::new(opts.revoked.clone(), opts.expires);
    let mut writer = Writer {
        ws: halves.write,
        live: live.clone(),
        session: session.clone(),
        opts: opts.clone(),
        stall_deadline: cfg.viewer.stall_deadline,
        buf: Vec::with_capacity(BATCH_BYTES),
        out: Vec::with_capacity(BATCH_BYTES + BATCH_BYTES / 512),
        share_end: share_end.clone(),
        mid_frame: false,
        dialect: dialect.clone(),
    };
    let (events_tx, mut events) =
        event_queue::channel(event_queue::MAX_EVENTS, event_queue::MAX_EVENT_BYTES);
    // Cancelled when this viewer lets what is addressed to it pile up (session events or its
    // own replies): it is closed rather than buffered for.
    let overrun = events.overrun();
    let role = if opts.read_only {
        Role::Viewer
    } else {
        Role::Writer
    };
    let (membership, join) = match session
        .join(role, events_tx, live, dialect.snapshot_form())
        .await
    {
        Ok(joined) => joined,
        Err(full @ JoinError::TooManyViewers(_)) => {
            info!(session = %session.id(), reason = %full, "refused viewer");
            let why = full.to_string();
            let _ = writer.notice(Notice::TooManyViewers(&why)).await;
            let _ = writer.close(1013, "too many viewers").await;
            return;
        }
        Err(JoinError::Gone(_)) => {
            let _ = writer.close_for(EndReason::Deleted).await;
            return;
        }
    };
    let viewer = membership.viewer();
    debug!(session = %session.id(), viewer, "viewer joined");
    if let Some((rows, cols)) = opts.initial_size {
        // As if the client had sent it: a read-only viewer is told it was refused.
        if session.resize(viewer, rows, cols).await.is_err() {
            return;
        }
    }

    let (replies, mut local) = Replies::channel(cfg.viewer.stall_deadline, overrun.clone());
    let max_message = cfg.viewer.max_message_bytes;
    let messages = SessionMessages {
        session: session.clone(),
        viewer,
        dialect,
    };
    let read_task = tokio::spawn(read_loop(halves.read, replies, max_message, messages));

    let ended = session.ended();
    let result = tokio::select! {
        r = async {
            writer.greet(join).await?;
            writer.write_loop(&mut events, &mut local).await
        } => r,
        // A writer stuck on an unwritable socket cannot deliver the close frame: drop it.
        _ = async { ended.cancelled().await; tokio::time::sleep(CLOSE_GRACE).await } => Ok(()),
        _ = async { share_end.wait().await; tokio::time::sleep(CLOSE_GRACE).await } => Ok(()),
        _ = overrun.cancelled() => {
            info!(session = %session.id(), viewer, "closing a viewer that is not reading what it is sent");
            METRICS.error("not_reading");
            writer.try_close(1008, "not reading: too much queued for this connection").await;
            Ok(())
        }
    };
    if let Err(e) = result {
        debug!(session = %session.id(), viewer, "viewer connection ended: {e}");
    }
    drop(membership);
    // The reader ends by itself when the peer answers our close; don't wait for a silent one.
    let abort = read_task.abort_handle();
    if tokio::time::timeout(CLOSE_GRACE, read_task).await.is_err() {
        abort.abort();
    }
    debug!(session = %session.id(), viewer, "viewer left");
}

/// When a share link stops letting its connections in: revoked, or expired.
#[derive(Clone, Default)]
pub(crate) struct ShareEnd {
    revoked: CancellationToken,
    at: Option<Instant>,
}

impl ShareEnd {
    /// For a link revoked through `revoked` and expiring at `expires` (neither: never ends).
    pub(crate) fn new(
        revoked: Option<CancellationToken>,
        expires: Option<std::time::SystemTime>,
    ) -> Self {
        ShareEnd {
            revoked: revoked.unwrap_or_default(),
            at: expires.map(|t| {
                Instant::now()
                    + t.duration_since(std::time::SystemTime::now())
                        .unwrap_or_default()
            }),
        }
    }

    /// Whether the link has already ended.
    pub(crate) fn is_over(&self) -> bool {
        self.revoked.is_cancelled() || self.at.is_some_and(|at| at <= Instant::now())
    }

    /// Resolves with the close reason once the link is revoked or expired.
    pub(crate) async fn wait(&self) -> &'static str {
        let expiry = async {
            match self.at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.revoked.cancelled() => "share link revoked",
            _ = expiry => "share link expired",
        }
    }
}

/// Why the write loop stopped.
type WriteResult = Result<(), WebSocketError>;

struct Writer<D> {
    ws: socket::WriteSide,
    /// The position in the live stream, shared with the session actor.
    live: Arc<Live>,
    session: SessionHandle,
    opts: ViewerOptions,
    stall_deadline: Duration,
    /// Output copied from the log.
    buf: Vec<u8>,
    /// Frames to write, back to back.
    out: Vec<u8>,
    share_end: ShareEnd,
    /// A write was cut off part way (the connection is being dropped): no further frame may
    /// follow it on the wire.
    mid_frame: bool,
    /// The client's dialect.
    dialect: Arc<D>,
}

/// What woke an idle writer.
enum Woke {
    Local(Option<Local>),
    Event(Option<ViewerEvent>),
    Output,
    ShareEnd(&'static str),
}

impl<D: Dialect> Writer<D> {
    /// Everything a joiner gets before live output, in protocol order.
    async fn greet(&mut self, join: JoinReply) -> WriteResult {
        let JoinReply {
            snapshot,
            offset,
            exit,
            chat,
            ..
        } = join;
        if let Some(snapshot) = snapshot {
            self.send_snapshot(&snapshot).await?;
        }
        self.live.lock().offset = offset;
        for line in &chat {
            self.notice(Notice::Chat(line)).await?;
        }
        self.notice(Notice::Ready).await?;
        if let Some(info) = exit {
            self.notice(Notice::Exit(&info)).await?;
        }
        Ok(())
    }

    fn budget_left(&self) -> u64 {
        self.live.lock().budget_left(&self.live)
    }

    fn offset(&self) -> u64 {
        self.live.lock().offset
    }

    /// Takes the socket back from the actor: marks the writer busy and sends what the actor
    /// left half-written.
    async fn claim(&mut self) -> WriteResult {
        let leftover = {
            let mut st = self.live.lock();
            st.busy = true;
            std::mem::take(&mut st.leftover)
        };
        if !leftover.is_empty() {
            self.write_out(&leftover).await?;
        }
        Ok(())
    }

    /// Hands the socket to the actor unless output is already waiting; true when it did.
    fn release(&self) -> bool {
        let head = self.session.log().head();
        let mut st = self.live.lock();
        let waiting = head > st.offset && st.budget_left(&self.live) > 0;
        st.busy = waiting;
        !waiting
    }

    async fn write_out(&mut self, bytes: &[u8]) -> WriteResult {
        self.mid_frame = true;
        self.ws.write_all(bytes).await?;
        self.mid_frame = false;
        Ok(())
    }

    async fn write_loop(
        &mut self,
        events: &mut EventReceiver,
        local: &mut mpsc::Receiver<Local>,
    ) -> WriteResult {
        loop {
            self.claim().await?;
            // Control traffic first, so a flood cannot starve it.
            while let Ok(l) = local.try_recv() {
                if self.on_local(l).await? {
                    return Ok(());
                }
            }
            while let Some(ev) = events.try_recv() {
                if self.on_event(ev).await? {
                    return Ok(());
                }
            }
            if self.share_end.is_over() {
                let why = self.share_end.wait().await;
                return self.close(1008, why).await;
            }
            let backlog = self.session.log().head() > self.offset();
            if backlog && self.budget_left() > 0 {
                self.send_output(u64::MAX).await?;
                continue;
            }
            if !self.release() {
                continue;
            }
            let live = self.live.clone();
            let can_send = self.budget_left() > 0;
            let woke = tokio::select! {
                l = local.recv() => Woke::Local(l),
                ev = events.recv() => Woke::Event(ev),
                _ = live.woken(), if can_send => Woke::Output,
                why = self.share_end.wait() => Woke::ShareEnd(why),
            };
            self.claim().await?;
            match woke {
                Woke::Local(Some(l)) => {
                    if self.on_local(l).await? {
                        return Ok(());
                    }
                }
                Woke::Local(None) => return Ok(()),
                Woke::Event(Some(ev)) => {
                    if self.on_event(ev).await? {
                        return Ok(());
                    }
                }
                Woke::Event(None) => return self.close_for(EndReason::Deleted).await,
                Woke::Output => {}
                Woke::ShareEnd(why) => return self.close(1008, why).await,
            }
        }
    }

    /// Returns true when the connection is done.
    async fn on_local(&mut self, l: Local) -> Result<bool, WebSocketError> {
        match l {
            Local::Send(msg) => self.send_message(msg).await?,
            Local::Control(opcode, payload) => {
                let done = opcode == OpCode::Close;
                self.send_frame(opcode, &payload).await?;
                return Ok(done);
            }
            // Never more than was sent: an over-eager client cannot switch flow control off.
            Local::Ack(bytes) => {
                let mut st = self.live.lock();
                st.acked = st.acked.saturating_add(bytes).min(st.sent);
            }
            Local::Done(close) => {
                if let Some((code, reason)) = close {
                    self.close(code, reason).await?;
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Returns true when the connection is done.
    async fn on_event(&mut self, ev: ViewerEvent) -> Result<bool, WebSocketError> {
        match ev {
            ViewerEvent::Status { info, offset } => {
                // Output drawn at the old size comes before the new size.
                self.catch_up(offset).await?;
                let (session, read_only) = (self.session.id(), self.opts.read_only);
                self.notice(Notice::Status {
                    info: &info,
                    session,
                    read_only,
                })
                .await?;
            }
            ViewerEvent::Exit { info, offset } => {
                // The exit notice in the stream comes before the exit message.
                self.catch_up(offset).await?;
                self.notice(Notice::Exit(&info)).await?;
            }
            ViewerEvent::Chat(line) => self.notice(Notice::Chat(&line)).await?,
            ViewerEvent::Refused(refusal) => self.notice(Notice::Refused(&refusal)).await?,
            ViewerEvent::Close(reason) => {
                self.close_for(reason).await?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Sends output up to `offset` before an event that belongs after it; a flow=ack viewer
    /// out of budget is resynced instead (the snapshot is past `offset`).
    async fn catch_up(&mut self, offset: u64) -> WriteResult {
        while self.offset() < offset {
            if self.budget_left() == 0 {
                return self.resync("flow-control budget used up").await;
            }
            self.send_output(offset).await?;
        }
        Ok(())
    }

    /// Sends the next batch of output (up to `until`), or a snapshot if this viewer fell behind.
    async fn send_output(&mut self, until: u64) -> WriteResult {
        let offset = self.offset();
        let limit = (BATCH_BYTES as u64)
            .min(self.budget_left().max(1))
            .min(until.saturating_sub(offset).max(1)) as usize;
        self.buf.clear();
        let next = match self.session.log().read(offset, limit, &mut self.buf) {
            Ok(next) => next,
            Err(FellBehind) => return self.resync("fell out of the output window").await,
        };
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        live::push_output::<D>(&mut out, &self.buf);
        let started = Instant::now();
        // One write for the whole batch: a syscall per batch, not per frame.
        let written = self.write_out(&out).await;
        self.out = out;
        written?;
        METRICS.bytes_out.add(next - offset);
        {
            let mut st = self.live.lock();
            st.sent += next - offset;
            st.offset = next;
        }
        if started.elapsed() > self.stall_deadline && self.session.log().head() > next {
            return self
                .resync("socket unwritable past the stall deadline")
                .await;
        }
        Ok(())
    }

    async fn resync(&mut self, why: &str) -> WriteResult {
        let Ok(resync) = self.session.resync(self.dialect.snapshot_form()).await else {
            return self.close_for(EndReason::Deleted).await;
        };
        info!(session = %self.session.id(), why, "resyncing viewer with a snapshot");
        METRICS.resyncs.inc();
        if let Some(snapshot) = &resync.snapshot {
            self.send_snapshot(snapshot).await?;
        }
        self.live.lock().offset = resync.offset;
        Ok(())
    }

    async fn send_snapshot(&mut self, snapshot: &EncodedSnapshot) -> WriteResult {
        METRICS.snapshots.inc();
        let frames = self.dialect.snapshot(&snapshot.bytes);
        let mut out = Vec::with_capacity(snapshot.bytes.len() + frames.len() * 10);
        for frame in &frames {
            live::push_frame(&mut out, OpCode::Binary, frame);
        }
        self.write_out(&out).await
    }

    /// Tells the client `notice`, if its dialect has a way to say it.
    async fn notice(&mut self, notice: Notice<'_>) -> WriteResult {
        match self.dialect.notice(notice) {
            Some(msg) => self.send_message(msg).await,
            None => Ok(()),
        }
    }

    async fn send_message(&mut self, msg: Outbound) -> WriteResult {
        match msg {
            Outbound::Text(t) => self.send_frame(OpCode::Text, t.as_bytes()).await,
            Outbound::Binary(b) => self.send_frame(OpCode::Binary, &b).await,
        }
    }

    async fn send_frame(&mut self, opcode: OpCode, payload: &[u8]) -> WriteResult {
        let mut out = Vec::with_capacity(payload.len() + 10);
        live::push_frame(&mut out, opcode, payload);
        self.write_out(&out).await
    }

    async fn close(&mut self, code: u16, reason: &str) -> WriteResult {
        let frame = Frame::close(code, reason.as_bytes());
        self.send_frame(OpCode::Close, &frame.payload).await
    }

    async fn close_for(&mut self, reason: EndReason) -> WriteResult {
        let (code, why) = self.dialect.ended(reason);
        self.close(code, why).await
    }

    /// Sends a close frame if the wire is at a frame boundary and the socket takes it soon;
    /// for a connection about to be dropped.
    async fn try_close(&mut self, code: u16, reason: &str) {
        if !self.mid_frame {
            let _ = tokio::time::timeout(CLOSE_GRACE, self.close(code, reason)).await;
        }
    }
}
