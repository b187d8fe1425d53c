//! What viewers ask of the session: joining and leaving, sizes, presence, chat, renames,
//! resyncs, uploads, signals and input; and the permission check every request passes.

use std::time::SystemTime;

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::info;

use super::Session;
use crate::session::chat::{validate_chat, ChatLine};
use crate::session::events::{
    JoinError, JoinReply, RenameError, Resync, Role, SessionGone, SessionInfo, UploadFailed,
    Uploaded, ViewerEvent, ViewerId,
};
use crate::session::handle::{JoinRequest, UploadRequest};
use crate::session::input::InputPermit;
use crate::session::name::validate_name;
use crate::session::presence::{device_kind, validate_presence_name};
use crate::session::refusal::{Action, Refusal};
use crate::session::screen_thread::ScreenFailed;
use crate::session::signal::allowed_signal;
use crate::session::timestamp::rfc3339;
use crate::session::upload;
use crate::term::snapshot::SnapshotForm;

impl Session {
    /// [`Viewers::permit`](crate::session::viewers::Viewers::permit), telling the viewer
    /// when it is refused.
    pub(super) fn permitted(&self, viewer: ViewerId, action: Action) -> bool {
        match self.viewers.permit(viewer, action) {
            Ok(()) => true,
            Err(refusal) => {
                self.viewers.refuse(viewer, refusal);
                false
            }
        }
    }

    /// Recomputes the session size and whose sizes it is; returns whether either changed
    /// (status already sent).
    pub(super) fn apply_size(&mut self) -> bool {
        let changed = self.settle_size();
        if changed {
            self.broadcast_status();
        }
        changed
    }

    /// Recomputes the session size and whose sizes it is, resizing the model and the PTY;
    /// returns whether either changed (nobody is told yet).
    fn settle_size(&mut self) -> bool {
        let resized = self.viewers.settle_size();
        // After the size: the holders are those whose size the new one is.
        let holders_changed = self.viewers.settle_holders();
        if let Some((rows, cols)) = resized {
            self.screen.resize(rows, cols);
            self.program.resize(rows, cols);
        }
        resized.is_some() || holders_changed
    }

    /// A viewer joins: it is sent the screen (rendered off the actor once the model has
    /// parsed up to here), the exit if there was one, and the latest chat.
    pub(super) fn join(&mut self, join: JoinRequest) {
        let JoinRequest {
            viewer,
            role,
            who,
            events,
            live,
            form,
            reply,
        } = join;
        let max = self.cfg.limits.max_viewers_per_session;
        if self.viewers.len() >= max {
            let _ = reply.send(Err(JoinError::TooManyViewers(max)));
            return;
        }
        let mut join = JoinReply {
            snapshot: None,
            offset: self.log.head(),
            exit: self.program.exit().cloned(),
            chat: self.chat.replay(),
        };
        if !self.screen.has_model() {
            // Nothing to draw a screen from: the joiner replays what the log keeps.
            join.offset = self.log.start();
            let _ = reply.send(Ok(join));
        } else if self.screen.drawn() {
            // Rendered on the screen thread once it has parsed up to here.
            self.screen
                .snapshot_then(&self.log, form, false, move |drawn| {
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
        self.viewers.join(viewer, role, who, events, live);
        if let Some(label) = self.viewers.label(viewer) {
            self.recorder
                .marker(format!("{label} joined"), self.log.head());
        }
        // One publication of the session's metadata for both (it is the costliest part of a
        // join): the REST view first, as `broadcast_status` has it.
        self.publish_info();
        self.send_status();
        self.send_presence(None);
        if let (Role::Writer, Some(failed)) = (role, self.recorder.failure()) {
            self.viewers.refuse(viewer, failed.clone());
        }
    }

    /// A viewer leaves (its membership was dropped).
    pub(super) fn leave(&mut self, viewer: ViewerId) {
        if !self.viewers.leave(viewer) {
            return;
        }
        if self.viewers.is_empty() {
            self.program.unwatched();
        }
        // The size may change with the viewer gone; the status goes out either way (the
        // viewer count did), after one publication of the metadata for both messages.
        self.settle_size();
        self.publish_info();
        self.send_presence(None);
        self.send_status();
    }

    /// A viewer's terminal size.
    pub(super) fn resize(&mut self, viewer: ViewerId, rows: u16, cols: u16) {
        if !self.permitted(viewer, Action::Resize) {
            return;
        }
        if self.viewers.set_size(viewer, rows, cols) {
            self.apply_size();
        }
    }

    /// A viewer's size stops counting. Not a permission matter: a read-only viewer never
    /// counted anyway.
    pub(super) fn follow(&mut self, viewer: ViewerId) {
        if self.viewers.follow(viewer) {
            self.apply_size();
        }
    }

    /// A viewer's size becomes the session's; the others' stop counting.
    pub(super) fn take_size(&mut self, viewer: ViewerId, rows: u16, cols: u16) {
        if !self.permitted(viewer, Action::Resize) || !self.viewers.contains(viewer) {
            return;
        }
        self.viewers.take_size(viewer, rows, cols);
        self.apply_size();
    }

    /// A viewer's name and device kind for the others (each only when given).
    pub(super) fn set_presence(
        &mut self,
        viewer: ViewerId,
        name: Option<String>,
        device: Option<String>,
    ) {
        let mut send = false;
        if let Some(name) = name {
            match validate_presence_name(&name, &self.cfg.limits) {
                Ok(name) => send |= self.viewers.set_name(viewer, name),
                Err(message) => self.viewers.refuse(viewer, Refusal::InvalidChat(message)),
            }
        }
        if let Some(device) = device {
            send |= self.viewers.set_device(viewer, device_kind(&device));
        }
        if send {
            self.broadcast_presence(None);
        }
    }

    /// A fresh snapshot for a viewer that fell behind, and where its stream resumes.
    pub(super) fn resync(
        &self,
        form: SnapshotForm,
        reply: oneshot::Sender<Result<Resync, ScreenFailed>>,
    ) {
        self.screen
            .snapshot_then(&self.log, form, true, move |drawn| {
                let _ = reply.send(drawn.map(|(snapshot, offset)| Resync { snapshot, offset }));
            });
    }

    /// A chat line from a viewer, for everyone (and the history). A user's line carries its
    /// verified name whatever `user_name` the client sent; a guest's carries the name it
    /// gave, marked as a guest's, so no line can pass for another user's.
    pub(super) fn chat(&mut self, viewer: ViewerId, user_name: String, text: String) {
        let Some(who) = self.viewers.who(viewer) else {
            return;
        };
        // A user's own name is not held to the chat name's length rule.
        let claimed = if who.user.is_some() { "-" } else { &user_name };
        match validate_chat(claimed, &text, &self.cfg.limits) {
            Ok((claimed, text)) => {
                let (user_name, guest) = match who.user {
                    Some(user) => (user, false),
                    None => {
                        // A guest's chat name is the name others see in the viewer list.
                        if self.viewers.set_name(viewer, Some(claimed.clone())) {
                            self.broadcast_presence(None);
                        }
                        (claimed, true)
                    }
                };
                let line = ChatLine {
                    user_name,
                    guest,
                    text,
                    timestamp: rfc3339(SystemTime::now()),
                };
                self.chat.add(&line);
                self.broadcast(ViewerEvent::Chat(line));
            }
            Err(message) => self.viewers.refuse(viewer, Refusal::InvalidChat(message)),
        }
    }

    /// Renames the session on behalf of `viewer` (its role is checked), or of a caller that
    /// checked the permission itself (`None`).
    pub(super) fn rename(
        &mut self,
        viewer: Option<ViewerId>,
        name: String,
        reply: oneshot::Sender<Result<SessionInfo, RenameError>>,
    ) {
        if let Some(Err(refusal)) = viewer.map(|v| self.viewers.permit(v, Action::Rename)) {
            let _ = reply.send(Err(RenameError::Refused(refusal)));
            return;
        }
        let old = self.info.borrow().name.clone();
        let result = validate_name(&name, self.cfg.limits.max_name_chars)
            .map(|name| {
                if self.identity.rename(name) {
                    self.broadcast_status();
                }
                SessionInfo::clone(&self.info.borrow())
            })
            .map_err(RenameError::BadName);
        // A caller that checked the permission itself (REST) records the rename with who it
        // is; a viewer's is recorded here.
        let actor = viewer.and_then(|v| self.viewers.actor(v));
        if let (Ok(info), Some(actor)) = (&result, actor) {
            if info.name != old {
                let detail = serde_json::json!({"from": old, "to": info.name});
                let event = crate::audit::Event::new("session.rename", actor);
                self.audit.record(event.on(self.identity.id()).with(detail));
            }
        }
        let _ = reply.send(result);
    }

    /// Saves a file into the working directory, off the runtime, then types its quoted path
    /// for the program like the viewer's own input.
    pub(super) fn upload(&mut self, upload: UploadRequest) {
        let UploadRequest {
            viewer,
            name,
            data,
            reply,
        } = upload;
        if let Err(refusal) = self.viewers.permit(viewer, Action::Upload) {
            let _ = reply.send(Err(UploadFailed::Refused(refusal)));
            return;
        }
        let dir = self.identity.cwd().to_owned();
        let (limit, id) = (self.cfg.viewer.upload_max_bytes, self.identity.id());
        let me = self.me.clone();
        let audit = self.audit.clone();
        let actor = self.viewers.actor(viewer).cloned();
        let bytes = data.len();
        tokio::spawn(async move {
            let saved =
                tokio::task::spawn_blocking(move || upload::save(&dir, &name, &data, limit)).await;
            let path = match saved {
                Ok(Ok(path)) => path,
                Ok(Err(e)) => {
                    let _ = reply.send(Err(UploadFailed::Save(e)));
                    return;
                }
                Err(e) => {
                    let io = std::io::Error::other(format!("upload task failed: {e}"));
                    let _ = reply.send(Err(UploadFailed::Save(io.into())));
                    return;
                }
            };
            info!(session = %id, file = %path.display(), "file uploaded");
            if let Some(actor) = actor {
                let file = path.file_name().map(|n| n.to_string_lossy().into_owned());
                let detail = serde_json::json!({"file": file, "bytes": bytes});
                audit.record(
                    crate::audit::Event::new("upload", &actor)
                        .on(id)
                        .with(detail),
                );
            }
            // Typed like the viewer's own input: same budget, same queue, same order.
            let typed = Bytes::from(format!("{} ", upload::shell_quote(&path)));
            if me.input(viewer, typed).await.is_err() {
                let _ = reply.send(Err(UploadFailed::Gone(SessionGone)));
                return;
            }
            let filename = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let _ = reply.send(Ok(Uploaded { path, filename }));
        });
    }

    /// Sends a signal (by name) to the program's foreground process group.
    pub(super) fn signal(&mut self, viewer: ViewerId, name: &str) {
        if !self.permitted(viewer, Action::Signal) {
            return;
        }
        let sent =
            allowed_signal(name).and_then(|signal| self.program.signal_foreground(signal, name));
        if let Err(refusal) = sent {
            self.viewers.refuse(viewer, refusal);
        }
    }

    /// Keystrokes or pasted bytes from a viewer, for the program.
    pub(super) fn input(&mut self, viewer: ViewerId, data: Bytes, permit: InputPermit) {
        if !self.permitted(viewer, Action::Input) {
            return;
        }
        let Some((data, typed)) = self.viewers.typed(viewer, data) else {
            return;
        };
        self.recent_keys.typed(self.identity.id());
        if typed.started {
            if let Some(label) = self.viewers.label(viewer) {
                self.recorder
                    .marker(format!("{label} is typing"), self.log.head());
            }
        }
        if typed.event {
            self.broadcast_presence(Some(viewer));
        }
        if let Some(actor) = self.viewers.starts_typing(viewer) {
            let event = crate::audit::Event::new("typing", &actor).on(self.identity.id());
            self.audit.record(event);
        }
        if !self.program.takes_input() {
            self.viewers
                .refuse(viewer, Refusal::NotRunning(Action::Input));
            return;
        }
        self.recorder.input(&data, self.log.head());
        self.program.write(data, permit);
        // Someone typed: the user answered whatever the agent reported.
        let changed = self.attention.typed(std::time::Instant::now());
        self.tell_state(changed);
    }

    /// Keys from someone who is no viewer (a quick reply on the board), allowed by the caller:
    /// to the program as any input is, but no viewer is marked as the typist.
    pub(super) fn reply(&mut self, data: Bytes, permit: InputPermit, done: oneshot::Sender<bool>) {
        if !self.program.takes_input() {
            let _ = done.send(false);
            return;
        }
        self.recent_keys.typed(self.identity.id());
        self.recorder.input(&data, self.log.head());
        self.program.write(data, permit);
        let changed = self.attention.typed(std::time::Instant::now());
        self.tell_state(changed);
        let _ = done.send(true);
    }
}
