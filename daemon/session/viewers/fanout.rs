//! The hand-out of output to the viewers: the typist's echo first and at once, then the
//! others a slice at a time from the actor's loop, chunks that come faster than the rounds
//! joined into one write, and rounds paced when there are many viewers.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::member::Member;
use crate::session::events::ViewerId;

/// Viewers handed a chunk in one turn of the actor's loop before it yields to the worker's
/// other tasks: a round to 100 viewers (0.1–0.3 ms of non-blocking sends) goes in one turn,
/// since each yield costs more than the sends it separates (8 a turn put the gap-0 echo's
/// all-viewers p99 ~0.8 ms higher). A key does not wait for the turn: the hand-out stops after
/// any send that finds a command waiting.
const FANOUT_SLICE: usize = 128;
/// Most output joined into one pending fan-out (see [`Fanout`]): keys and short bursts;
/// beyond it, viewers still owed output copy it from the log on their own tasks.
const FANOUT_JOIN_BYTES: usize = 16 * 1024;
/// Least time from the end of one fan-out round to the viewers other than the typist to the
/// start of the next (see [`Fanout`]).
pub const FANOUT_PACE: Duration = Duration::from_millis(1);
/// Viewers a session has before its fan-out rounds are paced: a round to fewer costs less
/// than the timer wake-up that would delay it (and many sessions' timers fire together).
pub const FANOUT_PACED_FROM: usize = 16;
/// How long after a viewer's input its output counts as that viewer's echo, delivered to it
/// before anyone else.
const TYPIST_WINDOW: Duration = Duration::from_millis(500);

/// Output still to be handed to some viewers (see [`Fanout::hand_out`]).
///
/// When a chunk comes before the previous one has been handed to everyone (keys typed back to
/// back, with many viewers), the two are joined: each viewer still queued is later sent what
/// it lacks of both in one write, rather than one write per chunk or a wake-up of its task.
#[derive(Default)]
pub(super) struct Fanout {
    /// The log offset of `chunk`.
    start: u64,
    /// The output from `start` to the log's head.
    chunk: Bytes,
    /// Viewers not handed all of it yet, served from the back (the buffer is reused).
    rest: Vec<ViewerId>,
    /// When the hand-out may begin: a round starts [`FANOUT_PACE`] after the last one ended,
    /// so output that comes faster (keys typed back to back) reaches the others joined, in
    /// fewer writes, and the more a round costs (or the busier the machine) the fewer there are.
    due: Option<Instant>,
    /// When the latest round ended.
    ended_at: Option<Instant>,
    /// An empty buffer kept for the next chunk's queue (the two are swapped, not allocated).
    spare: Vec<ViewerId>,
}

/// Hands `chunk` (at log offset `start`) to the viewer that typed last, if it did within
/// [`TYPIST_WINDOW`]: straight onto its socket, else a wake-up. That viewer, if any.
pub(super) fn push_to_typist(
    typist: Option<(ViewerId, Instant)>,
    members: &HashMap<ViewerId, Member>,
    start: u64,
    chunk: &[u8],
) -> Option<ViewerId> {
    let (id, typist) = typist
        .filter(|(_, at)| at.elapsed() < TYPIST_WINDOW)
        .and_then(|(id, _)| members.get(&id).map(|v| (id, v)))?;
    if !typist.live.try_push(start, chunk) {
        typist.live.wake();
    }
    Some(id)
}

impl Fanout {
    /// When the next slice may go.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Whether some viewers are still owed the pending output.
    pub(super) fn pending(&self) -> bool {
        !self.rest.is_empty()
    }

    /// Queues `chunk` (at log offset `start`, just published) for every viewer but `typist`
    /// (who has it): joined to the pending output when that is small enough, else as a new
    /// round (at once, or to many viewers a pace after the last one ended).
    pub(super) fn queue(
        &mut self,
        members: &mut HashMap<ViewerId, Member>,
        start: u64,
        chunk: Bytes,
        typist: Option<ViewerId>,
    ) {
        let mut rest = std::mem::take(&mut self.rest);
        let (mut due, ended_at) = (self.due, self.ended_at);
        let (start, chunk) =
            if !rest.is_empty() && self.chunk.len() + chunk.len() <= FANOUT_JOIN_BYTES {
                let mut both = BytesMut::with_capacity(self.chunk.len() + chunk.len());
                both.extend_from_slice(&self.chunk);
                both.extend_from_slice(&chunk);
                (self.start, both.freeze())
            } else {
                // A new round: at once, or (to many viewers) a pace after the last one ended.
                let now = Instant::now();
                due = ended_at
                    .map(|at| at + FANOUT_PACE)
                    .filter(|at| *at > now && members.len() > FANOUT_PACED_FROM);
                // Too much to join: those still owed the previous chunk copy both from the log on
                // their own tasks.
                for id in rest.drain(..) {
                    if let Some(v) = members.get_mut(&id) {
                        v.queued = false;
                        v.live.wake();
                    }
                }
                (start, chunk)
            };
        // Those already handed the previous chunk queue in front of those still owed it, who
        // are served first (from the back).
        let mut owed = std::mem::replace(&mut rest, std::mem::take(&mut self.spare));
        for (id, v) in members.iter_mut() {
            if !v.queued && Some(*id) != typist {
                v.queued = true;
                rest.push(*id);
            }
        }
        rest.append(&mut owed);
        *self = Fanout {
            start,
            chunk,
            rest,
            due,
            ended_at,
            spare: owed,
        };
    }

    /// Hands the pending output to up to [`FANOUT_SLICE`] more viewers: straight onto the
    /// socket of one that is idle and caught up, else a wake-up for its task to copy it from
    /// the log. Stops early once `input_waiting` says a command has come, so a key goes to the
    /// PTY before the rest of the round.
    pub(super) fn hand_out(
        &mut self,
        members: &mut HashMap<ViewerId, Member>,
        input_waiting: impl Fn() -> bool,
    ) {
        self.due = None;
        let Fanout {
            start,
            chunk,
            rest,
            ended_at,
            ..
        } = self;
        for _ in 0..FANOUT_SLICE {
            let Some(id) = rest.pop() else {
                break;
            };
            if let Some(v) = members.get_mut(&id) {
                v.queued = false;
                if !v.live.try_push(*start, chunk) {
                    v.live.wake();
                }
            }
            if input_waiting() {
                break;
            }
        }
        if rest.is_empty() {
            // The chunk is in the log; nothing else needs this reference to it.
            *chunk = Bytes::new();
            *ended_at = Some(Instant::now());
        }
    }
}
