//! An upload as a session command: the role is checked by the actor, the file is saved off the
//! runtime, and its quoted path is typed for the program like any other input.

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::info;

use super::actor::Session;
use super::upload;
use super::*;

impl Session {
    pub(super) fn upload(
        &mut self,
        viewer: ViewerId,
        name: Vec<u8>,
        data: Bytes,
        reply: oneshot::Sender<Result<Uploaded, UploadFailed>>,
    ) {
        if let Err(refusal) = self.permit(viewer, Action::Upload) {
            let _ = reply.send(Err(UploadFailed::Refused(refusal)));
            return;
        }
        let (dir, limit, id) = (self.cwd.clone(), self.cfg.viewer.upload_max_bytes, self.id);
        let (me, budget) = (self.me.clone(), self.input_budget.clone());
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
            // Typed like the viewer's own input: same budget, same queue, same order.
            let typed = Bytes::from(format!("{} ", upload::shell_quote(&path)));
            let cost = (typed.len() + INPUT_MESSAGE_OVERHEAD).min(INPUT_QUEUE_BYTES) as u32;
            let (Some(me), Ok(permit)) = (me.upgrade(), budget.acquire_many_owned(cost).await)
            else {
                let _ = reply.send(Err(UploadFailed::Gone(SessionGone)));
                return;
            };
            let input = Command::Input {
                viewer,
                data: typed,
                permit: Some(permit),
            };
            if me.send(input).await.is_err() {
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
}
