//! The session actor: its state, its loop over commands, PTY reads, the child's exit and
//! timers, and the publishing of output to the log, the screen thread and the viewers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

use super::phase::Phase;
use super::pty::PtyMaster;
use super::turns;
use super::*;
use crate::config::{Assistant, Config};

pub(super) struct ViewerEntry {
    pub(super) events: EventSender,
    pub(super) live: Arc<dyn LiveOutput>,
    pub(super) role: Role,
    /// `(rows, cols)` as last sent, clamped; `None` until the viewer sends one.
    pub(super) size: Option<(u16, u16)>,
    /// Replies this viewer's terminal owes to queries it was sent (dropped when they come).
    pub(super) expected: replies::Expected,
    /// Whether it is in the fan-out's queue (see [`Fanout`]).
    pub(super) queued: bool,
}

/// The program and its PTY, while there is one.
#[derive(Default)]
pub(super) struct Proc {
    /// Reports the program's exit; gone once it has.
    pub(super) exit: Option<process::ExitWatch>,
    pub(super) pid: i32,
    /// The PTY master, for reading; gone at EOF.
    pub(super) reader: Option<PtyMaster>,
    pub(super) input: Option<mpsc::UnboundedSender<PtyInput>>,
    /// Bytes of query answers sent to the writer task and not yet written to the PTY.
    pub(super) answers_queued: Arc<std::sync::atomic::AtomicUsize>,
    /// Items sent to the writer task and not yet written whole: while there are any, input
    /// queues behind them rather than going straight to the PTY.
    pub(super) input_queued: Arc<std::sync::atomic::AtomicUsize>,
    /// The writer task, and how to stop it and get back what it has not written.
    pub(super) writer: Option<(CancellationToken, tokio::task::JoinHandle<Vec<u8>>)>,
}

pub(super) struct Session {
    /// The actor's own queue, for work it finishes later (an upload's typed path).
    pub(super) me: mpsc::WeakSender<Command>,
    /// Input bytes in flight to the PTY; shared with every handle.
    pub(super) input_budget: Arc<tokio::sync::Semaphore>,
    pub(super) id: Uuid,
    pub(super) cfg: Arc<Config>,
    pub(super) assistant_key: String,
    pub(super) assistant: Assistant,
    /// Whether the program is the creator's own command rather than the assistant's: such a
    /// session has no YOLO mode whatever its assistant has.
    pub(super) own_command: bool,
    /// The program and arguments run last.
    pub(super) command: Vec<String>,
    /// The session's number (see `SessionInfo::num`).
    pub(super) num: Option<u8>,
    pub(super) name: String,
    pub(super) cwd: PathBuf,
    pub(super) created_at: SystemTime,
    pub(super) yolo_mode: bool,
    /// The screen model, on its own thread (none for a pipe-mode stream).
    pub(super) screen: Option<ScreenThread>,
    /// The model's answers to terminal queries, for the program.
    pub(super) answers: Option<screen_thread::Answers>,
    /// Finds queries in the output before it is published, so replies are expected in time.
    pub(super) scan: queries::QueryScan,
    /// Whether the program has drawn anything yet.
    pub(super) drawn: bool,
    /// The viewer that typed last, and when: its echo goes to it first.
    pub(super) typist: Option<(ViewerId, Instant)>,
    pub(super) log: Arc<SharedLog>,
    pub(super) viewers: HashMap<ViewerId, ViewerEntry>,
    pub(super) size: (u16, u16),
    pub(super) proc: Proc,
    /// Where the program is in its life, and so the session.
    pub(super) phase: Phase,
    /// The pid of the latest program, kept after it exits: its leftovers are found through it.
    pub(super) last_pid: i32,
    pub(super) chat: std::collections::VecDeque<ChatLine>,
    pub(super) info: watch::Sender<SessionInfo>,
    /// Called once, when the session has ended.
    pub(super) on_end: Option<OnEnd>,
    pub(super) ended: CancellationToken,
    /// The latest chunk's hand-out to the viewers other than the typist, done a slice at a
    /// time between commands.
    pub(super) fanout: Fanout,
    /// A copy of what every viewer is told, for the recorder (see [`tap`]).
    pub(super) tap: Option<tap::Tap>,
    /// Why the recording stopped, once it has: told to each writer once.
    pub(super) recording_failed: Option<Refusal>,
    /// A live upgrade's request to freeze, waiting for a settled phase.
    pub(super) freeze: Option<tokio::sync::oneshot::Sender<freeze::Frozen>>,
    /// Who is here, by name, role and device, and who typed last.
    pub(super) presence: super::presence::Presence,
}

/// Output still to be handed to some viewers (see [`Session::fan_out_some`]).
///
/// When a chunk comes before the previous one has been handed to everyone (keys typed back to
/// back, with many viewers), the two are joined: each viewer still queued is later sent what
/// it lacks of both in one write, rather than one write per chunk or a wake-up of its task.
#[derive(Default)]
pub(super) struct Fanout {
    /// The log offset of `chunk`.
    start: u64,
    /// The output from `start` to the log's head.
    chunk: Bytes,
    /// Viewers not handed all of it yet, served from the back (the buffer is reused).
    rest: Vec<ViewerId>,
    /// When the hand-out may begin: a round starts [`FANOUT_PACE`] after the last one ended,
    /// so output that comes faster (keys typed back to back) reaches the others joined, in
    /// fewer writes, and the more a round costs (or the busier the machine) the fewer there are.
    due: Option<Instant>,
    /// When the latest round ended.
    ended_at: Option<Instant>,
    /// An empty buffer kept for the next chunk's queue (the two are swapped, not allocated).
    spare: Vec<ViewerId>,
}

/// Resolves when the pending fan-out's next slice may go: at `due`, else after a yield (so a
/// key that came meanwhile is read off its socket and taken first).
async fn fanout_turn(due: Option<Instant>) {
    match due {
        Some(at) if at > Instant::now() => tokio::time::sleep_until(at).await,
        _ => tokio::task::yield_now().await,
    }
}

pub(super) async fn read_pty(reader: &Option<PtyMaster>) -> std::io::Result<Bytes> {
    match reader {
        Some(r) => r.read().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn wait_exit(exit: &mut Option<process::ExitWatch>) -> std::io::Result<ExitInfo> {
    match exit {
        Some(watch) => watch.wait().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn recv_answers(
    answers: &mut Option<screen_thread::Answers>,
) -> Option<Vec<(queries::Query, Vec<u8>)>> {
    match answers {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn screen_room(screen: &Option<ScreenThread>) {
    match screen {
        Some(screen) => screen.room().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Session {
    pub(super) fn attach(&mut self, spawned: process::Spawned) {
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        self.last_pid = spawned.pid;
        let stop = CancellationToken::new();
        let writer = tokio::spawn(pty_writer(spawned.pty.clone(), input_rx, stop.clone()));
        self.proc = Proc {
            writer: Some((stop, writer)),
            exit: Some(spawned.exit),
            pid: spawned.pid,
            reader: Some(spawned.pty),
            input: Some(input_tx),
            answers_queued: Default::default(),
            input_queued: Default::default(),
        };
        self.phase = Phase::Running;
    }

    pub(super) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            let reap_at = self.reap_at();
            // Input first: a key goes to the PTY before any more of earlier output is handed
            // out, so the typist never waits behind the fan-out to the other viewers.
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    // Every handle is gone: nobody can reach this session any more.
                    None => self.begin_end(EndReason::Deleted, None),
                },
                read = read_pty(&self.proc.reader), if self.parser_has_room() => {
                    let long = matches!(&read, Ok(chunk) if chunk.len() >= turns::LONG_READ);
                    self.on_read(read);
                    // Someone waits for an echo in another session: it goes before the rest
                    // of this output (see `turns` for why only then).
                    if long && turns::typing_elsewhere(self.id) {
                        crate::metrics::METRICS.turns_given.inc();
                        tokio::task::yield_now().await;
                    }
                }
                // The parser is a backlog behind: the PTY waits (and with it the program).
                _ = screen_room(&self.screen), if !self.parser_has_room() => {}
                _ = fanout_turn(self.fanout.due), if !self.fanout.rest.is_empty() => {
                    self.fanout.due = None;
                    self.fan_out_some(FANOUT_SLICE, || !commands.is_empty())
                }
                Some(found) = recv_answers(&mut self.answers) => self.answer_queries(found),
                status = wait_exit(&mut self.proc.exit) => self.on_child_exit(status),
                _ = sleep_until(self.phase.drain_until()) => self.finish_exit(),
                _ = sleep_until(self.phase.kill_at()) => self.kill_now(),
                _ = sleep_until(reap_at) => {
                    info!(session = %self.id, "reaping exited session with no viewer");
                    self.begin_end(EndReason::Reaped, None);
                }
            }
            if let Phase::Ended = self.phase {
                break;
            }
            if self.freeze.is_some() && self.settled() {
                let frozen = self.freeze_now().await;
                if let Some(reply) = self.freeze.take() {
                    let _ = reply.send(frozen);
                }
                break;
            }
        }
    }

    pub(super) fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Join {
                viewer,
                role,
                events,
                live,
                form,
                reply,
            } => {
                let max = self.cfg.limits.max_viewers_per_session;
                if self.viewers.len() >= max {
                    let _ = reply.send(Err(JoinError::TooManyViewers(max)));
                    return;
                }
                let chat_from = self.chat.len().saturating_sub(CHAT_REPLAY);
                let mut join = JoinReply {
                    snapshot: None,
                    offset: self.log.head(),
                    exit: self.phase.exit().cloned(),
                    chat: self.chat.iter().skip(chat_from).cloned().collect(),
                };
                if self.screen.is_none() {
                    // Nothing to draw a screen from: the joiner replays what the log keeps.
                    join.offset = self.log.start();
                    let _ = reply.send(Ok(join));
                } else if self.drawn {
                    // Rendered on the screen thread once it has parsed up to here.
                    self.snapshot_then(form, move |drawn| {
                        let _ = reply.send(match drawn {
                            Ok((snapshot, offset)) => {
                                join.snapshot = snapshot;
                                join.offset = offset;
                                Ok(join)
                            }
                            Err(failed) => Err(JoinError::Screen(failed)),
                        });
                    });
                } else {
                    let _ = reply.send(Ok(join));
                }
                // Registered at once: a viewer that never reads its reply still leaves.
                self.viewers.insert(
                    viewer,
                    ViewerEntry {
                        events,
                        live,
                        role,
                        size: None,
                        expected: replies::Expected::default(),
                        queued: false,
                    },
                );
                self.presence.join(viewer, role == Role::Writer);
                self.broadcast_status();
                self.broadcast_presence(None);
                if let (Role::Writer, Some(failed)) = (role, &self.recording_failed) {
                    self.refuse(viewer, failed.clone());
                }
            }
            Command::Leave { viewer } => {
                if self.viewers.remove(&viewer).is_some() {
                    self.presence.leave(viewer);
                    self.broadcast_presence(None);
                    if let (true, Phase::Exited { idle_since, .. }) =
                        (self.viewers.is_empty(), &mut self.phase)
                    {
                        *idle_since = Instant::now();
                    }
                    if !self.apply_size() {
                        self.broadcast_status();
                    }
                }
            }
            Command::Input {
                viewer,
                data,
                permit,
            } => self.input(viewer, data, permit),
            Command::Resize { viewer, rows, cols } => {
                if !self.permitted(viewer, Action::Resize) {
                    return;
                }
                if let Some(entry) = self.viewers.get_mut(&viewer) {
                    entry.size = Some(size::clamp(rows, cols));
                    self.apply_size();
                }
            }
            Command::Presence {
                viewer,
                name,
                device,
            } => {
                let mut send = false;
                if let Some(name) = name {
                    match super::presence::validate_presence_name(&name, &self.cfg.limits) {
                        Ok(name) => send |= self.presence.set_name(viewer, name),
                        Err(message) => self.refuse(viewer, Refusal::InvalidChat(message)),
                    }
                }
                if let Some(device) = device {
                    send |= self
                        .presence
                        .set_device(viewer, super::presence::device_kind(&device));
                }
                if send {
                    self.broadcast_presence(None);
                }
            }
            // Not a permission matter: a read-only viewer never counted anyway.
            Command::Follow { viewer } => {
                if let Some(entry) = self.viewers.get_mut(&viewer) {
                    if entry.size.take().is_some() {
                        self.apply_size();
                    }
                }
            }
            Command::TakeSize { viewer, rows, cols } => {
                if !self.permitted(viewer, Action::Resize) || !self.viewers.contains_key(&viewer) {
                    return;
                }
                for (id, entry) in self.viewers.iter_mut() {
                    entry.size = (*id == viewer).then(|| size::clamp(rows, cols));
                }
                self.apply_size();
            }
            Command::Resync { form, reply } => self.snapshot_then(form, move |drawn| {
                let _ = reply.send(drawn.map(|(snapshot, offset)| Resync { snapshot, offset }));
            }),
            Command::Chat {
                viewer,
                user_name,
                text,
            } => match validate_chat(&user_name, &text, &self.cfg.limits) {
                Ok((user_name, text)) => {
                    // The chat name is the name others see in the viewer list.
                    if self.presence.set_name(viewer, Some(user_name.clone())) {
                        self.broadcast_presence(None);
                    }
                    let line = ChatLine {
                        user_name,
                        text,
                        timestamp: rfc3339(SystemTime::now()),
                    };
                    if self.chat.len() == self.cfg.session.chat_history {
                        self.chat.pop_front();
                    }
                    if self.cfg.session.chat_history > 0 {
                        self.chat.push_back(line.clone());
                    }
                    self.broadcast(ViewerEvent::Chat(line));
                }
                Err(message) => self.refuse(viewer, Refusal::InvalidChat(message)),
            },
            Command::Rename {
                viewer,
                name,
                reply,
            } => {
                if let Some(Err(refusal)) = viewer.map(|v| self.permit(v, Action::Rename)) {
                    let _ = reply.send(Err(RenameError::Refused(refusal)));
                    return;
                }
                let result = validate_name(&name, self.cfg.limits.max_name_chars)
                    .map(|name| {
                        if name != self.name {
                            info!(session = %self.id, %name, "session renamed");
                            self.name = name;
                            self.broadcast_status();
                        }
                        self.info.borrow().clone()
                    })
                    .map_err(RenameError::BadName);
                let _ = reply.send(result);
            }
            Command::Upload {
                viewer,
                name,
                data,
                reply,
            } => self.upload(viewer, name, data, reply),
            Command::ToggleYolo { viewer } => self.toggle_yolo(viewer),
            Command::Signal { viewer, signal } => self.send_signal(viewer, &signal),
            Command::End { reason, done } => self.begin_end(reason, Some(done)),
            Command::Tap { tap } => {
                // The reader starts from the session as it stands.
                tap.event(&ViewerEvent::Status {
                    info: self.status(),
                    offset: self.log.head(),
                });
                self.tap = Some(tap);
            }
            Command::RecordingFailed { message } => {
                // Writers are the ones who can act on it (free space, turn recording off); those
                // who join later are told as they join.
                let refusal = Refusal::RecordingFailed(message);
                for viewer in self.viewers.values().filter(|v| v.role == Role::Writer) {
                    viewer.events.push(ViewerEvent::Refused(refusal.clone()));
                }
                self.recording_failed = Some(refusal);
            }
            Command::Detach => self.detach_viewers(),
            Command::Freeze { reply } => self.freeze = Some(reply),
        }
    }

    /// Renders a snapshot of the screen as it stands after the output published so far, off
    /// the actor (on the screen thread), and hands it to `done` with the exact log offset it
    /// belongs to: the model has consumed every byte before it (bytes it holds back, an
    /// incomplete escape sequence, are streamed instead). `done` is always called, with
    /// [`ScreenFailed`] when the screen thread could not render it.
    pub(super) fn snapshot_then(
        &self,
        form: SnapshotForm,
        done: impl FnOnce(Result<(Option<EncodedSnapshot>, u64), ScreenFailed>) + Send + 'static,
    ) {
        match &self.screen {
            Some(screen) => screen.snapshot(
                self.log.head(),
                form,
                Box::new(move |drawn| {
                    done(drawn.map(|(snapshot, offset)| (Some(snapshot), offset)))
                }),
            ),
            None => done(Ok((None, self.log.start()))),
        }
    }

    /// Publishes output: to the log, the screen thread and the viewers (straight onto
    /// their sockets when they can take it now; the others are woken to copy it from the log
    /// on their own tasks). The typist gets it at once; the others a slice at a time from the
    /// loop, after any command waiting (see [`Self::fan_out_some`]).
    pub(super) fn output(&mut self, chunk: Bytes) {
        // Before anyone can see a query, its replies are expected from everyone who will.
        let queries = self.scan.scan(&chunk);
        if !queries.is_empty() {
            let now = Instant::now();
            for query in queries {
                for viewer in self.viewers.values_mut() {
                    viewer.expected.expect(query, now);
                }
            }
        }
        self.drawn = true;
        let start = self.log.head();
        self.log.append(chunk.clone());
        let typist = self
            .typist
            .filter(|(_, at)| at.elapsed() < TYPIST_WINDOW)
            .and_then(|(id, _)| self.viewers.get(&id).map(|v| (id, v)));
        if let Some((_, v)) = typist {
            if !v.live.try_push(start, &chunk) {
                v.live.wake();
            }
        }
        // After the typist's echo: the first output after an idle second starts the screen
        // thread again, which the echo need not wait for (the model follows the log anyway).
        if let Some(screen) = &self.screen {
            screen.output(chunk.clone());
        }
        let typist = typist.map(|(id, _)| id);
        let mut rest = std::mem::take(&mut self.fanout.rest);
        let (mut due, ended_at) = (self.fanout.due, self.fanout.ended_at);
        let (start, chunk) =
            if !rest.is_empty() && self.fanout.chunk.len() + chunk.len() <= FANOUT_JOIN_BYTES {
                let mut both = BytesMut::with_capacity(self.fanout.chunk.len() + chunk.len());
                both.extend_from_slice(&self.fanout.chunk);
                both.extend_from_slice(&chunk);
                (self.fanout.start, both.freeze())
            } else {
                // A new round: at once, or (to many viewers) a pace after the last one ended.
                let now = Instant::now();
                due = ended_at
                    .map(|at| at + FANOUT_PACE)
                    .filter(|at| *at > now && self.viewers.len() > FANOUT_PACED_FROM);
                // Too much to join: those still owed the previous chunk copy both from the log on
                // their own tasks.
                for id in rest.drain(..) {
                    if let Some(v) = self.viewers.get_mut(&id) {
                        v.queued = false;
                        v.live.wake();
                    }
                }
                (start, chunk)
            };
        // Those already handed the previous chunk queue in front of those still owed it, who
        // are served first (from the back).
        let mut owed = std::mem::replace(&mut rest, std::mem::take(&mut self.fanout.spare));
        for (id, v) in self.viewers.iter_mut() {
            if !v.queued && Some(*id) != typist {
                v.queued = true;
                rest.push(*id);
            }
        }
        rest.append(&mut owed);
        self.fanout = Fanout {
            start,
            chunk,
            rest,
            due,
            ended_at,
            spare: owed,
        };
    }

    /// Hands the pending output to up to `n` more viewers: straight onto the socket of one
    /// that is idle and caught up, else a wake-up for its task to copy it from the log. Stops
    /// early once `input_waiting` says a command has come, so a key goes to the PTY before the
    /// rest of the round.
    pub(super) fn fan_out_some(&mut self, n: usize, input_waiting: impl Fn() -> bool) {
        let Fanout {
            start,
            chunk,
            rest,
            ended_at,
            ..
        } = &mut self.fanout;
        for _ in 0..n {
            let Some(id) = rest.pop() else {
                break;
            };
            if let Some(v) = self.viewers.get_mut(&id) {
                v.queued = false;
                if !v.live.try_push(*start, chunk) {
                    v.live.wake();
                }
            }
            if input_waiting() {
                break;
            }
        }
        if rest.is_empty() {
            // The chunk is in the log; nothing else needs this reference to it.
            *chunk = Bytes::new();
            *ended_at = Some(Instant::now());
        }
    }

    pub(super) fn on_read(&mut self, read: std::io::Result<Bytes>) {
        match read {
            Ok(chunk) if !chunk.is_empty() => self.output(chunk),
            // EOF, or EIO once every process has closed the terminal side.
            _ => {
                self.proc.reader = None;
                self.finish_exit();
            }
        }
    }

    /// Whether the screen thread can take more output now (always, without a model).
    fn parser_has_room(&self) -> bool {
        self.screen.as_ref().is_none_or(ScreenThread::has_room)
    }

    pub(super) fn status(&self) -> StatusInfo {
        StatusInfo {
            viewers: self.viewers.len(),
            rows: self.size.0,
            cols: self.size.1,
            assistant: self.assistant.name.clone(),
            session_name: self.name.clone(),
            session_uuid: self.id,
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
            yolo_supported: self.assistant.yolo_supported(),
            restarting: self.phase.restarting(),
        }
    }

    pub(super) fn publish_info(&self) {
        let info = SessionInfo {
            id: self.id,
            num: self.num,
            name: self.name.clone(),
            assistant: self.assistant_key.clone(),
            assistant_name: self.assistant.name.clone(),
            viewers: self.viewers.len(),
            cols: self.size.1,
            rows: self.size.0,
            alive: self.phase.exit().is_none(),
            exit_code: self.phase.exit().map(|e| e.code),
            exit_signal: self.phase.exit().and_then(|e| e.signal.clone()),
            created_at: rfc3339(self.created_at),
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
            command: self.command.clone(),
            people: self.presence.names(),
            // Read fresh by the session list (the registry); this is its value now.
            output_bytes: self.log.head(),
        };
        self.info.send_replace(info);
    }
}
