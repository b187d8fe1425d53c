//! ptyhub: one daemon that runs programs (shells, AI coding agents) on PTYs and shares each
//! session's live screen with many browser viewers over WebSocket.
//!
//! The components, outside in:
//!
//! - [`daemon`]: the whole daemon as one object: build, serve on a listener, end.
//! - [`http`]: the listener, routing, REST API and the WebSocket upgrade.
//! - [`viewer`]: one WebSocket connection; decodes frames into session commands and writes
//!   the session's output from the viewer's own position in the output log.
//! - [`ws`]: WebSocket plumbing every WebSocket shares (viewers, exec): the socket's halves,
//!   the reader task, RFC 6455's frame rules, server frames.
//! - [`board`]: the board's connection: a card per session, only what changed, quick replies.
//! - [`registry`]: session uuid → [`session::SessionHandle`].
//! - [`session`]: one actor task per session owning the process and its PTY, the screen
//!   model, the output log, the viewers and the session's metadata.
//! - [`exec`]: one process per request on pipes, bound to its client (WebSocket or SSE).
//! - [`lsp`]: language servers over WebSocket, run and ended as execs are.
//! - [`protocol`]: pure codecs between wire frames and messages, one per dialect.
//! - [`term`]: the terminal, pure: the one escape-sequence scanner, the screen model, its ANSI
//!   renderer and snapshots, terminal queries.
//! - [`client`]: the command-line client (`ptyhub attach`, `exec`, `ls`, `new`, `kill`,
//!   `share`) and its way to a daemon.
//! - [`attention`]: whether each session works, waits for its user, is done or has ended: the
//!   words, reading screens, agents' reports and hooks, and the changes told to the daemon.
//! - [`assets`]: the embedded browser UI.
//! - [`audit`]: the audit trail: who did what, as JSON lines, rotated; read by admins.
//! - [`auth`]: tokens, share links, origin checks, the failed-auth rate limit.
//! - [`metrics`]: counters for `/metrics`.
//! - [`notify`]: sessions' changes of state told to webhooks and a command.
//! - [`record`]: session recordings (asciicast v2 files): written, listed, pruned.
//! - [`config`]: the embedded default, a TOML file, environment and flags, merged.
//! - [`shutdown`]: the signal every long-lived task watches to end cleanly.
//! - [`upgrade`]: live upgrade: the session image, handing it to a new image of the binary
//!   with `execve`, and adopting it there.
//! - [`systemd`]: telling systemd the daemon is ready, reloading or stopping.
//! - [`idle_pages`]: the code pages a quiet daemon lets go of.
//! - [`sys`]: the one module allowed `unsafe`: owned descriptors onto tokio's reactor,
//!   descriptors inherited from a previous image, a socket option, the read-only pages.

// Denied everywhere but in `sys`, which states why each block is sound.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod assets;
pub mod attention;
pub mod audit;
pub mod auth;
pub mod board;
pub mod client;
pub mod config;
pub mod daemon;
pub mod exec;
pub mod http;
pub mod idle_pages;
pub mod journal;
pub mod lsp;
pub mod metrics;
pub mod notify;
pub mod protocol;
pub mod record;
pub mod registry;
pub mod session;
pub mod shutdown;
pub mod sys;
pub mod systemd;
pub mod term;
pub mod upgrade;
pub mod viewer;
pub mod ws;
