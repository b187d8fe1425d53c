//! The one escape-sequence scanner: where the sequences and characters of a terminal byte
//! stream begin and end, read exactly as vte 0.15 (vt100's parser) reads them, for every part
//! of the daemon that needs to know without drawing a screen: the screen model's boundaries and
//! bulk skip, the query detector, and next the raw replay, the log stream and recordings.
//!
//! Like alacritty/vte it is one state machine (Paul Williams' DEC ANSI parser with vte's
//! changes: UTF-8 text, OSC also ended by BEL, 7-bit introducers only) feeding a [`Perform`]
//! whose methods default to doing nothing. Unlike vte it decodes no text (ground-state bytes
//! are handed on as runs, to be decoded by whoever draws them) and buffers no string (OSC and
//! DCS payloads are streamed), so it allocates nothing. State carries across chunks: a sequence
//! or character split between two reads is reported once, when it ends, and
//! [`Scanner::is_ground`] says whether the stream so far ends at a boundary.

use memchr::{memchr, memchr3, memrchr};

/// Starts every escape sequence, and ends any: output without one is text.
pub const ESC: u8 = 0x1b;
/// CAN and SUB abort any sequence (and are executed).
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
/// Ends an OSC string (xterm's extension, which vte follows).
const BEL: u8 = 0x07;
/// 8-bit String Terminator: vte honours it in a DCS payload only.
const ST_8BIT: u8 = 0x9c;

/// Intermediates kept per sequence; more set the `ignore` flag (as in vte).
const MAX_INTERMEDIATES: usize = 2;
/// Parameters and sub-parameters kept per sequence; more set the `ignore` flag (as in vte).
const MAX_PARAMS: usize = 32;

/// Where the scanner stands: the states of vte's machine, plus the middle of a UTF-8 character
/// (vte's ground state with a partial character held).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum State {
    /// Between sequences and characters: a safe boundary.
    #[default]
    Ground,
    /// Inside a multi-byte UTF-8 character.
    Utf8,
    /// After ESC.
    Escape,
    /// After ESC and an intermediate (0x20..=0x2f), before the final byte.
    EscapeIntermediate,
    /// After `ESC [`.
    CsiEntry,
    /// Reading a CSI sequence's parameters.
    CsiParam,
    /// After a CSI sequence's intermediates.
    CsiIntermediate,
    /// In a malformed CSI sequence, dropped up to its final byte.
    CsiIgnore,
    /// After `ESC P`.
    DcsEntry,
    /// Reading a DCS introducer's parameters.
    DcsParam,
    /// After a DCS introducer's intermediates.
    DcsIntermediate,
    /// In a DCS payload.
    DcsPassthrough,
    /// In a malformed DCS sequence, dropped up to its end.
    DcsIgnore,
    /// In an OSC string.
    OscString,
    /// In an SOS, PM or APC string (dropped up to its end).
    SosPmApcString,
}

/// Numeric parameters of a CSI or DCS sequence, with sub-parameters (`:`), exactly as vte
/// collects them: at most 32 values, each saturating at 65535, an empty one read as 0.
#[derive(Clone, Debug, Default)]
pub struct Params {
    /// At the index of each parameter's first value: how many values it has.
    groups: [u8; MAX_PARAMS],
    /// Every value, parameters and sub-parameters in order.
    values: [u16; MAX_PARAMS],
    /// Sub-parameters in the parameter being read.
    current: u8,
    /// Values stored.
    len: usize,
}

impl Params {
    /// Number of values (parameters and sub-parameters).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the sequence had no parameter at all (never true at dispatch: vte always stores
    /// the last one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Each parameter with its sub-parameters, as vte's `Params::iter` gives them.
    pub fn iter(&self) -> ParamsIter<'_> {
        ParamsIter {
            params: self,
            index: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.len == MAX_PARAMS
    }

    fn clear(&mut self) {
        self.current = 0;
        self.len = 0;
    }

    /// Stores a new parameter. The caller checks `is_full`.
    fn push(&mut self, value: u16) {
        self.groups[self.len - usize::from(self.current)] = self.current + 1;
        self.values[self.len] = value;
        self.current = 0;
        self.len += 1;
    }

    /// Stores a sub-parameter of the current parameter. The caller checks `is_full`.
    fn extend(&mut self, value: u16) {
        self.groups[self.len - usize::from(self.current)] = self.current + 1;
        self.values[self.len] = value;
        self.current += 1;
        self.len += 1;
    }
}

/// Iterator over [`Params`]: each parameter as the slice of its values.
#[derive(Clone, Debug)]
pub struct ParamsIter<'a> {
    params: &'a Params,
    index: usize,
}

impl<'a> Iterator for ParamsIter<'a> {
    type Item = &'a [u16];

    fn next(&mut self) -> Option<&'a [u16]> {
        if self.index >= self.params.len {
            return None;
        }
        let n = usize::from(self.params.groups[self.index]).max(1);
        let end = (self.index + n).min(self.params.len);
        let values = &self.params.values[self.index..end];
        self.index = end;
        Some(values)
    }
}

/// What the scanner reports, in stream order. Every method defaults to doing nothing, so a
/// consumer implements only what it needs (the query detector: `csi_dispatch`, and `text` as
/// nothing, which lets the scanner jump from ESC to ESC).
pub trait Perform {
    /// A run of bytes read in the ground state, between sequences: printable text (UTF-8, not
    /// decoded: a character may be split between two runs, invalid bytes are passed on as they
    /// are) and C0 controls. The default hands printable runs to [`Perform::print`] and each
    /// control to [`Perform::execute`].
    fn text(&mut self, bytes: &[u8]) {
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if b < 0x20 {
                if start < i {
                    self.print(&bytes[start..i]);
                }
                self.execute(b);
                start = i + 1;
            }
        }
        if start < bytes.len() {
            self.print(&bytes[start..]);
        }
    }

    /// Printable text (what [`Perform::text`] holds between controls).
    fn print(&mut self, _text: &[u8]) {}

    /// A C0 control: from text, executed inside an ESC or CSI sequence (where it does not end
    /// the sequence), or CAN/SUB aborting one.
    fn execute(&mut self, _byte: u8) {}

    /// `ESC intermediates final`; `ignore` when more than two intermediates came.
    fn esc_dispatch(&mut self, _intermediates: &[u8], _ignore: bool, _byte: u8) {}

    /// A complete CSI sequence. `intermediates` holds a private marker (`<=>?`) as vte does,
    /// then intermediates (0x20..=0x2f); `ignore` when more than two came or the parameters
    /// overflowed.
    fn csi_dispatch(
        &mut self,
        _params: &Params,
        _intermediates: &[u8],
        _ignore: bool,
        _action: u8,
    ) {
    }

    /// A DCS sequence's introducer is complete; its payload follows in [`Perform::put`].
    fn hook(&mut self, _params: &Params, _intermediates: &[u8], _ignore: bool, _action: u8) {}

    /// Bytes of a DCS payload (C0 controls included, DEL and 8-bit bytes left out, as vte).
    fn put(&mut self, _bytes: &[u8]) {}

    /// The DCS payload ended (ST, ESC, CAN, SUB or an 8-bit ST).
    fn unhook(&mut self) {}

    /// `ESC ]`: an OSC string begins.
    fn osc_start(&mut self) {}

    /// Bytes of an OSC string (`;` included; C0 controls left out, as vte).
    fn osc_put(&mut self, _bytes: &[u8]) {}

    /// The OSC string ended, by `terminator`: BEL, ESC (the start of ST), CAN or SUB. vte
    /// dispatches it at that byte.
    fn osc_end(&mut self, _terminator: u8) {}
}

/// A [`Perform`] that takes nothing: for scanning boundaries only.
struct Quiet;

impl Perform for Quiet {
    fn text(&mut self, _bytes: &[u8]) {}
}

/// How a chunk ends, as [`Scanner::skip`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// At a boundary: the scanner is in the ground state.
    Complete,
    /// Inside a sequence or character that starts at this index of the chunk: an ESC or a
    /// UTF-8 lead byte, where any terminal's parser starts afresh.
    At(usize),
    /// Inside a sequence or character that started before the chunk.
    Before,
}

/// A UTF-8 character being read.
#[derive(Clone, Copy, Debug, Default)]
struct Partial {
    /// Bytes of it read so far, the lead byte included.
    have: u8,
    /// Continuation bytes still missing.
    missing: u8,
    /// The range the next byte must be in (narrower after some lead bytes, as `str::from_utf8`
    /// rules: no overlong forms, surrogates or code points past U+10FFFF).
    lo: u8,
    hi: u8,
}

impl Partial {
    /// The character a lead byte starts, if it starts one.
    fn lead(b: u8) -> Option<Partial> {
        let (missing, lo, hi) = match b {
            0xc2..=0xdf => (1, 0x80, 0xbf),
            0xe0 => (2, 0xa0, 0xbf),
            0xe1..=0xec | 0xee..=0xef => (2, 0x80, 0xbf),
            0xed => (2, 0x80, 0x9f),
            0xf0 => (3, 0x90, 0xbf),
            0xf1..=0xf3 => (3, 0x80, 0xbf),
            0xf4 => (3, 0x80, 0x8f),
            _ => return None,
        };
        Some(Partial {
            have: 1,
            missing,
            lo,
            hi,
        })
    }

    /// Takes the next byte if it continues the character.
    fn take(&mut self, b: u8) -> bool {
        if self.missing == 0 || !(self.lo..=self.hi).contains(&b) {
            return false;
        }
        self.have += 1;
        self.missing -= 1;
        (self.lo, self.hi) = (0x80, 0xbf);
        true
    }

    /// The unfinished character at the end of a run of text, if any. Its lead byte is the
    /// last byte that is not a continuation byte, within the last three.
    fn at_end(run: &[u8]) -> Option<Partial> {
        let len = run.len();
        let start = (len.saturating_sub(3)..len)
            .rev()
            .find(|&p| run[p] & 0xc0 != 0x80)?;
        let mut partial = Partial::lead(run[start])?;
        for &b in &run[start + 1..] {
            // A wrong continuation breaks the character (vte prints U+FFFD for it).
            if !partial.take(b) {
                return None;
            }
        }
        (partial.missing > 0).then_some(partial)
    }
}

/// The scanner: vte's state machine, fed chunk by chunk.
#[derive(Clone, Debug, Default)]
pub struct Scanner {
    state: State,
    intermediates: [u8; MAX_INTERMEDIATES],
    intermediate_count: usize,
    /// Too many intermediates or parameters: reported with the sequence, as vte does.
    ignoring: bool,
    params: Params,
    /// The parameter being read.
    param: u16,
    /// The character being read, in [`State::Utf8`].
    utf8: Partial,
}

impl Scanner {
    /// Where the stream read so far ends.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether the stream read so far ends at a boundary: no sequence and no character is
    /// unfinished, so a parser fed everything up to here is in its ground state.
    pub fn is_ground(&self) -> bool {
        self.state == State::Ground
    }

    /// How many leading bytes of `bytes` continue the UTF-8 character being read (0 outside
    /// one): what completes a character split at the end of the last chunk, or as much of it
    /// as `bytes` holds.
    pub fn rest_of_char(&self, bytes: &[u8]) -> usize {
        if self.state != State::Utf8 {
            return 0;
        }
        let mut partial = self.utf8;
        bytes
            .iter()
            .take(usize::from(partial.missing))
            .take_while(|&&b| partial.take(b))
            .count()
    }

    /// Reads `bytes`, reporting every event to `perform`.
    pub fn advance<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) {
        if bytes.is_empty() {
            return;
        }
        let mut i = 0;
        if self.state == State::Utf8 {
            let n = self.rest_of_char(bytes);
            if n < usize::from(self.utf8.missing) && n == bytes.len() {
                // Still inside the character.
                for &b in bytes {
                    self.utf8.take(b);
                }
                perform.text(bytes);
                return;
            }
            // Complete, or broken by the byte after it (which vte reads again as itself): the
            // bytes go to `text` with the run they start.
            self.state = State::Ground;
        }
        while i < bytes.len() {
            let rest = &bytes[i..];
            i += match self.state {
                State::Ground => self.ground(rest, perform),
                State::OscString => self.osc_string(rest, perform),
                State::DcsPassthrough => self.dcs_passthrough(rest, perform),
                State::DcsIgnore | State::SosPmApcString => {
                    // Only CAN, SUB and ESC end these; the rest is dropped.
                    match memchr3(CAN, SUB, ESC, rest) {
                        Some(p) => {
                            self.anywhere(rest[p], perform);
                            p + 1
                        }
                        None => rest.len(),
                    }
                }
                State::CsiEntry | State::CsiParam => self.csi_params(rest, perform),
                _ => {
                    self.step(rest[0], perform);
                    1
                }
            };
        }
    }

    /// CSI parameters, the bulk of coloured output (`ESC [ 38 ; 5 ; 123 m`): digits and
    /// separators are read in a tight loop, anything else by `step`. Returns the bytes
    /// consumed: up to the first that leaves the parameters.
    fn csi_params<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) -> usize {
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'0'..=b'9' => self.digit(b),
                b';' => self.next_param(),
                b':' => self.subparam(),
                _ => {
                    self.step(b, perform);
                    return i + 1;
                }
            }
            self.state = State::CsiParam;
        }
        bytes.len()
    }

    /// Reads `bytes` without reporting anything, as fast as the grammar allows, and says where
    /// the sequence or character unfinished at its end starts. Any ESC starts a sequence
    /// afresh whatever came before it, so only the bytes from the last ESC on are read.
    pub fn skip(&mut self, bytes: &[u8]) -> Tail {
        let esc = memrchr(ESC, bytes);
        match esc {
            Some(e) => {
                self.enter_escape();
                self.advance(&bytes[e + 1..], &mut Quiet);
            }
            // Text without an ESC (most of a flood): only a character split at its end
            // matters, and `advance` would search it for an ESC again.
            None if self.state == State::Ground => self.end_text(bytes),
            None => self.advance(bytes, &mut Quiet),
        }
        match self.state {
            State::Ground => Tail::Complete,
            // A character is read from its lead byte on (after any ESC), without a break.
            State::Utf8 => match bytes.len().checked_sub(usize::from(self.utf8.have)) {
                Some(p) => Tail::At(p),
                None => Tail::Before,
            },
            // Only an ESC leaves the ground state for a sequence.
            _ => esc.map_or(Tail::Before, Tail::At),
        }
    }

    /// Ground state: text up to the next ESC. Returns the bytes consumed.
    fn ground<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) -> usize {
        let end = memchr(ESC, bytes).unwrap_or(bytes.len());
        if end > 0 {
            perform.text(&bytes[..end]);
        }
        if end < bytes.len() {
            // An ESC also breaks a character being read (vte prints U+FFFD for it).
            self.enter_escape();
            return end + 1;
        }
        self.end_text(bytes);
        end
    }

    /// The chunk ends with this text, read in the ground state: notes a character split there.
    fn end_text(&mut self, text: &[u8]) {
        if let Some(partial) = Partial::at_end(text) {
            self.utf8 = partial;
            self.state = State::Utf8;
        }
    }

    /// OSC string: put runs of payload until a control ends or interrupts it.
    fn osc_string<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) -> usize {
        let end = bytes.iter().position(|&b| b < 0x20).unwrap_or(bytes.len());
        if end > 0 {
            perform.osc_put(&bytes[..end]);
        }
        if let Some(&b) = bytes.get(end) {
            match b {
                BEL => {
                    perform.osc_end(b);
                    self.state = State::Ground;
                }
                CAN | SUB => {
                    perform.osc_end(b);
                    perform.execute(b);
                    self.state = State::Ground;
                }
                ESC => {
                    perform.osc_end(b);
                    self.enter_escape();
                }
                // Other C0 controls are dropped.
                _ => {}
            }
            return end + 1;
        }
        end
    }

    /// DCS payload: put runs of it until something ends it.
    fn dcs_passthrough<P: Perform>(&mut self, bytes: &[u8], perform: &mut P) -> usize {
        let end = bytes
            .iter()
            .position(|&b| matches!(b, CAN | SUB | ESC | 0x7f..))
            .unwrap_or(bytes.len());
        if end > 0 {
            perform.put(&bytes[..end]);
        }
        if let Some(&b) = bytes.get(end) {
            match b {
                CAN | SUB => {
                    perform.unhook();
                    perform.execute(b);
                    self.state = State::Ground;
                }
                ESC => {
                    perform.unhook();
                    self.enter_escape();
                }
                ST_8BIT => {
                    perform.unhook();
                    self.state = State::Ground;
                }
                // DEL and other 8-bit bytes are dropped.
                _ => {}
            }
            return end + 1;
        }
        end
    }

    /// One byte in the states read byte by byte (escape, CSI and DCS introducers).
    fn step<P: Perform>(&mut self, b: u8, perform: &mut P) {
        // C0 controls other than CAN, SUB and ESC.
        let c0 = matches!(b, 0x00..=0x17 | 0x19 | 0x1c..=0x1f);
        match self.state {
            State::Escape => match b {
                _ if c0 => perform.execute(b),
                0x20..=0x2f => {
                    self.collect(b);
                    self.state = State::EscapeIntermediate;
                }
                b'P' => {
                    self.reset();
                    self.state = State::DcsEntry;
                }
                b'[' => {
                    self.reset();
                    self.state = State::CsiEntry;
                }
                b']' => {
                    perform.osc_start();
                    self.state = State::OscString;
                }
                b'X' | b'^' | b'_' => self.state = State::SosPmApcString,
                0x30..=0x7e => {
                    perform.esc_dispatch(self.intermediates(), self.ignoring, b);
                    self.state = State::Ground;
                }
                CAN | SUB => {
                    perform.execute(b);
                    self.state = State::Ground;
                }
                // Another ESC, DEL and 8-bit bytes are dropped.
                _ => {}
            },
            State::EscapeIntermediate => match b {
                _ if c0 => perform.execute(b),
                0x20..=0x2f => self.collect(b),
                0x30..=0x7e => {
                    perform.esc_dispatch(self.intermediates(), self.ignoring, b);
                    self.state = State::Ground;
                }
                _ => self.anywhere(b, perform),
            },
            State::CsiEntry | State::CsiParam | State::CsiIntermediate | State::CsiIgnore if c0 => {
                perform.execute(b);
            }
            State::CsiEntry | State::CsiParam | State::DcsEntry | State::DcsParam
                if matches!(b, 0x30..=0x3b) =>
            {
                match b {
                    b':' => self.subparam(),
                    b';' => self.next_param(),
                    digit => self.digit(digit),
                }
                self.state = if self.is_csi() {
                    State::CsiParam
                } else {
                    State::DcsParam
                };
            }
            State::CsiEntry | State::DcsEntry if matches!(b, 0x3c..=0x3f) => {
                // A private marker, kept with the intermediates (as vte does).
                self.collect(b);
                self.state = if self.is_csi() {
                    State::CsiParam
                } else {
                    State::DcsParam
                };
            }
            State::CsiEntry
            | State::CsiParam
            | State::CsiIntermediate
            | State::DcsEntry
            | State::DcsParam
            | State::DcsIntermediate => match b {
                0x20..=0x2f => {
                    self.collect(b);
                    self.state = if self.is_csi() {
                        State::CsiIntermediate
                    } else {
                        State::DcsIntermediate
                    };
                }
                // A parameter after an intermediate, or a marker after a parameter.
                0x30..=0x3f => {
                    self.state = if self.is_csi() {
                        State::CsiIgnore
                    } else {
                        State::DcsIgnore
                    };
                }
                0x40..=0x7e => self.dispatch(b, perform),
                // C0 controls inside a DCS introducer are dropped, and so is DEL anywhere.
                _ if c0 || b == 0x7f => {}
                _ => self.anywhere(b, perform),
            },
            State::CsiIgnore => match b {
                0x40..=0x7e => self.state = State::Ground,
                0x20..=0x3f | 0x7f => {}
                _ => self.anywhere(b, perform),
            },
            // The other states are read a run at a time (`advance`).
            _ => self.anywhere(b, perform),
        }
    }

    /// What every state does with CAN, SUB and ESC; other bytes are dropped.
    fn anywhere<P: Perform>(&mut self, b: u8, perform: &mut P) {
        match b {
            CAN | SUB => {
                perform.execute(b);
                self.state = State::Ground;
            }
            ESC => self.enter_escape(),
            _ => {}
        }
    }

    fn is_csi(&self) -> bool {
        matches!(
            self.state,
            State::CsiEntry | State::CsiParam | State::CsiIntermediate | State::CsiIgnore
        )
    }

    /// The final byte of a CSI sequence or of a DCS introducer.
    fn dispatch<P: Perform>(&mut self, b: u8, perform: &mut P) {
        if self.params.is_full() {
            self.ignoring = true;
        } else {
            self.params.push(self.param);
        }
        let intermediates = &self.intermediates[..self.intermediate_count];
        if self.is_csi() {
            perform.csi_dispatch(&self.params, intermediates, self.ignoring, b);
            self.state = State::Ground;
        } else {
            perform.hook(&self.params, intermediates, self.ignoring, b);
            self.state = State::DcsPassthrough;
        }
    }

    fn enter_escape(&mut self) {
        self.reset();
        self.state = State::Escape;
    }

    fn reset(&mut self) {
        self.intermediate_count = 0;
        self.ignoring = false;
        self.param = 0;
        self.params.clear();
    }

    fn intermediates(&self) -> &[u8] {
        &self.intermediates[..self.intermediate_count]
    }

    fn collect(&mut self, b: u8) {
        match self.intermediates.get_mut(self.intermediate_count) {
            Some(slot) => {
                *slot = b;
                self.intermediate_count += 1;
            }
            None => self.ignoring = true,
        }
    }

    fn digit(&mut self, b: u8) {
        if self.params.is_full() {
            self.ignoring = true;
        } else {
            self.param = self
                .param
                .saturating_mul(10)
                .saturating_add(u16::from(b - b'0'));
        }
    }

    fn next_param(&mut self) {
        if self.params.is_full() {
            self.ignoring = true;
        } else {
            self.params.push(self.param);
            self.param = 0;
        }
    }

    fn subparam(&mut self) {
        if self.params.is_full() {
            self.ignoring = true;
        } else {
            self.params.extend(self.param);
            self.param = 0;
        }
    }
}

/// Random terminal output for the property tests of every reader of it.
#[cfg(test)]
pub(crate) mod arbitrary {
    use proptest::prelude::*;

    /// Terminal output from bytes that steer the grammar: introducers, parameters, markers,
    /// intermediates, finals, C0 controls, DEL, 8-bit and UTF-8 bytes of every class; at most
    /// `max` pieces.
    pub(crate) fn output(max: usize) -> impl Strategy<Value = Vec<u8>> {
        const GRAMMAR: &[u8] = b"\x1b[]PX^_\\;:0123456789<=>? !\"#$/@ABHJKMcgmnpqhlrt~a78";
        const C0: &[u8] = &[0x00, 0x05, 0x07, 0x08, 0x0a, 0x0d, 0x18, 0x1a, 0x1b, 0x1f];
        const HIGH: &[u8] = &[
            0x7f, 0x80, 0x90, 0x9c, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xc3, 0xe0, 0xe2, 0xed, 0xef,
            0xf0, 0xf4, 0xf5, 0xff,
        ];
        const PIECES: &[&[u8]] = &[
            b"\x1b[",
            b"\x1b]",
            b"\x1bP",
            b"\x1b_",
            b"\x1b\\",
            b"\x1b[?",
            b"\x1b]0;",
            b"\x1b]2;",
            b"\x1b]52;c;",
            b"\x1b]52;c;?",
            b"\x1b]1;",
        ];
        let piece = prop_oneof![
            6 => proptest::sample::select(GRAMMAR).prop_map(|b| vec![b]),
            2 => proptest::sample::select(C0).prop_map(|b| vec![b]),
            2 => proptest::sample::select(HIGH).prop_map(|b| vec![b]),
            2 => proptest::sample::select(PIECES).prop_map(<[u8]>::to_vec),
            1 => any::<u8>().prop_map(|b| vec![b]),
            1 => any::<char>().prop_map(|c| c.to_string().into_bytes()),
        ];
        proptest::collection::vec(piece, 0..max).prop_map(|p| p.concat())
    }

    /// `bytes` cut at `cuts` (taken modulo its length).
    pub(crate) fn chunks<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        at.sort_unstable();
        at.push(bytes.len());
        let mut from = 0;
        at.into_iter()
            .map(|to| {
                let chunk = &bytes[from..to];
                from = to;
                chunk
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::arbitrary::{chunks, output};
    use super::*;
    use proptest::prelude::*;
    use std::num::NonZeroU16;

    /// What the scanner reported, with runs of text and payload merged, so that any chunking
    /// of the same stream gives the same list.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Event {
        Print(Vec<u8>),
        Execute(u8),
        Esc(Vec<u8>, bool, u8),
        Csi(Vec<Vec<u16>>, Vec<u8>, bool, u8),
        Hook(Vec<Vec<u16>>, Vec<u8>, bool, u8),
        Put(Vec<u8>),
        Unhook,
        OscStart,
        OscPut(Vec<u8>),
        OscEnd(u8),
    }

    #[derive(Default)]
    struct Log(Vec<Event>);

    fn params(p: &Params) -> Vec<Vec<u16>> {
        p.iter().map(<[u16]>::to_vec).collect()
    }

    impl Perform for Log {
        fn print(&mut self, text: &[u8]) {
            match self.0.last_mut() {
                Some(Event::Print(run)) => run.extend_from_slice(text),
                _ => self.0.push(Event::Print(text.to_vec())),
            }
        }
        fn execute(&mut self, byte: u8) {
            self.0.push(Event::Execute(byte));
        }
        fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
            self.0
                .push(Event::Esc(intermediates.to_vec(), ignore, byte));
        }
        fn csi_dispatch(&mut self, p: &Params, intermediates: &[u8], ignore: bool, action: u8) {
            let e = Event::Csi(params(p), intermediates.to_vec(), ignore, action);
            self.0.push(e);
        }
        fn hook(&mut self, p: &Params, intermediates: &[u8], ignore: bool, action: u8) {
            let e = Event::Hook(params(p), intermediates.to_vec(), ignore, action);
            self.0.push(e);
        }
        fn put(&mut self, bytes: &[u8]) {
            match self.0.last_mut() {
                Some(Event::Put(run)) => run.extend_from_slice(bytes),
                _ => self.0.push(Event::Put(bytes.to_vec())),
            }
        }
        fn unhook(&mut self) {
            self.0.push(Event::Unhook);
        }
        fn osc_start(&mut self) {
            self.0.push(Event::OscStart);
        }
        fn osc_put(&mut self, bytes: &[u8]) {
            match self.0.last_mut() {
                Some(Event::OscPut(run)) => run.extend_from_slice(bytes),
                _ => self.0.push(Event::OscPut(bytes.to_vec())),
            }
        }
        fn osc_end(&mut self, terminator: u8) {
            self.0.push(Event::OscEnd(terminator));
        }
    }

    /// The events of `bytes` fed in one piece, and where the scanner ends.
    fn events(bytes: &[u8]) -> (Vec<Event>, State) {
        let mut scanner = Scanner::default();
        let mut log = Log::default();
        scanner.advance(bytes, &mut log);
        (log.0, scanner.state())
    }

    fn csi(p: &[&[u16]], intermediates: &[u8], ignore: bool, action: u8) -> Event {
        let p = p.iter().map(|v| v.to_vec()).collect();
        Event::Csi(p, intermediates.to_vec(), ignore, action)
    }

    fn print(text: &[u8]) -> Event {
        Event::Print(text.to_vec())
    }

    #[test]
    fn csi_parameters_markers_and_intermediates() {
        use Event::Execute;
        let (got, state) = events(b"a\x1b[38:2:1:2:3;1mb\x1b[?1049h\x1b[>c\x1b[3 q\x1b[;5H");
        assert_eq!(state, State::Ground);
        assert_eq!(
            got,
            [
                print(b"a"),
                csi(&[&[38, 2, 1, 2, 3], &[1]], b"", false, b'm'),
                print(b"b"),
                csi(&[&[1049]], b"?", false, b'h'),
                csi(&[&[0]], b">", false, b'c'),
                csi(&[&[3]], b" ", false, b'q'),
                csi(&[&[0], &[5]], b"", false, b'H'),
            ]
        );
        // C0 controls are executed inside a sequence; CAN aborts it; parameters saturate.
        let (got, _) = events(b"\x1b[1\n2m\x1b[12\x18m\x1b[99999n");
        assert_eq!(
            got,
            [
                Execute(b'\n'),
                csi(&[&[12]], b"", false, b'm'),
                Execute(0x18),
                print(b"m"),
                csi(&[&[65535]], b"", false, b'n'),
            ]
        );
        // A marker after a parameter, or a parameter after an intermediate: dropped whole.
        assert_eq!(events(b"\x1b[1?2h\x1b[ 1qx").0, [print(b"x")]);
    }

    #[test]
    fn too_many_parameters_or_intermediates_set_ignore() {
        let many = format!("\x1b[{}m", "1;".repeat(40));
        let (got, _) = events(many.as_bytes());
        let ones: Vec<&[u16]> = vec![&[1]; 32];
        assert_eq!(got, [csi(&ones, b"", true, b'm')]);
        let (got, _) = events(b"\x1b[1 !\"p\x1b#!\"8");
        assert_eq!(
            got,
            [
                csi(&[&[1]], b" !", true, b'p'),
                Event::Esc(b"#!".to_vec(), true, b'8')
            ]
        );
    }

    #[test]
    fn strings_end_as_in_vte() {
        use Event::*;
        // OSC: ended by BEL, or by ESC (dispatched there; `ESC \` follows as its own sequence).
        let (got, state) = events(b"\x1b]0;title\x07\x1b]2;t\x1b\\");
        assert_eq!(state, State::Ground);
        assert_eq!(
            got,
            [
                OscStart,
                OscPut(b"0;title".to_vec()),
                OscEnd(0x07),
                OscStart,
                OscPut(b"2;t".to_vec()),
                OscEnd(0x1b),
                Esc(vec![], false, b'\\'),
            ]
        );
        // DCS: parameters and intermediates, then the payload (C0 kept, DEL dropped), ended
        // by ESC or by an 8-bit ST; an OSC ignores the 8-bit ST.
        let (got, _) = events(b"\x1bP1$r0\n\x7fm\x1b\\\x1bPq#\x9cx\x1b]1\x9c\x07");
        let dcs = |p: &[u16], i: &[u8], a: u8| Hook(vec![p.to_vec()], i.to_vec(), false, a);
        assert_eq!(
            got,
            [
                dcs(&[1], b"$", b'r'),
                Put(b"0\nm".to_vec()),
                Unhook,
                Esc(vec![], false, b'\\'),
                dcs(&[0], b"", b'q'),
                Put(b"#".to_vec()),
                Unhook,
                print(b"x"),
                OscStart,
                OscPut(b"1\x9c".to_vec()),
                OscEnd(0x07),
            ]
        );
        // SOS/PM/APC: swallowed up to ESC, CAN or SUB (not BEL).
        let (got, _) = events(b"\x1b_apc\x07more\x1b\\x\x1bXs\x1ay");
        assert_eq!(
            got,
            [
                Esc(vec![], false, b'\\'),
                print(b"x"),
                Execute(0x1a),
                print(b"y")
            ]
        );
    }

    #[test]
    fn escape_executes_c0_and_drops_del_and_8_bit() {
        let (got, _) = events(b"\x1b\n\x7f\x80[c\x1b\x1b7");
        assert_eq!(
            got,
            [
                Event::Execute(b'\n'),
                csi(&[&[0]], b"", false, b'c'),
                Event::Esc(vec![], false, b'7'),
            ]
        );
    }

    #[test]
    fn characters_split_between_chunks() {
        let mut scanner = Scanner::default();
        let mut log = Log::default();
        for (chunk, state) in [
            (&b"a\xf0"[..], State::Utf8),
            (b"\x9f", State::Utf8),
            (b"\x98", State::Utf8),
            (b"\x80", State::Ground),
            (b"\xe2\x82", State::Utf8),
            // Broken by a byte that is no continuation, read again as itself.
            (b"A", State::Ground),
            // Invalid as a whole: no overlong form, surrogate or code point past U+10FFFF.
            (b"\xe0\x80", State::Ground),
            (b"\xed\xa0", State::Ground),
            (b"\xf4\x90", State::Ground),
            (b"\xc0", State::Ground),
            (b"\xc3", State::Utf8),
            (b"\x1b", State::Escape),
        ] {
            scanner.advance(chunk, &mut log);
            assert_eq!(scanner.state(), state, "after {chunk:?}");
        }
        assert_eq!(
            log.0,
            [print(
                b"a\xf0\x9f\x98\x80\xe2\x82A\xe0\x80\xed\xa0\xf4\x90\xc0\xc3"
            )]
        );
    }

    #[test]
    fn tails() {
        let tail = |start: &[u8], bytes: &[u8]| {
            let mut s = Scanner::default();
            s.skip(start);
            s.skip(bytes)
        };
        assert_eq!(tail(b"", b"abc"), Tail::Complete);
        assert_eq!(tail(b"", b"abc\x1b[3"), Tail::At(3));
        assert_eq!(tail(b"", b"abc\x1b]0;t\x1b"), Tail::At(8));
        assert_eq!(tail(b"", b"ab\xe2\x82"), Tail::At(2));
        assert_eq!(tail(b"", b"\x1b[m\xf0"), Tail::At(3));
        assert_eq!(tail(b"\x1b]0;", b"title"), Tail::Before);
        assert_eq!(tail(b"\x1b]0;", b"title\x07ok"), Tail::Complete);
        assert_eq!(tail(b"\xf0", b"\x9f\x98"), Tail::Before);
        assert_eq!(tail(b"\xf0", b"\x9f\x98\x80"), Tail::Complete);
        assert_eq!(tail(b"\x1bP", b"q#0;\xc3"), Tail::Before);
    }

    /// A small deterministic PRNG (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Moved from the screen model (then `session/screen.rs`), where the search was
    /// hand-written: the tail found is the one that starts at the last ESC (`ESC ]` opens an
    /// OSC that `]` never ends).
    #[test]
    fn scanner_matches_the_last_esc_search() {
        let mut rng = Rng(42);
        for _ in 0..2000 {
            let len = rng.below(40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| if rng.below(6) == 0 { ESC } else { b']' })
                .collect();
            let want = bytes
                .iter()
                .rposition(|&b| b == ESC)
                .map_or(Tail::Complete, Tail::At);
            assert_eq!(Scanner::default().skip(&bytes), want, "{bytes:?}");
        }
    }

    // ---- against vte, through vt100 (vte is not a direct dependency) ---------------------

    /// What vt100 reports through its callbacks: everything it does not draw.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Seen {
        Control(u8),
        VisualBell,
        Escape(Option<u8>, Option<u8>, u8),
        Csi(Option<u8>, Option<u8>, Vec<Vec<u16>>, char),
        Osc(Vec<Vec<u8>>),
        Icon(Vec<u8>),
        Title(Vec<u8>),
        Copy(Vec<u8>, Vec<u8>),
        Paste(Vec<u8>),
    }

    #[derive(Default)]
    struct Recorder {
        seen: Vec<Seen>,
        /// U+FFFD printed (a broken character).
        replacements: usize,
    }

    /// Whether vt100 draws a CSI sequence with this first intermediate and final itself, in
    /// which case it may still report it (a mode it does not know) or not: such sequences
    /// are left out of the comparison.
    fn vt100_handles(i1: Option<u8>, c: char) -> bool {
        match i1 {
            None => "@ABCDEFGHfJKLMPSTX`bdmrt".contains(c),
            Some(b' ') => c == 'q',
            Some(b'?') => "JKhl".contains(c),
            _ => false,
        }
    }

    impl vt100::Callbacks for Recorder {
        fn audible_bell(&mut self, _: &mut vt100::Screen) {
            self.seen.push(Seen::Control(0x07));
        }
        fn visual_bell(&mut self, _: &mut vt100::Screen) {
            self.seen.push(Seen::VisualBell);
        }
        fn set_window_icon_name(&mut self, _: &mut vt100::Screen, name: &[u8]) {
            self.seen.push(Seen::Icon(name.to_vec()));
        }
        fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
            self.seen.push(Seen::Title(title.to_vec()));
        }
        fn copy_to_clipboard(&mut self, _: &mut vt100::Screen, ty: &[u8], data: &[u8]) {
            self.seen.push(Seen::Copy(ty.to_vec(), data.to_vec()));
        }
        fn paste_from_clipboard(&mut self, _: &mut vt100::Screen, ty: &[u8]) {
            self.seen.push(Seen::Paste(ty.to_vec()));
        }
        fn unhandled_char(&mut self, _: &mut vt100::Screen, c: char) {
            self.replacements += usize::from(c == '\u{fffd}');
        }
        fn unhandled_control(&mut self, _: &mut vt100::Screen, b: u8) {
            // C1 controls come from decoding text, which the scanner leaves to its consumer.
            if b < 0x80 {
                self.seen.push(Seen::Control(b));
            }
        }
        fn unhandled_escape(
            &mut self,
            _: &mut vt100::Screen,
            i1: Option<u8>,
            i2: Option<u8>,
            b: u8,
        ) {
            self.seen.push(Seen::Escape(i1, i2, b));
        }
        fn unhandled_csi(
            &mut self,
            _: &mut vt100::Screen,
            i1: Option<u8>,
            i2: Option<u8>,
            params: &[&[u16]],
            c: char,
        ) {
            if !vt100_handles(i1, c) {
                let params = params.iter().map(|p| p.to_vec()).collect();
                self.seen.push(Seen::Csi(i1, i2, params, c));
            }
        }
        fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
            self.seen
                .push(Seen::Osc(params.iter().map(|p| p.to_vec()).collect()));
        }
    }

    fn vt100_parser() -> vt100::Parser<Recorder> {
        let nz = |n| NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN);
        vt100::Parser::new_with_callbacks(nz(2), nz(20), 0, Recorder::default())
    }

    /// What vt100 would report for the scanner's events, by vt100's own dispatch rules.
    fn as_vt100_sees(events: &[Event]) -> Vec<Seen> {
        const CLIPBOARD: &[u8] = b"cpqs01234567";
        const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
        let mut seen = Vec::new();
        let mut osc = Vec::new();
        for e in events {
            match e {
                Event::Execute(b) if *b == 0x07 || !(0x08..=0x0f).contains(b) => {
                    seen.push(Seen::Control(*b))
                }
                Event::Esc(i, _, b) if !i.is_empty() => {
                    seen.push(Seen::Escape(Some(i[0]), i.get(1).copied(), *b))
                }
                Event::Esc(_, _, b'7' | b'8' | b'=' | b'>' | b'M' | b'c') => {}
                Event::Esc(_, _, b'g') => seen.push(Seen::VisualBell),
                Event::Esc(_, _, b) => seen.push(Seen::Escape(None, None, *b)),
                Event::Csi(p, i, _, b) => {
                    let c = char::from(*b);
                    if vt100_handles(i.first().copied(), c) {
                        continue;
                    }
                    let (i1, i2) = match i.first() {
                        None | Some(b' ') => (None, None),
                        Some(&first) => (Some(first), i.get(1).copied()),
                    };
                    if !vt100_handles(i1, c) {
                        seen.push(Seen::Csi(i1, i2, p.clone(), c));
                    }
                }
                Event::OscStart => osc.clear(),
                Event::OscPut(bytes) => osc.extend_from_slice(bytes),
                Event::OscEnd(_) => {
                    // vte keeps 16 parameters.
                    let p: Vec<Vec<u8>> = osc
                        .split(|&b| b == b';')
                        .take(16)
                        .map(<[u8]>::to_vec)
                        .collect();
                    match &p[..] {
                        [n, s] if n == b"0" => {
                            seen.push(Seen::Icon(s.clone()));
                            seen.push(Seen::Title(s.clone()));
                        }
                        [n, s] if n == b"1" => seen.push(Seen::Icon(s.clone())),
                        [n, s] if n == b"2" => seen.push(Seen::Title(s.clone())),
                        [n, ty, data] if n == b"52" && ty.iter().all(|c| CLIPBOARD.contains(c)) => {
                            if data == b"?" {
                                seen.push(Seen::Paste(ty.clone()));
                            } else if data.iter().all(|c| BASE64.contains(c)) {
                                seen.push(Seen::Copy(ty.clone(), data.clone()));
                            } else {
                                seen.push(Seen::Osc(p.clone()));
                            }
                        }
                        _ => seen.push(Seen::Osc(p.clone())),
                    }
                }
                _ => {}
            }
        }
        seen
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// However the stream is cut, the scanner reports the same events and ends in the
        /// same state; `skip` ends where `advance` does and finds where the tail starts.
        #[test]
        fn chunks_change_nothing(bytes in output(60), cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
            let (whole, end) = events(&bytes);
            let mut scanner = Scanner::default();
            let mut skipper = Scanner::default();
            let mut log = Log::default();
            for chunk in chunks(&bytes, &cuts) {
                let before = skipper.is_ground();
                scanner.advance(chunk, &mut log);
                let tail = skipper.skip(chunk);
                prop_assert_eq!(skipper.state(), scanner.state());
                match tail {
                    Tail::Complete => prop_assert!(scanner.is_ground()),
                    Tail::At(p) => {
                        prop_assert!(!scanner.is_ground());
                        prop_assert!(chunk[p] == ESC || Partial::lead(chunk[p]).is_some());
                        // The tail read afresh from there ends the same way.
                        let mut fresh = Scanner::default();
                        fresh.advance(&chunk[p..], &mut Quiet);
                        prop_assert_eq!(fresh.state(), scanner.state());
                    }
                    Tail::Before => {
                        prop_assert!(!scanner.is_ground() && !before);
                        prop_assert!(!chunk.contains(&ESC));
                    }
                }
            }
            prop_assert_eq!(scanner.state(), end);
            prop_assert_eq!(log.0, whole);
        }

        /// The scanner is at a boundary exactly where vte is in its ground state with no
        /// partial character: fed then, U+FFFD (EF BF BD) is printed once; inside a
        /// character twice (the broken one, then it); inside a sequence, not at all.
        #[test]
        fn boundaries_agree_with_vte(bytes in output(40)) {
            let mut scanner = Scanner::default();
            for k in 0..=bytes.len() {
                if k > 0 {
                    scanner.advance(&bytes[k - 1..k], &mut Quiet);
                }
                let mut vt = vt100_parser();
                vt.process(&bytes[..k]);
                let before = vt.callbacks().replacements;
                vt.process("\u{fffd}".as_bytes());
                let printed = vt.callbacks().replacements - before;
                let want = match scanner.state() {
                    State::Ground => 1,
                    State::Utf8 => 2,
                    _ => 0,
                };
                prop_assert_eq!(printed, want, "after {:?}", &bytes[..k]);
            }
        }

        /// Every control, ESC, CSI and OSC sequence vte reports (as vt100 passes it on) is one
        /// the scanner reports, with the same intermediates, parameters and final byte, in
        /// the same order.
        #[test]
        fn sequences_agree_with_vte(bytes in output(80), cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
            let mut scanner = Scanner::default();
            let mut log = Log::default();
            for chunk in chunks(&bytes, &cuts) {
                scanner.advance(chunk, &mut log);
            }
            let mut vt = vt100_parser();
            vt.process(&bytes);
            prop_assert_eq!(as_vt100_sees(&log.0), vt.callbacks().seen.clone());
        }
    }
}
