//! The session's terminal screen model: a vt100 parser fed the PTY output, kept exact at stream boundaries, and rendered to ANSI for joiners.
//!
//! Two things make a snapshot exact:
//!
//! - **Boundaries.** A joiner gets the snapshot and then the live stream from
//!   `head - pending_len()`. That only works if the model has applied exactly
//!   the bytes before that offset and its parser is back in the ground state
//!   there. So [`ScreenModel::process`] holds back a trailing incomplete
//!   escape sequence or UTF-8 character (the "carry") and applies it once the
//!   next chunk completes it. The carry always starts at an ESC or at a UTF-8
//!   lead byte, where any terminal's parser starts afresh; the daemon's one
//!   scanner ([`crate::term::seq`]) finds it, reading the stream as vte does.
//! - **State vt100 does not print.** `Screen::state_formatted` leaves out the
//!   alternate-screen switch, the main screen under it, the scrollback, the
//!   scroll region, origin mode and the saved cursor. The snapshot reads those
//!   from a clone of the screen, driven through a throwaway `vt100::Parser`:
//!   `CSI ? 47 l` / `CSI ? 47 h` flip which grid is active without touching
//!   either, `set_scrollback` pages through history, and a few cursor moves
//!   reveal the scroll region.

use std::fmt::Write as _;
use std::num::NonZeroU16;

use crate::metrics::METRICS;
use crate::term::pen;
use crate::term::queries::{Query, QueryHook};
use crate::term::seq::{Scanner, State, Tail};

/// Longest unfinished trailing sequence held back. Anything longer (a big OSC 52
/// clipboard copy, a sixel image) is fed through; the snapshot then ends by
/// re-opening a string of the same kind so the joiner swallows its tail too.
const MAX_CARRY: usize = 4096;

/// Every snapshot starts with a full reset (RIS) and clears the scrollback,
/// so it can also resync a terminal that shows something (even one left
/// inside a sequence: ESC ends any).
const RESET: &str = "\x1bc\x1b[3J";

/// What re-opens a sequence of the kind `state` harmlessly, so that a joiner
/// swallows the rest of a sequence too long to carry, as the model does.
fn resume_prefix(state: State) -> &'static str {
    match state {
        State::OscString => "\x1b]",
        // An unhandled DCS (final `~`) whose payload is dropped.
        State::DcsPassthrough => "\x1bP~",
        // `<<` drives the DEC parser into DCS/CSI ignore.
        State::DcsEntry | State::DcsParam | State::DcsIntermediate | State::DcsIgnore => "\x1bP<<",
        State::CsiEntry | State::CsiParam | State::CsiIntermediate | State::CsiIgnore => "\x1b[<<",
        State::SosPmApcString => "\x1bX",
        State::Escape => "\x1b",
        // `ESC SP` + final only selects C1 transmission or conformance levels.
        State::EscapeIntermediate => "\x1b ",
        State::Ground | State::Utf8 => "",
    }
}

fn non_zero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// The session's screen: a vt100 parser plus what it takes to snapshot it exactly.
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
    /// Scrollback length of the main screen, kept up to date while the
    /// alternate screen hides it.
    main_scrollback_len: usize,
    /// Scrollback lines the main screen keeps.
    scrollback_lines: usize,
    /// Whether the active grid's scroll region is the whole screen, as last probed. Only plain
    /// text and pen sequences were fed since (anything else or a resize forgets it): they cannot change it.
    full_region: Option<bool>,
}

/// A [`ScreenModel`] put away by [`ScreenModel::park`]; [`Parked::thaw`] brings it back.
pub struct Parked {
    /// The snapshot, with every scrollback line the model held.
    ansi: Box<[u8]>,
    rows: u16,
    cols: u16,
    scrollback_lines: usize,
    has_output: bool,
}

impl Parked {
    /// The model again, as a fresh one fed the snapshot.
    pub fn thaw(&self) -> ScreenModel {
        let mut model = ScreenModel::new(self.rows, self.cols, self.scrollback_lines);
        model.process(&self.ansi);
        // The snapshot asks the terminal nothing; nothing may be answered for it.
        let _ = model.take_queries();
        model.has_output = self.has_output;
        model
    }

    /// (rows, cols) of the parked model.
    pub fn size(&self) -> (u16, u16) {
        (self.rows, self.cols)
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        METRICS.screens_parked.sub(1);
        METRICS.screens_parked_bytes.sub(self.ansi.len() as u64);
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
            main_scrollback_len: 0,
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
            main_scrollback_len: self.main_scrollback_len,
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
        self.note_main_scrollback();
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

    /// While the alternate screen is active vt100 only reports its (empty)
    /// scrollback. Peek at the main grid by flipping the active grid off and
    /// back on: `CSI ? 47 l/h` only toggle the mode (47 does not clear, save
    /// or restore anything). Costs two tiny parses per chunk, only in
    /// full-screen programs. The parser must be at a sequence boundary, which
    /// it is unless an oversized sequence is being passed through.
    fn note_main_scrollback(&mut self) {
        if self.parser.screen().alternate_screen() && !self.overflow {
            self.parser.process(b"\x1b[?47l");
            self.main_scrollback_len = self.parser.screen().scrollback_len();
            self.parser.process(b"\x1b[?47h");
        }
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
        self.note_main_scrollback();
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
        let screen = self.parser.screen();
        if screen.alternate_screen() {
            self.main_scrollback_len
        } else {
            screen.scrollback_len()
        }
    }

    /// ANSI that, written into a FRESH terminal (xterm.js or a fresh vt100 parser) of the same size,
    /// reproduces the state; it also works when written into a terminal that already shows
    /// something (a resync): it starts with a full reset (RIS `ESC c`) and clears scrollback
    /// (`ESC[3J`). `max_scrollback` limits how many of the newest scrollback lines are included.
    pub fn snapshot_ansi(&self, max_scrollback: usize) -> Vec<u8> {
        let parts = self.snapshot_parts(max_scrollback);
        parts.assemble(parts.lines.len())
    }

    /// Render the snapshot once, with up to `max_scrollback` lines that
    /// [`SnapshotParts::assemble`] can then trim without rendering again.
    pub(crate) fn snapshot_parts(&self, max_scrollback: usize) -> SnapshotParts {
        let live = self.parser.screen();
        let (rows, _) = self.size();
        let alternate = live.alternate_screen();

        // A throwaway parser around a clone of the screen: free to page
        // through scrollback, flip grids and probe with cursor moves.
        let mut view = vt100::Parser::new(NonZeroU16::MIN, NonZeroU16::MIN, 0);
        *view.screen_mut() = live.clone();
        if alternate {
            view.process(b"\x1b[?47l");
        }
        let (lines, bridge) = render_scrollback(view.screen_mut(), max_scrollback);
        // Rendered; dropping it makes the probes' copies cheap.
        view.screen_mut().clear_scrollback();

        let main = Rendered::of(view.screen());
        let main_extras = Extras::probe(&mut view, rows);
        let mut screen = String::new();
        main.write(&mut screen, &main_extras, view.screen());
        if alternate {
            // `CSI ? 47 h` switches without saving the cursor, so the main
            // grid keeps the saved cursor written above; `CSI ? 1049 h` would
            // overwrite it with the current one. xterm.js treats 47 as 1047.
            screen.push_str("\x1b[?47h");
            view.process(b"\x1b[?47h");
            let alt_extras = Extras::probe(&mut view, rows);
            Rendered::of(live).write(&mut screen, &alt_extras, live);
        }
        screen.push_str(&live.input_mode_formatted());
        if self.overflow {
            screen.push_str(resume_prefix(self.scanner.state()));
        }
        SnapshotParts {
            lines,
            bridge,
            screen,
        }
    }

    /// The model put away as the snapshot that rebuilds it, for a session gone idle: a few
    /// hundred bytes of ANSI for a quiet shell, where the grid alone costs 32 bytes a cell
    /// (60 KiB at 24×80, and 2.5 KiB per 80-column scrollback line). `None` where the
    /// snapshot would not bring the model back: in the middle of a sequence, or in the one
    /// state whose saved cursor a snapshot cannot reach (see [`Self::saved_cursor_reproducible`]).
    ///
    /// The same round trip a live upgrade makes for every session (`freeze.rs`); what neither
    /// carries is the character REP (`CSI b`) would repeat, which programs send right after
    /// the character itself.
    pub fn park(&self) -> Option<Parked> {
        if self.pending_len() > 0 || self.overflow || !self.saved_cursor_reproducible() {
            return None;
        }
        let (rows, cols) = self.size();
        let ansi = self.snapshot_ansi(self.scrollback_lines).into_boxed_slice();
        METRICS.screens_parked.add(1);
        METRICS.screens_parked_bytes.add(ansi.len() as u64);
        Some(Parked {
            ansi,
            rows,
            cols,
            scrollback_lines: self.scrollback_lines,
            has_output: self.has_output,
        })
    }

    /// False in the one state where the saved cursor is lost: a grid's cursor waits to wrap
    /// after an emptied last column, which vt100's own rendering can only reach with
    /// DECSC/DECRC.
    pub(crate) fn saved_cursor_reproducible(&self) -> bool {
        let pending_on_empty = |s: &vt100::Screen| {
            let (row, col) = s.cursor_position();
            let cols = s.size().1.get();
            col >= cols && s.cell(row, cols - 1).is_some_and(|c| !c.has_contents())
        };
        let live = self.screen();
        if pending_on_empty(live) {
            return false;
        }
        if !live.alternate_screen() {
            return true;
        }
        // The main grid, behind the alternate one: a copy without scrollback is cheap.
        let mut view = vt100::Parser::new(NonZeroU16::MIN, NonZeroU16::MIN, 0);
        *view.screen_mut() = live.clone();
        view.screen_mut().clear_scrollback();
        view.process(b"\x1b[?47l");
        !pending_on_empty(view.screen())
    }

    /// Last-resort snapshot for a screen too big to send formatted: the
    /// visible text without attributes (alternate screen only, if active),
    /// the cursor and the input modes.
    pub(crate) fn snapshot_ansi_plain(&self) -> Vec<u8> {
        let live = self.parser.screen();
        let (_, cols) = self.size();
        let mut out = String::from(RESET);
        if live.alternate_screen() {
            out.push_str("\x1b[?1049h");
        }
        for (row, text) in live.rows(0, cols).enumerate() {
            if !text.is_empty() {
                // Writing into a String cannot fail.
                let _ = write!(out, "\x1b[{};1H{text}", row + 1);
            }
        }
        out.push_str(&live.cursor_state_formatted());
        out.push_str(&live.attributes_formatted());
        out.push_str(&live.input_mode_formatted());
        out.into_bytes()
    }

    /// The bare minimum: reset, cursor and input modes. Always small.
    pub(crate) fn snapshot_ansi_minimal(&self) -> Vec<u8> {
        let live = self.parser.screen();
        let mut out = String::from(RESET);
        if live.alternate_screen() {
            out.push_str("\x1b[?1049h");
        }
        let (row, col) = live.cursor_position();
        // Writing into a String cannot fail.
        let _ = write!(out, "\x1b[{};{}H", row + 1, col.saturating_add(1));
        out.push_str(if live.hide_cursor() { "\x1b[?25l" } else { "" });
        out.push_str(&live.input_mode_formatted());
        out.into_bytes()
    }
}

/// A rendered snapshot whose scrollback can still be trimmed.
pub(crate) struct SnapshotParts {
    /// Each scrollback line (oldest first) with what separates it from the
    /// next one.
    lines: Vec<String>,
    /// What pushes the scrollback lines off the screen.
    bridge: String,
    /// Everything after the scrollback.
    screen: String,
}

impl SnapshotParts {
    /// Scrollback lines available.
    pub(crate) fn lines(&self) -> usize {
        self.lines.len()
    }

    /// The snapshot with the newest `n` scrollback lines (at most all of them).
    pub(crate) fn assemble(&self, n: usize) -> Vec<u8> {
        let lines = &self.lines[self.lines.len() - n.min(self.lines.len())..];
        let mut out = Vec::with_capacity(
            RESET.len()
                + lines.iter().map(String::len).sum::<usize>()
                + self.bridge.len()
                + self.screen.len(),
        );
        out.extend_from_slice(RESET.as_bytes());
        for line in lines {
            out.extend_from_slice(line.as_bytes());
        }
        if !lines.is_empty() {
            out.extend_from_slice(self.bridge.as_bytes());
        }
        out.extend_from_slice(self.screen.as_bytes());
        out
    }
}

/// Render up to `max` of the newest scrollback lines of `screen`'s active grid.
///
/// Each line is printed on its own terminal row; a line that wrapped in the
/// model is continued by letting the next one auto-wrap (so the terminal marks
/// it wrapped too), the others end in CRLF. Then enough line feeds push them
/// all into the terminal's scrollback, leaving a blank screen. Returns the
/// lines and that bridge; `screen` is left scrolled back to the live view.
fn render_scrollback(screen: &mut vt100::Screen, max: usize) -> (Vec<String>, String) {
    let total = screen.scrollback_len();
    let n = total.min(max);
    if n == 0 {
        return (Vec::new(), String::new());
    }
    let (rows, cols) = screen.size();
    let (rows, cols) = (usize::from(rows.get()), cols.get());
    let first = total - n;

    // If the newest scrollback line wrapped into the screen's first row, draw
    // that row too (it is cleared and redrawn later) so the wrap is recorded.
    screen.set_scrollback(1);
    let end = if screen.row_wrapped(0) {
        total + 1
    } else {
        total
    };

    let mut lines = Vec::with_capacity(n);
    let mut bridge = String::new();
    let mut next = first;
    while next < end {
        // rows_formatted renders each row as a continuation of the one above
        // it in the same window, so windows overlap by a row (a 1-row screen
        // never records wraps anyway).
        let top = if next == first || rows == 1 {
            next
        } else {
            next - 1
        };
        screen.set_scrollback(total - top);
        let count = (top + rows).min(end) - top;
        for (i, mut text) in screen
            .rows_formatted(0, cols)
            .enumerate()
            .take(count)
            .skip(next - top)
        {
            let line = top + i;
            if text.contains('\x1b') {
                // Rows start from default attributes; also keeps line feeds
                // from filling new rows with a background colour in xterm.js.
                text.push_str("\x1b[m");
            }
            // `i < count <= rows`, which fits in u16.
            let wrapped = screen.row_wrapped(i as u16);
            if line < total {
                if !wrapped && line + 1 < total {
                    text.push_str("\r\n");
                }
                lines.push(text);
            } else {
                bridge.push_str(&text);
            }
        }
        next = top + count;
    }
    screen.set_scrollback(0);

    // Each line after the first took one line feed (or auto-wrap); the screen
    // is full of them once `rows - 1` more rows advanced, and each further
    // advance scrolls exactly one line into scrollback.
    let drawn = usize::from(end > total);
    let last_wrapped = end > total;
    if !last_wrapped {
        bridge.push('\r');
    }
    bridge.push_str(&"\n".repeat(rows - drawn));
    (lines, bridge)
}

/// The parts of one grid's rendering taken before probing disturbs it.
struct Rendered {
    contents: String,
    attrs: String,
    cursor: (u16, u16),
}

impl Rendered {
    fn of(screen: &vt100::Screen) -> Self {
        Self {
            contents: screen.contents_formatted(),
            attrs: screen.attributes_formatted(),
            cursor: screen.cursor_position(),
        }
    }

    /// Draw the grid, then what vt100 does not print: saved cursor, scroll
    /// region and origin mode. Those come after the contents (whose CRLFs
    /// would scroll inside a region) and move the cursor, so it is placed
    /// again at the end. `grid` shows the grid's cells (probing leaves them).
    fn write(&self, out: &mut String, extras: &Extras, grid: &vt100::Screen) {
        let (rows, cols) = grid.size();
        let (rows, cols) = (rows.get(), cols.get());
        out.push_str(&self.contents);
        let full = extras.region == (0, rows - 1);
        // contents_formatted itself may use DECSC to leave the cursor past an
        // emptied last column; then the saved cursor must be written back.
        let saved = extras.saved_cursor != (0, 0)
            || extras.saved_attrs != "\x1b[m"
            || extras.saved_origin
            || self.contents.contains("\x1b7");
        if full && !saved && !extras.origin {
            return;
        }
        // Writing into a String cannot fail (the `let _ =` below).
        if saved {
            // Saved before the region is set: with the full screen as region
            // origin mode does not shift rows, line feeds do not scroll, and
            // vt100 keeps a saved position even where the current region
            // would not allow it.
            let (row, col) = extras.saved_cursor;
            if extras.saved_origin {
                out.push_str("\x1b[?6h");
            }
            let wrap = (col >= cols).then(|| wrap_place(grid, row, 0)).flatten();
            match &wrap {
                Some(w) => w.write(out, w.row + 1),
                None => {
                    let _ = write!(out, "\x1b[{};{}H", row + 1, col.min(cols - 1) + 1);
                }
            }
            out.push_str(&extras.saved_attrs);
            out.push_str("\x1b7");
            if let Some(WrapPlace {
                col,
                erase: Some(sgr),
                ..
            }) = &wrap
            {
                // Take back the blank drawn to get past the margin.
                let _ = write!(out, "\x1b[{};{}H{sgr}\x1b[X", row + 1, col + 1);
            }
            if extras.saved_origin {
                out.push_str("\x1b[?6l");
            }
        }
        let (top, bottom) = extras.region;
        if !full {
            let _ = write!(out, "\x1b[{};{}r", top + 1, bottom + 1);
        }
        if saved && extras.saved_cursor == self.cursor && extras.saved_origin == extras.origin {
            // DECRC puts it back exactly, past the margin or outside the
            // region included, without a DECSC of our own.
            out.push_str("\x1b8");
        } else {
            self.place_cursor(out, extras, grid, rows, cols);
        }
        out.push_str(&self.attrs);
    }

    /// Move the cursor to where it is in the model, setting origin mode.
    fn place_cursor(
        &self,
        out: &mut String,
        extras: &Extras,
        grid: &vt100::Screen,
        rows: u16,
        cols: u16,
    ) {
        let (row, col) = self.cursor;
        let (top, bottom) = extras.region;
        let in_region = (top..=bottom).contains(&row);
        if extras.origin {
            out.push_str("\x1b[?6h");
        }
        // Writing into a String cannot fail (the `let _ =` below).
        if col >= cols {
            // Line feeds must not reach the region's bottom on the way, and
            // with origin mode CUP only reaches rows inside the region.
            let lowest = match (extras.origin, in_region) {
                (false, _) if row <= bottom || bottom == rows - 1 => 0,
                (false, _) => bottom + 1,
                (true, true) => top,
                (true, false) => row,
            };
            if let Some(w) = wrap_place(grid, row, lowest) {
                let at = if extras.origin && in_region {
                    w.row - top + 1
                } else {
                    w.row + 1
                };
                if extras.origin && !in_region {
                    // Only DECRC gets the cursor outside the region in
                    // origin mode; VPA is not shifted by vt100.
                    let _ = write!(out, "\x1b[1;{}H\x1b[{at}d", w.col + 1);
                    out.push_str(&w.draw);
                } else {
                    w.write(out, at);
                }
                if w.erase.is_some() {
                    // Past the margin after an empty cell with no row above
                    // to come down from: only DECRC gets there, as in
                    // vt100's own rendering. Loses the saved cursor.
                    out.push_str("\x1b7\x08\x1b[X\x1b8");
                }
                return;
            }
        }
        let col = col.min(cols - 1) + 1;
        if !extras.origin {
            let _ = write!(out, "\x1b[{};{col}H", row + 1);
        } else if in_region {
            let _ = write!(out, "\x1b[{};{col}H", row - top + 1);
        } else {
            let _ = write!(out, "\x1b[1;{col}H\x1b[{}d", row + 1);
        }
    }
}

/// How to leave the cursor past the right margin of row `target` (waiting
/// to wrap): redraw the last character of `row` (the SGR and text in
/// `draw`, at column `col`), then go down `target - row` rows with line
/// feeds, which keep the column. If no row has such a character, `draw` is
/// a blank with the last cell's attributes and `erase` is set: erase it
/// again (ECH) once the position has been used.
struct WrapPlace {
    row: u16,
    target: u16,
    col: u16,
    draw: String,
    erase: Option<String>,
}

impl WrapPlace {
    /// Move there; `at` is the CUP row for `self.row`.
    fn write(&self, out: &mut String, at: u16) {
        // Writing into a String cannot fail.
        let _ = write!(out, "\x1b[{at};{}H{}", self.col + 1, self.draw);
        for _ in self.row..self.target {
            out.push('\n');
        }
    }
}

/// A way to put the cursor past the margin of `target`, coming down from a
/// row no higher than `lowest` (see [`WrapPlace`]). Mirrors vt100's own.
fn wrap_place(screen: &vt100::Screen, target: u16, lowest: u16) -> Option<WrapPlace> {
    let cols = screen.size().1.get();
    let last_char = |row: u16| {
        let last = screen.cell(row, cols - 1)?;
        let (col, cell) = if last.is_wide_continuation() && cols > 1 {
            (cols - 2, screen.cell(row, cols - 2)?)
        } else {
            (cols - 1, last)
        };
        cell.has_contents().then_some((col, cell))
    };
    for row in (lowest..=target).rev() {
        if let Some((col, cell)) = last_char(row) {
            return Some(WrapPlace {
                row,
                target,
                col,
                draw: format!("{}{}", cell_sgr(cell), cell.contents()),
                erase: None,
            });
        }
    }
    let sgr = cell_sgr(screen.cell(target, cols - 1)?);
    Some(WrapPlace {
        row: target,
        target,
        col: cols - 1,
        draw: format!("{sgr} "),
        erase: Some(sgr),
    })
}

/// Grid state vt100 keeps private, read back by probing a throwaway parser.
struct Extras {
    /// Scroll region, first and last row.
    region: (u16, u16),
    origin: bool,
    saved_cursor: (u16, u16),
    /// SGR that sets the attributes saved with the cursor.
    saved_attrs: String,
    /// Origin mode saved with the cursor.
    saved_origin: bool,
}

impl Extras {
    /// Probe the active grid of `view` (whose scrollback should be cleared:
    /// it may be cloned). Leaves the grid's cursor, origin mode and region
    /// changed: render first.
    fn probe(view: &mut vt100::Parser, rows: u16) -> Self {
        let row = |view: &vt100::Parser| view.screen().cursor_position().0;
        // With origin mode on, CUP counts from the region's top and stops at
        // its bottom: the region, if origin mode is on and that shows.
        let origin_region = |view: &mut vt100::Parser| {
            view.process(b"\x1b[H");
            let top = row(view);
            view.process(b"\x1b[65535H");
            let bottom = row(view);
            (top > 0 || bottom < rows - 1).then_some((top, bottom))
        };
        // With a full-screen region origin mode only shows once the region
        // shrinks. Destroys the region.
        let origin_when_full = |view: &mut vt100::Parser| {
            view.process(b"\x1b[2r\x1b[H");
            row(view) == 1
        };
        let full = (0, rows - 1);

        let (region, origin) = match origin_region(view) {
            Some(region) => (region, true),
            None => {
                // Origin mode is off, or on with a full-screen region. Read
                // the region with origin mode on; whether it was on needs a
                // second copy, as that test destroys the region.
                let mut twin = vt100::Parser::new(NonZeroU16::MIN, NonZeroU16::MIN, 0);
                *twin.screen_mut() = view.screen().clone();
                view.process(b"\x1b[?6h\x1b[H");
                let top = row(view);
                view.process(b"\x1b[65535H");
                let region = (top, row(view));
                (region, region == full && origin_when_full(&mut twin))
            }
        };
        // DECRC brings back the saved position, attributes and origin mode.
        view.process(b"\x1b8");
        let screen = view.screen();
        let saved_cursor = screen.cursor_position();
        let saved_attrs = screen.attributes_formatted();
        let saved_origin = if region == full {
            origin_when_full(view)
        } else {
            origin_region(view).is_some()
        };
        Self {
            region,
            origin,
            saved_cursor,
            saved_attrs,
            saved_origin,
        }
    }
}

/// SGR that sets exactly the attributes of `cell`.
fn cell_sgr(cell: &vt100::Cell) -> String {
    let mut sgr = String::from("\x1b[0");
    for (on, code) in [
        (cell.bold(), ";1"),
        (cell.dim(), ";2"),
        (cell.italic(), ";3"),
        (cell.underline(), ";4"),
        (cell.inverse(), ";7"),
    ] {
        if on {
            sgr.push_str(code);
        }
    }
    for (color, base) in [(cell.fgcolor(), 30), (cell.bgcolor(), 40)] {
        // Writing into a String cannot fail.
        let _ = match color {
            vt100::Color::Default => Ok(()),
            vt100::Color::Idx(i) if i < 8 => write!(sgr, ";{}", base + i),
            vt100::Color::Idx(i) if i < 16 => write!(sgr, ";{}", base + 60 + i - 8),
            vt100::Color::Idx(i) => write!(sgr, ";{};5;{i}", base + 8),
            vt100::Color::Rgb(r, g, b) => write!(sgr, ";{};2;{r};{g};{b}", base + 8),
        };
    }
    sgr.push('m');
    sgr
}

#[cfg(test)]
mod freeze_tests {
    use super::*;

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::seq::arbitrary::{chunks, output};
    use proptest::prelude::*;

    const SB_CAP: usize = 100_000;

    /// A fresh vt100 parser fed `bytes`.
    fn fresh(rows: u16, cols: u16, bytes: &[u8]) -> vt100::Parser {
        let mut p = vt100::Parser::new(non_zero(rows), non_zero(cols), SB_CAP);
        p.process(bytes);
        p
    }

    /// Every scrollback row, rendered and with its wrap flag, oldest first.
    fn scrollback_rows(screen: &vt100::Screen) -> Vec<(String, bool)> {
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
    fn assert_same_after(got: &mut vt100::Parser, want: &mut vt100::Parser, tail: &[u8]) {
        got.process(tail);
        want.process(tail);
        assert_same(
            got.screen(),
            want.screen(),
            &format!("after {:?}", String::from_utf8_lossy(tail)),
        );
    }

    /// The probes that reveal hidden state, fed to clones of both sides.
    const PROBES: &[&[u8]] = &[
        b"\x1b[?1049l",
        b"\x1b8X",
        b"\x1b[?47l",
        b"\x1b[999;1H\n\n\nnew\x1bMrev",
        b"\x1b[H\x1bM\x1bMtop",
        b"\x1b[?1049l\x1b[999;1H\r\n\r\nafter\x1b8Y",
    ];

    /// A model fed `stream` in one go reproduces itself through its snapshot.
    fn check_stream(rows: u16, cols: u16, stream: &[u8]) -> ScreenModel {
        let mut model = ScreenModel::new(rows, cols, 1000);
        model.process(stream);
        check_model(&model, stream);
        model
    }

    fn check_model(model: &ScreenModel, stream: &[u8]) {
        let (rows, cols) = model.size();
        assert_eq!(model.pending_len(), 0);
        let snap = model.snapshot_ansi(usize::MAX);
        let mut got = fresh(rows, cols, &snap);
        let want = fresh(rows, cols, stream);
        if want.screen().scrollback_len() <= 1000 {
            assert_same(got.screen(), want.screen(), "snapshot");
            assert_same(got.screen(), model.screen(), "snapshot vs model");
        }
        for probe in PROBES {
            let mut g = fresh(rows, cols, &snap);
            let mut w = fresh(rows, cols, stream);
            if w.screen().scrollback_len() <= 1000 {
                assert_same_after(&mut g, &mut w, probe);
            }
        }
        got.process(b"x");
        assert_eq!(got.screen().cursor_position(), {
            let mut m = fresh(rows, cols, stream);
            m.process(b"x");
            m.screen().cursor_position()
        });
    }

    fn shell_lines(n: usize) -> Vec<u8> {
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

    #[test]
    fn plain_text_with_scrollback_and_attributes() {
        let mut s = shell_lines(60);
        s.extend_from_slice(b"\x1b[1mbold\x1b[22m \x1b[2mdim\x1b[22m \x1b[3mitalic\x1b[23m \x1b[4munder\x1b[24m \x1b[7minverse\x1b[27m\r\n");
        s.extend_from_slice(b"\x1b[31mred \x1b[92mbright \x1b[38;5;200m256 \x1b[38;2;1;2;3mtrue \x1b[41mbg \x1b[103mbg2 \x1b[48;5;17mbg256\x1b[m\r\n");
        s.extend_from_slice("wide: 日本語テキスト and emoji 😀👍 done\r\n".as_bytes());
        s.extend_from_slice("a very long line that wraps around the edge of the screen more than once because it is long, with 漢字 in it and more text to go\r\n".as_bytes());
        s.extend_from_slice(b"\x1b[44m\x1b[Kbg erase\x1b[m\r\n");
        s.extend_from_slice(b"\x1b[10;20Hmiddle\x1b[5;7H\x1b[1;33;45m");
        check_stream(24, 80, &s);
        s.extend_from_slice(b"\x1b[?25l");
        check_stream(24, 80, &s);
        // Narrow screen: many wrapped lines, in scrollback too.
        check_stream(7, 13, &s);
    }

    #[test]
    fn wrapped_scrollback_lines() {
        let mut s = Vec::new();
        for i in 0..40 {
            s.extend_from_slice(format!("{i:03}-").as_bytes());
            s.extend_from_slice(&b"abcdefghij".repeat(i % 5));
            s.extend_from_slice("\x1b[35m漢字漢字漢字漢字\x1b[m".as_bytes());
            s.extend_from_slice(b"\r\n");
        }
        // The newest scrollback line wraps into the screen's first row.
        s.extend_from_slice(&b"Z".repeat(7 * 10 + 3));
        check_stream(6, 10, &s);
        let mut s2 = s.clone();
        s2.extend_from_slice(b"\r\n");
        check_stream(6, 10, &s2);
        // Cursor waiting to wrap at the right margin.
        let mut s3 = s.clone();
        s3.extend_from_slice(b"\r\nabcdefghij");
        check_stream(6, 10, &s3);
    }

    #[test]
    fn edge_sizes() {
        let s = shell_lines(30);
        check_stream(1, 1, &s);
        check_stream(1, 40, &s);
        check_stream(2, 5, &s);
        check_stream(3, 200, &s);
        let mut m = check_stream(24, 80, b"");
        assert!(!m.has_output());
        m.process(b"x");
        assert!(m.has_output());
    }

    #[test]
    fn scrollback_limit() {
        let s = shell_lines(50);
        let mut model = ScreenModel::new(10, 40, 1000);
        model.process(&s);
        let all = model.scrollback_len();
        assert!(all > 30);
        for n in [0, 1, 5, all] {
            let snap = model.snapshot_ansi(n);
            let got = fresh(10, 40, &snap);
            assert_eq!(got.screen().scrollback_len(), n);
            assert_eq!(
                got.screen().contents_formatted(),
                model.screen().contents_formatted()
            );
            let (g, w) = (
                scrollback_rows(got.screen()),
                scrollback_rows(model.screen()),
            );
            assert_eq!(g[..], w[all - n..]);
        }
        // More scrollback than the model keeps: only the kept lines.
        let mut small = ScreenModel::new(10, 40, 7);
        small.process(&s);
        assert_eq!(small.scrollback_len(), 7);
        let got = fresh(10, 40, &small.snapshot_ansi(usize::MAX));
        assert_eq!(
            scrollback_rows(got.screen()),
            scrollback_rows(small.screen())
        );
    }

    fn full_screen_program() -> Vec<u8> {
        let mut s = shell_lines(40);
        s.extend_from_slice(b"$ vim file\r\n");
        s.extend_from_slice(
            b"\x1b[?1049h\x1b[22;0;0t\x1b[?1h\x1b=\x1b[?2004h\x1b[?1002h\x1b[?1006h",
        );
        s.extend_from_slice(b"\x1b[H\x1b[2J\x1b[44;37m");
        for r in 1..24 {
            s.extend_from_slice(
                format!("\x1b[{r};1H\x1b[38;5;{r}m~ line {r} \x1b[1mbold\x1b[22m").as_bytes(),
            );
        }
        s.extend_from_slice(
            "\x1b[24;1H\x1b[7m-- INSERT -- 日本\x1b[27m\x1b[5;10H\x1b[38;2;255;128;0m".as_bytes(),
        );
        s
    }

    #[test]
    fn alternate_screen_program() {
        let s = full_screen_program();
        let model = check_stream(24, 80, &s);
        assert!(model.screen().alternate_screen());
        assert!(model.scrollback_len() > 10);
        assert_eq!(model.scrollback_len(), {
            let mut p = fresh(24, 80, &s);
            p.process(b"\x1b[?1049l");
            p.screen().scrollback_len()
        });
        // Leaving the program: both show the shell again, the model too.
        let snap = model.snapshot_ansi(usize::MAX);
        let mut got = fresh(24, 80, &snap);
        let mut want = fresh(24, 80, &s);
        let leave = b"\x1b[?1049l\x1b[?1l\x1b>$ ls\r\n";
        assert_same_after(&mut got, &mut want, leave);
        let mut model = model;
        model.process(leave);
        assert_same(got.screen(), model.screen(), "model after leaving");
        assert_eq!(model.scrollback_len(), got.screen().scrollback_len());
    }

    #[test]
    fn alternate_screen_variants() {
        // ?47 (no clear, no cursor save), combined params, re-entry, mode 1000/1003/1005.
        let mut s = shell_lines(5);
        s.extend_from_slice(
            b"\x1b[?47halt47\x1b[?47l back\x1b[?1049;1hcombo\x1b[?1003h\x1b[?1005h",
        );
        check_stream(10, 30, &s);
        s.extend_from_slice(b"\x1b[?1049l\r\nmain again\x1b[?1049h\x1b[?1000hsecond\x1b7\x1b[3;4H\x1b[31msaved\x1b[32m");
        check_stream(10, 30, &s);
        let mut t = shell_lines(5);
        t.extend_from_slice(b"\x1b[?1049hx\x1b[?1049l\x1b[?1049hy");
        check_stream(10, 30, &t);
    }

    #[test]
    fn resize_while_alternate() {
        let s = full_screen_program();
        for (rows, cols) in [(30, 100), (10, 40), (24, 80), (5, 200)] {
            let mut model = ScreenModel::new(24, 80, 1000);
            model.process(&s);
            model.resize(rows, cols);
            let mut want = fresh(24, 80, &s);
            want.set_size(non_zero(rows), non_zero(cols));
            assert_eq!(model.scrollback_len(), {
                let mut w = fresh(24, 80, &s);
                w.set_size(non_zero(rows), non_zero(cols));
                w.process(b"\x1b[?1049l");
                w.screen().scrollback_len()
            });
            let snap = model.snapshot_ansi(usize::MAX);
            let mut got = fresh(rows, cols, &snap);
            assert_same(got.screen(), want.screen(), "resized alt");
            assert_same_after(&mut got, &mut want, b"\x1b[?1049l");
            model.process(b"\x1b[?1049l");
            assert_same(got.screen(), model.screen(), "model after leaving");
            assert_same_after(&mut got, &mut want, b"more\r\n");
        }
    }

    #[test]
    fn scroll_region_origin_and_saved_cursor() {
        let mut s = shell_lines(30);
        // apt-style progress bar: region above the last line, saved cursor.
        s.extend_from_slice(
            b"\x1b7\x1b[0;23r\x1b8\x1b[1A\x1b7\x1b[24;0f\x1b[42mProgress: [ 40%]\x1b[49m\x1b8",
        );
        s.extend_from_slice(b"Get:1 http://deb stuff\r\n");
        check_stream(24, 80, &s);
        // Saved cursor with attributes, away from the cursor.
        let mut t = shell_lines(3);
        t.extend_from_slice(b"\x1b[5;9H\x1b[1;31m\x1b7\x1b[m\x1b[10;1Hhere");
        check_stream(24, 80, &t);
        // Origin mode inside a region.
        let mut u = shell_lines(3);
        u.extend_from_slice(b"\x1b[5;15r\x1b[?6h\x1b[3;4Hin region");
        check_stream(24, 80, &u);
        // Origin mode with the full screen as region.
        let mut v = shell_lines(3);
        v.extend_from_slice(b"\x1b[?6h\x1b[3;4Hfull");
        check_stream(24, 80, &v);
        // Region in the alternate screen and in the main one under it.
        let mut w = shell_lines(30);
        w.extend_from_slice(b"\x1b[2;20r\x1b[5;1Hmain region\x1b[?1049h\x1b[3;10r\x1b[4;1Halt region\x1b7\x1b[20;5H");
        check_stream(24, 80, &w);
    }

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

    /// A small deterministic PRNG for the randomized tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random terminal output built from plausible pieces.
    fn random_stream(rng: &mut Rng, pieces: usize) -> Vec<u8> {
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
            let what = format!("round {round}");
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

    #[test]
    fn randomized_streams_and_splits() {
        // ROUNDS / SEED widen the search when hunting bugs.
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let mut rng = Rng(env("SEED", 0x9e37_79b9_7f4a_7c15));
        for round in 0..env("ROUNDS", 300) {
            let pieces = 20 + rng.below(200);
            let stream = random_stream(&mut rng, pieces);
            let (rows, cols) = (1 + rng.below(12) as u16, 1 + rng.below(40) as u16);
            let whole = fresh(rows, cols, &stream);
            // Random chunking gives the same screen as one big write.
            let mut model = ScreenModel::new(rows, cols, SB_CAP);
            let mut at = 0;
            let mut cut = None;
            while at < stream.len() {
                let n = 1 + rng.below(64);
                let end = (at + n).min(stream.len());
                model.process(&stream[at..end]);
                at = end;
                if cut.is_none() && rng.below(3) == 0 {
                    cut = Some((
                        at,
                        model.pending_len(),
                        model.snapshot_ansi(usize::MAX),
                        model.saved_cursor_reproducible(),
                    ));
                }
            }
            if std::env::var("DUMP_ROUND").ok() == Some(round.to_string()) {
                eprintln!("size {rows}x{cols}\nstream {:?}", stream);
            }
            // The stream may end inside a sequence, which the model holds
            // back (with any C0 controls inside it, which vte executes).
            let applied = &stream[..stream.len() - model.pending_len()];
            let what = format!("round {round}");
            assert_same(model.screen(), fresh(rows, cols, applied).screen(), &what);
            if let Some((at, pending, snap, probe)) = cut {
                if std::env::var("DUMP").is_ok() {
                    eprintln!("round {round} size {rows}x{cols} cut {at} pending {pending}\nstream b\"{}\"", stream.escape_ascii());
                }
                let rest = &stream[at - pending..];
                let mut joiner = fresh(rows, cols, &snap);
                joiner.process(rest);
                let restores = rest.windows(2).any(|w| w == b"\x1b8")
                    || rest.windows(6).any(|w| w == b"?1049l");
                if probe || !restores {
                    assert_same(
                        joiner.screen(),
                        whole.screen(),
                        &format!("{what} joined at {at}"),
                    );
                }
                let mut w = fresh(rows, cols, &stream);
                for p in PROBES.iter().filter(|_| probe) {
                    assert_same_after(&mut joiner, &mut w, p);
                }
            }
            let snap = model.snapshot_ansi(usize::MAX);
            if std::env::var("DUMP_ROUND").ok() == Some(round.to_string()) {
                eprintln!(
                    "size {rows}x{cols}\nstream {:?}\nsnap {:?}",
                    String::from_utf8_lossy(&stream),
                    String::from_utf8_lossy(&snap)
                );
            }
            let got = fresh(rows, cols, &snap);
            let want = fresh(rows, cols, applied);
            assert_same(
                got.screen(),
                want.screen(),
                &format!("{what} full snapshot"),
            );
            if model.saved_cursor_reproducible() {
                for p in PROBES {
                    let mut g = fresh(rows, cols, &snap);
                    let mut w = fresh(rows, cols, applied);
                    assert_same_after(&mut g, &mut w, p);
                }
            }
        }
    }
}

#[cfg(test)]
mod bulk_tests {
    use super::tests::assert_same;
    use super::*;
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
