//! The code an idle daemon keeps mapped: once it has been quiet for a while, it lets go of its
//! mapping of every read-only page of its program and libraries (code, constants, unwind
//! tables); whatever runs next maps back the pages it needs.
//!
//! Why: the kernel maps 64 KiB around each code page a process touches, so starting up,
//! creating a session and serving a viewer leave most of the binary's 11 MB of code mapped
//! (9 MiB measured), of which an idle daemon runs none, and every mapped page counts in its
//! RSS and PSS. The pages stay in the page cache: what changes is that the daemon no longer
//! holds them, so under memory pressure they are reclaimed before anything in use (the
//! kernel protects mapped code), and the daemon's footprint is what it uses. The cost is the
//! next request's minor faults as its code is mapped back: about 120 for a key typed into a
//! shell, a few hundred microseconds once (benches/RESULTS.md).
//!
//! When: the runtime tells [`woke`] each time a worker thread wakes up (and so does a screen
//! thread when it parks its model, which no worker wakes for); the first
//! wake after a release starts a watch of the process's CPU time, every [`INTERVAL`], and
//! [`QUIET_INTERVALS`] in a row in which it used less than [`QUIET_CPU`] each (a session that
//! prints, a viewer that types or a client that polls uses more) end it with a release, if
//! there is enough to let go of ([`WORTH_MAPPED`], [`WORTH_CPU`]). So the pages go two to three
//! seconds after the work stops, and a daemon with nothing to do is never woken for this. After a watch that
//! found nothing worth letting go (a timer that fired, a health check), the next waits
//! [`RESPITE`], so a daemon woken often for little is not watched over and over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::metrics::Metrics;
use crate::sys::{drop_read_only, read_only_segments};

/// Less CPU than this over an interval is quiet.
const QUIET_CPU: Duration = Duration::from_millis(2);

/// How often the CPU time is read while watching (a wake-up a second, only between the work's
/// end and the release).
const INTERVAL: Duration = Duration::from_secs(1);

/// Quiet intervals in a row before a release: 2-3 s after the work's end, when what the work
/// leaves behind has been let go of too (a parked screen after 1 s, the output log's window
/// after 2 s, the recorder's buffers after 1 s), so the allocator can return it (what is let
/// go of later, jemalloc's background thread returns within `dirty_decay_ms`). Two of 1 s
/// rather than two of 2 s: a flood's memory is back sooner (issue 39: 10 s after its end).
const QUIET_INTERVALS: u32 = 2;

/// What makes a release worth it: this much mapped from files since the last one (code a few
/// keystrokes ran maps megabytes, 64 KiB at a time), or this much CPU used (a flood, whose
/// freed memory the allocator holds).
const WORTH_MAPPED: u64 = 256 * 1024;
const WORTH_CPU: Duration = Duration::from_millis(50);

/// After a watch that let nothing go, the least time before the next. Short: the timers a
/// release leaves behind (a log letting go of its window 2 s after the output) end such a
/// watch, and work that comes during the respite waits for its end to be let go of (with
/// 30 s, a flood's memory was still held 10 s after it in one run of six).
const RESPITE: Duration = Duration::from_secs(5);

/// What else a release lets go of: the allocator's free pages, set by the binary (whose
/// allocator it is) before the daemon starts.
static ALLOCATOR_RELEASE: OnceLock<fn()> = OnceLock::new();

/// Whether a worker woke since the last watch ended (start-up counts).
static WOKE: AtomicBool = AtomicBool::new(true);

/// Wakes the watch when [`WOKE`] is set.
static WAKE: Notify = Notify::const_new();

/// Has each release also call `release`, which gives the allocator's free pages back to the
/// system (the binary's allocator keeps them a while for reuse, which an idle daemon has none
/// of). Only the first call counts.
pub fn also_release(release: fn()) {
    let _ = ALLOCATOR_RELEASE.set(release);
}

/// A thread of the daemon woke up to work: the runtime's workers (`on_thread_unpark`), and the
/// daemon's own threads for work no worker wakes for (a screen thread parking its model). One
/// relaxed load once the watch knows (every wake but the first after a release).
pub fn woke() {
    if !WOKE.load(Ordering::Relaxed) && !WOKE.swap(true, Ordering::Relaxed) {
        WAKE.notify_one();
    }
}

/// Until `shutdown`: after work, once an interval is quiet, lets go of the read-only pages
/// (and the allocator's free ones), counted in `metrics`.
pub async fn release_when_quiet(shutdown: CancellationToken, metrics: Arc<Metrics>) {
    let segments = read_only_segments();
    // What the daemon had used and mapped after the last release (none yet: start-up's).
    let mut released = Usage::default();
    loop {
        while !WOKE.load(Ordering::Relaxed) {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = WAKE.notified() => {}
            }
        }
        let (mut last, mut quiet) = (cpu_time(), 0);
        while quiet < QUIET_INTERVALS {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(INTERVAL) => {}
            }
            let now = cpu_time();
            quiet = match Quiet::after(now.saturating_sub(last)) {
                Quiet::Yes => quiet + 1,
                Quiet::No => 0,
            };
            last = now;
        }
        if Usage::now().worth_releasing_since(&released) {
            // Wakes from here on start the next watch.
            WOKE.store(false, Ordering::Relaxed);
            release(&segments);
            metrics.idle_page_releases.inc();
            // The release's own work is not the daemon's.
            released = Usage::now();
            continue;
        }
        // Too little to let go of: rest (this task's own timer wakes a worker too), then
        // watch again at once if the daemon worked meanwhile, else at the next wake.
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RESPITE) => {}
        }
        let worked = Usage::now().worth_releasing_since(&released);
        WOKE.store(worked, Ordering::Relaxed);
    }
}

/// Whether an interval in which the process used `used` of CPU was quiet.
#[derive(Debug, PartialEq, Eq)]
enum Quiet {
    Yes,
    No,
}

impl Quiet {
    fn after(used: Duration) -> Quiet {
        if used < QUIET_CPU {
            Quiet::Yes
        } else {
            Quiet::No
        }
    }
}

/// Lets go of every segment's pages (one the kernel refuses is skipped, and logged), then of
/// the allocator's free pages.
fn release(segments: &[crate::sys::Pages]) {
    for &pages in segments {
        if let Err(e) = drop_read_only(pages) {
            debug!(?pages, "read-only pages kept: {e}");
        }
    }
    release_allocator();
}

/// Gives the allocator's free pages back to the system now (nothing until the binary has said
/// how, [`also_release`]): for a part that has just freed much at rest (a parked screen).
pub fn release_allocator() {
    if let Some(release) = ALLOCATOR_RELEASE.get() {
        release();
    }
}

/// The process's CPU time and its memory mapped from files, at one moment.
#[derive(Debug, Default)]
struct Usage {
    cpu: Duration,
    mapped: u64,
}

impl Usage {
    fn now() -> Usage {
        Usage {
            cpu: cpu_time(),
            mapped: mapped_from_files(),
        }
    }

    /// Whether enough was used or mapped since `then` to make a release worth it.
    fn worth_releasing_since(&self, then: &Usage) -> bool {
        self.mapped.saturating_sub(then.mapped) >= WORTH_MAPPED
            || self.cpu.saturating_sub(then.cpu) >= WORTH_CPU
    }
}

/// Bytes of the process's memory mapped from files (the `shared` pages of /proc/self/statm):
/// its code, constants and libraries as far as they are mapped; 0 if it cannot be read.
fn mapped_from_files() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}

/// The process's CPU time so far, all threads.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program's own code is among the segments, and dropping its pages loses nothing:
    /// the code runs on, and a read-only constant reads the same, after the release.
    #[test]
    fn segments_hold_the_code_and_survive_a_release() {
        static CONSTANT: [u8; 16] = *b"ptyhub read-only";
        let segments = read_only_segments();
        let code = segments_hold_the_code_and_survive_a_release as *const () as usize;
        let within = |at: usize| segments.iter().any(|p| p.start <= at && at < p.end);
        assert!(
            within(code),
            "the test's own code is in no segment: {segments:?}"
        );
        assert!(
            within(CONSTANT.as_ptr() as usize),
            "the constant is in no segment"
        );
        let page = rustix::param::page_size();
        assert!(segments
            .iter()
            .all(|p| p.start % page == 0 && p.end % page == 0 && p.start < p.end));
        release(&segments);
        assert_eq!(std::hint::black_box(&CONSTANT), b"ptyhub read-only");
        assert_eq!(format!("{}", 6 * 7), "42");
    }

    #[test]
    fn a_release_is_worth_it_after_mapping_or_working_enough() {
        let then = Usage {
            cpu: Duration::from_secs(1),
            mapped: 4 << 20,
        };
        let mut now = Usage {
            cpu: then.cpu + WORTH_CPU / 2,
            mapped: then.mapped + WORTH_MAPPED / 2,
        };
        assert!(!now.worth_releasing_since(&then));
        now.mapped = then.mapped + WORTH_MAPPED;
        assert!(now.worth_releasing_since(&then));
        now.mapped = then.mapped;
        now.cpu = then.cpu + WORTH_CPU;
        assert!(now.worth_releasing_since(&then));
        // Less mapped than before (a release since) is not more.
        now.cpu = then.cpu;
        now.mapped = 0;
        assert!(!now.worth_releasing_since(&then));
        assert!(mapped_from_files() > 0);
    }

    #[test]
    fn quiet_is_less_than_the_threshold() {
        assert_eq!(Quiet::after(Duration::ZERO), Quiet::Yes);
        assert_eq!(
            Quiet::after(QUIET_CPU - Duration::from_nanos(1)),
            Quiet::Yes
        );
        assert_eq!(Quiet::after(QUIET_CPU), Quiet::No);
    }
}
