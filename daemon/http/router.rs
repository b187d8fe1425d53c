//! Routing a request: which client it is and whether its address has a place, where it is
//! under the base path, which route it is ([`routes::lookup`]), whether the caller may have it
//! (the guard, then the route's [`Callers`]), and its handler.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tracing::{debug, info};
use uuid::Uuid;

use super::connections::Slot;
use super::reply::Refused;
use super::routes::{Audience, Call, Callers, Handler, Lookup, PathId, Pending, PAGE_METHODS};
use crate::audit::Actor;
use crate::auth::Access;

use super::*;

/// Answers one request: lookup, guard, handler; a refusal (401, 403, 429), whoever made it,
/// is recorded in the audit trail.
pub(super) async fn route(
    req: Request<Incoming>,
    peer: SocketAddr,
    tls: bool,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    let mut asker = Asker {
        method: req.method().clone(),
        // Paths only: query strings may carry tokens and are never logged or recorded.
        path: req.uri().path().to_owned(),
        peer,
        access: None,
    };
    let resp = answer(req, tls, state, slot, &mut asker).await;
    if let Some(Refused(reason)) = resp.extensions().get::<Refused>() {
        if asker.access.is_none() {
            asker.access = resp.extensions().get::<Access>().cloned();
        }
        let status = resp.status().as_u16();
        // A session's own program (its capability token) is no person to audit.
        let program = matches!(asker.access, Some(Access::StateToken(_)));
        if matches!(status, 401 | 403 | 429) && !program {
            let actor = asker.access.as_ref().map(|a| Actor::of(a, asker.peer));
            let method = asker.method.as_str();
            let audit = &state.audit;
            audit.refused(actor, asker.peer, status, reason, method, &asker.path);
        }
    }
    resp
}

/// Who asked what, as far as the router got: for the audit trail's record of a refusal.
struct Asker {
    method: Method,
    /// The path (under the base path once it is known to be there).
    path: String,
    /// The client (behind a trusted proxy, the forwarded one).
    peer: SocketAddr,
    /// Its access, once the guard let it in.
    access: Option<Access>,
}

/// [`route`]'s answer, noting in `asker` what it learns of the client.
async fn answer(
    req: Request<Incoming>,
    tls: bool,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
    asker: &mut Asker,
) -> Response<Body> {
    let (req, peer) = match client(req, asker.peer, tls, state, &slot) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    asker.peer = peer;
    let path = match mounted(&req, state) {
        Ok(path) => path,
        Err(answer) => return *answer,
    };
    asker.path.clone_from(&path);
    debug!(%peer, method = %req.method(), %path, "request");
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let found = routes::lookup(req.method(), &segments);
    match guard(found, req, peer, &path, state, slot) {
        Ok(admitted) => {
            if let Admitted::Caller(_, call) = &admitted {
                asker.access = Some(call.access.clone());
            }
            handle(admitted, &path, state).await
        }
        Err(refused) => held_back(*refused, state).await,
    }
}

/// `refused`, once the hold the guard put on it (a wrong token's, [`guard::FailureDelay`]) is
/// over: the wait is this request's own, so no other request or connection waits with it.
/// Shutdown cuts it short.
async fn held_back(refused: Response<Body>, state: &AppState) -> Response<Body> {
    let wait = refused
        .extensions()
        .get::<guard::FailureDelay>()
        .map_or(std::time::Duration::ZERO, |d| d.0);
    if !wait.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = state.shutdown.cancelled() => {}
        }
    }
    refused
}

/// Who the client is (behind a trusted proxy, the forwarded one, kept in the request for the
/// handlers), if its address has a connection place left; else the 429 that refuses it.
fn client(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    tls: bool,
    state: &AppState,
    slot: &Slot,
) -> Result<(Request<Incoming>, SocketAddr), Box<Response<Body>>> {
    let mut client = proxy::client(req.headers(), peer, tls, &state.cfg.proxy);
    client.base = state.cfg.server.base_path.clone();
    let peer = client.addr;
    if !slot.from_client(peer.ip()) {
        info!(%peer, "refused request: too many connections from this address");
        state.metrics.refused(429);
        return Err(Box::new(error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many connections from this address",
        )));
    }
    req.extensions_mut().insert(client);
    Ok((req, peer))
}

/// The path under the base path; else the answer for a path outside it (the redirect from the
/// bare base to its root, or 404).
fn mounted(req: &Request<Incoming>, state: &AppState) -> Result<String, Box<Response<Body>>> {
    let base = &state.cfg.server.base_path;
    match proxy::mount(base, req.uri().path()) {
        proxy::Mount::Inside(p) => Ok(p.to_owned()),
        proxy::Mount::Bare => Err(Box::new(proxy::to_base(req, base))),
        // A load balancer's health check may not know the base.
        proxy::Mount::Outside if req.uri().path() == "/healthz" => Ok("/healthz".to_owned()),
        proxy::Mount::Outside => Err(Box::new(error(StatusCode::NOT_FOUND, "not found"))),
    }
}

/// A request the guard let through.
enum Admitted<'a> {
    /// For a public route: anyone may have it.
    Public(PublicAnswer, Request<Incoming>),
    /// For the browser UI's files: the same for everyone, no secret in them.
    Asset(Request<Incoming>),
    /// For a caller the route admits.
    Caller(Bound, Call<'a>),
}

/// A public route's handler.
type PublicAnswer = fn(&Request<Incoming>, &Arc<AppState>) -> Response<Body>;

/// A guarded route's handler, with the session its path names if it names one.
enum Bound {
    Now(fn(Call<'_>) -> Response<Body>),
    Later(for<'a> fn(Call<'a>) -> Pending<'a>),
    NowOn(fn(Call<'_>, Uuid) -> Response<Body>, Uuid),
    LaterOn(for<'a> fn(Call<'a>, Uuid) -> Pending<'a>, Uuid),
}

impl Bound {
    /// The session the path names.
    fn session(&self) -> Option<Uuid> {
        match self {
            Bound::Now(_) | Bound::Later(_) => None,
            Bound::NowOn(_, id) | Bound::LaterOn(_, id) => Some(*id),
        }
    }
}

/// Whether the caller may have what it asks: public routes and assets go through; anything
/// else passes the guard (host, origin, token: [`guard::check`]), then its route's rules
/// ([`Callers`]) about the session its path names.
fn guard<'a>(
    found: Lookup<'a>,
    req: Request<Incoming>,
    peer: SocketAddr,
    path: &str,
    state: &'a Arc<AppState>,
    slot: Arc<Slot>,
) -> Result<Admitted<'a>, Box<Response<Body>>> {
    // What the path and method come to once the caller has shown a token.
    let (audience, found) = match found {
        Lookup::Asset => return Ok(Admitted::Asset(req)),
        Lookup::Route(route, params) => match route.handler {
            Handler::Public(answer) => return Ok(Admitted::Public(answer, req)),
            _ => (route.audience, Ok((route, params))),
        },
        Lookup::WrongMethod { allow, public, .. } if public => {
            return Err(Box::new(method_not_allowed(&allow)))
        }
        Lookup::WrongMethod {
            allow, audience, ..
        } => (audience, Err(method_not_allowed(&allow))),
        Lookup::NoEndpoint => (
            Audience::Program,
            Err(error(StatusCode::NOT_FOUND, "no such endpoint")),
        ),
    };
    let access = guard::check(&req, peer, state, audience, path)?;
    let (route, params) = found.map_err(Box::new)?;
    let forbidden = || {
        let reason = "this link does not reach that";
        let (metrics, status) = (&state.metrics, StatusCode::FORBIDDEN);
        let mut resp = refuse(metrics, status, reason, audience, peer, path);
        // Who was refused, for the audit trail.
        resp.extensions_mut().insert(access.clone());
        Box::new(resp)
    };
    let session = |kind| {
        // A route about a session has an `{id}` (the table's test says so); none is no id.
        let raw = params.id.unwrap_or_default();
        match path_id(kind, raw, &req, &access, state) {
            Ok(id) => Ok(id),
            Err(PathIdError::Forbidden) => Err(forbidden()),
            Err(PathIdError::Answer(answer)) => Err(answer),
        }
    };
    let bound = match route.handler {
        Handler::Now(answer) => Bound::Now(answer),
        Handler::Later(answer) => Bound::Later(answer),
        Handler::NowOn(kind, answer) => Bound::NowOn(answer, session(kind)?),
        Handler::LaterOn(kind, answer) => Bound::LaterOn(answer, session(kind)?),
        // Answered before the guard, above.
        Handler::Public(answer) => return Ok(Admitted::Public(answer, req)),
    };
    if !route.callers.admit(&access, bound.session()) {
        return Err(forbidden());
    }
    let call = Call {
        req,
        access,
        peer,
        share: params.share,
        lang: params.lang,
        token: params.token,
        state,
        slot,
    };
    Ok(Admitted::Caller(bound, call))
}

/// Why a path's `{id}` names no session for this caller.
enum PathIdError {
    /// Refused as if it named another session (a share link's, see [`Callers::told_missing`]).
    Forbidden,
    /// Answered so: 400 for what is no id, 404 for a number no session has.
    Answer(Box<Response<Body>>),
}

/// The uuid a path's `{id}` names, read as `kind` says.
fn path_id(
    kind: PathId,
    raw: &str,
    req: &Request<Incoming>,
    access: &Access,
    state: &AppState,
) -> Result<Uuid, PathIdError> {
    let answer = |r: Response<Body>| PathIdError::Answer(Box::new(r));
    match kind {
        PathId::Session => resolve_id(&state.registry, raw).map_err(|e| {
            if e.0 == StatusCode::NOT_FOUND && !Callers::told_missing(access) {
                PathIdError::Forbidden
            } else {
                answer(e.response())
            }
        }),
        PathId::Uuid => parse_id(raw).map_err(|e| answer(e.response())),
        // Not a session address: a person gets the 404 page, not JSON.
        PathId::PageUuid => parse_id(raw).map_err(|e| answer(not_found(req, e.0, &e.1))),
    }
}

/// Runs the handler of what the guard let through.
async fn handle(admitted: Admitted<'_>, path: &str, state: &Arc<AppState>) -> Response<Body> {
    match admitted {
        Admitted::Public(answer, req) => answer(&req, state),
        Admitted::Asset(req) => asset(path, &req),
        Admitted::Caller(Bound::Now(answer), call) => answer(call),
        Admitted::Caller(Bound::Later(answer), call) => answer(call).await,
        Admitted::Caller(Bound::NowOn(answer, id), call) => answer(call, id),
        Admitted::Caller(Bound::LaterOn(answer, id), call) => answer(call, id).await,
    }
}

/// The browser UI's file at `path`; 405 for a method other than `GET` or `HEAD` on one that
/// exists (saying so is no secret either).
fn asset(path: &str, req: &Request<Incoming>) -> Response<Body> {
    let file = path.trim_start_matches('/');
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        static_file(file, req)
    } else if crate::assets::exists(file) {
        method_not_allowed(PAGE_METHODS)
    } else {
        error(StatusCode::NOT_FOUND, "not found")
    }
}
