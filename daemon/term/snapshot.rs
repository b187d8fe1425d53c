//! Snapshot encoding: the screen's ANSI, gzipped (level 1) or plain as the asking dialect
//! carries it, with scrollback trimmed until it fits what a snapshot may be on the wire (each
//! dialect frames it itself).

use std::io::Write as _;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

use super::model::ScreenModel;
use super::render;

/// Compressions tried when trimming scrollback, on top of the first two.
const MAX_TRIM_TRIES: usize = 6;

/// How a dialect carries a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Packing {
    /// One gzip stream (the browser dialect).
    Gzip,
    /// The ANSI itself (a replay, for clients that write it straight into a terminal).
    Plain,
}

/// What a dialect asks of a snapshot: its packing, and the most bytes it may be once packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnapshotForm {
    /// Gzip or plain.
    pub packing: Packing,
    /// Largest packed size, bytes: scrollback is trimmed until it fits.
    pub limit: usize,
    /// Whether the scrollback comes too; without it, the screen alone (a viewer slower than
    /// a flood is sent screens as the flood goes, and the scrollback once it stops).
    pub scrollback: bool,
}

impl SnapshotForm {
    /// A gzip stream of at most `limit` bytes.
    pub const fn gzip(limit: usize) -> Self {
        SnapshotForm {
            packing: Packing::Gzip,
            limit,
            scrollback: true,
        }
    }

    /// Plain ANSI of at most `limit` bytes.
    pub const fn plain(limit: usize) -> Self {
        SnapshotForm {
            packing: Packing::Plain,
            limit,
            scrollback: true,
        }
    }

    /// This form without the scrollback: the screen alone.
    pub const fn screen_only(self) -> Self {
        SnapshotForm {
            scrollback: false,
            ..self
        }
    }

    fn pack(self, ansi: Vec<u8>) -> Vec<u8> {
        match self.packing {
            Packing::Gzip => gzip(&ansi),
            Packing::Plain => ansi,
        }
    }
}

/// One encoded snapshot: a single gzip stream, or plain ANSI, of at most the limit it was
/// encoded for.
#[derive(Clone)]
pub struct EncodedSnapshot {
    /// The packed bytes (see [`SnapshotForm`]).
    pub bytes: Bytes,
    /// How `bytes` is packed.
    pub packing: Packing,
    /// Length of the ANSI before compression.
    pub ansi_len: usize,
    /// Scrollback lines included.
    pub scrollback_lines: usize,
}

/// [`encode_as`] a gzip stream of at most `limit` bytes (the browser dialect's snapshot).
pub fn encode(model: &ScreenModel, max_scrollback: usize, limit: usize) -> EncodedSnapshot {
    encode_as(model, max_scrollback, SnapshotForm::gzip(limit))
}

/// Packs `model.snapshot_ansi(n)` as `form` asks, with n = all scrollback (up to
/// `max_scrollback`) first; if that is over `form.limit` bytes (what the asking dialect can
/// carry), drops scrollback, oldest first, until it fits, falling back to no scrollback at all
/// (and, for a screen too big even alone, to its plain text, then to just the cursor and
/// modes). Chunks never grow: the snapshot shrinks instead.
pub fn encode_as(
    model: &ScreenModel,
    max_scrollback: usize,
    form: SnapshotForm,
) -> EncodedSnapshot {
    let limit = form.limit;
    // Rendered once; trimming only re-assembles and re-packs.
    let parts = model.snapshot_parts(if form.scrollback { max_scrollback } else { 0 });
    let attempt = |n: usize| {
        let ansi = parts.assemble(n);
        (ansi.len(), form.pack(ansi))
    };

    let all = parts.lines();
    let (mut ansi_len, mut packed) = attempt(all);
    let mut lines = all;
    if packed.len() > limit {
        let (len0, packed0) = attempt(0);
        if packed0.len() > limit {
            lines = 0;
            (ansi_len, packed) = fallback(model, form);
        } else {
            // The size grows about linearly with the lines kept: interpolate
            // between the largest count known to fit and the smallest known
            // not to, aiming a little under the limit.
            let (mut fit, mut fit_size) = (0, packed0.len());
            let (mut over, mut over_size) = (all, packed.len());
            (ansi_len, packed) = (len0, packed0);
            for _ in 0..MAX_TRIM_TRIES {
                if over - fit <= 1 || limit - fit_size < limit / 32 {
                    break;
                }
                let per_line = (over_size - fit_size) as f64 / (over - fit) as f64;
                let room = (limit - limit / 64).saturating_sub(fit_size) as f64;
                let guess = (fit + (room / per_line) as usize).clamp(fit + 1, over - 1);
                let (len, g) = attempt(guess);
                if g.len() <= limit {
                    (fit, fit_size) = (guess, g.len());
                    (ansi_len, packed) = (len, g);
                } else {
                    (over, over_size) = (guess, g.len());
                }
            }
            lines = fit;
        }
    }

    EncodedSnapshot {
        bytes: Bytes::from(packed),
        packing: form.packing,
        ansi_len,
        scrollback_lines: lines,
    }
}

/// For a screen that does not fit even without scrollback (an adversarial
/// 500 x 1000 screen of random true colour): its text without attributes,
/// or failing that, only the cursor and input modes.
fn fallback(model: &ScreenModel, form: SnapshotForm) -> (usize, Vec<u8>) {
    let plain = render::plain_snapshot(model.screen());
    let len = plain.len();
    let packed = form.pack(plain);
    if packed.len() <= form.limit {
        return (len, packed);
    }
    let minimal = render::minimal_snapshot(model.screen());
    (minimal.len(), form.pack(minimal))
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(data.len() / 4 + 64), Compression::new(1));
    // Compressing into a Vec cannot fail: the only I/O is the Vec's own.
    encoder.write_all(data).expect("gzip into a Vec");
    encoder.finish().expect("gzip into a Vec")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::num::NonZeroU16;

    /// The browser dialect's limit (`protocol::swe::SNAPSHOT_LIMIT`: 255 chunks of 8 KiB),
    /// written out: the terminal model knows no dialect.
    const LIMIT: usize = MAX_CHUNKS * CHUNK;
    /// Most chunks, and bytes per chunk, of a snapshot in the browser dialect.
    const MAX_CHUNKS: usize = 255;
    const CHUNK: usize = 8 * 1024;

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut ansi = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut ansi)
            .unwrap();
        ansi
    }

    /// How many chunks the browser dialect cuts this snapshot into (one at least).
    fn chunks(encoded: &EncodedSnapshot) -> usize {
        encoded.bytes.len().div_ceil(CHUNK).max(1)
    }

    fn parser(rows: u16, cols: u16, bytes: &[u8]) -> vt100::Parser {
        let nz = |n| NonZeroU16::new(n).unwrap();
        let mut p = vt100::Parser::new(nz(rows), nz(cols), 100_000);
        p.process(bytes);
        p
    }

    fn scrollback_rows(screen: &vt100::Screen) -> Vec<String> {
        let mut s = screen.clone();
        let total = s.scrollback_len();
        let cols = s.size().1.get();
        (0..total)
            .map(|line| {
                s.set_scrollback(total - line);
                s.rows_formatted(0, cols).next().unwrap()
            })
            .collect()
    }

    /// A tiny deterministic PRNG.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Lines of random true colour, one character per colour: barely compressible.
    fn random_colour_lines(lines: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut s = Vec::new();
        for _ in 0..lines {
            for _ in 0..cols {
                let r = rng(&mut state);
                s.extend_from_slice(
                    format!(
                        "\x1b[38;2;{};{};{}m\x1b[48;2;{};{};{}m{}",
                        r & 0xff,
                        (r >> 8) & 0xff,
                        (r >> 16) & 0xff,
                        (r >> 24) & 0xff,
                        (r >> 32) & 0xff,
                        (r >> 40) & 0xff,
                        char::from(b'!' + ((r >> 48) % 90) as u8)
                    )
                    .as_bytes(),
                );
            }
            s.extend_from_slice(b"\x1b[m\r\n");
        }
        s
    }

    #[test]
    fn chunks_reassemble_to_the_snapshot() {
        let mut model = ScreenModel::new(24, 80, 1000);
        let mut stream = Vec::new();
        for i in 0..300 {
            stream.extend_from_slice(
                format!("\x1b[3{}mline {i}\x1b[m some text\r\n", i % 8).as_bytes(),
            );
        }
        stream.extend_from_slice(&random_colour_lines(40, 80, 1));
        stream.extend_from_slice(b"\x1b[?1049h\x1b[2;3Hin vim\x1b[?2004h");
        model.process(&stream);
        let encoded = encode(&model, 1000, LIMIT);
        let ansi = gunzip(&encoded.bytes);
        assert_eq!(ansi, model.snapshot_ansi(1000));
        assert_eq!(encoded.ansi_len, ansi.len());
        assert_eq!(encoded.bytes.len(), encoded.bytes.len());
        assert_eq!(encoded.scrollback_lines, model.scrollback_len());
        assert!(chunks(&encoded) > 1, "several chunks");
        // The limit on scrollback is honoured.
        let encoded = encode(&model, 10, LIMIT);
        assert_eq!(encoded.scrollback_lines, 10);
        assert_eq!(gunzip(&encoded.bytes), model.snapshot_ansi(10));
    }

    /// The screen-only form draws the same screen with no scrollback; the full form brings
    /// the scrollback back.
    #[test]
    fn the_screen_only_form_leaves_the_scrollback_out() {
        let mut model = ScreenModel::new(24, 80, 1000);
        for i in 0..500 {
            model.process(format!("line {i} of a flood\r\n").as_bytes());
        }
        let full = encode_as(&model, 1000, SnapshotForm::gzip(LIMIT));
        let screen = encode_as(&model, 1000, SnapshotForm::gzip(LIMIT).screen_only());
        assert_eq!(screen.scrollback_lines, 0);
        assert!(full.scrollback_lines > 400, "{}", full.scrollback_lines);
        assert!(screen.bytes.len() * 4 < full.bytes.len());
        let (got_full, got_screen) = (
            parser(24, 80, &gunzip(&full.bytes)),
            parser(24, 80, &gunzip(&screen.bytes)),
        );
        assert_eq!(
            got_screen.screen().contents_formatted(),
            got_full.screen().contents_formatted()
        );
        assert_eq!(got_screen.screen().scrollback_len(), 0);
        assert_eq!(
            scrollback_rows(got_full.screen()),
            scrollback_rows(model.screen())
        );
    }

    #[test]
    fn empty_screen_is_one_chunk() {
        let model = ScreenModel::new(24, 80, 1000);
        let encoded = encode(&model, 1000, LIMIT);
        assert_eq!(chunks(&encoded), 1);
        assert_eq!(encoded.scrollback_lines, 0);
        let got = parser(24, 80, &gunzip(&encoded.bytes));
        assert_eq!(
            got.screen().contents_formatted(),
            model.screen().contents_formatted()
        );
    }

    #[test]
    fn huge_scrollback_is_trimmed_to_fit() {
        let (rows, cols) = (40, 160);
        let mut model = ScreenModel::new(rows, cols, 5000);
        model.process(&random_colour_lines(4000, usize::from(cols), 7));
        model.process("\x1b[5;5H\x1b[1;31mcursor here 日本".as_bytes());
        let all = model.scrollback_len();
        let t = std::time::Instant::now();
        let encoded = encode(&model, usize::MAX, LIMIT);
        let took = t.elapsed();
        assert!(chunks(&encoded) <= MAX_CHUNKS);
        assert!(encoded.bytes.len() <= LIMIT);
        assert!(
            encoded.scrollback_lines > 0 && encoded.scrollback_lines < all,
            "trimmed, not dropped: {} of {all}",
            encoded.scrollback_lines
        );
        // Not needlessly far under the limit.
        assert!(
            encoded.bytes.len() > LIMIT * 9 / 10,
            "{} of {LIMIT}",
            encoded.bytes.len()
        );
        let ansi = gunzip(&encoded.bytes);
        let got = parser(rows, cols, &ansi);
        assert_eq!(
            got.screen().contents_formatted(),
            model.screen().contents_formatted()
        );
        assert_eq!(
            got.screen().cursor_position(),
            model.screen().cursor_position()
        );
        let (g, w) = (
            scrollback_rows(got.screen()),
            scrollback_rows(model.screen()),
        );
        assert_eq!(g.len(), encoded.scrollback_lines);
        assert_eq!(g[..], w[all - g.len()..], "the newest lines are kept");
        eprintln!(
            "kept {} of {all} lines, {} chunks, ansi {} gzip {}, in {took:?}",
            encoded.scrollback_lines,
            chunks(&encoded),
            encoded.ansi_len,
            encoded.bytes.len()
        );
    }

    #[test]
    fn screen_too_big_alone_falls_back_to_text() {
        let (rows, cols) = (500, 1000);
        let mut model = ScreenModel::new(rows, cols, 0);
        let mut stream = random_colour_lines(usize::from(rows) - 1, usize::from(cols), 3);
        stream.extend_from_slice(b"\x1b[?2004h\x1b[7;9H");
        model.process(&stream);
        let encoded = encode(&model, usize::MAX, LIMIT);
        assert!(chunks(&encoded) <= MAX_CHUNKS);
        assert_eq!(encoded.scrollback_lines, 0);
        let got = parser(rows, cols, &gunzip(&encoded.bytes));
        assert_eq!(got.screen().contents(), model.screen().contents());
        assert_eq!(got.screen().cursor_position(), (6, 8));
        assert!(got.screen().bracketed_paste());
    }
}
