//! How the screen model's and the renderer's tests tell two screens apart: whether they look
//! and behave the same (the probes reveal state vt100 does not print), and random plausible
//! terminal output to compare them on. Test-only.

use std::num::NonZeroU16;

/// Scrollback of the parsers the model is compared with: more than any test fills.
pub(super) const SB_CAP: usize = 100_000;

/// A fresh vt100 parser fed `bytes`.
pub(super) fn fresh(rows: u16, cols: u16, bytes: &[u8]) -> vt100::Parser {
    let mut p = vt100::Parser::new(non_zero(rows), non_zero(cols), SB_CAP);
    p.process(bytes);
    p
}

/// Every scrollback row, rendered and with its wrap flag, oldest first.
pub(super) fn scrollback_rows(screen: &vt100::Screen) -> Vec<(String, bool)> {
    let mut s = screen.clone();
    let total = s.scrollback_len();
    let (_, cols) = s.size();
    let mut out = Vec::new();
    for line in 0..total {
        s.set_scrollback(total - line);
        let text = s.rows_formatted(0, cols.get()).next().unwrap_or_default();
        out.push((text, s.row_wrapped(0)));
    }
    out
}

/// Assert two screens look and behave the same.
pub(super) fn assert_same(got: &vt100::Screen, want: &vt100::Screen, what: &str) {
    assert_eq!(got.size(), want.size(), "{what}: size");
    assert_eq!(
        got.contents_formatted(),
        want.contents_formatted(),
        "{what}: contents"
    );
    assert_eq!(
        got.cursor_position(),
        want.cursor_position(),
        "{what}: cursor"
    );
    assert_eq!(got.hide_cursor(), want.hide_cursor(), "{what}: hide");
    assert_eq!(
        got.alternate_screen(),
        want.alternate_screen(),
        "{what}: alt"
    );
    assert_eq!(
        got.application_cursor(),
        want.application_cursor(),
        "{what}: app cursor"
    );
    assert_eq!(
        got.application_keypad(),
        want.application_keypad(),
        "{what}: keypad"
    );
    assert_eq!(
        got.bracketed_paste(),
        want.bracketed_paste(),
        "{what}: paste"
    );
    assert_eq!(
        got.mouse_protocol_mode(),
        want.mouse_protocol_mode(),
        "{what}: mouse"
    );
    assert_eq!(
        got.mouse_protocol_encoding(),
        want.mouse_protocol_encoding(),
        "{what}: mouse enc"
    );
    assert_eq!(got.cursor_style(), want.cursor_style(), "{what}: style");
    assert_eq!(
        got.attributes_formatted(),
        want.attributes_formatted(),
        "{what}: attrs"
    );
    let (rows, _) = got.size();
    for r in 0..rows.get() {
        assert_eq!(
            got.row_wrapped(r),
            want.row_wrapped(r),
            "{what}: wrap of row {r}"
        );
    }
    let (g, w) = (scrollback_rows(got), scrollback_rows(want));
    assert_eq!(g.len(), w.len(), "{what}: scrollback length");
    for (i, (g, w)) in g.iter().zip(&w).enumerate() {
        assert_eq!(g, w, "{what}: scrollback line {i}");
    }
}

/// Feed both sides `tail` and compare again: catches hidden state (scroll
/// region, saved cursor, the main screen under the alternate one).
pub(super) fn assert_same_after(got: &mut vt100::Parser, want: &mut vt100::Parser, tail: &[u8]) {
    got.process(tail);
    want.process(tail);
    assert_same(
        got.screen(),
        want.screen(),
        &format!("after {:?}", String::from_utf8_lossy(tail)),
    );
}

/// The probes that reveal hidden state, fed to clones of both sides.
pub(super) const PROBES: &[&[u8]] = &[
    b"\x1b[?1049l",
    b"\x1b8X",
    b"\x1b[?47l",
    b"\x1b[999;1H\n\n\nnew\x1bMrev",
    b"\x1b[H\x1bM\x1bMtop",
    b"\x1b[?1049l\x1b[999;1H\r\n\r\nafter\x1b8Y",
];

/// A small deterministic PRNG for the randomized tests.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random terminal output built from plausible pieces.
pub(super) fn random_stream(rng: &mut Rng, pieces: usize) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"hello ",
        b"world",
        b"\r\n",
        b"\n",
        b"\r",
        b"\x08",
        b"\t",
        b"\x1b[31m",
        b"\x1b[1;4;7m",
        b"\x1b[38;5;123m",
        b"\x1b[48;2;1;2;3m",
        b"\x1b[m",
        b"\x1b[2J",
        b"\x1b[K",
        b"\x1b[1K",
        b"\x1b[3;7H",
        b"\x1b[A",
        b"\x1b[5C",
        b"\x1b[2L",
        b"\x1b[M",
        b"\x1b[3P",
        b"\x1b[2@",
        b"\x1b[4X",
        b"\x1b[S",
        b"\x1b[T",
        b"\x1bM",
        b"\x1b7",
        b"\x1b8",
        b"\x1b[?1049h",
        b"\x1b[?1049l",
        // No `CSI ? 47 h`: vt100 then shows a stale alternate grid that
        // the snapshot does not carry (xterm.js clears it anyway).
        b"\x1b[?47l",
        b"\x1b[2;5r",
        b"\x1b[r",
        b"\x1b[?6h",
        b"\x1b[?6l",
        b"\x1b[?25l",
        b"\x1b[?25h",
        b"\x1b[?1h",
        b"\x1b=",
        b"\x1b>",
        b"\x1b[?2004h",
        b"\x1b[?1000h",
        b"\x1b[?1006h",
        b"\x1b]0;title\x07",
        b"\x1b]2;t\x1b\\",
        b"\x1bP+q544e\x1b\\",
        "日本語".as_bytes(),
        "😀".as_bytes(),
        "e\u{301}".as_bytes(),
        b"\xe2\x82",
        b"\xac",
        b"\x1b[",
        b"\x18",
        b"\x1b[3 q",
        b"\x1b[3J",
        b"0123456789abcdefghijklmnopqrstuvwxyz",
    ];
    let mut s = Vec::new();
    for _ in 0..pieces {
        s.extend_from_slice(PIECES[rng.below(PIECES.len())]);
    }
    s
}

/// `n` as a screen dimension (0 is read as 1).
pub(super) fn non_zero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// `n` lines of a coloured shell session: prompts, 256 and true colours.
pub(super) fn shell_lines(n: usize) -> Vec<u8> {
    let mut s = Vec::new();
    for i in 0..n {
        s.extend_from_slice(
            format!(
                "\x1b[1;32muser@host\x1b[0m:\x1b[34m~/src\x1b[0m$ echo line {i} \x1b[38;5;{}mcolour\x1b[m \x1b[48;2;10;{};200mtrue\x1b[m\r\n",
                i % 256,
                i % 256
            )
            .as_bytes(),
        );
    }
    s
}
