//! Every key of the configuration's tables, written once: the field the daemon reads, its type,
//! the check and bounds its value must pass, and its documentation. `config/ptyhub.toml`
//! documents each for people and holds its default; `section!` makes the rest.
//!
//! To add a key: a line here and its documented default there (or `#[unset = ...]` here when
//! it has none). `[tls]`, `[assistants]`, `[lsp]` and `listen` are read in `layers`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hyper::header::HeaderName;
use ipnet::IpNet;

use super::cluster::{machine_hostname, HostName, PeerUrl};
use super::deploy::{BasePath, Trusted};
use super::notify::{NotifyCommand, PageLink, Webhook, WebhookEntry};
use super::section::section;
use super::values::{Days, Dur, HeaderField, Int, ScopeList, Token, UserScopes, USIZE_MAX};
use crate::attention::State;
use crate::auth::Scopes;

/// Smallest output window, bytes (64 KiB): below it ordinary bursts of output would push every
/// viewer into a snapshot resync.
const MIN_OUTPUT_LOG_BYTES: u64 = 64 * 1024;

/// Most scrollback lines (100 000): each costs the full terminal width in memory, so a larger
/// value is far more likely a typo than a wish.
const MAX_SCROLLBACK_LINES: u64 = 100_000;

/// Smallest flow-control budget, bytes (512 KiB): twice the browser's acknowledgement interval
/// of 256 KiB; a smaller one would wait for an acknowledgement that never comes, and resync the
/// client by snapshot instead.
const MIN_FLOW_BUDGET_BYTES: u64 = 512 * 1024;

/// Largest reply of the scrollback endpoint, bytes of output (16 MiB): the reply is built in
/// memory, a third larger again in base64, while the output log is locked for the copy.
const MAX_SCROLLBACK_API_BYTES: u64 = 16 * 1024 * 1024;

/// Most exec processes at once: each is a process with three pipes, so thousands are surely a
/// typo.
const MAX_EXECS: u64 = 4096;

/// Smallest bound on a language server's messages, bytes (4 KiB): an `initialize` alone is
/// a few kilobytes.
const MIN_LSP_MESSAGE_BYTES: u64 = 4096;

/// Smallest recording cap, bytes (4 KiB): a header and a screenful.
const MIN_RECORDING_BYTES: u64 = 4096;

/// Smallest audit file before it is rotated, bytes (4 KiB): a dozen events.
const MIN_AUDIT_BYTES: u64 = 4096;

/// A wait that may be zero.
type AnyDuration = Dur<0>;

/// A deadline, which zero would make fire at once.
type PositiveDuration = Dur<1>;

section! {
    /// `[server]`: where the daemon is mounted.
    #[derive(Debug, Clone, Default)]
    pub struct ServerConfig, written as RawServer in "server" {
        /// The path prefix every route, asset, cookie and link lives under: empty, or `/name`
        /// (no trailing slash), e.g. `/ptyhub` behind a proxy that serves `/ptyhub/`.
        #[unset = String::new()]
        base_path: String = BasePath,
    }
}

section! {
    /// `[proxy]`: the reverse proxies in front of the daemon.
    #[derive(Debug, Clone, Default)]
    pub struct ProxyConfig, written as RawProxy in "proxy" {
        /// Networks whose `X-Forwarded-For`, `-Proto` and `-Host` are believed.
        #[unset = Vec::new()]
        trusted: Vec<IpNet> = Vec<Trusted>,
        /// Most connections open at once from one trusted proxy address (its connections count
        /// under their requests' clients, so the per-address limits do not bound the proxy).
        max_connections: usize = Int<1, 1_000_000>,
    }
}

section! {
    /// `[session]`: per-session settings.
    #[derive(Debug, Clone)]
    pub struct SessionConfig, written as RawSession in "session" {
        /// Terminal height before any viewer sends a size, rows (1..=500).
        rows: u16 = Int<1, 500>,
        /// Terminal width before any viewer sends a size, columns (1..=1000).
        cols: u16 = Int<1, 1000>,
        /// Scrollback lines kept by the screen model and sent in snapshots.
        scrollback_lines: usize = Int<0, MAX_SCROLLBACK_LINES>,
        /// Window of recent output kept per session, bytes (at least 64 KiB).
        output_log_bytes: usize = Int<MIN_OUTPUT_LOG_BYTES, USIZE_MAX>,
        /// Time between SIGTERM and SIGKILL when processes are ended.
        kill_grace: Duration = AnyDuration,
        /// An exited session with no viewer is removed this long after its exit.
        reap_after_exit: Duration = AnyDuration,
        /// Chat messages kept per session.
        chat_history: usize = Int<0, USIZE_MAX>,
        /// Most bytes of recent output `GET /api/sessions/{id}/scrollback` returns.
        scrollback_api_bytes: usize = Int<1, MAX_SCROLLBACK_API_BYTES>,
        /// Whether a client may run a program of its choosing: a session's own command (`cmd`
        /// of `POST /api/sessions`) and `/api/exec`. Off, only the configured assistants run.
        own_commands: bool = bool,
    }
}

section! {
    /// `[viewer]`: per-connection settings.
    #[derive(Debug, Clone)]
    pub struct ViewerConfig, written as RawViewer in "viewer" {
        /// A socket unwritable this long gets a snapshot instead of the backlog (never zero).
        stall_deadline: Duration = PositiveDuration,
        /// With `flow=ack`: most unacknowledged bytes per client (at least 512 KiB).
        flow_budget_bytes: u64 = Int<MIN_FLOW_BUDGET_BYTES, { u64::MAX }>,
        /// Largest WebSocket message accepted, bytes; larger closes with 1009. Always more than
        /// `upload_max_bytes` (at least 2, then; checked across keys in `layers`).
        max_message_bytes: usize = Int<2, USIZE_MAX>,
        /// Largest file upload, bytes (at least 1).
        upload_max_bytes: usize = Int<1, USIZE_MAX>,
    }
}

section! {
    /// `[auth]`: the daemon token and the origins allowed besides the server's own.
    #[derive(Debug, Clone, Default)]
    pub struct AuthConfig, written as RawAuth in "auth" {
        /// The token; `None` means one is generated at start (loopback listen only).
        #[unset = None]
        token: Option<String> = Token,
        /// Origins (`https://host:port`) accepted besides the Host itself, e.g. a reverse
        /// proxy's.
        #[unset = Vec::new()]
        allowed_origins: Vec<String> = Vec<String>,
        /// Single sign-on: the header a trusted reverse proxy (`[proxy] trusted`) names the
        /// signed-in user in, e.g. `X-Forwarded-Email`; unset: off. Ignored from other peers.
        #[unset = None]
        user_header: Option<HeaderName> = HeaderField,
        /// The scopes of a user the proxy signs in who is not in `[auth.users]` (`[]`: refused).
        default_scopes: Scopes = ScopeList,
        /// `[auth.users]`: users the proxy signs in, by name, and their scopes.
        #[unset = BTreeMap::new()]
        users: BTreeMap<String, Scopes> = UserScopes,
    }
}

section! {
    /// `[limits]`: what one client, or all of them, may use.
    #[derive(Debug, Clone)]
    pub struct LimitsConfig, written as RawLimits in "limits" {
        /// Most sessions at once.
        max_sessions: usize = Int<1, 100_000>,
        /// Most viewers of one session at once.
        max_viewers_per_session: usize = Int<1, 100_000>,
        /// Longest chat message, characters after trimming.
        max_chat_chars: usize = Int<1, 100_000>,
        /// Longest chat user name and session name, characters after trimming.
        max_name_chars: usize = Int<1, 255>,
        /// Failed authentications per client address per minute before it gets 429.
        failed_auth_per_minute: usize = Int<1, 1_000_000>,
        /// The longest hold on the answer to a failed authentication: 25 ms for an address's
        /// first failure in a minute, doubling with each, up to this (zero: no hold).
        failed_auth_delay_max: Duration = AnyDuration,
        /// Most simultaneous not-yet-authenticated connections from one client address (and,
        /// separately, most authenticated WebSockets from it).
        max_connections_per_ip: usize = Int<1, 1_000_000>,
        /// Most exec processes running at once (`/api/exec`, both transports).
        max_execs: usize = Int<1, MAX_EXECS>,
        /// Most language servers running at once (`/ws/{id}/lsp/{lang}`, `/ws/lsp/{lang}`).
        max_lsp: usize = Int<1, MAX_EXECS>,
        /// Largest JSON-RPC message passed to or from a language server, bytes (at least
        /// 4 KiB); a larger one closes the connection with 1009.
        lsp_message_bytes: usize = Int<MIN_LSP_MESSAGE_BYTES, USIZE_MAX>,
        /// How long a connection may take to send a request's headers (the first request's
        /// counted from the accept, a TLS handshake included), and may stay idle between
        /// requests, before it is closed.
        header_timeout: Duration = PositiveDuration,
        /// A connection whose data stays unacknowledged this long, or that answers no keepalive
        /// probe for as long, is closed (`TCP_USER_TIMEOUT`; zero: the kernel's defaults).
        dead_peer_timeout: Duration = AnyDuration,
        /// Most API tokens kept (`/api/tokens`, `ptyhub token create`); one more is 409.
        max_api_tokens: usize = Int<1, 1_000_000>,
    }
}

section! {
    /// `[recording]`: every session recorded as asciicast v2.
    #[derive(Debug, Clone)]
    pub struct RecordingConfig, written as RawRecording in "recording" {
        /// Whether sessions are recorded.
        enabled: bool = bool,
        /// Where the `.cast` files are kept (unset in the embedded default: it depends on the
        /// environment).
        #[unset = super::default_recording_dir()]
        dir: PathBuf = PathBuf,
        /// Most bytes of one recording; past it the recording stops (the session goes on).
        max_bytes_per_session: u64 = Int<MIN_RECORDING_BYTES, { u64::MAX }>,
        /// Recordings older than this are deleted (at start and daily): 1 day to 100 years.
        #[key = "keep_days"]
        keep: Duration = Days<1, 36_500>,
        /// Whether keystrokes are recorded too (they may hold passwords).
        input: bool = bool,
    }
}

section! {
    /// `[audit]`: the audit trail, `audit.jsonl`, rotated at a bound.
    #[derive(Debug, Clone)]
    pub struct AuditConfig, written as RawAudit in "audit" {
        /// Where `audit.jsonl` and its rotated files are kept (unset in the embedded default:
        /// the state directory, which depends on the environment).
        #[unset = super::state_dir()]
        dir: PathBuf = PathBuf,
        /// Bytes the file reaches before it becomes `audit.jsonl.1` (older ones shift).
        max_bytes: u64 = Int<MIN_AUDIT_BYTES, { u64::MAX }>,
        /// How many rotated files are kept besides the current one.
        files: usize = Int<1, 100>,
    }
}

section! {
    /// `[cluster]`: this host's name and its peers.
    #[derive(Debug, Clone)]
    pub struct ClusterConfig, written as RawCluster in "cluster" {
        /// This host's name: sent as `X-Ptyhub-Host` on every response, shown by the home page
        /// and marked on each session of a merged list. Default: the machine's hostname.
        #[unset = machine_hostname()]
        host: String = HostName,
        /// Base URLs (`http://10.0.0.2:1977`) of the other hosts, without a trailing slash.
        #[unset = Vec::new()]
        peers: Vec<String> = Vec<PeerUrl>,
        /// Whether a peer may be asked over plain `http://` beyond this machine (the token
        /// then crosses the network in the clear): refused at start unless set.
        allow_cleartext_peers: bool = bool,
    }
}

section! {
    /// `[notify]`: each session's changes of state told beyond the browser, to webhooks and a
    /// command. Nothing is sent unless one is configured.
    #[derive(Debug, Clone)]
    pub struct NotifyConfig, written as RawNotify in "notify" {
        /// Webhooks posted one request per transition into one of their states.
        #[unset = Vec::new()]
        webhooks: Vec<Webhook> = Vec<WebhookEntry>,
        /// A program (argument array, no shell) run per transition with the event JSON on its
        /// stdin.
        #[unset = None]
        command: Option<Vec<String>> = NotifyCommand,
        /// The address people open ptyhub at: notifications link to the session's page under
        /// it. Unset: no link.
        #[unset = None]
        link: Option<String> = PageLink,
        /// The states whose transitions are told (a webhook's own `on` wins for it).
        on: Vec<State> = Vec<State>,
        /// How long one delivery may take (a post, or the command's run, killed then).
        timeout: Duration = PositiveDuration,
        /// Retries after a failed delivery, with a doubling wait between them.
        retries: u16 = Int<0, 10>,
        /// Most transitions waiting per receiver; past it the oldest are dropped.
        queue: usize = Int<1, 100_000>,
    }
}

section! {
    /// `[attention]`: how each session's state (working, waiting, idle, exited) is found
    /// (README, "Attention").
    #[derive(Debug, Clone)]
    pub struct AttentionConfig, written as RawAttention in "attention" {
        /// Output quiet this long ends `working` by the terminal rule: `idle` at the program's
        /// own prompt, `waiting` or `working` with another program in the foreground.
        quiet: Duration = PositiveDuration,
        /// A state an agent reported holds until the screen changes this long after the
        /// report (the redraw that comes with it does not end it).
        hook_grace: Duration = AnyDuration,
        /// How many of the screen's bottom non-empty rows the screen patterns are matched on.
        state_rows: usize = Int<1, 500>,
        /// State reports per second per session (bursts of twice as many); beyond: 429.
        hook_rate: usize = Int<1, 10_000>,
    }
}
