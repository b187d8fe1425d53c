//! The routing table: which path and method reach which handler, behind the guard.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tracing::{debug, info};
use uuid::Uuid;

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

/// What a page or an embedded asset answers.
const PAGE_METHODS: &[&str] = &["GET", "HEAD"];

/// The methods each known path answers, for a 405's `Allow`; `None` for an unknown path.
/// Which of them a share link may use is decided by the route itself (403).
pub(super) fn allowed_methods(segments: &[&str]) -> Option<&'static [&'static str]> {
    Some(match segments {
        [""] | ["session", _] | ["replay", _] => PAGE_METHODS,
        ["metrics"] | ["ws"] | ["ws", _] | ["ws", _, "raw"] | ["api", "assistants"] => &["GET"],
        ["api", "sessions"] => &["GET", "POST"],
        ["api", "sessions", _] => &["GET", "PATCH", "DELETE"],
        ["api", "sessions", _, "scrollback"] | ["api", "sessions", _, "log"] => &["GET"],
        ["api", "events"] => &["GET"],
        ["api", "exec"] => &["GET", "POST"],
        ["api", "sessions", _, "share"] => &["GET", "POST"],
        ["api", "sessions", _, "share", _] => &["DELETE"],
        ["api", "sessions", _, "recording"] | ["api", "recordings"] => &["GET"],
        ["api", "recordings", _] => &["GET", "DELETE"],
        _ => return None,
    })
}

/// `GET /api/version` reply.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Version {
    /// The daemon's version.
    version: &'static str,
    /// Its process id (the same across live upgrades).
    pid: u32,
    /// When the running image started, RFC 3339.
    image_started: String,
    /// The same, milliseconds since the Unix epoch.
    image_started_ms: u64,
    /// Live upgrades so far.
    upgrades: u64,
    /// Sessions now.
    sessions: usize,
    /// The last upgrade that failed, if any.
    last_upgrade_error: Option<UpgradeError>,
}

/// A failed live upgrade.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpgradeError {
    /// When, RFC 3339.
    at: String,
    /// When, milliseconds since the Unix epoch.
    at_ms: u64,
    /// What went wrong.
    message: String,
}

/// What `/api/version` says: the version, this image's start, the upgrades so far and the
/// last one that failed.
fn version(state: &AppState) -> Version {
    let status = state.upgrades.status();
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    Version {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        image_started: crate::session::rfc3339(status.image_started),
        image_started_ms: ms(status.image_started),
        upgrades: status.upgrades,
        sessions: state.registry.len(),
        last_upgrade_error: status.last_error.map(|(at, message)| UpgradeError {
            at: crate::session::rfc3339(at),
            at_ms: ms(at),
            message,
        }),
    }
}

pub(super) async fn route(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    tls: bool,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    // From here on `peer` is the client, behind a trusted proxy the forwarded one.
    let mut client = proxy::client(req.headers(), peer, tls, &state.cfg.proxy);
    client.base = state.cfg.server.base_path.clone();
    let peer = client.addr;
    if !slot.from_client(peer.ip()) {
        info!(%peer, "refused request: too many connections from this address");
        crate::metrics::METRICS.refused(429);
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many connections from this address",
        );
    }
    req.extensions_mut().insert(client);
    let path = match proxy::mount(&state.cfg.server.base_path, req.uri().path()) {
        proxy::Mount::Inside(p) => p.to_owned(),
        proxy::Mount::Bare => return proxy::to_base(&req, &state.cfg.server.base_path),
        // A load balancer's health check may not know the base.
        proxy::Mount::Outside if req.uri().path() == "/healthz" => "/healthz".to_owned(),
        proxy::Mount::Outside => return error(StatusCode::NOT_FOUND, "not found"),
    };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    // Paths only: query strings may carry tokens and are never logged.
    debug!(%peer, %method, %path, "request");
    let kind = match segments.as_slice() {
        ["healthz"] => return with_type(StatusCode::OK, b"ok\n".to_vec(), "text/plain"),
        // Public like /healthz (no secret in it): `ptyhub upgrade` and monitoring read it.
        ["api", "version"] if method == Method::GET => {
            return json(StatusCode::OK, &version(state))
        }
        // Public too: the same for every installation of this version, no secret in it.
        ["api", "openapi.json"] if method == Method::GET => return openapi::document(),
        [""] | ["session", _] | ["replay", _] => Kind::Page,
        ["api", ..] | ["ws", ..] | ["metrics"] => Kind::Api,
        // The UI's assets are the same for everyone and hold no secret.
        _ if matches!(method, Method::GET | Method::HEAD) => {
            return static_file(path.trim_start_matches('/'), &req)
        }
        // Public too, so whether an asset exists is no secret either.
        _ if crate::assets::exists(path.trim_start_matches('/')) => {
            return method_not_allowed(PAGE_METHODS)
        }
        _ => return error(StatusCode::NOT_FOUND, "not found"),
    };
    let access = match guard::check(&req, peer, state, kind, &path) {
        Ok(access) => access,
        Err(refused) => return *refused,
    };
    let Some(allowed) = allowed_methods(&segments) else {
        return error(StatusCode::NOT_FOUND, "no such endpoint");
    };
    if !allowed.contains(&method.as_str()) {
        return method_not_allowed(allowed);
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
    // The session a path's id names, if this caller may reach it. A share link is refused a
    // number no session has as it is refused any session not its own, so it cannot probe
    // which numbers exist.
    let target = |id: &str| -> Result<Uuid, Box<Response<Body>>> {
        match resolve_id(&state.registry, id) {
            Ok(id) if access.reaches(id) => Ok(id),
            Ok(_) => Err(Box::new(forbidden())),
            Err(e) if e.0 == StatusCode::NOT_FOUND && !full => Err(Box::new(forbidden())),
            Err(e) => Err(Box::new(e.response())),
        }
    };
    match (&method, segments.as_slice()) {
        (&Method::GET, ["ws", id]) => match target(id) {
            Ok(id) => websocket(req, id, WsDialect::Browser, access, state, slot),
            Err(refused) => *refused,
        },
        (&Method::GET, ["ws"]) => multiplexed(req, access, state, slot),
        (&Method::GET, ["ws", id, "raw"]) => match target(id) {
            Ok(id) => websocket(req, id, WsDialect::Raw, access, state, slot),
            Err(refused) => *refused,
        },
        (_, [""]) if full => static_file("index.html", &req),
        (_, ["session", id]) => match parse_id(id) {
            Ok(id) if access.reaches(id) => static_file("terminal.html", &req),
            Ok(_) => forbidden(),
            // Not a session address: a person gets the 404 page, not JSON.
            Err(e) => not_found(&req, e.0, &e.1),
        },
        // Whoever may download a recording may watch it: the page fetches the same endpoint.
        (_, ["replay", id]) => match parse_id(id) {
            Ok(id) if access.may_record(id) => static_file("replay.html", &req),
            Ok(_) => forbidden(),
            Err(e) => e.response(),
        },
        (_, ["metrics"]) if full => metrics(state),
        (_, ["api", "assistants"]) => json(StatusCode::OK, &assistants(&state.cfg)),
        (&Method::GET, ["api", "sessions"]) if full => cluster::list(&req, state).await,
        (&Method::POST, ["api", "sessions"]) if full => create(req, state).await,
        (&Method::GET, ["api", "recordings"]) if full => recordings::list(state).await,
        // A share link made with `record` reaches its own session's recording.
        (_, ["api", "recordings", id]) => {
            let id = match parse_id(id) {
                Ok(id) if access.may_record(id) => id,
                Ok(_) => return forbidden(),
                Err(e) => return e.response(),
            };
            match method {
                Method::GET => recordings::one(id, state).await,
                Method::DELETE if full => recordings::delete(id, state).await,
                _ => forbidden(),
            }
        }
        // A share link's stream carries only its own session's events.
        (&Method::GET, ["api", "events"]) => sse::events(req, &access, state, &slot),
        // Never for a share link (section 9): it falls through to 403.
        (&Method::GET, ["api", "exec"]) if full => exec::websocket(req, state, slot),
        (&Method::POST, ["api", "exec"]) if full => exec::sse(req, state, slot).await,
        (_, ["api", "sessions", id, rest @ ..]) => {
            let id = match target(id) {
                Ok(id) => id,
                Err(refused) => return *refused,
            };
            match (&method, rest) {
                (&Method::GET, []) => match state.registry.get(&id) {
                    Some(h) => json(StatusCode::OK, &h.info()),
                    None => error(StatusCode::NOT_FOUND, "no such session"),
                },
                (&Method::PATCH, []) if access.may_write(id) => patch(req, id, state).await,
                (&Method::DELETE, []) if full => delete(id, peer, state).await,
                // A share link sees its session's screen anyway: its recent output too.
                (&Method::GET, ["scrollback"]) => scrollback(id, state),
                (&Method::GET, ["log"]) => sse::log(req, id, state, &slot),
                (&Method::GET, ["recording"]) if access.may_record(id) => {
                    recordings::cast(id, state).await
                }
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
                // A method the path answers, which this share link may not use.
                _ => forbidden(),
            }
        }
        // A method the path answers, kept for the daemon's own token.
        _ => forbidden(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_path_has_its_methods() {
        let allowed = |path: &str| {
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            allowed_methods(&segments).map(|m| m.join(", "))
        };
        let cases = [
            ("/", Some("GET, HEAD")),
            ("/session/x", Some("GET, HEAD")),
            ("/replay/x", Some("GET, HEAD")),
            ("/metrics", Some("GET")),
            ("/ws/1", Some("GET")),
            ("/api/assistants", Some("GET")),
            ("/api/sessions", Some("GET, POST")),
            ("/api/sessions/1", Some("GET, PATCH, DELETE")),
            ("/api/sessions/1/scrollback", Some("GET")),
            ("/api/sessions/1/share", Some("GET, POST")),
            ("/api/sessions/1/share/abc", Some("DELETE")),
            ("/api/exec", Some("GET, POST")),
            ("/api/sessions/1/recording", Some("GET")),
            ("/api/recordings", Some("GET")),
            ("/api/recordings/x", Some("GET, DELETE")),
            ("/api/nope", None),
            ("/api/sessions/1/nope", None),
            ("/ws/1/nope", None),
        ];
        for (path, want) in cases {
            assert_eq!(allowed(path).as_deref(), want, "{path}");
        }
    }
}
