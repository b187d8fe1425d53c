//! The way in for a session's state reports: its capability token (made at creation, kept
//! across live upgrades) and the rate limit on its reports (a token bucket: `hook_rate` a
//! second, bursts of twice that), checked before a report's body is read.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A session's capability token and its reports' rate limit.
#[derive(Debug)]
pub struct StateGate {
    token: String,
    bucket: Mutex<Bucket>,
    rate: f64,
    burst: f64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl StateGate {
    /// `token`, with `rate` reports a second (bursts of twice as many).
    pub fn new(token: String, rate: usize) -> Self {
        let rate = rate.max(1) as f64;
        StateGate {
            token,
            bucket: Mutex::new(Bucket {
                tokens: 2.0 * rate,
                at: Instant::now(),
            }),
            rate,
            burst: 2.0 * rate,
        }
    }

    /// The token (compared in constant time by `Auth`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Takes one report's place at `now`; when there is none, how long until there is.
    pub fn admit(&self, now: Instant) -> Result<(), Duration> {
        // Each update is whole before anything can panic: a poisoned bucket is still sound.
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_the_rate() {
        let gate = StateGate::new("t".into(), 20);
        let t0 = Instant::now();
        for i in 0..40 {
            assert!(gate.admit(t0).is_ok(), "report {i} of the burst");
        }
        let wait = gate.admit(t0).unwrap_err();
        assert!(wait <= Duration::from_millis(50), "{wait:?}");
        assert!(gate.admit(t0 + Duration::from_millis(50)).is_ok());
        assert!(gate.admit(t0 + Duration::from_millis(50)).is_err());
        // A quiet second refills twenty, not more than the burst.
        let later = t0 + Duration::from_secs(10);
        assert_eq!((0..100).filter(|_| gate.admit(later).is_ok()).count(), 40);
    }
}
