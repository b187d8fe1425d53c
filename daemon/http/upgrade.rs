//! The WebSocket upgrade: which session (created if asked), which dialect, which options.

use std::path::PathBuf;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tracing::{debug, info};
use uuid::Uuid;

use super::connections::Slot;
use crate::auth::{Access, Role};
use crate::protocol::swe::Swe;
use crate::protocol::Notice;
use crate::registry::Found;
use crate::session::CreateSpec;
use crate::viewer::{self, ViewerOptions};

use super::*;

/// The query parameters of a WebSocket connection.
#[derive(Debug, Default)]
pub(super) struct WsQuery {
    assistant: Option<String>,
    name: Option<String>,
    cwd: Option<String>,
    flow_ack: bool,
}

pub(super) fn ws_query(req: &Request<Incoming>) -> WsQuery {
    let mut q = WsQuery::default();
    let raw = req.uri().query().unwrap_or("");
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        match &*k {
            "assistant" => q.assistant = Some(v.into_owned()),
            "name" => q.name = Some(v.into_owned()),
            "cwd" => q.cwd = Some(v.into_owned()),
            "flow" => q.flow_ack = v == "ack",
            _ => {}
        }
    }
    q
}

pub(super) fn websocket(
    mut req: Request<Incoming>,
    id: Uuid,
    access: Access,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    if !fastwebsockets::upgrade::is_upgrade_request(&req) {
        return error(StatusCode::BAD_REQUEST, "expected a WebSocket upgrade");
    }
    // Authenticated now: it leaves the pool that strangers compete for.
    if !slot.authenticate() {
        crate::metrics::METRICS.refused(429);
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many WebSockets from this address",
        );
    }
    let q = ws_query(&req);
    // Creation happens before the upgrade so two racing joiners start one program, but its
    // failure is reported after it, as the protocol wants (an error message and close 4002).
    let session = match state.registry.get(&id) {
        Some(h) => Ok(h),
        None if !matches!(access, Access::Full) => Err("this link's session has ended".to_owned()),
        None => match q.assistant.clone() {
            None => Err("no session with this id, and no assistant given to create one".to_owned()),
            Some(assistant) => state
                .registry
                .get_or_create(CreateSpec {
                    id,
                    assistant,
                    name: q.name.clone(),
                    cwd: q.cwd.as_ref().map(PathBuf::from),
                    screen: true,
                    command: None,
                    size: None,
                })
                .map(Found::handle)
                .map_err(|e| e.to_string()),
        },
    };
    let (response, upgrade) = match fastwebsockets::upgrade::upgrade(&mut req) {
        Ok(pair) => pair,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("bad WebSocket upgrade: {e}"),
            )
        }
    };
    let cfg = state.cfg.clone();
    let (read_only, revoked, expires) = match &access {
        Access::Full => (false, None, None),
        Access::Share(s) => (
            s.role == Role::Viewer,
            Some(s.revoked.clone()),
            s.expires_at,
        ),
    };
    let opts = ViewerOptions {
        flow_ack: q.flow_ack,
        read_only,
        revoked,
        expires,
    };
    state.tasks.spawn(async move {
        // The connection counts against its address for as long as the WebSocket lives.
        let _slot = slot;
        let ws = match upgrade.await {
            Ok(ws) => ws,
            Err(e) => {
                debug!(session = %id, "upgrade failed: {e}");
                return;
            }
        };
        match session {
            Ok(handle) => viewer::run(ws, handle, cfg, opts, Swe).await,
            Err(message) => {
                info!(session = %id, "refused WebSocket: {message}");
                let notice = Notice::CreateFailed(&message);
                viewer::refuse(ws, &Swe, 4002, notice, &message).await;
            }
        }
    });
    response.map(|_| Body::default())
}
