//! Replies the viewers owe: every browser's xterm.js answers the program's terminal queries
//! too, but the daemon has already answered each (see [`crate::term::queries`]) and a reply must
//! reach the program exactly once, so the same answers coming from viewers are dropped.
//!
//! A viewer's reply is dropped only while a query it was sent awaits that viewer's answer (one
//! per query, within [`REPLY_WINDOW`]): Shift+F3 is `ESC[1;2R`, which looks like a cursor
//! report, and at any other time it is a keystroke and passes.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::term::queries::{find_reply, Query};

/// How long a viewer's reply to a query is expected (and dropped when it comes).
pub const REPLY_WINDOW: Duration = Duration::from_secs(3);
/// Most queries remembered per viewer; a flood of queries cannot grow memory.
const MAX_PENDING: usize = 64;

/// Replies still expected from one viewer, oldest first.
#[derive(Debug, Default)]
pub struct Expected {
    pending: VecDeque<(Query, Instant)>,
}

impl Expected {
    /// The viewer was sent `query` now.
    pub fn expect(&mut self, query: Query, now: Instant) {
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back((query, now + REPLY_WINDOW));
    }

    /// Removes from `input` the replies this viewer owed (one per pending query), and returns
    /// what is left for the program.
    pub fn filter(&mut self, input: &[u8], now: Instant) -> Vec<u8> {
        self.pending.retain(|&(_, deadline)| deadline > now);
        let mut out = input.to_vec();
        let mut i = 0;
        while i < self.pending.len() {
            let query = self.pending[i].0;
            match find_reply(&out, query) {
                Some(range) => {
                    out.drain(range);
                    self.pending.remove(i);
                }
                None => i += 1,
            }
        }
        out
    }

    /// Whether any reply is still expected.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Expected, REPLY_WINDOW};
    use crate::term::queries::Query;

    #[test]
    fn drops_one_expected_reply_per_query() {
        let now = Instant::now();
        let mut e = Expected::default();
        e.expect(Query::CursorPosition, now);
        assert_eq!(e.filter(b"\x1b[5;9R", now), b"");
        // The same bytes again are a keystroke (Shift+F3 in xterm).
        assert_eq!(e.filter(b"\x1b[1;2R", now), b"\x1b[1;2R");
    }

    #[test]
    fn keeps_surrounding_input_and_other_replies() {
        let now = Instant::now();
        let mut e = Expected::default();
        e.expect(Query::PrimaryAttributes, now);
        e.expect(Query::CursorPosition, now);
        assert_eq!(e.filter(b"ab\x1b[3;4Rcd\x1b[?1;2cef", now), b"abcdef");
        assert!(e.is_empty());
        e.expect(Query::SecondaryAttributes, now);
        assert_eq!(e.filter(b"\x1b[?1;2c", now), b"\x1b[?1;2c");
        assert_eq!(e.filter(b"\x1b[>0;276;0c", now), b"");
    }

    #[test]
    fn expectations_expire() {
        let now = Instant::now();
        let mut e = Expected::default();
        e.expect(Query::CursorPosition, now);
        let later = now + REPLY_WINDOW + Duration::from_millis(1);
        assert_eq!(e.filter(b"\x1b[1;2R", later), b"\x1b[1;2R");
    }
}
