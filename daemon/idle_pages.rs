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
//! Quiet means the process used less than [`QUIET_CPU`] of CPU time over one check's
//! interval, so a session that prints, a viewer that types or a client that polls keeps the
//! pages mapped. Checks start [`FIRST_CHECK`] apart and double while nothing happens, up to
//! [`LONGEST_CHECK`], so an idle daemon wakes for this once a minute.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::metrics::Metrics;
use crate::sys::{drop_read_only, read_only_segments};

/// Less CPU than this over a check's interval is quiet.
const QUIET_CPU: Duration = Duration::from_millis(2);

/// The interval after the daemon was seen working.
const FIRST_CHECK: Duration = Duration::from_secs(2);

/// The longest interval, reached after a minute of quiet: code mapped by work that follows is
/// let go of within about a minute of the work's end.
const LONGEST_CHECK: Duration = Duration::from_secs(60);

/// Checks the daemon's CPU time until `shutdown`; after work followed by a quiet interval, lets
/// go of the read-only pages, counted in `metrics`.
pub async fn release_when_quiet(shutdown: CancellationToken, metrics: Arc<Metrics>) {
    let segments = read_only_segments();
    let mut last = cpu_time();
    let mut interval = FIRST_CHECK;
    // Start-up mapped its code: the first quiet interval lets it go.
    let mut worked = true;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let now = cpu_time();
        let used = now.saturating_sub(last);
        last = now;
        match Quiet::after(used) {
            Quiet::No => {
                worked = true;
                interval = FIRST_CHECK;
            }
            Quiet::Yes => {
                if std::mem::take(&mut worked) {
                    release(&segments);
                    metrics.idle_page_releases.inc();
                    // The release's own work is not the daemon's.
                    last = cpu_time();
                }
                interval = (interval * 2).min(LONGEST_CHECK);
            }
        }
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

/// Lets go of every segment's pages; one the kernel refuses is skipped (and logged).
fn release(segments: &[crate::sys::Pages]) {
    for &pages in segments {
        if let Err(e) = drop_read_only(pages) {
            debug!(?pages, "read-only pages kept: {e}");
        }
    }
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
    fn quiet_is_less_than_the_threshold() {
        assert_eq!(Quiet::after(Duration::ZERO), Quiet::Yes);
        assert_eq!(
            Quiet::after(QUIET_CPU - Duration::from_nanos(1)),
            Quiet::Yes
        );
        assert_eq!(Quiet::after(QUIET_CPU), Quiet::No);
    }
}
