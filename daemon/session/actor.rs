//! The session actor: its state, its loop over commands, PTY reads, the child's exit and
//! timers, and the publishing of output to the log, the screen thread and the viewers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

use super::*;
use crate::config::{Assistant, Config};

pub(super) struct ViewerEntry {
    pub(super) events: EventSender,
    pub(super) live: Arc<dyn LiveOutput>,
    pub(super) role: Role,
    /// `(rows, cols)` as last sent, clamped; `None` until the viewer sends one.
    pub(super) size: Option<(u16, u16)>,
    /// Replies this viewer's terminal owes to queries it was sent (dropped when they come).
    pub(super) expected: queries::Expected,
}

/// The running program, while there is one.
#[derive(Default)]
pub(super) struct Proc {
    pub(super) child: Option<tokio::process::Child>,
    pub(super) pid: i32,
    pub(super) reader: Option<pty_process::OwnedReadPty>,
    pub(super) input: Option<mpsc::UnboundedSender<PtyInput>>,
    /// Bytes of query answers sent to the writer task and not yet written to the PTY.
    pub(super) answers_queued: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) size: Option<watch::Sender<(u16, u16)>>,
    /// How it ended, once it has (its PTY may still be draining).
    pub(super) status: Option<ExitInfo>,
    /// Stop waiting for output after the program's exit at this instant.
    pub(super) drain_until: Option<Instant>,
}

pub(super) struct Ending {
    pub(super) reason: EndReason,
    pub(super) waiters: Vec<oneshot::Sender<()>>,
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
    pub(super) name: String,
    pub(super) cwd: PathBuf,
    pub(super) created_at: SystemTime,
    pub(super) yolo_mode: bool,
    /// The screen model, on its own thread.
    pub(super) screen: ScreenThread,
    /// The model's answers to terminal queries, for the program.
    pub(super) answers: screen_thread::Answers,
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
    pub(super) exit: Option<ExitInfo>,
    /// When the session last became exited-and-unwatched, for reaping.
    pub(super) idle_since: Instant,
    pub(super) ending: Option<Ending>,
    /// The pid of the latest program, kept after it exits: its leftovers are found through it.
    pub(super) last_pid: i32,
    /// Set while the agent is being restarted (YOLO toggle).
    pub(super) restarting: bool,
    /// SIGKILL whatever is left of the program at this instant (ending or restarting).
    pub(super) kill_at: Option<Instant>,
    pub(super) chat: std::collections::VecDeque<ChatLine>,
    pub(super) info: watch::Sender<SessionInfo>,
    pub(super) on_end: Option<OnEnd>,
    pub(super) ended: CancellationToken,
    pub(super) read_buf: BytesMut,
}

pub(super) async fn read_pty(
    reader: &mut Option<pty_process::OwnedReadPty>,
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    match reader {
        Some(r) => {
            buf.reserve(READ_CHUNK);
            r.read_buf(buf).await
        }
        None => std::future::pending().await,
    }
}

pub(super) async fn wait_child(
    child: &mut Option<tokio::process::Child>,
) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(c) => c.wait().await,
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
        let (size_tx, size_rx) = watch::channel(self.size);
        self.last_pid = spawned.pid;
        tokio::spawn(pty_writer(spawned.writer, input_rx, size_rx));
        self.proc = Proc {
            child: Some(spawned.child),
            pid: spawned.pid,
            reader: Some(spawned.reader),
            input: Some(input_tx),
            answers_queued: Default::default(),
            size: Some(size_tx),
            status: None,
            drain_until: None,
        };
    }

    pub(super) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            let reap_at = self.reap_at();
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    // Every handle is gone: nobody can reach this session any more.
                    None => self.begin_end(EndReason::Deleted, None),
                },
                read = read_pty(&mut self.proc.reader, &mut self.read_buf), if self.screen.has_room() => {
                    self.on_read(read)
                }
                // The parser is a backlog behind: the PTY waits (and with it the program).
                _ = self.screen.room(), if !self.screen.has_room() => {}
                Some(found) = self.answers.recv() => self.answer_queries(found),
                status = wait_child(&mut self.proc.child) => self.on_child_exit(status),
                _ = sleep_until(self.proc.drain_until) => self.finish_exit(),
                _ = sleep_until(self.kill_at) => self.kill_now(),
                _ = sleep_until(reap_at) => {
                    info!(session = %self.id, "reaping exited session with no viewer");
                    self.begin_end(EndReason::Reaped, None);
                }
            }
            if self.on_end.is_none() {
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
                    exit: self.exit.clone(),
                    chat: self.chat.iter().skip(chat_from).cloned().collect(),
                };
                if self.drawn {
                    // Rendered on the screen thread once it has parsed up to here.
                    self.snapshot_then(move |snapshot, offset| {
                        join.snapshot = Some(snapshot);
                        join.offset = offset;
                        let _ = reply.send(Ok(join));
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
                        expected: queries::Expected::default(),
                    },
                );
                self.broadcast_status();
            }
            Command::Leave { viewer } => {
                if self.viewers.remove(&viewer).is_some() {
                    if self.viewers.is_empty() {
                        self.idle_since = Instant::now();
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
            Command::Resync { reply } => self.snapshot_then(move |snapshot, offset| {
                let _ = reply.send(Resync { snapshot, offset });
            }),
            Command::Chat {
                viewer,
                user_name,
                text,
            } => match validate_chat(&user_name, &text, &self.cfg.limits) {
                Ok((user_name, text)) => {
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
        }
    }

    /// Renders a snapshot of the screen as it stands after the output published so far, off
    /// the actor (on the screen thread), and hands it to `done` with the exact log offset it
    /// belongs to: the model has consumed every byte before it (bytes it holds back, an
    /// incomplete escape sequence, are streamed instead).
    pub(super) fn snapshot_then(&self, done: impl FnOnce(EncodedSnapshot, u64) + Send + 'static) {
        self.screen.snapshot(self.log.head(), Box::new(done));
    }

    /// Publishes output: to the screen thread, to the log, and to the viewers (straight onto
    /// their sockets when they can take it now, the typist first; the others are woken to
    /// copy it from the log on their own tasks).
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
        self.screen.output(chunk.clone());
        let typist = self
            .typist
            .filter(|(_, at)| at.elapsed() < TYPIST_WINDOW)
            .and_then(|(id, _)| self.viewers.get(&id).map(|v| (id, v)));
        if let Some((_, v)) = typist {
            if !v.live.try_push(start, &chunk) {
                v.live.wake();
            }
        }
        let typist = typist.map(|(id, _)| id);
        for (id, v) in &self.viewers {
            if Some(*id) != typist && !v.live.try_push(start, &chunk) {
                v.live.wake();
            }
        }
    }

    pub(super) fn on_read(&mut self, read: std::io::Result<usize>) {
        match read {
            Ok(n) if n > 0 => {
                // Copied out at its own size so the log's byte bound is also its memory bound
                // (a frozen slice would pin the whole read buffer); the buffer is reused.
                let chunk = Bytes::copy_from_slice(&self.read_buf);
                self.read_buf.clear();
                self.output(chunk);
            }
            // EOF, or EIO once every process has closed the terminal side.
            _ => {
                self.proc.reader = None;
                if self.proc.status.is_some() {
                    self.finish_exit();
                }
            }
        }
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
            restarting: self.restarting,
        }
    }

    pub(super) fn publish_info(&self) {
        let info = SessionInfo {
            id: self.id,
            name: self.name.clone(),
            assistant: self.assistant_key.clone(),
            assistant_name: self.assistant.name.clone(),
            viewers: self.viewers.len(),
            cols: self.size.1,
            rows: self.size.0,
            alive: self.exit.is_none(),
            exit_code: self.exit.as_ref().map(|e| e.code),
            exit_signal: self.exit.as_ref().and_then(|e| e.signal.clone()),
            created_at: rfc3339(self.created_at),
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
        };
        self.info.send_replace(info);
    }
}
