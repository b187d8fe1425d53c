//! The command-line client's way to a daemon: which server and token, naming a session (uuid,
//! number, unique name or session URL), the REST calls, and errors as one line each.
//!
//! `ptyhub attach` ([`attach`]), `ptyhub exec` ([`exec`]) and `ptyhub wait` ([`wait`])
//! build on this; `ls`, `new`, `kill` and `share` are REST calls made here, `token` in
//! [`tokens`]. `ptyhub notify`
//! ([`notify`]) is a session's program talking to its own daemon, with its own token.

pub mod attach;
pub mod exec;
pub mod notify;
pub mod table;
pub mod tokens;
pub mod upgrade;
pub mod wait;

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Error as WsError;
use uuid::Uuid;

/// A client WebSocket, plain or TLS.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The server used when neither `--server` nor `PTYHUB_URL` names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:1977";

/// How long a REST call may take before the server counts as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// What went wrong, said in one line a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server address is not a URL the client can use.
    #[error("bad server URL {0:?}: {1}")]
    BadUrl(String, String),
    /// Nothing answered at the server's address.
    #[error("cannot reach ptyhub at {0}: {1}")]
    Unreachable(String, String),
    /// The token was refused.
    #[error("the server refused the token (HTTP {0}): set --token or PTYHUB_TOKEN")]
    Unauthorized(u16),
    /// No session matches.
    #[error("no session {0:?} (see `ptyhub ls`)")]
    NoSuchSession(String),
    /// Several sessions have that name.
    #[error("{0:?} names {1} sessions: use the number or the uuid")]
    Ambiguous(String, usize),
    /// The server answered with an error.
    #[error("{0}")]
    Server(String),
    /// The local terminal or a local stream failed.
    #[error("{0}")]
    Local(String),
}

/// A session as `GET /api/sessions` lists it (the fields the client uses).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The uuid.
    pub id: Uuid,
    /// The short number; none past 255 sessions.
    pub num: Option<u8>,
    /// The name, possibly empty.
    pub name: String,
    /// The assistant's key.
    pub assistant: String,
    /// Connected viewers.
    pub viewers: usize,
    /// Width.
    pub cols: u16,
    /// Height.
    pub rows: u16,
    /// Whether its program runs.
    pub alive: bool,
    /// Its exit code once it ended.
    pub exit_code: Option<i32>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// Its state: working, waiting, idle or exited (none from a daemon without them).
    #[serde(default)]
    pub state: Option<String>,
    /// When it entered that state, milliseconds since the Unix epoch.
    #[serde(default)]
    pub state_since_ms: Option<u64>,
    /// Why it is in that state.
    #[serde(default)]
    pub reason: String,
}

impl Session {
    /// How a person names it: its number, or its uuid when it has none.
    pub fn label(&self) -> String {
        self.num
            .map_or_else(|| self.id.to_string(), |n| n.to_string())
    }
}

/// A daemon to talk to: its address and the token to show it.
#[derive(Debug, Clone)]
pub struct Server {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl Server {
    /// The server at `url` (`http(s)://host:port[/base]`), with `token` if any.
    pub fn new(url: &str, token: Option<String>) -> Result<Self, ClientError> {
        let mut base =
            Url::parse(url).map_err(|e| ClientError::BadUrl(url.to_owned(), e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
            return Err(ClientError::BadUrl(
                url.to_owned(),
                "expected http://HOST:PORT or https://HOST".to_owned(),
            ));
        }
        // Paths are joined onto the base: it must end with a slash to keep a base path.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.set_query(None);
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Local(format!("cannot start an HTTP client: {e}")))?;
        Ok(Server { base, token, http })
    }

    /// The token, if one is set.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// `path` (relative, no leading slash) on this server.
    pub fn url(&self, path: &str) -> Result<Url, ClientError> {
        self.base
            .join(path)
            .map_err(|e| ClientError::BadUrl(path.to_owned(), e.to_string()))
    }

    /// `path` on this server as a WebSocket URL (`ws://` or `wss://`).
    pub fn ws_url(&self, path: &str) -> Result<Url, ClientError> {
        let mut url = self.url(path)?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        // Only http/https bases are accepted, and both have a ws counterpart.
        url.set_scheme(scheme)
            .map_err(|()| ClientError::BadUrl(url.to_string(), "no WebSocket scheme".into()))?;
        Ok(url)
    }

    /// The page a person opens for session `id`.
    pub fn page(&self, id: Uuid) -> String {
        self.url(&format!("session/{id}"))
            .map(|u| u.to_string())
            .unwrap_or_default()
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        let mut req = self.http.request(method, self.url(path)?);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        Ok(req)
    }

    /// Sends a request and reads a JSON answer, turning failures into one line each.
    async fn call(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        let body = resp.text().await.map_err(|e| self.unreachable(&e))?;
        let value: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&body).unwrap_or(Value::String(body))
        };
        if status.is_success() {
            return Ok(value);
        }
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return Err(ClientError::Unauthorized(status.as_u16()));
        }
        let message = value
            .get("error")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| status.to_string());
        Err(ClientError::Server(format!(
            "{message} (HTTP {})",
            status.as_u16()
        )))
    }

    /// Why a request could not be made: the error and its causes, the innermost last.
    pub fn unreachable(&self, e: &(dyn std::error::Error + 'static)) -> ClientError {
        let mut why = one_line(e);
        let mut cause = e.source();
        while let Some(c) = cause {
            let text = one_line(c);
            if !why.contains(&text) {
                why = format!("{why}: {text}");
            }
            cause = c.source();
        }
        self.lost(why)
    }

    /// The connection to the server went, for `why`.
    pub fn lost(&self, why: impl Into<String>) -> ClientError {
        ClientError::Unreachable(self.base.to_string(), why.into())
    }

    /// Opens a WebSocket to `url` with the token; `not_found` says what a 404 means.
    pub async fn websocket(
        &self,
        url: Url,
        not_found: impl FnOnce() -> ClientError,
    ) -> Result<Ws, ClientError> {
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| ClientError::BadUrl(url.to_string(), one_line(&e)))?;
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ClientError::Local("the token has characters a header cannot carry".into())
            })?;
            request.headers_mut().insert("authorization", value);
        }
        let resp = match tokio_tungstenite::connect_async(request).await {
            Ok((ws, _)) => return Ok(ws),
            Err(WsError::Http(resp)) => resp,
            Err(e) => return Err(self.unreachable(&e)),
        };
        let status = resp.status();
        Err(match status.as_u16() {
            401 | 403 => ClientError::Unauthorized(status.as_u16()),
            404 => not_found(),
            code => {
                let message = resp
                    .body()
                    .as_deref()
                    .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                    .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| status.to_string());
                ClientError::Server(format!("{message} (HTTP {code})"))
            }
        })
    }

    /// `GET path` for a stream that lasts (the server's event stream): no overall time limit,
    /// only one on connecting.
    pub fn streaming_request(&self, path: &str) -> Result<reqwest::RequestBuilder, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Local(format!("cannot start an HTTP client: {e}")))?;
        let mut req = http.get(self.url(path)?);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        Ok(req)
    }

    /// Session `id` as the server describes it now.
    pub async fn session(&self, id: Uuid) -> Result<Session, ClientError> {
        let req = self.request(reqwest::Method::GET, &format!("api/sessions/{id}"))?;
        let value = match self.call(req).await {
            Err(ClientError::Server(why)) if why.ends_with("(HTTP 404)") => {
                return Err(ClientError::NoSuchSession(id.to_string()))
            }
            other => other?,
        };
        serde_json::from_value(value)
            .map_err(|e| ClientError::Server(format!("unexpected session: {e}")))
    }

    /// Every session the token reaches.
    pub async fn list(&self) -> Result<Vec<Session>, ClientError> {
        let value = self
            .call(self.request(reqwest::Method::GET, "api/sessions")?)
            .await?;
        serde_json::from_value(value)
            .map_err(|e| ClientError::Server(format!("unexpected session list: {e}")))
    }

    /// The daemon's `/api/version` (version, pid, image start, upgrades).
    pub async fn version(&self) -> Result<Value, ClientError> {
        self.call(self.request(reqwest::Method::GET, "api/version")?)
            .await
    }

    /// Every session, as the server sent it (for `ls --json`).
    pub async fn list_json(&self) -> Result<Value, ClientError> {
        self.call(self.request(reqwest::Method::GET, "api/sessions")?)
            .await
    }

    /// Creates a session; returns it as the server described it.
    pub async fn create(&self, body: Value) -> Result<Value, ClientError> {
        let req = self
            .request(reqwest::Method::POST, "api/sessions")?
            .json(&body);
        self.call(req).await
    }

    /// Ends session `id`.
    pub async fn kill(&self, id: Uuid) -> Result<(), ClientError> {
        let req = self.request(reqwest::Method::DELETE, &format!("api/sessions/{id}"))?;
        self.call(req).await.map(|_| ())
    }

    /// A share link to session `id`; returns the URL to open.
    pub async fn share(
        &self,
        id: Uuid,
        writer: bool,
        ttl: Option<u64>,
    ) -> Result<String, ClientError> {
        let role = if writer { "writer" } else { "viewer" };
        let mut body = json!({ "role": role });
        if let Some(ttl) = ttl {
            body["ttl"] = json!(ttl);
        }
        let req = self
            .request(reqwest::Method::POST, &format!("api/sessions/{id}/share"))?
            .json(&body);
        let value = self.call(req).await?;
        let path = value.get("url").and_then(Value::as_str).unwrap_or_default();
        // The daemon's path carries its `[server] base_path`, which the server URL given to us
        // already ends with (a proxy that strips its prefix instead sends a path without it).
        let relative = path
            .strip_prefix(self.base.path())
            .unwrap_or_else(|| path.trim_start_matches('/'));
        self.url(relative).map(|u| u.to_string())
    }

    /// The session `target` names: a uuid, a number, a name that only one session has, or a
    /// session's URL (whose server and token, if it carries them, are this server's anyway).
    pub async fn resolve(&self, target: &str) -> Result<Session, ClientError> {
        let key = session_key(target);
        let sessions = self.list().await?;
        if let Ok(id) = Uuid::parse_str(&key) {
            return sessions
                .into_iter()
                .find(|s| s.id == id)
                .ok_or(ClientError::NoSuchSession(target.to_owned()));
        }
        if let Ok(num) = key.parse::<u8>() {
            if let Some(s) = sessions.iter().find(|s| s.num == Some(num)) {
                return Ok(s.clone());
            }
        }
        let named: Vec<&Session> = sessions.iter().filter(|s| s.name == key).collect();
        match named.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(ClientError::NoSuchSession(target.to_owned())),
            many => Err(ClientError::Ambiguous(key, many.len())),
        }
    }
}

/// What names the session in `target`: the uuid of a session URL (`…/session/UUID`,
/// `…/ws/UUID[/raw]`), else `target` itself.
pub fn session_key(target: &str) -> String {
    if let Ok(url) = Url::parse(target) {
        let segments: Vec<&str> = url
            .path_segments()
            .map(Iterator::collect)
            .unwrap_or_default();
        if let Some(pos) = segments.iter().position(|s| *s == "session" || *s == "ws") {
            if let Some(id) = segments.get(pos + 1) {
                return (*id).to_owned();
            }
        }
    }
    target.to_owned()
}

/// The server and token a session URL carries (`http://host:port/session/UUID?token=T`), when
/// `target` is one.
pub fn server_of(target: &str) -> Option<(String, Option<String>)> {
    let url = Url::parse(target).ok()?;
    if !matches!(url.scheme(), "http" | "https" | "ws" | "wss") {
        return None;
    }
    let token = url
        .query_pairs()
        .find(|(k, _)| k == "token" || k == "access_token")
        .map(|(_, v)| v.into_owned());
    let scheme = match url.scheme() {
        "ws" => "http",
        "wss" => "https",
        other => other,
    };
    let path = url.path();
    let base = path
        .find("/session/")
        .or_else(|| path.find("/ws/"))
        .map_or("", |i| &path[..i]);
    let host = url.host_str()?;
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    Some((format!("{scheme}://{host}{port}{base}/"), token))
}

/// An error's message and its causes on one line.
pub fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_urls_name_their_session_and_server() {
        let id = "4f7d2a8e-5a3c-4f27-9c1e-2b9b1c1d0e0f";
        assert_eq!(
            session_key(&format!("http://h:1977/session/{id}?token=t")),
            id
        );
        assert_eq!(session_key(&format!("ws://h/base/ws/{id}/raw")), id);
        assert_eq!(session_key("review"), "review");
        assert_eq!(session_key("3"), "3");
        assert_eq!(
            server_of(&format!("http://h:1977/session/{id}?token=secret")),
            Some(("http://h:1977/".to_owned(), Some("secret".to_owned())))
        );
        assert_eq!(
            server_of(&format!("wss://h/ptyhub/ws/{id}/raw")),
            Some(("https://h/ptyhub/".to_owned(), None))
        );
        assert_eq!(server_of("review"), None);
    }

    #[test]
    fn servers_keep_their_base_path() {
        let s = Server::new("https://dev.example/ptyhub", None).expect("valid");
        assert_eq!(
            s.ws_url("ws/1/raw").expect("joins").as_str(),
            "wss://dev.example/ptyhub/ws/1/raw"
        );
        assert!(Server::new("ftp://x", None).is_err());
        assert!(Server::new("not a url", None).is_err());
    }
}
