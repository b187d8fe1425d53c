//! Replies: JSON errors, refusals (JSON or the login page, logged once), the token cookie
//! redirect, static files and the session page.

use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, LOCATION, SET_COOKIE};
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use tracing::info;
use uuid::Uuid;

use super::routes::Audience;
use crate::auth::{self};
use crate::metrics::Metrics;
use crate::registry::{Registry, ResolveError};

use super::*;

/// Logs a refused request once, with its reason, counts it in `metrics`, and answers it as its
/// audience reads: JSON for a program, the login page for a person.
pub(super) fn refuse(
    metrics: &Metrics,
    status: StatusCode,
    reason: &str,
    audience: Audience,
    peer: SocketAddr,
    path: &str,
) -> Response<Body> {
    info!(%peer, %path, status = status.as_u16(), reason, "refused request");
    metrics.refused(status.as_u16());
    let mut resp = match audience {
        Audience::Program => error(status, reason),
        Audience::Person => login_page(status, reason),
    };
    resp.extensions_mut().insert(Refused(reason.to_owned()));
    resp
}

/// Why a request was refused (401, 403, 429), carried in the response's extensions to the
/// router, which records it in the audit trail.
#[derive(Debug, Clone)]
pub(super) struct Refused(pub String);

pub(super) fn no_content() -> Response<Body> {
    let mut resp = Response::new(Body::default());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp
}

/// Sets the token cookie and sends the browser to the same URL without the token.
pub(super) fn token_redirect(
    req: &Request<Incoming>,
    path: &str,
    query: &[(String, String)],
    token: &str,
) -> Response<Body> {
    let client = super::proxy::of(req);
    let base = client.map_or("", |c| c.base.as_str());
    // Over https (ours or the proxy's) the cookie is never sent in the clear.
    let secure = if client.is_some_and(|c| c.https) {
        "; Secure"
    } else {
        ""
    };
    let kept: Vec<&(String, String)> = query
        .iter()
        .filter(|(k, _)| !auth::TOKEN_PARAMS.contains(&k.as_str()))
        .collect();
    let mut location = format!("{base}{path}");
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
        "{}={token}; HttpOnly; SameSite=Strict; Path={base}/{secure}",
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

pub(super) fn login_page(status: StatusCode, reason: &str) -> Response<Body> {
    let reason = reason.replace('&', "&amp;").replace('<', "&lt;");
    let body = include_str!("../login.html").replace("{{reason}}", &reason);
    with_type(status, body.into_bytes(), "text/html; charset=utf-8")
}

/// A refused request: its status and a message for people.
pub(super) struct ApiError(pub(super) StatusCode, pub(super) String);

impl ApiError {
    pub(super) fn response(self) -> Response<Body> {
        error(self.0, &self.1)
    }
}

pub(super) fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id)
        .map_err(|_| ApiError(StatusCode::BAD_REQUEST, format!("{id:?} is not a UUID")))
}

/// The uuid a session id from a path names: a uuid as written (the session may not exist, or
/// not yet), or a session number from 1 to 255 that a session has now. 400 for anything else,
/// 404 for a number no session has. Access checks (`Access::reaches`) go on the uuid returned.
pub(super) fn resolve_id(registry: &Registry, id: &str) -> Result<Uuid, ApiError> {
    registry.resolve(id).map_err(|e| {
        let status = match e {
            ResolveError::BadId(_) => StatusCode::BAD_REQUEST,
            ResolveError::NoSuchNumber(_) => StatusCode::NOT_FOUND,
        };
        ApiError(status, e.to_string())
    })
}

/// 405 for a method the path does not answer, with the `Allow` header listing those it does.
pub(super) fn method_not_allowed(allowed: &[&str]) -> Response<Body> {
    let mut resp = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
        resp.headers_mut().insert(ALLOW, v);
    }
    resp
}

pub(super) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => with_type(status, body, "application/json"),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

pub(super) fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut resp = with_type(status, body.into_bytes(), "application/json");
    if matches!(status.as_u16(), 401 | 403 | 429) {
        resp.extensions_mut().insert(Refused(message.to_owned()));
    }
    resp
}

pub(super) fn with_type(
    status: StatusCode,
    body: Vec<u8>,
    content_type: &'static str,
) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

pub(super) fn static_file(path: &str, req: &Request<Incoming>) -> Response<Body> {
    use http_body_util::BodyExt;
    let base = super::proxy::of(req).map_or("", |c| c.base.as_str());
    crate::assets::serve(path, req.headers(), base)
        .map(|r| r.map(|b| b.boxed_unsync()))
        .unwrap_or_else(|| not_found(req, StatusCode::NOT_FOUND, "not found"))
}

/// On a session's page opened with a share link: what the link allows, `viewer` or
/// `writer`, then `; record` when it may replay the recording. The page's scripts read it
/// (with a `HEAD` of their own address) to send the visitor only where the link reaches.
pub(super) const LINK_HEADER: &str = "x-ptyhub-link";

/// A session's terminal page, with [`LINK_HEADER`] when a share link opened it.
pub(super) fn session_page(req: &Request<Incoming>, access: &auth::Access) -> Response<Body> {
    let mut resp = static_file("terminal.html", req);
    if let auth::Access::Share(share) = access {
        let role = match share.role {
            crate::session::Role::Writer => "writer",
            crate::session::Role::Viewer => "viewer",
        };
        let record = if share.record { "; record" } else { "" };
        if let Ok(v) = HeaderValue::from_str(&format!("{role}{record}")) {
            resp.headers_mut().insert(LINK_HEADER, v);
        }
    }
    resp
}

/// Whether the request comes from a browser navigating to a page (it takes HTML).
fn wants_html(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// A page for a person (the UI's 404 page) when a browser navigates here; JSON otherwise.
pub(super) fn not_found(
    req: &Request<Incoming>,
    status: StatusCode,
    message: &str,
) -> Response<Body> {
    use http_body_util::BodyExt;
    let page = wants_html(req)
        .then(|| {
            let base = super::proxy::of(req).map_or("", |c| c.base.as_str());
            crate::assets::serve("404.html", &hyper::HeaderMap::new(), base)
        })
        .flatten();
    match page {
        Some(mut resp) => {
            *resp.status_mut() = status;
            resp.map(|b| b.boxed_unsync())
        }
        None => error(status, message),
    }
}
