//! The only way into a session: a cheap, cloneable handle whose calls become commands on the
//! actor's bounded queue, with replies on oneshot channels.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::events::{
    EndReason, JoinError, JoinReply, LiveOutput, RenameError, Resync, Role, SessionGone,
    SessionInfo, UploadFailed, Uploaded, ViewerId, Who,
};
use super::handoff::SessionHandoff;
use super::input::{InputPermit, INPUT_MESSAGE_OVERHEAD, INPUT_QUEUE_BYTES};
use super::output_log::SharedLog;
use super::recorder_feed::{self, FeedReceiver, FeedSender};
use super::screen_thread::ScreenFailed;
use super::viewer_queue::EventSender;
use crate::attention::gate::StateGate;
use crate::attention::report::Report;
use crate::attention::screen::ScreenSlot;
use crate::term::snapshot::SnapshotForm;

/// Called once when a session has ended, with its id (the registry removes it).
pub type OnEnd = Box<dyn FnOnce(Uuid) + Send>;

/// Commands queued per session before senders wait.
const COMMAND_QUEUE: usize = 256;

/// A viewer asks to join.
pub(super) struct JoinRequest {
    pub(super) viewer: ViewerId,
    pub(super) role: Role,
    /// Who the viewer is (its user's name, or a guest).
    pub(super) who: Who,
    pub(super) events: EventSender,
    pub(super) live: Arc<dyn LiveOutput>,
    /// How the viewer's dialect carries a snapshot.
    pub(super) form: SnapshotForm,
    pub(super) reply: oneshot::Sender<Result<JoinReply, JoinError>>,
}

/// A viewer sends a file for the working directory.
pub(super) struct UploadRequest {
    pub(super) viewer: ViewerId,
    pub(super) name: Vec<u8>,
    pub(super) data: Bytes,
    pub(super) reply: oneshot::Sender<Result<Uploaded, UploadFailed>>,
}

/// What the actor is asked to do, by its handles (and by itself, for work it finishes later).
pub(super) enum Command {
    Join(JoinRequest),
    Leave {
        viewer: ViewerId,
    },
    Input {
        viewer: ViewerId,
        data: Bytes,
        /// Its share of the input budget, given back once it is written to the PTY.
        permit: InputPermit,
    },
    Resize {
        viewer: ViewerId,
        rows: u16,
        cols: u16,
    },
    /// The viewer's name and device kind for the others (each only when given).
    Presence {
        viewer: ViewerId,
        name: Option<String>,
        device: Option<String>,
    },
    /// The viewer's size stops counting.
    Follow {
        viewer: ViewerId,
    },
    /// The viewer's size becomes the session's; the others' stop counting.
    TakeSize {
        viewer: ViewerId,
        rows: u16,
        cols: u16,
    },
    Resync {
        form: SnapshotForm,
        reply: oneshot::Sender<Result<Resync, ScreenFailed>>,
    },
    Chat {
        viewer: ViewerId,
        user_name: String,
        text: String,
    },
    Rename {
        /// `None` when the caller checked the permission itself (REST, by token).
        viewer: Option<ViewerId>,
        name: String,
        reply: oneshot::Sender<Result<SessionInfo, RenameError>>,
    },
    Upload(UploadRequest),
    ToggleYolo {
        viewer: ViewerId,
    },
    Signal {
        viewer: ViewerId,
        signal: String,
    },
    End {
        reason: EndReason,
        done: oneshot::Sender<()>,
    },
    /// A recorder is connected: it is fed a copy of what every viewer is told.
    FeedRecorder {
        feed: FeedSender,
    },
    RecordingFailed {
        message: String,
    },
    /// A live upgrade begins: the viewers are told to reconnect.
    Detach,
    /// A live upgrade: hand over once settled, and stop.
    HandOver {
        reply: oneshot::Sender<SessionHandoff>,
    },
    /// The agent reported its state (through the session's capability token, or the daemon's).
    Report {
        report: Report,
        /// Answered once the report is applied: whoever reads the session after the reply
        /// sees it.
        done: oneshot::Sender<()>,
    },
    /// Keys from someone who may type but is no viewer of the session (a quick reply on the
    /// board): the caller checked the permission.
    Reply {
        data: Bytes,
        /// Its share of the input budget, given back once it is written to the PTY.
        permit: InputPermit,
        /// Whether the program took it (false once it has ended).
        done: oneshot::Sender<bool>,
    },
}

/// A command as it travels: boxed, so that the queue reserves room for 32 pointers at the
/// session's start rather than for 32 of the largest command.
pub(super) type Queued = Box<Command>;

/// A channel for commands to a new session: the handles' end and the actor's.
pub(super) fn command_queue() -> (mpsc::Sender<Queued>, mpsc::Receiver<Queued>) {
    mpsc::channel(COMMAND_QUEUE)
}

/// A cheap, cloneable reference to a running session actor.
#[derive(Clone)]
pub struct SessionHandle {
    id: Uuid,
    commands: mpsc::Sender<Queued>,
    /// Input bytes that may be in flight to the PTY, shared by every writer of the session.
    input_budget: Arc<Semaphore>,
    log: Arc<SharedLog>,
    info: watch::Receiver<Arc<SessionInfo>>,
    ended: CancellationToken,
    /// Whether the session keeps a screen model (and so can resync a viewer by snapshot).
    screen: bool,
    /// The screen's latest text (none without a screen model).
    slot: Option<Arc<ScreenSlot>>,
    /// The session's capability token and its reports' rate limit.
    gate: Arc<StateGate>,
}

/// What a launched session's handle is made of besides its command queue.
pub(super) struct HandleParts {
    pub(super) input_budget: Arc<Semaphore>,
    pub(super) log: Arc<SharedLog>,
    pub(super) info: watch::Receiver<Arc<SessionInfo>>,
    pub(super) ended: CancellationToken,
    /// Whether the session keeps a screen model.
    pub(super) screen: bool,
    pub(super) slot: Option<Arc<ScreenSlot>>,
    pub(super) gate: Arc<StateGate>,
}

impl SessionHandle {
    /// The handle of a session just launched.
    pub(super) fn new(id: Uuid, commands: mpsc::Sender<Queued>, parts: HandleParts) -> Self {
        let HandleParts {
            input_budget,
            log,
            info,
            ended,
            screen,
            slot,
            gate,
        } = parts;
        Self {
            id,
            commands,
            input_budget,
            log,
            info,
            ended,
            screen,
            slot,
            gate,
        }
    }

    /// The screen's latest text, as its last reading found it, taken without waking anything
    /// (none for a session without a screen model).
    pub fn screen_text(&self) -> Option<&Arc<ScreenSlot>> {
        self.slot.as_ref()
    }

    /// The session's capability token and its reports' rate limit.
    pub fn state_gate(&self) -> &Arc<StateGate> {
        &self.gate
    }

    /// The agent reports the session's state (the caller checked the token and the rate); returns
    /// once the session has applied it, so a read that follows sees it.
    pub async fn report_state(&self, report: Report) -> Result<(), SessionGone> {
        let (done, applied) = oneshot::channel();
        self.send(Command::Report { report, done }).await?;
        applied.await.map_err(|_| SessionGone)
    }

    /// A reference that does not keep the session alive.
    pub fn downgrade(&self) -> WeakSessionHandle {
        WeakSessionHandle {
            commands: self.commands.downgrade(),
            input_budget: self.input_budget.clone(),
        }
    }

    /// Cancelled once the session has ended and told its viewers to close.
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Whether a resync sends the screen (with a screen model) rather than replaying the log.
    pub fn has_screen(&self) -> bool {
        self.screen
    }

    /// The session id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The session's output log, which viewers read from their own offsets.
    pub fn log(&self) -> &Arc<SharedLog> {
        &self.log
    }

    /// The session's current metadata.
    pub fn info(&self) -> Arc<SessionInfo> {
        self.info.borrow().clone()
    }

    /// The session's metadata as it changes.
    pub fn watch_info(&self) -> watch::Receiver<Arc<SessionInfo>> {
        self.info.clone()
    }

    async fn send(&self, cmd: Command) -> Result<(), SessionGone> {
        self.commands
            .send(Box::new(cmd))
            .await
            .map_err(|_| SessionGone)
    }

    /// Adds a viewer with `role`; `events` receives everything addressed to it, `live` its
    /// output; its snapshot is packed as `form` asks. The viewer stays a member
    /// until the returned [`Membership`] is dropped.
    pub async fn join(
        &self,
        role: Role,
        who: Who,
        events: EventSender,
        live: Arc<dyn LiveOutput>,
        form: SnapshotForm,
    ) -> Result<(Membership, JoinReply), JoinError> {
        let viewer = NEXT_VIEWER.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.send(Command::Join(JoinRequest {
            viewer,
            role,
            who,
            events,
            live,
            form,
            reply,
        }))
        .await?;
        // From here on the session may have registered it: leaving is the guard's job, even if
        // this future is dropped before the reply.
        let membership = Membership {
            handle: self.clone(),
            viewer,
        };
        let join = rx.await.map_err(|_| SessionGone)??;
        Ok((membership, join))
    }

    /// Keystrokes or pasted bytes for the program. Waits while the program is
    /// [`INPUT_QUEUE_BYTES`] behind in reading its input: the caller stops reading its client,
    /// which is slowed by TCP instead of losing what it sent.
    ///
    /// Then yields once: the actor, woken by the key and next on this worker, writes it to the
    /// program before the caller goes back to its socket (where it would find nothing yet, a
    /// key being one message). Measured on two vCPUs: the typist's echo p50 about a fifth lower
    /// with no other viewer, no change seen otherwise (benches/RESULTS.md, stop 54).
    pub async fn input(&self, viewer: ViewerId, data: Bytes) -> Result<(), SessionGone> {
        let cost = (data.len() + INPUT_MESSAGE_OVERHEAD).min(INPUT_QUEUE_BYTES) as u32;
        let permit = self
            .input_budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| SessionGone)?;
        self.send(Command::Input {
            viewer,
            data,
            permit: Some(permit),
        })
        .await?;
        tokio::task::yield_now().await;
        Ok(())
    }

    /// Keys from someone who may type into the session without being one of its viewers (a
    /// quick reply on the board; the caller checked that they may write). Takes the input
    /// budget as [`SessionHandle::input`] does. `Ok(false)`: the program has ended.
    pub async fn reply(&self, data: Bytes) -> Result<bool, SessionGone> {
        let cost = (data.len() + INPUT_MESSAGE_OVERHEAD).min(INPUT_QUEUE_BYTES) as u32;
        let permit = self
            .input_budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| SessionGone)?;
        let (done, rx) = oneshot::channel();
        self.send(Command::Reply {
            data,
            permit: Some(permit),
            done,
        })
        .await?;
        rx.await.map_err(|_| SessionGone)
    }

    /// The viewer's terminal size.
    pub async fn resize(&self, viewer: ViewerId, rows: u16, cols: u16) -> Result<(), SessionGone> {
        self.send(Command::Resize { viewer, rows, cols }).await
    }

    /// The viewer's name (the chat name; empty clears it) and device kind, for the others.
    pub async fn presence(
        &self,
        viewer: ViewerId,
        name: Option<String>,
        device: Option<String>,
    ) -> Result<(), SessionGone> {
        self.send(Command::Presence {
            viewer,
            name,
            device,
        })
        .await
    }

    /// The viewer no longer sizes the session: it follows the size the others set.
    pub async fn follow(&self, viewer: ViewerId) -> Result<(), SessionGone> {
        self.send(Command::Follow { viewer }).await
    }

    /// The viewer takes control of the size: the session gets its size, the others follow.
    pub async fn take_size(
        &self,
        viewer: ViewerId,
        rows: u16,
        cols: u16,
    ) -> Result<(), SessionGone> {
        self.send(Command::TakeSize { viewer, rows, cols }).await
    }

    /// A fresh snapshot (packed as `form` asks) and the offset the stream resumes from, or
    /// why the screen could not be drawn.
    pub async fn resync(
        &self,
        form: SnapshotForm,
    ) -> Result<Result<Resync, ScreenFailed>, SessionGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Resync { form, reply }).await?;
        rx.await.map_err(|_| SessionGone)
    }

    /// A chat message from a viewer, for everyone.
    pub async fn chat(
        &self,
        viewer: ViewerId,
        user_name: String,
        text: String,
    ) -> Result<(), SessionGone> {
        self.send(Command::Chat {
            viewer,
            user_name,
            text,
        })
        .await
    }

    /// Renames the session on behalf of `viewer` (its role is checked), or of a caller that
    /// checked the permission itself (`None`).
    pub async fn rename(
        &self,
        viewer: Option<ViewerId>,
        name: String,
    ) -> Result<SessionInfo, RenameError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Rename {
            viewer,
            name,
            reply,
        })
        .await?;
        rx.await.map_err(|_| SessionGone)?
    }

    /// Saves a file into the working directory and types its quoted path for the program.
    pub async fn upload(
        &self,
        viewer: ViewerId,
        name: Vec<u8>,
        data: Bytes,
    ) -> Result<Uploaded, UploadFailed> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Upload(UploadRequest {
            viewer,
            name,
            data,
            reply,
        }))
        .await?;
        rx.await.map_err(|_| SessionGone)?
    }

    /// Restarts the agent with or without its YOLO command.
    pub async fn toggle_yolo(&self, viewer: ViewerId) -> Result<(), SessionGone> {
        self.send(Command::ToggleYolo { viewer }).await
    }

    /// Sends a signal (by name) to the program's foreground process group.
    pub async fn signal(&self, viewer: ViewerId, signal: String) -> Result<(), SessionGone> {
        self.send(Command::Signal { viewer, signal }).await
    }

    /// For the recorder: a copy of what every viewer is told (and of input, with `input`)
    /// from now on; the first item is the session's status. Queued without waiting: called as
    /// the session is created, before anyone else can reach it, so nothing it says is missed.
    pub fn feed_recorder(&self, input: bool) -> Result<FeedReceiver, SessionGone> {
        let (feed, receiver) = recorder_feed::channel(input);
        self.commands
            .try_send(Box::new(Command::FeedRecorder { feed }))
            .map_err(|_| SessionGone)?;
        Ok(receiver)
    }

    /// A live upgrade begins: every viewer is told the daemon restarts (close 1012); the
    /// session goes on.
    pub async fn detach_for_upgrade(&self) -> Result<(), SessionGone> {
        self.send(Command::Detach).await
    }

    /// A live upgrade: the session hands over its image (once no restart or exit is under
    /// way) and its actor stops; the program runs on. `None` if it ended first.
    pub async fn hand_over(&self) -> Option<SessionHandoff> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::HandOver { reply }).await.ok()?;
        rx.await.ok()
    }

    /// Ends the session (signalling its processes, closing its viewers) and waits until it is gone.
    pub async fn end(&self, reason: EndReason) -> Result<(), SessionGone> {
        let (done, rx) = oneshot::channel();
        self.send(Command::End { reason, done }).await?;
        rx.await.map_err(|_| SessionGone)
    }
}

/// A reference to a session that does not keep it alive: for work that reports back to it
/// later (an upload's typed path, the recorder's failure).
#[derive(Clone)]
pub struct WeakSessionHandle {
    commands: mpsc::WeakSender<Queued>,
    /// The session's input budget (see [`SessionHandle::input`]).
    input_budget: Arc<Semaphore>,
}

impl WeakSessionHandle {
    /// The actor's own reference: `commands` is its queue, `input_budget` its handles'.
    pub(super) fn new(commands: &mpsc::Sender<Queued>, input_budget: Arc<Semaphore>) -> Self {
        Self {
            commands: commands.downgrade(),
            input_budget,
        }
    }

    /// Bytes typed for the program on behalf of `viewer`, like its own input: same budget,
    /// same queue, same order.
    pub(super) async fn input(&self, viewer: ViewerId, data: Bytes) -> Result<(), SessionGone> {
        let cost = (data.len() + INPUT_MESSAGE_OVERHEAD).min(INPUT_QUEUE_BYTES) as u32;
        let budget = self.input_budget.clone();
        let (Some(session), Ok(permit)) = (
            self.commands.upgrade(),
            budget.acquire_many_owned(cost).await,
        ) else {
            return Err(SessionGone);
        };
        let input = Command::Input {
            viewer,
            data,
            permit: Some(permit),
        };
        session.send(Box::new(input)).await.map_err(|_| SessionGone)
    }

    /// Tells the session's writers (those connected and those who join later, each once)
    /// that its recorder failed: the recording stopped, and why.
    pub async fn report_recording_failure(&self, message: String) {
        if let Some(session) = self.commands.upgrade() {
            let _ = session
                .send(Box::new(Command::RecordingFailed { message }))
                .await;
        }
    }
}

/// Gives out viewer ids, unique within the daemon.
static NEXT_VIEWER: AtomicU64 = AtomicU64::new(1);

/// A viewer's place in its session. Dropping it leaves, so a connection task that ends in any
/// way, a panic included, never stays counted (or shapes the size) after it is gone.
pub struct Membership {
    handle: SessionHandle,
    viewer: ViewerId,
}

impl Membership {
    /// The viewer's id within the session.
    pub fn viewer(&self) -> ViewerId {
        self.viewer
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let leave = Box::new(Command::Leave {
            viewer: self.viewer,
        });
        match self.handle.commands.try_send(leave) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            // The queue is full for a moment: leave from a task (the session is still running,
            // so there is a runtime to run it).
            Err(mpsc::error::TrySendError::Full(leave)) => {
                let commands = self.handle.commands.clone();
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        let _ = commands.send(leave).await;
                    });
                }
            }
        }
    }
}
