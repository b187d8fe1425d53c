//! `/api/tokens` (docs/protocol.md section 12b): an admin lists, makes and revokes API tokens.
//! The store itself is [`crate::auth::TokenStore`]; this is its REST face.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::audit::{Actor, Event};
use crate::auth::tokens::{CreateError, MAX_EXPIRES_IN_SECS};
use crate::auth::Scopes;

use super::*;

/// The scope names a request may give, exactly (the CLI is more lenient: it trims and takes
/// any case before it sends them).
pub(super) const SCOPE_NAMES: [&str; 7] = [
    "view",
    "write",
    "exec",
    "admin",
    "sandbox:connect",
    "sandbox:exec",
    "sandbox:admin",
];

/// `POST /api/tokens` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct TokenRequest {
    /// Its name: 1 to 64 characters after trimming, no control character; unique among live
    /// tokens.
    name: String,
    /// What it may do: `view`, `write`, `exec`, `admin` (or the `sandbox:` names).
    scopes: Vec<String>,
    /// Seconds until it stops working; none: until revoked.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    expires_in: Option<Value>,
}

/// `GET /api/tokens`.
pub(super) fn list(state: &AppState) -> Response<Body> {
    json(StatusCode::OK, &state.auth.tokens().list())
}

/// `POST /api/tokens`: 201 with the token (shown this once).
pub(super) async fn create(
    req: Request<Incoming>,
    actor: Actor,
    state: &Arc<AppState>,
) -> Response<Body> {
    let created_by = actor.user.clone();
    let request: TokenRequest = match read_json(req, state).await {
        Ok(r) => r,
        Err(e) => return e.response(),
    };
    let scopes = match scopes(&request.scopes) {
        Ok(s) => s,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let expires_in = match request.expires_in.as_ref().map(seconds).transpose() {
        Ok(e) => e.flatten(),
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let store = state.auth.tokens();
    match store.create(&request.name, scopes, expires_in, &created_by) {
        Ok(made) => {
            info!(token = %made.info.id, name = %made.info.name, scopes = %scopes, by = %created_by, "API token created");
            let detail = serde_json::json!({
                "token": made.info.id, "name": made.info.name, "scopes": scopes,
                "expiresIn": expires_in.map(|d| d.as_secs()),
            });
            state
                .audit
                .record(Event::new("token.create", &actor).with(detail));
            json(StatusCode::CREATED, &made)
        }
        Err(CreateError::Bad(why)) => error(StatusCode::BAD_REQUEST, &why),
        Err(e @ (CreateError::Duplicate(_) | CreateError::TooMany(_))) => {
            error(StatusCode::CONFLICT, &e.to_string())
        }
        Err(e @ CreateError::Io(_)) => {
            warn!("{e}");
            error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
        }
    }
}

/// `DELETE /api/tokens/{token}`: revokes it by id; its open connections close.
pub(super) fn revoke(id: Option<&str>, actor: &Actor, state: &AppState) -> Response<Body> {
    let id = id.unwrap_or_default();
    match state.auth.tokens().revoke(id) {
        Ok(Some(token)) => {
            info!(token = %token.id, name = %token.name, by = %actor.user, "API token revoked");
            let detail = serde_json::json!({"token": token.id, "name": token.name});
            state
                .audit
                .record(Event::new("token.revoke", actor).with(detail));
            no_content()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "no such token"),
        // Revoked in memory all the same: it no longer works, only the file lags.
        Err(e) => {
            warn!(token = %id, "API token revoked, but the tokens file could not be written: {e}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("revoked, but the tokens file could not be written: {e}"),
            )
        }
    }
}

/// The scopes of a request: each name exactly one of [`SCOPE_NAMES`], at least one.
fn scopes(names: &[String]) -> Result<Scopes, String> {
    if names.is_empty() {
        return Err("scopes is empty: give at least one of view, write, exec, admin".to_owned());
    }
    names.iter().try_fold(Scopes::NONE, |all, name| {
        if !SCOPE_NAMES.contains(&name.as_str()) {
            return Err(format!(
                "unknown scope {name:?}: the scopes are view, write, exec and admin"
            ));
        }
        Ok(all.with(Scopes::named(name)?))
    })
}

/// `expiresIn`: a whole number of seconds, 1 to ten years (`null`: never).
fn seconds(v: &Value) -> Result<Option<Duration>, String> {
    let whole = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        _ => None,
    };
    match whole {
        Some(s) if (1..=MAX_EXPIRES_IN_SECS).contains(&s) => Ok(Some(Duration::from_secs(s))),
        _ => Err(format!(
            "expiresIn is a whole number of seconds, 1 to {MAX_EXPIRES_IN_SECS}, not {v}"
        )),
    }
}
