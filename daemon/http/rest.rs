//! The REST API: sessions (create, list, get, rename, delete), share links, assistants,
//! metrics.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use tracing::info;
use uuid::Uuid;

use crate::auth::{self, Role};
use crate::config::Config;
use crate::registry::Found;
use crate::session::{CreateError, CreateSpec, EndReason, RenameError};

use super::*;

pub(super) async fn delete(id: Uuid, peer: SocketAddr, state: &Arc<AppState>) -> Response<Body> {
    match state.registry.get(&id) {
        Some(h) => {
            let _ = h.end(EndReason::Deleted).await;
            info!(session = %id, %peer, "session deleted through the API");
            no_content()
        }
        None => error(StatusCode::NOT_FOUND, "no such session"),
    }
}

/// `POST /api/sessions/{id}/share` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShareRequest {
    role: Role,
    /// Seconds until the link stops working; none: until revoked or the session ends.
    #[serde(default)]
    ttl: Option<u64>,
}

/// `POST /api/sessions/{id}/share` reply.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShareCreated {
    #[serde(flatten)]
    info: auth::ShareInfo,
    token: String,
    /// Path and query to open (prefix the server's address).
    url: String,
}

pub(super) async fn share(
    req: Request<Incoming>,
    id: Uuid,
    state: &Arc<AppState>,
) -> Response<Body> {
    if state.registry.get(&id).is_none() {
        return error(StatusCode::NOT_FOUND, "no such session");
    }
    let request: ShareRequest = match read_json(req, state).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    /// Longest share link life: a year.
    const MAX_TTL_SECS: u64 = 365 * 24 * 3600;
    if request.ttl.is_some_and(|t| t > MAX_TTL_SECS) {
        return error(
            StatusCode::BAD_REQUEST,
            "ttl is at most a year (31536000 seconds)",
        );
    }
    let ttl = request.ttl.map(std::time::Duration::from_secs);
    let share = state.auth.create_share(id, request.role, ttl);
    info!(session = %id, share = %share.id, role = ?share.role, "share link created");
    json(
        StatusCode::CREATED,
        &ShareCreated {
            info: share.info(),
            token: share.token().to_owned(),
            url: format!("/session/{id}?token={}", share.token()),
        },
    )
}

pub(super) fn metrics(state: &Arc<AppState>) -> Response<Body> {
    let text = crate::metrics::METRICS.render(&state.registry.list());
    with_type(
        StatusCode::OK,
        text.into_bytes(),
        "text/plain; version=0.0.4",
    )
}

/// `POST /api/sessions` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateRequest {
    assistant: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    /// Optional: the client may choose the uuid, as with the WebSocket route.
    #[serde(default)]
    id: Option<Uuid>,
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes, sent within the header timeout (a body
/// trickled in byte by byte would hold a connection place for ever).
pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
    state: &AppState,
) -> Result<T, ApiError> {
    let collect = Limited::new(req.into_body(), MAX_BODY).collect();
    let body = tokio::time::timeout(state.cfg.limits.header_timeout, collect)
        .await
        .map_err(|_| {
            ApiError(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received in time".into(),
            )
        })?
        .map_err(|_| {
            ApiError(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large or unreadable".into(),
            )
        })?
        .to_bytes();
    serde_json::from_slice(&body)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("bad request body: {e}")))
}

/// `PATCH /api/sessions/{id}` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PatchRequest {
    name: String,
}

pub(super) async fn patch(
    req: Request<Incoming>,
    id: Uuid,
    state: &Arc<AppState>,
) -> Response<Body> {
    let Some(handle) = state.registry.get(&id) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    let request: PatchRequest = match read_json(req, state).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    // The share link's role was checked by the route (`may_write`).
    match handle.rename(None, request.name).await {
        Ok(info) => json(StatusCode::OK, &info),
        Err(RenameError::Gone(_)) => error(StatusCode::NOT_FOUND, "no such session"),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

pub(super) async fn create(req: Request<Incoming>, state: &Arc<AppState>) -> Response<Body> {
    let request: CreateRequest = match read_json(req, state).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    let spec = CreateSpec {
        id: request.id.unwrap_or_else(Uuid::new_v4),
        assistant: request.assistant,
        name: request.name,
        cwd: request.cwd,
        screen: true,
    };
    match state.registry.get_or_create(spec) {
        Ok(Found::Created(h)) => json(StatusCode::CREATED, &h.info()),
        Ok(Found::Existing(_)) => error(
            StatusCode::CONFLICT,
            "a session with this id already exists",
        ),
        Err(e @ CreateError::Spawn(_)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(e @ CreateError::TooMany(_)) => error(StatusCode::TOO_MANY_REQUESTS, &e.to_string()),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// One entry of `GET /api/assistants`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AssistantInfo {
    key: String,
    name: String,
    available: bool,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    yolo_supported: bool,
}

pub(super) fn assistants(cfg: &Config) -> Vec<AssistantInfo> {
    cfg.assistants
        .iter()
        .map(|(key, a)| {
            let availability = a.availability();
            AssistantInfo {
                key: key.clone(),
                name: a.name.clone(),
                available: availability.is_ok(),
                reason: availability.err(),
                yolo_supported: a.yolo_supported(),
            }
        })
        .collect()
}
