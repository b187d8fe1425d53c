//! Terminal queries answered once: the program's questions to its terminal (cursor position,
//! device attributes) are answered by the daemon from the screen model at the exact point of
//! the stream, and the same answers coming from viewers' terminals are dropped.
//!
//! Every browser's xterm.js answers too, but a reply must reach the program exactly once. A
//! viewer's reply is dropped only while a query it was sent awaits that viewer's answer (one
//! per query, within [`REPLY_WINDOW`]): Shift+F3 is `ESC[1;2R`, which looks like a cursor
//! report, and at any other time it is a keystroke and passes.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How long a viewer's reply to a query is expected (and dropped when it comes).
pub const REPLY_WINDOW: Duration = Duration::from_secs(3);
/// Most queries remembered per viewer; a flood of queries cannot grow memory.
const MAX_PENDING: usize = 64;

/// A question the program asked its terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// `CSI 6 n`, answered `CSI row ; col R`.
    CursorPosition,
    /// `CSI c` / `CSI 0 c`, answered like xterm.js: `CSI ? 1 ; 2 c`.
    PrimaryAttributes,
    /// `CSI > c` / `CSI > 0 c`, answered like xterm.js: `CSI > 0 ; 276 ; 0 c`.
    SecondaryAttributes,
    /// `CSI 5 n` (are you OK?), answered `CSI 0 n`.
    Status,
}

/// The vt100 callbacks that notice queries while parsing, with the screen as it is at that
/// byte, and queue the answers.
#[derive(Debug, Default)]
pub struct QueryHook {
    /// Queries seen since the last `take`, with the daemon's answer.
    pub found: Vec<(Query, Vec<u8>)>,
}

impl vt100::Callbacks for QueryHook {
    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        let only_zero = params.iter().all(|p| p.iter().all(|&v| v == 0));
        let query = match (i1, i2, c) {
            (None, None, 'n') if params == [&[6u16][..]] => Query::CursorPosition,
            (None, None, 'n') if params == [&[5u16][..]] => Query::Status,
            (None, None, 'c') if only_zero => Query::PrimaryAttributes,
            (Some(b'>'), None, 'c') if only_zero => Query::SecondaryAttributes,
            _ => return,
        };
        let answer = match query {
            Query::CursorPosition => {
                let (row, col) = screen.cursor_position();
                format!("\x1b[{};{}R", row + 1, col + 1).into_bytes()
            }
            Query::PrimaryAttributes => b"\x1b[?1;2c".to_vec(),
            Query::SecondaryAttributes => b"\x1b[>0;276;0c".to_vec(),
            Query::Status => b"\x1b[0n".to_vec(),
        };
        if self.found.len() < MAX_PENDING {
            self.found.push((query, answer));
        }
    }
}

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

/// The byte range of the first reply to `query` in `input`.
fn find_reply(input: &[u8], query: Query) -> Option<std::ops::Range<usize>> {
    let (prefix, fin): (&[u8], u8) = match query {
        Query::CursorPosition => (b"\x1b[", b'R'),
        Query::PrimaryAttributes => (b"\x1b[?", b'c'),
        Query::SecondaryAttributes => (b"\x1b[>", b'c'),
        Query::Status => (b"\x1b[", b'n'),
    };
    let mut from = 0;
    while let Some(pos) = find(&input[from..], prefix) {
        let start = from + pos;
        let body = start + prefix.len();
        let params = input[body..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b';')
            .count();
        let end = body + params;
        let well_formed = match query {
            // A cursor report is exactly two numbers.
            Query::CursorPosition => {
                let p = &input[body..end];
                p.split(|&b| b == b';').filter(|n| !n.is_empty()).count() == 2
            }
            Query::Status => &input[body..end] == b"0",
            _ => params > 0,
        };
        if well_formed && input.get(end) == Some(&fin) {
            return Some(start..end + 1);
        }
        from = start + 1;
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Vec<(Query, Vec<u8>)> {
        let mut p = vt100::Parser::new_with_callbacks(
            std::num::NonZeroU16::new(24).unwrap(),
            std::num::NonZeroU16::new(80).unwrap(),
            0,
            QueryHook::default(),
        );
        p.process(bytes);
        std::mem::take(&mut p.callbacks_mut().found)
    }

    #[test]
    fn answers_from_the_screen_at_that_point() {
        let found = parse(b"abc\x1b[6nmore text\r\n\x1b[6n\x1b[c\x1b[>c\x1b[0c\x1b[5n\x1b[?6n");
        let answers: Vec<&[u8]> = found.iter().map(|(_, a)| a.as_slice()).collect();
        assert_eq!(
            answers,
            [
                &b"\x1b[1;4R"[..],
                b"\x1b[2;1R",
                b"\x1b[?1;2c",
                b"\x1b[>0;276;0c",
                b"\x1b[?1;2c",
                b"\x1b[0n"
            ]
        );
    }

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

    #[test]
    fn not_replies() {
        assert_eq!(find_reply(b"\x1b[R", Query::CursorPosition), None);
        assert_eq!(find_reply(b"\x1b[1R", Query::CursorPosition), None);
        assert_eq!(
            find_reply(b"\x1b[A\x1b[2;3R", Query::CursorPosition),
            Some(3..9)
        );
        assert_eq!(find_reply(b"\x1b[?c", Query::PrimaryAttributes), None);
    }
}
