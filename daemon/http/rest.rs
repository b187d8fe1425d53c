//! The REST API: sessions (create, list, get, rename, delete, recent output), share links,
//! assistants, metrics.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::info;
use uuid::Uuid;

use crate::audit::{Actor, Event};
use crate::auth;
use crate::config::Config;
use crate::registry::Found;
use crate::session::{CreateError, CreateSpec, EndReason, RenameError, Role, CUSTOM_ASSISTANT};

use super::*;

pub(super) async fn delete(id: Uuid, actor: Actor, state: &Arc<AppState>) -> Response<Body> {
    match state.registry.get(&id) {
        Some(h) => {
            let _ = h.end(EndReason::Deleted).await;
            info!(session = %id, peer = %actor.peer, "session deleted through the API");
            let detail = serde_json::json!({"how": "delete"});
            state
                .audit
                .record(Event::new("session.end", &actor).on(id).with(detail));
            no_content()
        }
        None => error(StatusCode::NOT_FOUND, "no such session"),
    }
}

/// `POST /api/sessions/{id}/share` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ShareRequest {
    role: Role,
    /// Seconds until the link stops working; none: until revoked or the session ends.
    #[serde(default, deserialize_with = "ttl_seconds")]
    ttl: Option<u64>,
    /// Whether the link may download the session's recording.
    #[serde(default)]
    record: bool,
}

/// `POST /api/sessions/{id}/share` reply.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShareCreated {
    #[serde(flatten)]
    info: auth::ShareInfo,
    token: String,
    /// Path and query to open (prefix the server's address), under the base path.
    url: String,
    /// The whole link as the caller reaches the server (behind a trusted proxy, its public
    /// scheme and host), when the request named its host.
    #[serde(skip_serializing_if = "Option::is_none")]
    href: Option<String>,
}

pub(super) async fn share(
    req: Request<Incoming>,
    id: Uuid,
    who: String,
    actor: Actor,
    state: &Arc<AppState>,
) -> Response<Body> {
    if state.registry.get(&id).is_none() {
        return error(StatusCode::NOT_FOUND, "no such session");
    }
    let client = super::proxy::of(&req).cloned();
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
    let share = state
        .auth
        .create_share(id, request.role, ttl, request.record, &who);
    info!(session = %id, share = %share.id, role = ?share.role, by = %who, "share link created");
    let detail = serde_json::json!({
        "share": share.id, "role": share.role, "ttl": request.ttl, "record": request.record,
    });
    state
        .audit
        .record(Event::new("session.share", &actor).on(id).with(detail));
    let base = client.as_ref().map_or("", |c| c.base.as_str());
    let url = format!("{base}/session/{id}?token={}", share.token());
    let href = client
        .as_ref()
        .and_then(|c| c.origin())
        .map(|origin| format!("{origin}{url}"));
    json(
        StatusCode::CREATED,
        &ShareCreated {
            info: share.info(),
            token: share.token().to_owned(),
            url,
            href,
        },
    )
}

pub(super) fn metrics(state: &Arc<AppState>) -> Response<Body> {
    let sessions = state.registry.list();
    let running = sessions.iter().filter(|s| s.alive).count();
    let counts = crate::metrics::SessionCounts {
        running: running as u64,
        exited: (sessions.len() - running) as u64,
        viewers: sessions.iter().map(|s| s.viewers as u64).sum(),
    };
    let text = state.metrics.render(counts);
    with_type(
        StatusCode::OK,
        text.into_bytes(),
        "text/plain; version=0.0.4",
    )
}

/// `GET /api/sessions/{id}/scrollback` reply (field names as the protocol spells them).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Scrollback {
    /// The newest raw output bytes, base64.
    scrollback: String,
    /// How many bytes that is, decoded.
    size: usize,
    /// Whether the program still runs.
    alive: bool,
    /// Its exit status once it ended.
    exit_code: Option<i32>,
}

pub(super) fn scrollback(id: Uuid, state: &Arc<AppState>) -> Response<Body> {
    let Some(handle) = state.registry.get(&id) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    // The metadata first: once it says the program has ended, the log already holds all of its
    // output and the exit notice, so `alive: false` never comes with output cut short.
    let info = handle.info();
    let bytes = handle.log().tail(state.cfg.session.scrollback_api_bytes);
    json(
        StatusCode::OK,
        &Scrollback {
            scrollback: base64::engine::general_purpose::STANDARD.encode(&bytes),
            size: bytes.len(),
            alive: info.alive,
            exit_code: info.exit_code,
        },
    )
}

/// `POST /api/sessions` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateRequest {
    /// Assistant key; without `cmd` it is required.
    #[serde(default)]
    assistant: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    cwd: Option<PathBuf>,
    /// Optional: the client may choose the uuid, as with the WebSocket route (also taken
    /// from the query, `?uuid=`, where a load balancer can route on it).
    #[serde(default, alias = "uuid")]
    id: Option<Uuid>,
    /// The program and its arguments, run instead of the assistant's command. Taken as any
    /// JSON value so a wrong shape gets a message about `cmd` rather than serde's.
    #[serde(default, alias = "command")]
    #[schema(value_type = Option<Vec<String>>)]
    cmd: Option<Value>,
    /// Initial width, columns.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1)]
    cols: Option<Value>,
    /// Initial height, rows.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1)]
    rows: Option<Value>,
}

impl CreateRequest {
    /// What to create, or why the request is bad.
    fn into_spec(self, cfg: &Config) -> Result<CreateSpec, ApiError> {
        let bad = |message: String| ApiError(StatusCode::BAD_REQUEST, message);
        if self.cmd.as_ref().is_some_and(|c| !c.is_null()) && !cfg.session.own_commands {
            return Err(ApiError(
                StatusCode::FORBIDDEN,
                super::exec::OWN_COMMANDS_OFF.to_owned(),
            ));
        }
        let command = self.cmd.map(parse_cmd).transpose()?;
        let assistant = match (self.assistant, &command) {
            (Some(key), _) => key,
            (None, Some(_)) => CUSTOM_ASSISTANT.to_owned(),
            (None, None) => {
                return Err(bad(
                    "assistant is required (the key of a configured assistant, see \
                     GET /api/assistants), unless cmd gives the command to run"
                        .to_owned(),
                ))
            }
        };
        let size = if self.rows.is_none() && self.cols.is_none() {
            None
        } else {
            Some((
                dimension("rows", self.rows, cfg.session.rows)?,
                dimension("cols", self.cols, cfg.session.cols)?,
            ))
        };
        Ok(CreateSpec {
            id: self.id.unwrap_or_else(Uuid::new_v4),
            assistant,
            name: self.name,
            cwd: self.cwd,
            screen: true,
            command,
            size,
            created_by: None,
        })
    }
}

/// `cmd` as sent: an array of strings. What the strings may be (a program that exists, no
/// NUL) is checked where the session starts, for every way of creating one.
fn parse_cmd(cmd: Value) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| ApiError(StatusCode::BAD_REQUEST, message);
    let Value::Array(items) = cmd else {
        return Err(bad(format!(
            "cmd must be an array of strings, the program and its arguments, e.g. \
             [\"sh\", \"-c\", \"make test\"] (it is never run through a shell), not {}",
            json_kind(&cmd)
        )));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(arg) => Ok(arg),
            other => Err(bad(format!(
                "cmd[{i}] must be a string, not {}",
                json_kind(&other)
            ))),
        })
        .collect()
}

/// `rows` or `cols` as sent: a positive integer (clamped later like any size); `default`
/// when absent.
fn dimension(name: &str, value: Option<Value>, default: u16) -> Result<u16, ApiError> {
    let Some(value) = value else {
        return Ok(default);
    };
    match whole_number(&value) {
        // Larger than any terminal: the size policy's clamp brings it down.
        Some(n) if n >= 1 => Ok(u16::try_from(n).unwrap_or(u16::MAX)),
        _ => Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("{name} must be a positive integer, not {value}"),
        )),
    }
}

/// A non-negative whole number as JSON writes it: `80`, or `80.0` (JSON Schema's integer
/// includes it), up to `u64::MAX`.
fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let f = value.as_f64()?;
        // 2^64 is the first float past u64::MAX.
        (f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_616.0).then_some(f as u64)
    })
}

/// A share link's `ttl`: a whole number of seconds, or none.
fn ttl_seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_number(&v).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!("ttl must be a whole number of seconds, not {v}"))
        }),
    }
}

/// A JSON value's type, for messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes, sent within the header timeout (a body
/// trickled in byte by byte would hold a connection place for ever).
pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
    state: &AppState,
) -> Result<T, ApiError> {
    let body = read_body(req, state).await?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("bad request body: {e}")))
}

/// Reads a body of at most [`MAX_BODY`] bytes, sent within the header timeout.
pub(super) async fn read_body(
    req: Request<Incoming>,
    state: &AppState,
) -> Result<bytes::Bytes, ApiError> {
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
    Ok(body)
}

/// `PATCH /api/sessions/{id}` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PatchRequest {
    name: String,
}

pub(super) async fn patch(
    req: Request<Incoming>,
    id: Uuid,
    actor: Actor,
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
    let old = handle.info().name.clone();
    match handle.rename(None, request.name).await {
        Ok(info) => {
            if info.name != old {
                let detail = serde_json::json!({"from": old, "to": info.name});
                let event = Event::new("session.rename", &actor).on(id).with(detail);
                state.audit.record(event);
            }
            json(StatusCode::OK, &info)
        }
        Err(RenameError::Gone(_)) => error(StatusCode::NOT_FOUND, "no such session"),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// `POST /api/sessions`: `created_by` is the caller's user name.
pub(super) async fn create(
    req: Request<Incoming>,
    actor: Actor,
    created_by: Option<String>,
    state: &Arc<AppState>,
) -> Response<Body> {
    let in_query = match query_uuid(&req) {
        Ok(id) => id,
        Err(e) => return e.response(),
    };
    let mut request: CreateRequest = match read_json(req, state).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    match (in_query, request.id) {
        // Each well formed on its own: the two name different sessions.
        (Some(q), Some(b)) if q != b => {
            return error(
                StatusCode::CONFLICT,
                "the uuid in the query and the id in the body differ",
            )
        }
        (Some(q), _) => request.id = Some(q),
        _ => {}
    }
    let spec = match request.into_spec(&state.cfg) {
        Ok(spec) => CreateSpec { created_by, ..spec },
        Err(e) => return e.response(),
    };
    match state.registry.get_or_create(spec) {
        Ok(Found::Created(h)) => {
            let info = h.info();
            state.audit.created(&actor, &info);
            json(StatusCode::CREATED, &*info)
        }
        Ok(Found::Existing(_)) => error(
            StatusCode::CONFLICT,
            "a session with this id already exists",
        ),
        Err(e @ (CreateError::Spawn(_) | CreateError::Thread(_))) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
        }
        Err(e @ (CreateError::TooMany(_) | CreateError::NoFreeNumber(_))) => {
            error(StatusCode::TOO_MANY_REQUESTS, &e.to_string())
        }
        // Well formed, but naming what this host does not have (no schema can say which
        // directories and programs exist): 404, as for any reference to nothing.
        Err(
            e @ (CreateError::BadWorkDir(_)
            | CreateError::ProgramNotFound(_)
            | CreateError::Unavailable { .. }),
        ) => error(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// `?uuid=` of `POST /api/sessions`: the session's uuid where a load balancer can see it.
fn query_uuid(req: &Request<Incoming>) -> Result<Option<Uuid>, ApiError> {
    match query_pairs(req).into_iter().find(|(k, _)| k == "uuid") {
        Some((_, v)) => parse_id(&v).map(Some),
        None => Ok(None),
    }
}

/// One entry of `GET /api/assistants`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
