//! The guard: host, origin, token (or the user a trusted proxy signed in) and the failed-auth
//! rate limit (and its growing hold on each failure's answer), checked in one place before any
//! handler runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use tracing::warn;

use super::reply::{refuse, token_redirect};
use super::routes::Audience;
use super::{query_pairs, AppState, Body};
use crate::auth::{self, proxied, Access, Denied};

/// How long a refusal for a wrong token waits before it is sent ([`Auth::failure_delay`]),
/// carried in the response's extensions to the router, which waits in the request's own task.
///
/// [`Auth::failure_delay`]: crate::auth::Auth::failure_delay
#[derive(Debug, Clone, Copy)]
pub(super) struct FailureDelay(pub Duration);

/// Who the caller is, if the request may go on; else the reply that refuses it (or, for a page
/// opened with a token in its URL, the redirect that moves the token into a cookie).
pub(super) fn check(
    req: &Request<Incoming>,
    peer: SocketAddr,
    state: &Arc<AppState>,
    audience: Audience,
    path: &str,
) -> Result<Access, Box<Response<Body>>> {
    let method = req.method().clone();
    let query = query_pairs(req);
    if !state.auth.host_allowed(req.headers()) {
        return Err(Box::new(refuse(
            &state.metrics,
            StatusCode::FORBIDDEN,
            "without authentication only loopback host names are served (DNS rebinding)",
            audience,
            peer,
            path,
        )));
    }
    let changes_state = !matches!(method, Method::GET | Method::HEAD)
        || fastwebsockets::upgrade::is_upgrade_request(req);
    let host = super::proxy::of(req).and_then(|c| c.host.as_deref());
    let same_origin = match host {
        Some(host) => state.auth.origin_allowed_for(req.headers(), Some(host)),
        None => state.auth.origin_allowed(req.headers()),
    };
    if changes_state && !same_origin {
        return Err(Box::new(refuse(
            &state.metrics,
            StatusCode::FORBIDDEN,
            "cross-site request refused (Origin does not match)",
            audience,
            peer,
            path,
        )));
    }
    let presented = auth::presented_token(req.headers(), &query);
    let user = proxied_user(req, peer, state);
    let access = match state
        .auth
        .authenticate(presented.as_deref(), user.as_deref(), peer.ip())
    {
        Ok(access) => {
            state.audit.seen(&access, peer);
            access
        }
        Err(denied @ Denied::NoScopes(_)) => {
            return Err(Box::new(refuse(
                &state.metrics,
                StatusCode::FORBIDDEN,
                &denied.reason(),
                audience,
                peer,
                path,
            )));
        }
        Err(denied) => {
            state.metrics.auth_failures.inc();
            let mut resp = match denied {
                Denied::RateLimited(_) => refuse(
                    &state.metrics,
                    StatusCode::TOO_MANY_REQUESTS,
                    &denied.reason(),
                    audience,
                    peer,
                    path,
                ),
                _ => refuse(
                    &state.metrics,
                    StatusCode::UNAUTHORIZED,
                    &denied.reason(),
                    audience,
                    peer,
                    path,
                ),
            };
            if let Denied::RateLimited(secs) = denied {
                if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                    resp.headers_mut().insert(RETRY_AFTER, v);
                }
            }
            // A request without a credential guessed nothing: it is answered at once.
            if denied != Denied::Missing {
                let wait = state.auth.failure_delay(peer.ip());
                resp.extensions_mut().insert(FailureDelay(wait));
            }
            return Err(Box::new(resp));
        }
    };
    // A page opened with a token in its URL: keep the token in a cookie, drop it from the URL
    // (not a capability token's: it opens no page, and is refused by the route).
    if audience == Audience::Person
        && !matches!(access, Access::StateToken(_))
        && query
            .iter()
            .any(|(k, _)| auth::TOKEN_PARAMS.contains(&k.as_str()))
    {
        if let Some(token) = presented {
            return Err(Box::new(token_redirect(req, path, &query, &token)));
        }
    }
    Ok(access)
}

/// The user the trusted proxy signed in (`[auth] user_header`), if single sign-on is on and the
/// request came from a trusted proxy with a valid name. The header from any other peer, or a
/// value that is no name, is ignored: counted, and logged (an address at most once a minute)
/// with the address, the header's name and a short prefix of its value.
fn proxied_user(req: &Request<Incoming>, peer: SocketAddr, state: &AppState) -> Option<String> {
    let sign_in = state.auth.sign_in();
    let header = sign_in.header()?;
    let trusted = super::proxy::of(req).is_some_and(|c| c.trusted);
    let why = match proxied::user_in(req.headers(), header) {
        Ok(None) => return None,
        Ok(Some(name)) if trusted => return Some(name),
        Ok(Some(_)) => "the peer is not a trusted proxy ([proxy] trusted)",
        Err(bad) => bad.reason(),
    };
    state.metrics.user_header_ignored.inc();
    if sign_in.log_ignored(peer.ip()) {
        let value = proxied::logged_prefix(req.headers(), header);
        warn!(%peer, header = %header, value, "ignored the user header: {why}");
    }
    None
}
