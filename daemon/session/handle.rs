//! The only way into a session: a cheap, cloneable handle whose calls become commands on the
//! actor's bounded queue, with replies on oneshot channels.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::*;

/// Called once when a session has ended, with its id (the registry removes it).
pub type OnEnd = Box<dyn FnOnce(Uuid) + Send>;

pub(super) enum Command {
    Join {
        viewer: ViewerId,
        role: Role,
        events: EventSender,
        live: Arc<dyn LiveOutput>,
        /// How the viewer's dialect carries a snapshot.
        form: SnapshotForm,
        reply: oneshot::Sender<Result<JoinReply, JoinError>>,
    },
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
    Upload {
        viewer: ViewerId,
        name: Vec<u8>,
        data: Bytes,
        reply: oneshot::Sender<Result<Uploaded, UploadFailed>>,
    },
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
    Tap {
        tap: tap::Tap,
    },
    RecordingFailed {
        message: String,
    },
    /// A live upgrade begins: the viewers are told to reconnect.
    Detach,
    /// A live upgrade: freeze into an image once settled, and stop.
    Freeze {
        reply: oneshot::Sender<freeze::Frozen>,
    },
}

/// A cheap, cloneable reference to a running session actor.
#[derive(Clone)]
pub struct SessionHandle {
    pub(super) id: Uuid,
    pub(super) commands: mpsc::Sender<Command>,
    /// Input bytes that may be in flight to the PTY, shared by every writer of the session.
    pub(super) input_budget: Arc<Semaphore>,
    pub(super) log: Arc<SharedLog>,
    pub(super) info: watch::Receiver<SessionInfo>,
    pub(super) ended: CancellationToken,
    /// Whether the session keeps a screen model (and so can resync a viewer by snapshot).
    pub(super) screen: bool,
}

impl SessionHandle {
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
    pub fn info(&self) -> SessionInfo {
        self.info.borrow().clone()
    }

    /// The session's metadata as it changes.
    pub fn watch_info(&self) -> watch::Receiver<SessionInfo> {
        self.info.clone()
    }

    async fn send(&self, cmd: Command) -> Result<(), SessionGone> {
        self.commands.send(cmd).await.map_err(|_| SessionGone)
    }

    /// Adds a viewer with `role`; `events` receives everything addressed to it, `live` its
    /// output; its snapshot is packed as `form` asks. The viewer stays a member
    /// until the returned [`Membership`] is dropped.
    pub async fn join(
        &self,
        role: Role,
        events: EventSender,
        live: Arc<dyn LiveOutput>,
        form: SnapshotForm,
    ) -> Result<(Membership, JoinReply), JoinError> {
        let viewer = NEXT_VIEWER.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.send(Command::Join {
            viewer,
            role,
            events,
            live,
            form,
            reply,
        })
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
        .await
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
        self.send(Command::Upload {
            viewer,
            name,
            data,
            reply,
        })
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

    /// A copy of what every viewer is told (and of input, with `input`) from now on; the first
    /// item is the session's status. Queued without waiting: called as the session is created,
    /// before anyone else can reach it, so nothing it says is missed.
    pub fn tap(&self, input: bool) -> Result<tap::TapReceiver, SessionGone> {
        let (tap, receiver) = tap::tap(input, self.commands.downgrade());
        self.commands
            .try_send(Command::Tap { tap })
            .map_err(|_| SessionGone)?;
        Ok(receiver)
    }

    /// A live upgrade begins: every viewer is told the daemon restarts (close 1012); the
    /// session goes on.
    pub async fn detach_for_upgrade(&self) -> Result<(), SessionGone> {
        self.send(Command::Detach).await
    }

    /// A live upgrade: the session freezes into its image (once no restart or exit is under
    /// way) and its actor stops; the program runs on. `None` if it ended first.
    pub async fn freeze(&self) -> Option<freeze::Frozen> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Freeze { reply }).await.ok()?;
        rx.await.ok()
    }

    /// Ends the session (signalling its processes, closing its viewers) and waits until it is gone.
    pub async fn end(&self, reason: EndReason) -> Result<(), SessionGone> {
        let (done, rx) = oneshot::channel();
        self.send(Command::End { reason, done }).await?;
        rx.await.map_err(|_| SessionGone)
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
        let leave = Command::Leave {
            viewer: self.viewer,
        };
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
