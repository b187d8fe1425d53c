//! One multiplexed connection (`GET /ws`, docs/protocol.md section 11): every session the token
//! reaches, on one socket, each joined as a viewer of its own and tagged by its number.
//!
//! The reader task decodes `[num][bytes]` input and `terminal` channel messages and applies
//! them to the session the number names. The writer task owns the socket: it greets each
//! session (`open`, its replay, `exit` if it has ended), then copies every session's output
//! from its own position in that session's log, one batch per session in turn, so one
//! flooding session cannot starve the others. The actors never write to this socket: they only
//! wake the writer, which costs them less per chunk than a direct write to a browser client.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastwebsockets::OpCode;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::live::Live;
use super::subscription::{self, Framing, Pumped, Scratch, Subscription, RELEASE_AFTER};
use super::transport::{self, MessageKind, Sink, Transport, WriteResult};
use super::AccessEnd;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::mux::{self, MuxRequest, ServerMessage};
use crate::protocol::raw::REPLAY_LIMIT;
use crate::protocol::state::StateFields;
use crate::protocol::{Closing, Inbound, Outbound};
use crate::registry::Registry;
use crate::session::viewer_queue;
use crate::session::{
    EndReason, JoinError, Membership, Role, SessionHandle, ViewerEvent, ViewerId, Who,
};
use crate::shutdown::Shutdown;
use crate::term::snapshot::SnapshotForm;
use crate::ws::reader::{read_loop, Gone, Local, OnMessage, Replies};
use crate::ws::{socket, Accepted, CLOSE_GRACE};

/// Events of all sessions waiting for the writer, each small (bounded by its session's queue).
const EVENTS_QUEUE: usize = 256;

/// Who connected, and what the connection may reach.
#[derive(Debug, Clone)]
pub struct MuxOptions {
    /// A share link's connection: only this session.
    pub only: Option<Uuid>,
    /// What it may do: as a [`Role::Viewer`], input and resize are refused.
    pub role: Role,
    /// Whether it may end sessions (`close`): an admin only.
    pub may_end: bool,
    /// Who connects: a user's verified name, or a guest.
    pub who: Who,
    /// When its share link or API token stops letting it in.
    pub limits: crate::auth::Limits,
    /// The daemon's counters, which the connection's traffic and errors count in.
    pub metrics: Arc<Metrics>,
    /// Who connects, for the audit trail (a `close` that ends a session is recorded).
    pub actor: crate::audit::Actor,
    /// The daemon's shutdown: the connection is then dropped once its writes stop going
    /// through, so a client that stopped reading cannot hold the shutdown up.
    pub shutdown: Shutdown,
}

/// The sessions this connection carries, by number: what the reader needs to apply input.
#[derive(Default)]
struct Table(Mutex<HashMap<u8, Entry>>);

#[derive(Clone)]
struct Entry {
    uuid: Uuid,
    handle: SessionHandle,
    viewer: ViewerId,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u8, Entry>> {
        // Inserts and removals cannot panic half way: a poisoned lock is still sound.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session an id names: its number, or its uuid, as a string.
    fn find(&self, id: &str) -> Option<(u8, Entry)> {
        let table = self.lock();
        if let Ok(num) = id.parse::<u8>() {
            return table.get(&num).map(|e| (num, e.clone()));
        }
        let uuid = Uuid::parse_str(id).ok()?;
        table
            .iter()
            .find(|(_, e)| e.uuid == uuid)
            .map(|(n, e)| (*n, e.clone()))
    }
}

/// Serves one multiplexed connection until either side closes.
pub async fn run(ws: Accepted, registry: Arc<Registry>, cfg: Arc<Config>, opts: MuxOptions) {
    let halves = socket::split(ws.into_inner());
    let table = Arc::new(Table::default());
    let overrun = CancellationToken::new();
    let (replies, mut local) = Replies::channel(cfg.viewer.stall_deadline, overrun.clone());
    let messages = MuxMessages {
        table: table.clone(),
        may_end: opts.may_end,
        metrics: opts.metrics.clone(),
        audit: registry.audit().clone(),
        actor: opts.actor.clone(),
    };
    let read_task = tokio::spawn(read_loop(
        halves.read,
        replies,
        cfg.viewer.max_message_bytes,
        messages,
    ));
    // Subscribed before the sessions are listed: none created in between is missed.
    let created = registry.subscribe_created();
    let (events_tx, mut events) = mpsc::channel(EVENTS_QUEUE);
    let share_end = AccessEnd::new(opts.limits.clone());
    let mut writer = MuxWriter {
        sink: Sink::new(transport::WebSocket::new(halves.write, halves.tcp)),
        subs: BTreeMap::new(),
        table,
        wake: Arc::new(Notify::new()),
        events_tx,
        overrun: overrun.clone(),
        role: opts.role,
        who: opts.who.clone(),
        only: opts.only,
        untagged: std::collections::HashSet::new(),
        stall_deadline: cfg.viewer.stall_deadline,
        scratch: Scratch::new(),
        metrics: opts.metrics.clone(),
    };
    let progress = writer.sink.progress();
    let mut dropped = false;
    let result = tokio::select! {
        r = writer.serve(&registry, created, &mut events, &mut local, &share_end) => r,
        () = progress.stuck_after(opts.shutdown.cancelled()) => { dropped = true; Ok(()) }
        _ = overrun.cancelled() => {
            info!("closing a multiplexed connection that is not reading what it is sent");
            opts.metrics.error("not_reading");
            let (code, why) = mux::close(Closing::NotReading);
            writer.sink.try_close(code, why, CLOSE_GRACE).await;
            Ok(())
        }
    };
    if let Err(e) = result {
        debug!("multiplexed connection ended: {e}");
    }
    // The reader first: what it still holds is applied while the sessions are carried.
    crate::ws::reader::finish(read_task, !dropped).await;
    writer.leave_all();
}

/// Applies a multiplexed client's messages to the sessions they name.
struct MuxMessages {
    table: Arc<Table>,
    /// Whether `close` may end sessions (full access only, as REST `DELETE`).
    may_end: bool,
    /// Where a `close` that ends a session is recorded, and as whom.
    audit: Arc<crate::audit::Audit>,
    actor: crate::audit::Actor,
    /// The daemon's counters: errors told to the client.
    metrics: Arc<Metrics>,
}

impl MuxMessages {
    async fn apply(&self, request: MuxRequest) -> Option<ServerMessage> {
        let unknown = |id: String| {
            let message = format!("no session {id} on this connection");
            ServerMessage::error(Some(id), message)
        };
        match request {
            MuxRequest::Input { num, data } => {
                let Some(entry) = self.table.lock().get(&num).cloned() else {
                    return Some(unknown(num.to_string()));
                };
                let gone = entry.handle.input(entry.viewer, data).await.is_err();
                gone.then(|| ServerMessage::error(Some(num.to_string()), "the session has ended"))
            }
            MuxRequest::Resize { id, rows, cols } => match self.table.find(&id) {
                Some((_, entry)) => {
                    let _ = entry.handle.resize(entry.viewer, rows, cols).await;
                    None
                }
                None => Some(unknown(id)),
            },
            MuxRequest::Close { id } => match self.table.find(&id) {
                Some((num, _)) if !self.may_end => Some(ServerMessage::error(
                    Some(num.to_string()),
                    "ending a session needs the admin scope",
                )),
                Some((_, entry)) => {
                    info!(session = %entry.uuid, "session ended through a multiplexed connection");
                    let _ = entry.handle.end(EndReason::Deleted).await;
                    let detail = serde_json::json!({"how": "mux-close"});
                    let event = crate::audit::Event::new("session.end", &self.actor);
                    self.audit.record(event.on(entry.uuid).with(detail));
                    None
                }
                None => Some(unknown(id)),
            },
        }
    }
}

impl OnMessage for MuxMessages {
    async fn on_message(&mut self, message: Inbound, replies: &Replies) -> Result<(), Gone> {
        let decoded = match message {
            Inbound::Binary(b) => mux::decode_binary(b),
            Inbound::Text(t) => mux::decode_text(&t),
        };
        let reply = match decoded {
            Ok(request) => self.apply(request).await,
            Err(bad) => Some(ServerMessage::error(bad.id, bad.message)),
        };
        match reply {
            Some(msg) => {
                if matches!(msg, ServerMessage::Error { .. }) {
                    self.metrics.error("bad_message");
                }
                replies
                    .send(Local::Send(Outbound::Text(msg.to_json())))
                    .await
            }
            None => Ok(()),
        }
    }
}

/// One session carried by the connection.
struct Sub {
    /// Its output, from this connection's position.
    sub: Subscription,
    /// Leaves the session when dropped.
    _membership: Membership,
    /// Forwards the session's events to the writer.
    forward: tokio::task::JoinHandle<()>,
}

impl Drop for Sub {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

/// Frames as `[num][bytes]` binary messages: output and replays alike.
struct Tagged(u8);

impl Framing for Tagged {
    fn output<T: Transport>(&self, out: &mut Vec<u8>, data: &[u8]) {
        let mut tagged = Vec::with_capacity(mux::MAX_FRAME.min(data.len() + 1));
        for range in mux::payload_ranges(data) {
            tagged.clear();
            tagged.push(self.0);
            tagged.extend_from_slice(&data[range]);
            T::frame(out, MessageKind::Binary, &tagged);
        }
    }

    fn snapshot<T: Transport>(&self, out: &mut Vec<u8>, packed: &[u8]) {
        self.output::<T>(out, packed);
    }
}

struct MuxWriter<T> {
    sink: Sink<T>,
    subs: BTreeMap<u8, Sub>,
    table: Arc<Table>,
    /// Woken by every session's actor when it has output.
    wake: Arc<Notify>,
    events_tx: mpsc::Sender<(u8, Option<ViewerEvent>)>,
    overrun: CancellationToken,
    role: Role,
    /// Who connects, for every session it joins.
    who: Who,
    only: Option<Uuid>,
    /// Sessions without a number this connection was told it cannot carry (each told once).
    untagged: std::collections::HashSet<Uuid>,
    stall_deadline: Duration,
    scratch: Scratch,
    /// The daemon's counters, handed to each session's subscription.
    metrics: Arc<Metrics>,
}

/// What woke an idle writer.
enum Woke {
    Local(Option<Local>),
    Event(Option<(u8, Option<ViewerEvent>)>),
    Created(Result<Uuid, broadcast::error::RecvError>),
    Output,
    AccessEnd(Closing<'static>),
    /// Quiet for [`RELEASE_AFTER`] with the scratch buffers a flood grew.
    Quiet,
}

impl<T: Transport> MuxWriter<T> {
    async fn serve(
        &mut self,
        registry: &Registry,
        mut created: broadcast::Receiver<Uuid>,
        events: &mut mpsc::Receiver<(u8, Option<ViewerEvent>)>,
        local: &mut mpsc::Receiver<Local>,
        share_end: &AccessEnd,
    ) -> WriteResult {
        self.add_all(registry).await?;
        loop {
            while let Ok(l) = local.try_recv() {
                if self.on_local(l).await? {
                    return Ok(());
                }
            }
            while let Ok((num, ev)) = events.try_recv() {
                if self.on_event(num, ev).await? {
                    return Ok(());
                }
            }
            if share_end.is_over() {
                let (code, why) = mux::close(share_end.wait().await);
                return self.sink.close(code, why).await;
            }
            // One batch of each session with output, in turn.
            let mut sent = false;
            let nums: Vec<u8> = self.subs.keys().copied().collect();
            for num in nums {
                sent |= self.pump(num, u64::MAX).await?;
            }
            if sent {
                continue;
            }
            let woke = tokio::select! {
                l = local.recv() => Woke::Local(l),
                ev = events.recv() => Woke::Event(ev),
                id = created.recv() => Woke::Created(id),
                _ = self.wake.notified() => Woke::Output,
                why = share_end.wait() => Woke::AccessEnd(why),
                () = tokio::time::sleep(RELEASE_AFTER), if self.scratch.is_large() => Woke::Quiet,
            };
            match woke {
                Woke::Local(Some(l)) => {
                    if self.on_local(l).await? {
                        return Ok(());
                    }
                }
                Woke::Local(None) => return Ok(()),
                Woke::Event(Some((num, ev))) => {
                    if self.on_event(num, ev).await? {
                        return Ok(());
                    }
                }
                // The writer holds a sender itself: never closed while it runs.
                Woke::Event(None) => {}
                Woke::Created(Ok(id)) => {
                    if let Some(handle) = registry.get(&id) {
                        self.add(handle).await?;
                    }
                }
                // Missed announcements: look at every session again.
                Woke::Created(Err(broadcast::error::RecvError::Lagged(_))) => {
                    self.add_all(registry).await?;
                }
                Woke::Created(Err(broadcast::error::RecvError::Closed)) => {
                    created = broadcast::channel(1).1;
                }
                Woke::Output => {}
                Woke::Quiet => self.scratch.release_if_large(),
                Woke::AccessEnd(why) => {
                    let (code, why) = mux::close(why);
                    return self.sink.close(code, why).await;
                }
            }
        }
    }

    /// Joins every session this connection reaches that it does not carry yet, by number.
    async fn add_all(&mut self, registry: &Registry) -> WriteResult {
        let mut all: Vec<SessionHandle> = registry
            .list()
            .iter()
            .filter_map(|info| registry.get(&info.id))
            .collect();
        all.sort_by_key(|h| h.info().num);
        for handle in all {
            self.add(handle).await?;
        }
        Ok(())
    }

    /// Joins `handle`'s session (if this connection reaches it and does not carry it yet) and
    /// greets it: `open`, the replay, and `exit` if its program has ended.
    async fn add(&mut self, handle: SessionHandle) -> WriteResult {
        let info = handle.info();
        if self.only.is_some_and(|o| o != info.id) {
            return Ok(());
        }
        let Some(num) = info.num else {
            // Past 255 sessions a session has no number, and this dialect's frames have no
            // other tag: say so once, naming it, rather than leave it out unexplained.
            if self.untagged.insert(info.id) {
                let msg = ServerMessage::error(
                    Some(info.id.to_string()),
                    "this session has no number (only 255 sessions get one), so this \
                     connection cannot carry it: reach it by its uuid in the other dialects",
                );
                return self.send_text(&msg).await;
            }
            return Ok(());
        };
        if self.subs.contains_key(&num) {
            return Ok(());
        }
        let (events_tx, mut events) =
            viewer_queue::channel(viewer_queue::MAX_EVENTS, viewer_queue::MAX_EVENT_BYTES);
        let live = Live::waking(self.wake.clone());
        let form = SnapshotForm::plain(REPLAY_LIMIT);
        let joined = handle
            .join(self.role, self.who.clone(), events_tx, live.clone(), form)
            .await;
        let (membership, join) = match joined {
            Ok(joined) => joined,
            Err(JoinError::TooManyViewers(_)) => {
                let msg = ServerMessage::error(
                    Some(num.to_string()),
                    "the session has its maximum number of viewers: not carried",
                );
                return self.send_text(&msg).await;
            }
            Err(JoinError::Gone(_)) => return Ok(()),
            Err(JoinError::Screen(failed)) => {
                warn!(session = %info.id, "not carried: {failed}");
                let msg = ServerMessage::error(Some(num.to_string()), failed.to_string());
                return self.send_text(&msg).await;
            }
        };
        self.table.lock().insert(
            num,
            Entry {
                uuid: info.id,
                handle: handle.clone(),
                viewer: membership.viewer(),
            },
        );
        let id = num.to_string();
        let (rows, cols) = (info.rows, info.cols);
        let open = ServerMessage::Open {
            id: id.clone(),
            uuid: info.id.to_string(),
            cols,
            rows,
            command: info.command.clone(),
            state: StateFields::from(&*info),
        };
        // Registered before anything is written, so a failed write still leaves the session.
        let overrun = events.overrun();
        let (to_writer, conn_overrun) = (self.events_tx.clone(), self.overrun.clone());
        let forward = tokio::spawn(async move {
            loop {
                tokio::select! {
                    ev = events.recv() => {
                        let end = ev.is_none();
                        if to_writer.send((num, ev)).await.is_err() || end {
                            break;
                        }
                    }
                    _ = overrun.cancelled() => {
                        conn_overrun.cancel();
                        break;
                    }
                }
            }
        });
        let metrics = self.metrics.clone();
        let sub = Subscription::new(handle, live, form, self.stall_deadline, metrics);
        sub.set_offset(join.offset);
        self.subs.insert(
            num,
            Sub {
                sub,
                _membership: membership,
                forward,
            },
        );
        self.send_text(&open).await?;
        if let Some(snapshot) = &join.snapshot {
            let (metrics, packed) = (&self.metrics, &snapshot.bytes);
            subscription::send_snapshot(metrics, &mut self.sink, &Tagged(num), packed).await?;
        }
        if let Some(exit) = join.exit {
            let msg = ServerMessage::Exit {
                id,
                code: exit.code,
                signal: exit.signal,
            };
            self.send_text(&msg).await?;
        }
        Ok(())
    }

    /// Sends session `num`'s next batch of output (up to `until`); a session that fell behind
    /// is replayed instead, and one that is gone is said to be closed. True when something
    /// was sent.
    async fn pump(&mut self, num: u8, until: u64) -> std::io::Result<bool> {
        let Some(entry) = self.subs.get(&num) else {
            return Ok(false);
        };
        let pumped = entry
            .sub
            .pump(&mut self.sink, &Tagged(num), until, &mut self.scratch)
            .await?;
        self.after(num, pumped).await
    }

    /// A session that is gone is said to be closed; true when anything was sent.
    async fn after(&mut self, num: u8, pumped: Pumped) -> std::io::Result<bool> {
        match pumped {
            Pumped::Idle => Ok(false),
            Pumped::Sent => Ok(true),
            Pumped::Gone => self.closed(num).await.map(|()| true),
            // Logged where it happened; carrying it again draws a fresh screen.
            Pumped::ScreenFailed => {
                let why = crate::session::ScreenFailed.to_string();
                self.send_text(&ServerMessage::error(Some(num.to_string()), why))
                    .await?;
                self.closed(num).await.map(|()| true)
            }
        }
    }

    /// Returns true when the connection is done.
    async fn on_event(&mut self, num: u8, ev: Option<ViewerEvent>) -> std::io::Result<bool> {
        let id = num.to_string();
        match ev {
            // Sizes, chat and presence have no message in this dialect.
            Some(ViewerEvent::Status { .. } | ViewerEvent::Chat(_) | ViewerEvent::Presence(_)) => {}
            Some(ViewerEvent::Exit { info, offset }) => {
                // The exit notice in the stream comes before the exit message.
                if let Some(entry) = self.subs.get(&num) {
                    let pumped = entry
                        .sub
                        .catch_up(&mut self.sink, &Tagged(num), offset, &mut self.scratch)
                        .await?;
                    if matches!(pumped, Pumped::Gone | Pumped::ScreenFailed) {
                        return self.after(num, pumped).await.map(|_| false);
                    }
                }
                let msg = ServerMessage::Exit {
                    id,
                    code: info.code,
                    signal: info.signal,
                };
                self.send_text(&msg).await?;
            }
            Some(ViewerEvent::State(state)) => {
                let msg = ServerMessage::State {
                    id,
                    state: StateFields::from(&*state),
                };
                self.send_text(&msg).await?;
            }
            Some(ViewerEvent::Refused(r)) => {
                self.send_text(&ServerMessage::error(Some(id), r.message()))
                    .await?;
            }
            Some(ViewerEvent::Close(reason)) => match mux::session_ended(reason) {
                // The whole daemon goes (or is replaced): so does the connection.
                Some((code, why)) => {
                    self.sink.close(code, why).await?;
                    return Ok(true);
                }
                None => self.closed(num).await?,
            },
            None => self.closed(num).await?,
        }
        Ok(false)
    }

    /// Session `num` is gone: says so, and stops carrying it.
    async fn closed(&mut self, num: u8) -> WriteResult {
        if self.subs.remove(&num).is_none() {
            return Ok(());
        }
        self.table.lock().remove(&num);
        self.send_text(&ServerMessage::Closed {
            id: num.to_string(),
        })
        .await
    }

    /// Returns true when the connection is done.
    async fn on_local(&mut self, l: Local) -> std::io::Result<bool> {
        match l {
            Local::Send(msg) => self.sink.message(&msg).await?,
            Local::Control(opcode, payload) => {
                self.sink
                    .send(MessageKind::Control(opcode), &payload)
                    .await?;
                return Ok(opcode == OpCode::Close);
            }
            Local::Ack(_) => {}
            Local::Done(close) => {
                if let Some((code, reason)) = close {
                    self.sink.close(code, reason).await?;
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn send_text(&mut self, msg: &ServerMessage) -> WriteResult {
        self.sink
            .send(MessageKind::Text, msg.to_json().as_bytes())
            .await
    }

    /// Leaves every session.
    fn leave_all(&mut self) {
        self.subs.clear();
        self.table.lock().clear();
    }
}
