//! One board connection (`GET /ws/board`, docs/protocol.md section 11a): a card per session the
//! token reaches, sent whole once, then only what changed; rows only for the cards the client
//! says are on its screen, at most once a second each; quick replies typed into a session with a
//! writer's permission.
//!
//! The board joins no session: it reads what each session publishes (its info, a watch channel,
//! and its screen's text, a slot the screen thread fills) and types through
//! [`SessionHandle::reply`]. A watcher task per session marks its card dirty when its info
//! changes or it ends; the writer task turns dirty marks into messages when it writes. Nothing
//! queues between them but the marks, so a client that reads slowly gets the state as it is
//! when it reads again (coalesced), never a backlog: what waits for the socket is one batch,
//! bounded by [`BATCH_BYTES`] (a message or two past it at most).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use uuid::Uuid;

use crate::attention::screen::ScreenText;
use crate::auth::Access;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::board::{self, BoardRequest, Card};
use crate::protocol::{Closing, Inbound, Outbound};
use crate::registry::Registry;
use crate::session::{EndReason, SessionHandle, SessionInfo};
use crate::shutdown::Shutdown;
use crate::viewer::transport::{self, MessageKind, Sink, Transport, WriteResult};
use crate::viewer::AccessEnd;
use crate::ws::reader::{read_loop, Gone, Local, OnMessage, Replies};
use crate::ws::{socket, Accepted, CLOSE_GRACE};

/// A visible card's rows go out at most this often.
pub const ROWS_EVERY: Duration = Duration::from_secs(1);
/// How often the writer looks at the visible cards' screens.
const TICK: Duration = Duration::from_millis(250);
/// What one write to the client holds at most, bytes (past it, the rest waits for the next).
pub const BATCH_BYTES: usize = 256 * 1024;
/// Largest message a board client may send (`visible` for 1024 sessions fits): larger is 1009.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Who connected: what the connection may see and type into.
#[derive(Debug, Clone)]
pub struct BoardOptions {
    /// The credential: which sessions it reaches, which it may type into.
    pub access: Access,
    /// When its share link or API token stops letting it in.
    pub limits: crate::auth::Limits,
    /// Cancelled when the daemon shuts down (or hands over to a new image).
    pub shutdown: Shutdown,
    /// The daemon's counters.
    pub metrics: Arc<Metrics>,
}

/// What the reader, the watchers and the writer share: the visible cards and the dirty marks.
#[derive(Default)]
struct Shared {
    visible: Mutex<HashSet<Uuid>>,
    dirty: Mutex<HashSet<Uuid>>,
    wake: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Sets replaced or extended whole: a poisoned lock still holds a sound set.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn mark(&self, id: Uuid) {
        lock(&self.dirty).insert(id);
        self.wake.notify_one();
    }
}

/// Serves one board connection until either side closes.
pub async fn run(ws: Accepted, registry: Arc<Registry>, cfg: Arc<Config>, opts: BoardOptions) {
    let halves = socket::split(ws.into_inner());
    let shared = Arc::new(Shared::default());
    let overrun = CancellationToken::new();
    let (replies, mut local) = Replies::channel(cfg.viewer.stall_deadline, overrun.clone());
    let messages = BoardMessages {
        shared: shared.clone(),
        registry: registry.clone(),
        access: opts.access.clone(),
        metrics: opts.metrics.clone(),
    };
    let max_message = MAX_MESSAGE.min(cfg.viewer.max_message_bytes);
    let read_task = tokio::spawn(read_loop(halves.read, replies, max_message, messages));
    // Subscribed before the sessions are listed: none created in between is missed.
    let created = registry.subscribe_created();
    let share_end = AccessEnd::new(opts.limits.clone());
    let mut writer = Writer {
        sink: Sink::new(transport::WebSocket::new(halves.write, halves.tcp)),
        cards: HashMap::new(),
        shared,
        registry,
        access: opts.access.clone(),
        stall_deadline: cfg.viewer.stall_deadline,
    };
    let progress = writer.sink.progress();
    let mut dropped = false;
    let result = tokio::select! {
        r = writer.serve(created, &mut local, &share_end, &opts.shutdown) => r,
        () = progress.stuck_after(opts.shutdown.cancelled()) => { dropped = true; Ok(()) }
        _ = overrun.cancelled() => Err(not_reading()),
    };
    if let Err(e) = result {
        if e.kind() == std::io::ErrorKind::TimedOut {
            info!("closing a board connection that is not reading what it is sent");
            opts.metrics.error("not_reading");
            let (code, why) = board::close(Closing::NotReading);
            writer.sink.try_close(code, why, CLOSE_GRACE).await;
        } else {
            debug!("board connection ended: {e}");
        }
    }
    writer.cards.clear();
    crate::ws::reader::finish(read_task, !dropped).await;
}

fn not_reading() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "the client is not reading")
}

/// Applies a board client's messages: what is visible, and quick replies.
struct BoardMessages {
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    access: Access,
    metrics: Arc<Metrics>,
}

impl BoardMessages {
    /// What to answer `request` with, if anything: an `error`.
    async fn apply(&self, request: BoardRequest) -> Option<String> {
        match request {
            BoardRequest::Visible(ids) => {
                *lock(&self.shared.visible) = ids.into_iter().collect();
                // Newly visible cards may owe rows.
                self.shared.wake.notify_one();
                None
            }
            BoardRequest::Reply { id, keys } => {
                let not_found = || {
                    let msg = board::error("not_found", "no such session on this board", Some(id));
                    Some(msg)
                };
                if !self.access.reaches(id) {
                    return not_found();
                }
                let Some(handle) = self.registry.get(&id) else {
                    return not_found();
                };
                if !self.access.may_write(id) {
                    let why = "this link is read-only: input ignored";
                    return Some(board::error("read_only", why, Some(id)));
                }
                match handle.reply(Bytes::from(keys.into_bytes())).await {
                    Ok(true) => {
                        // A quick reply is one deliberate answer: each is recorded.
                        let actor = crate::audit::Actor::holding(&self.access);
                        let event = crate::audit::Event::new("typing", &actor).on(id);
                        let detail = serde_json::json!({"via": "board"});
                        self.registry.audit().record(event.with(detail));
                        None
                    }
                    Ok(false) => {
                        let why = "the program has ended: input ignored";
                        Some(board::error("not_running", why, Some(id)))
                    }
                    Err(_) => not_found(),
                }
            }
        }
    }
}

impl OnMessage for BoardMessages {
    async fn on_message(&mut self, message: Inbound, replies: &Replies) -> Result<(), Gone> {
        let decoded = match message {
            Inbound::Binary(b) => board::decode_binary(&b),
            Inbound::Text(t) => board::decode_text(&t),
        };
        let reply = match decoded {
            Ok(request) => self.apply(request).await,
            Err(bad) => {
                self.metrics.error("bad_message");
                Some(board::error("bad_message", &bad.message, None))
            }
        };
        match reply {
            Some(text) => replies.send(Local::Send(Outbound::Text(text))).await,
            None => Ok(()),
        }
    }
}

/// A session on the board: what the client was last sent of it.
struct Tracked {
    handle: SessionHandle,
    sent: Card,
    /// The screen text whose rows were sent last (its generation), and when.
    rows_generation: u64,
    rows_at: Instant,
    /// Marks the card dirty when the session's info changes or it ends.
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

struct Writer<T> {
    sink: Sink<T>,
    cards: HashMap<Uuid, Tracked>,
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    access: Access,
    stall_deadline: Duration,
}

/// The card of a session with `info`, showing `rows` and `cursor`.
fn card_of(info: &SessionInfo, may_type: bool, rows: Vec<String>, cursor: (u16, u16)) -> Card {
    Card {
        id: info.id,
        num: info.num,
        name: info.name.clone(),
        assistant: info.assistant.clone(),
        assistant_name: info.assistant_name.clone(),
        state: info.state,
        since: info.state_since_ms,
        reason: info.reason.clone(),
        choices: info.choices.clone(),
        may_type,
        alive: info.alive,
        people: info.people.clone(),
        created_by: info.created_by.clone(),
        rows,
        cursor,
    }
}

/// The screen text of `handle`'s session (none without a screen model).
fn text_of(handle: &SessionHandle) -> Arc<ScreenText> {
    handle
        .screen_text()
        .map(|slot| slot.get())
        .unwrap_or_default()
}

impl<T: Transport> Writer<T> {
    async fn serve(
        &mut self,
        mut created: broadcast::Receiver<Uuid>,
        local: &mut mpsc::Receiver<Local>,
        share_end: &AccessEnd,
        shutdown: &Shutdown,
    ) -> WriteResult {
        let mut all: Vec<SessionHandle> = self.registry.handles();
        all.retain(|h| self.access.reaches(h.id()));
        all.sort_by_key(|h| (h.info().num.is_none(), h.info().num));
        let mut cards = Vec::with_capacity(all.len());
        for handle in all {
            cards.push(self.track(handle));
        }
        self.write(board::cards(&cards).as_bytes(), true).await?;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                l = local.recv() => match l {
                    Some(Local::Send(msg)) => self.sink_message(&msg).await?,
                    Some(Local::Control(op, data)) => {
                        let mut out = Vec::new();
                        T::frame(&mut out, MessageKind::Control(op), &data);
                        self.write(&out, false).await?;
                    }
                    Some(Local::Ack(_)) => {}
                    Some(Local::Done(Some((code, why)))) => return self.sink.close(code, why).await,
                    Some(Local::Done(None)) | None => return Ok(()),
                },
                _ = self.shared.wake.notified() => {}
                _ = tick.tick() => {}
                id = created.recv() => match id {
                    Ok(id) => self.add(id).await?,
                    // Missed announcements: look at every session again.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        for handle in self.registry.handles() {
                            self.add(handle.id()).await?;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => created = broadcast::channel(1).1,
                },
                why = share_end.wait() => {
                    let (code, why) = board::close(why);
                    return self.sink.close(code, why).await;
                }
                _ = shutdown.cancelled() => {
                    let (code, why) = board::close(Closing::Ended(EndReason::Shutdown));
                    self.sink.try_close(code, why, CLOSE_GRACE).await;
                    return Ok(());
                }
            }
            self.flush().await?;
        }
    }

    /// Starts following `handle`'s session; its whole card.
    fn track(&mut self, handle: SessionHandle) -> Card {
        let id = handle.id();
        let text = text_of(&handle);
        let may_type = self.access.may_write(id);
        let card = card_of(&handle.info(), may_type, text.rows.clone(), text.cursor);
        let mut info = handle.watch_info();
        let ended = handle.ended();
        let shared = self.shared.clone();
        let watcher = tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = info.changed() => if changed.is_err() { break },
                    _ = ended.cancelled() => break,
                }
                shared.mark(id);
            }
            shared.mark(id);
        });
        self.cards.insert(
            id,
            Tracked {
                handle,
                sent: card.clone(),
                rows_generation: text.generation,
                rows_at: Instant::now(),
                watcher,
            },
        );
        card
    }

    /// A session appeared: its whole card, if the connection reaches it and has none yet.
    async fn add(&mut self, id: Uuid) -> WriteResult {
        if self.cards.contains_key(&id) || !self.access.reaches(id) {
            return Ok(());
        }
        let Some(handle) = self.registry.get(&id) else {
            return Ok(());
        };
        let card = self.track(handle);
        self.write(board::whole(&card).as_bytes(), true).await
    }

    /// Says what changed: the dirty cards' fields (and their rows if visible and due), the
    /// visible cards' rows that are due, and the sessions that are gone; in one write of at
    /// most about [`BATCH_BYTES`].
    async fn flush(&mut self) -> WriteResult {
        let now = Instant::now();
        let dirty: Vec<Uuid> = lock(&self.shared.dirty).drain().collect();
        let visible = lock(&self.shared.visible).clone();
        let mut out = Vec::new();
        let mut later = Vec::new();
        for id in dirty {
            if out.len() >= BATCH_BYTES {
                later.push(id);
                continue;
            }
            self.update(id, visible.contains(&id), now, &mut out);
        }
        for id in &visible {
            if out.len() >= BATCH_BYTES {
                break;
            }
            let due = self.cards.get(id).is_some_and(|t| {
                now.duration_since(t.rows_at) >= ROWS_EVERY
                    && text_of(&t.handle).generation != t.rows_generation
            });
            if due {
                self.update(*id, true, now, &mut out);
            }
        }
        if !later.is_empty() {
            lock(&self.shared.dirty).extend(later);
            self.shared.wake.notify_one();
        }
        if out.is_empty() {
            return Ok(());
        }
        self.sink_framed(&out).await
    }

    /// Appends what changed of card `id` (its rows too when `visible` and due), or `gone`.
    fn update(&mut self, id: Uuid, visible: bool, now: Instant, out: &mut Vec<u8>) {
        let Some(t) = self.cards.get_mut(&id) else {
            return;
        };
        if t.handle.ended().is_cancelled() || self.registry.get(&id).is_none() {
            self.cards.remove(&id);
            T::frame(out, MessageKind::Text, board::gone(id).as_bytes());
            return;
        }
        let rows_due = visible && now.duration_since(t.rows_at) >= ROWS_EVERY;
        let text = rows_due.then(|| text_of(&t.handle));
        let (rows, cursor) = match &text {
            Some(text) => (text.rows.clone(), text.cursor),
            None => (t.sent.rows.clone(), t.sent.cursor),
        };
        let new = card_of(&t.handle.info(), t.sent.may_type, rows, cursor);
        if let Some(text) = &text {
            if new.rows != t.sent.rows || new.cursor != t.sent.cursor {
                t.rows_at = now;
            }
            t.rows_generation = text.generation;
        }
        if let Some(msg) = board::changes(&t.sent, &new, rows_due) {
            T::frame(out, MessageKind::Text, msg.as_bytes());
        }
        t.sent = new;
    }

    async fn sink_message(&mut self, msg: &Outbound) -> WriteResult {
        match tokio::time::timeout(self.stall_deadline, self.sink.message(msg)).await {
            Ok(r) => r,
            Err(_) => Err(not_reading()),
        }
    }

    /// Writes one text message (`text`) or already framed bytes.
    async fn write(&mut self, bytes: &[u8], text: bool) -> WriteResult {
        if text {
            let mut out = Vec::with_capacity(bytes.len() + crate::ws::frame::MAX_HEAD);
            T::frame(&mut out, MessageKind::Text, bytes);
            self.sink_framed(&out).await
        } else {
            self.sink_framed(bytes).await
        }
    }

    /// Writes framed bytes, or fails as not reading past the stall deadline.
    async fn sink_framed(&mut self, out: &[u8]) -> WriteResult {
        match tokio::time::timeout(self.stall_deadline, self.sink.write(out)).await {
            Ok(r) => r,
            Err(_) => Err(not_reading()),
        }
    }
}
