//! The HTTP side: the listener, routing, the REST API, the WebSocket upgrade and the
//! embedded page.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, LOCATION, RETRY_AFTER, SET_COOKIE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::auth::{self, Access, Auth, Denied, Role};
use crate::config::Config;
use crate::connections::{Connections, Slot};
use crate::protocol::swe::Swe;
use crate::protocol::Notice;
use crate::registry::{Found, Registry};
use crate::session::{CreateError, CreateSpec, EndReason, RenameError};
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
    /// Tokens, share links, origins and the failed-auth rate limit.
    pub auth: Arc<Auth>,
    /// Cancelled when the daemon shuts down.
    pub shutdown: Shutdown,
    /// Every connection task, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Open connections per client address.
    pub connections: Arc<Connections>,
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
        let Some(slot) = state.connections.admit(peer.ip()) else {
            info!(%peer, "refused connection: too many from this address");
            crate::metrics::METRICS.refused(429);
            state.tasks.spawn(too_many_connections(stream));
            continue;
        };
        let state2 = state.clone();
        // Shared with an upgraded WebSocket, which outlives the HTTP connection task.
        let slot = Arc::new(slot);
        let evicted = slot.evicted();
        let header_timeout = state.cfg.limits.header_timeout;
        state.tasks.spawn(async move {
            let service = service_fn(move |req| {
                let state = state2.clone();
                let slot = slot.clone();
                async move { Ok::<_, Infallible>(route(req, peer, &state, slot).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                // Also bounds the idle time between requests: hyper starts it when it waits
                // for the next request's head.
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                done = conn => if let Err(e) = done {
                    debug!(%peer, "http connection: {e}");
                },
                // Only connections that never sent a request are evicted: nothing is lost.
                _ = evicted.cancelled() => debug!(%peer, "idle connection closed for a newcomer"),
            }
        });
    }
}

/// Answers a connection over the per-address limit with a plain 429 and closes it.
async fn too_many_connections(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = r#"{"error":"too many connections from this address"}"#;
    let reply = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 5\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.write_all(reply.as_bytes()),
    )
    .await;
}

/// What kind of resource a request is for: decides how a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An HTML page: a refusal is the login page.
    Page,
    /// REST, metrics or WebSocket: a refusal is JSON.
    Api,
}

fn query_pairs(req: &Request<Incoming>) -> Vec<(String, String)> {
    let raw = req.uri().query().unwrap_or("");
    form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect()
}

async fn route(
    req: Request<Incoming>,
    peer: SocketAddr,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    slot.requested();
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    // Paths only: query strings may carry tokens and are never logged.
    debug!(%peer, %method, %path, "request");
    let kind = match segments.as_slice() {
        ["healthz"] => return with_type(StatusCode::OK, b"ok\n".to_vec(), "text/plain"),
        [""] | ["session", _] => Kind::Page,
        ["api", ..] | ["ws", ..] | ["metrics"] => Kind::Api,
        // The UI's assets are the same for everyone and hold no secret.
        _ if matches!(method, Method::GET | Method::HEAD) => {
            return static_file(path.trim_start_matches('/'), &req)
        }
        _ => return error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    };
    let query = query_pairs(&req);
    if !state.auth.host_allowed(req.headers()) {
        return refuse(
            StatusCode::FORBIDDEN,
            "without authentication only loopback host names are served (DNS rebinding)",
            kind,
            peer,
            &path,
        );
    }
    let changes_state = !matches!(method, Method::GET | Method::HEAD)
        || fastwebsockets::upgrade::is_upgrade_request(&req);
    if changes_state && !state.auth.origin_allowed(req.headers()) {
        return refuse(
            StatusCode::FORBIDDEN,
            "cross-site request refused (Origin does not match)",
            kind,
            peer,
            &path,
        );
    }
    let presented = auth::presented_token(req.headers(), &query);
    let access = match state.auth.authenticate(presented.as_deref(), peer.ip()) {
        Ok(access) => access,
        Err(denied) => {
            crate::metrics::METRICS.auth_failures.inc();
            let mut resp = match denied {
                Denied::RateLimited(_) => refuse(
                    StatusCode::TOO_MANY_REQUESTS,
                    &denied.reason(),
                    kind,
                    peer,
                    &path,
                ),
                _ => refuse(
                    StatusCode::UNAUTHORIZED,
                    &denied.reason(),
                    kind,
                    peer,
                    &path,
                ),
            };
            if let Denied::RateLimited(secs) = denied {
                if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                    resp.headers_mut().insert(RETRY_AFTER, v);
                }
            }
            return resp;
        }
    };
    // A page opened with a token in its URL: keep the token in a cookie, drop it from the URL.
    if kind == Kind::Page
        && query
            .iter()
            .any(|(k, _)| auth::TOKEN_PARAMS.contains(&k.as_str()))
    {
        if let Some(token) = presented {
            return token_redirect(&path, &query, &token);
        }
    }
    let full = matches!(access, Access::Full);
    let forbidden = || {
        refuse(
            StatusCode::FORBIDDEN,
            "this link does not reach that",
            kind,
            peer,
            &path,
        )
    };
    match (&method, segments.as_slice()) {
        (&Method::GET, ["ws", id]) => match parse_id(id) {
            Ok(id) if access.reaches(id) => websocket(req, id, access, state, slot),
            Ok(_) => forbidden(),
            Err(e) => e.response(),
        },
        (&Method::GET | &Method::HEAD, [""]) if full => static_file("index.html", &req),
        (&Method::GET | &Method::HEAD, ["session", id]) => match parse_id(id) {
            Ok(id) if access.reaches(id) => static_file("terminal.html", &req),
            Ok(_) => forbidden(),
            Err(e) => e.response(),
        },
        (&Method::GET, ["metrics"]) if full => metrics(state),
        (&Method::GET, ["api", "assistants"]) => json(StatusCode::OK, &assistants(&state.cfg)),
        (&Method::GET, ["api", "sessions"]) if full => json(StatusCode::OK, &state.registry.list()),
        (&Method::POST, ["api", "sessions"]) if full => create(req, state).await,
        (_, ["api", "sessions", id, rest @ ..]) => match parse_id(id) {
            Err(e) => e.response(),
            Ok(id) if !access.reaches(id) => forbidden(),
            Ok(id) => match (&method, rest) {
                (&Method::GET, []) => match state.registry.get(&id) {
                    Some(h) => json(StatusCode::OK, &h.info()),
                    None => error(StatusCode::NOT_FOUND, "no such session"),
                },
                (&Method::PATCH, []) if access.may_write(id) => patch(req, id, state).await,
                (&Method::DELETE, []) if full => delete(id, peer, state).await,
                (&Method::POST, ["share"]) if full => share(req, id, state).await,
                (&Method::GET, ["share"]) if full => {
                    json(StatusCode::OK, &state.auth.shares_of(id))
                }
                (&Method::DELETE, ["share", sid]) if full => {
                    if state.auth.revoke(id, sid) {
                        info!(session = %id, share = %sid, "share link revoked");
                        no_content()
                    } else {
                        error(StatusCode::NOT_FOUND, "no such share link")
                    }
                }
                // Everything a share link may not do on its session is refused the same way.
                (_, [] | ["share", ..]) if !full => forbidden(),
                _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
            },
        },
        (_, [""] | ["metrics"] | ["api", "sessions"]) => forbidden(),
        _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
    }
}

/// Logs a refused request once, with its reason, and answers it in the resource's kind.
fn refuse(
    status: StatusCode,
    reason: &str,
    kind: Kind,
    peer: SocketAddr,
    path: &str,
) -> Response<Body> {
    info!(%peer, %path, status = status.as_u16(), reason, "refused request");
    crate::metrics::METRICS.refused(status.as_u16());
    match kind {
        Kind::Api => error(status, reason),
        Kind::Page => login_page(status, reason),
    }
}

fn no_content() -> Response<Body> {
    let mut resp = Response::new(Body::default());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp
}

async fn delete(id: Uuid, peer: SocketAddr, state: &Arc<AppState>) -> Response<Body> {
    match state.registry.get(&id) {
        Some(h) => {
            let _ = h.end(EndReason::Deleted).await;
            info!(session = %id, %peer, "session deleted through the API");
            no_content()
        }
        None => error(StatusCode::NOT_FOUND, "no such session"),
    }
}

/// Sets the token cookie and sends the browser to the same URL without the token.
fn token_redirect(path: &str, query: &[(String, String)], token: &str) -> Response<Body> {
    let kept: Vec<&(String, String)> = query
        .iter()
        .filter(|(k, _)| !auth::TOKEN_PARAMS.contains(&k.as_str()))
        .collect();
    let mut location = path.to_owned();
    if !kept.is_empty() {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in kept {
            q.append_pair(k, v);
        }
        location = format!("{location}?{}", q.finish());
    }
    let mut resp = Response::new(Body::default());
    *resp.status_mut() = StatusCode::SEE_OTHER;
    let cookie = format!(
        "{}={token}; HttpOnly; SameSite=Strict; Path=/",
        auth::COOKIE_NAME
    );
    if let (Ok(loc), Ok(cookie)) = (
        HeaderValue::from_str(&location),
        HeaderValue::from_str(&cookie),
    ) {
        resp.headers_mut().insert(LOCATION, loc);
        resp.headers_mut().insert(SET_COOKIE, cookie);
    }
    resp
}

fn login_page(status: StatusCode, reason: &str) -> Response<Body> {
    let reason = reason.replace('&', "&amp;").replace('<', "&lt;");
    let body = include_str!("login.html").replace("{{reason}}", &reason);
    with_type(status, body.into_bytes(), "text/html; charset=utf-8")
}

/// `POST /api/sessions/{id}/share` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShareRequest {
    role: Role,
    /// Seconds until the link stops working; none: until revoked or the session ends.
    #[serde(default)]
    ttl: Option<u64>,
}

/// `POST /api/sessions/{id}/share` reply.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ShareCreated {
    #[serde(flatten)]
    info: auth::ShareInfo,
    token: String,
    /// Path and query to open (prefix the server's address).
    url: String,
}

async fn share(req: Request<Incoming>, id: Uuid, state: &Arc<AppState>) -> Response<Body> {
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

fn metrics(state: &Arc<AppState>) -> Response<Body> {
    let text = crate::metrics::METRICS.render(&state.registry.list());
    with_type(
        StatusCode::OK,
        text.into_bytes(),
        "text/plain; version=0.0.4",
    )
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

fn websocket(
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

/// Reads a JSON body of at most [`MAX_BODY`] bytes, sent within the header timeout (a body
/// trickled in byte by byte would hold a connection place for ever).
async fn read_json<T: serde::de::DeserializeOwned>(
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
struct PatchRequest {
    name: String,
}

async fn patch(req: Request<Incoming>, id: Uuid, state: &Arc<AppState>) -> Response<Body> {
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

async fn create(req: Request<Incoming>, state: &Arc<AppState>) -> Response<Body> {
    let request: CreateRequest = match read_json(req, state).await {
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
        Err(e @ CreateError::TooMany(_)) => error(StatusCode::TOO_MANY_REQUESTS, &e.to_string()),
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
