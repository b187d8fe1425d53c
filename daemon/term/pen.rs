//! The pen grammar: plain text and the few escape sequences that only set the pen (SGR colours
//! and attributes) or erase in the line, the bulk of what `cat`, `ls --color`, compilers and
//! `grep --color` print. In the ground state such output cannot change a mode, the scroll region
//! or ask the terminal anything, which is what lets the screen model drop the part of a flood
//! that scrolls away unseen and the screen thread gather it into long runs.

use super::seq::ESC;

/// How many leading bytes of `bytes` are plain text: printable ASCII, CR, LF and TAB. In the
/// ground state these start no sequence and no character; they only write cells, move the
/// cursor and scroll.
pub fn plain_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|&b| !matches!(b, 0x20..=0x7e | b'\r' | b'\n' | b'\t'))
        .unwrap_or(bytes.len())
}

/// How the pen sequence at the start of `bytes` ends, if `bytes` starts with one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PenSeq {
    /// SGR (`CSI … m`): sets the pen (colours and attributes), nothing else. `reset` when it
    /// is `CSI m` or `CSI 0 m`, which sets the default pen whatever came before.
    Sgr {
        /// Its bytes.
        len: usize,
        /// Whether it sets the default pen.
        reset: bool,
    },
    /// EL (`CSI K`, `CSI 0/1/2 K`): erases part of the cursor's line with the pen's colours;
    /// it moves nothing and changes no mode.
    EraseLine {
        /// Its bytes.
        len: usize,
    },
}

impl PenSeq {
    /// Its bytes.
    pub fn byte_len(self) -> usize {
        match self {
            PenSeq::Sgr { len, .. } | PenSeq::EraseLine { len } => len,
        }
    }
}

/// The complete pen sequence `bytes` starts with: `ESC [`, parameters of digits, `;` and `:`
/// only (no private marker, no intermediate), then `m`, or `K` with a lone 0, 1 or 2 or none.
/// vt100 reads such a sequence the same in any ground state, and it answers no query.
pub fn pen_seq(bytes: &[u8]) -> Option<PenSeq> {
    let rest = bytes.strip_prefix(&[ESC, b'['])?;
    let params = rest
        .iter()
        .position(|b| !matches!(b, b'0'..=b'9' | b';' | b':'))?;
    let len = 2 + params + 1;
    match (rest[params], &rest[..params]) {
        (b'm', p) => Some(PenSeq::Sgr {
            len,
            reset: p.is_empty() || p == b"0",
        }),
        (b'K', b"" | b"0" | b"1" | b"2") => Some(PenSeq::EraseLine { len }),
        _ => None,
    }
}

/// How many leading bytes of `bytes` are pen text: plain text (see [`plain_len`]) and
/// complete pen sequences (see [`pen_seq`]), the bulk of coloured output (`ls --color`,
/// compilers, `grep --color`). In the ground state these only write cells, erase parts of
/// lines, move the cursor, scroll and set the pen.
pub fn pen_text_len(bytes: &[u8]) -> usize {
    let mut i = 0;
    loop {
        i += plain_len(&bytes[i..]);
        match bytes.get(i) {
            Some(&ESC) => match pen_seq(&bytes[i..]) {
                Some(pen) => i += pen.byte_len(),
                None => return i,
            },
            _ => return i,
        }
    }
}

/// Whether every ESC in `bytes` starts a complete pen sequence: output that changes no mode,
/// no scroll region and asks nothing (a chunk ending inside a sequence does not qualify).
pub fn only_pen_sequences(bytes: &[u8]) -> bool {
    memchr::memchr_iter(ESC, bytes).all(|e| pen_seq(&bytes[e..]).is_some())
}

/// [`only_pen_sequences`], but a sequence cut by the end of `bytes` passes if what it has so
/// far (`ESC`, `ESC [`, parameters) could still become a pen sequence: for output read in
/// chunks, checked again with the next chunk from that sequence's ESC on.
pub fn only_pen_sequences_so_far(bytes: &[u8]) -> bool {
    memchr::memchr_iter(ESC, bytes).all(|e| {
        let rest = &bytes[e..];
        pen_seq(rest).is_some() || could_become_pen(rest)
    })
}

/// Whether `rest` (from an ESC to the end of the bytes read) is the start of a pen sequence
/// cut short: where a chunk's check has to resume with the next chunk.
pub fn could_become_pen(rest: &[u8]) -> bool {
    match rest {
        [ESC] => true,
        [ESC, b'[', params @ ..] => params
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b';' | b':')),
        _ => false,
    }
}

/// Whether pen text (as [`pen_text_len`] measures it) prints a character: a printable byte
/// outside its sequences.
pub fn pen_text_prints(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            ESC => match pen_seq(&bytes[i..]) {
                Some(pen) => i += pen.byte_len(),
                None => return false,
            },
            0x20..=0x7e => return true,
            _ => i += 1,
        }
    }
    false
}

/// The SGR sequences of pen text from its last reset on: what sets the pen as the text leaves
/// it (SGR only sets the pen; a reset sets the default whatever came before).
pub fn pen_at_end(text: &[u8]) -> Vec<u8> {
    let mut sgr = Vec::new();
    for e in memchr::memrchr_iter(ESC, text) {
        if let Some(PenSeq::Sgr { len, reset }) = pen_seq(&text[e..]) {
            sgr.push(&text[e..e + len]);
            if reset {
                break;
            }
        }
    }
    sgr.reverse();
    sgr.concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::seq::arbitrary::output;
    use crate::term::seq::{Params, Perform, Scanner, State};
    use proptest::prelude::*;

    #[test]
    fn plain_text() {
        assert_eq!(plain_len(b"ab c\r\n\tx\x1b[m"), 8);
        assert_eq!(plain_len(b"ab\x08"), 2);
        assert_eq!(plain_len("é".as_bytes()), 0);
        assert_eq!(plain_len(b"all plain\n"), 10);
    }

    #[test]
    fn pen_text() {
        assert_eq!(
            pen_seq(b"\x1b[01;38;5;33mx"),
            Some(PenSeq::Sgr {
                len: 13,
                reset: false
            })
        );
        assert_eq!(
            pen_seq(b"\x1b[m"),
            Some(PenSeq::Sgr {
                len: 3,
                reset: true
            })
        );
        assert_eq!(
            pen_seq(b"\x1b[0m"),
            Some(PenSeq::Sgr {
                len: 4,
                reset: true
            })
        );
        assert_eq!(
            pen_seq(b"\x1b[00m"),
            Some(PenSeq::Sgr {
                len: 5,
                reset: false
            })
        );
        assert_eq!(pen_seq(b"\x1b[K"), Some(PenSeq::EraseLine { len: 3 }));
        assert_eq!(pen_seq(b"\x1b[2K"), Some(PenSeq::EraseLine { len: 4 }));
        // Not pen sequences: other finals, markers, intermediates, unfinished, other EL modes.
        for not in [
            &b"\x1b[3K"[..],
            b"\x1b[?1m",
            b"\x1b[>4;1m",
            b"\x1b[1 m",
            b"\x1b[31",
            b"\x1b[",
            b"\x1b",
            b"\x1b[6n",
            b"\x1b[3b",
            b"\x1b]0;m\x07",
            b"\x1bm",
        ] {
            assert_eq!(pen_seq(not), None, "{not:?}");
        }
        let text = b"\x1b[01;34mdir\x1b[0m\r\n\x1b[01;31m\x1b[Kmatch\x1b[m\x1b[K rest\r\n";
        assert_eq!(pen_text_len(text), text.len());
        assert!(only_pen_sequences(text));
        assert!(pen_text_prints(text));
        assert_eq!(pen_text_len(b"ab\x1b[31mc\x1b[6nd"), 8);
        assert!(!only_pen_sequences(b"ab\x1b[31mc\x1b[6nd"));
        assert!(!only_pen_sequences(b"ab\x1b[31"));
        assert!(only_pen_sequences_so_far(b"ab\x1b[31"));
        assert!(only_pen_sequences_so_far(b"ab\x1b[m\x1b"));
        assert!(!only_pen_sequences_so_far(b"ab\x1b[?1"));
        assert!(!only_pen_sequences_so_far(b"ab\x1b[6n"));
        assert!(could_become_pen(b"\x1b[1;2:"));
        assert!(!could_become_pen(b"\x1b[1;2:m"));
        assert_eq!(pen_text_len(b"\x1b[31m\xc3\xa9"), 5);
        assert!(!pen_text_prints(b"\r\n\x1b[31m\x1b[K\r\n\t"));
    }

    /// The pen a dropped part leaves: the SGRs from its last reset on, whatever the pen was.
    #[test]
    fn the_pen_is_carried_from_the_last_reset() {
        let text = b"a\x1b[31m\x1b[Kb\x1b[0m\x1b[1mc\x1b[K\x1b[;4m\x1b[00;5md\r\n";
        // `CSI ; 4 m` and `CSI 00 ; 5 m` reset too, but only `CSI m` and `CSI 0 m` are taken
        // for resets (enough for what programs print).
        assert_eq!(
            pen_at_end(text),
            b"\x1b[0m\x1b[1m\x1b[;4m\x1b[00;5m".to_vec()
        );
        assert_eq!(pen_at_end(b"x\x1b[7m\x1b[m"), b"\x1b[m".to_vec());
        assert_eq!(pen_at_end(b"no pen\r\n"), Vec::<u8>::new());
    }

    /// What the scanner reports, in short: text and controls, CSI sequences in full, anything
    /// else as `Other`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Event {
        Print,
        Execute(u8),
        Csi(Vec<Vec<u16>>, Vec<u8>, u8),
        Other,
    }

    #[derive(Default)]
    struct Log(Vec<Event>);

    impl Perform for Log {
        fn print(&mut self, _text: &[u8]) {
            self.0.push(Event::Print);
        }
        fn execute(&mut self, byte: u8) {
            self.0.push(Event::Execute(byte));
        }
        fn esc_dispatch(&mut self, _intermediates: &[u8], _ignore: bool, _byte: u8) {
            self.0.push(Event::Other);
        }
        fn csi_dispatch(&mut self, p: &Params, intermediates: &[u8], _ignore: bool, action: u8) {
            let p = p.iter().map(<[u16]>::to_vec).collect();
            self.0.push(Event::Csi(p, intermediates.to_vec(), action));
        }
        fn hook(&mut self, _p: &Params, _intermediates: &[u8], _ignore: bool, _action: u8) {
            self.0.push(Event::Other);
        }
        fn put(&mut self, _bytes: &[u8]) {
            self.0.push(Event::Other);
        }
        fn unhook(&mut self) {
            self.0.push(Event::Other);
        }
        fn osc_start(&mut self) {
            self.0.push(Event::Other);
        }
        fn osc_put(&mut self, _bytes: &[u8]) {
            self.0.push(Event::Other);
        }
        fn osc_end(&mut self, _terminator: u8) {
            self.0.push(Event::Other);
        }
    }

    /// The events of `bytes` read from the ground state, and where the scanner ends.
    fn events(bytes: &[u8]) -> (Vec<Event>, State) {
        let mut scanner = Scanner::default();
        let mut log = Log::default();
        scanner.advance(bytes, &mut log);
        (log.0, scanner.state())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// A pen sequence is, as vte reads it from the ground state, exactly one CSI dispatch
        /// with no marker or intermediate, final `m` or `K`, ending in the ground state; pen
        /// text is text and such sequences only.
        #[test]
        fn pen_sequences_are_what_vte_reads(bytes in output(60)) {
            for i in 0..bytes.len() {
                if let Some(pen) = pen_seq(&bytes[i..]) {
                    let (evs, end) = events(&bytes[i..i + pen.byte_len()]);
                    prop_assert_eq!(end, State::Ground);
                    prop_assert_eq!(evs.len(), 1);
                    let Event::Csi(p, inter, fin) = &evs[0] else {
                        return Err(TestCaseError::fail(format!("{evs:?}")));
                    };
                    prop_assert!(inter.is_empty());
                    match pen {
                        PenSeq::Sgr { reset, .. } => {
                            prop_assert_eq!(*fin, b'm');
                            // A reset has a lone 0 (or nothing) for its only parameter.
                            if reset {
                                prop_assert!(p.iter().flatten().all(|&v| v == 0) && p.len() <= 1);
                            }
                        }
                        PenSeq::EraseLine { .. } => prop_assert_eq!(*fin, b'K'),
                    }
                }
            }
            let n = pen_text_len(&bytes);
            let (evs, end) = events(&bytes[..n]);
            prop_assert_eq!(end, State::Ground);
            for e in evs {
                prop_assert!(matches!(e, Event::Print | Event::Execute(b'\r' | b'\n' | b'\t') | Event::Csi(_, _, b'm' | b'K')), "{:?}", e);
            }
        }
    }
}
