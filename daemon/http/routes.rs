//! The route table: every method and path the daemon answers, who may call it, and its
//! handler, as data. The match ([`lookup`]), the 405s' `Allow` lists and the check of the
//! OpenAPI document (`openapi.rs`) all read [`ROUTES`]; [`Callers`] is the one place that says
//! what a share link, and a session's capability token, may do.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tracing::info;
use uuid::Uuid;

use super::connections::Slot;
use crate::audit::Actor;
use crate::auth::Access;

use super::*;

/// A route's methods: `*` stands for every method (a health check answers whatever asks).
pub const ANY_METHOD: &str = "*";

/// What a page or an embedded asset answers.
pub(super) const PAGE_METHODS: &[&str] = &["GET", "HEAD"];

/// One route: the methods and the path it answers, who may call it, and what answers.
pub struct Route {
    /// The methods, in the order a 405's `Allow` lists them ([`ANY_METHOD`]: all).
    pub methods: &'static [&'static str],
    /// The path under the base path, as OpenAPI writes it: `/api/sessions/{id}`. A `{...}`
    /// stands for one segment: `{id}` for a session (see [`PathId`]), `{share}` for a share
    /// link's id, `{lang}` for a language server's language, `{token}` for an API token's id.
    pub pattern: &'static str,
    /// Who may call it.
    pub callers: Callers,
    /// Who reads its answers, so how a refusal is answered.
    pub audience: Audience,
    pub(super) handler: Handler,
}

/// Who reads a route's answers: decides how a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// A person, in a browser, on an HTML page: a refusal is the login page.
    Person,
    /// A program (REST, metrics, a WebSocket, a page's scripts): a refusal is JSON.
    Program,
}

/// Who may call a route once the guard has checked the host, the origin and the token: the
/// one place that says what each scope, a share link and a session's capability token may do.
/// A user's scopes decide (`view`, `write`, `exec`, `admin`: [`crate::auth::Scopes`]); a share
/// link reaches its one session in its role; a capability token only [`Callers::SessionState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callers {
    /// Everyone, without a token: the answer is the same for every installation of this
    /// version, or says nothing secret. The guard does not look at these.
    Public,
    /// Any token but a capability token: the answer is about the caller (`/api/me`).
    AnyToken,
    /// A user with `view`, or a share link: the answer is the same for everyone
    /// (`/api/assistants`) or its handler scopes it to the link's session (`/ws`,
    /// `/api/events`).
    Watcher,
    /// A user with `view` (a share link gets 403): the session list, the recordings.
    Viewer,
    /// A user with `exec`: commands and language servers.
    Exec,
    /// A user with `admin`: creating and ending sessions, sharing, tokens, the audit trail.
    Admin,
    /// A user with `view`, or a share link of the session the path names.
    Session,
    /// A user with `write`, or a writer's share link of the session the path names.
    SessionWriter,
    /// A user with `view`, or a share link of the session the path names made with `record`.
    SessionRecording,
    /// The capability token of the session the path names (its program's: it reports the
    /// session's state), and an admin; no share link.
    SessionState,
}

impl Callers {
    /// Whether `access` may call a route of these callers about session `id` (the path's).
    pub fn admit(self, access: &Access, id: Option<Uuid>) -> bool {
        let on = |check: fn(&Access, Uuid) -> bool| id.is_some_and(|id| check(access, id));
        match self {
            Callers::Public => true,
            // A capability token reaches nothing but its session's state.
            Callers::AnyToken => !matches!(access, Access::StateToken(_)),
            Callers::Watcher => access.watches(),
            Callers::Viewer => access.has(crate::auth::Scopes::VIEW),
            Callers::Exec => access.may_exec(),
            Callers::Admin => access.is_admin(),
            Callers::Session => on(Access::reaches),
            Callers::SessionWriter => on(Access::may_write),
            Callers::SessionRecording => on(Access::may_record),
            Callers::SessionState => on(Access::may_report),
        }
    }

    /// Whether `access` is told that a session number names no session (404). A share link
    /// is refused it (403) as it is refused any session not its own, so it cannot probe
    /// which numbers exist.
    pub fn told_missing(access: &Access) -> bool {
        matches!(access, Access::User(_))
    }
}

/// What a path's `{id}` is, and how a bad one is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathId {
    /// A session: its uuid (it may not exist, or not yet), or its number on this host. 400 for
    /// anything else, 404 for a number no session has (see [`Callers::told_missing`]).
    Session,
    /// A uuid (a recording's session may have ended long ago): 400 for anything else.
    Uuid,
    /// A uuid in a page's address: anything else is no such page (the 404 page, status 400,
    /// for a browser; JSON otherwise).
    PageUuid,
}

/// A handler's answer still to come: it reads a body, or waits on a session.
pub(super) type Pending<'a> = Pin<Box<dyn Future<Output = Response<Body>> + Send + 'a>>;

/// What answers a route.
pub(super) enum Handler {
    /// A public route: there is no caller to speak of.
    Public(fn(&Request<Incoming>, &Arc<AppState>) -> Response<Body>),
    /// Answers at once.
    Now(fn(Call<'_>) -> Response<Body>),
    /// Answers once it has read a body or heard from a session.
    Later(for<'a> fn(Call<'a>) -> Pending<'a>),
    /// Answers at once, about the session the path's `{id}` names.
    NowOn(PathId, fn(Call<'_>, Uuid) -> Response<Body>),
    /// Answers later, about the session the path's `{id}` names.
    LaterOn(PathId, for<'a> fn(Call<'a>, Uuid) -> Pending<'a>),
}

/// A request the guard let in, with what its handler may use.
pub(super) struct Call<'a> {
    /// The request.
    pub req: Request<Incoming>,
    /// What the caller may reach.
    pub access: Access,
    /// The client (behind a trusted proxy, the forwarded one).
    pub peer: SocketAddr,
    /// The path's `{share}`, on the route that has one.
    pub share: Option<&'a str>,
    /// The path's `{lang}`, on the routes that have one.
    pub lang: Option<&'a str>,
    /// The path's `{token}`: an API token's id.
    pub token: Option<&'a str>,
    /// The daemon.
    pub state: &'a Arc<AppState>,
    /// The connection's place: a WebSocket or a stream keeps it as long as it lives.
    pub slot: Arc<Slot>,
}

impl Call<'_> {
    /// Who is calling, for the audit trail.
    pub fn actor(&self) -> Actor {
        Actor::of(&self.access, self.peer)
    }
}

/// The `{...}` segments of a path a route matched.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Params<'p> {
    /// `{id}`.
    pub id: Option<&'p str>,
    /// `{share}`.
    pub share: Option<&'p str>,
    /// `{lang}`.
    pub lang: Option<&'p str>,
    /// `{token}`.
    pub token: Option<&'p str>,
}

impl Route {
    /// Whether it answers `method`.
    pub fn answers(&self, method: &str) -> bool {
        self.methods
            .iter()
            .any(|m| *m == ANY_METHOD || *m == method)
    }

    /// How its `{id}` is read, if its path has one.
    pub fn path_id(&self) -> Option<PathId> {
        match self.handler {
            Handler::NowOn(id, _) | Handler::LaterOn(id, _) => Some(id),
            Handler::Public(_) | Handler::Now(_) | Handler::Later(_) => None,
        }
    }

    /// The `{...}` segments, if `segments` is this route's path. One pass that stops at the
    /// first literal segment that differs: every request is looked up against every route, and
    /// most differ in their first or second segment (counting the pattern's segments first cost
    /// an upgrade about 9 k instructions over the routes).
    fn matches<'p>(&self, segments: &[&'p str]) -> Option<Params<'p>> {
        let mut pattern = self.pattern.trim_matches('/').split('/');
        let mut segments = segments.iter();
        let mut params = Params::default();
        loop {
            let (want, got) = match (pattern.next(), segments.next()) {
                (None, None) => return Some(params),
                (Some(want), Some(got)) => (want, *got),
                // One path is longer than the other.
                _ => return None,
            };
            match want.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                Some("share") => params.share = Some(got),
                Some("lang") => params.lang = Some(got),
                Some("token") => params.token = Some(got),
                Some(_) => params.id = Some(got),
                None if want == got => {}
                None => return None,
            }
        }
    }
}

/// What a method on a path comes to.
pub(super) enum Lookup<'p> {
    /// A route answers it.
    Route(&'static Route, Params<'p>),
    /// Routes answer the path but not the method: 405 (once the guard let the caller in)
    /// with the methods they answer.
    WrongMethod {
        /// Their methods, for `Allow`.
        allow: Vec<&'static str>,
        /// Who reads their answers.
        audience: Audience,
        /// Whether they are public routes: the 405 is answered before the guard.
        public: bool,
    },
    /// A path under `/api/` or `/ws` that no route answers: 404, once the guard let the
    /// caller in (without a token, a caller learns nothing of which endpoints exist).
    NoEndpoint,
    /// Anything else: the browser UI's files.
    Asset,
}

/// The route for `method` on `segments` (the path under the base path, split at `/`).
pub(super) fn lookup<'p>(method: &Method, segments: &[&'p str]) -> Lookup<'p> {
    let method = method.as_str();
    let on_path = || {
        ROUTES
            .iter()
            .filter_map(|r| Some((r, r.matches(segments)?)))
    };
    if let Some((route, params)) = on_path().find(|(r, _)| r.answers(method)) {
        return Lookup::Route(route, params);
    }
    let mut known = on_path();
    if let Some((first, _)) = known.next() {
        // A public path's methods are no secret: its 405 needs no token.
        let public = first.callers == Callers::Public;
        let mut allow = first.methods.to_vec();
        allow.extend(known.flat_map(|(r, _)| r.methods.iter().copied()));
        // `/ws/board` is also a `/ws/{id}`: each method once.
        allow.dedup();
        let audience = first.audience;
        return Lookup::WrongMethod {
            allow,
            audience,
            public,
        };
    }
    match segments {
        ["api", ..] | ["ws", ..] => Lookup::NoEndpoint,
        _ => Lookup::Asset,
    }
}

/// Every route. Routes of one path are listed together, in the order `Allow` lists their
/// methods.
pub static ROUTES: &[Route] = &[
    // ---- public: answered before the guard, to anyone -------------------------------------
    Route {
        methods: &[ANY_METHOD],
        pattern: "/healthz",
        callers: Callers::Public,
        audience: Audience::Program,
        handler: Handler::Public(|_, _| with_type(StatusCode::OK, b"ok\n".to_vec(), "text/plain")),
    },
    // `ptyhub upgrade` and monitoring read it; no secret in it.
    Route {
        methods: &["GET"],
        pattern: "/api/version",
        callers: Callers::Public,
        audience: Audience::Program,
        handler: Handler::Public(|_, state| json(StatusCode::OK, &version::version(state))),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/openapi.json",
        callers: Callers::Public,
        audience: Audience::Program,
        handler: Handler::Public(|_, s| openapi::document(&s.cfg)),
    },
    // ---- pages --------------------------------------------------------------------------
    Route {
        methods: PAGE_METHODS,
        pattern: "/",
        callers: Callers::Viewer,
        audience: Audience::Person,
        handler: Handler::Now(|c| static_file("index.html", &c.req)),
    },
    Route {
        methods: PAGE_METHODS,
        pattern: "/session/{id}",
        callers: Callers::Session,
        audience: Audience::Person,
        handler: Handler::NowOn(PathId::PageUuid, |c, _| session_page(&c.req, &c.access)),
    },
    // Whoever may download a recording may watch it: the page fetches the same endpoint.
    Route {
        methods: PAGE_METHODS,
        pattern: "/replay/{id}",
        callers: Callers::SessionRecording,
        audience: Audience::Person,
        handler: Handler::NowOn(PathId::Uuid, |c, _| static_file("replay.html", &c.req)),
    },
    // ---- metrics and WebSockets ---------------------------------------------------------
    Route {
        methods: &["GET"],
        pattern: "/metrics",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::Now(|c| metrics(c.state)),
    },
    // A share link's connection carries only its own session.
    Route {
        methods: &["GET"],
        pattern: "/ws",
        callers: Callers::Watcher,
        audience: Audience::Program,
        handler: Handler::Now(|c| multiplexed(c.req, c.access, c.state, c.slot)),
    },
    // Before `/ws/{id}`, which its path would match too (`board` is no session id). A share
    // link's board shows only its own session, and types into it only if it may write.
    Route {
        methods: &["GET"],
        pattern: "/ws/board",
        callers: Callers::Watcher,
        audience: Audience::Program,
        handler: Handler::Now(|c| board(c.req, c.access, c.state, c.slot)),
    },
    // Before `/ws/{id}/raw`, which its path would match too (`lsp` is no session id). Runs
    // code on the host as exec does: never for a share link (docs/protocol.md section 13a).
    Route {
        methods: &["GET"],
        pattern: "/ws/lsp/{lang}",
        callers: Callers::Exec,
        audience: Audience::Program,
        handler: Handler::Now(lsp::in_dir),
    },
    Route {
        methods: &["GET"],
        pattern: "/ws/{id}",
        callers: Callers::Session,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, |c, id| {
            websocket(c.req, id, WsDialect::Browser, c.access, c.state, c.slot)
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/ws/{id}/raw",
        callers: Callers::Session,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, |c, id| {
            websocket(c.req, id, WsDialect::Raw, c.access, c.state, c.slot)
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/ws/{id}/lsp/{lang}",
        callers: Callers::Exec,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, lsp::on_session),
    },
    // ---- REST ---------------------------------------------------------------------------
    Route {
        methods: &["GET"],
        pattern: "/api/assistants",
        callers: Callers::Watcher,
        audience: Audience::Program,
        handler: Handler::Now(|c| json(StatusCode::OK, &assistants(&c.state.cfg))),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/lsp",
        callers: Callers::Exec,
        audience: Audience::Program,
        handler: Handler::Now(|c| json(StatusCode::OK, &lsp::list(&c.state.cfg))),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/sessions",
        callers: Callers::Viewer,
        audience: Audience::Program,
        handler: Handler::Later(|c| Box::pin(async move { cluster::list(&c.req, c.state).await })),
    },
    Route {
        methods: &["POST"],
        pattern: "/api/sessions",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::Later(|c| {
            let by = c.access.user_name().map(str::to_owned);
            Box::pin(create(c.req, Actor::of(&c.access, c.peer), by, c.state))
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/sessions/{id}",
        callers: Callers::Session,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, |c, id| match c.state.registry.get(&id) {
            Some(h) => json(StatusCode::OK, &*h.info()),
            None => error(StatusCode::NOT_FOUND, "no such session"),
        }),
    },
    Route {
        methods: &["PATCH"],
        pattern: "/api/sessions/{id}",
        callers: Callers::SessionWriter,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Session, |c, id| {
            Box::pin(patch(c.req, id, Actor::of(&c.access, c.peer), c.state))
        }),
    },
    Route {
        methods: &["DELETE"],
        pattern: "/api/sessions/{id}",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Session, |c, id| {
            Box::pin(delete(id, c.actor(), c.state))
        }),
    },
    // A share link sees its session's screen anyway: its recent output too.
    Route {
        methods: &["GET"],
        pattern: "/api/sessions/{id}/scrollback",
        callers: Callers::Session,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, |c, id| scrollback(id, c.state)),
    },
    // The session's program reports its state with the token in its environment.
    Route {
        methods: &["POST"],
        pattern: "/api/sessions/{id}/state",
        callers: Callers::SessionState,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Session, |c, id| {
            Box::pin(state::report(c.req, id, c.state))
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/sessions/{id}/log",
        callers: Callers::Session,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, |c, id| {
            sse::log(c.req, id, &c.access, c.state, &c.slot)
        }),
    },
    // A share link's stream carries only its own session's events.
    Route {
        methods: &["GET"],
        pattern: "/api/events",
        callers: Callers::Watcher,
        audience: Audience::Program,
        handler: Handler::Now(|c| sse::events(c.req, &c.access, c.state, &c.slot)),
    },
    // Never for a share link (docs/protocol.md section 9).
    Route {
        methods: &["GET"],
        pattern: "/api/exec",
        callers: Callers::Exec,
        audience: Audience::Program,
        handler: Handler::Now(|c| {
            let actor = c.actor();
            exec::websocket(c.req, actor, c.access.limits(), c.state, c.slot)
        }),
    },
    Route {
        methods: &["POST"],
        pattern: "/api/exec",
        callers: Callers::Exec,
        audience: Audience::Program,
        handler: Handler::Later(|c| {
            let actor = c.actor();
            Box::pin(exec::sse(c.req, actor, c.access.limits(), c.state, c.slot))
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/sessions/{id}/share",
        callers: Callers::Admin,
        audience: Audience::Program,
        // An ended session's links are gone with it: no empty list for a session that is not.
        handler: Handler::NowOn(PathId::Session, |c, id| match c.state.registry.get(&id) {
            Some(_) => json(StatusCode::OK, &c.state.auth.shares_of(id)),
            None => error(StatusCode::NOT_FOUND, "no such session"),
        }),
    },
    Route {
        methods: &["POST"],
        pattern: "/api/sessions/{id}/share",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Session, |c, id| {
            Box::pin(share(
                c.req,
                id,
                c.access.who(),
                Actor::of(&c.access, c.peer),
                c.state,
            ))
        }),
    },
    Route {
        methods: &["DELETE"],
        pattern: "/api/sessions/{id}/share/{share}",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::NowOn(PathId::Session, |c, id| {
            revoke(id, c.share, &c.actor(), c.state)
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/sessions/{id}/recording",
        callers: Callers::SessionRecording,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Session, |c, id| {
            Box::pin(recordings::cast(id, c.state))
        }),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/recordings",
        callers: Callers::Viewer,
        audience: Audience::Program,
        handler: Handler::Later(|c| Box::pin(recordings::list(c.state))),
    },
    // A share link made with `record` reaches its own session's recording.
    Route {
        methods: &["GET"],
        pattern: "/api/recordings/{id}",
        callers: Callers::SessionRecording,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Uuid, |c, id| Box::pin(recordings::one(id, c.state))),
    },
    Route {
        methods: &["DELETE"],
        pattern: "/api/recordings/{id}",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::LaterOn(PathId::Uuid, |c, id| {
            Box::pin(recordings::delete(id, c.state))
        }),
    },
    // The audit trail: who did what (daemon/audit/).
    Route {
        methods: &["GET"],
        pattern: "/api/audit",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::Later(|c| Box::pin(audit::list(c.req, c.state))),
    },
    Route {
        methods: &["GET"],
        pattern: "/api/me",
        callers: Callers::AnyToken,
        audience: Audience::Program,
        handler: Handler::Now(|c| super::me::me(&c.access)),
    },
    // ---- API tokens (docs/protocol.md section 12b) ------------------------------------------
    Route {
        methods: &["GET"],
        pattern: "/api/tokens",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::Now(|c| tokens::list(c.state)),
    },
    Route {
        methods: &["POST"],
        pattern: "/api/tokens",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::Later(|c| {
            let actor = c.actor();
            Box::pin(tokens::create(c.req, actor, c.state))
        }),
    },
    Route {
        methods: &["DELETE"],
        pattern: "/api/tokens/{token}",
        callers: Callers::Admin,
        audience: Audience::Program,
        handler: Handler::Now(|c| tokens::revoke(c.token, &c.actor(), c.state)),
    },
];

/// `DELETE /api/sessions/{id}/share/{share}`: revokes the link; its connections close.
fn revoke(id: Uuid, share: Option<&str>, actor: &Actor, state: &AppState) -> Response<Body> {
    let share = share.unwrap_or_default();
    if state.auth.revoke(id, share) {
        info!(session = %id, share = %share, "share link revoked");
        let detail = serde_json::json!({ "share": share });
        let event = crate::audit::Event::new("share.revoke", actor);
        state.audit.record(event.on(id).with(detail));
        no_content()
    } else {
        error(StatusCode::NOT_FOUND, "no such share link")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(path: &str) -> Option<String> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match lookup(&Method::PUT, &segments) {
            Lookup::WrongMethod { allow, .. } => Some(allow.join(", ")),
            _ => None,
        }
    }

    #[test]
    fn a_route_matches_its_own_path_and_not_one_a_segment_shorter_or_longer() {
        for route in ROUTES {
            let want: Vec<&str> = route.pattern.trim_matches('/').split('/').collect();
            let path: Vec<&str> = want
                .iter()
                .map(|w| if w.starts_with('{') { "p" } else { w })
                .collect();
            let params = route.matches(&path).expect(route.pattern);
            let filled = [params.id, params.share, params.lang, params.token]
                .iter()
                .filter(|p| p.is_some())
                .count();
            let holes = want.iter().filter(|w| w.starts_with('{')).count();
            assert_eq!(filled, holes, "{}", route.pattern);
            assert!(
                route.matches(&path[..path.len() - 1]).is_none(),
                "{}",
                route.pattern
            );
            let longer: Vec<&str> = path.iter().copied().chain(["more"]).collect();
            assert!(route.matches(&longer).is_none(), "{}", route.pattern);
        }
    }

    #[test]
    fn every_known_path_has_its_methods() {
        let cases = [
            ("/", Some("GET, HEAD")),
            ("/session/x", Some("GET, HEAD")),
            ("/replay/x", Some("GET, HEAD")),
            ("/metrics", Some("GET")),
            ("/ws/1", Some("GET")),
            ("/ws/board", Some("GET")),
            ("/api/assistants", Some("GET")),
            ("/api/sessions", Some("GET, POST")),
            ("/api/sessions/1", Some("GET, PATCH, DELETE")),
            ("/api/sessions/1/scrollback", Some("GET")),
            ("/api/sessions/1/state", Some("POST")),
            ("/api/sessions/1/share", Some("GET, POST")),
            ("/api/sessions/1/share/abc", Some("DELETE")),
            ("/api/exec", Some("GET, POST")),
            ("/api/lsp", Some("GET")),
            ("/ws/1/lsp/python", Some("GET")),
            ("/ws/lsp/python", Some("GET")),
            ("/api/sessions/1/recording", Some("GET")),
            ("/api/recordings", Some("GET")),
            ("/api/recordings/x", Some("GET, DELETE")),
            ("/api/audit", Some("GET")),
            // A public route's other methods: 405 too.
            ("/api/version", Some("GET")),
            ("/api/openapi.json", Some("GET")),
            ("/api/nope", None),
            ("/api/sessions/1/nope", None),
            ("/ws/1/nope", None),
        ];
        for (path, want) in cases {
            assert_eq!(allowed(path).as_deref(), want, "{path}");
        }
    }

    #[test]
    fn the_namespaces_and_the_assets() {
        let kind = |method: &Method, path: &str| {
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            match lookup(method, &segments) {
                Lookup::Route(r, p) => format!("{} {:?} {:?}", r.pattern, p.id, p.share),
                Lookup::WrongMethod { .. } => "405".to_owned(),
                Lookup::NoEndpoint => "no endpoint".to_owned(),
                Lookup::Asset => "asset".to_owned(),
            }
        };
        assert_eq!(kind(&Method::POST, "/healthz"), "/healthz None None");
        assert_eq!(kind(&Method::POST, "/api/version"), "405");
        assert_eq!(kind(&Method::GET, "/api"), "no endpoint");
        assert_eq!(kind(&Method::GET, "/metrics/x"), "asset");
        assert_eq!(kind(&Method::GET, "/session/x/y"), "asset");
        assert_eq!(kind(&Method::GET, "/app.css"), "asset");
        assert_eq!(
            kind(&Method::DELETE, "/api/sessions/7/share/ab"),
            "/api/sessions/{id}/share/{share} Some(\"7\") Some(\"ab\")"
        );
        assert_eq!(kind(&Method::GET, "/"), "/ None None");
        assert_eq!(
            kind(&Method::GET, "/ws/7/lsp/go"),
            "/ws/{id}/lsp/{lang} Some(\"7\") None"
        );
        assert_eq!(
            kind(&Method::GET, "/ws/lsp/raw"),
            "/ws/lsp/{lang} None None"
        );
    }

    #[test]
    fn the_table_is_consistent() {
        let mut seen = std::collections::BTreeSet::new();
        for route in ROUTES {
            for m in route.methods {
                assert!(
                    seen.insert((*m, route.pattern)),
                    "{m} {} twice",
                    route.pattern
                );
            }
            // A route about the path's session has an `{id}` to read it from, and only then.
            let has_id = route.pattern.contains("{id}");
            assert_eq!(route.path_id().is_some(), has_id, "{}", route.pattern);
            let about_session = matches!(
                route.callers,
                Callers::Session
                    | Callers::SessionWriter
                    | Callers::SessionRecording
                    | Callers::SessionState
            );
            assert!(!about_session || has_id, "{}", route.pattern);
            for hole in route.pattern.split('/').filter(|s| s.starts_with('{')) {
                assert!(
                    matches!(hole, "{id}" | "{share}" | "{lang}" | "{token}"),
                    "{}",
                    route.pattern
                );
            }
            // Public routes, and only they, have a handler that sees no caller.
            let public_handler = matches!(route.handler, Handler::Public(_));
            assert_eq!(
                route.callers == Callers::Public,
                public_handler,
                "{}",
                route.pattern
            );
            // The page routes, and only they, answer people.
            let page = route.methods == PAGE_METHODS;
            assert_eq!(
                route.audience == Audience::Person,
                page,
                "{}",
                route.pattern
            );
        }
        // Routes of one path are listed together (their methods make one `Allow`).
        let patterns: Vec<&str> = ROUTES.iter().map(|r| r.pattern).collect();
        for (i, p) in patterns.iter().enumerate() {
            if let Some(j) = patterns[..i].iter().rposition(|q| q == p) {
                assert_eq!(j + 1, i, "{p} is not listed together");
            }
        }
    }

    #[test]
    fn share_links_reach_their_own_session_only() {
        let auth = crate::auth::Auth::new(Some("t".repeat(20)), 10, vec![]);
        let mine = Uuid::new_v4();
        let other = Uuid::new_v4();
        let viewer = Access::Share(auth.create_share(
            mine,
            crate::session::Role::Viewer,
            None,
            false,
            "alice",
        ));
        let writer = Access::Share(auth.create_share(
            mine,
            crate::session::Role::Writer,
            None,
            true,
            "alice",
        ));
        let owner = Access::User(auth.owner().clone());
        assert!(Callers::Admin.admit(&owner, None));
        assert!(!Callers::Admin.admit(&writer, Some(mine)));
        assert!(!Callers::Viewer.admit(&writer, None));
        assert!(Callers::Watcher.admit(&viewer, None));
        assert!(Callers::Session.admit(&viewer, Some(mine)));
        assert!(!Callers::Session.admit(&viewer, Some(other)));
        assert!(!Callers::SessionWriter.admit(&viewer, Some(mine)));
        assert!(Callers::SessionWriter.admit(&writer, Some(mine)));
        assert!(!Callers::SessionRecording.admit(&viewer, Some(mine)));
        assert!(Callers::SessionRecording.admit(&writer, Some(mine)));
        assert!(!Callers::told_missing(&viewer) && Callers::told_missing(&owner));
    }

    /// A session's capability token may report its session's state and call nothing else;
    /// the daemon token may report any session's, a share link none.
    #[test]
    fn a_state_token_calls_one_route_of_its_own_session() {
        let auth = crate::auth::Auth::new(Some("t".repeat(20)), 10, vec![]);
        let (mine, other) = (Uuid::new_v4(), Uuid::new_v4());
        let token = Access::StateToken(mine);
        let writer = Access::Share(auth.create_share(
            mine,
            crate::session::Role::Writer,
            None,
            true,
            "alice",
        ));
        for route in ROUTES.iter().filter(|r| r.callers != Callers::Public) {
            let allowed = route.callers.admit(&token, Some(mine));
            assert_eq!(
                allowed,
                route.pattern == "/api/sessions/{id}/state",
                "{}",
                route.pattern
            );
        }
        assert!(!Callers::SessionState.admit(&token, Some(other)));
        assert!(Callers::SessionState.admit(&Access::User(auth.owner().clone()), Some(other)));
        assert!(!Callers::SessionState.admit(&writer, Some(mine)));
        assert!(!Callers::told_missing(&token));
    }
}
