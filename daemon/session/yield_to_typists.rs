//! Sessions printing a lot yield to typists elsewhere: while someone is typing in one
//! session, a session whose program is printing a lot gives its tokio worker back after each
//! long read, so that key and its echo do not wait behind a whole burst of another session's
//! output. The keys are the daemon's own ([`RecentKeys`]).
//!
//! Why only then: a yield hands the worker to whatever is queued, which during a flood is
//! mostly the flooding session's own viewer tasks. Each of them then keeps up in small pieces
//! and is sent every byte, where without the yields it falls behind and is resynced with one
//! snapshot. Measured with a yield after every long read, always: a 50 MiB flood to 100
//! viewers took 5.5–6.7 × a bare PTY (5.3 GB sent) against 0.7–1.3 × (under 0.1 GB). So a
//! session keeps its worker unless someone elsewhere is waiting for an echo.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

/// A read at least this long is output nobody is waiting on key by key (an echo or a prompt is
/// far shorter), so a turn may follow it.
pub const LONG_READ: usize = 1024;
/// How long after a key its session counts as someone typing.
pub const TYPING: Duration = Duration::from_secs(2);

/// Bits of a key entry that hold the time of the key, in ms since the daemon's
/// [`RecentKeys`] were made; the bits above hold the session's tag.
const TIME_BITS: u32 = 40;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;

/// The latest keys typed into a daemon's sessions: made by its registry, shared by every
/// session it starts or adopts (two daemons in one process never see each other's keys).
#[derive(Debug)]
pub struct RecentKeys {
    /// The latest key, and the latest of a different session before it: `tag << 40 | ms`, 0
    /// for none. Two, so that a flooding session that is typed into itself still sees the
    /// other typist. Updated without a lock: a torn pair costs at most one turn given or not
    /// given.
    keys: [AtomicU64; 2],
    /// Where the keys' times count from.
    epoch: Instant,
}

impl Default for RecentKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl RecentKeys {
    /// No key typed yet.
    pub fn new() -> Self {
        Self {
            keys: [AtomicU64::new(0), AtomicU64::new(0)],
            epoch: Instant::now(),
        }
    }

    /// Notes that someone typed into `session` just now.
    pub fn typed(&self, session: Uuid) {
        note(&self.keys, tag(session), self.now_ms());
    }

    /// Whether someone has typed into a session other than `session` in the last [`TYPING`].
    pub fn typing_elsewhere(&self, session: Uuid) -> bool {
        elsewhere(&self.keys, tag(session), self.now_ms())
    }

    fn now_ms(&self) -> u64 {
        // 40 bits of milliseconds last 34 years.
        (self.epoch.elapsed().as_millis() as u64) & TIME_MASK
    }
}

/// A session's short name in the keys: 23 bits of its id, never 0.
fn tag(session: Uuid) -> u64 {
    ((session.as_u64_pair().1 & 0x3F_FFFF) << 1) | 1
}

fn note(keys: &[AtomicU64; 2], tag: u64, now: u64) {
    let latest = keys[0].load(Ordering::Relaxed);
    if latest != 0 && latest >> TIME_BITS != tag {
        keys[1].store(latest, Ordering::Relaxed);
    }
    keys[0].store(tag << TIME_BITS | now, Ordering::Relaxed);
}

fn elsewhere(keys: &[AtomicU64; 2], tag: u64, now: u64) -> bool {
    let window = TYPING.as_millis() as u64;
    keys.iter().any(|key| {
        let key = key.load(Ordering::Relaxed);
        key != 0 && key >> TIME_BITS != tag && now.saturating_sub(key & TIME_MASK) < window
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use uuid::Uuid;

    use super::{elsewhere, note, tag, RecentKeys, TIME_BITS};

    /// Another session's key counts for [`TYPING`], a session's own never does, and a key
    /// in a third session keeps the second one's in view.
    #[test]
    fn a_key_counts_for_the_other_sessions_only() {
        let keys = [AtomicU64::new(0), AtomicU64::new(0)];
        let (a, b, c) = (3, 5, 7);
        assert!(!elsewhere(&keys, a, 0), "nobody has typed");
        note(&keys, a, 1000);
        assert!(!elsewhere(&keys, a, 1000), "a session's own key");
        assert!(elsewhere(&keys, b, 1000), "another session's key");
        assert!(elsewhere(&keys, b, 2999), "still within the window");
        assert!(!elsewhere(&keys, b, 3000), "a key older than the window");
        note(&keys, b, 1500);
        assert!(
            elsewhere(&keys, a, 1500) && elsewhere(&keys, b, 1500),
            "two typists"
        );
        note(&keys, b, 1600);
        assert!(
            elsewhere(&keys, b, 1600),
            "b's second key keeps a's in view"
        );
        note(&keys, c, 1700);
        assert!(elsewhere(&keys, c, 1700) && elsewhere(&keys, a, 1700));
    }

    /// Two daemons in one process (two registries' keys) never see each other's keys.
    #[test]
    fn each_daemon_has_its_own_keys() {
        let (one, two) = (RecentKeys::new(), RecentKeys::new());
        let (a, b) = (Uuid::from_u64_pair(0, 1), Uuid::from_u64_pair(0, 2));
        one.typed(a);
        assert!(one.typing_elsewhere(b));
        assert!(!one.typing_elsewhere(a));
        assert!(!two.typing_elsewhere(b), "the other daemon's key");
    }

    #[test]
    fn tags_are_never_0_and_fit_above_the_time() {
        for _ in 0..1000 {
            let t = tag(Uuid::new_v4());
            assert!(t != 0 && t < 1 << (64 - TIME_BITS));
        }
    }
}
