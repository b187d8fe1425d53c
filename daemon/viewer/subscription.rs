//! One connection's subscription to one session's output: its position in the output log
//! (shared with the session actor through [`Live`]), the flow budget that bounds what it may
//! send unacknowledged, and the resync that replaces a backlog with a snapshot when the
//! backlog would cost more than the screen, the connection fell out of the log's window, or it
//! stayed unwritable past the stall deadline.
//!
//! Every driver pumps output through this, whatever its dialect and transport: a browser or
//! raw viewer has one subscription, a multiplexed connection one per session it carries.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::live::Live;
use super::transport::{Sink, Transport, WriteResult};
use crate::metrics::Metrics;
use crate::session::output_log::FellBehind;
use crate::session::SessionHandle;
use crate::term::snapshot::SnapshotForm;

/// Bytes of output copied from the log per write batch.
pub const BATCH_BYTES: usize = 64 * 1024;

/// Backlog past which a connection is sent the screen instead of what it missed: a snapshot
/// costs 3–90 KB, so a viewer this far behind (a flood it cannot keep up with) is resynced at
/// once. One that keeps up (typing, ordinary output) is never this far behind.
pub const RESYNC_BACKLOG_FLOOR: u64 = 256 * 1024;

/// After a resync for being behind, how long a driver may wait before sending more: what it
/// sends then is a fresh screen if the output ran on meanwhile, else the bytes. Each resync
/// for being behind in a row doubles it, up to [`MAX_BEHIND_PAUSE`].
pub const BEHIND_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two screens for a viewer slower than a flood: it still sees the
/// flood move (4 screens a second), and each screen it is sent but cannot read yet is one more
/// it must read before the one that matters.
pub const MAX_BEHIND_PAUSE: Duration = Duration::from_millis(250);

/// How often a pause checks whether the output has stopped: it ends at the first check that
/// finds the log where the one before left it, so the final screen of a flood follows the flood
/// by this much, not by the rest of the pause.
pub const QUIET_STEP: Duration = Duration::from_millis(20);

/// Why a viewer is resynced when its backlog costs more than the screen.
const BEHIND: &str = "backlog costs more than the screen";

/// Why a viewer sent screens alone during a flood is resynced once it has caught up.
const HISTORY: &str = "the scrollback a flood's screens left out";

/// A driver's pause after a resync for being behind: it sends nothing more until `until`, or
/// until the output stops, whichever comes first.
#[derive(Debug, Clone, Copy)]
pub struct BehindPause {
    until: Instant,
    /// The log's head at the last check.
    head: u64,
    /// When to check again whether the output has stopped.
    next_check: Instant,
}

impl BehindPause {
    /// The pause after the `streak`th resync for being behind in a row, at `now`, with the
    /// log's head at `head`.
    fn after(streak: u32, head: u64, now: Instant) -> Self {
        let pause = BEHIND_PAUSE
            .saturating_mul(1 << streak.saturating_sub(1).min(8))
            .min(MAX_BEHIND_PAUSE);
        BehindPause {
            until: now + pause,
            head,
            next_check: now + QUIET_STEP.min(pause),
        }
    }

    /// When the driver should look at the pause again ([`BehindPause::check`]).
    pub fn next_check(&self) -> Instant {
        self.next_check
    }

    /// Looks again with the log's head at `head`: whether the pause goes on (it ends when it
    /// is over, or when no output came since the last check).
    pub fn check(&mut self, head: u64) -> bool {
        self.check_at(head, Instant::now())
    }

    fn check_at(&mut self, head: u64, now: Instant) -> bool {
        if now >= self.until || head == self.head {
            return false;
        }
        self.head = head;
        self.next_check = (now + QUIET_STEP).min(self.until);
        true
    }
}

/// How a connection frames what a subscription sends it.
pub trait Framing: Send + Sync {
    /// Appends live output as this connection's messages on transport `T`.
    fn output<T: Transport>(&self, out: &mut Vec<u8>, data: &[u8]);
    /// Appends a snapshot (as the session's [`SnapshotForm`] packed it) as messages on `T`.
    fn snapshot<T: Transport>(&self, out: &mut Vec<u8>, packed: &[u8]);
}

/// What a pump or a resync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Pumped {
    /// Nothing to send (caught up, or no flow budget left).
    Idle,
    /// Output or a snapshot went out.
    Sent,
    /// The session is gone: it has nothing more to give this connection.
    Gone,
    /// The screen could not be drawn for a resync (logged): the viewer cannot be brought
    /// back in step, so its connection to the session ends and it may join again.
    ScreenFailed,
}

/// Scratch buffers a driver lends its subscriptions, so that a connection carrying many
/// sessions holds one batch's worth, not one per session. They grow to what a batch needs
/// (a flood's: 128 KiB) and are given back once the connection is quiet
/// ([`Scratch::release_if_large`]), so an idle viewer holds none of it.
#[derive(Default)]
pub struct Scratch {
    /// Output copied from the log.
    buf: Vec<u8>,
    /// Framed output, written in one go.
    out: Vec<u8>,
}

/// Buffer capacity an idle connection keeps: typing and ordinary output fit in it.
pub const KEEP_WHEN_IDLE: usize = 16 * 1024;

/// How long a connection is quiet before it gives back the buffers a flood grew (a flood that
/// goes on keeps them).
pub const RELEASE_AFTER: Duration = Duration::from_secs(1);

impl Scratch {
    /// Empty buffers: they grow with the first batches.
    pub fn new() -> Self {
        Scratch::default()
    }

    /// Whether the buffers hold more than an idle connection keeps.
    pub fn is_large(&self) -> bool {
        self.buf.capacity() + self.out.capacity() > KEEP_WHEN_IDLE
    }

    /// Gives back buffers grown past what an idle connection keeps.
    pub fn release_if_large(&mut self) {
        if self.is_large() {
            *self = Scratch::default();
        }
    }
}

/// One session's output stream for one connection.
pub struct Subscription {
    session: SessionHandle,
    live: Arc<Live>,
    form: SnapshotForm,
    stall_deadline: Duration,
    /// Bytes of the last snapshot this connection was sent: what a resync costs, about.
    snapshot_cost: AtomicU64,
    /// Whether a resync for being behind was logged (once is enough at the info level).
    behind_logged: AtomicBool,
    /// Set by a resync for being behind: the driver pauses before sending more.
    behind: AtomicBool,
    /// Resyncs for being behind since output was last sent as bytes: how long the pause is.
    behind_streak: AtomicU32,
    /// Whether a resync for being behind sends the screen alone (the driver then resyncs
    /// with the scrollback once caught up: [`Self::owes_history`]).
    screens_only: bool,
    /// The last snapshot sent was the screen alone: the scrollback is owed.
    owes_history: AtomicBool,
    /// The daemon's counters: output sent, snapshots and resyncs.
    metrics: Arc<Metrics>,
}

impl Subscription {
    /// Follows `session` from the position `live` holds, resyncing with snapshots of `form`;
    /// counts what it sends in `metrics`.
    pub fn new(
        session: SessionHandle,
        live: Arc<Live>,
        form: SnapshotForm,
        stall_deadline: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Subscription {
            session,
            live,
            form,
            stall_deadline,
            snapshot_cost: AtomicU64::new(0),
            behind_logged: AtomicBool::new(false),
            behind: AtomicBool::new(false),
            behind_streak: AtomicU32::new(0),
            screens_only: false,
            owes_history: AtomicBool::new(false),
            metrics,
        }
    }

    /// Resyncs for being behind send the screen alone, a few KB where the screen with a
    /// flood's scrollback is tens: a viewer slower than the flood has fewer bytes to read
    /// before each screen, the last one included. The driver must then call
    /// [`Self::resync_history`] once the viewer has caught up and [`Self::owes_history`]
    /// says so.
    pub fn with_screens_only(mut self) -> Self {
        self.screens_only = true;
        self
    }

    /// Whether the last snapshot sent was a screen alone, so the scrollback is owed.
    pub fn owes_history(&self) -> bool {
        self.owes_history.load(Ordering::Relaxed)
    }

    /// Notes what a snapshot sent to this connection cost, to weigh a backlog against.
    pub fn note_snapshot(&self, bytes: usize) {
        self.snapshot_cost.store(bytes as u64, Ordering::Relaxed);
    }

    /// When the last pump resynced for being behind: the pause to keep before the next.
    pub fn take_behind_pause(&self) -> Option<BehindPause> {
        self.behind.swap(false, Ordering::Relaxed).then(|| {
            BehindPause::after(
                self.behind_streak.load(Ordering::Relaxed),
                self.session.log().head(),
                Instant::now(),
            )
        })
    }

    /// The backlog past which sending the screen costs less than sending the backlog.
    fn resync_backlog(&self) -> u64 {
        RESYNC_BACKLOG_FLOOR.max(self.snapshot_cost.load(Ordering::Relaxed))
    }

    /// Whether a backlog past [`Self::resync_backlog`] means the client cannot keep up. A
    /// viewer the actor writes to directly (plain TCP) has a backlog only once its socket
    /// was full or its task lagged, so its backlog alone says so. One without that path (TLS,
    /// multiplexed) is handed every chunk through its task, which runs only when the actor
    /// yields, a few hundred KiB of a flood later even when the client reads everything at
    /// once: its backlog says so only when its socket made the latest write wait.
    fn slower_than_output<T: Transport>(&self, sink: &Sink<T>) -> bool {
        self.live.is_direct() || sink.waited()
    }

    /// The session followed.
    pub fn session(&self) -> &SessionHandle {
        &self.session
    }

    /// The position shared with the actor.
    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// The next log offset to send.
    pub fn offset(&self) -> u64 {
        self.live.lock().offset
    }

    /// Starts (or restarts) the stream at `offset`.
    pub fn set_offset(&self, offset: u64) {
        self.live.lock().offset = offset;
    }

    /// Bytes that may still be sent before the client acknowledges some.
    pub fn budget_left(&self) -> u64 {
        self.live.lock().budget_left(&self.live)
    }

    /// Whether there is output to send and budget to send it with.
    pub fn has_work(&self) -> bool {
        self.session.log().head() > self.offset() && self.budget_left() > 0
    }

    /// Sends the next batch of output, up to log offset `until`; a connection that fell out of
    /// the log's window gets a snapshot instead, and so does one whose write took past the
    /// stall deadline while output piled up behind it.
    pub async fn pump<T: Transport>(
        &self,
        sink: &mut Sink<T>,
        framing: &impl Framing,
        until: u64,
        scratch: &mut Scratch,
    ) -> std::io::Result<Pumped> {
        let log = self.session.log();
        let offset = self.offset();
        // Without a screen model a resync replays the log: every byte must be sent instead.
        if self.session.has_screen()
            && log.head().saturating_sub(offset) > self.resync_backlog()
            && self.slower_than_output(sink)
        {
            // The screen alone: the scrollback is sent once, when the viewer has caught up.
            let form = if self.screens_only {
                self.form.screen_only()
            } else {
                self.form
            };
            let pumped = self.resync_as(sink, framing, BEHIND, form).await?;
            self.behind.store(true, Ordering::Relaxed);
            let streak = self.behind_streak.load(Ordering::Relaxed);
            self.behind_streak
                .store(streak.saturating_add(1), Ordering::Relaxed);
            return Ok(pumped);
        }
        let head = log.head().min(until);
        let limit = head
            .saturating_sub(offset)
            .min(BATCH_BYTES as u64)
            .min(self.budget_left()) as usize;
        if limit == 0 {
            return Ok(Pumped::Idle);
        }
        scratch.buf.clear();
        // Grown here, not under the log's lock.
        scratch.buf.reserve(limit);
        let next = match log.read(offset, limit, &mut scratch.buf) {
            Ok(next) => next,
            Err(FellBehind) => {
                return self
                    .resync(sink, framing, "fell out of the output window")
                    .await
            }
        };
        scratch.out.clear();
        framing.output::<T>(&mut scratch.out, &scratch.buf);
        let started = Instant::now();
        // One write for the whole batch: a syscall per batch, not per frame.
        sink.write(&scratch.out).await?;
        self.metrics.bytes_out.add(next - offset);
        self.behind_streak.store(0, Ordering::Relaxed);
        {
            let mut st = self.live.lock();
            st.sent += next - offset;
            st.offset = next;
        }
        if started.elapsed() > self.stall_deadline && log.head() > next {
            return self
                .resync(sink, framing, "socket unwritable past the stall deadline")
                .await;
        }
        Ok(Pumped::Sent)
    }

    /// Sends output up to `offset` before something that belongs after it (a size, an exit);
    /// a connection out of flow budget is resynced instead (the snapshot is past `offset`).
    pub async fn catch_up<T: Transport>(
        &self,
        sink: &mut Sink<T>,
        framing: &impl Framing,
        offset: u64,
        scratch: &mut Scratch,
    ) -> std::io::Result<Pumped> {
        while self.offset() < offset {
            let pumped = if self.budget_left() == 0 {
                self.resync(sink, framing, "flow-control budget used up")
                    .await?
            } else {
                self.pump(sink, framing, offset, scratch).await?
            };
            match pumped {
                Pumped::Sent => {}
                done => return Ok(done),
            }
        }
        Ok(Pumped::Sent)
    }

    /// Sends a snapshot of the screen (with its scrollback) now and resumes the stream after
    /// it.
    pub async fn resync<T: Transport>(
        &self,
        sink: &mut Sink<T>,
        framing: &impl Framing,
        why: &str,
    ) -> std::io::Result<Pumped> {
        self.resync_as(sink, framing, why, self.form).await
    }

    /// Resyncs a viewer sent a flood's screens alone, once it has caught up: the snapshot
    /// brings the scrollback back.
    pub async fn resync_history<T: Transport>(
        &self,
        sink: &mut Sink<T>,
        framing: &impl Framing,
    ) -> std::io::Result<Pumped> {
        self.resync(sink, framing, HISTORY).await
    }

    async fn resync_as<T: Transport>(
        &self,
        sink: &mut Sink<T>,
        framing: &impl Framing,
        why: &str,
        form: SnapshotForm,
    ) -> std::io::Result<Pumped> {
        let resync = match self.session.resync(form).await {
            Ok(Ok(resync)) => resync,
            Ok(Err(failed)) => {
                warn!(session = %self.session.id(), why, "cannot resync viewer: {failed}");
                return Ok(Pumped::ScreenFailed);
            }
            Err(_) => return Ok(Pumped::Gone),
        };
        if (why == BEHIND || why == HISTORY) && self.behind_logged.swap(true, Ordering::Relaxed) {
            // Routine for a viewer slower than a flood (many a second): logged once.
            debug!(session = %self.session.id(), why, "resyncing viewer with a snapshot");
        } else {
            info!(session = %self.session.id(), why, "resyncing viewer with a snapshot");
        }
        self.metrics.resyncs.inc();
        if let Some(snapshot) = &resync.snapshot {
            // A screen alone says little of what a resync costs.
            if form.scrollback {
                self.note_snapshot(snapshot.bytes.len());
            }
            send_snapshot(&self.metrics, sink, framing, &snapshot.bytes).await?;
        }
        self.owes_history.store(
            !form.scrollback && resync.snapshot.is_some(),
            Ordering::Relaxed,
        );
        self.set_offset(resync.offset);
        Ok(Pumped::Sent)
    }
}

/// Writes a snapshot, framed for the connection, in one write; counts it in `metrics`.
pub async fn send_snapshot<T: Transport>(
    metrics: &Metrics,
    sink: &mut Sink<T>,
    framing: &impl Framing,
    packed: &[u8],
) -> WriteResult {
    metrics.snapshots.inc();
    let mut out = Vec::with_capacity(packed.len() + packed.len() / 512 + 64);
    framing.snapshot::<T>(&mut out, packed);
    sink.write(&out).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each resync for being behind in a row doubles the pause, up to the longest.
    #[test]
    fn the_pause_grows_with_the_streak_up_to_the_longest() {
        let now = Instant::now();
        let lengths: Vec<Duration> = (1..=6)
            .map(|streak| BehindPause::after(streak, 0, now).until - now)
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(
            lengths,
            [ms(50), ms(100), ms(200), ms(250), ms(250), ms(250)]
        );
        assert_eq!(
            BehindPause::after(u32::MAX, 0, now).until - now,
            MAX_BEHIND_PAUSE
        );
    }

    /// The pause ends at the first check that finds no new output (the flood is over: its
    /// last screen goes at once), and at its end while output keeps coming.
    #[test]
    fn the_pause_ends_when_the_output_stops_or_at_its_end() {
        let now = Instant::now();
        let mut pause = BehindPause::after(4, 1000, now);
        assert_eq!(pause.next_check(), now + QUIET_STEP);
        let mut at = now;
        let mut head = 1000;
        while pause.check_at(head + 1, at + QUIET_STEP) {
            at += QUIET_STEP;
            head += 1;
            assert!(at < now + MAX_BEHIND_PAUSE, "a pause outlasted its end");
            assert_eq!(
                pause.next_check(),
                (at + QUIET_STEP).min(now + MAX_BEHIND_PAUSE)
            );
        }
        assert!(at + QUIET_STEP >= now + MAX_BEHIND_PAUSE, "ended early");

        let mut pause = BehindPause::after(4, 1000, now);
        assert!(
            pause.check_at(2000, now + QUIET_STEP),
            "output came: it goes on"
        );
        assert!(
            !pause.check_at(2000, now + 2 * QUIET_STEP),
            "none came: it ends"
        );
    }
}
