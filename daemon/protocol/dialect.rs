//! The seam between the connection driver and a dialect: what a driver asks of a codec to turn
//! client messages into [`Request`]s and the session's domain events into messages, which
//! close code says why a connection ends, and what the dialect can do (flow acks). A new
//! dialect implements [`Dialect`]; the driver, the flow control and the one place requests
//! are applied (`crate::viewer::apply`) stay the same.

use std::ops::Range;

use bytes::Bytes;
use uuid::Uuid;

use super::request::{Outcome, Request};
use crate::attention::SessionState;
use crate::session::{
    ChatLine, EndReason, ExitInfo, PresenceInfo, Refusal, Role, StatusInfo, ViewerId,
};
use crate::term::snapshot::SnapshotForm;

/// One whole message from a client (fragments already joined).
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A text message (valid UTF-8).
    Text(String),
    /// A binary message.
    Binary(Bytes),
}

/// One whole message to a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// A text message.
    Text(String),
    /// A binary message.
    Binary(Vec<u8>),
}

/// A message a codec built for one client, with the code of the `error` it reports if it is
/// one: the driver counts that (`/metrics`), so the codec stays pure.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// The message.
    pub message: Outbound,
    /// The code of the `error` message it is, if it is one.
    pub error: Option<String>,
}

/// Why a driver closes a client's connection, in domain words: each dialect says it with a
/// close code and reason ([`Dialect::close`]), and some with a message before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing<'a> {
    /// The session ended, for this reason.
    Ended(EndReason),
    /// The session could not be created; says why.
    CreateFailed(&'a str),
    /// The client asked to join only, and there is no such session.
    NoSuchSession,
    /// The session could not take another viewer; says why.
    TooManyViewers(&'a str),
    /// The screen could not be drawn for this viewer (its join, or a resync): the server's
    /// own failure; joining again draws a fresh screen.
    ScreenFailed,
    /// The client let what is addressed to it pile up: it is closed rather than buffered for.
    NotReading,
    /// The share link or API token it connected with was revoked or expired.
    AccessEnded(crate::auth::Ended),
}

/// What the driver tells a client besides output and snapshots, in domain words.
#[derive(Debug, Clone, Copy)]
pub enum Notice<'a> {
    /// The join sequence is complete; live output follows.
    Ready,
    /// The session's metadata, as this viewer sees it.
    Status {
        /// The metadata.
        info: &'a StatusInfo,
        /// The session's id.
        session: Uuid,
        /// The role this viewer joined with.
        role: Role,
    },
    /// The program ended.
    Exit(&'a ExitInfo),
    /// A chat line.
    Chat(&'a ChatLine),
    /// Who is here, and who typed.
    Presence {
        /// Everyone.
        info: &'a PresenceInfo,
        /// The viewer this notice goes to.
        me: ViewerId,
    },
    /// Something this viewer asked was refused.
    Refused(&'a Refusal),
    /// The session's state changed (or its reason or choices).
    State(&'a SessionState),
    /// The connection is about to be closed, for this reason.
    Closing(Closing<'a>),
}

/// A dialect: a pure codec between a client's messages and the session's domain words.
pub trait Dialect: Send + Sync + 'static {
    /// Decodes one client message. `Err` carries the reply that explains why it could not
    /// be (the connection stays open).
    fn decode(&self, message: Inbound) -> Result<Request, Encoded>;
    /// What the client is told of its own request's outcome, if anything.
    fn outcome(&self, outcome: Outcome) -> Option<Encoded>;
    /// A notice, if this dialect has a way to say it.
    fn notice(&self, notice: Notice<'_>) -> Option<Encoded>;
    /// Where to cut `data` (terminal output) into messages. On every output chunk of every
    /// viewer, so it is an associated function the driver calls without dispatch.
    fn output_ranges(data: &[u8]) -> impl Iterator<Item = Range<usize>>
    where
        Self: Sized;
    /// How this dialect carries a snapshot (gzip or plain, and its largest size); the session
    /// trims scrollback to fit it.
    fn snapshot_form(&self) -> SnapshotForm;
    /// A snapshot (packed as [`Dialect::snapshot_form`] asked) as binary messages; empty when
    /// it cannot be sent.
    fn snapshot(&self, packed: &[u8]) -> Vec<Vec<u8>>;
    /// The close code and reason that tell the client why its connection ends.
    fn close<'a>(&self, why: Closing<'a>) -> (u16, &'a str);
    /// Whether a client may acknowledge what it has drawn (`?flow=ack`), so that what it is
    /// sent unacknowledged is bounded. Without an `ack` message in the dialect, it may not.
    fn flow_ack(&self) -> bool {
        false
    }
}

/// The short machine word for a refusal, the same in every dialect's `error` message.
pub fn refusal_code(r: &Refusal) -> &'static str {
    match r {
        Refusal::ReadOnly(_) => "read_only",
        Refusal::NotRunning(_) => "not_running",
        Refusal::InvalidChat(_) => "invalid_chat",
        Refusal::YoloUnsupported(_) => "yolo_unsupported",
        Refusal::RestartInProgress => "restart_in_progress",
        Refusal::BadSignal(_) => "bad_signal",
        Refusal::SignalFailed(_) => "signal_failed",
        Refusal::RecordingFailed(_) => "recording_failed",
    }
}
