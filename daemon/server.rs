//! The HTTP side: the listener, routing, the REST API, the WebSocket upgrade and the
//! embedded page.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::config::Config;
use crate::registry::{Found, Registry};
use crate::session::{CreateError, CreateSpec, EndReason};
use crate::shutdown::Shutdown;
use crate::viewer::{self, ViewerOptions};

/// Largest REST request body, bytes.
const MAX_BODY: usize = 64 * 1024;

type Body = Full<Bytes>;

/// What every request handler shares.
pub struct AppState {
    /// The sessions.
    pub registry: Arc<Registry>,
    /// The configuration.
    pub cfg: Arc<Config>,
    /// Cancelled when the daemon shuts down.
    pub shutdown: Shutdown,
    /// Every connection task, so shutdown can wait for them.
    pub tasks: TaskTracker,
}

/// Accepts connections until shutdown.
pub async fn run(listener: TcpListener, state: Arc<AppState>) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving the others.
                    warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let state2 = state.clone();
        state.tasks.spawn(async move {
            let service = service_fn(move |req| {
                let state = state2.clone();
                async move { Ok::<_, Infallible>(route(req, peer, &state).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                debug!(%peer, "http connection: {e}");
            }
        });
    }
}

async fn route(req: Request<Incoming>, peer: SocketAddr, state: &Arc<AppState>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    debug!(%peer, %method, %path, "request");
    match (&method, segments.as_slice()) {
        (&Method::GET, ["ws", id]) => websocket(req, id, state),
        (&Method::GET, ["api", "sessions"]) => json(StatusCode::OK, &state.registry.list()),
        (&Method::POST, ["api", "sessions"]) => create(req, state).await,
        (&Method::GET, ["api", "sessions", id]) => match parse_id(id) {
            Ok(id) => match state.registry.get(&id) {
                Some(h) => json(StatusCode::OK, &h.info()),
                None => error(StatusCode::NOT_FOUND, "no such session"),
            },
            Err(e) => e.response(),
        },
        (&Method::DELETE, ["api", "sessions", id]) => match parse_id(id) {
            Ok(id) => match state.registry.get(&id) {
                Some(h) => {
                    let _ = h.end(EndReason::Deleted).await;
                    info!(session = %id, %peer, "session deleted through the API");
                    Response::builder()
                        .status(StatusCode::NO_CONTENT)
                        .body(Body::default())
                        .unwrap_or_default()
                }
                None => error(StatusCode::NOT_FOUND, "no such session"),
            },
            Err(e) => e.response(),
        },
        (&Method::PATCH, ["api", "sessions", id]) => match parse_id(id) {
            Ok(id) => patch(req, id, state).await,
            Err(e) => e.response(),
        },
        (&Method::GET, ["api", "assistants"]) => json(StatusCode::OK, &assistants(&state.cfg)),
        (_, ["api", ..]) | (_, ["ws", ..]) => error(StatusCode::NOT_FOUND, "no such endpoint"),
        (&Method::GET | &Method::HEAD, [""]) => static_file("index.html", &req),
        (&Method::GET | &Method::HEAD, ["session", id]) => match parse_id(id) {
            Ok(_) => static_file("terminal.html", &req),
            Err(e) => e.response(),
        },
        (&Method::GET | &Method::HEAD, _) => static_file(path.trim_start_matches('/'), &req),
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

/// A refused request: its status and a message for people.
struct ApiError(StatusCode, String);

impl ApiError {
    fn response(self) -> Response<Body> {
        error(self.0, &self.1)
    }
}

fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id)
        .map_err(|_| ApiError(StatusCode::BAD_REQUEST, format!("{id:?} is not a UUID")))
}

/// The query parameters of a WebSocket connection.
#[derive(Debug, Default)]
struct WsQuery {
    assistant: Option<String>,
    name: Option<String>,
    cwd: Option<String>,
    flow_ack: bool,
}

fn ws_query(req: &Request<Incoming>) -> WsQuery {
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

fn websocket(mut req: Request<Incoming>, id: &str, state: &Arc<AppState>) -> Response<Body> {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(e) => return e.response(),
    };
    if !fastwebsockets::upgrade::is_upgrade_request(&req) {
        return error(StatusCode::BAD_REQUEST, "expected a WebSocket upgrade");
    }
    let q = ws_query(&req);
    // Creation happens before the upgrade so two racing joiners start one program, but its
    // failure is reported after it, as the protocol wants (an error message and close 4002).
    let session = match state.registry.get(&id) {
        Some(h) => Ok(h),
        None => match q.assistant.clone() {
            None => Err("no session with this id, and no assistant given to create one".to_owned()),
            Some(assistant) => state
                .registry
                .get_or_create(CreateSpec {
                    id,
                    assistant,
                    name: q.name.clone(),
                    cwd: q.cwd.as_ref().map(PathBuf::from),
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
    let opts = ViewerOptions {
        flow_ack: q.flow_ack,
        read_only: false,
    };
    state.tasks.spawn(async move {
        let ws = match upgrade.await {
            Ok(ws) => ws,
            Err(e) => {
                debug!(session = %id, "upgrade failed: {e}");
                return;
            }
        };
        match session {
            Ok(handle) => viewer::run(ws, handle, cfg, opts).await,
            Err(message) => {
                info!(session = %id, "refused WebSocket: {message}");
                viewer::refuse(ws, 4002, "session_create_failed", &message).await;
            }
        }
    });
    response.map(|_| Body::default())
}

/// `POST /api/sessions` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    assistant: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    /// Optional: the client may choose the uuid, as with the WebSocket route.
    #[serde(default)]
    id: Option<Uuid>,
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes.
async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, ApiError> {
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
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
struct PatchRequest {
    name: String,
}

async fn patch(req: Request<Incoming>, id: Uuid, state: &Arc<AppState>) -> Response<Body> {
    let Some(handle) = state.registry.get(&id) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    let request: PatchRequest = match read_json(req).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    match handle.rename(request.name).await {
        Ok(Ok(info)) => json(StatusCode::OK, &info),
        Ok(Err(message)) => error(StatusCode::BAD_REQUEST, &message),
        Err(_) => error(StatusCode::NOT_FOUND, "no such session"),
    }
}

async fn create(req: Request<Incoming>, state: &Arc<AppState>) -> Response<Body> {
    let request: CreateRequest = match read_json(req).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    let spec = CreateSpec {
        id: request.id.unwrap_or_else(Uuid::new_v4),
        assistant: request.assistant,
        name: request.name,
        cwd: request.cwd,
    };
    match state.registry.get_or_create(spec) {
        Ok(Found::Created(h)) => json(StatusCode::CREATED, &h.info()),
        Ok(Found::Existing(_)) => error(
            StatusCode::CONFLICT,
            "a session with this id already exists",
        ),
        Err(e @ CreateError::Spawn(_)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// One entry of `GET /api/assistants`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AssistantInfo {
    key: String,
    name: String,
    available: bool,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    yolo_supported: bool,
}

fn assistants(cfg: &Config) -> Vec<AssistantInfo> {
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

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => with_type(status, body, "application/json"),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    with_type(status, body.into_bytes(), "application/json")
}

fn with_type(status: StatusCode, body: Vec<u8>, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn static_file(path: &str, req: &Request<Incoming>) -> Response<Body> {
    crate::assets::serve(path, req.headers())
        .unwrap_or_else(|| error(StatusCode::NOT_FOUND, "not found"))
}
