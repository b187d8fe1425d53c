//! Language servers (docs/protocol.md section 13a): `GET /ws/{id}/lsp/{lang}` runs `{lang}`'s
//! server in the session's working directory, `GET /ws/lsp/{lang}?cwd=DIR` in a directory;
//! both upgrade to the bridge ([`crate::lsp::bridge`]). `GET /api/lsp` says which are
//! configured and installed.
//!
//! The same right as exec (a language server runs code on the host: build scripts, linters),
//! so only the daemon token's holder (share links get 403 from the routes), and the same checks
//! before anything runs: a place in the address's long-lived pool and under `limits.max_lsp`
//! (429). An unknown language is 404; a server that cannot start is told on the socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

use super::connections::Slot;
use super::routes::Call;
use crate::config::{Config, LanguageServer};
use crate::exec::child::{self, ExecSpec};
use crate::exec::Kind;
use crate::lsp::bridge::{self, Bounds};
use crate::lsp::Served;

use super::*;

/// One entry of `GET /api/lsp`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct LspInfo {
    /// The language's key: the `{lang}` of the paths.
    lang: String,
    /// The server's command.
    command: Vec<String>,
    /// Whether its program is found.
    available: bool,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// `GET /api/lsp`: every configured language server and whether it is installed.
pub(super) fn list(cfg: &Config) -> Vec<LspInfo> {
    cfg.lsp
        .iter()
        .map(|(lang, server)| {
            let availability = server.availability();
            LspInfo {
                lang: lang.clone(),
                command: server.command.clone(),
                available: availability.is_ok(),
                reason: availability.err(),
            }
        })
        .collect()
}

/// `GET /ws/{id}/lsp/{lang}`: the server in the session's working directory, ended with the
/// session.
pub(super) fn on_session(c: Call<'_>, id: Uuid) -> Response<Body> {
    let Some(handle) = c.state.registry.get(&id) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    let ended = handle.ended();
    if ended.is_cancelled() {
        return error(StatusCode::CONFLICT, "the session has ended");
    }
    let cwd = PathBuf::from(handle.info().work_dir.clone());
    let actor = c.actor();
    let ties = Ties {
        session: Some(id),
        session_ended: Some(ended),
        limits: c.access.limits(),
    };
    serve(c.req, actor, c.lang, c.state, c.slot, cwd, ties)
}

/// `GET /ws/lsp/{lang}?cwd=DIR`: the server in a directory (an absolute path).
pub(super) fn in_dir(c: Call<'_>) -> Response<Body> {
    let cwd = query_pairs(&c.req)
        .into_iter()
        .find_map(|(k, v)| (k == "cwd").then_some(v));
    let cwd = match cwd {
        Some(dir) if dir.starts_with('/') && !dir.contains('\0') => PathBuf::from(dir),
        Some(dir) => {
            let why = format!("cwd must be an absolute path, not {dir:?}");
            return error(StatusCode::BAD_REQUEST, &why);
        }
        None => {
            let why = "cwd is required: the directory the server works in (its workspace root)";
            return error(StatusCode::BAD_REQUEST, why);
        }
    };
    let actor = c.actor();
    let ties = Ties {
        session: None,
        session_ended: None,
        limits: c.access.limits(),
    };
    serve(c.req, actor, c.lang, c.state, c.slot, cwd, ties)
}

/// The checks, then the upgrade; the server starts once the upgrade is through, so a client
/// that never completes it runs nothing.
fn serve(
    mut req: Request<Incoming>,
    actor: crate::audit::Actor,
    lang: Option<&str>,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
    cwd: PathBuf,
    ties: Ties,
) -> Response<Body> {
    let Ties {
        session,
        session_ended,
        limits,
    } = ties;
    if let Err(e) = expect_upgrade(&req) {
        return e.response();
    }
    let lang = lang.unwrap_or_default().to_owned();
    let Some(server) = state.cfg.lsp.get(&lang).cloned() else {
        return unknown(&lang, &state.cfg);
    };
    if let Err(refused) = long_lived(&slot, &state.metrics) {
        return refused.response();
    }
    let shown = format!("lsp {lang}: {}", server.command.join(" "));
    let Some(permit) = state.execs.admit(Kind::Lsp, shown) else {
        state.metrics.refused(429);
        let max = state.execs.max(Kind::Lsp);
        let why = format!("too many language servers running (limits.max_lsp = {max})");
        return error(StatusCode::TOO_MANY_REQUESTS, &why);
    };
    let (response, upgrade) = match accept_upgrade(&mut req) {
        Ok(pair) => pair,
        Err(e) => return e.response(),
    };
    let bounds = Bounds {
        max_message: state.cfg.limits.lsp_message_bytes,
        stall: state.cfg.viewer.stall_deadline,
        session_ended,
        limits,
    };
    let (execs, audit) = (state.execs.clone(), state.audit.clone());
    state.execs.spawn(after_upgrade(upgrade, slot, "lsp", move |ws| async move {
        // The program's file name: the close reasons have 123 bytes, a path would fill them.
        let program = server.command.first().map(Path::new);
        let program = program.and_then(Path::file_name).map(|p| p.to_string_lossy());
        let served = Served {
            lang,
            program: program.unwrap_or_default().into_owned(),
        };
        match start(&server, &cwd, permit.id) {
            Ok(child) => {
                info!(lang = %served.lang, pid = child.pid(), cwd = %cwd.display(), "language server started");
                let detail = serde_json::json!({
                    "lang": served.lang, "command": server.command, "cwd": cwd,
                });
                let mut event = crate::audit::Event::new("lsp.start", &actor).with(detail);
                event.session = session;
                audit.record(event);
                bridge::run(ws, child, permit, served, bounds, execs).await;
            }
            Err(e) => {
                info!(lang = %served.lang, "language server could not start: {e}");
                permit.finish(None, false);
                bridge::refuse(ws, &e.to_string(), execs.metrics()).await;
            }
        }
    }));
    response
}

/// What a language server's connection is tied to: the session it serves (for the audit
/// trail), whose end ends it, and its credential's revocation and expiry.
struct Ties {
    session: Option<Uuid>,
    session_ended: Option<CancellationToken>,
    limits: crate::auth::Limits,
}

/// Starts the server in `cwd`, as exec `id`.
fn start(
    server: &LanguageServer,
    cwd: &Path,
    id: u64,
) -> Result<child::ExecChild, crate::session::process::SpawnError> {
    child::spawn(&ExecSpec {
        argv: &server.command,
        env: &BTreeMap::new(),
        cwd: Some(cwd),
        id,
    })
}

/// 404 for a language no server is configured for, naming those that are.
fn unknown(lang: &str, cfg: &Config) -> Response<Body> {
    let known: Vec<&str> = cfg.lsp.keys().map(String::as_str).collect();
    let why = format!(
        "no language server is configured for {lang:?} (configured: {})",
        known.join(", ")
    );
    error(StatusCode::NOT_FOUND, &why)
}
