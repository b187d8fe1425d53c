//! Terminal queries: the program's questions to its terminal (cursor position, device
//! attributes, status), found in the output and answered from the screen as it is at that
//! point of the stream, and what a terminal's reply to each looks like.
//!
//! The daemon answers every query once, itself: [`QueryHook`] computes the answer while the
//! model parses, [`QueryScan`] finds the same queries in the raw output before it is published,
//! and [`find_reply`] picks out the replies viewers' terminals send too (which the session
//! drops, see `session/replies.rs`).

use super::seq::{Params, Perform, Scanner};

/// Most queries kept between two takes of [`QueryHook::found`]; a flood of queries cannot grow
/// memory.
const MAX_FOUND: usize = 64;

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
        let Some(query) = classify(i1, i2, params.iter().copied(), c) else {
            return;
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
        if self.found.len() < MAX_FOUND {
            self.found.push((query, answer));
        }
    }
}

/// The query a CSI sequence vt100 leaves unhandled is, from what vt100 passes on: its first
/// two intermediates (a private marker first), its parameters and its final character.
fn classify<'a>(
    i1: Option<u8>,
    i2: Option<u8>,
    params: impl IntoIterator<Item = &'a [u16]>,
    c: char,
) -> Option<Query> {
    // What a query looks at: whether every value is 0, and the value of a lone parameter.
    let mut only_zero = true;
    let mut count = 0;
    let mut lone = None;
    for p in params {
        count += 1;
        only_zero &= p.iter().all(|&v| v == 0);
        lone = match p {
            [v] if count == 1 => Some(*v),
            _ => None,
        };
    }
    match (i1, i2, c) {
        (None, None, 'n') if lone == Some(6) => Some(Query::CursorPosition),
        (None, None, 'n') if lone == Some(5) => Some(Query::Status),
        (None, None, 'c') if only_zero => Some(Query::PrimaryAttributes),
        (Some(b'>'), None, 'c') if only_zero => Some(Query::SecondaryAttributes),
        _ => None,
    }
}

/// Finds the same queries as [`QueryHook`] in the raw output, before it is parsed.
///
/// The screen model parses on its own thread, possibly behind the live stream, but a viewer
/// can only reply to a query it has been sent: the actor scans each chunk before publishing
/// it and marks the replies as expected, so no reply can arrive before its expectation. It
/// reads the stream with the daemon's one scanner ([`super::seq`], which reads it as
/// vte does) and passes each CSI sequence on as vt100 passes the ones it leaves unhandled to
/// `QueryHook`; state carries across chunks.
#[derive(Debug, Default)]
pub struct QueryScan {
    scanner: Scanner,
}

impl QueryScan {
    /// Queries completed by `bytes`, in order.
    pub fn scan(&mut self, bytes: &[u8]) -> Vec<Query> {
        let mut found = Found(Vec::new());
        self.scanner.advance(bytes, &mut found);
        found.0
    }
}

/// The queries met in one chunk.
struct Found(Vec<Query>);

impl Perform for Found {
    // Text holds no query: the scanner jumps from ESC to ESC.
    fn text(&mut self, _bytes: &[u8]) {}

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], _ignore: bool, action: u8) {
        // Most sequences (SGR above all) are no query: not worth reading their parameters.
        if !matches!(action, b'n' | b'c') {
            return;
        }
        // vt100 passes on a sequence whose first intermediate is SP (but for its one use,
        // `CSI SP q`) without intermediates; any other as the first two.
        let (i1, i2) = match intermediates {
            [b' ', ..] => (None, None),
            _ => (
                intermediates.first().copied(),
                intermediates.get(1).copied(),
            ),
        };
        self.0
            .extend(classify(i1, i2, params.iter(), char::from(action)));
    }
}

/// The byte range of the first reply to `query` in `input`: what a terminal answers to it
/// (parameters of digits and `;` only, a cursor report with exactly two numbers).
pub fn find_reply(input: &[u8], query: Query) -> Option<std::ops::Range<usize>> {
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
    use crate::term::seq::arbitrary::{chunks, output};
    use proptest::prelude::*;

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

    /// The scanner finds exactly what the parser's hook answers, however the stream is cut.
    #[test]
    fn scanner_agrees_with_the_hook() {
        let stream: &[u8] =
            b"abc\x1b[6nmore\x1b[1;2R\r\n\x1b[6n\x1b[c\x1b[>c\x1b[0c\x1b[5n\x1b[?6n\
            \x1b[06n\x1b[6;n\x1b[>1c\x1b[0;0c\x1b[31mred\x1b[m\x1b]0;title\x07\x1b[>0c\x1b[6\x18n\
            \x1b[2J\x1b[1:2c\x1b[6 n";
        let want: Vec<Query> = parse(stream).into_iter().map(|(q, _)| q).collect();
        assert_eq!(want.len(), 10, "{want:?}");
        for cut in 0..stream.len() {
            let mut scan = QueryScan::default();
            let mut got = scan.scan(&stream[..cut]);
            got.extend(scan.scan(&stream[cut..]));
            assert_eq!(got, want, "cut at {cut}");
        }
        let mut scan = QueryScan::default();
        let bytewise: Vec<Query> = stream.iter().flat_map(|b| scan.scan(&[*b])).collect();
        assert_eq!(bytewise, want);
    }

    /// Output dense in queries, in what disguises one (markers, intermediates, more or
    /// sub-parameters) and in what interrupts one (C0 controls, CAN, ESC, 8-bit bytes).
    fn query_output() -> impl Strategy<Value = Vec<u8>> {
        const PIECES: &[&[u8]] = &[
            b"\x1b[6n",
            b"\x1b[5n",
            b"\x1b[c",
            b"\x1b[0c",
            b"\x1b[>c",
            b"\x1b[>0c",
            b"\x1b[",
            b"\x1b[>",
            b"n",
            b"c",
            b"0",
            b"5",
            b"6",
            b";",
            b":",
            b" ",
            b"!",
            b"?",
        ];
        let piece = prop_oneof![
            2 => proptest::sample::select(PIECES).prop_map(<[u8]>::to_vec),
            1 => output(3),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The scanner finds what vt100's hook answers (vte reading the stream), however the
        /// stream is cut.
        #[test]
        fn scanner_agrees_with_the_hook_on_any_output(
            bytes in query_output(),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let whole = QueryScan::default().scan(&bytes);
            let mut scan = QueryScan::default();
            let mut split = Vec::new();
            for chunk in chunks(&bytes, &cuts) {
                split.extend(scan.scan(chunk));
            }
            prop_assert_eq!(&split, &whole);
            let hooked: Vec<Query> = parse(&bytes).into_iter().map(|(q, _)| q).collect();
            // The hook keeps the first 64 between takes.
            prop_assert_eq!(&hooked[..], &whole[..whole.len().min(MAX_FOUND)]);
        }
    }

    /// What a hand-written scanner once read differently from vte (pinned in
    /// tests/properties.rs as a known divergence): 8-bit bytes and C0 controls inside a
    /// sequence, intermediates, sub-parameters, three parameters.
    #[test]
    fn odd_sequences_read_as_vte_reads_them() {
        for s in [
            &b"\x1b[\xe2\x82\xacc"[..],
            b"\x1b[6\xc3\xa9n",
            b"\x1b\n[c",
            b"\x1b\x7f[c",
            b"\x1b[\"c",
            b"\x1b[!c",
            b"\x1b[> c",
            b"\x1b[ 6n",
            b"\x1b[:c",
            b"\x1b[0;0;0c",
            b"\x1b[0:0c",
            b"\x1b[6 n",
        ] {
            let hooked: Vec<Query> = parse(s).into_iter().map(|(q, _)| q).collect();
            assert_eq!(QueryScan::default().scan(s), hooked, "{}", s.escape_ascii());
        }
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
