//! Micro benchmarks (divan) of the daemon's hot paths, through the library's public API: screen
//! parsing, snapshot render and gzip, the browser codec, the output log, attention's screen
//! readings and the audit trail. End-to-end figures (a real daemon, PTYs, WebSockets) are
//! `benches/load.rs`'s, and attention's latency `benches/attention.rs`'s.
//!
//! Run: `cargo bench --bench micro`; filter by path with a regex, e.g.
//! `cargo bench --bench micro -- screen` or `cargo bench --bench micro -- 'snapshot::encode'`.
//! Every input is generated here, deterministically: no files, no network. Before the table it
//! prints the sizes of the generated streams and snapshots, to read the throughputs against.

use std::fmt;
use std::hint::black_box;
use std::io::Write as _;
use std::sync::LazyLock;

use bytes::Bytes;
use divan::counter::BytesCount;
use divan::Bencher;
use ptyhub::term::model::ScreenModel;

fn main() {
    print_sizes();
    divan::main();
}

/// Terminal sizes the screen and snapshot benchmarks run at: a default terminal and a big one.
const SIZES: [Size; 2] = [
    Size { rows: 24, cols: 80 },
    Size {
        rows: 50,
        cols: 200,
    },
];

/// Scrollback of a session by default (`session.scrollback_lines`).
const SCROLLBACK: usize = 1000;

/// Bytes the session actor reads from the PTY at once (`READ_CHUNK` in daemon/session), so
/// `process` sees escape sequences cut at the same kind of boundaries as in the daemon.
const READ_CHUNK: usize = 16 * 1024;

/// Size of each generated parsing stream: big enough to roll the scrollback many times over.
const STREAM_BYTES: usize = 2 << 20;

#[derive(Clone, Copy)]
struct Size {
    rows: u16,
    cols: u16,
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

/// xorshift64: deterministic and dependency-free, so every run parses the same bytes.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// A value in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }
}

/// (a) Plain text: base64-like lines of 76 characters, each ended by `\r\n`.
fn plain_stream(bytes: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(bytes + 80);
    while out.len() < bytes {
        out.extend((0..76).map(|_| ALPHABET[rng.below(64) as usize]));
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// An SGR change of the kinds coloured output mixes: 256-colour and true-colour foreground,
/// 256-colour background, bold, italic, reset.
fn push_sgr(out: &mut Vec<u8>, rng: &mut Rng) {
    // Writing into a Vec cannot fail.
    let _ = match rng.below(6) {
        0 => write!(out, "\x1b[38;5;{}m", rng.below(256)),
        1 => write!(
            out,
            "\x1b[38;2;{};{};{}m",
            rng.below(256),
            rng.below(256),
            rng.below(256)
        ),
        2 => write!(out, "\x1b[48;5;{}m", rng.below(256)),
        3 => write!(out, "\x1b[1m"),
        4 => write!(out, "\x1b[3m"),
        _ => write!(out, "\x1b[0m"),
    };
}

/// `n` printable ASCII characters, words and spaces.
fn push_text(out: &mut Vec<u8>, rng: &mut Rng, n: usize) {
    out.extend((0..n).map(|_| match rng.below(8) {
        0 => b' ',
        c => b'a' + ((c * 3 + rng.below(4)) as u8),
    }));
}

/// `lines` lines of coloured text, each `width / 2..=width` characters wide, the attributes
/// changing every 2 to 7 characters.
fn coloured_lines(out: &mut Vec<u8>, rng: &mut Rng, lines: usize, width: usize) {
    for _ in 0..lines {
        let len = rng.range(width / 2, width);
        let mut shown = 0;
        while shown < len {
            push_sgr(out, rng);
            let n = rng.range(2, 7).min(len - shown);
            push_text(out, rng, n);
            shown += n;
        }
        out.extend_from_slice(b"\x1b[0m\r\n");
    }
}

/// (b) Coloured output: lines of up to 78 characters (fits 80 columns, like most tools' output).
fn coloured_stream(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut out = Vec::with_capacity(bytes + 4096);
    while out.len() < bytes {
        coloured_lines(&mut out, &mut rng, 64, 78);
    }
    out
}

/// (c) A full-screen program (htop, an editor, an agent's TUI) drawn for `size`: enter the
/// alternate screen, then whole-screen redraws addressed with `CSI row;col H` (a box-drawing
/// frame, coloured content rows, a reverse-video status line), then leave.
fn fullscreen_stream(size: Size, bytes: usize) -> Vec<u8> {
    let (rows, cols) = (usize::from(size.rows), usize::from(size.cols));
    let mut rng = Rng(0xd1b5_4a32_d192_ed03);
    let mut out = Vec::with_capacity(bytes + 64 * 1024);
    out.extend_from_slice(b"\x1b[?1049h\x1b[?25l");
    let mut frame = 0;
    while out.len() < bytes {
        let _ = write!(out, "\x1b[1;1H\x1b[38;5;{}m┌", 30 + frame % 200);
        out.extend("─".repeat(cols - 2).bytes());
        out.extend("┐".bytes());
        for row in 2..rows - 1 {
            let _ = write!(
                out,
                "\x1b[{row};1H\x1b[38;5;{}m│\x1b[{row};3H",
                30 + frame % 200
            );
            let mut shown = 0;
            while shown < cols - 4 {
                push_sgr(&mut out, &mut rng);
                let n = rng.range(4, 16).min(cols - 4 - shown);
                push_text(&mut out, &mut rng, n);
                shown += n;
            }
            let _ = write!(
                out,
                "\x1b[0m\x1b[38;5;{}m\x1b[{row};{cols}H│",
                30 + frame % 200
            );
        }
        let _ = write!(out, "\x1b[{};1H└", rows - 1);
        out.extend("─".repeat(cols - 2).bytes());
        out.extend("┘".bytes());
        let status = format!(" frame {frame}  q quit  / search  ? help");
        let _ = write!(out, "\x1b[{rows};1H\x1b[0;7m{status:<cols$}\x1b[0m");
        frame += 1;
    }
    out.extend_from_slice(b"\x1b[?25h\x1b[?1049l");
    out
}

static PLAIN: LazyLock<Vec<u8>> = LazyLock::new(|| plain_stream(STREAM_BYTES));
static COLOURED: LazyLock<Vec<u8>> = LazyLock::new(|| coloured_stream(STREAM_BYTES));
static FULLSCREEN: LazyLock<[Vec<u8>; 2]> =
    LazyLock::new(|| SIZES.map(|size| fullscreen_stream(size, STREAM_BYTES)));

fn fullscreen_for(size: Size) -> &'static [u8] {
    let i = SIZES.iter().position(|s| s.rows == size.rows).unwrap_or(0);
    &FULLSCREEN[i]
}

/// Snapshot cases: each size with an empty scrollback and with a full one.
const SNAPSHOTS: [Snap; 4] = [
    Snap::new(24, 80, 0),
    Snap::new(24, 80, SCROLLBACK),
    Snap::new(50, 200, 0),
    Snap::new(50, 200, SCROLLBACK),
];

#[derive(Clone, Copy)]
struct Snap {
    size: Size,
    scrollback: usize,
}

impl Snap {
    const fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        Snap {
            size: Size { rows, cols },
            scrollback,
        }
    }

    /// A screen full of coloured text (lines up to its full width) and, when it has scrollback,
    /// that many lines of it filled too.
    fn model(self) -> ScreenModel {
        let Size { rows, cols } = self.size;
        let mut model = ScreenModel::new(rows, cols, self.scrollback);
        let mut stream = Vec::new();
        let lines = self.scrollback + 2 * usize::from(rows);
        coloured_lines(&mut stream, &mut Rng(7), lines, usize::from(cols));
        model.process(&stream);
        model
    }
}

impl fmt::Display for Snap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/sb{}", self.size, self.scrollback)
    }
}

/// The sizes the throughputs below are relative to (and the compression ratio, which the
/// timings alone do not show).
fn print_sizes() {
    println!(
        "streams: plain {} B, coloured {} B, fullscreen {} B (24x80) / {} B (50x200)",
        PLAIN.len(),
        COLOURED.len(),
        FULLSCREEN[0].len(),
        FULLSCREEN[1].len()
    );
    for snap in SNAPSHOTS {
        let model = snap.model();
        let encoded = ptyhub::term::snapshot::encode(
            &model,
            SCROLLBACK,
            ptyhub::protocol::swe::SNAPSHOT_LIMIT,
        );
        println!(
            "snapshot {snap}: ansi {} B, gzip {} B, {} scrollback lines",
            encoded.ansi_len,
            encoded.bytes.len(),
            encoded.scrollback_lines
        );
    }
    println!();
}

/// Screen model: parsing PTY output into the vt100 grid (`ScreenModel::process`).
mod screen {
    use super::*;

    /// Feed `stream` to a fresh model in PTY-read-sized chunks; the model is built and dropped
    /// outside the timing.
    fn process(bencher: Bencher, size: Size, stream: &[u8]) {
        feed(bencher, size, stream, READ_CHUNK, |model, chunk| {
            model.process(chunk)
        });
    }

    /// Feed `stream` to a fresh model `chunk` bytes at a time through `step`.
    fn feed(
        bencher: Bencher,
        size: Size,
        stream: &[u8],
        chunk: usize,
        step: fn(&mut ScreenModel, &[u8]),
    ) {
        bencher
            .counter(BytesCount::of_slice(stream))
            .with_inputs(|| ScreenModel::new(size.rows, size.cols, SCROLLBACK))
            .bench_local_values(|mut model| {
                for piece in stream.chunks(chunk) {
                    step(&mut model, black_box(piece));
                }
                model
            });
    }

    /// Parse 2 MiB of plain base64-like text lines (scrolling, scrollback churn).
    #[divan::bench(args = SIZES, sample_count = 30, sample_size = 1)]
    fn process_plain(bencher: Bencher, size: Size) {
        process(bencher, size, &PLAIN);
    }

    /// The same 2 MiB of plain lines gathered into 1 MiB runs, as the screen thread does
    /// when it falls behind a flood: `process_bulk` skips what scrolls away unseen.
    #[divan::bench(args = SIZES, sample_count = 30, sample_size = 1)]
    fn process_plain_bulk(bencher: Bencher, size: Size) {
        feed(bencher, size, &PLAIN, 1 << 20, |model, run| {
            model.process_bulk(run);
        });
    }

    /// Parse 2 MiB of coloured text (SGR 256/true colour, bold, italic every few characters).
    #[divan::bench(args = SIZES, sample_count = 30, sample_size = 1)]
    fn process_coloured(bencher: Bencher, size: Size) {
        process(bencher, size, &COLOURED);
    }

    /// Parse 2 MiB of a full-screen program redrawing the alternate screen with cursor moves.
    #[divan::bench(args = SIZES, sample_count = 30, sample_size = 1)]
    fn process_fullscreen(bencher: Bencher, size: Size) {
        process(bencher, size, fullscreen_for(size));
    }
}

/// Snapshots: the actor's copy, the ANSI render, and render plus gzip (what a joiner waits for).
mod snapshot {
    use super::*;

    /// `resize`: a narrowing and the widening back, each rewrapping the screen and every
    /// scrollback line as xterm.js does (a phone joining and leaving, a window dragged).
    #[divan::bench(args = SNAPSHOTS)]
    fn resize_narrow_and_back(bencher: Bencher, snap: Snap) {
        let Size { rows, cols } = snap.size;
        bencher
            .with_inputs(|| snap.model())
            .bench_local_values(|mut model| {
                model.resize(rows, cols * 3 / 5);
                model.resize(rows, cols);
                model
            });
    }

    /// `freeze`: the copy of the screen (and scrollback) the actor makes before rendering off it.
    #[divan::bench(args = SNAPSHOTS)]
    fn freeze(bencher: Bencher, snap: Snap) {
        let model = snap.model();
        bencher.bench_local(|| black_box(&model).freeze());
    }

    /// `snapshot_ansi`: rendering the screen and scrollback to ANSI, without compressing.
    #[divan::bench(args = SNAPSHOTS)]
    fn render_ansi(bencher: Bencher, snap: Snap) {
        let model = snap.model();
        let len = model.snapshot_ansi(SCROLLBACK).len();
        bencher
            .counter(BytesCount::new(len))
            .bench_local(|| black_box(&model).snapshot_ansi(SCROLLBACK));
    }

    /// `snapshot::encode`: render plus gzip (level 1), throughput in ANSI bytes.
    #[divan::bench(args = SNAPSHOTS)]
    fn encode(bencher: Bencher, snap: Snap) {
        let model = snap.model();
        let len = ptyhub::term::snapshot::encode(
            &model,
            SCROLLBACK,
            ptyhub::protocol::swe::SNAPSHOT_LIMIT,
        )
        .ansi_len;
        bencher.counter(BytesCount::new(len)).bench_local(|| {
            ptyhub::term::snapshot::encode(
                black_box(&model),
                SCROLLBACK,
                ptyhub::protocol::swe::SNAPSHOT_LIMIT,
            )
        });
    }
}

/// The browser dialect's codec (`protocol::swe`): framing output and snapshots, decoding client
/// frames, encoding server messages.
mod codec {
    use super::*;
    use ptyhub::protocol::swe;

    /// Output to cut into frames: text, text led by 0x02 (sent as a 1-byte frame first), and the
    /// worst case of 0x02 everywhere (one frame per byte).
    #[derive(Clone, Copy, Debug)]
    enum Output {
        Text,
        Leading0x02,
        All0x02,
    }

    fn output(kind: Output) -> Vec<u8> {
        let mut data = PLAIN[..64 * 1024].to_vec();
        match kind {
            Output::Text => {}
            Output::Leading0x02 => data[0] = 0x02,
            Output::All0x02 => data.fill(0x02),
        }
        data
    }

    /// `push_output_frames` of 64 KiB of output into owned 8 KiB frames.
    #[divan::bench(args = [Output::Text, Output::Leading0x02, Output::All0x02])]
    fn push_output_frames(bencher: Bencher, kind: Output) {
        let data = output(kind);
        bencher
            .counter(BytesCount::of_slice(&data))
            .bench_local(|| {
                let mut frames = Vec::new();
                swe::push_output_frames(black_box(&data), &mut frames);
                frames
            });
    }

    /// `output_frame_ranges` of the same 64 KiB: the zero-copy cut, for comparison.
    #[divan::bench(args = [Output::Text, Output::Leading0x02, Output::All0x02])]
    fn output_frame_ranges(bencher: Bencher, kind: Output) {
        let data = output(kind);
        bencher
            .counter(BytesCount::of_slice(&data))
            .bench_local(|| swe::output_frame_ranges(black_box(&data)).count());
    }

    /// `snapshot_frames` of a 200 KiB gzip stream (25 chunks of 8 KiB).
    #[divan::bench]
    fn snapshot_frames(bencher: Bencher) {
        let mut rng = Rng(3);
        // Random bytes: a gzip stream looks like noise.
        let gzip: Vec<u8> = (0..200 * 1024).map(|_| rng.below(256) as u8).collect();
        bencher
            .counter(BytesCount::of_slice(&gzip))
            .bench_local(|| swe::snapshot_frames(black_box(&gzip)));
    }

    /// `decode_binary` of a one-byte keystroke.
    #[divan::bench]
    fn decode_keystroke(bencher: Bencher) {
        bencher
            .with_inputs(|| Bytes::from_static(b"a"))
            .bench_local_values(swe::decode_binary);
    }

    /// `decode_binary` of a binary resize frame.
    #[divan::bench]
    fn decode_resize(bencher: Bencher) {
        let frame = swe::encode_resize(50, 200);
        bencher
            .with_inputs(|| Bytes::copy_from_slice(&frame))
            .bench_local_values(swe::decode_binary);
    }

    /// `decode_text` of a chat message.
    #[divan::bench]
    fn decode_chat(bencher: Bencher) {
        let json = r#"{"type":"chat","userName":"alice","text":"can you run the tests again with --nocapture?"}"#;
        bencher.bench_local(|| swe::decode_text(black_box(json)));
    }

    /// `decode_text` of a flow-control ack (one per 64 KiB drawn with `?flow=ack`).
    #[divan::bench]
    fn decode_ack(bencher: Bencher) {
        let json = r#"{"type":"ack","bytes":65536}"#;
        bencher.bench_local(|| swe::decode_text(black_box(json)));
    }

    /// `to_json` of a status message (sent to every viewer on each join, leave and resize).
    #[divan::bench]
    fn status_to_json(bencher: Bencher) {
        let status = swe::ServerMessage::Status(swe::Status {
            viewers: 3,
            cols: 200,
            rows: 50,
            assistant: "Claude Code".into(),
            session_name: "refactor viewer".into(),
            uuid_short: "3f2a9".into(),
            session_uuid: "3f2a9c1e-7b4d-4e8a-9c2f-1d6b5e4a3c21".into(),
            work_dir: "/home/alice/src/ptyhub".into(),
            yolo_mode: false,
            yolo_supported: true,
            read_only: false,
            restarting: false,
            state: ptyhub::protocol::state::StateFields {
                state: ptyhub::attention::State::Waiting,
                state_since: "2026-11-25T09:14:03Z".into(),
                state_since_ms: 1_795_770_843_000,
                reason: "Claude wants to run: cargo test".into(),
                state_source: ptyhub::attention::Source::Hook,
                choices: Vec::new(),
            },
            sized_by: vec![1, 2],
        });
        bencher.bench_local(|| black_box(&status).to_json());
    }
}

/// The output log: the actor appends each PTY read, every viewer copies from its own offset.
mod output_log {
    use super::*;
    use ptyhub::session::output_log::OutputLog;

    /// The default window (`session.output_log_bytes`).
    const LOG_BYTES: usize = 4 << 20;
    const CHUNK: usize = 4 * 1024;
    const READ: usize = 64 * 1024;

    /// A chunk of its own allocation, like each PTY read: dropping it from the log frees it.
    fn chunk() -> Bytes {
        Bytes::copy_from_slice(&PLAIN[..CHUNK])
    }

    /// A full log, so every append also drops the oldest chunk (the steady state).
    fn full_log() -> OutputLog {
        let mut log = OutputLog::new(LOG_BYTES);
        for _ in 0..2 * LOG_BYTES / CHUNK {
            log.append(chunk());
        }
        log
    }

    /// `append` of a 4 KiB chunk to a full 4 MiB log (drops and frees one old chunk each time).
    // A modest sample size: divan makes a whole sample's chunks before timing it.
    #[divan::bench(sample_count = 500, sample_size = 256)]
    fn append_4k(bencher: Bencher) {
        let mut log = full_log();
        bencher
            .counter(BytesCount::new(CHUNK))
            .with_inputs(chunk)
            .bench_local_values(|chunk| log.append(chunk));
    }

    /// `read` of 64 KiB from the middle of a full 4 MiB log (not aligned to a chunk).
    #[divan::bench]
    fn read_64k(bencher: Bencher) {
        let log = full_log();
        let from = log.start() + (LOG_BYTES / 2) as u64 + 123;
        bencher
            .counter(BytesCount::new(READ))
            .with_inputs(|| Vec::with_capacity(READ))
            .bench_local_refs(|out| log.read(black_box(from), READ, out));
    }
}

/// Attention: reading a screen on the screen thread (after output, at most every 100 ms, and
/// once when the output stops): its text (`ScreenText::of`), then the assistant's patterns on
/// the bottom 15 rows, the prompt check and the quick replies (`attention::screen::read`).
mod attention {
    use std::time::Instant;

    use super::*;
    use ptyhub::attention::screen::{read, ScreenText};
    use ptyhub::config::{Config, ScreenPatterns};

    /// What is on the screen read.
    #[derive(Clone, Copy)]
    enum Screen {
        /// Claude Code's permission dialog, 24×80: the first waiting pattern matches.
        Dialog,
        /// 50×200 of plain text: no pattern matches, so every one is tried.
        Text,
    }

    impl fmt::Display for Screen {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(match self {
                Screen::Dialog => "claude dialog 24x80",
                Screen::Text => "full text 50x200",
            })
        }
    }

    fn model(screen: Screen) -> ScreenModel {
        match screen {
            Screen::Dialog => {
                let mut m = ScreenModel::new(24, 80, 0);
                m.process(
                    "⏺ I will run the tests.\r\n\r\n╭────────────────────────────╮\r\n\
                     │ Bash command               │\r\n│   cargo test               │\r\n\
                     │ Do you want to proceed?    │\r\n│ ❯ 1. Yes                   │\r\n\
                     │   2. Yes, and always allow │\r\n│   3. No                    │\r\n\
                     ╰────────────────────────────╯\r\n Esc to cancel · Tab to amend"
                        .as_bytes(),
                );
                m
            }
            Screen::Text => {
                let mut m = ScreenModel::new(50, 200, 0);
                m.process(&plain_stream(64 * 1024));
                m
            }
        }
    }

    fn claude() -> ScreenPatterns {
        Config::default().assistants["claude"].state.clone()
    }

    /// The screen's text, as the thread takes it each time.
    #[divan::bench(args = [Screen::Dialog, Screen::Text])]
    fn text(bencher: Bencher, screen: Screen) {
        let m = model(screen);
        bencher.bench_local(|| ScreenText::of(black_box(m.screen())));
    }

    /// Claude's patterns, the prompt check and the quick replies on a text taken.
    #[divan::bench(args = [Screen::Dialog, Screen::Text])]
    fn patterns(bencher: Bencher, screen: Screen) {
        let text = ScreenText::of(model(screen).screen());
        let patterns = claude();
        let now = Instant::now();
        bencher.bench_local(|| read(black_box(&text), &patterns, 15, now));
    }

    /// Both: one reading, as the screen thread makes it.
    #[divan::bench(args = [Screen::Dialog, Screen::Text])]
    fn reading(bencher: Bencher, screen: Screen) {
        let m = model(screen);
        let patterns = claude();
        let now = Instant::now();
        bencher.bench_local(|| read(&ScreenText::of(black_box(m.screen())), &patterns, 15, now));
    }
}

/// Single sign-on's share of authorising a request: reading the proxy's user header, and
/// `authenticate` for a person it names, listed in `[auth.users]` (1,000 of them) or not.
mod proxied_user {
    use std::collections::BTreeMap;
    use std::hint::black_box;
    use std::net::IpAddr;

    use divan::Bencher;
    use hyper::header::{HeaderMap, HeaderName, HeaderValue};
    use ptyhub::auth::{proxied, Auth, Scopes, SignIn};

    fn header() -> HeaderName {
        HeaderName::from_static("x-forwarded-email")
    }

    fn auth() -> Auth {
        let users: BTreeMap<String, Scopes> = (0..1000)
            .map(|i| (format!("user{i}@example.com"), Scopes::WRITE))
            .collect();
        Auth::new(Some("bench-token-0123456789abcdef".into()), 10, vec![])
            .with_sign_in(SignIn::new(Some(header()), &users, Scopes::VIEW))
    }

    /// The header's value read and checked.
    #[divan::bench]
    fn read_header(bencher: Bencher) {
        let mut headers = HeaderMap::new();
        headers.insert(header(), HeaderValue::from_static("user500@example.com"));
        let name = header();
        bencher.bench_local(|| proxied::user_in(black_box(&headers), &name));
    }

    /// A listed user, and an unlisted one (cached after the first time).
    #[divan::bench(args = ["user500@example.com", "someone@example.com"])]
    fn authenticate(bencher: Bencher, user: &str) {
        let auth = auth();
        let peer = IpAddr::from([127, 0, 0, 1]);
        bencher.bench_local(|| auth.authenticate(None, black_box(Some(user)), peer));
    }
}

/// The audit trail: recording one event (a line appended under the trail's mutex), the login
/// check every authenticated request makes, and reading a full 10 MiB file for
/// `GET /api/audit`.
mod audit {
    use std::hint::black_box;
    use std::sync::{Arc, LazyLock};

    use divan::Bencher;
    use ptyhub::audit::{Actor, Audit, Event, Query};
    use ptyhub::auth::{Access, User};
    use ptyhub::config::AuditConfig;
    use serde_json::json;

    /// A trail in a temporary directory, rotated at 10 MiB (the default).
    fn trail(dir: &std::path::Path) -> Arc<Audit> {
        Audit::new(&AuditConfig {
            dir: dir.to_owned(),
            max_bytes: 10 << 20,
            files: 5,
        })
    }

    fn typing() -> Event {
        let actor = Actor {
            user: "ann".into(),
            credential: "daemon-token".into(),
            peer: "127.0.0.1:51522".into(),
        };
        Event::new("typing", &actor).on(uuid::Uuid::from_u128(7))
    }

    /// A 10 MiB trail file of typing events (about 48 000 lines).
    static FULL: LazyLock<(tempfile::TempDir, Arc<Audit>)> = LazyLock::new(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = trail(dir.path());
        let line = serde_json::to_string(&typing()).expect("json").len() + 1;
        for _ in 0..(10 << 20) / line - 1 {
            audit.record(typing());
        }
        (dir, audit)
    });

    /// One event recorded: serialised, logged (no subscriber here) and appended.
    #[divan::bench]
    fn record(bencher: Bencher) {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = trail(dir.path());
        bencher.bench_local(|| {
            audit.record(typing().with(json!({"from": "one", "to": "two"})));
        });
    }

    /// The login check of an authenticated request, for a user seen a moment ago.
    #[divan::bench]
    fn seen(bencher: Bencher) {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = trail(dir.path());
        let access = Access::User(Arc::new(User::owner("ann".into())));
        let peer = "127.0.0.1:51522".parse().expect("addr");
        audit.seen(&access, peer);
        bencher.bench_local(|| audit.seen(black_box(&access), peer));
    }

    /// `GET /api/audit?user=nobody`: the whole 10 MiB file read and parsed, nothing found.
    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn read_10_mib_no_match(bencher: Bencher) {
        let audit = &FULL.1;
        let query = Query {
            user: Some("nobody".into()),
            ..Query::default()
        };
        bencher.bench_local(|| audit.read(black_box(&query)).expect("read"));
    }

    /// `GET /api/audit` (the newest 100): the file read, its last lines parsed.
    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn read_newest_100(bencher: Bencher) {
        let audit = &FULL.1;
        bencher.bench_local(|| audit.read(black_box(&Query::default())).expect("read"));
    }
}

/// Authorising a request (`Auth::authenticate`) with 1,000 API tokens kept: the daemon token,
/// an API token (a SHA-256 and a map lookup), a share link, and a wrong token (from addresses
/// that never reach the failure limit, so the rate limit's bookkeeping is included but never
/// refuses).
mod auth {
    use std::net::IpAddr;

    use super::*;
    use ptyhub::auth::tokens::TokenStore;
    use ptyhub::auth::{Auth, Scopes};
    use ptyhub::session::Role;

    const DAEMON_TOKEN: &str = "bench-daemon-token-0123456789abcdef";

    struct Setup {
        auth: Auth,
        api: String,
        share: String,
    }

    static SETUP: LazyLock<Setup> = LazyLock::new(|| {
        let store = TokenStore::in_memory(10_000);
        let mut api = String::new();
        for i in 0..1000 {
            let made = store
                .create(&format!("token {i}"), Scopes::EXEC, None, "bench")
                .expect("a token");
            if i == 500 {
                api = made.token;
            }
        }
        let auth = Auth::new(Some(DAEMON_TOKEN.to_owned()), usize::MAX, vec![]).with_tokens(store);
        let share = auth
            .create_share(uuid::Uuid::new_v4(), Role::Viewer, None, false, "bench")
            .token()
            .to_owned();
        Setup { auth, api, share }
    });

    #[derive(Debug, Clone, Copy)]
    enum Presented {
        DaemonToken,
        ApiToken,
        ShareLink,
        Wrong,
    }

    impl fmt::Display for Presented {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Debug::fmt(self, f)
        }
    }

    #[divan::bench(args = [Presented::DaemonToken, Presented::ApiToken, Presented::ShareLink, Presented::Wrong])]
    fn authenticate(bencher: Bencher, presented: Presented) {
        let s = &*SETUP;
        let wrong = ptyhub::auth::tokens::generate_api_token();
        let token = match presented {
            Presented::DaemonToken => DAEMON_TOKEN,
            Presented::ApiToken => s.api.as_str(),
            Presented::ShareLink => s.share.as_str(),
            Presented::Wrong => wrong.as_str(),
        };
        let mut n: u32 = 0;
        bencher.bench_local(|| {
            // A fresh address per wrong try: the limit's table is cleared past 10,000.
            n = n.wrapping_add(1);
            let peer = IpAddr::from(n.to_be_bytes());
            black_box(s.auth.authenticate(Some(black_box(token)), None, peer)).is_ok()
        });
    }
}
