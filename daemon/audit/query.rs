//! What `GET /api/audit` asks for (filters by user, session, action and time, and how many),
//! and reading a trail file against it, newest line first: pure, so it is fuzzed and
//! property-tested. A damaged line (cut short by a full disk, edited by hand) is skipped.

use uuid::Uuid;

use super::event::Event;

/// Events returned when the query names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// Most events one query returns.
pub const MAX_LIMIT: usize = 1000;

/// A filter on the trail; every field that is set must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The event's `user`, exactly.
    pub user: Option<String>,
    /// The event's `session`.
    pub session: Option<Uuid>,
    /// The event's `action`, exactly.
    pub action: Option<String>,
    /// At or after this instant (nanoseconds since the epoch).
    pub since: Option<i128>,
    /// At or before this instant (nanoseconds since the epoch).
    pub until: Option<i128>,
    /// Most events returned, newest first.
    pub limit: usize,
}

impl Default for Query {
    fn default() -> Self {
        Self {
            user: None,
            session: None,
            action: None,
            since: None,
            until: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl Query {
    /// The query a request's decoded query string asks for; why not, for a bad filter.
    /// Parameters it does not know are ignored, as every endpoint does.
    pub fn parse(pairs: &[(String, String)]) -> Result<Self, String> {
        let mut q = Query::default();
        for (key, value) in pairs {
            match key.as_str() {
                "user" => q.user = Some(value.clone()),
                "action" => q.action = Some(value.clone()),
                "session" => {
                    q.session = Some(Uuid::parse_str(value).map_err(|_| {
                        format!("session must be a session's uuid, not {:?}", shown(value))
                    })?)
                }
                "since" => q.since = Some(instant_param("since", value)?),
                "until" => q.until = Some(instant_param("until", value)?),
                "limit" => {
                    q.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "limit must be a whole number from 1 to {MAX_LIMIT}, not {:?}",
                                shown(value)
                            )
                        })?
                }
                _ => {}
            }
        }
        Ok(q)
    }

    /// Whether `event` passes every filter (an event whose time cannot be read passes no
    /// time filter).
    pub fn matches(&self, event: &Event) -> bool {
        if self.user.as_ref().is_some_and(|u| *u != event.user)
            || self.action.as_ref().is_some_and(|a| *a != event.action)
            || self.session.is_some_and(|s| event.session != Some(s))
        {
            return false;
        }
        if self.since.is_none() && self.until.is_none() {
            return true;
        }
        let Some(at) = instant(&event.ts) else {
            return false;
        };
        self.since.is_none_or(|s| at >= s) && self.until.is_none_or(|u| at <= u)
    }

    /// Adds to `found` the events of `file` (a trail file's bytes, oldest line first) that
    /// match, newest first, until `found` holds [`Query::limit`]. Damaged lines are skipped.
    pub fn scan(&self, file: &[u8], found: &mut Vec<Event>) {
        for line in file.rsplit(|b| *b == b'\n') {
            if found.len() >= self.limit {
                return;
            }
            if line.is_empty() {
                continue;
            }
            if let Ok(event) = serde_json::from_slice::<Event>(line) {
                if self.matches(&event) {
                    found.push(event);
                }
            }
        }
    }
}

/// At most 40 characters of what a client sent, for a message.
fn shown(value: &str) -> String {
    value.chars().take(40).collect()
}

fn instant_param(name: &str, value: &str) -> Result<i128, String> {
    instant(value).ok_or_else(|| {
        format!(
            "{name} must be an RFC 3339 time such as 2026-05-01T12:00:00Z or \
             2026-05-01T14:00:00.5+02:00, not {:?}",
            shown(value)
        )
    })
}

/// The regular expression [`instant`] reads (the OpenAPI document's `since` and `until`):
/// RFC 3339 with an upper-case `T` and `Z`, fractions of a second up to nanoseconds.
pub const INSTANT_PATTERN: &str = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T\
([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

/// An RFC 3339 time (as [`INSTANT_PATTERN`] says) as nanoseconds since the epoch. A day past
/// its month's end counts on into the next month, and second 60 into the next minute, so that
/// whatever the pattern admits is a time.
pub fn instant(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits.iter().try_fold(0i64, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let sep = |at: usize, c: u8| b.get(at) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut nanos: i128 = 0;
    if sep(at, b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if !(1..=9).contains(&digits) {
            return None;
        }
        nanos = i128::from(num(at + 1, digits)?) * 10i128.pow(9 - digits as u32);
        at += 1 + digits;
    }
    let offset = match b.get(at..)? {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), ..] if b.len() == at + 6 && sep(at + 3, b':') => {
            let (h, m) = (num(at + 1, 2)?, num(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'-' {
                -minutes
            } else {
                minutes
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60;
    Some(i128::from(secs) * 1_000_000_000 + nanos)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm); a day
/// past the month's end simply counts on.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(q.as_bytes()).into_owned().collect()
    }

    #[test]
    fn instants_agree_with_the_time_crate() {
        use time::format_description::well_known::Rfc3339;
        for s in [
            "1970-01-01T00:00:00Z",
            "2026-05-01T12:00:00.123Z",
            "2026-05-01T14:00:00.5+02:00",
            "1999-12-31T23:59:59.999999999-11:30",
            "2000-02-29T00:00:00Z",
            "0001-01-01T00:00:00Z",
        ] {
            let want = time::OffsetDateTime::parse(s, &Rfc3339).unwrap();
            assert_eq!(instant(s), Some(want.unix_timestamp_nanos()), "{s}");
        }
        for bad in [
            "",
            "2026-05-01",
            "2026-05-01 12:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-05-01T12:00:00",
            "2026-05-01T12:00:00.Z",
            "2026-05-01T12:00:00+0200",
            "2026-05-01t12:00:00z",
            "2026-05-01T12:00:00.1234567890Z",
        ] {
            assert_eq!(instant(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_pattern_is_the_parser() {
        // What the document promises is read, and a few things it does not are refused.
        assert!(instant("2026-02-31T23:59:60Z").is_some());
        assert!(instant("9999-12-31T23:59:59.999999999+23:59").is_some());
        assert!(INSTANT_PATTERN.starts_with('^') && INSTANT_PATTERN.ends_with('$'));
    }

    #[test]
    fn parse_takes_filters_and_refuses_bad_ones() {
        let q = Query::parse(&pairs(
            "user=alice&action=login&limit=5&since=2026-05-01T00:00:00Z&other=x",
        ))
        .unwrap();
        assert_eq!(q.user.as_deref(), Some("alice"));
        assert_eq!(q.limit, 5);
        assert!(q.since.is_some() && q.until.is_none());
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=x",
            "session=nope",
            "until=yesterday",
        ] {
            assert!(Query::parse(&pairs(bad)).is_err(), "{bad}");
        }
        assert_eq!(Query::parse(&[]).unwrap().limit, DEFAULT_LIMIT);
    }

    #[test]
    fn scan_reads_newest_first_and_skips_damage() {
        let line = |action: &str, ts: &str| {
            let mut e = Event::new(action, &super::super::Actor::nobody());
            e.ts = ts.to_owned();
            serde_json::to_string(&e).unwrap()
        };
        let file = format!(
            "{}\n{{broken\n{}\n\u{0}\u{ff}\n{}\n{{\"ts\":",
            line("a", "2026-05-01T00:00:01.000Z"),
            line("b", "2026-05-01T00:00:02.000Z"),
            line("c", "2026-05-01T00:00:03.000Z"),
        );
        let mut found = Vec::new();
        Query::default().scan(file.as_bytes(), &mut found);
        let actions: Vec<&str> = found.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(actions, ["c", "b", "a"]);
        let q = Query::parse(&pairs("until=2026-05-01T00:00:02Z&limit=1")).unwrap();
        let mut found = Vec::new();
        q.scan(file.as_bytes(), &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].action, "b");
    }
}
