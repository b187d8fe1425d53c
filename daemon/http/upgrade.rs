//! The WebSocket upgrade: which session (created if asked), which dialect, which options.
//! The one place that decides which dialect a path speaks is [`WsDialect`].

use std::path::PathBuf;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tracing::{debug, info};
use uuid::Uuid;

use super::connections::Slot;
use crate::auth::Access;
use crate::metrics::Metrics;
use crate::protocol::raw::Raw;
use crate::protocol::swe::Swe;
use crate::protocol::{Closing, Dialect};
use crate::registry::Found;
use crate::session::{CreateSpec, Role};
use crate::viewer::mux::MuxOptions;
use crate::viewer::{self, ViewerOptions};

use super::*;

/// Which dialect a WebSocket path speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WsDialect {
    /// `/ws/{id}`: the browser dialect (sections 1-8).
    Browser,
    /// `/ws/{id}/raw`: the raw terminal dialect (section 10).
    Raw,
}

/// The query parameters of a WebSocket connection.
#[derive(Debug, Default)]
pub(super) struct WsQuery {
    assistant: Option<String>,
    name: Option<String>,
    cwd: Option<String>,
    flow_ack: bool,
    /// `create=0`: join only, never create.
    join_only: bool,
    /// `rows` and `cols`: the client's size, applied as its first resize.
    size: Option<(u16, u16)>,
    /// `role=viewer`: join read-only whatever the token allows (`ptyhub attach --read-only`);
    /// `role=writer`: what the token allows.
    role: Option<Role>,
}

/// Parses the query; `Err` says what is wrong with it (answered 400 before the upgrade).
pub(super) fn ws_query(req: &Request<Incoming>) -> Result<WsQuery, String> {
    let mut q = WsQuery::default();
    let (mut rows, mut cols) = (None, None);
    let raw = req.uri().query().unwrap_or("");
    let positive = |k: &str, v: &str| match v.parse::<u32>() {
        Ok(n) if n > 0 => Ok(u16::try_from(n).unwrap_or(u16::MAX)),
        _ => Err(format!("{k} must be a positive integer, not {v:?}")),
    };
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        match &*k {
            "assistant" => q.assistant = Some(v.into_owned()),
            "name" => q.name = Some(v.into_owned()),
            "cwd" => q.cwd = Some(v.into_owned()),
            "flow" => q.flow_ack = v == "ack",
            "create" => q.join_only = matches!(&*v, "0" | "false" | "no"),
            "role" => match &*v {
                "viewer" => q.role = Some(Role::Viewer),
                "writer" => q.role = Some(Role::Writer),
                _ => return Err(format!("role is viewer or writer, not {v:?}")),
            },
            "rows" => rows = Some(positive("rows", &v)?),
            "cols" => cols = Some(positive("cols", &v)?),
            _ => {}
        }
    }
    q.size = match (rows, cols) {
        (Some(rows), Some(cols)) => Some((rows, cols)),
        (None, None) => None,
        _ => return Err("cols and rows are given together".to_owned()),
    };
    Ok(q)
}

/// 400 unless the request asks for a WebSocket upgrade.
pub(super) fn expect_upgrade(req: &Request<Incoming>) -> Result<(), ApiError> {
    if fastwebsockets::upgrade::is_upgrade_request(req) {
        Ok(())
    } else {
        Err(ApiError(
            StatusCode::BAD_REQUEST,
            "expected a WebSocket upgrade".to_owned(),
        ))
    }
}

/// The connection is about to become long-lived (a WebSocket or a stream): it leaves the
/// pool strangers compete for, or gets 429 (counted in `metrics`) when its address has no
/// place left.
pub(super) fn long_lived(slot: &Slot, metrics: &Metrics) -> Result<(), ApiError> {
    if slot.authenticate() {
        return Ok(());
    }
    metrics.refused(429);
    Err(ApiError(
        StatusCode::TOO_MANY_REQUESTS,
        "too many long-lived connections (WebSockets and streams) from this address".to_owned(),
    ))
}

/// Completes the handshake: the response to send, and the socket once the client has it;
/// 400 for a handshake that is not right.
pub(super) fn accept_upgrade(
    req: &mut Request<Incoming>,
) -> Result<(Response<Body>, fastwebsockets::upgrade::UpgradeFut), ApiError> {
    match fastwebsockets::upgrade::upgrade(req) {
        Ok((response, upgrade)) => Ok((response.map(|_| Body::default()), upgrade)),
        Err(e) => Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("bad WebSocket upgrade: {e}"),
        )),
    }
}

/// What a task for an upgraded connection runs: `serve` on the WebSocket once the client has the
/// `101`, holding the connection's place (`slot`) until it ends. `serve`'s future is boxed: a
/// dialect's state is kilobytes (a viewer's 5.3 KB), allocated once the `101` is out rather than
/// moved into the task on its way. `what` names the connection in the log if the upgrade fails.
pub(super) async fn after_upgrade<F>(
    upgrade: fastwebsockets::upgrade::UpgradeFut,
    slot: Arc<Slot>,
    what: &'static str,
    serve: impl FnOnce(crate::ws::Accepted) -> F,
) where
    F: std::future::Future<Output = ()>,
{
    let _slot = slot;
    match upgrade.await {
        Ok(ws) => Box::pin(serve(ws)).await,
        Err(e) => debug!("{what} upgrade failed: {e}"),
    }
}

/// Why a connection was refused after the upgrade.
enum Refused {
    /// The session could not be created.
    CreateFailed(String),
    /// `create=0` and no such session.
    NotFound,
}

pub(super) fn websocket(
    mut req: Request<Incoming>,
    id: Uuid,
    dialect: WsDialect,
    access: Access,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    if let Err(e) = expect_upgrade(&req) {
        return e.response();
    }
    let q = match ws_query(&req) {
        Ok(q) => q,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    if let Err(e) = long_lived(&slot, &state.metrics) {
        return e.response();
    }
    // Creation happens before the upgrade so two racing joiners start one program, but its
    // failure is reported after it, as the protocol wants (an error message and close 4002).
    let session = match state.registry.get(&id) {
        Some(h) => Ok(h),
        None if q.join_only => Err(Refused::NotFound),
        None if access.is_guest() => Err(Refused::CreateFailed(
            "this link's session has ended".to_owned(),
        )),
        None if !access.is_admin() => Err(Refused::CreateFailed(
            "no such session, and creating one needs the admin scope".to_owned(),
        )),
        None => match q.assistant.clone() {
            None => Err(Refused::CreateFailed(
                "no session with this id, and no assistant given to create one".to_owned(),
            )),
            Some(assistant) => state
                .registry
                .get_or_create(CreateSpec {
                    id,
                    assistant,
                    name: q.name.clone(),
                    cwd: q.cwd.as_ref().map(PathBuf::from),
                    screen: true,
                    command: None,
                    size: q.size,
                    created_by: access.user_name().map(str::to_owned),
                })
                .map(|found| {
                    if let Found::Created(h) = &found {
                        state.audit.created(&caller(&req, &access), &h.info());
                    }
                    found.handle()
                })
                .map_err(|e| Refused::CreateFailed(e.to_string())),
        },
    };
    let (response, upgrade) = match accept_upgrade(&mut req) {
        Ok(pair) => pair,
        Err(e) => return e.response(),
    };
    let cfg = state.cfg.clone();
    let limits = access.limits();
    let opts = ViewerOptions {
        // Honoured if the dialect has acknowledgements (`Dialect::flow_ack`).
        flow_ack: q.flow_ack,
        // A client may ask for less than its token allows, never more.
        role: match q.role {
            Some(Role::Viewer) => Role::Viewer,
            _ => access.role(),
        },
        who: crate::session::Who::of(&access),
        limits,
        initial_size: q.size,
        metrics: state.metrics.clone(),
    };
    // The connection counts against its address for as long as the WebSocket lives.
    state.tasks.spawn(after_upgrade(
        upgrade,
        slot,
        "viewer",
        move |ws| async move {
            match dialect {
                WsDialect::Browser => serve(ws, id, session, cfg, opts, Swe).await,
                WsDialect::Raw => serve(ws, id, session, cfg, opts, Raw).await,
            }
        },
    ));
    response
}

/// Who sent `req` with `access`, for the audit trail (the client's address as the router
/// found it, behind a trusted proxy the forwarded one).
fn caller(req: &Request<Incoming>, access: &Access) -> crate::audit::Actor {
    let peer = super::proxy::of(req).map_or(([0, 0, 0, 0], 0).into(), |c| c.addr);
    crate::audit::Actor::of(access, peer)
}

/// Runs the viewer, or tells it why it was refused.
async fn serve<D: Dialect>(
    ws: crate::ws::Accepted,
    id: Uuid,
    session: Result<crate::session::SessionHandle, Refused>,
    cfg: Arc<crate::config::Config>,
    opts: ViewerOptions,
    dialect: D,
) {
    match session {
        Ok(handle) => viewer::run(ws, handle, cfg, opts, dialect).await,
        Err(Refused::CreateFailed(message)) => {
            info!(session = %id, "refused WebSocket: {message}");
            let why = Closing::CreateFailed(&message);
            viewer::refuse(ws, &dialect, why, &opts.metrics).await;
        }
        Err(Refused::NotFound) => {
            debug!(session = %id, "no such session to join (create=0)");
            viewer::refuse(ws, &dialect, Closing::NoSuchSession, &opts.metrics).await;
        }
    }
}

/// `GET /ws`: one connection for every session the token reaches (section 11).
pub(super) fn multiplexed(
    mut req: Request<Incoming>,
    access: Access,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    if let Err(e) = expect_upgrade(&req).and_then(|()| long_lived(&slot, &state.metrics)) {
        return e.response();
    }
    let (response, upgrade) = match accept_upgrade(&mut req) {
        Ok(pair) => pair,
        Err(e) => return e.response(),
    };
    let limits = access.limits();
    let only = access.only();
    let opts = MuxOptions {
        only,
        role: access.role(),
        may_end: access.is_admin(),
        who: crate::session::Who::of(&access),
        limits,
        metrics: state.metrics.clone(),
        actor: caller(&req, &access),
        shutdown: state.shutdown.clone(),
    };
    let (registry, cfg) = (state.registry.clone(), state.cfg.clone());
    state
        .tasks
        .spawn(after_upgrade(upgrade, slot, "multiplexed", move |ws| {
            crate::viewer::mux::run(ws, registry, cfg, opts)
        }));
    response
}

/// `GET /ws/board`: the board, a card per session the token reaches (section 11a).
pub(super) fn board(
    mut req: Request<Incoming>,
    access: Access,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    if let Err(e) = expect_upgrade(&req).and_then(|()| long_lived(&slot, &state.metrics)) {
        return e.response();
    }
    let (response, upgrade) = match accept_upgrade(&mut req) {
        Ok(pair) => pair,
        Err(e) => return e.response(),
    };
    let limits = access.limits();
    let opts = crate::board::BoardOptions {
        access,
        limits,
        shutdown: state.shutdown.clone(),
        metrics: state.metrics.clone(),
    };
    let (registry, cfg) = (state.registry.clone(), state.cfg.clone());
    state
        .tasks
        .spawn(after_upgrade(upgrade, slot, "board", move |ws| {
            crate::board::run(ws, registry, cfg, opts)
        }));
    response
}
