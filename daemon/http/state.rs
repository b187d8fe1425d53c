//! `POST /api/sessions/{id}/state`: a session's program reports the session's state, with the
//! capability token in its environment (or anyone with the daemon token): a plain
//! `{"state","reason"}`, or an agent's own hook JSON with `?from=claude|codex|gemini`. Limited
//! per session before the body is read (429 with `Retry-After`); bodies as every REST body. A
//! report the session can no longer apply because the daemon is handing it to a new image (or
//! stopping) gets 503 with `Retry-After`: `ptyhub notify` sends it again.

use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use uuid::Uuid;

use crate::attention::report::{self, Agent};

use super::*;

/// `POST /api/sessions/{id}/state` body (without `?from=`): the state the program is in.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read by `report::plain`; this type describes it in the OpenAPI document
pub(super) struct StateReport {
    /// `working`, `waiting` or `idle` (`exited` is known from the program's exit).
    #[schema(value_type = String, pattern = "^(working|waiting|idle)$")]
    state: String,
    /// Why, for people: one line of at most 200 characters, no control characters.
    #[serde(default)]
    #[schema(max_length = 200)]
    reason: Option<String>,
}

pub(super) async fn report(
    req: Request<Incoming>,
    id: Uuid,
    state: &Arc<AppState>,
) -> Response<Body> {
    let Some(handle) = state.registry.get(&id) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    if let Err(wait) = handle.state_gate().admit(Instant::now()) {
        state.metrics.refused(429);
        let rate = state.cfg.attention.hook_rate;
        let mut resp = error(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "too many state reports for this session: at most {rate} a second \
                 (attention.hook_rate)"
            ),
        );
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
            resp.headers_mut().insert(RETRY_AFTER, v);
        }
        return resp;
    }
    let from = match query_pairs(&req).into_iter().find(|(k, _)| k == "from") {
        None => None,
        Some((_, name)) => match Agent::parse(&name) {
            Some(agent) => Some(agent),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "unknown from={:?}: the hook JSON of {} is read",
                        name.chars().take(40).collect::<String>(),
                        Agent::NAMES.join(", ")
                    ),
                )
            }
        },
    };
    let body = match read_body(req, state).await {
        Ok(body) => body,
        Err(e) => return e.response(),
    };
    let read = match from {
        None => report::plain(&body).map(Some),
        Some(agent) => report::from_agent(agent, &body),
    };
    match read {
        Err(refused) => error(StatusCode::BAD_REQUEST, &refused.to_string()),
        // An event that says nothing of the state.
        Ok(None) => no_content(),
        Ok(Some(found)) => match handle.report_state(found).await {
            Ok(()) => no_content(),
            // Frozen for a live upgrade (the new image has the session) or being ended by a
            // shutdown: not applied, and the client is told to send it again.
            Err(_) if state.registry.is_closing() => {
                let mut resp = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the daemon is restarting (a live upgrade) or stopping: report again in a moment",
                );
                resp.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            Err(_) => error(StatusCode::NOT_FOUND, "no such session"),
        },
    }
}
