//! The HTTP side: the accept loop and connection places, the route table and the routing
//! (lookup, the guard: host, origin, token, rate limit, then the route's callers; handler), the
//! REST API (a session's state reports in `state`, the audit trail in `audit`), the WebSocket
//! upgrade to a dialect, exec, and replies.

mod accept;
mod audit;
mod cluster;
pub mod connections;
mod dead_peer;
mod exec;
mod guard;
mod lsp;
mod me;
mod openapi;
mod openapi_exact;
pub mod proxy;
mod recordings;
mod reply;
mod rest;
mod router;
pub mod routes;
mod send_queue;
mod sse;
mod state;
pub mod tls;
mod tokens;
mod upgrade;
mod version;

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::Request;
use tokio_util::task::TaskTracker;

use crate::auth::Auth;
use crate::config::Config;
use crate::registry::Registry;
use crate::shutdown::Shutdown;
use connections::Connections;

pub use accept::run;
use reply::*;
use rest::*;
use router::route;
pub use sse::encode as sse_encode;
use upgrade::*;

/// Largest REST request body, bytes.
const MAX_BODY: usize = 64 * 1024;

/// Every response's body: whole (REST, pages) or streamed (SSE), boxed to one type.
type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// A whole body.
fn full(bytes: impl Into<Bytes>) -> Body {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes.into()).boxed_unsync()
}

/// The request's query, decoded.
fn query_pairs(req: &Request<Incoming>) -> Vec<(String, String)> {
    let raw = req.uri().query().unwrap_or("");
    form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect()
}

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
    /// Running execs: their limit, and their tasks for shutdown to wait for.
    pub execs: Arc<crate::exec::Execs>,
    /// This image's live upgrades, for `/api/version`.
    pub upgrades: crate::upgrade::Upgrades,
    /// This daemon's counters, for `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Tells webhooks and the command of sessions' changes of state.
    pub notifier: crate::notify::Notifier,
    /// The audit trail: who did what.
    pub audit: Arc<crate::audit::Audit>,
}
