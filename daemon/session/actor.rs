//! The session actor: the session's parts (each owning its state), its loop over commands,
//! PTY reads, the child's exit and timers, the dispatch of each command to the method that
//! does it, and the publishing of output to the log, the screen thread and the viewers.
//!
//! The actor's work by concern: `actor/viewer_requests.rs` (what viewers ask of it),
//! `actor/lifecycle.rs` (the program's exit and restart, the session's end),
//! `actor/live_upgrade.rs` (handing the session over to the next image of the daemon) and
//! `actor/state.rs` (its attention: what feeds it, and telling everyone its state).

mod lifecycle;
mod live_upgrade;
mod state;
mod viewer_requests;

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::attention::Attention;
use super::chat::Chat;
use super::events::{EndReason, SessionInfo, StatusInfo, ViewerEvent, ViewerId};
use super::handle::{
    command_queue, Command, HandleParts, OnEnd, Queued, SessionHandle, WeakSessionHandle,
};
use super::handoff::SessionHandoff;
use super::identity::{placeholder_info, Identity};
use super::input::INPUT_QUEUE_BYTES;
use super::output_log::{Release, SharedLog};
use super::program::Program;
use super::recorder_feed::{FeedSender, RecorderFeed};
use super::recorder_pace;
use super::refusal::Refusal;
use super::screen_bridge::ScreenBridge;
use super::viewers::Viewers;
use super::yield_to_typists::{RecentKeys, LONG_READ};
use crate::attention::gate::StateGate;
use crate::attention::Transitions;
use crate::config::Config;
use crate::metrics::Metrics;

/// What a session is made of, however it came to be: created now, or adopted in a live
/// upgrade.
pub(super) struct Parts {
    pub(super) identity: Identity,
    /// The session's size, (rows, cols).
    pub(super) size: (u16, u16),
    pub(super) chat: Chat,
    pub(super) screen: ScreenBridge,
    pub(super) program: Program,
    pub(super) log: Arc<SharedLog>,
    /// The daemon's latest keys (see `yield_to_typists.rs`).
    pub(super) recent_keys: Arc<RecentKeys>,
    /// The daemon's counters.
    pub(super) metrics: Arc<Metrics>,
    /// Its state (working, waiting, idle, exited) and what decides it.
    pub(super) attention: Attention,
    /// Its capability token and reports' rate limit (shared with its handles).
    pub(super) gate: Arc<StateGate>,
    /// Where its changes of state go (the daemon's).
    pub(super) transitions: Arc<Transitions>,
    /// The daemon's audit trail.
    pub(super) audit: Arc<crate::audit::Audit>,
}

/// The actor's state: its parts, and how the outside hears of it.
struct Session {
    cfg: Arc<Config>,
    identity: Identity,
    viewers: Viewers,
    chat: Chat,
    program: Program,
    screen: ScreenBridge,
    recorder: RecorderFeed,
    /// The output, which viewers read from their own offsets.
    log: Arc<SharedLog>,
    /// When the log lets go of what every reader has taken (once the session is quiet).
    release: Release,
    /// The daemon's latest keys: this session's are noted there, and it yields its worker
    /// after a long read while someone types elsewhere.
    recent_keys: Arc<RecentKeys>,
    /// The daemon's counters: the turns this session gives.
    metrics: Arc<Metrics>,
    attention: Attention,
    gate: Arc<StateGate>,
    transitions: Arc<Transitions>,
    /// The daemon's audit trail: renames, uploads, typing, the program's own exit.
    audit: Arc<crate::audit::Audit>,
    /// The session's own way in, for work it finishes later (an upload's typed path).
    me: WeakSessionHandle,
    /// The metadata the session list shows.
    info: watch::Sender<Arc<SessionInfo>>,
    /// Called once, when the session has ended.
    on_end: Option<OnEnd>,
    ended: CancellationToken,
    /// A live upgrade's request to hand over, waiting for a settled phase.
    hand_over: Option<oneshot::Sender<SessionHandoff>>,
}

/// Publishes the session's metadata and starts its actor; the handle is the way in.
pub(super) fn launch(cfg: Arc<Config>, parts: Parts, on_end: OnEnd) -> SessionHandle {
    let Parts {
        identity,
        size,
        chat,
        screen,
        program,
        log,
        recent_keys,
        metrics,
        attention,
        gate,
        transitions,
        audit,
    } = parts;
    let (commands, rx) = command_queue();
    let input_budget = Arc::new(Semaphore::new(INPUT_QUEUE_BYTES));
    let session = Session {
        me: WeakSessionHandle::new(&commands, input_budget.clone()),
        info: watch::Sender::new(Arc::new(placeholder_info(identity.id()))),
        identity,
        viewers: Viewers::new(size),
        chat,
        program,
        screen,
        recorder: RecorderFeed::default(),
        release: Release::new(
            cfg.session.output_log_bytes,
            cfg.session.scrollback_api_bytes,
        ),
        log,
        recent_keys,
        metrics,
        attention,
        gate,
        transitions,
        audit,
        on_end: Some(on_end),
        ended: CancellationToken::new(),
        hand_over: None,
        cfg,
    };
    session.publish_info();
    let handle = SessionHandle::new(
        session.identity.id(),
        commands,
        HandleParts {
            input_budget,
            log: session.log.clone(),
            info: session.info.subscribe(),
            ended: session.ended.clone(),
            screen: session.screen.has_model(),
            slot: session.screen.slot(),
            gate: session.gate.clone(),
        },
    );
    // Boxed: the task's future held the 2 KiB session twice otherwise (as the call's argument
    // and as the running body's), 2 KiB more for every session.
    tokio::spawn(Box::new(session).run(rx));
    handle
}

/// Resolves when the pending fan-out's next slice may go: at `due`, else after a yield (so a
/// key that came meanwhile is read off its socket and taken first).
async fn fanout_turn(due: Option<Instant>) {
    match due {
        Some(at) if at > Instant::now() => tokio::time::sleep_until(at).await,
        _ => tokio::task::yield_now().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Session {
    async fn run(mut self: Box<Self>, mut commands: mpsc::Receiver<Queued>) {
        loop {
            let viewers_gone = self.viewers.is_empty();
            let reap_at = self
                .program
                .reap_at(viewers_gone, self.cfg.session.reap_after_exit);
            let (drain_until, escalate_at) =
                (self.program.drain_until(), self.program.escalate_at());
            let has_room = self.screen.has_room();
            // The recorder is half a window behind: the PTY waits for it until then at most.
            let recorder_due = self.recorder.behind(self.log.head());
            let fanout_due = self.viewers.fanout_due();
            let fanout_pending = self.viewers.fanout_pending();
            let (pty_read, exited) = self.program.waits();
            let (screen_room, answers, reading) = self.screen.waits();
            let attention_due = self.attention.wait();
            let presence_due = self.viewers.presence_held_until();
            let release_due = self.release.due();
            // Input first: a key goes to the PTY before any more of earlier output is handed
            // out, so the typist never waits behind the fan-out to the other viewers.
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.handle(*cmd),
                    // Every handle is gone: nobody can reach this session any more.
                    None => self.begin_end(EndReason::Deleted, None),
                },
                read = pty_read, if has_room && recorder_due.is_none() => {
                    let long = matches!(&read, Ok(chunk) if chunk.len() >= LONG_READ);
                    self.on_read(read);
                    // Someone waits for an echo in another session: it goes before the rest
                    // of this output (see `yield_to_typists.rs` for why only then).
                    if long && self.recent_keys.typing_elsewhere(self.identity.id()) {
                        self.metrics.turns_given.inc();
                        tokio::task::yield_now().await;
                    }
                }
                // The parser is a backlog behind: the PTY waits (and with it the program).
                _ = screen_room, if !has_room => {}
                // The recording is the one reader nobody can resync: the program waits for it.
                () = self.recorder.took(), if recorder_due.is_some() => {}
                _ = sleep_until(recorder_due) => self.recorder_stalled(),
                _ = fanout_turn(fanout_due), if fanout_pending => {
                    self.viewers.fan_out_slice(|| !commands.is_empty())
                }
                Some(found) = answers => self.program.answer(found),
                Some(reading) = reading => self.on_reading(reading),
                status = exited => self.on_child_exit(status),
                _ = sleep_until(drain_until) => self.finish_exit(),
                _ = sleep_until(escalate_at) => self.program.escalate(),
                _ = sleep_until(reap_at) => {
                    info!(session = %self.identity.id(), "reaping exited session with no viewer");
                    self.begin_end(EndReason::Reaped, None);
                }
                () = attention_due => self.on_attention_timer(),
                // A name or device change the rate limit kept back goes out now.
                _ = sleep_until(presence_due) => self.broadcast_presence(None),
                _ = sleep_until(release_due) => self.release_log(),
            }
            if self.program.ended() {
                break;
            }
            if self.hand_over.is_some() && self.program.settled() {
                let handoff = self.hand_over_now().await;
                if let Some(reply) = self.hand_over.take() {
                    let _ = reply.send(handoff);
                }
                break;
            }
        }
    }

    /// Each command to the method that does it.
    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Join(join) => self.join(join),
            Command::Leave { viewer } => self.leave(viewer),
            Command::Input {
                viewer,
                data,
                permit,
            } => self.input(viewer, data, permit),
            Command::Resize { viewer, rows, cols } => self.resize(viewer, rows, cols),
            Command::Presence {
                viewer,
                name,
                device,
            } => self.set_presence(viewer, name, device),
            Command::Follow { viewer } => self.follow(viewer),
            Command::TakeSize { viewer, rows, cols } => self.take_size(viewer, rows, cols),
            Command::Resync { form, reply } => self.resync(form, reply),
            Command::Chat {
                viewer,
                user_name,
                text,
            } => self.chat(viewer, user_name, text),
            Command::Rename {
                viewer,
                name,
                reply,
            } => self.rename(viewer, name, reply),
            Command::Upload(upload) => self.upload(upload),
            Command::ToggleYolo { viewer } => self.toggle_yolo(viewer),
            Command::Signal { viewer, signal } => self.signal(viewer, &signal),
            Command::End { reason, done } => self.begin_end(reason, Some(done)),
            Command::FeedRecorder { feed } => self.connect_recorder(feed),
            Command::RecordingFailed { message } => self.recording_failed(message),
            Command::Detach => self.detach_viewers(),
            Command::HandOver { reply } => self.hand_over_when_settled(reply),
            Command::Report { report, done } => {
                self.on_report(report);
                let _ = done.send(());
            }
            Command::Reply { data, permit, done } => self.reply(data, permit, done),
        }
    }

    fn on_read(&mut self, read: std::io::Result<Bytes>) {
        match read {
            Ok(chunk) if !chunk.is_empty() => self.output(chunk),
            // EOF, or EIO once every process has closed the terminal side.
            _ => {
                self.program.pty_closed();
                self.finish_exit();
            }
        }
    }

    /// Publishes output: to the log, the screen thread and the viewers (straight onto
    /// their sockets when they can take it now; the others are woken to copy it from the log
    /// on their own tasks). The typist gets it at once; the others a slice at a time from the
    /// loop, after any command waiting (see `viewers/fanout.rs`).
    fn output(&mut self, chunk: Bytes) {
        // Before anyone can see a query, its replies are expected from everyone who will.
        let queries = self.screen.scan(&chunk);
        self.viewers.expect_replies(queries);
        let start = self.log.head();
        self.log.append(chunk.clone());
        self.release.appended(&self.log);
        let typist = self.viewers.push_to_typist(start, &chunk);
        // After the typist's echo: the first output after an idle second starts the screen
        // thread again, which the echo need not wait for (the model follows the log anyway).
        self.screen.output(&chunk);
        self.viewers.queue_output(start, chunk, typist);
        // A timestamp, and a decision only when the terminal rule's verdict changes.
        let changed = self.attention.output(std::time::Instant::now());
        self.tell_state(changed);
    }

    /// The session's status as every viewer sees it.
    fn status(&self) -> StatusInfo {
        self.identity.status(
            self.viewers.len(),
            self.viewers.size(),
            self.viewers.sized_by().to_vec(),
            self.program.restarting(),
            self.attention.now(),
        )
    }

    /// Publishes the session's metadata for the session list.
    fn publish_info(&self) {
        let info = self.identity.info(
            self.viewers.len(),
            self.viewers.size(),
            self.program.exit(),
            self.viewers.people(),
            // Read fresh by the session list (the registry); this is its value now.
            self.log.head(),
            self.attention.now(),
        );
        self.info.send_replace(Arc::new(info));
    }

    /// Tells every viewer (and the recorder) `event`.
    fn broadcast(&mut self, event: ViewerEvent) {
        self.recorder.event(&event);
        self.viewers.broadcast(event, self.identity.id());
    }

    fn broadcast_status(&mut self) {
        // The REST view first: a viewer that reads the API on seeing the status sees it too.
        self.publish_info();
        self.send_status();
    }

    /// Tells everyone the status, without publishing the metadata (the caller has).
    fn send_status(&mut self) {
        let info = self.status();
        let offset = self.log.head();
        self.broadcast(ViewerEvent::Status { info, offset });
    }

    /// The session may have been quiet long enough: the log lets go of the output every
    /// viewer and the recorder has taken (see `output_log.rs`, [`Release`]).
    fn release_log(&mut self) {
        let readers = self.viewers.lowest_offset().min(self.recorder.taken());
        self.release.release(&self.log, readers);
    }

    /// A recorder is connected: it starts from the session as it stands.
    fn connect_recorder(&mut self, feed: FeedSender) {
        let head = self.log.head();
        let status = ViewerEvent::Status {
            info: self.status(),
            offset: head,
        };
        self.recorder
            .connect(feed, &status, head, self.log.capacity());
    }

    /// The recorder took nothing for `recorder_pace::STALL` while the PTY waited for it (a
    /// hung disk): the session lets it go and reads on; the recording has failed.
    fn recorder_stalled(&mut self) {
        self.recorder.let_go();
        self.metrics.recording_failures.inc();
        let stall = recorder_pace::STALL.as_secs();
        warn!(session = %self.identity.id(), "recording failed: the recorder took no output for {stall} s");
        self.recording_failed(format!(
            "the recording stopped: it took no output for {stall} s while the session waited for it"
        ));
    }

    /// The recorder failed: its recording stopped.
    fn recording_failed(&mut self, message: String) {
        // Writers are the ones who can act on it (free space, turn recording off); those
        // who join later are told as they join.
        let refusal = Refusal::RecordingFailed(message);
        self.viewers
            .tell_writers(ViewerEvent::Refused(refusal.clone()));
        self.recorder.set_failure(refusal);
    }

    /// Tells everyone who is here; `typing`: the viewer whose keystrokes prompted it.
    fn broadcast_presence(&mut self, typing: Option<ViewerId>) {
        self.send_presence(typing);
        // The session list shows the names too.
        self.publish_info();
    }

    /// Tells everyone who is here, without publishing the metadata (the caller does).
    fn send_presence(&mut self, typing: Option<ViewerId>) {
        let info = self.viewers.presence(typing);
        self.broadcast(ViewerEvent::Presence(info));
    }
}
