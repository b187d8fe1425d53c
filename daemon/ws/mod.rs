//! WebSocket plumbing every WebSocket of the daemon shares, whatever it carries (a viewer, a
//! multiplexed connection, a pipe-mode exec): the upgraded connection split into halves
//! ([`socket`]), the reader task that joins fragments and enforces RFC 6455 ([`reader`],
//! [`frame_rules`]), and the frames a server writes ([`frame`]).
//!
//! It knows no session and no dialect: what a message means is the business of the driver
//! that hands the reader an [`reader::OnMessage`] handler (`crate::viewer`, `crate::exec`).

pub mod frame;
pub mod frame_rules;
pub mod reader;
pub mod socket;

use std::time::Duration;

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;

/// A WebSocket as the HTTP upgrade hands it over, before it is split.
pub type Accepted = fastwebsockets::WebSocket<TokioIo<Upgraded>>;

/// How long a closing connection is given to deliver its close frame, or to finish sending
/// once we have closed, before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The longest a viewer still reading gets to drain what was sent before its close frame (a
/// flood in the kernel's buffers, read by a slow client) when its session ends: it is
/// dropped sooner once no write went through for [`CLOSE_GRACE`].
pub const CLOSE_DRAIN: Duration = Duration::from_secs(10);
