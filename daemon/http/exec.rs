//! `/api/exec` (docs/protocol.md section 13): a process per request, bound to its client. `GET`
//! upgrades to a pipe-mode WebSocket ([`crate::exec::websocket`]); `POST` runs the body's
//! command and streams its output as server-sent events (here, next to the other streams).
//!
//! Both check the same things before anything runs: full access (a share link gets 403 from
//! the routes), a place in the client address's long-lived pool and under `limits.max_execs`
//! (429 otherwise), and a command that can start. A program that cannot start is answered on
//! the WebSocket (`error`, close 4002); on SSE before the stream begins: 400 JSON when the
//! request is at fault (no such program or directory, not executable), 500 otherwise.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tokio::io::AsyncWriteExt;
use tracing::{debug, info};

use super::connections::Slot;
use super::sse::{channel, encode, Sink, HEARTBEAT, HEARTBEAT_LINE};
use crate::auth::{Ended, Limits};
use crate::exec::child::{self, Event, ExecChild, ExecSpec};
use crate::exec::{websocket, Execs, Kind, Permit};
use crate::metrics::Metrics;
use crate::protocol::exec_sse::{self, TextCarry};
use crate::protocol::pipe::Stream;
use crate::session::process::SpawnError;
use crate::session::ExitInfo;

use super::*;

/// Pieces of output (each at most a pipe read, 256 KiB, as text) waiting for an SSE client:
/// about 1 MiB per exec at most.
const SSE_QUEUE: usize = 4;

/// How long the last events of a stream (what a killed group wrote, `done`, `access_ended`)
/// may wait for a client that does not take them.
const LAST_WORDS: std::time::Duration = std::time::Duration::from_secs(15);

/// What `GET /api/exec` asks for.
struct PipeQuery {
    argv: Vec<String>,
    cwd: Option<String>,
    /// `env=K=V`, repeatable (`ptyhub exec --env`).
    env: BTreeMap<String, String>,
    /// `timeout_sec=N`: the group is ended after this long, as with SSE.
    timeout: Option<std::time::Duration>,
}

fn pipe_query(req: &Request<Incoming>) -> Result<PipeQuery, String> {
    let (mut cmd, mut args, mut cwd) = (None, Vec::new(), None);
    let mut env = BTreeMap::new();
    let mut timeout = None;
    for (k, v) in query_pairs(req) {
        match k.as_str() {
            "timeout_sec" => {
                let t = v
                    .parse()
                    .map_err(|_| format!("timeout_sec must be a number, not {v:?}"))?;
                timeout = Some(exec_sse::timeout_sec(t)?);
            }
            "cmd" => cmd = Some(v),
            "arg" => args.push(v),
            "cwd" => cwd = Some(v).filter(|c| !c.is_empty()),
            "env" => {
                let Some((key, value)) = v.split_once('=') else {
                    return Err(format!("env is KEY=VALUE, not {v:?}"));
                };
                if key.is_empty() || key.contains('\0') || value.contains('\0') {
                    return Err(format!("env {key:?}: an empty name or a NUL byte"));
                }
                env.insert(key.to_owned(), value.to_owned());
            }
            _ => {}
        }
    }
    let cmd = match cmd {
        Some(c) if c.is_empty() => return Err("cmd is empty".to_owned()),
        Some(c) => c,
        None => crate::config::user_shell(),
    };
    let mut argv = vec![cmd];
    argv.extend(args);
    exec_sse::check_argv(&argv)?;
    if cwd.as_deref().is_some_and(|c| c.contains('\0')) {
        return Err("cwd contains a NUL byte".to_owned());
    }
    Ok(PipeQuery {
        argv,
        cwd,
        env,
        timeout,
    })
}

/// Why a program of the client's choosing is refused.
pub(super) const OWN_COMMANDS_OFF: &str =
    "this daemon runs only its configured assistants ([session] own_commands = false)";

/// A place for one more exec (none when `[session] own_commands` is off), or the 429 that refuses it.
fn admit(state: &AppState, slot: &Slot, shown: String) -> Result<Permit, ApiError> {
    if !state.cfg.session.own_commands {
        return Err(ApiError(StatusCode::FORBIDDEN, OWN_COMMANDS_OFF.to_owned()));
    }
    long_lived(slot, &state.metrics)?;
    state.execs.admit(Kind::Exec, shown).ok_or_else(|| {
        state.metrics.refused(429);
        let max = state.execs.max(Kind::Exec);
        let why = format!("too many execs running (limits.max_execs = {max})");
        ApiError(StatusCode::TOO_MANY_REQUESTS, why)
    })
}

/// Starts the process as this exec (its marker is the permit's id).
fn start(
    permit: &Permit,
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
) -> Result<ExecChild, SpawnError> {
    child::spawn(&ExecSpec {
        argv,
        env,
        cwd: cwd.map(Path::new),
        id: permit.id,
    })
}

/// `GET /api/exec?cmd=PROG&arg=A&cwd=DIR&timeout_sec=N`: pipe mode over a WebSocket.
pub(super) fn websocket(
    mut req: Request<Incoming>,
    actor: crate::audit::Actor,
    limits: Limits,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    if let Err(e) = expect_upgrade(&req) {
        return e.response();
    }
    let q = match pipe_query(&req) {
        Ok(q) => q,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let permit = match admit(state, &slot, q.argv.join(" ")) {
        Ok(p) => p.audited(&state.audit, actor, &q.argv, q.cwd.as_deref()),
        Err(refused) => return refused.response(),
    };
    let (response, upgrade) = match accept_upgrade(&mut req) {
        Ok(pair) => pair,
        Err(e) => return e.response(),
    };
    // Started once the upgrade is through, so a client that never completes it runs nothing.
    let (cfg, execs) = (state.cfg.clone(), state.execs.clone());
    state
        .execs
        .spawn(after_upgrade(upgrade, slot, "exec", move |ws| async move {
            match start(&permit, &q.argv, &q.env, q.cwd.as_deref()) {
                Ok(child) => {
                    let bounds = websocket::Bounds {
                        timeout: q.timeout,
                        limits,
                        heartbeat: HEARTBEAT,
                    };
                    websocket::run(ws, child, permit, cfg, execs, bounds).await
                }
                Err(e) => {
                    info!("exec could not start: {e}");
                    permit.finish(None, false);
                    websocket::refuse(ws, &e.to_string(), execs.metrics()).await;
                }
            }
        }));
    response
}

/// `POST /api/exec`: runs the body's command, its output as `stdout`/`stderr` events, then
/// `done`.
pub(super) async fn sse(
    req: Request<Incoming>,
    actor: crate::audit::Actor,
    limits: Limits,
    state: &Arc<AppState>,
    slot: Arc<Slot>,
) -> Response<Body> {
    let body = match read_body(req, state).await {
        Ok(b) => b,
        Err(e) => return e.response(),
    };
    let r = match exec_sse::parse_request(&body) {
        Ok(r) => r,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let permit = match admit(state, &slot, r.shown.clone()) {
        Ok(p) => p.audited(&state.audit, actor, &r.argv, r.cwd.as_deref()),
        Err(refused) => return refused.response(),
    };
    let mut child = match start(&permit, &r.argv, &r.env, r.cwd.as_deref()) {
        Ok(child) => child,
        Err(e) => {
            info!("exec could not start: {e}");
            permit.finish(None, false);
            state.metrics.error("exec_failed");
            let status = match &e {
                SpawnError::Spawn { source, .. }
                    if !matches!(
                        source.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    ) =>
                {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                _ => StatusCode::BAD_REQUEST,
            };
            return error(status, &e.to_string());
        }
    };
    let (sink, resp) = channel(SSE_QUEUE);
    let execs = state.execs.clone();
    if let Some(mut stdin) = child.take_stdin() {
        // Written beside the output, so a program that writes before it reads cannot
        // deadlock; closed once written.
        let text = r.stdin;
        execs.spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    state.execs.spawn(async move {
        let _slot = slot;
        run_sse(child, permit, sink, (r.timeout, limits), &execs).await;
    });
    resp
}

/// Why an SSE exec's stream of output stopped.
enum End {
    Exited(ExitInfo),
    TimedOut,
    ClientGone,
    Shutdown,
    /// The caller's API token (or share link) was revoked or expired.
    AccessEnded(Ended),
}

async fn run_sse(
    mut child: ExecChild,
    permit: Permit,
    sink: Sink,
    (timeout, limits): (Option<std::time::Duration>, Limits),
    execs: &Arc<Execs>,
) {
    let mut carry = [TextCarry::default(), TextCarry::default()];
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        end = pump(&mut child, &sink, &mut carry, execs.metrics()) => end,
        _ = deadline => End::TimedOut,
        _ = sink.closed() => End::ClientGone,
        _ = execs.shutdown.cancelled() => End::Shutdown,
        why = limits.wait() => End::AccessEnded(why),
    };
    let (exit, timed_out) = match end {
        End::AccessEnded(why) => {
            debug!(
                pid = child.pid(),
                "exec's {}: ending its process group",
                why.reason()
            );
            let exit = child.terminate(execs.kill_grace).await;
            permit.finish(Some(&exit), false);
            let said = sink.send(super::sse::access_ended(why));
            let _ = tokio::time::timeout(LAST_WORDS, said).await;
            child.end_leftovers(execs.kill_grace).await;
            return;
        }
        End::Exited(info) => (info, false),
        End::ClientGone => {
            debug!(
                pid = child.pid(),
                "exec client gone: ending its process group"
            );
            let exit = child.terminate(execs.kill_grace).await;
            permit.finish(Some(&exit), false);
            child.end_leftovers(execs.kill_grace).await;
            return;
        }
        End::TimedOut | End::Shutdown => {
            let exit = child.terminate(execs.kill_grace).await;
            // What the group wrote before it died is still in the pipes: pass it on.
            let drain = pump(&mut child, &sink, &mut carry, execs.metrics());
            let _ = tokio::time::timeout(LAST_WORDS, drain).await;
            (exit, matches!(end, End::TimedOut))
        }
    };
    let ms = permit.finish(Some(&exit), timed_out);
    let mut out = String::new();
    for (stream, carry) in [Stream::Stdout, Stream::Stderr].into_iter().zip(&mut carry) {
        let rest = carry.finish();
        if !rest.is_empty() {
            encode(&mut out, None, Some(stream.name()), &rest);
        }
    }
    let exit_code = Some(exit.code);
    let done = exec_sse::done_json(exit_code, exit.signal.as_deref(), timed_out, ms);
    encode(&mut out, None, Some("done"), &done);
    let _ = tokio::time::timeout(LAST_WORDS, sink.send(out)).await;
    child.end_leftovers(execs.kill_grace).await;
}

/// Sends the process's output as events until it has exited (a heartbeat comment every
/// [`HEARTBEAT`] while it is quiet, so a vanished client is noticed: `dead_peer.rs`);
/// `ClientGone` if the client went first. What it sends is counted in `metrics`.
async fn pump(
    child: &mut ExecChild,
    sink: &Sink,
    carry: &mut [TextCarry; 2],
    metrics: &Metrics,
) -> End {
    loop {
        let ev = tokio::select! {
            ev = child.next() => ev,
            _ = tokio::time::sleep(HEARTBEAT) => {
                if !sink.send(HEARTBEAT_LINE.to_owned()).await {
                    return End::ClientGone;
                }
                continue;
            }
        };
        match ev {
            Event::Output(stream, bytes) => {
                let carry = &mut carry[usize::from(stream == Stream::Stderr)];
                let text = carry.feed(&bytes[1..]);
                if text.is_empty() {
                    continue;
                }
                metrics.bytes_out.add(bytes.len() as u64 - 1);
                // Room for a `data: ` per line of 80 or so, without growing.
                let mut out = String::with_capacity(text.len() + text.len() / 10 + 64);
                encode(&mut out, None, Some(stream.name()), &text);
                if !sink.send(out).await {
                    return End::ClientGone;
                }
            }
            Event::Exited(info) => return End::Exited(info),
        }
    }
}
