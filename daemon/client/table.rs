//! `ptyhub ls`: the sessions as a table a person reads (number, name, assistant, viewers,
//! size, state and for how long, age).

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::Session;

/// The sessions as aligned columns, by number, with a header line.
pub fn render(sessions: &[Session], now: OffsetDateTime) -> String {
    let mut sorted: Vec<&Session> = sessions.iter().collect();
    sorted.sort_by_key(|s| s.num);
    let mut rows = vec![[
        "NUM".to_owned(),
        "NAME".to_owned(),
        "ASSISTANT".to_owned(),
        "VIEWERS".to_owned(),
        "SIZE".to_owned(),
        "STATE".to_owned(),
        "AGE".to_owned(),
    ]];
    for s in sorted {
        let state = match (s.alive, s.exit_code, s.state.as_deref()) {
            (false, Some(code), _) => format!("exited ({code})"),
            (false, None, _) => "exited".to_owned(),
            // A daemon without states.
            (true, _, None) => "running".to_owned(),
            (true, _, Some(state)) => {
                let since = s
                    .state_since_ms
                    .and_then(|ms| i64::try_from(ms).ok())
                    .and_then(|ms| {
                        OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
                    });
                match since {
                    Some(t) => format!("{state} {}", age(now - t)),
                    None => state.to_owned(),
                }
            }
        };
        let age = OffsetDateTime::parse(&s.created_at, &Rfc3339)
            .map(|t| age(now - t))
            .unwrap_or_else(|_| "?".to_owned());
        rows.push([
            s.num.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            if s.name.is_empty() {
                "-".to_owned()
            } else {
                s.name.clone()
            },
            s.assistant.clone(),
            s.viewers.to_string(),
            format!("{}x{}", s.cols, s.rows),
            state,
            age,
        ]);
    }
    aligned(&rows)
}

/// Rows as a table: each column as wide as its widest cell, two spaces between columns,
/// no trailing spaces.
pub(super) fn aligned<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A duration as people say it: 42s, 5m, 3h, 2d.
pub(super) fn age(d: time::Duration) -> String {
    let s = d.whole_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn a_table_with_aligned_columns() {
        let session = |num: u8, name: &str, alive, exit_code, state: Option<&str>| Session {
            id: Uuid::new_v4(),
            num: Some(num),
            name: name.to_owned(),
            assistant: "shell".to_owned(),
            viewers: 2,
            cols: 80,
            rows: 24,
            alive,
            exit_code,
            created_at: "2026-11-24T10:00:00Z".to_owned(),
            state: state.map(str::to_owned),
            // 2026-11-24T12:28:00Z
            state_since_ms: Some(1_795_523_280_000),
            reason: String::new(),
        };
        let now = OffsetDateTime::parse("2026-11-24T12:30:00Z", &Rfc3339).expect("time");
        let table = render(
            &[
                session(2, "", false, Some(3), Some("exited")),
                session(1, "review", true, None, Some("waiting")),
                session(3, "old", true, None, None),
            ],
            now,
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "NUM  NAME    ASSISTANT  VIEWERS  SIZE   STATE       AGE"
        );
        assert_eq!(
            lines[1],
            "1    review  shell      2        80x24  waiting 2m  2h"
        );
        assert_eq!(
            lines[2],
            "2    -       shell      2        80x24  exited (3)  2h"
        );
        assert_eq!(
            lines[3],
            "3    old     shell      2        80x24  running     2h"
        );
    }
}
