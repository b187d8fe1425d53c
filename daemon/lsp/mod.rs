//! Language servers over WebSocket (docs/protocol.md section 13a, seed 003's `/lsp/{lang}`): a
//! configured server (`[lsp.KEY]`) run in a workspace, bound to one client, its LSP JSON-RPC
//! passed both ways. [`framing`] is the codec (base protocol on the server's stdio, one message
//! per text frame on the socket); [`bridge`] drives a connection.
//!
//! A server is an exec in all but its wire: it is started, limited (`limits.max_lsp`), counted,
//! ended (SIGTERM, SIGKILL after the grace) and reaped by `crate::exec`, so it never outlives
//! its client, its session or the daemon.

pub mod bridge;
pub mod framing;

/// What the bridge serves: which language, for the log and the close reasons.
#[derive(Debug, Clone)]
pub struct Served {
    /// The language's key (`python`).
    pub lang: String,
    /// The server's program's file name (`pyright-langserver`).
    pub program: String,
}
