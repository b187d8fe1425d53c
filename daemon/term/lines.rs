//! Terminal output as plain text lines, for the session log stream: escape sequences removed,
//! carriage returns, backspaces, tabs and erase-in-line applied as a terminal draws one line
//! (so a progress bar redrawn with `\r` gives its last state), each line ended by a line feed
//! (or VT, FF) and tagged with the stream offset just after it. Pure, no tokio.

use super::seq::{Params, Perform, Scanner};

/// Longest line kept, in characters: a program that never writes a line feed cannot make the
/// daemon hold more than this for one reader.
pub const MAX_LINE_CHARS: usize = 16 * 1024;
/// Tab stops every 8 columns, as a terminal's defaults.
const TAB: usize = 8;

/// One finished line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Its text, trailing blanks removed.
    pub text: String,
    /// The stream offset just after its line feed: where a reader resumes.
    pub offset: u64,
}

/// Assembles lines from terminal output fed in order, in chunks cut anywhere.
#[derive(Debug, Default)]
pub struct Lines {
    scanner: Scanner,
    line: LineState,
}

#[derive(Debug, Default)]
struct LineState {
    /// The line being drawn, one char per column.
    cells: Vec<char>,
    /// The cursor's column.
    col: usize,
    /// Bytes of a UTF-8 character split across two runs of text.
    partial: Vec<u8>,
    /// Set by a line feed: the line to hand out.
    done: Option<String>,
}

impl LineState {
    fn put(&mut self, c: char) {
        if self.col >= MAX_LINE_CHARS {
            return;
        }
        if self.col < self.cells.len() {
            self.cells[self.col] = c;
        } else {
            self.cells.resize(self.col, ' ');
            self.cells.push(c);
        }
        self.col += 1;
    }

    fn finish(&mut self) -> String {
        let text: String = self.cells.iter().collect();
        self.cells.clear();
        self.col = 0;
        text.trim_end().to_owned()
    }
}

impl Perform for LineState {
    fn print(&mut self, text: &[u8]) {
        let mut bytes = std::mem::take(&mut self.partial);
        bytes.extend_from_slice(text);
        let mut rest = &bytes[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    s.chars().for_each(|c| self.put(c));
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // Valid by construction.
                    String::from_utf8_lossy(good)
                        .chars()
                        .for_each(|c| self.put(c));
                    match e.error_len() {
                        Some(n) => {
                            self.put(char::REPLACEMENT_CHARACTER);
                            rest = &bad[n..];
                        }
                        // A character cut at the end of the run: wait for its rest.
                        None => {
                            self.partial = bad.to_vec();
                            break;
                        }
                    }
                }
            }
        }
    }

    fn execute(&mut self, byte: u8) {
        if !self.partial.is_empty() {
            self.partial.clear();
            self.put(char::REPLACEMENT_CHARACTER);
        }
        match byte {
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => self.col = ((self.col / TAB + 1) * TAB).min(MAX_LINE_CHARS),
            b'\n' | 0x0b | 0x0c => self.done = Some(self.finish()),
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], _ignore: bool, action: u8) {
        if !intermediates.is_empty() {
            return;
        }
        let first = params
            .iter()
            .next()
            .and_then(|p| p.first().copied())
            .unwrap_or(0);
        let n = usize::from(first.max(1));
        match action {
            // Erase in line: to the end (0), to the start (1), all (2).
            b'K' => match first {
                0 => self.cells.truncate(self.col),
                1 => {
                    let end = (self.col + 1).min(self.cells.len());
                    self.cells[..end].iter_mut().for_each(|c| *c = ' ');
                }
                _ => self.cells.clear(),
            },
            b'C' => self.col = (self.col + n).min(MAX_LINE_CHARS),
            b'D' => self.col = self.col.saturating_sub(n),
            b'G' => self.col = (n - 1).min(MAX_LINE_CHARS),
            _ => {}
        }
    }
}

impl Lines {
    /// A fresh assembler, at the start of a line.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `bytes`, which start at stream offset `start`; pushes every line they finish.
    pub fn feed(&mut self, bytes: &[u8], start: u64, out: &mut Vec<Line>) {
        let mut at = 0;
        while at < bytes.len() {
            // Up to and including the next line feed (or VT, FF: they feed lines too), so each
            // finished line knows its end.
            let end = memchr::memchr3(b'\n', 0x0b, 0x0c, &bytes[at..])
                .map_or(bytes.len(), |i| at + i + 1);
            self.scanner.advance(&bytes[at..end], &mut self.line);
            if let Some(text) = self.line.done.take() {
                out.push(Line {
                    text,
                    offset: start + end as u64,
                });
            }
            at = end;
        }
    }

    /// The unfinished line so far (no line feed yet), trailing blanks removed.
    pub fn pending(&self) -> String {
        let text: String = self.line.cells.iter().collect();
        text.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]]) -> Vec<(String, u64)> {
        let mut l = Lines::new();
        let mut out = Vec::new();
        let mut at = 0;
        for c in chunks {
            l.feed(c, at, &mut out);
            at += c.len() as u64;
        }
        out.into_iter().map(|l| (l.text, l.offset)).collect()
    }

    #[test]
    fn colours_removed_and_offsets_after_each_line_feed() {
        assert_eq!(
            lines(&[b"\x1b[31mred\x1b[0m plain\r\nnext\n"]),
            [("red plain".to_owned(), 20), ("next".to_owned(), 25)]
        );
    }

    #[test]
    fn carriage_returns_give_the_last_state_of_a_progress_bar() {
        assert_eq!(
            lines(&[b"  0%\r 50%\r100%\n", b"ab\rX\n"]),
            [("100%".to_owned(), 15), ("Xb".to_owned(), 20)]
        );
        // Erase in line after CR: a shorter redraw leaves nothing behind.
        assert_eq!(
            lines(&[b"downloading 12345\r\x1b[Kdone\n"]),
            [("done".to_owned(), 26)]
        );
        assert_eq!(lines(&[b"abc\x08\x08X\n"]), [("aXc".to_owned(), 7)]);
        assert_eq!(lines(&[b"a\tb\n"]), [("a       b".to_owned(), 4)]);
    }

    #[test]
    fn wide_and_split_utf8() {
        assert_eq!(
            lines(&["日本 ".as_bytes(), &[0xf0, 0x9f], &[0x9a, 0x80], b"\n"]),
            [("日本 🚀".to_owned(), 12)]
        );
        assert_eq!(lines(&[b"a\xffb\n"]), [("a\u{fffd}b".to_owned(), 4)]);
        // A line feed split from its sequence's neighbours, and a sequence split across chunks.
        assert_eq!(
            lines(&[b"x\x1b[3", b"2mgreen\x1b", b"[0m\n"]),
            [("xgreen".to_owned(), 16)]
        );
    }

    #[test]
    fn titles_and_other_strings_are_not_text() {
        assert_eq!(
            lines(&[b"\x1b]0;title\x07shown\n"]),
            [("shown".to_owned(), 16)]
        );
    }

    #[test]
    fn lines_are_bounded() {
        let long = vec![b'x'; MAX_LINE_CHARS * 2];
        let got = lines(&[&long, b"\n"]);
        assert_eq!(got[0].0.len(), MAX_LINE_CHARS);
    }
}
