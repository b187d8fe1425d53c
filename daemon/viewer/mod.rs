//! The driver of one viewer of one session, generic over its dialect and its transport:
//! decodes its messages into requests (through the [`Dialect`]), applies them to the session
//! ([`apply`]), and writes it the session's output from its own position in the output log
//! ([`subscription`]), framed by its [`transport`]. What the codecs say to count (their
//! `error` messages) is counted here.
//!
//! Reads and writes run on separate tasks because a fastwebsockets read is not cancel-safe
//! (the reader task and the socket's halves are [`crate::ws`]'s).
//! The writer never holds the session up: it copies from the shared log at its own pace, and
//! when it has fallen out of the log's window, stayed unwritable past the stall deadline, or
//! used up its flow-control budget, it is resynced with a snapshot instead of the backlog.
//! While it is idle and caught up, the session actor writes new output to its socket itself
//! ([`live`]).

pub mod apply;
pub mod live;
pub mod mux;
pub mod subscription;
pub mod transport;

use std::sync::Arc;

use fastwebsockets::Frame;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::{Closing, Dialect, Encoded, Notice, Outbound};
use crate::session::viewer_queue::{self, EventReceiver};
use crate::session::{EndReason, JoinError, JoinReply, Role, SessionHandle, ViewerEvent, Who};
use crate::ws::reader::{read_loop, Local, Replies};
use crate::ws::{socket, Accepted, CLOSE_GRACE};
use apply::SessionMessages;
use live::Live;
use subscription::{BehindPause, Framing, Pumped, Scratch, Subscription, RELEASE_AFTER};
use transport::{MessageKind, Sink, Transport, WriteResult};

/// How this viewer connected.
#[derive(Debug, Clone)]
pub struct ViewerOptions {
    /// `?flow=ack`: the client asked to acknowledge drawn bytes, so that the server bounds what
    /// is unacknowledged; honoured when its dialect has acknowledgements
    /// ([`Dialect::flow_ack`]).
    pub flow_ack: bool,
    /// What the viewer may do: a [`Role::Viewer`] watches and chats but does not change the
    /// session.
    pub role: Role,
    /// Who connects: a user's verified name, or a guest.
    pub who: Who,
    /// When the share link or API token it connected with stops letting it in.
    pub limits: crate::auth::Limits,
    /// The client's terminal size given when connecting (rows, cols), applied as its first
    /// resize once it has joined.
    pub initial_size: Option<(u16, u16)>,
    /// The daemon's counters, which the viewer's traffic and errors count in.
    pub metrics: Arc<Metrics>,
}

/// The message a codec built, its `error` (if it is one) counted in `metrics`.
pub(crate) fn counted(metrics: &Metrics, encoded: Encoded) -> Outbound {
    if let Some(code) = &encoded.error {
        metrics.error(code);
    }
    encoded.message
}

/// Tells the client why (in its dialect) and closes its connection; for connections refused
/// after the upgrade. An error told is counted in `metrics`.
pub async fn refuse<D: Dialect>(
    mut ws: Accepted,
    dialect: &D,
    why: Closing<'_>,
    metrics: &Metrics,
) {
    let told = dialect.notice(Notice::Closing(why));
    let frame = match told.map(|encoded| counted(metrics, encoded)) {
        Some(Outbound::Text(t)) => Some(Frame::text(t.into_bytes().into())),
        Some(Outbound::Binary(b)) => Some(Frame::binary(b.into())),
        None => None,
    };
    if let Some(frame) = frame {
        let _ = ws.write_frame(frame).await;
    }
    let (code, reason) = dialect.close(why);
    let _ = ws.write_frame(Frame::close(code, reason.as_bytes())).await;
}

/// Serves one viewer of `session`, speaking `dialect`, until either side closes.
pub async fn run<D: Dialect>(
    ws: Accepted,
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
    let transport = transport::WebSocket::new(halves.write, halves.tcp);
    let live = Live::new(
        transport.direct(),
        opts.flow_ack && dialect.flow_ack(),
        cfg.viewer.flow_budget_bytes,
        live::push_output::<D, transport::WebSocket>,
        opts.metrics.clone(),
    );
    let share_end = AccessEnd::new(opts.limits.clone());
    let mut writer = Writer {
        sink: Sink::new(transport),
        sub: Subscription::new(
            session.clone(),
            live.clone(),
            dialect.snapshot_form(),
            cfg.viewer.stall_deadline,
            opts.metrics.clone(),
        )
        .with_screens_only(),
        opts: opts.clone(),
        scratch: Scratch::new(),
        share_end: share_end.clone(),
        framing: DialectFraming(dialect.clone()),
        me: 0,
    };
    let (events_tx, mut events) =
        viewer_queue::channel(viewer_queue::MAX_EVENTS, viewer_queue::MAX_EVENT_BYTES);
    // Cancelled when this viewer lets what is addressed to it pile up (session events or its
    // own replies): it is closed rather than buffered for.
    let overrun = events.overrun();
    let (membership, join) = match session
        .join(
            opts.role,
            opts.who.clone(),
            events_tx,
            live,
            dialect.snapshot_form(),
        )
        .await
    {
        Ok(joined) => joined,
        Err(full @ JoinError::TooManyViewers(_)) => {
            info!(session = %session.id(), reason = %full, "refused viewer");
            let why = full.to_string();
            let _ = writer.close(Closing::TooManyViewers(&why)).await;
            return;
        }
        Err(JoinError::Gone(_)) => {
            let _ = writer.close(Closing::Ended(EndReason::Deleted)).await;
            return;
        }
        Err(JoinError::Screen(failed)) => {
            warn!(session = %session.id(), "refused viewer: {failed}");
            let _ = writer.close(Closing::ScreenFailed).await;
            return;
        }
    };
    let viewer = membership.viewer();
    writer.me = viewer;
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
        metrics: opts.metrics.clone(),
    };
    let read_task = tokio::spawn(read_loop(halves.read, replies, max_message, messages));

    let ended = session.ended();
    // A writer stuck on an unwritable socket cannot deliver the close frame: it is dropped.
    // One whose writes still go through (a slow client reading a flood's backlog) gets its
    // close, within reason.
    let progress = writer.sink.progress();
    let mut dropped = false;
    let result = tokio::select! {
        r = async {
            writer.greet(join).await?;
            writer.write_loop(&mut events, &mut local).await
        } => r,
        () = progress.stuck_after(ended.cancelled()) => { dropped = true; Ok(()) }
        () = progress.stuck_after(async { share_end.wait().await; }) => { dropped = true; Ok(()) }
        _ = overrun.cancelled() => {
            info!(session = %session.id(), viewer, "closing a viewer that is not reading what it is sent");
            opts.metrics.error("not_reading");
            let (code, why) = writer.dialect().close(Closing::NotReading);
            writer.sink.try_close(code, why, CLOSE_GRACE).await;
            Ok(())
        }
    };
    if let Err(e) = result {
        debug!(session = %session.id(), viewer, "viewer connection ended: {e}");
    }
    // The reader first: the frames it still holds (keys sent just before the socket broke,
    // which the writer may have found out first) are applied while this viewer is a member;
    // a departed viewer's input is dropped.
    crate::ws::reader::finish(read_task, !dropped).await;
    drop(membership);
    debug!(session = %session.id(), viewer, "viewer left");
}

/// When the share link or API token a connection came with stops letting it in: revoked,
/// or expired; and the close that says so.
#[derive(Clone, Default)]
pub(crate) struct AccessEnd(crate::auth::Limits);

impl AccessEnd {
    /// For a connection with these limits.
    pub(crate) fn new(limits: crate::auth::Limits) -> Self {
        AccessEnd(limits)
    }

    /// Whether the credential has already ended.
    pub(crate) fn is_over(&self) -> bool {
        self.0.is_over()
    }

    /// Resolves with why the connection closes once the credential is revoked or expired.
    pub(crate) async fn wait(&self) -> Closing<'static> {
        Closing::AccessEnded(self.0.wait().await)
    }
}

/// Frames in a one-session dialect: its output rules and its snapshot chunks.
struct DialectFraming<D>(Arc<D>);

impl<D: Dialect> Framing for DialectFraming<D> {
    fn output<T: Transport>(&self, out: &mut Vec<u8>, data: &[u8]) {
        live::push_output::<D, T>(out, data);
    }

    fn snapshot<T: Transport>(&self, out: &mut Vec<u8>, packed: &[u8]) {
        for chunk in self.0.snapshot(packed) {
            T::frame(out, MessageKind::Binary, &chunk);
        }
    }
}

/// The writer task of one viewer: owns the transport's write side.
struct Writer<D, T> {
    sink: Sink<T>,
    /// The session's output, from this viewer's position (shared with the session actor).
    sub: Subscription,
    opts: ViewerOptions,
    scratch: Scratch,
    share_end: AccessEnd,
    /// The client's dialect.
    framing: DialectFraming<D>,
    /// This viewer, once joined (for `presence`, so the client can tell itself apart).
    me: crate::session::ViewerId,
}

/// What woke an idle writer.
enum Woke {
    Local(Option<Local>),
    Event(Option<ViewerEvent>),
    Output,
    /// A pause after a resync for being behind is due to be looked at.
    PauseCheck,
    AccessEnd(Closing<'static>),
    /// Quiet for [`RELEASE_AFTER`] with large buffers: time to give them back.
    Quiet,
}

/// Whether the connection is done after a step.
type Step = std::io::Result<bool>;

impl<D: Dialect, T: Transport> Writer<D, T> {
    fn dialect(&self) -> &D {
        &self.framing.0
    }

    fn session(&self) -> &SessionHandle {
        self.sub.session()
    }

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
            self.sub.note_snapshot(snapshot.bytes.len());
            let metrics = &self.opts.metrics;
            subscription::send_snapshot(metrics, &mut self.sink, &self.framing, &snapshot.bytes)
                .await?;
        }
        self.sub.set_offset(offset);
        for line in &chat {
            self.notice(Notice::Chat(line)).await?;
        }
        self.notice(Notice::Ready).await?;
        if let Some(info) = exit {
            self.notice(Notice::Exit(&info)).await?;
        }
        Ok(())
    }

    /// Takes the socket back from the actor: marks the writer busy and sends what the actor
    /// left half-written.
    async fn claim(&mut self) -> WriteResult {
        let leftover = {
            let mut st = self.sub.live().lock();
            st.busy = true;
            std::mem::take(&mut st.leftover)
        };
        if !leftover.is_empty() {
            self.sink.write(&leftover).await?;
        }
        Ok(())
    }

    /// Hands the socket to the actor unless output is already waiting: `None` when output
    /// waits, else whether the actor's frame buffer for this viewer has grown large (read
    /// under the same lock).
    fn release(&self) -> Option<bool> {
        let live = self.sub.live();
        let head = self.session().log().head();
        let mut st = live.lock();
        let waiting = head > st.offset && st.budget_left(live) > 0;
        st.busy = waiting;
        (!waiting).then(|| st.holds_large_buffer())
    }

    /// What a pump or resync means for the connection: a session that is gone closes it.
    async fn after(&mut self, pumped: Pumped) -> Step {
        match pumped {
            Pumped::Gone => self.close(Closing::Ended(EndReason::Deleted)).await?,
            // Logged where it happened.
            Pumped::ScreenFailed => self.close(Closing::ScreenFailed).await?,
            Pumped::Idle | Pumped::Sent => return Ok(false),
        }
        Ok(true)
    }

    async fn write_loop(
        &mut self,
        events: &mut EventReceiver,
        local: &mut mpsc::Receiver<Local>,
    ) -> WriteResult {
        let mut pause: Option<BehindPause> = None;
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
                return self.close(why).await;
            }
            if pause.is_none() && self.sub.has_work() {
                let pumped = self
                    .sub
                    .pump(&mut self.sink, &self.framing, u64::MAX, &mut self.scratch)
                    .await?;
                if self.after(pumped).await? {
                    return Ok(());
                }
                // Resynced for being behind: the next screen comes a moment later, not the
                // bytes in between, or as soon as the output stops (a viewer slower than a
                // flood sees it a few times a second and its last screen right after it).
                // Control traffic is still served meanwhile.
                pause = self.sub.take_behind_pause();
                continue;
            }
            // Caught up after a flood's screens: its scrollback, before the socket is handed
            // back.
            if pause.is_none() && self.sub.owes_history() {
                let pumped = self
                    .sub
                    .resync_history(&mut self.sink, &self.framing)
                    .await?;
                if self.after(pumped).await? {
                    return Ok(());
                }
                continue;
            }
            // Paused, the socket stays the writer's: the actor must not stream to it.
            let large_frames = if pause.is_some() {
                false
            } else {
                match self.release() {
                    Some(large_frames) => large_frames,
                    None => continue,
                }
            };
            let live = self.sub.live().clone();
            let can_send = pause.is_none() && self.sub.budget_left() > 0;
            let large = large_frames || self.scratch.is_large();
            let check_at = pause.as_ref().map(BehindPause::next_check);
            let woke = tokio::select! {
                l = local.recv() => Woke::Local(l),
                ev = events.recv() => Woke::Event(ev),
                _ = live.woken(), if can_send => Woke::Output,
                () = tokio::time::sleep_until(check_at.unwrap_or_else(tokio::time::Instant::now)),
                    if check_at.is_some() => Woke::PauseCheck,
                why = self.share_end.wait() => Woke::AccessEnd(why),
                () = tokio::time::sleep(RELEASE_AFTER), if large => Woke::Quiet,
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
                Woke::Event(None) => return self.close(Closing::Ended(EndReason::Deleted)).await,
                Woke::Output => {}
                Woke::PauseCheck => {
                    let head = self.session().log().head();
                    if !pause.as_mut().is_some_and(|p| p.check(head)) {
                        pause = None;
                    }
                }
                Woke::AccessEnd(why) => return self.close(why).await,
                Woke::Quiet => {
                    self.scratch.release_if_large();
                    live.release_large_buffer();
                }
            }
        }
    }

    async fn on_local(&mut self, l: Local) -> Step {
        match l {
            Local::Send(msg) => self.sink.message(&msg).await?,
            Local::Control(opcode, payload) => {
                let done = opcode == fastwebsockets::OpCode::Close;
                self.sink
                    .send(MessageKind::Control(opcode), &payload)
                    .await?;
                return Ok(done);
            }
            // Never more than was sent: an over-eager client cannot switch flow control off.
            Local::Ack(bytes) => {
                let mut st = self.sub.live().lock();
                st.acked = st.acked.saturating_add(bytes).min(st.sent);
            }
            Local::Done(close) => {
                if let Some((code, reason)) = close {
                    self.sink.close(code, reason).await?;
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn on_event(&mut self, ev: ViewerEvent) -> Step {
        match ev {
            ViewerEvent::Status { info, offset } => {
                // Output drawn at the old size comes before the new size.
                if self.catch_up(offset).await? {
                    return Ok(true);
                }
                let (session, role) = (self.session().id(), self.opts.role);
                self.notice(Notice::Status {
                    info: &info,
                    session,
                    role,
                })
                .await?;
            }
            ViewerEvent::Exit { info, offset } => {
                // The exit notice in the stream comes before the exit message.
                if self.catch_up(offset).await? {
                    return Ok(true);
                }
                self.notice(Notice::Exit(&info)).await?;
            }
            ViewerEvent::Chat(line) => self.notice(Notice::Chat(&line)).await?,
            ViewerEvent::Presence(info) => {
                let me = self.me;
                self.notice(Notice::Presence { info: &info, me }).await?
            }
            ViewerEvent::Refused(refusal) => self.notice(Notice::Refused(&refusal)).await?,
            ViewerEvent::State(state) => self.notice(Notice::State(&state)).await?,
            ViewerEvent::Close(reason) => {
                self.close(Closing::Ended(reason)).await?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn catch_up(&mut self, offset: u64) -> Step {
        let pumped = self
            .sub
            .catch_up(&mut self.sink, &self.framing, offset, &mut self.scratch)
            .await?;
        self.after(pumped).await
    }

    /// Tells the client `notice`, if its dialect has a way to say it.
    async fn notice(&mut self, notice: Notice<'_>) -> WriteResult {
        let told = self.dialect().notice(notice);
        match told.map(|encoded| counted(&self.opts.metrics, encoded)) {
            Some(msg) => self.sink.message(&msg).await,
            None => Ok(()),
        }
    }

    /// Tells the client why its connection ends, if its dialect has words for that, and
    /// closes it with the dialect's code (tried even when the words could not be written).
    async fn close(&mut self, why: Closing<'_>) -> WriteResult {
        let told = self.notice(Notice::Closing(why)).await;
        let (code, reason) = self.dialect().close(why);
        let closed = self.sink.close(code, reason).await;
        told.and(closed)
    }
}
