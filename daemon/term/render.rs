//! The ANSI renderer: a vt100 screen written out as the bytes that rebuild it in a fresh
//! terminal (xterm.js or a fresh vt100 parser), scrollback included, for joiners, resyncs,
//! parked models and live upgrades.
//!
//! `Screen::state_formatted` leaves out the alternate-screen switch, the main screen under it,
//! the scrollback, the scroll region, origin mode and the saved cursor. The renderer reads
//! those from a clone of the screen, driven through a throwaway `vt100::Parser`: `CSI ? 47 l` /
//! `CSI ? 47 h` flip which grid is active without touching either, `set_scrollback` pages
//! through history, and a few cursor moves reveal the scroll region.

use std::fmt::Write as _;
use std::num::NonZeroU16;

use super::seq::State;

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

/// Whether the joiner, re-opened by [`resume_prefix`], is in the kind of state `state` is, so
/// that the rest of the sequence ends it as it ends the model's (dispatching, and so
/// forgetting REP's character, or not). A CSI or DCS still in its parameters resumes as one
/// to ignore (so that the joiner never acts on parameters it does not have): the model's will
/// most likely dispatch and forget REP's character, the joiner's never will, so the character
/// is not carried there.
fn resumes_in_kind(state: State) -> bool {
    !matches!(
        state,
        State::DcsEntry
            | State::DcsParam
            | State::DcsIntermediate
            | State::CsiEntry
            | State::CsiParam
            | State::CsiIntermediate
    )
}

/// Render the snapshot of `live` once, with up to `max_scrollback` lines that
/// [`SnapshotParts::assemble`] can then trim without rendering again. `open` is the kind of
/// sequence the parser is inside, when one too long to hold back was fed: the snapshot ends
/// by re-opening one of that kind.
pub(crate) fn snapshot_parts(
    live: &vt100::Screen,
    max_scrollback: usize,
    open: Option<State>,
) -> SnapshotParts {
    let rows = live.size().0.get();
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

    let mut main = Rendered::of(view.screen());
    // The snapshot starts with a reset and the bridge leaves the screen blank but for the row
    // the newest scrollback line wraps into: erasing the screen again would end that wrap (an
    // erase from the first column ends a row's wrap in xterm.js), so the grid is drawn from
    // home without one.
    if let Some(at) = main.contents.find("\x1b[H\x1b[J").filter(|at| *at < 16) {
        main.contents.replace_range(at..at + 6, "\x1b[H");
    }
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
    // REP's character is forgotten when a sequence ends (dispatched), not when it opens: inside
    // an oversized sequence the model still holds it, and one that ends without a dispatch (a
    // string of SOS/PM/APC, a CSI or DCS being ignored) leaves it to a REP after it. So it is
    // printed before the sequence is re-opened, wherever the joiner resumes in the model's own
    // kind of state and so ends it alike.
    if open.is_none_or(resumes_in_kind) {
        screen.push_str(&reprint_last_char(live).unwrap_or_default());
    }
    if let Some(state) = open {
        screen.push_str(resume_prefix(state));
    }
    SnapshotParts {
        lines,
        bridge,
        screen,
    }
}

/// What makes REP (`CSI b`) repeat in the joiner what it would repeat in `live`: the last
/// printed character, which the end of any control function makes both vt100 and xterm.js
/// forget, so it is only known when the stream's last action printed it (or opened the
/// sequence still open). The snapshot then ends by printing
/// that cell again where it stands: the pen is the cell's (setting another would have made REP
/// forget it), and the cursor ends where it was, waiting to wrap after the last column too.
/// `None` when nothing is to be repeated.
fn reprint_last_char(live: &vt100::Screen) -> Option<String> {
    let c = live.last_char()?;
    let (row, col) = live.cursor_position();
    let mut at = col.checked_sub(1)?;
    if live.cell(row, at)?.is_wide_continuation() {
        at = at.checked_sub(1)?;
    }
    let cell = live.cell(row, at)?;
    // Printing it again must leave the cursor where it is: a resize can move the cursor
    // into the character (onto a wide one's second half) without making xterm.js forget
    // it, and there the cursor, which everyone sees, wins over what a later REP repeats.
    let width = if cell.is_wide() { 2 } else { 1 };
    let text = cell.contents();
    // The cell holds the character unless something printed later (a combining mark adds
    // to it and keeps the character REP repeats).
    (text.starts_with(c) && at + width == col).then(|| format!("\x1b[{}G{text}", at + 1))
}

/// False in the one state where the saved cursor is lost: a grid's cursor waits to wrap
/// after an emptied last column, which vt100's own rendering can only reach with
/// DECSC/DECRC.
pub(crate) fn saved_cursor_reproducible(live: &vt100::Screen) -> bool {
    let pending_on_empty = |s: &vt100::Screen| {
        let (row, col) = s.cursor_position();
        let cols = s.size().1.get();
        col >= cols && s.cell(row, cols - 1).is_some_and(|c| !c.has_contents())
    };
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
pub(crate) fn plain_snapshot(live: &vt100::Screen) -> Vec<u8> {
    let cols = live.size().1.get();
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
pub(crate) fn minimal_snapshot(live: &vt100::Screen) -> Vec<u8> {
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
                    out.push_str("\x1b7\x1b[X\x1b8");
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
    // Only the target row itself: a line feed ends a pending wrap (xterm.js moves the cursor
    // back onto the screen), and one onto a row ends that row's wrap, so the cursor cannot be
    // brought down from a row above.
    let _ = lowest;
    if let Some((col, cell)) = last_char(target) {
        return Some(WrapPlace {
            row: target,
            target,
            col,
            draw: format!("{}{}", cell_sgr(cell), cell.contents()),
            erase: None,
        });
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
mod tests {
    use crate::term::model::ScreenModel;
    use crate::term::screen_check::{
        assert_same, assert_same_after, fresh, non_zero, random_stream, scrollback_rows,
        shell_lines, Rng, PROBES, SB_CAP,
    };

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
                        super::saved_cursor_reproducible(model.screen()),
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
            if super::saved_cursor_reproducible(model.screen()) {
                for p in PROBES {
                    let mut g = fresh(rows, cols, &snap);
                    let mut w = fresh(rows, cols, applied);
                    assert_same_after(&mut g, &mut w, p);
                }
            }
        }
    }
}
