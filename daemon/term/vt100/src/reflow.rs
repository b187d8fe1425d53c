//! The main screen's resize as xterm.js 6 does it (ptyhub's addition to this copy of vt100):
//! rows taken from or given to the scrollback, and soft-wrapped lines rewrapped to the new width
//! both ways, so a model that saw a resize holds what every xterm.js viewer that saw it live
//! shows.
//!
//! This is a port of xterm.js's `Buffer.resize`, `_reflowLarger`, `_reflowSmaller` and
//! `BufferReflow.ts` (MIT, the xterm.js authors) at the release 6.0.0 (the tag, not later changes such as the cursor clamp after a
//! resize), with its default
//! `reflowCursorLine: false`: the wrapped line that holds the cursor is left as it is (the
//! program redraws it). It works on one list of lines, the scrollback and then the screen, as
//! xterm.js does; `is_wrapped` on a line says it continues the line above (vt100's own flag,
//! on the line above, says the same from the other side). The odd corners of the original
//! (a line popped from the end while lines above are rewrapped, the order in which a full
//! buffer drops its oldest lines) are kept on purpose: the point is to agree with the viewers.

use alloc::vec::Vec;

use crate::Cell;

/// One line of the buffer.
pub struct Line {
    pub cells: Vec<Cell>,
    /// Whether it continues the line above (a soft wrap).
    pub is_wrapped: bool,
}

impl Line {
    fn blank(cols: usize, is_wrapped: bool) -> Self {
        Self {
            cells: vec![Cell::new(); cols],
            is_wrapped,
        }
    }

    /// xterm.js's cell width: 2 for a wide character, 0 for its second half (and past the end
    /// of the line, where xterm.js reads zeros), 1 otherwise.
    fn width(&self, i: usize) -> usize {
        match self.cells.get(i) {
            Some(c) if c.is_wide() => 2,
            Some(c) if c.is_wide_continuation() => 0,
            Some(_) => 1,
            None => 0,
        }
    }

    fn has_content(&self, i: usize) -> bool {
        self.cells.get(i).is_some_and(Cell::has_contents)
    }

    /// The columns up to the end of the last character (attributes alone do not count).
    fn trimmed_len(&self) -> usize {
        self.cells
            .iter()
            .rposition(Cell::has_contents)
            .map_or(0, |i| i + self.width(i))
    }

    /// Truncates or pads with blank cells. A wide character cut in two is blanked: xterm.js
    /// keeps its first half in the last column (and a later widening brings it back whole),
    /// a state that no output can make and that this model's rows do not hold. This is the one
    /// place where the model and a live xterm.js differ after a resize (only on the line the
    /// cursor is on, the one line xterm.js truncates instead of rewrapping).
    fn resize(&mut self, cols: usize) {
        let cut = cols < self.cells.len();
        self.cells.resize(cols, Cell::new());
        if let Some(last) = self.cells.last_mut().filter(|c| cut && c.is_wide()) {
            let attrs = *last.attrs();
            last.clear(attrs);
        }
        // A rewrap to one column puts a wide character's second half at the start of the
        // next line, with nothing before it: blanked too.
        if let Some(first) = self.cells.first_mut().filter(|c| c.is_wide_continuation()) {
            let attrs = *first.attrs();
            first.clear(attrs);
        }
    }

    fn set_null(&mut self, i: usize) {
        if let Some(c) = self.cells.get_mut(i) {
            *c = Cell::new();
        }
    }

    /// Blanks `start..end`, and the other half of a wide character cut at either end.
    fn replace_cells(&mut self, start: usize, end: usize) {
        if start > 0 && self.width(start - 1) == 2 {
            self.set_null(start - 1);
        }
        if end < self.cells.len() && end > 0 && self.width(end - 1) == 2 {
            self.set_null(end);
        }
        let end = end.min(self.cells.len());
        if start < end {
            self.cells[start..end].fill(Cell::new());
        }
    }
}

/// Copies `n` cells from `lines[src]` at `src_col` to `lines[dest]` at `dest_col` (the two may
/// be the same line; the copy then behaves as a move, as xterm.js's directional loops do for
/// the overlaps its callers make).
fn copy_cells(
    lines: &mut [Line],
    src: usize,
    src_col: usize,
    dest: usize,
    dest_col: usize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    if src == dest {
        let cells = &mut lines[src].cells;
        if dest_col < src_col {
            for i in 0..n {
                cells[dest_col + i] = cells[src_col + i].clone();
            }
        } else {
            for i in (0..n).rev() {
                cells[dest_col + i] = cells[src_col + i].clone();
            }
        }
        return;
    }
    let (from, to) = if src < dest {
        let (a, b) = lines.split_at_mut(dest);
        (&a[src], &mut b[0])
    } else {
        let (a, b) = lines.split_at_mut(src);
        (&b[0], &mut a[dest])
    };
    to.cells[dest_col..dest_col + n].clone_from_slice(&from.cells[src_col..src_col + n]);
}

/// xterm.js's `getWrappedLineTrimmedLength`: a line of a wrapped group counts `cols` cells,
/// one less when its last cell was left empty for a wide character that went to the next
/// line; the group's last line counts up to its last character.
fn wrapped_trimmed_len(lines: &[Line], i: usize, cols: usize) -> usize {
    if i + 1 == lines.len() {
        return lines[i].trimmed_len();
    }
    let ends_in_null = !lines[i].has_content(cols - 1) && lines[i].width(cols - 1) == 1;
    let following_starts_wide = lines[i + 1].width(0) == 2;
    if ends_in_null && following_starts_wide {
        cols - 1
    } else {
        cols
    }
}

/// The whole buffer of the main screen during a resize: the scrollback's lines, then the
/// screen's, with xterm.js's cursor and bounds.
pub struct Buffer {
    pub lines: Vec<Line>,
    /// Most lines kept (screen rows plus scrollback).
    pub max_length: usize,
    /// Lines above the screen.
    pub ybase: usize,
    /// The cursor's row on the screen.
    pub y: usize,
    /// The cursor's column.
    pub x: usize,
    /// The saved cursor's line, counted from the top of the buffer.
    pub saved_y: usize,
    /// The saved cursor's column.
    pub saved_x: usize,
}

impl Buffer {
    /// Pushes a line, dropping the oldest when the buffer is full (xterm.js's circular list).
    fn push(&mut self, line: Line) {
        if self.lines.len() >= self.max_length && !self.lines.is_empty() {
            self.lines.remove(0);
        }
        self.lines.push(line);
    }

    /// `Buffer.resize`: from `cols`×`rows` to `new_cols`×`new_rows`, keeping `scrollback`
    /// lines above the screen at most.
    pub fn resize(
        &mut self,
        (cols, rows): (usize, usize),
        (new_cols, new_rows): (usize, usize),
        scrollback: usize,
    ) {
        let new_max_length = new_rows + scrollback;
        if new_max_length > self.max_length {
            self.max_length = new_max_length;
        }
        if !self.lines.is_empty() {
            if cols < new_cols {
                for line in &mut self.lines {
                    line.resize(new_cols);
                }
            }
            let mut add_to_y = 0;
            if rows < new_rows {
                for _ in rows..new_rows {
                    if self.lines.len() < new_rows + self.ybase {
                        if self.ybase > 0 && self.lines.len() <= self.ybase + self.y + add_to_y + 1
                        {
                            // Room above and no blank line below the cursor: scroll up.
                            self.ybase -= 1;
                            add_to_y += 1;
                        } else {
                            self.push(Line::blank(new_cols, false));
                        }
                    }
                }
            } else {
                for _ in new_rows..rows {
                    if self.lines.len() > new_rows + self.ybase {
                        if self.lines.len() > self.ybase + self.y + 1 {
                            // A blank line below the cursor goes.
                            self.lines.pop();
                        } else {
                            self.ybase += 1;
                        }
                    }
                }
            }
            if new_max_length < self.max_length {
                let trim = self.lines.len().saturating_sub(new_max_length);
                if trim > 0 {
                    self.lines.drain(..trim);
                    self.ybase = self.ybase.saturating_sub(trim);
                    self.saved_y = self.saved_y.saturating_sub(trim);
                }
                self.max_length = new_max_length;
            }
            self.x = self.x.min(new_cols - 1);
            self.y = self.y.min(new_rows - 1);
            self.y += add_to_y;
            self.saved_x = self.saved_x.min(new_cols - 1);
        }

        if cols != new_cols {
            if new_cols > cols {
                self.reflow_larger(cols, new_cols, new_rows);
            } else {
                self.reflow_smaller(cols, new_cols, new_rows);
            }
        }
        if cols > new_cols {
            for line in &mut self.lines {
                line.resize(new_cols);
            }
        }
    }

    fn reflow_larger(&mut self, cols: usize, new_cols: usize, new_rows: usize) {
        let cursor = self.ybase + self.y;
        let to_remove = larger_lines_to_remove(&mut self.lines, cols, new_cols, cursor);
        if to_remove.is_empty() {
            return;
        }
        // The lines left, in order (`to_remove` is pairs of start and count, ascending).
        let mut removed = 0;
        let mut kept = Vec::with_capacity(self.lines.len());
        let mut pairs = to_remove.chunks_exact(2).peekable();
        for (i, line) in core::mem::take(&mut self.lines).into_iter().enumerate() {
            while pairs.peek().is_some_and(|p| i >= p[0] + p[1]) {
                pairs.next();
            }
            match pairs.peek() {
                Some(p) if i >= p[0] => removed += 1,
                _ => kept.push(line),
            }
        }
        self.lines = kept;
        for _ in 0..removed {
            if self.ybase == 0 {
                if self.y > 0 {
                    self.y -= 1;
                }
                if self.lines.len() < new_rows {
                    self.push(Line::blank(new_cols, false));
                }
            } else {
                self.ybase -= 1;
            }
        }
        self.saved_y = self.saved_y.saturating_sub(removed);
    }

    fn reflow_smaller(&mut self, cols: usize, new_cols: usize, new_rows: usize) {
        // New lines, with the index they go to, gathered from the bottom up and put in place
        // at the end in one pass.
        let mut to_insert: Vec<(usize, Vec<Line>)> = Vec::new();
        let mut count_to_insert = 0;
        // The buffer's length (xterm.js's `lines.length`). A line xterm.js pops off the end to
        // keep the cursor's row is only made past the end of its circular list, where `get`
        // still finds it: the lines looked at further up include it, and a wrapped one is
        // rewrapped there, its new lines inserted below the kept ones as any others (the
        // popped line itself is lost). So popped lines stay in `self.lines` past `len` until
        // the lines are put in place.
        let mut len = self.lines.len();
        // One past the line looked at (xterm.js's `y + 1`): lines are looked at bottom up.
        let mut next = self.lines.len();
        while next > 0 {
            let end = next;
            next -= 1;
            let Some(last) = self.lines.get(end - 1) else {
                continue;
            };
            if !last.is_wrapped && last.trimmed_len() <= new_cols {
                continue;
            }
            let mut start = end - 1;
            while self.lines[start].is_wrapped && start > 0 {
                start -= 1;
            }
            next = start;
            let cursor = self.ybase + self.y;
            if cursor >= start && cursor < end {
                // The program redraws the line it is on.
                continue;
            }
            let group = end - start;
            let last_line_length = self.lines[end - 1].trimmed_len();
            let dest_lengths = smaller_line_lengths(&self.lines[start..end], cols, new_cols);
            if dest_lengths.is_empty() {
                // Nothing to rewrap (an empty line continuing one the scrollback dropped).
                continue;
            }
            let lines_to_add = dest_lengths.len().saturating_sub(group);
            let trimmed_lines = if self.ybase == 0 && self.y + 1 != len {
                (self.y + lines_to_add).saturating_sub(self.max_length)
            } else {
                (len + lines_to_add).saturating_sub(self.max_length)
            };

            // The group and its new lines, taken out to be rewrapped in place.
            let mut w: Vec<Line> = self.lines[start..end]
                .iter_mut()
                .map(|l| Line {
                    cells: core::mem::take(&mut l.cells),
                    is_wrapped: l.is_wrapped,
                })
                .collect();
            w.extend((0..lines_to_add).map(|_| Line::blank(new_cols, true)));

            // Copied from the end backwards, so nothing is overwritten before it is read.
            // `None` once past the first line (xterm.js's index -1).
            let length_at = |i: Option<usize>| i.and_then(|i| dest_lengths.get(i)).copied();
            let mut dest = dest_lengths.len().checked_sub(1);
            let mut dest_col = length_at(dest).unwrap_or(0);
            if dest_col == 0 {
                dest = dest.and_then(|d| d.checked_sub(1));
                dest_col = length_at(dest).unwrap_or(0);
            }
            let mut src = group.checked_sub(1);
            let mut src_col = last_line_length;
            while let Some(s) = src {
                let Some(d) = dest.filter(|d| *d < w.len()) else {
                    break;
                };
                let n = src_col.min(dest_col);
                copy_cells(&mut w, s, src_col - n, d, dest_col - n, n);
                dest_col -= n;
                if dest_col == 0 {
                    dest = d.checked_sub(1);
                    dest_col = length_at(dest).unwrap_or(0);
                }
                src_col -= n;
                if src_col == 0 {
                    src = s.checked_sub(1);
                    src_col = wrapped_trimmed_len(&w, src.unwrap_or(0), cols);
                }
            }
            // The end of a line a wide character went past is left empty.
            for (line, &len) in w.iter_mut().zip(&dest_lengths) {
                if len < new_cols {
                    line.set_null(len);
                }
            }

            let mut new_lines = w.split_off(group);
            for (slot, line) in self.lines[start..end].iter_mut().zip(w) {
                *slot = line;
            }
            if !new_lines.is_empty() {
                for line in &mut new_lines {
                    line.is_wrapped = true;
                }
                to_insert.push((end + count_to_insert, new_lines));
                count_to_insert += lines_to_add;
            }

            for _ in 0..lines_to_add.saturating_sub(trimmed_lines) {
                if self.ybase == 0 {
                    if self.y + 1 < new_rows {
                        self.y += 1;
                        len = len.saturating_sub(1);
                    } else {
                        self.ybase += 1;
                    }
                } else if self.ybase
                    < self
                        .max_length
                        .min(len + count_to_insert)
                        .saturating_sub(new_rows)
                {
                    self.ybase += 1;
                }
            }
            self.saved_y = (self.saved_y + lines_to_add).min(self.ybase + new_rows - 1);
        }

        self.lines.truncate(len);
        if to_insert.is_empty() {
            return;
        }
        // Every line in its new place, from the bottom up; at most `max_length` of them (the
        // oldest are dropped).
        let original: Vec<Line> = core::mem::take(&mut self.lines);
        let original_len = original.len();
        let mut original: Vec<Option<Line>> = original.into_iter().map(Some).collect();
        let new_len = self.max_length.min(original_len + count_to_insert);
        let mut placed: Vec<Option<Line>> = (0..new_len).map(|_| None).collect();
        // One past the original line and the slot next filled (xterm.js's index + 1), so
        // that 0 is its -1.
        let mut original_next = original_len;
        let mut inserted = 0;
        let mut pending = to_insert.into_iter().peekable();
        let mut slot_next = new_len;
        while slot_next > 0 {
            let slot = slot_next - 1;
            let due = pending
                .peek()
                .is_some_and(|(start, _)| *start + 1 > original_next + inserted);
            if let Some((_, lines)) = pending.next_if(|_| due) {
                let k = lines.len();
                inserted += k;
                // Past the top, xterm.js writes out of its list's bounds: those lines are lost.
                for (n, line) in lines.into_iter().rev().enumerate() {
                    if let Some(at) = slot.checked_sub(n) {
                        placed[at] = Some(line);
                    }
                }
                slot_next = slot_next.saturating_sub(k.max(1));
                continue;
            }
            placed[slot] = original_next
                .checked_sub(1)
                .and_then(|o| original.get_mut(o))
                .and_then(Option::take);
            original_next = original_next.saturating_sub(1);
            slot_next -= 1;
        }
        self.lines = placed
            .into_iter()
            .map(|l| l.unwrap_or_else(|| Line::blank(new_cols, false)))
            .collect();
    }
}

/// `reflowLargerGetLinesToRemove`: pulls each wrapped group's cells up into fewer, wider
/// lines, and returns the lines left empty at the groups' ends as (start, count) pairs.
fn larger_lines_to_remove(
    lines: &mut [Line],
    cols: usize,
    new_cols: usize,
    cursor: usize,
) -> Vec<usize> {
    let mut to_remove = Vec::new();
    let mut y = 0;
    while y + 1 < lines.len() {
        if !lines[y + 1].is_wrapped {
            y += 1;
            continue;
        }
        let mut end = y + 1;
        while end < lines.len() && lines[end].is_wrapped {
            end += 1;
        }
        if cursor >= y && cursor < end {
            // The program redraws the line it is on.
            y = end;
            continue;
        }
        let g = &mut lines[y..end];
        let mut dest = 0;
        let mut dest_col = wrapped_trimmed_len(g, 0, cols);
        let mut src = 1;
        let mut src_col = 0;
        while src < g.len() {
            let src_len = wrapped_trimmed_len(g, src, cols);
            let n = src_len.saturating_sub(src_col).min(new_cols - dest_col);
            copy_cells(g, src, src_col, dest, dest_col, n);
            dest_col += n;
            if dest_col == new_cols {
                dest += 1;
                dest_col = 0;
            }
            src_col += n;
            if src_col >= src_len {
                src += 1;
                src_col = 0;
            }
            // A wide character never ends a line: it moves to the next.
            if dest_col == 0 && dest != 0 && g[dest - 1].width(new_cols - 1) == 2 {
                copy_cells(g, dest - 1, new_cols - 1, dest, dest_col, 1);
                dest_col += 1;
                g[dest - 1].set_null(new_cols - 1);
            }
        }
        g[dest].replace_cells(dest_col, new_cols);
        let mut count = 0;
        for i in (1..g.len()).rev() {
            if i > dest || g[i].trimmed_len() == 0 {
                count += 1;
            } else {
                break;
            }
        }
        if count > 0 {
            to_remove.push(y + g.len() - count);
            to_remove.push(count);
        }
        y = end;
    }
    to_remove
}

/// `reflowSmallerGetNewLineLengths`: where a wrapped group breaks at the new width: `new_cols`
/// a line, one less where a wide character would straddle the edge, the rest on the last.
fn smaller_line_lengths(lines: &[Line], cols: usize, new_cols: usize) -> Vec<usize> {
    let needed: usize = (0..lines.len())
        .map(|i| wrapped_trimmed_len(lines, i, cols))
        .sum();
    let mut lengths = Vec::new();
    let (mut src_col, mut src_line, mut available) = (0, 0, 0);
    while available < needed {
        if needed - available < new_cols {
            lengths.push(needed - available);
            break;
        }
        src_col += new_cols;
        let old_len = wrapped_trimmed_len(lines, src_line, cols);
        if src_col > old_len {
            src_col -= old_len;
            src_line += 1;
        }
        // A one-column screen cannot hold a wide character whole: it is cut like any other,
        // or no line would take anything and this would never end (xterm.js has no such
        // screens; its minimum is two columns).
        let ends_wide = new_cols > 1
            && src_col > 0
            && lines
                .get(src_line)
                .is_some_and(|l| l.width(src_col - 1) == 2);
        if ends_wide {
            src_col -= 1;
        }
        let len = if ends_wide { new_cols - 1 } else { new_cols };
        lengths.push(len);
        available += len;
    }
    lengths
}
