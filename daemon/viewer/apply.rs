//! The one place a decoded client request reaches its session: [`apply`], the same for every
//! one-session dialect, and [`SessionMessages`], the reader's handler that decodes a client's
//! message, applies it and replies.

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::protocol::request::echoed_name;
use crate::protocol::{Dialect, Inbound, Outcome, Request};
use crate::session::{RenameError, SessionGone, SessionHandle, UploadFailed, ViewerId};
use crate::ws::reader::{Gone, Local, OnMessage, Replies};

/// Applies `request` from `viewer` to `session`: the same for every dialect. Permission checks
/// happen in the session, from the role the viewer joined with. Uploads are counted in
/// `metrics`. `Err` once the session is gone.
pub async fn apply(
    request: Request,
    session: &SessionHandle,
    viewer: ViewerId,
    metrics: &Metrics,
) -> Result<Outcome, SessionGone> {
    match request {
        Request::Input(data) => session.input(viewer, data).await.map(|()| Outcome::Done),
        Request::Resize { rows, cols } => session
            .resize(viewer, rows, cols)
            .await
            .map(|()| Outcome::Done),
        Request::Follow => session.follow(viewer).await.map(|()| Outcome::Done),
        Request::Presence { name, device } => session
            .presence(viewer, name, device)
            .await
            .map(|()| Outcome::Done),
        Request::TakeSize { rows, cols } => session
            .take_size(viewer, rows, cols)
            .await
            .map(|()| Outcome::Done),
        Request::Ping { data } => Ok(Outcome::Pong(data)),
        Request::Ack { bytes } => Ok(Outcome::Acked(bytes)),
        Request::Upload { name, data } => {
            let shown = echoed_name(&name);
            let outcome = match session.upload(viewer, name, data).await {
                Ok(up) => Outcome::Uploaded {
                    filename: up.filename,
                },
                Err(UploadFailed::Gone(gone)) => return Err(gone),
                Err(e) => Outcome::UploadFailed {
                    filename: shown,
                    error: e.to_string(),
                },
            };
            match outcome {
                Outcome::Uploaded { .. } => metrics.uploads.inc(),
                _ => metrics.upload_failures.inc(),
            }
            Ok(outcome)
        }
        Request::Chat { user_name, text } => session
            .chat(viewer, user_name, text)
            .await
            .map(|()| Outcome::Done),
        Request::Rename { name } => match session.rename(Some(viewer), name).await {
            Ok(_) => Ok(Outcome::Done),
            Err(RenameError::Refused(refusal)) => Ok(Outcome::Refused(refusal)),
            Err(RenameError::BadName(message)) => Ok(Outcome::BadName(message)),
            Err(RenameError::Gone(gone)) => Err(gone),
        },
        Request::ToggleYolo => session.toggle_yolo(viewer).await.map(|()| Outcome::Done),
        Request::Signal { signal } => session.signal(viewer, signal).await.map(|()| Outcome::Done),
    }
}

/// A one-session connection's messages: decoded by its dialect, applied to its session.
pub struct SessionMessages<D> {
    /// The session.
    pub session: SessionHandle,
    /// This connection's viewer in it.
    pub viewer: ViewerId,
    /// The client's dialect.
    pub dialect: Arc<D>,
    /// The daemon's counters.
    pub metrics: Arc<Metrics>,
}

impl<D: Dialect> OnMessage for SessionMessages<D> {
    async fn on_message(&mut self, message: Inbound, replies: &Replies) -> Result<(), Gone> {
        let reply = match self.dialect.decode(message) {
            Ok(request) => match apply(request, &self.session, self.viewer, &self.metrics).await {
                Ok(Outcome::Acked(bytes)) => return replies.send(Local::Ack(bytes)).await,
                Ok(outcome) => self.dialect.outcome(outcome),
                Err(SessionGone) => return Err(Gone),
            },
            Err(reply) => Some(reply),
        };
        match reply {
            Some(reply) => {
                let reply = super::counted(&self.metrics, reply);
                replies.send(Local::Send(reply)).await
            }
            None => Ok(()),
        }
    }
}
