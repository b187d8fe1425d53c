//! The terminal screen model: a vt100 parser fed a session's output, kept exact at stream
//! boundaries, noticing terminal queries as it parses, and put away (parked) when idle. The
//! ANSI it renders for joiners comes from [`super::render`].
//!
//! A joiner gets a snapshot and then the live stream from `head - pending_len()`. That only
//! works if the model has applied exactly the bytes before that offset and its parser is back
//! in the ground state there. So [`ScreenModel::process`] holds back a trailing incomplete
//! escape sequence or UTF-8 character (the "carry") and applies it once the next chunk
//! completes it. The carry always starts at an ESC or at a UTF-8 lead byte, where any
//! terminal's parser starts afresh; the daemon's one scanner ([`super::seq`]) finds it,
//! reading the stream as vte does.
//!
//! Counters are the caller's: [`ScreenModel::process_bulk`] returns what it skipped and
//! [`Parked::held_bytes`] says what a parked model holds.

use std::io::{Read as _, Write as _};
use std::num::NonZeroU16;

use super::pen;
use super::queries::{Query, QueryHook};
use super::render::{self, SnapshotParts};
use super::seq::{Scanner, Tail};

/// Longest unfinished trailing sequence held back. Anything longer (a big OSC 52
/// clipboard copy, a sixel image) is fed through; the snapshot then ends by
/// re-opening a string of the same kind so the joiner swallows its tail too.
const MAX_CARRY: usize = 4096;

fn non_zero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// A terminal's screen: a vt100 parser plus what it takes to snapshot it exactly.
pub struct ScreenModel {
    /// The parser, noticing terminal queries as it goes.
    parser: vt100::Parser<QueryHook>,
    /// Trailing bytes of the stream not yet fed to the parser (see `pending_len`).
    carry: Vec<u8>,
    /// Where the stream fed so far ends, `carry` included: in the ground state
    /// unless there is a carry or an overflow.
    scanner: Scanner,
    /// Set when an unfinished sequence longer than `MAX_CARRY` was fed: the
    /// parser is inside it, in the scanner's state.
    overflow: bool,
    has_output: bool,
    /// Scrollback lines the main screen keeps.
    scrollback_lines: usize,
    /// Whether the active grid's scroll region is the whole screen, as last probed. Only plain
    /// text and pen sequences were fed since (anything else or a resize forgets it): they cannot change it.
    full_region: Option<bool>,
}

/// Parked snapshots longer than this are kept deflated: a screen with its scrollback is tens
/// of kilobytes of text (78 KiB for 1000 lines of 80 columns), which deflates several times
/// over in about a millisecond; a prompt's few hundred bytes are kept as they are.
const DEFLATE_OVER: usize = 4096;

/// A [`ScreenModel`] put away by [`ScreenModel::park`]; [`Parked::thaw`] brings it back.
pub struct Parked {
    /// The snapshot, with every scrollback line the model held.
    ansi: KeptAnsi,
    rows: u16,
    cols: u16,
    scrollback_lines: usize,
    has_output: bool,
}

/// A parked snapshot as kept: as it is, or deflated (level 1) when long.
enum KeptAnsi {
    Plain(Box<[u8]>),
    Deflated { bytes: Box<[u8]>, len: usize },
}

impl KeptAnsi {
    fn keep(ansi: Vec<u8>) -> KeptAnsi {
        if ansi.len() <= DEFLATE_OVER {
            return KeptAnsi::Plain(ansi.into_boxed_slice());
        }
        let mut deflater = flate2::write::DeflateEncoder::new(
            Vec::with_capacity(ansi.len() / 4),
            flate2::Compression::fast(),
        );
        // Into a Vec, whose writes cannot fail.
        match deflater.write_all(&ansi).and_then(|()| deflater.finish()) {
            Ok(bytes) if bytes.len() < ansi.len() => KeptAnsi::Deflated {
                bytes: bytes.into_boxed_slice(),
                len: ansi.len(),
            },
            _ => KeptAnsi::Plain(ansi.into_boxed_slice()),
        }
    }

    /// The snapshot's bytes again.
    fn ansi(&self) -> std::borrow::Cow<'_, [u8]> {
        match self {
            KeptAnsi::Plain(ansi) => std::borrow::Cow::Borrowed(ansi),
            KeptAnsi::Deflated { bytes, len } => {
                let mut ansi = Vec::with_capacity(*len);
                // Our own deflate of a Vec: it inflates. Were it not to, the screen thread's
                // guard around the thaw starts the screen blank and says so.
                flate2::read::DeflateDecoder::new(&bytes[..])
                    .read_to_end(&mut ansi)
                    .expect("a parked snapshot inflates");
                std::borrow::Cow::Owned(ansi)
            }
        }
    }

    fn held_bytes(&self) -> usize {
        match self {
            KeptAnsi::Plain(ansi) => ansi.len(),
            KeptAnsi::Deflated { bytes, .. } => bytes.len(),
        }
    }
}

impl Parked {
    /// The model again, as a fresh one fed the snapshot.
    pub fn thaw(&self) -> ScreenModel {
        let mut model = ScreenModel::new(self.rows, self.cols, self.scrollback_lines);
        model.process(&self.ansi.ansi());
        // The snapshot asks the terminal nothing; nothing may be answered for it.
        let _ = model.take_queries();
        model.has_output = self.has_output;
        model
    }

    /// (rows, cols) of the parked model.
    pub fn size(&self) -> (u16, u16) {
        (self.rows, self.cols)
    }

    /// Bytes the parked model holds: its snapshot, deflated when long.
    pub fn held_bytes(&self) -> usize {
        self.ansi.held_bytes()
    }
}

impl ScreenModel {
    /// rows/cols are >= 1 (caller clamps); scrollback_lines is the bounded scrollback (default 1000).
    pub fn new(rows: u16, cols: u16, scrollback_lines: usize) -> Self {
        Self {
            parser: vt100::Parser::new_with_callbacks(
                non_zero(rows),
                non_zero(cols),
                scrollback_lines,
                QueryHook::default(),
            ),
            carry: Vec::new(),
            scanner: Scanner::default(),
            overflow: false,
            has_output: false,
            scrollback_lines,
            full_region: None,
        }
    }

    /// A copy of the model as it stands, to render a snapshot on another thread while the
    /// session goes on. It has consumed exactly the bytes this model has (nothing pending).
    pub fn freeze(&self) -> ScreenModel {
        let (rows, cols) = self.size();
        // The screen clone brings its own grids and scrollback; the parser's capacity is moot.
        let mut parser = vt100::Parser::new_with_callbacks(
            non_zero(rows),
            non_zero(cols),
            0,
            QueryHook::default(),
        );
        *parser.screen_mut() = self.parser.screen().clone();
        ScreenModel {
            parser,
            carry: Vec::new(),
            // Without the carry, the copy's stream ends where its parser does.
            scanner: if self.overflow {
                self.scanner.clone()
            } else {
                Scanner::default()
            },
            overflow: self.overflow,
            has_output: self.has_output,
            scrollback_lines: 0,
            full_region: None,
        }
    }

    /// Feed output bytes in stream order, like [`ScreenModel::process`], but first drop the
    /// part of a leading run of pen text (plain text and colours) that cannot show in the
    /// result; returns how many bytes were dropped. For a flood the parser has fallen behind
    /// on: `cat` of a big file or `ls --color -R` then costs a scan instead of a parse, and the
    /// model ends exactly as if it had parsed every byte.
    pub fn process_bulk(&mut self, bytes: &[u8]) -> usize {
        /// Not worth probing the scroll region for less.
        const MIN_SKIP: usize = 64 << 10;
        self.process_bulk_from(bytes, MIN_SKIP)
    }

    /// [`ScreenModel::process_bulk`] with the least it will skip given: the fuzz target checks
    /// the skip on kilobytes instead of the daemon's 64 KiB, a thousand times more inputs per
    /// second through the same code.
    #[doc(hidden)]
    pub fn process_bulk_from(&mut self, bytes: &[u8], min_skip: usize) -> usize {
        // What is kept is never empty (the cut is at a CR with text after it), so `process`
        // marks the output as seen.
        let skip = self.invisible_prefix(bytes, min_skip);
        if skip > 0 {
            // The pen the dropped part leaves set: its colour sequences from the last reset on.
            let pen = pen::pen_at_end(&bytes[..skip]);
            self.process(&pen);
        }
        self.process(&bytes[skip..]);
        skip
    }

    /// How much of the start of `bytes` can be dropped without changing the model, but for
    /// the pen, which the caller sets as the dropped part leaves it.
    ///
    /// Pen text (printable ASCII, CR, LF, TAB, SGR colour sequences and erases in the line,
    /// see [`pen::pen_text_len`]) only sets the pen, moves the cursor, writes and erases cells
    /// and scrolls. Say the run continues past a CR with at least `2 × rows + scrollback + 4`
    /// LFs. From that CR on, the cursor's column no longer depends on what came before, and
    /// once `rows` LFs have taken the cursor to the bottom, its row does not either. The LFs
    /// left then scroll the whole screen and all of the scrollback away, so every line that is
    /// left was written after the CR; only the pen carries over. That needs a scroll region
    /// spanning the screen (with a partial one, rows outside it keep what was written there),
    /// and a printed character after the CR (REP repeats the last one). The parser must be in
    /// the ground state: no carry, no oversized sequence open.
    fn invisible_prefix(&mut self, bytes: &[u8], min_skip: usize) -> usize {
        if !self.scanner.is_ground() || bytes.len() < min_skip {
            return 0;
        }
        let plain = pen::pen_text_len(bytes);
        let (rows, _) = self.size();
        let need = 2 * usize::from(rows) + self.scrollback_lines + 4;
        // Where the last `need` LFs of the run begin (no sequence holds an LF or a CR).
        let Some(tail) = memchr::memrchr_iter(b'\n', &bytes[..plain]).nth(need - 1) else {
            return 0;
        };
        let Some(cr) = memchr::memrchr(b'\r', &bytes[..tail]) else {
            return 0;
        };
        if cr < min_skip || !pen::pen_text_prints(&bytes[cr..plain]) || !self.region_is_full() {
            return 0;
        }
        cr
    }

    /// Whether the active grid's scroll region spans the screen. Probed on a copy (vt100 keeps
    /// the region private): with origin mode on, home and "row 65535" land on the region's
    /// first and last rows.
    fn region_is_full(&mut self) -> bool {
        if let Some(full) = self.full_region {
            return full;
        }
        let (rows, cols) = self.size();
        let mut probe = vt100::Parser::new(non_zero(rows), non_zero(cols), 0);
        *probe.screen_mut() = self.parser.screen().clone();
        probe.process(b"\x1b[?6h\x1b[H");
        let top = probe.screen().cursor_position().0;
        probe.process(b"\x1b[65535H");
        let bottom = probe.screen().cursor_position().0;
        let full = top == 0 && bottom == rows - 1;
        self.full_region = Some(full);
        full
    }

    /// Feed output bytes in stream order.
    pub fn process(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.has_output = true;
        // Only a sequence can change the scroll region; colours and erases cannot. One begun
        // in an earlier call (the scanner not at a boundary) may be anything.
        if self.full_region.is_some()
            && !(self.scanner.is_ground() && pen::only_pen_sequences_so_far(bytes))
        {
            self.full_region = None;
        }
        // What completes a character split at the end of the carry (found before the scanner
        // moves on).
        let completes = self.scanner.rest_of_char(bytes);
        match self.scanner.skip(bytes) {
            Tail::Complete => {
                let used = self.feed_carry(bytes, completes);
                self.parser.process(&bytes[used..]);
                self.overflow = false;
            }
            Tail::At(p) if bytes.len() - p <= MAX_CARRY => {
                // `p` is an ESC or a UTF-8 lead byte, never part of what
                // completes the carry.
                let used = self.feed_carry(bytes, completes).min(p);
                self.parser.process(&bytes[used..p]);
                self.carry.extend_from_slice(&bytes[p..]);
                self.overflow = false;
            }
            Tail::Before
                if !self.carry.is_empty() && self.carry.len() + bytes.len() <= MAX_CARRY =>
            {
                self.carry.extend_from_slice(bytes);
            }
            Tail::At(_) | Tail::Before => {
                let used = self.feed_carry(bytes, completes);
                self.parser.process(&bytes[used..]);
                self.overflow = true;
            }
        }
    }

    /// Terminal queries (cursor position, device attributes, status) met
    /// while applying output since the last call, each with the daemon's
    /// answer computed from the screen at that point of the stream. A query
    /// split across chunks is found once its last byte arrives.
    pub fn take_queries(&mut self) -> Vec<(Query, Vec<u8>)> {
        std::mem::take(&mut self.parser.callbacks_mut().found)
    }

    /// Feed the carry, which precedes `bytes`; returns how many bytes of
    /// `bytes` went with it: the first `completes`, which continue a partial
    /// UTF-8 character the carry ends with. That character is fed in one
    /// piece: vte 0.15 loses the next character when a partial one it holds
    /// is completed by a later call and more text follows within three bytes.
    fn feed_carry(&mut self, bytes: &[u8], completes: usize) -> usize {
        if self.carry.is_empty() {
            return 0;
        }
        let used = completes.min(bytes.len());
        self.carry.extend_from_slice(&bytes[..used]);
        self.parser.process(&self.carry);
        self.carry.clear();
        used
    }

    /// Number of trailing bytes of the stream fed so far that are NOT yet applied to the model,
    /// because they are an incomplete escape sequence (ESC, CSI, OSC/DCS/APC/PM/SOS string without
    /// its terminator, ESC + intermediates without final) or an incomplete UTF-8 character at the
    /// end of the last chunk. They are applied when the next chunk completes them. The carry is
    /// capped at 4096 bytes: a longer unterminated sequence is just fed to the parser.
    pub fn pending_len(&self) -> usize {
        self.carry.len()
    }

    /// Resize both screens (vt100 resizes the hidden main screen too).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.full_region = None;
        self.parser.set_size(non_zero(rows), non_zero(cols));
    }

    /// (rows, cols)
    pub fn size(&self) -> (u16, u16) {
        let (rows, cols) = self.parser.screen().size();
        (rows.get(), cols.get())
    }

    /// The live vt100 screen (active screen), for tests and for answering terminal queries later.
    pub fn screen(&self) -> &vt100::Screen {
        self.parser.screen()
    }

    /// True once any byte has been fed.
    pub fn has_output(&self) -> bool {
        self.has_output
    }

    /// Number of scrollback lines currently held (of the main screen, even while the alternate screen is active).
    pub fn scrollback_len(&self) -> usize {
        // Read from the main grid itself: current even while an oversized sequence is being
        // passed through, and nothing is fed to the live parser to find it (that would also
        // make REP forget its character).
        self.parser.screen().main_scrollback_len()
    }

    /// ANSI that, written into a FRESH terminal (xterm.js or a fresh vt100 parser) of the same size,
    /// reproduces the state; it also works when written into a terminal that already shows
    /// something (a resync): it starts with a full reset (RIS `ESC c`) and clears scrollback
    /// (`ESC[3J`). `max_scrollback` limits how many of the newest scrollback lines are included.
    pub fn snapshot_ansi(&self, max_scrollback: usize) -> Vec<u8> {
        let parts = self.snapshot_parts(max_scrollback);
        parts.assemble(parts.lines())
    }

    /// Render the snapshot once, with up to `max_scrollback` lines that
    /// [`SnapshotParts::assemble`] can then trim without rendering again.
    pub(crate) fn snapshot_parts(&self, max_scrollback: usize) -> SnapshotParts {
        // An oversized sequence passed through leaves the parser inside it: the snapshot
        // re-opens one of its kind.
        let open = self.overflow.then(|| self.scanner.state());
        render::snapshot_parts(self.parser.screen(), max_scrollback, open)
    }

    /// The model put away as the snapshot that rebuilds it, for a session gone idle: a few
    /// hundred bytes of ANSI for a quiet shell, where the grid alone costs 32 bytes a cell
    /// (60 KiB at 24×80, and 2.5 KiB per 80-column scrollback line). `None` where the
    /// snapshot would not bring the model back: in the middle of a sequence, or in the one
    /// state whose saved cursor a snapshot cannot reach (see
    /// [`render::saved_cursor_reproducible`]).
    ///
    /// The same round trip a live upgrade makes for every session (`session/freeze.rs`); the
    /// character REP (`CSI b`) would repeat comes back too (the snapshot ends by printing it).
    pub fn park(&self) -> Option<Parked> {
        if self.pending_len() > 0
            || self.overflow
            || !render::saved_cursor_reproducible(self.screen())
        {
            return None;
        }
        let (rows, cols) = self.size();
        let ansi = KeptAnsi::keep(self.snapshot_ansi(self.scrollback_lines));
        Some(Parked {
            ansi,
            rows,
            cols,
            scrollback_lines: self.scrollback_lines,
            has_output: self.has_output,
        })
    }
}

#[cfg(test)]
mod freeze_tests {
    use super::*;

    /// A model with its scrollback parks into a fraction of its snapshot's bytes (deflated)
    /// and comes back the same, colours, scrollback and all; a short screen is kept as it is.
    #[test]
    fn a_long_parked_snapshot_is_kept_deflated_and_thaws_the_same() {
        let mut m = ScreenModel::new(24, 80, 1000);
        for i in 0..1200 {
            m.process(
                format!(
                    "\x1b[3{}mline {i:05}\x1b[m the agent said something here\r\n",
                    i % 8
                )
                .as_bytes(),
            );
        }
        let snapshot = m.snapshot_ansi(1000);
        let parked = m.park().expect("parks at rest");
        assert!(
            parked.held_bytes() * 4 < snapshot.len(),
            "{} bytes kept for a {}-byte snapshot",
            parked.held_bytes(),
            snapshot.len()
        );
        let back = parked.thaw();
        assert_eq!(back.snapshot_ansi(1000), snapshot);
        assert_eq!(back.scrollback_len(), m.scrollback_len());

        let mut short = ScreenModel::new(24, 80, 1000);
        short.process(b"$ ");
        let parked = short.park().expect("parks at rest");
        assert_eq!(parked.held_bytes(), short.snapshot_ansi(1000).len());
        assert_eq!(parked.thaw().snapshot_ansi(1000), short.snapshot_ansi(1000));
    }

    #[test]
    fn a_frozen_model_snapshots_like_the_live_one() {
        let mut m = ScreenModel::new(10, 30, 100);
        for i in 0..40 {
            m.process(format!("\x1b[3{}mline {i}\x1b[m\r\n", i % 8).as_bytes());
        }
        m.process(b"\x1b[?1049h\x1b[2;3Hfull screen\x1b[?2004h\x1b[5");
        let frozen = m.freeze();
        assert_eq!(frozen.snapshot_ansi(100), m.snapshot_ansi(100));
        assert_eq!(frozen.scrollback_len(), m.scrollback_len());
        assert_eq!(frozen.pending_len(), 0);
    }

    #[test]
    fn a_wide_character_narrowed_to_one_column_ends() {
        // Found by the fuzz runner: the rewrap looked for a line that could take a wide
        // character at one column and allocated until the process was killed; then a
        // character's second half left alone at a line's start panicked a delete.
        let mut m = ScreenModel::new(4, 6, 20);
        m.process("ab\u{4e16}\u{754c}cd\r\nnext\r\n".as_bytes());
        m.resize(4, 1);
        // Each half of the cut character, deleted and pushed along (a half at the first
        // column once had nothing before it to clear).
        for row in 1..=4 {
            m.process(format!("\x1b[{row};1H\x1b[P\x1b[@x").as_bytes());
        }
        m.resize(4, 6);
        let text = m.snapshot_ansi(100);
        assert!(!text.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::screen_check::{
        assert_same, assert_same_after, fresh, non_zero, random_stream, shell_lines, Rng, PROBES,
        SB_CAP,
    };
    use crate::term::seq::arbitrary::{chunks, output};
    use proptest::prelude::*;

    /// Streams for the split tests.
    fn split_streams() -> Vec<Vec<u8>> {
        let mut a = Vec::new();
        a.extend_from_slice(b"hello \x1b[31mred\x1b[m \x1b]0;my title\x07after title\r\n");
        a.extend_from_slice(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1bP1$r0m\x1b\\dcs \x1b_apc\x1b\\ \x1b^pm\x1b\\ \x1bXsos\x1b\\\r\n");
        a.extend_from_slice("ünïcödé 日本 😀 e\u{301} \x1b[38;2;1;2;3mtc\x1b[m\r\n".as_bytes());
        a.extend_from_slice(
            b"\x1b(0\x1b(B\x1b#8\x1b[?25l\x1b[?25h\x1b[1;1H\x1b[2K\x1b[3;5r\x1b[r\r\n",
        );
        let mut b = shell_lines(12);
        b.extend_from_slice(b"\x1b[?1049h\x1b[?1h\x1b=\x1b[H\x1b[2J\x1b[33mfull\x1b]2;t\x1b\\ screen \xe2\x94\x80\xe2\x94\x80\x1b[5;5H\x1b[?1049l\x1b[?1049;25h\x1b[?2004hx");
        let mut c = Vec::new();
        c.extend_from_slice(b"a\x1b\x1b[32mb\x1b[\x1bc\x1b[2;3Hd\x18e\x1b[1;\x1a2f\x1b]0;t\x18g\x1b[1\x1b[31mh\x1b[?1049h\x1b[?1049\x1b[?1049l");
        c.extend_from_slice(b"\xe2\x82\xe2\x82\xac\x80\xc3(\xf0\x9f\x98\x80\r\n");
        vec![a, b, c]
    }

    #[test]
    fn split_at_every_byte() {
        for stream in split_streams() {
            let (rows, cols) = (8, 30);
            let mut whole = ScreenModel::new(rows, cols, 1000);
            whole.process(&stream);
            assert_eq!(whole.pending_len(), 0);
            for k in 0..=stream.len() {
                let mut model = ScreenModel::new(rows, cols, 1000);
                model.process(&stream[..k]);
                let pending = model.pending_len();
                assert!(pending <= k);
                let mut joiner = fresh(rows, cols, &model.snapshot_ansi(usize::MAX));
                joiner.process(&stream[k - pending..]);
                let what = format!("split at {k} (pending {pending})");
                assert_same(joiner.screen(), whole.screen(), &what);
                // And the model, fed the rest, still equals the whole.
                model.process(&stream[k..]);
                assert_eq!(model.pending_len(), 0, "{what}");
                assert_same(model.screen(), whole.screen(), &what);
                let mut w = fresh(rows, cols, &stream);
                assert_same_after(&mut joiner, &mut w, b"\x1b[?1049lz");
            }
        }
    }

    #[test]
    fn pending_is_what_it_should_be() {
        let cases: &[(&[u8], usize)] = &[
            (b"abc", 0),
            (b"abc\x1b", 1),
            (b"abc\x1b[", 2),
            (b"abc\x1b[31", 4),
            (b"abc\x1b[31m", 0),
            (b"abc\x1b]0;title", 9),
            (b"abc\x1b]0;title\x07", 0),
            (b"abc\x1b]0;title\x1b", 1),
            (b"abc\x1b]0;title\x1b\\", 0),
            (b"abc\x1bP1$r", 5),
            (b"abc\x1b(", 2),
            (b"abc\x1b(B", 0),
            (b"abc\xe2\x82", 2),
            (b"abc\xe2\x82\xac", 0),
            (b"abc\xf0\x9f\x98", 3),
            (b"abc\x1b[31m\xc3", 1),
            (b"abc\x1b[3\x181", 0),
            (b"abc\x1b_apc", 5),
        ];
        for (bytes, pending) in cases {
            let mut m = ScreenModel::new(5, 20, 10);
            m.process(bytes);
            assert_eq!(
                m.pending_len(),
                *pending,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        // Carried across several chunks.
        let mut m = ScreenModel::new(5, 20, 10);
        m.process(b"\x1b]0;ti");
        m.process(b"tle");
        assert_eq!(m.pending_len(), 9);
        m.process(b"\x07x");
        assert_eq!(m.pending_len(), 0);
        assert_eq!(m.screen().contents(), "x");
        m.process(b"\xe2");
        m.process(b"\x82");
        assert_eq!(m.pending_len(), 2);
        m.process(b"\xac");
        assert_eq!(m.pending_len(), 0);
        assert_eq!(m.screen().contents(), "x€");
    }

    #[test]
    fn queries_are_found_once_at_their_point() {
        let stream = b"abc\x1b[6n\x1b[?1049h\x1b[3;5H\x1b[6n\x1b[>c\x1b[?1049l\x1b[5n";
        let want: Vec<(Query, Vec<u8>)> = vec![
            (Query::CursorPosition, b"\x1b[1;4R".to_vec()),
            (Query::CursorPosition, b"\x1b[3;5R".to_vec()),
            (Query::SecondaryAttributes, b"\x1b[>0;276;0c".to_vec()),
            (Query::Status, b"\x1b[0n".to_vec()),
        ];
        for k in 0..=stream.len() {
            let mut m = ScreenModel::new(10, 20, 10);
            m.process(&stream[..k]);
            let mut found = m.take_queries();
            let _ = m.snapshot_ansi(usize::MAX);
            m.process(&stream[k..]);
            found.extend(m.take_queries());
            assert_eq!(found, want, "split at {k}");
            assert!(m.take_queries().is_empty());
        }
    }

    #[test]
    fn oversized_sequence_is_fed_and_resumed() {
        // A long OSC 52 clipboard copy spanning many chunks.
        let mut stream = b"before \x1b]52;c;".to_vec();
        stream.extend(std::iter::repeat_n(b'Q', 3 * MAX_CARRY));
        stream.extend_from_slice(b"\x07after\x1b[31m red\x1bP0;1q#0;2;0;0;0");
        stream.extend(std::iter::repeat_n(b'~', 2 * MAX_CARRY));
        stream.extend_from_slice(b"\x1b\\done\x1b_G");
        stream.extend(std::iter::repeat_n(b'A', 2 * MAX_CARRY));
        stream.extend_from_slice(b"\x1b\\ end");
        let whole = fresh(5, 40, &stream);
        for chunk in [1000, 4096, 5000] {
            let mut model = ScreenModel::new(5, 40, 100);
            let mut fed = 0;
            for part in stream.chunks(chunk) {
                model.process(part);
                fed += part.len();
                assert!(model.pending_len() <= MAX_CARRY);
                let mut joiner = fresh(5, 40, &model.snapshot_ansi(usize::MAX));
                joiner.process(&stream[fed - model.pending_len()..]);
                assert_same(
                    joiner.screen(),
                    whole.screen(),
                    &format!("chunk {chunk} at {fed}"),
                );
            }
            assert_same(model.screen(), whole.screen(), "model");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any output, cut anywhere: the model has applied exactly what precedes its carry,
        /// as a parser fed that in one piece, and the rest completes it.
        #[test]
        fn any_output_cut_anywhere(
            bytes in output(80),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            rows in 1u16..8,
            cols in 1u16..30,
        ) {
            let mut model = ScreenModel::new(rows, cols, SB_CAP);
            let mut fed = 0;
            for chunk in chunks(&bytes, &cuts) {
                model.process(chunk);
                fed += chunk.len();
                let applied = &bytes[..fed - model.pending_len()];
                assert_same(model.screen(), fresh(rows, cols, applied).screen(), &format!("at {fed}"));
            }
        }
    }

    /// A model parked and thawed at random quiet moments ends exactly as one that never was,
    /// and behaves the same after (the probes); where it cannot be parked it says so and is
    /// kept whole.
    #[test]
    fn parking_and_thawing_anywhere_changes_nothing() {
        let mut rng = Rng(0x5eed_0f9a_4c2d_1100);
        let (mut parks, mut refused) = (0, 0);
        for round in 0..std::env::var("PARK_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300)
        {
            let pieces = 20 + rng.below(200);
            let stream = random_stream(&mut rng, pieces);
            let (rows, cols) = (1 + rng.below(12) as u16, 1 + rng.below(40) as u16);
            let scrollback = [0, 3, 20, SB_CAP][rng.below(4)];
            let mut whole = ScreenModel::new(rows, cols, scrollback);
            let mut parked = ScreenModel::new(rows, cols, scrollback);
            let mut at = 0;
            while at < stream.len() {
                let end = (at + 1 + rng.below(64)).min(stream.len());
                whole.process(&stream[at..end]);
                parked.process(&stream[at..end]);
                at = end;
                if rng.below(2) == 0 {
                    match parked.park() {
                        Some(p) => {
                            parks += 1;
                            parked = p.thaw();
                        }
                        None => refused += 1,
                    }
                }
            }
            let what = format!("round {round} ({rows}x{cols}, scrollback {scrollback})");
            if std::env::var("DUMP_ROUND").ok() == Some(round.to_string()) {
                eprintln!(
                    "streamhex {}",
                    stream
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                );
            }
            assert_eq!(parked.pending_len(), whole.pending_len(), "{what}: carry");
            assert_eq!(
                parked.scrollback_len(),
                whole.scrollback_len(),
                "{what}: lines"
            );
            assert_same(parked.screen(), whole.screen(), &what);
            for probe in PROBES {
                let copy = |m: &ScreenModel| {
                    let mut p = vt100::Parser::new(non_zero(rows), non_zero(cols), SB_CAP);
                    *p.screen_mut() = m.screen().clone();
                    p
                };
                assert_same_after(&mut copy(&parked), &mut copy(&whole), probe);
            }
        }
        // Both paths are taken: most quiet moments park, a few (mid-sequence) do not.
        eprintln!("parks {parks}, refused {refused}");
        assert!(
            parks > 1000 && refused > 100,
            "parks {parks}, refused {refused}"
        );
    }
}

#[cfg(test)]
mod bulk_tests {
    use super::*;
    use crate::term::screen_check::{assert_same, non_zero};
    use crate::term::seq::arbitrary::output;
    use proptest::prelude::*;

    /// `n` lines of plain text of every kind the skip has to get right: tabs, lines longer
    /// than the screen (wrapping), exactly as wide as it (pending wrap), empty ones, and runs
    /// of bare LFs (no CR: the column carries over).
    fn plain_lines(n: usize, cols: usize, seed: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let k = (i * 7 + seed) % 11;
            let text = format!("{seed}:{i:05}");
            match k {
                0 => out.extend_from_slice(b"\r\n"),
                1 => out.extend_from_slice(format!("{text}\tcol\ttab\r\n").as_bytes()),
                2 => out.extend_from_slice(format!("{}\r\n", "w".repeat(cols * 2 + 3)).as_bytes()),
                3 => out.extend_from_slice(format!("{}\r\n", "=".repeat(cols)).as_bytes()),
                4 => out.extend_from_slice(format!("{text} bare\n").as_bytes()),
                5 => out.extend_from_slice(format!("{text}\rover\r\n").as_bytes()),
                _ => out.extend_from_slice(format!("{text} base64ish Zm9vYmFy+/=\r\n").as_bytes()),
            }
        }
        out
    }

    /// `n` lines of coloured text as `ls --color`, `grep --color` and compilers write it:
    /// colours set and reset mid-line, 256-colour and RGB ones (with `:` too), erases in the
    /// line with a coloured background, and colours left on across lines (the pen at any cut
    /// is seldom the default), with the kinds of [`plain_lines`] between.
    fn coloured_lines(n: usize, cols: usize, seed: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let k = (i * 5 + seed) % 13;
            let text = format!("{seed}:{i:05}");
            let line = match k {
                0 => format!("\x1b[01;34m{text}\x1b[0m  \x1b[01;32mrun.sh\x1b[0m\r\n"),
                1 => format!("a \x1b[01;31m\x1b[Kmatch\x1b[m\x1b[K b {text}\r\n"),
                2 => format!(
                    "\x1b[38;5;{}m{text}\x1b[48;2;10;20;{}m bg\x1b[K\r\n",
                    i % 256,
                    seed % 256
                ),
                3 => format!("\x1b[4;7m{text} left on\r\n"),
                4 => format!("{}\x1b[1K\x1b[m\r\n", "c".repeat(cols + 1)),
                5 => format!("\x1b[38:2::1:2:3m{text}\x1b[2K\tx\r\n"),
                6 => format!("\x1b[m{text}\x1b[0K\x1b[3{}m\r\n", i % 8),
                7 => format!("{text}\x1b[;1;;5m\x1b[22;25m bare\n"),
                _ => String::new(),
            };
            if line.is_empty() {
                out.extend_from_slice(&plain_lines(1, cols, seed + i));
            } else {
                out.extend_from_slice(line.as_bytes());
            }
        }
        out
    }

    /// Feeds `before`, then `flood` in one bulk call, then `after`, and compares the model
    /// with a parser that saw every byte, also through probes of hidden state. Returns how
    /// much was skipped.
    fn bulk_matches(rows: u16, cols: u16, before: &[u8], flood: &[u8], after: &[u8]) -> usize {
        const SB: usize = 50;
        let mut model = ScreenModel::new(rows, cols, SB);
        model.process(before);
        let skipped = model.process_bulk(flood);
        model.process(after);
        let mut want = vt100::Parser::new(non_zero(rows), non_zero(cols), SB);
        want.process(before);
        want.process(flood);
        want.process(after);
        let what = format!("{rows}x{cols} after {:?}", String::from_utf8_lossy(before));
        assert_same(model.screen(), want.screen(), &what);
        // Hidden state: REP (last printed character), the main screen, the saved cursor.
        for probe in [
            &b"\x1b[3bREP"[..],
            b"\x1b[?1049l\x1b8X",
            b"\x1b[999;1H\n\nend",
        ] {
            let mut got = vt100::Parser::new(non_zero(rows), non_zero(cols), SB);
            *got.screen_mut() = model.screen().clone();
            let mut w = vt100::Parser::new(non_zero(rows), non_zero(cols), SB);
            *w.screen_mut() = want.screen().clone();
            got.process(probe);
            w.process(probe);
            assert_same(
                got.screen(),
                w.screen(),
                &format!("{what}, probe {probe:?}"),
            );
        }
        skipped
    }

    #[test]
    fn a_plain_flood_skipped_ends_as_if_parsed() {
        for (rows, cols) in [(24u16, 80u16), (5, 17)] {
            let c = usize::from(cols);
            let flood = plain_lines(6000, c, 3);
            let after = b"\x1b[31mtail\x1b[m\r\nlast";
            // Starting states the skipped text must not leak through.
            let starts: &[&[u8]] = &[
                b"",
                b"\x1b[1;44mcoloured attrs stay on\x1b[5;9H",
                b"exactly-as-wide-as-the-screen.............................................",
                b"\x1b[?6h\x1b[H origin mode",
                b"\x1b[?1049h\x1b[Halternate screen",
                b"\x1b[3g\x1b[1;30H\x1bH\r\ncustom tab stop",
                b"\x1b7saved\x1b[2;2H",
            ];
            for start in starts {
                let skipped = bulk_matches(rows, cols, start, &flood, after);
                assert!(
                    skipped > flood.len() / 2,
                    "{start:?}: skipped only {skipped}"
                );
            }
            // A scroll region that is not the whole screen: rows outside it keep text, so
            // nothing may be skipped.
            let partial: &[&[u8]] = &[b"\x1b[2;4r\x1b[3;1Hinside", b"\x1b[2;4r\x1b[999;1Hbelow"];
            for start in partial {
                assert_eq!(
                    bulk_matches(rows, cols, start, &flood, after),
                    0,
                    "{start:?}"
                );
            }
            // Back to a full region: skipping again.
            assert!(bulk_matches(rows, cols, b"\x1b[2;4r\x1b[r", &flood, after) > 0);
        }
    }

    #[test]
    fn a_coloured_flood_skipped_ends_as_if_parsed() {
        for (rows, cols) in [(24u16, 80u16), (5, 17)] {
            let c = usize::from(cols);
            let after = b"tail \x1b[3bX\x1b[m\r\nlast";
            let starts: &[&[u8]] = &[
                b"",
                b"\x1b[1;44mcoloured attrs stay on\x1b[5;9H",
                b"\x1b[?6h\x1b[H origin mode",
                b"\x1b[?1049h\x1b[Halternate screen",
                b"\x1b7saved\x1b[2;2H\x1b[7m",
                b"\x1b[4h insert mode \x1b[?7l no wrap",
            ];
            for seed in [0, 3, 8] {
                // Coloured lines throughout; then ending on plain lines with the pen the
                // coloured part left set, which the dropped part alone decides.
                let mut carried = coloured_lines(6000, c, seed);
                carried.extend_from_slice(b"\x1b[0;4;35;48;5;100mpen on\r\n");
                carried.extend_from_slice(&plain_lines(3000, c, seed));
                for flood in [coloured_lines(6000, c, seed), carried] {
                    for start in starts {
                        let skipped = bulk_matches(rows, cols, start, &flood, after);
                        assert!(
                            skipped > flood.len() / 2,
                            "{start:?}: skipped only {skipped}"
                        );
                    }
                    // A partial scroll region: nothing may go.
                    assert_eq!(bulk_matches(rows, cols, b"\x1b[2;4r", &flood, after), 0);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any output before and after a coloured flood, from any pen: through the bulk skip,
        /// the model ends as a parser that read every byte it has applied, REP's last
        /// character and the pen included.
        #[test]
        fn bulk_skip_of_colours_around_any_output(
            before in output(60),
            after in output(60),
            seed in 0usize..1000,
            rows in 1u16..30,
            cols in 1u16..100,
        ) {
            let flood = coloured_lines(6000, usize::from(cols), seed);
            let after = [&after[..], b"\x1b[2bZ"].concat();
            let before = before.as_slice();
            let skipped = bulk_matches(rows, cols, before, &flood, &after);
            prop_assert!(skipped > 0 || !before.is_empty());
        }

        /// Any output before and after a plain flood: through the bulk skip, the model ends
        /// as a parser that read every byte it has applied.
        #[test]
        fn bulk_skip_around_any_output(
            before in output(60),
            after in output(60),
            seed in 0usize..1000,
            rows in 1u16..30,
            cols in 1u16..100,
        ) {
            const SB: usize = 50;
            let flood = plain_lines(6000, usize::from(cols), seed);
            let mut model = ScreenModel::new(rows, cols, SB);
            model.process(&before);
            model.process_bulk(&flood);
            model.process(&after);
            let stream = [&before[..], &flood, &after].concat();
            let mut want = vt100::Parser::new(non_zero(rows), non_zero(cols), SB);
            want.process(&stream[..stream.len() - model.pending_len()]);
            assert_same(model.screen(), want.screen(), &format!("{rows}x{cols}"));
        }
    }

    #[test]
    fn only_plain_text_long_enough_is_skipped() {
        let (rows, cols) = (24, 80);
        // Too few lines after the last CR for everything to scroll away.
        let short = plain_lines(2 * 24 + 50, 80, 1);
        assert_eq!(bulk_matches(rows, cols, b"", &short, b""), 0);
        // An escape sequence early on: only what precedes it could go, and that is too short.
        let mut esc = b"\x1b[5;5H".to_vec();
        esc.extend_from_slice(&plain_lines(6000, 80, 2));
        assert_eq!(bulk_matches(rows, cols, b"", &esc, b""), 0);
        // An unfinished sequence held back from before: the parser is not in the ground state.
        assert_eq!(
            bulk_matches(
                rows,
                cols,
                b"\x1b]0;title ",
                &plain_lines(6000, 80, 4),
                b"\x07"
            ),
            0
        );
        // No CR at all (bare LFs only): the column carries over, nothing may go.
        let bare: Vec<u8> = (0..6000)
            .flat_map(|i| format!("{i} x\n").into_bytes())
            .collect();
        assert_eq!(bulk_matches(rows, cols, b"", &bare, b""), 0);
        // Only empty lines at the end: REP must still repeat the last character printed.
        let mut empty = plain_lines(6000, 80, 7);
        empty.extend_from_slice(&b"\r\n".repeat(3000));
        assert_eq!(bulk_matches(rows, cols, b"", &empty, b""), 0);
        // The part after an escape sequence in the middle is parsed, and the model is right.
        let mut mid = plain_lines(6000, 80, 5);
        mid.extend_from_slice(b"\x1b[7m");
        mid.extend_from_slice(&plain_lines(6000, 80, 6));
        assert!(bulk_matches(rows, cols, b"", &mid, b"") > 0);
    }
}
