//! Times as the protocol writes them: RFC 3339, UTC, to the second (and, for the audit trail,
//! to the millisecond).
//!
//! Written by hand from 1970 on: every status, session list entry and state change carries
//! one or two of these, and the `time` crate's general formatter cost about 2,650 instructions
//! a call where this costs about 750, most of them the string's allocation (callgrind, 200
//! viewers joining and leaving). Times before 1970 (a file's modification time can be
//! anything) go through `time`; times past 9999, which RFC 3339 cannot write, are written as
//! its last second (`time` panicked on them, and a recording's file time reaches this).

use std::time::{SystemTime, UNIX_EPOCH};

/// The last second of 9999-12-31: past it a year has five digits.
const LAST_FAST_SECOND: u64 = 253_402_300_799;

/// RFC 3339 UTC, second precision.
pub fn rfc3339(t: SystemTime) -> String {
    match civil(t) {
        Some(head) => {
            let mut s = String::with_capacity(20);
            s.push_str(head.as_str());
            s.push('Z');
            s
        }
        None => slow(
            t,
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z"),
        ),
    }
}

/// RFC 3339 UTC with milliseconds (`…T12:00:00.123Z`).
pub fn rfc3339_millis(t: SystemTime) -> String {
    match (civil(t), t.duration_since(UNIX_EPOCH)) {
        (Some(head), Ok(since)) => {
            let mut s = String::with_capacity(24);
            s.push_str(head.as_str());
            s.push('.');
            let ms = if since.as_secs() > LAST_FAST_SECOND {
                999
            } else {
                since.subsec_millis()
            };
            push_digits(&mut s, ms, 3);
            s.push('Z');
            s
        }
        _ => slow(
            t,
            time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ),
        ),
    }
}

/// `t`, before 1970, through `time` (empty past its year -9999).
fn slow(t: SystemTime, fmt: &[time::format_description::BorrowedFormatItem<'_>]) -> String {
    let before = UNIX_EPOCH.duration_since(t).unwrap_or_default();
    time::Duration::try_from(before)
        .ok()
        .and_then(|d| time::OffsetDateTime::UNIX_EPOCH.checked_sub(d))
        .and_then(|at| at.format(fmt).ok())
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SS` of `t` in UTC, for the years 1970 to 9999.
struct Civil([u8; 19]);

impl Civil {
    fn as_str(&self) -> &str {
        // Only ASCII digits and separators are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

fn civil(t: SystemTime) -> Option<Civil> {
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs();
    let secs = secs.min(LAST_FAST_SECOND);
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `civil_from_days`,
    // shifted so that eras start on March 1st of 0000; no negative days here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let mut out = *b"0000-00-00T00:00:00";
    put(&mut out[0..4], year);
    put(&mut out[5..7], month);
    put(&mut out[8..10], day);
    put(&mut out[11..13], of_day / 3600);
    put(&mut out[14..16], of_day / 60 % 60);
    put(&mut out[17..19], of_day % 60);
    Some(Civil(out))
}

/// Writes `n`'s last `into.len()` decimal digits into `into`.
fn put(into: &mut [u8], mut n: u64) {
    for slot in into.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

fn push_digits(s: &mut String, n: u32, width: usize) {
    let mut buf = [0u8; 10];
    let digits = &mut buf[..width];
    put(digits, u64::from(n));
    s.push_str(std::str::from_utf8(digits).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn by_time(t: SystemTime, millis: bool) -> String {
        let t = time::OffsetDateTime::from(t);
        if millis {
            let fmt = time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            );
            t.format(&fmt).unwrap_or_default()
        } else {
            let fmt =
                time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
            t.format(&fmt).unwrap_or_default()
        }
    }

    #[test]
    fn known_instants() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_777_636_800)), "2026-05-01T12:00:00Z");
        assert_eq!(rfc3339(at(LAST_FAST_SECOND)), "9999-12-31T23:59:59Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_777_636_800_123);
        assert_eq!(rfc3339_millis(t), "2026-05-01T12:00:00.123Z");
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn outside_the_fast_years_the_time_crate_answers() {
        let before = UNIX_EPOCH - Duration::from_millis(1500);
        assert_eq!(rfc3339(before), by_time(before, false));
        assert_eq!(rfc3339(before), "1969-12-31T23:59:58Z");
        assert_eq!(rfc3339_millis(before), by_time(before, true));
        let far = UNIX_EPOCH - Duration::from_secs(400_000_000_000);
        assert_eq!(rfc3339(far), "", "past year -9999");
    }

    #[test]
    fn past_9999_is_its_last_second() {
        for secs in [LAST_FAST_SECOND + 1, u64::MAX / 4] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(rfc3339(t), "9999-12-31T23:59:59Z");
            assert_eq!(rfc3339_millis(t), "9999-12-31T23:59:59.999Z");
        }
    }

    proptest! {
        /// Every second and millisecond of the fast years reads as the `time` crate writes it.
        #[test]
        fn the_same_as_the_time_crate(ms in 0u64..=(LAST_FAST_SECOND * 1000 + 999)) {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            prop_assert_eq!(rfc3339(t), by_time(t, false));
            prop_assert_eq!(rfc3339_millis(t), by_time(t, true));
        }
    }
}
