//! Many hosts: the `X-Ptyhub-Host` header naming this host, and `GET /api/sessions?all=1`,
//! this host's sessions merged with its peers' (asked through their REST API, all at once,
//! time-bounded; a peer that does not answer is listed as unreachable).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use uuid::Uuid;

use crate::session::SessionInfo;

use super::*;

/// The response header naming the host that answered.
pub const HOST_HEADER: &str = "x-ptyhub-host";

/// How long the peers together may take to answer one merged list.
const PEER_DEADLINE: Duration = Duration::from_secs(2);

/// Largest session list read from a peer, bytes: 255 sessions of about a kilobyte each fit
/// many times over, and a peer gone wrong cannot fill this host's memory.
const MAX_PEER_LIST: usize = 4 * 1024 * 1024;

/// Names this host on a response.
pub(super) fn stamp(resp: &mut Response<Body>, state: &AppState) {
    // The name was checked to be header-safe when the config was read.
    if let Ok(v) = HeaderValue::from_str(&state.cfg.cluster.host) {
        resp.headers_mut().insert(HOST_HEADER, v);
    }
}

/// One session of a merged list: as `GET /api/sessions` lists it, and the host it runs on.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct HostedSession {
    #[serde(flatten)]
    info: SessionInfo,
    /// The host the session runs on (its `X-Ptyhub-Host`).
    host: String,
}

/// One host of a merged list and whether it answered.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct HostStatus {
    /// Its name: this host's, or the one a peer answered with; null for a peer that did not
    /// answer.
    host: Option<String>,
    /// The peer's base URL as configured; null for this host.
    url: Option<String>,
    /// Whether its list is included.
    reachable: bool,
    /// How many of the sessions are its: those of its list not already listed (none, for a
    /// peer that is this host).
    sessions: usize,
    /// Why it is unreachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `GET /api/sessions?all=1` reply.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct MergedList {
    /// The host that answered.
    host: String,
    /// Every session of every host that answered, this host's first.
    sessions: Vec<HostedSession>,
    /// This host first, then each configured peer in order.
    hosts: Vec<HostStatus>,
}

/// `GET /api/sessions`: this host's sessions, or with `all=1` every host's.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(super) enum SessionList {
    /// Without `all`: this host's sessions.
    Own(Vec<SessionInfo>),
    /// With `all=1`: this host's and its peers' (`[cluster] peers`).
    All(MergedList),
}

/// The client for peers: built once, never through a proxy from the environment (peers are
/// addresses on the cluster's own network).
fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .no_proxy()
                .connect_timeout(PEER_DEADLINE)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| format!("no HTTP client: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A peer's own list and name, or why there is none.
async fn ask_peer(url: &str, token: Option<&str>) -> Result<(String, Vec<SessionInfo>), String> {
    let mut request = client()?.get(format!("{url}/api/sessions"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let mut resp = request.send().await.map_err(|e| {
        // reqwest's Display is "error sending request for url (...)": the cause says more.
        let cause = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
        format!("{e}{cause}")
    })?;
    if resp.status() != StatusCode::OK {
        return Err(format!("answered {}", resp.status()));
    }
    let name = resp
        .headers()
        .get(HOST_HEADER)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| url.to_owned(), str::to_owned);
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_PEER_LIST {
            return Err(format!("its list is larger than {MAX_PEER_LIST} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let list = serde_json::from_slice(&body).map_err(|e| format!("unexpected list: {e}"))?;
    Ok((name, list))
}

/// `GET /api/sessions`: this host's sessions, or with `?all=1` the merged list.
pub(super) async fn list(req: &Request<Incoming>, state: &Arc<AppState>) -> Response<Body> {
    let list = if wants_all(&query_pairs(req)) {
        SessionList::All(merged(state).await)
    } else {
        SessionList::Own(state.registry.list())
    };
    json(StatusCode::OK, &list)
}

/// This host's sessions and every peer's, each peer given [`PEER_DEADLINE`] at most, all at
/// once.
async fn merged(state: &Arc<AppState>) -> MergedList {
    let here = state.cfg.cluster.host.clone();
    let own = state.registry.list();
    let mut hosts = vec![HostStatus {
        host: Some(here.clone()),
        url: None,
        reachable: true,
        sessions: own.len(),
        error: None,
    }];
    let mut sessions: Vec<HostedSession> = own
        .into_iter()
        .map(|info| HostedSession {
            info,
            host: here.clone(),
        })
        .collect();
    let token = state.auth.token();
    let asks = state.cfg.cluster.peers.iter().map(|url| async move {
        let answer = tokio::time::timeout(PEER_DEADLINE, ask_peer(url, token))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {PEER_DEADLINE:?}")));
        (url, answer)
    });
    // A session is listed once: a peer that is this host (listed among its own peers, or
    // reached under two URLs) adds none of the sessions already listed.
    let mut listed: HashSet<Uuid> = sessions.iter().map(|s| s.info.id).collect();
    for (url, answer) in futures_util::future::join_all(asks).await {
        match answer {
            Ok((name, list)) => {
                let before = sessions.len();
                sessions.extend(list.into_iter().filter(|info| listed.insert(info.id)).map(
                    |info| HostedSession {
                        info,
                        host: name.clone(),
                    },
                ));
                hosts.push(HostStatus {
                    host: Some(name),
                    url: Some(url.clone()),
                    reachable: true,
                    sessions: sessions.len() - before,
                    error: None,
                });
            }
            Err(error) => {
                tracing::info!(peer = %url, %error, "cluster peer unreachable");
                hosts.push(HostStatus {
                    host: None,
                    url: Some(url.clone()),
                    reachable: false,
                    sessions: 0,
                    error: Some(error),
                });
            }
        }
    }
    MergedList {
        host: here,
        sessions,
        hosts,
    }
}

/// Whether a list request asks for the merged list (`?all=1` or `?all=true`).
fn wants_all(query: &[(String, String)]) -> bool {
    query
        .iter()
        .any(|(k, v)| k == "all" && matches!(v.as_str(), "1" | "true"))
}
