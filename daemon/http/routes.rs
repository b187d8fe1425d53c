//! The routing table: which path and method reach which handler, behind the guard.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tracing::{debug, info};

use super::connections::Slot;
use crate::auth::Access;

use super::*;

/// What kind of resource a request is for: decides how a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// An HTML page: a refusal is the login page.
    Page,
    /// REST, metrics or WebSocket: a refusal is JSON.
    Api,
}

pub(super) fn query_pairs(req: &Request<Incoming>) -> Vec<(String, String)> {
    let raw = req.uri().query().unwrap_or("");
    form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect()
}

pub(super) async fn route(
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
    let access = match guard::check(&req, peer, state, kind, &path) {
        Ok(access) => access,
        Err(refused) => return *refused,
    };
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
            Ok(id) if access.reaches(id) => {
                websocket(req, id, WsDialect::Browser, access, state, slot)
            }
            Ok(_) => forbidden(),
            Err(e) => e.response(),
        },
        (&Method::GET, ["ws", id, "raw"]) => match parse_id(id) {
            Ok(id) if access.reaches(id) => websocket(req, id, WsDialect::Raw, access, state, slot),
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
