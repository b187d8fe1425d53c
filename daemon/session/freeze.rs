//! The session's side of a live upgrade: letting its viewers go, freezing into an image (its
//! metadata, the screen as ANSI at an exact log offset, the log's tail, input not yet written,
//! the PTY master), and a session adopted from such an image by the next image of the daemon.
//!
//! A freeze waits for a settled phase (running, or exited): a YOLO restart or an exit being
//! drained finishes first, so an image never holds a half-done transition.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{info, warn};

use super::actor::{Proc, Session};
use super::phase::Phase;
use super::pty::PtyMaster;
use super::*;
use crate::upgrade::image::{
    AssistantImage, Blobs, ChatImage, ExitImage, ImageError, ProcessImage, SessionImage,
};

/// Output kept in the image beyond what the snapshot needs: enough for a log follower
/// (`/api/sessions/{id}/log`) to resume across the upgrade after a short gap.
const LOG_TAIL_KEPT: u64 = 256 * 1024;

/// A frozen session: its image (blob fields unset) and the bytes and descriptor that go with it.
pub struct Frozen {
    /// Everything but the byte areas.
    pub image: SessionImage,
    /// The screen as ANSI at `image.snapshot_offset`.
    pub snapshot: Option<Vec<u8>>,
    /// The log from `image.log_start` to its head.
    pub log: Vec<u8>,
    /// Input accepted and not yet written.
    pub input: Vec<u8>,
    /// The PTY master (a duplicate: the session's own descriptors are closed).
    pub pty: Option<OwnedFd>,
}

/// Why an image could not become a session.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// The image is inconsistent.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The screen thread or the descriptors could not be set up.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Session {
    /// Tells every viewer the daemon is restarting (close 1012); the session goes on, so input
    /// they sent before they saw the close still reaches the program.
    pub(super) fn detach_viewers(&mut self) {
        for viewer in self.viewers.values() {
            viewer.events.push(ViewerEvent::Close(EndReason::Upgrade));
        }
    }

    /// Whether a freeze can happen now (no transition under way).
    pub(super) fn settled(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::Exited { .. })
    }

    /// Freezes the session into its image and stops the actor (the program runs on).
    pub(super) async fn freeze_now(&mut self) -> Frozen {
        // Input first: what the writer has not written goes along, in order.
        let input = match self.proc.writer.take() {
            Some((stop, task)) => {
                stop.cancel();
                task.await.unwrap_or_default()
            }
            None => Vec::new(),
        };
        let head = self.log.head();
        let (snapshot, snapshot_offset) = match (&self.screen, self.drawn) {
            (Some(screen), true) => {
                let (tx, rx) = oneshot::channel();
                // Unlimited and plain: the whole scrollback, exactly.
                screen.snapshot(
                    head,
                    SnapshotForm::plain(usize::MAX),
                    Box::new(move |drawn| {
                        let _ = tx.send(
                            drawn.map(|(snapshot, offset)| (snapshot.bytes.to_vec(), offset)),
                        );
                    }),
                );
                match rx.await {
                    Ok(Ok((bytes, offset))) => (Some(bytes), offset),
                    Ok(Err(_)) | Err(_) => {
                        warn!(session = %self.id, "screen could not be drawn: frozen without a screen");
                        (None, self.log.start())
                    }
                }
            }
            _ => (None, head),
        };
        let log_start = head
            .saturating_sub(LOG_TAIL_KEPT)
            .min(snapshot_offset)
            .max(self.log.start());
        let mut log = Vec::new();
        if self.log.read(log_start, usize::MAX, &mut log).is_err() {
            log.clear();
        }
        let pty = self
            .proc
            .reader
            .as_ref()
            .and_then(|r| rustix::io::fcntl_dupfd_cloexec(r.as_fd(), 3).ok());
        let running = self.phase.exit().is_none() && self.proc.pid > 0;
        let image = SessionImage {
            id: self.id,
            num: self.num,
            name: self.name.clone(),
            assistant_key: self.assistant_key.clone(),
            assistant: AssistantImage {
                name: self.assistant.name.clone(),
                command: self.assistant.command.clone(),
                resume: self.assistant.resume.clone(),
                yolo: self.assistant.yolo.clone(),
                env: self.assistant.env.clone(),
                yolo_env: self.assistant.yolo_env.clone(),
            },
            own_command: self.own_command,
            command: self.command.clone(),
            cwd: self.cwd.display().to_string(),
            created_unix_ms: unix_ms(self.created_at),
            yolo_mode: self.yolo_mode,
            rows: self.size.0,
            cols: self.size.1,
            chat: self
                .chat
                .iter()
                .map(|c| ChatImage {
                    user_name: c.user_name.clone(),
                    text: c.text.clone(),
                    timestamp: c.timestamp.clone(),
                })
                .collect(),
            process: running.then_some(ProcessImage {
                pid: self.proc.pid,
                pty_fd: None,
            }),
            last_pid: self.last_pid,
            exit: self.phase.exit().map(|e| ExitImage {
                code: e.code,
                signal: e.signal.clone(),
            }),
            screen: self.screen.is_some(),
            drawn: self.drawn,
            snapshot: None,
            snapshot_offset,
            log_start,
            ..Default::default()
        };
        for viewer in self.viewers.values() {
            viewer.events.push(ViewerEvent::Close(EndReason::Upgrade));
        }
        self.viewers.clear();
        if let Some(tap) = self.tap.take() {
            tap.suspend();
        }
        // Dropping these closes the session's own PTY descriptors and pidfd (never the
        // program: the duplicate above keeps the terminal open, and nothing is signalled).
        self.proc = Proc::default();
        self.phase = Phase::Ended;
        info!(session = %self.id, "session frozen for the upgrade");
        Frozen {
            image,
            snapshot,
            log,
            input,
            pty: if running { pty } else { None },
        }
    }
}

/// Builds a running session from its image: the program (still this process's child) on
/// its PTY master `pty`, the screen rebuilt from the snapshot and the log bytes after it, the
/// log with its offsets, the chat, and the input that was waiting, written first.
pub fn adopt(
    cfg: Arc<crate::config::Config>,
    image: &SessionImage,
    blobs: &Blobs,
    pty: Option<OwnedFd>,
    on_end: OnEnd,
) -> Result<SessionHandle, AdoptError> {
    let (rows, cols) = size::clamp(image.rows, image.cols);
    let log_bytes = blobs.get(image.log)?;
    let screen = if image.screen {
        let mut model = ScreenModel::new(rows, cols, cfg.session.scrollback_lines);
        if let Some(snapshot) = image.snapshot {
            model.process(blobs.get(snapshot)?);
        }
        // What the model held back at the freeze (an unfinished sequence) comes after it.
        let skip = (image.snapshot_offset - image.log_start) as usize;
        model.process(log_bytes.get(skip..).unwrap_or_default());
        // Queries in there were answered by the previous image.
        let _ = model.take_queries();
        let thread_name = format!("screen-{}", &image.id.simple().to_string()[..8]);
        let (screen, answers) = ScreenThread::start(
            model,
            cfg.session.scrollback_lines,
            PARSE_BACKLOG,
            thread_name,
        );
        Some((screen, answers))
    } else {
        None
    };
    let log = Arc::new(SharedLog::resumed(
        cfg.session.output_log_bytes,
        image.log_start,
        Bytes::copy_from_slice(log_bytes),
    ));
    let a = &image.assistant;
    let assistant = crate::config::Assistant {
        name: a.name.clone(),
        command: a.command.clone(),
        resume: a.resume.clone(),
        yolo: a.yolo.clone(),
        env: a.env.clone(),
        yolo_env: a.yolo_env.clone(),
    };
    let who = Identity {
        id: image.id,
        num: image.num,
        name: image.name.clone(),
        assistant_key: image.assistant_key.clone(),
        assistant,
        own_command: image.own_command,
        command: image.command.clone(),
        cwd: image.cwd.clone().into(),
        created_at: UNIX_EPOCH + Duration::from_millis(image.created_unix_ms),
        yolo_mode: image.yolo_mode,
        size: (rows, cols),
        chat: image
            .chat
            .iter()
            .map(|c| ChatLine {
                user_name: c.user_name.clone(),
                text: c.text.clone(),
                timestamp: c.timestamp.clone(),
            })
            .collect(),
        drawn: image.drawn,
        last_pid: image.last_pid,
    };
    let (mut session, commands, rx) = assemble(cfg, who, screen, log, on_end);
    match (&image.process, &image.exit) {
        (Some(p), _) => {
            let exit = process::ExitWatch::new(p.pid)?;
            match pty {
                Some(fd) => {
                    let pty = PtyMaster::adopt(fd)?;
                    session.attach(process::Spawned {
                        pid: p.pid,
                        exit,
                        pty,
                    });
                    let input = blobs.get(image.input)?;
                    // Queued (and counted) first: no key typed next overtakes it.
                    if let (false, Some(tx)) = (input.is_empty(), &session.proc.input) {
                        let data = Bytes::copy_from_slice(input);
                        let queued = &session.proc.input_queued;
                        let _ = tx.send(PtyInput::new(data, None, None, queued));
                    }
                }
                None => {
                    // The terminal had already closed: only the exit is left to watch.
                    session.proc = Proc {
                        exit: Some(exit),
                        pid: p.pid,
                        ..Proc::default()
                    };
                }
            }
        }
        (None, exit) => {
            let exit = exit.as_ref().map_or(ExitInfo::exited(-1), |e| ExitInfo {
                code: e.code,
                signal: e.signal.clone(),
            });
            session.phase = Phase::Exited {
                exit,
                idle_since: Instant::now(),
            };
        }
    }
    info!(session = %image.id, pid = image.process.as_ref().map(|p| p.pid), "session adopted");
    Ok(launch(session, commands, rx))
}
