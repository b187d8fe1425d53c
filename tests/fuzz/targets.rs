//! The fuzz targets: one function per codec or parser that takes client or program bytes,
//! turning arbtest's random bytes (an `Unstructured`) into typed input for a check of
//! `invariants.rs`, listed in [`TARGETS`].
//!
//! Adding a target for a new codec (each new dialect brings its own in the same change): write
//! its `check_*` in `invariants.rs`, a `fn(&mut Unstructured) -> Result<()>` here that builds
//! the input, and one line in [`TARGETS`]; the runner (`runner.rs`) and the smoke test in
//! `tests/properties.rs` pick it up.

use arbtest::arbitrary::{Result, Unstructured};
use ptyhub::protocol::swe::{ClientMessage, ServerMessage, Status};
use ptyhub::term::queries::Query;
use serde_json::{Map, Number, Value};

// A sibling both in the fuzz runner (crate root) and in the property tests (their module).
use super::invariants::{self as inv, ScreenOp};

/// One fuzz target.
pub struct Target {
    /// Name on the runner's command line.
    pub name: &'static str,
    /// Most random bytes one execution is given (arbtest's seed size); executions draw sizes
    /// from 0 up to this, small ones more often.
    pub max_input: u32,
    /// Builds an input from the bytes and checks it; panics when an invariant breaks.
    pub run: fn(&mut Unstructured<'_>) -> Result<()>,
}

/// Every target, in the order the runner runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "swe_binary",
        max_input: 1 << 12,
        run: swe_binary,
    },
    Target {
        name: "swe_text",
        max_input: 1 << 12,
        run: swe_text,
    },
    Target {
        name: "swe_server_json",
        max_input: 1 << 11,
        run: swe_server_json,
    },
    Target {
        name: "swe_output_frames",
        max_input: 1 << 15,
        run: swe_output_frames,
    },
    Target {
        name: "swe_snapshot_frames",
        max_input: 1 << 8,
        run: swe_snapshot_frames,
    },
    Target {
        name: "screen_stream",
        max_input: 1 << 12,
        run: screen_stream,
    },
    Target {
        name: "screen_bulk",
        max_input: 1 << 11,
        run: screen_bulk,
    },
    Target {
        name: "snapshot_roundtrip",
        max_input: 1 << 12,
        run: snapshot_roundtrip,
    },
    Target {
        name: "query_scan",
        max_input: 1 << 11,
        run: query_scan,
    },
    Target {
        name: "query_replies",
        max_input: 1 << 10,
        run: query_replies,
    },
    Target {
        name: "upload_name",
        max_input: 1 << 10,
        run: upload_name,
    },
    Target {
        name: "config_toml",
        max_input: 1 << 11,
        run: config_toml,
    },
    Target {
        name: "ws_frame_rules",
        max_input: 1 << 8,
        run: ws_frame_rules,
    },
    Target {
        name: "auth_token",
        max_input: 1 << 9,
        run: auth_token,
    },
    Target {
        name: "proxied_user",
        max_input: 1 << 10,
        run: proxied_user,
    },
    Target {
        name: "raw_frames",
        max_input: 1 << 11,
        run: raw_frames,
    },
    Target {
        name: "mux_frames",
        max_input: 1 << 11,
        run: mux_frames,
    },
    Target {
        name: "board_messages",
        max_input: 1 << 11,
        run: board_messages,
    },
    Target {
        name: "board_changes",
        max_input: 1 << 10,
        run: board_changes,
    },
    Target {
        name: "pipe_messages",
        max_input: 1 << 11,
        run: pipe_messages,
    },
    Target {
        name: "lsp_stream",
        max_input: 1 << 13,
        run: lsp_stream,
    },
    Target {
        name: "lsp_client",
        max_input: 1 << 10,
        run: lsp_client,
    },
    Target {
        name: "exec_text",
        max_input: 1 << 12,
        run: exec_text,
    },
    Target {
        name: "log_lines",
        max_input: 1 << 12,
        run: log_lines,
    },
    Target {
        name: "asciicast",
        max_input: 1 << 12,
        run: asciicast,
    },
    Target {
        name: "token_file",
        max_input: 1 << 11,
        run: token_file,
    },
    Target {
        name: "upgrade_image",
        max_input: 1 << 12,
        run: upgrade_image,
    },
    Target {
        name: "audit_file",
        max_input: 1 << 12,
        run: audit_file,
    },
    Target {
        name: "audit_rotation",
        max_input: 1 << 8,
        run: audit_rotation,
    },
];

// ---- shared generators -------------------------------------------------------------------

/// Pick one of `items`.
fn pick<'a, T>(u: &mut Unstructured<'_>, items: &'a [T]) -> Result<&'a T> {
    Ok(&items[u.choose_index(items.len())?])
}

/// Up to `max` raw bytes.
fn some_bytes(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u8>> {
    let n = u.int_in_range(0..=max)?;
    Ok(u.bytes(n.min(u.len()))?.to_vec())
}

/// A screen size: small (where wrapping, scrolling and margins meet) most of the time. A
/// large one has some 30 times the cells to parse into, render and compare: 1 in 32 keeps
/// them from taking most of the time.
fn screen_size(u: &mut Unstructured<'_>) -> Result<(u16, u16)> {
    Ok(if u.ratio(31, 32)? {
        (u.int_in_range(1..=12)?, u.int_in_range(1..=40)?)
    } else {
        (u.int_in_range(1..=60)?, u.int_in_range(1..=250)?)
    })
}

/// A CSI sequence with random marker, parameters, intermediates and final byte. Never sets
/// mode 47 (see `PIECES`).
fn csi(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut s = b"\x1b[".to_vec();
    if u.ratio(1, 3)? {
        s.push(*pick(u, b"?>=<")?);
    }
    for i in 0..u.int_in_range(0..=4)? {
        if i > 0 {
            s.push(if u.ratio(1, 10)? { b':' } else { b';' });
        }
        let n: u32 = match u.int_in_range(0..=3)? {
            0 => u.int_in_range(0..=9)?,
            1 => u.int_in_range(0..=300)?,
            2 => *pick(u, &[1049, 1000, 1002, 1006, 2004, 25, 6, 7, 1, 5, 65535])?,
            _ => u.arbitrary()?,
        };
        if n != 47 {
            s.extend_from_slice(n.to_string().as_bytes());
        }
    }
    if u.ratio(1, 12)? {
        s.push(*pick(u, b" !\"$'")?);
    }
    s.push(*pick(u, b"@ABCDEFGHJKLMPSTXZabcdfghlmnqrstu`\x07\x1b")?);
    Ok(s)
}

/// A string sequence (OSC, DCS, APC) longer than the model holds back, ended or not.
fn long_string(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut s = pick(
        u,
        &[&b"\x1b]52;c;"[..], b"\x1bP0;1q", b"\x1b_G", b"\x1b]0;"],
    )?
    .to_vec();
    let n = u.int_in_range(4000..=9000)?;
    s.resize(s.len() + n, *pick(u, b"Q~A ")?);
    s.extend_from_slice(pick(u, &[&b"\x07"[..], b"\x1b\\", b""])?);
    Ok(s)
}

/// Terminal output: real pieces, random CSI sequences, raw bytes and, rarely, an oversized
/// string sequence.
fn term_bytes(u: &mut Unstructured<'_>, max_pieces: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(0..=max_pieces)? {
        match u.int_in_range(0..=15)? {
            0..=9 => out.extend_from_slice(pick(u, inv::PIECES)?),
            10 | 11 => out.extend(csi(u)?),
            12 => out.extend(some_bytes(u, 8)?),
            13 => {
                let c: char = u.arbitrary()?;
                out.extend_from_slice(c.to_string().as_bytes());
            }
            14 => {
                let n = u.int_in_range(1..=120)?;
                out.extend((0..n).map(|i| b'a' + (i % 26) as u8));
            }
            _ => {
                if u.ratio(1, 8)? {
                    out.extend(long_string(u)?);
                }
            }
        }
    }
    Ok(out)
}

/// `data` cut at random points.
fn cut(u: &mut Unstructured<'_>, data: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let n = match u.int_in_range(0..=3)? {
            0 => 1,
            1 => u.int_in_range(1..=8)?,
            2 => u.int_in_range(1..=200)?,
            _ => data.len() - at,
        };
        let end = (at + n).min(data.len());
        chunks.push(data[at..end].to_vec());
        at = end;
    }
    Ok(chunks)
}

/// Any JSON value, a few levels deep (floats finite: JSON has no others).
fn json_value(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    Ok(match u.int_in_range(0..=if depth == 0 { 5 } else { 7 })? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.arbitrary::<u64>()?),
        4 => Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        5 => Value::String(u.arbitrary()?),
        6 => Value::Array(
            (0..u.int_in_range(0..=4)?)
                .map(|_| json_value(u, depth - 1))
                .collect::<Result<_>>()?,
        ),
        _ => {
            let mut m = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                let k: String = u.arbitrary()?;
                m.insert(k, json_value(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

/// A short string, now and then with the characters that JSON must escape.
fn text(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=3)? {
        0 => pick(
            u,
            &[
                "",
                " ",
                "\"",
                "\\",
                "\u{0}",
                "\n",
                "é",
                "😀",
                "</script>",
                "\u{2028}",
            ],
        )?
        .to_string(),
        _ => u.arbitrary()?,
    })
}

// ---- the browser dialect -----------------------------------------------------------------

fn swe_binary(u: &mut Unstructured<'_>) -> Result<()> {
    // Mostly frames near the rules' edges: random first bytes rarely hit 0x00 and 0x01.
    let frame = match u.int_in_range(0..=3)? {
        0 => u.bytes(u.len())?.to_vec(),
        1 => {
            let mut f = vec![0x00];
            f.extend(some_bytes(u, 6)?);
            f
        }
        _ => {
            let rest = some_bytes(u, 64)?;
            let len = i64::try_from(rest.len()).unwrap_or(0) + u.int_in_range(-3..=2)?;
            let len = if u.ratio(1, 8)? {
                u.arbitrary()?
            } else {
                u16::try_from(len.max(0)).unwrap_or(0)
            };
            let mut f = vec![0x01];
            f.extend_from_slice(&len.to_be_bytes());
            f.extend(rest);
            f
        }
    };
    inv::check_client_binary(&frame);
    let (rows, cols) = (u.arbitrary()?, u.arbitrary()?);
    let name = some_bytes(u, 40)?;
    let data = some_bytes(u, 40)?;
    inv::check_client_binary_roundtrip(rows, cols, &name, &data);
    Ok(())
}

/// Fragments of client JSON, so that random text is often nearly a message.
const JSON_PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"type\"",
    "\"ping\"",
    "\"resize\"",
    "\"chat\"",
    "\"ack\"",
    "\"signal\"",
    "\"rename_session\"",
    "\"toggle_yolo\"",
    "\"cols\"",
    "\"rows\"",
    "\"bytes\"",
    "\"data\"",
    "\"userName\"",
    "\"text\"",
    "\"name\"",
    "0",
    "-1",
    "1e999",
    "65536",
    "3.5",
    "null",
    "true",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"é\"",
    "\\",
    " ",
    "1e-999",
    "-0",
];

fn swe_text(u: &mut Unstructured<'_>) -> Result<()> {
    let frame = match u.int_in_range(0..=3)? {
        0 => String::from_utf8_lossy(u.bytes(u.len())?).into_owned(),
        1 => {
            let n = u.int_in_range(0..=16)?;
            (0..n)
                .map(|_| pick(u, JSON_PIECES).copied())
                .collect::<Result<String>>()?
        }
        _ => {
            // A known (or nearly known) type with random fields.
            let mut m = Map::new();
            let ty = pick(
                u,
                &[
                    "ping",
                    "resize",
                    "chat",
                    "rename_session",
                    "toggle_yolo",
                    "ack",
                    "signal",
                    "x",
                ],
            )?;
            m.insert("type".into(), Value::String((*ty).into()));
            for _ in 0..u.int_in_range(0..=4)? {
                let k = pick(
                    u,
                    &[
                        "cols", "rows", "bytes", "data", "userName", "text", "name", "signal",
                        "type",
                    ],
                )?;
                m.insert((*k).into(), json_value(u, 2)?);
            }
            Value::Object(m).to_string()
        }
    };
    inv::check_client_text(&frame);
    let msg = match u.int_in_range(0..=6)? {
        0 => ClientMessage::Resize {
            rows: u.int_in_range(1..=u16::MAX)?,
            cols: u.int_in_range(1..=u16::MAX)?,
        },
        1 => ClientMessage::Ping {
            data: if u.arbitrary()? {
                Some(json_value(u, 3)?)
            } else {
                None
            },
        },
        2 => ClientMessage::Chat {
            user_name: text(u)?,
            text: text(u)?,
        },
        3 => ClientMessage::Rename { name: text(u)? },
        4 => ClientMessage::ToggleYolo,
        5 => ClientMessage::Ack {
            bytes: u.arbitrary()?,
        },
        _ => ClientMessage::Signal { signal: text(u)? },
    };
    let extra = (text(u)?, json_value(u, 1)?);
    let extra = u
        .arbitrary::<bool>()?
        .then_some((extra.0.as_str(), &extra.1));
    inv::check_client_text_roundtrip(&msg, extra);
    Ok(())
}

fn swe_server_json(u: &mut Unstructured<'_>) -> Result<()> {
    let msg = match u.int_in_range(0..=7)? {
        0 => ServerMessage::Pong {
            data: if u.arbitrary()? {
                Some(json_value(u, 3)?)
            } else {
                None
            },
        },
        1 => ServerMessage::Status(Status {
            viewers: u.arbitrary()?,
            cols: u.arbitrary()?,
            rows: u.arbitrary()?,
            assistant: text(u)?,
            session_name: text(u)?,
            uuid_short: text(u)?,
            session_uuid: text(u)?,
            work_dir: text(u)?,
            yolo_mode: u.arbitrary()?,
            yolo_supported: u.arbitrary()?,
            read_only: u.arbitrary()?,
            restarting: u.arbitrary()?,
            state: state_fields(u)?,
            sized_by: u.arbitrary()?,
        }),
        2 => ServerMessage::Chat {
            user_name: text(u)?,
            guest: u.arbitrary()?,
            text: text(u)?,
            timestamp: text(u)?,
        },
        3 => ServerMessage::FileUpload {
            success: u.arbitrary()?,
            filename: text(u)?,
            error: if u.arbitrary()? { Some(text(u)?) } else { None },
        },
        4 => ServerMessage::Exit {
            exit_code: u.arbitrary()?,
            signal: if u.arbitrary()? { Some(text(u)?) } else { None },
        },
        5 => ServerMessage::Ready,
        6 => ServerMessage::State(state_fields(u)?),
        _ => ServerMessage::error(text(u)?, text(u)?),
    };
    inv::check_server_message(&msg);
    Ok(())
}

/// Any session state, as the dialects spell it.
fn state_fields(u: &mut Unstructured<'_>) -> Result<ptyhub::protocol::state::StateFields> {
    use ptyhub::attention::{Choice, Source, State};
    let state = *u.choose(&[State::Working, State::Waiting, State::Idle, State::Exited])?;
    let source = *u.choose(&[Source::Hook, Source::Screen, Source::Terminal, Source::Exit])?;
    let mut choices = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        choices.push(Choice {
            label: text(u)?,
            keys: text(u)?,
        });
    }
    Ok(ptyhub::protocol::state::StateFields {
        state,
        state_since: text(u)?,
        state_since_ms: u.arbitrary()?,
        reason: text(u)?,
        state_source: source,
        choices,
    })
}

fn swe_output_frames(u: &mut Unstructured<'_>) -> Result<()> {
    // Runs of 0x02 and lengths around the 8 KiB frame size are where the rules meet.
    let mut data = Vec::new();
    for _ in 0..u.int_in_range(0..=6)? {
        match u.int_in_range(0..=3)? {
            0 => data.extend(std::iter::repeat_n(0x02, u.int_in_range(1..=5)?)),
            1 => data.extend(some_bytes(u, 16)?),
            2 => {
                let k: usize = u.int_in_range(1..=2)? * 8192;
                let n = u.int_in_range(k - 3..=k + 3)?;
                data.resize(data.len() + n.saturating_sub(data.len() % 8192), b'x');
            }
            _ => data.extend_from_slice(u.bytes(u.len().min(20_000))?),
        }
    }
    inv::check_output_frames(&data);
    Ok(())
}

fn swe_snapshot_frames(u: &mut Unstructured<'_>) -> Result<()> {
    const CHUNK: usize = 8192;
    const MAX: usize = 256 * CHUNK + 2;
    /// Period of the bytes: prime, so chunks 0 to 250 all differ (a reordered chunk shows).
    const PERIOD: usize = 251;
    // Every input is a slice of one pattern built once: megabyte inputs cost no filling.
    static PATTERN: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        (0..MAX + PERIOD)
            .map(|i| ((i % PERIOD) as u8).wrapping_mul(31))
            .collect()
    });
    // Sizes of a few chunks most of the time; a snapshot near the 255-chunk limit or of any
    // size up to it costs a copy of megabytes, so those are rarer. (`int_in_range` gives its
    // low end when the input is used up: a small size.)
    let len = match u.int_in_range(0..=31)? {
        0..=13 => u.int_in_range(0..=3 * CHUNK)?,
        14..=20 => u.int_in_range(0..=64)?,
        21..=28 => {
            let k = *pick(u, &[0usize, 1, 2, 3])?;
            (k * CHUNK).saturating_add_signed(u.int_in_range(-2..=2)?)
        }
        29 | 30 => {
            let k = *pick(u, &[254usize, 255, 256])?;
            (k * CHUNK).saturating_add_signed(u.int_in_range(-2..=2)?)
        }
        _ => u.int_in_range(0..=256 * CHUNK)?,
    };
    let start = u.int_in_range(0..=PERIOD - 1)?;
    inv::check_snapshot_frames(&pattern[start..start + len]);
    Ok(())
}

// ---- the screen model --------------------------------------------------------------------

fn screen_stream(u: &mut Unstructured<'_>) -> Result<()> {
    let (rows, cols) = screen_size(u)?;
    let scrollback = *pick(u, &[0, 1, 3, 20, 1000])?;
    let mut ops = Vec::new();
    for _ in 0..u.int_in_range(1..=12)? {
        ops.push(match u.int_in_range(0..=9)? {
            0 => {
                let (r, c) = screen_size(u)?;
                ScreenOp::Resize(r, c)
            }
            1 => ScreenOp::Bulk(term_bytes(u, 12)?),
            _ => ScreenOp::Feed(term_bytes(u, 12)?),
        });
    }
    // Also the same stream cut finely, byte by byte in places.
    if u.ratio(1, 3)? {
        let all: Vec<u8> = ops
            .iter()
            .filter_map(|op| match op {
                ScreenOp::Feed(b) | ScreenOp::Bulk(b) => Some(b.clone()),
                ScreenOp::Resize(..) => None,
            })
            .flatten()
            .collect();
        ops = cut(u, &all)?.into_iter().map(ScreenOp::Feed).collect();
    }
    inv::check_screen_stream(rows, cols, scrollback, &ops);
    Ok(())
}

fn screen_bulk(u: &mut Unstructured<'_>) -> Result<()> {
    // Every LF of the flood scrolls, and a flood holds at least `2 × rows + scrollback` of
    // them: large screens and long scrollbacks are rarer. (`ratio` is true when the input is
    // used up, so the cheap choice is the `true` one.)
    let (rows, cols) = if u.ratio(15, 16)? {
        (u.int_in_range(1..=8)?, u.int_in_range(1..=20)?)
    } else {
        (u.int_in_range(1..=50)?, u.int_in_range(1..=200)?)
    };
    let scrollback = if u.ratio(15, 16)? {
        *pick(u, &[0, 1, 5, 50])?
    } else {
        300
    };
    let before = term_bytes(u, 10)?;
    let mut lines = Vec::new();
    for _ in 0..u.int_in_range(0..=6)? {
        let mut line = some_bytes(u, 3 * usize::from(cols))?;
        // Coloured lines: up to three pen sequences (kept by `build_flood`) anywhere in them.
        for _ in 0..u.int_in_range(0..=3u8)? {
            let at = u.int_in_range(0..=line.len())?;
            line.splice(at..at, pick(u, inv::PEN_PIECES)?.iter().copied());
        }
        line.extend_from_slice(pick(u, &[&b"\r\n"[..], b"\n", b"\r", b"", b"\n\r", b"\t"])?);
        lines.push(line);
    }
    let need = 2 * usize::from(rows) + scrollback + 4;
    let min_lfs = need + u.int_in_range(0..=need)?;
    // The daemon skips only from 64 KiB; the skip's logic does not depend on that threshold,
    // so most executions lower it and check the same code on floods of a few KiB.
    let min_skip = if u.ratio(63, 64)? {
        Some(*pick(u, &[0, 1, 16, 256, 2048])?)
    } else {
        None
    };
    let min_bytes = match min_skip {
        None => (64 << 10) + u.int_in_range(0..=4096)?,
        Some(min) => min + u.int_in_range(0..=2048)?,
    };
    let mut flood = inv::build_flood(&lines, min_bytes, min_lfs);
    if u.ratio(1, 4)? {
        // Something that is not plain text, somewhere: only what precedes it may go.
        let at = u.int_in_range(0..=flood.len())?;
        let what = term_bytes(u, 2)?;
        flood.splice(at..at, what);
    }
    let after = term_bytes(u, 10)?;
    inv::check_bulk(rows, cols, scrollback, &before, &flood, &after, min_skip);
    Ok(())
}

fn snapshot_roundtrip(u: &mut Unstructured<'_>) -> Result<()> {
    let (rows, cols) = screen_size(u)?;
    let scrollback = *pick(u, &[0, 1, 10, 100, 1000])?;
    let stream = term_bytes(u, 80)?;
    let chunks = cut(u, &stream)?;
    let max_scrollback = *pick(u, &[0, 1, 5, 1000, usize::MAX])?;
    inv::check_snapshot(rows, cols, scrollback, &chunks, max_scrollback);
    Ok(())
}

// ---- terminal queries --------------------------------------------------------------------

/// Bytes around queries: their parts, and what may interrupt a sequence.
const QUERY_PIECES: &[&[u8]] = &[
    b"\x1b[6n",
    b"\x1b[5n",
    b"\x1b[c",
    b"\x1b[0c",
    b"\x1b[>c",
    b"\x1b[>0c",
    b"\x1b[?6n",
    b"\x1b[",
    b"\x1b",
    b"[",
    b"?",
    b">",
    b"=",
    b"<",
    b"0",
    b"5",
    b"6",
    b"65535",
    b"99999",
    b";",
    b":",
    b"n",
    b"c",
    b"R",
    b" ",
    b"\x18",
    b"\x1a",
    b"\x07",
    b"\n",
    b"\x7f",
    b"\x9b",
    b"\xc2\x9b",
    b"\x1b]0;t",
    b"\x1bP",
    b"\x1b\\",
    b"text",
];

fn query_scan(u: &mut Unstructured<'_>) -> Result<()> {
    let mut stream = Vec::new();
    for _ in 0..u.int_in_range(0..=40)? {
        match u.int_in_range(0..=5)? {
            0..=2 => stream.extend_from_slice(pick(u, QUERY_PIECES)?),
            3 => stream.extend(csi(u)?),
            4 => stream.extend_from_slice(pick(u, inv::PIECES)?),
            _ => stream.extend(some_bytes(u, 4)?),
        }
    }
    let cuts: Vec<usize> = (0..u.int_in_range(0..=8)?)
        .map(|_| u.arbitrary())
        .collect::<Result<_>>()?;
    inv::check_query_scan(&stream, &cuts);
    Ok(())
}

fn query_replies(u: &mut Unstructured<'_>) -> Result<()> {
    let queries = [
        Query::CursorPosition,
        Query::PrimaryAttributes,
        Query::SecondaryAttributes,
        Query::Status,
    ];
    let expected: Vec<Query> = (0..u.int_in_range(0..=4)?)
        .map(|_| pick(u, &queries).copied())
        .collect::<Result<_>>()?;
    let mut input = Vec::new();
    for _ in 0..u.int_in_range(0..=20)? {
        if u.ratio(2, 3)? {
            input.extend_from_slice(pick(u, QUERY_PIECES)?);
        } else {
            input.extend(some_bytes(u, 4)?);
        }
    }
    let before = some_bytes(u, 16)?;
    let after = some_bytes(u, 16)?;
    inv::check_reply_filter(&expected, &input, &before, &after);
    Ok(())
}

// ---- uploads, configuration, credentials -------------------------------------------------

/// Parts of hostile file names.
const NAME_PIECES: &[&str] = &[
    "/", "\\", ".", "..", " ", "\t", "\u{0}", "\u{7f}", "\u{85}", "\u{a0}", "\u{2028}", "\u{202e}",
    "\u{feff}", "a", "b.txt", "日本", "😀", "C:", "'", "\"", "$x", "`", ";", "%", "=", "-", "~",
];

fn upload_name(u: &mut Unstructured<'_>) -> Result<()> {
    let raw = match u.int_in_range(0..=2)? {
        0 => u.bytes(u.len().min(600))?.to_vec(),
        1 => {
            let n = u.int_in_range(0..=12)?;
            (0..n)
                .map(|_| pick(u, NAME_PIECES).copied())
                .collect::<Result<String>>()?
                .into_bytes()
        }
        _ => {
            // Around the 255-byte limit, with multi-byte characters at the edge.
            let mut s = "n".repeat(u.int_in_range(240..=258)?);
            s.push_str(pick(u, NAME_PIECES)?);
            s.into_bytes()
        }
    };
    inv::check_upload_name(&raw);
    let path = match u.int_in_range(0..=1)? {
        0 => u.arbitrary::<String>()?,
        _ => {
            let n = u.int_in_range(0..=10)?;
            (0..n)
                .map(|_| pick(u, NAME_PIECES).copied())
                .collect::<Result<String>>()?
        }
    };
    inv::check_shell_quote(&path);
    Ok(())
}

fn config_toml(u: &mut Unstructured<'_>) -> Result<()> {
    let text = if u.ratio(1, 4)? {
        String::from_utf8_lossy(u.bytes(u.len())?).into_owned()
    } else {
        // A file made of the real keys with values of every shape, now and then broken.
        let mut by_table: Vec<(&str, Vec<String>)> = Vec::new();
        for _ in 0..u.int_in_range(0..=8)? {
            let (table, key) = *pick(u, inv::CONFIG_KEYS)?;
            let value = *pick(u, inv::CONFIG_VALUES)?;
            let line = format!("{key} = {value}");
            match by_table.iter_mut().find(|(t, _)| *t == table) {
                Some((_, lines)) => lines.push(line),
                None => by_table.push((table, vec![line])),
            }
        }
        // Top-level keys first: a header opens a table until the next one.
        by_table.sort_by_key(|(t, _)| !t.is_empty());
        let mut text = String::new();
        for (table, lines) in by_table {
            if !table.is_empty() {
                text.push_str(&format!("[{table}]\n"));
            }
            for l in lines {
                text.push_str(&l);
                text.push('\n');
            }
        }
        if u.ratio(1, 4)? && !text.is_empty() {
            let at = u.int_in_range(0..=text.len())?;
            if text.is_char_boundary(at) {
                let c: char = u.arbitrary()?;
                text.insert(at, c);
            }
        }
        text
    };
    inv::check_config(&text);
    Ok(())
}

fn auth_token(u: &mut Unstructured<'_>) -> Result<()> {
    let parts: &[&[u8]] = &[
        b"Bearer ",
        b"bearer ",
        b"Bearer",
        b" ",
        b"tok",
        b"=",
        b";",
        b"ptyhub_token",
        b"\t",
        b"\xff",
        b"\r",
        b"\x00",
    ];
    let piece = |u: &mut Unstructured<'_>| -> Result<Vec<u8>> {
        let mut v = Vec::new();
        for _ in 0..u.int_in_range(0..=5)? {
            if u.ratio(3, 4)? {
                v.extend_from_slice(pick(u, parts)?);
            } else {
                v.extend(some_bytes(u, 6)?);
            }
        }
        Ok(v)
    };
    let authorization = piece(u)?;
    let cookies: Vec<Vec<u8>> = (0..u.int_in_range(0..=3)?)
        .map(|_| piece(u))
        .collect::<Result<_>>()?;
    let query: Vec<(String, String)> = (0..u.int_in_range(0..=3)?)
        .map(|_| {
            let k = pick(u, &["token", "access_token", "t", ""])?.to_string();
            Ok((k, String::from_utf8_lossy(&piece(u)?).into_owned()))
        })
        .collect::<Result<_>>()?;
    inv::check_presented_token(&authorization, &cookies, &query);
    Ok(())
}

fn proxied_user(u: &mut Unstructured<'_>) -> Result<()> {
    let parts: &[&[u8]] = &[
        b"alice@example.com",
        b",",
        b" ",
        b"\t",
        b"\xc2\x85",
        b"\xff",
        b"\x7f",
        b"\r\n",
        b"\x00",
        "é".as_bytes(),
    ];
    let values: Vec<Vec<u8>> = (0..u.int_in_range(0..=3)?)
        .map(|_| {
            let mut v = Vec::new();
            for _ in 0..u.int_in_range(0..=6)? {
                match u.int_in_range(0..=5)? {
                    0..=3 => v.extend_from_slice(pick(u, parts)?),
                    4 => v.extend(std::iter::repeat_n(b'a', u.int_in_range(0..=300)?)),
                    _ => v.extend(some_bytes(u, 6)?),
                }
            }
            Ok(v)
        })
        .collect::<Result<_>>()?;
    inv::check_proxied_user(&values);
    Ok(())
}

/// `tokens.json` as the daemon reads it at start: a valid file, mutated (a field dropped,
/// retyped, duplicated, cut), or bytes; then tokens presented against a store.
fn token_file(u: &mut Unstructured<'_>) -> Result<()> {
    let mut tokens = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let hex: String = (0..u.int_in_range(60..=66)?)
            .map(|_| Ok(*pick(u, &['0', '9', 'a', 'f', 'A', 'g', 'é'])?))
            .collect::<Result<_>>()?;
        let mut t = serde_json::json!({
            "id": pick(u, &["0123456789abcdef", "a", "", "x y", "0123456789abcdef"])?,
            "name": text(u)?,
            "scopes": [pick(u, &["view", "write", "exec", "admin", "root", "sandbox:exec"])?],
            "sha256": hex,
            "createdMs": u.arbitrary::<u64>()?,
            "createdBy": text(u)?,
        });
        if u.arbitrary()? {
            t["expiresMs"] = json_value(u, 1)?;
        }
        if u.ratio(1, 4)? {
            let field = *pick(u, &["id", "name", "scopes", "sha256", "createdMs"])?;
            t[field] = json_value(u, 1)?;
        }
        tokens.push(t);
    }
    let file = serde_json::json!({"version": pick(u, &[1, 1, 1, 2])?, "tokens": tokens});
    let mut text = file.to_string();
    if u.ratio(1, 4)? {
        let cut = u.int_in_range(0..=text.len())?;
        text = String::from_utf8_lossy(&text.as_bytes()[..cut]).into_owned();
    }
    if u.ratio(1, 8)? {
        text = String::from_utf8_lossy(&some_bytes(u, 64)?).into_owned();
    }
    let presented = match u.int_in_range(0..=2)? {
        0 => ptyhub::auth::tokens::generate_api_token(),
        1 => format!("ptyhub_{}", text_of(u)?),
        _ => text_of(u)?,
    };
    inv::check_token_file(&text, &presented);
    Ok(())
}

/// Arbitrary text (a token presented, any bytes).
fn text_of(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(String::from_utf8_lossy(&some_bytes(u, 60)?).into_owned())
}

fn ws_frame_rules(u: &mut Unstructured<'_>) -> Result<()> {
    let payload = match u.int_in_range(0..=2)? {
        0 => some_bytes(u, 130)?,
        _ => {
            // A code near the edges of the allowed ranges, then a reason.
            let code: u16 = match u.int_in_range(0..=2)? {
                0 => u.int_in_range(995..=1020)?,
                1 => *pick(u, &[0, 2999, 3000, 3999, 4000, 4999, 5000, u16::MAX])?,
                _ => u.arbitrary()?,
            };
            let mut p = code.to_be_bytes().to_vec();
            p.extend(some_bytes(u, 8)?);
            p
        }
    };
    let len = match u.int_in_range(0..=1)? {
        0 => u.int_in_range(120..=130)?,
        _ => u.arbitrary()?,
    };
    inv::check_ws_frame_rules(&payload, u.arbitrary()?, u.arbitrary()?, len);
    Ok(())
}

// ---- the raw terminal dialect --------------------------------------------------------------

/// A client message: raw bytes, a run of JSON-looking pieces, or (half the time) an object of
/// one of `types` with up to three of `keys`, each valued by `value`.
fn control_message(
    u: &mut Unstructured<'_>,
    types: &[&str],
    keys: &[&str],
    value: impl Fn(&mut Unstructured<'_>, &str) -> Result<Value>,
) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=3)? {
        0 => u.bytes(u.len().min(1024))?.to_vec(),
        1 => {
            let n = u.int_in_range(0..=16)?;
            (0..n)
                .map(|_| pick(u, JSON_PIECES).copied())
                .collect::<Result<String>>()?
                .into_bytes()
        }
        _ => {
            // A known (or nearly known) type with random fields.
            let mut m = Map::new();
            let ty = pick(u, types)?;
            m.insert("type".into(), Value::String((*ty).into()));
            for _ in 0..u.int_in_range(0..=3)? {
                let k = *pick(u, keys)?;
                let v = value(u, k)?;
                m.insert(k.into(), v);
            }
            Value::Object(m).to_string().into_bytes()
        }
    })
}

fn raw_frames(u: &mut Unstructured<'_>) -> Result<()> {
    let is_text = u.arbitrary()?;
    let prefix = u.ratio(1, 2)?;
    let body = control_message(
        u,
        &["ping", "resize", "signal", "chat", "x"],
        &["cols", "rows", "signal", "data", "type"],
        |u, _| json_value(u, 2),
    )?;
    let mut frame = Vec::with_capacity(body.len() + 1);
    if prefix {
        frame.push(0x01);
    }
    frame.extend(body);
    inv::check_raw_frame(is_text, &frame);
    let (rows, cols): (u16, u16) = (u.arbitrary()?, u.arbitrary()?);
    let req = ClientMessage::Resize {
        rows: rows.max(1),
        cols: cols.max(1),
    };
    let json = inv::raw_control_json(&req).map(|v| v.to_string());
    if let Some(json) = json {
        inv::check_raw_control_roundtrip(&req, &json);
    }
    let n: usize = u.int_in_range(0..=3)? * 65536 + u.int_in_range(0..=3)?;
    inv::check_raw_output_frames(&vec![0x02; n.saturating_sub(3)]);
    Ok(())
}

// ---- the multiplexed terminals dialect ------------------------------------------------------

fn mux_frames(u: &mut Unstructured<'_>) -> Result<()> {
    let is_text = u.arbitrary()?;
    let frame = match u.int_in_range(0..=3)? {
        0 => u.bytes(u.len().min(1024))?.to_vec(),
        1 => {
            let n = u.int_in_range(0..=16)?;
            (0..n)
                .map(|_| pick(u, JSON_PIECES).copied())
                .collect::<Result<String>>()?
                .into_bytes()
        }
        _ => {
            let mut m = Map::new();
            if u.ratio(7, 8)? {
                let ch = pick(u, &["terminal", "terminal", "chat"])?;
                m.insert("channel".into(), Value::String((*ch).into()));
            }
            let ty = pick(u, &["resize", "close", "open", "x"])?;
            m.insert("type".into(), Value::String((*ty).into()));
            for _ in 0..u.int_in_range(0..=3)? {
                let k = pick(u, &["id", "cols", "rows", "type"])?;
                let v = if *k == "id" && u.ratio(1, 2)? {
                    Value::String(u.int_in_range(0..=300u32)?.to_string())
                } else {
                    json_value(u, 2)?
                };
                m.insert((*k).into(), v);
            }
            Value::Object(m).to_string().into_bytes()
        }
    };
    inv::check_mux_frame(is_text, &frame);
    let n: usize = u.int_in_range(0..=2)? * 65535 + u.int_in_range(0..=3)?;
    inv::check_mux_payloads(&vec![7; n.saturating_sub(2)]);
    Ok(())
}

// ---- the board --------------------------------------------------------------------------------

const UUIDS: &[&str] = &[
    "00000000-0000-0000-0000-000000000007",
    "4f7d2c1e-8a0b-4d5e-9f10-2b3c4d5e6f70",
    "not-a-uuid",
    "",
];

fn board_messages(u: &mut Unstructured<'_>) -> Result<()> {
    let is_text = u.ratio(7, 8)?;
    let frame = match u.int_in_range(0..=3)? {
        0 => u.bytes(u.len().min(1024))?.to_vec(),
        1 => {
            let n = u.int_in_range(0..=16)?;
            (0..n)
                .map(|_| pick(u, JSON_PIECES).copied())
                .collect::<Result<String>>()?
                .into_bytes()
        }
        _ => {
            let mut m = Map::new();
            let ty = pick(u, &["visible", "reply", "reply", "cards", ""])?;
            m.insert("type".into(), Value::String((*ty).into()));
            for _ in 0..u.int_in_range(0..=3)? {
                let k = pick(u, &["id", "ids", "keys", "type"])?;
                let v = match *k {
                    "id" if u.ratio(2, 3)? => Value::String((*pick(u, UUIDS)?).into()),
                    "ids" if u.ratio(2, 3)? => Value::Array(
                        (0..u.int_in_range(0..=3)?)
                            .map(|_| Ok(Value::String((*pick(u, UUIDS)?).into())))
                            .collect::<Result<Vec<_>>>()?,
                    ),
                    "keys" if u.ratio(2, 3)? => {
                        let n = pick(u, &[0usize, 1, 3, 4096, 4097])?;
                        Value::String("k".repeat(*n))
                    }
                    _ => json_value(u, 2)?,
                };
                m.insert((*k).into(), v);
            }
            Value::Object(m).to_string().into_bytes()
        }
    };
    inv::check_board_message(is_text, &frame);
    Ok(())
}

/// A card of a few short fields, so that two cards often share some and differ in others.
fn board_card(u: &mut Unstructured<'_>) -> Result<ptyhub::protocol::board::Card> {
    use ptyhub::attention::state::{Choice, State};
    const TEXTS: &[&str] = &[
        "",
        "a",
        "review",
        "Do you want to proceed?",
        "❯ 1. Yes",
        "日本",
    ];
    let text = |u: &mut Unstructured<'_>| -> Result<String> { Ok((*pick(u, TEXTS)?).to_owned()) };
    let list = |u: &mut Unstructured<'_>, max: u32| -> Result<Vec<String>> {
        (0..u.int_in_range(0..=max)?).map(|_| text(u)).collect()
    };
    let state = *pick(
        u,
        &[State::Working, State::Waiting, State::Idle, State::Exited],
    )?;
    let choices = (0..u.int_in_range(0..=2)?)
        .map(|_| {
            Ok(Choice {
                label: text(u)?,
                keys: text(u)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ptyhub::protocol::board::Card {
        id: uuid::Uuid::from_u128(7),
        num: *pick(u, &[None, Some(1u8), Some(2)])?,
        name: text(u)?,
        assistant: text(u)?,
        assistant_name: text(u)?,
        state,
        since: u.int_in_range(0..=2)?,
        reason: text(u)?,
        choices,
        may_type: u.arbitrary()?,
        alive: u.arbitrary()?,
        people: list(u, 2)?,
        created_by: pick(u, &[None, Some("ann"), Some("bob")])?.map(str::to_owned),
        rows: list(u, 6)?,
        cursor: (u.int_in_range(0..=2)?, u.int_in_range(0..=2)?),
    })
}

/// Two cards, often alike, and the check of their change (also a property test).
pub fn board_changes(u: &mut Unstructured<'_>) -> Result<()> {
    let old = board_card(u)?;
    let new = if u.ratio(1, 8)? {
        old.clone()
    } else {
        board_card(u)?
    };
    inv::check_board_changes(&old, &new);
    Ok(())
}

// ---- the log stream ---------------------------------------------------------------------------

fn log_lines(u: &mut Unstructured<'_>) -> Result<()> {
    let mut data = term_bytes(u, 24)?;
    // Line ends, carriage returns and erasures, where lines are made.
    for _ in 0..u.int_in_range(0..=6)? {
        let at = u.int_in_range(0..=data.len())?;
        const PIECES: &[&[u8]] = &[b"\n", b"\r", b"\r\n", b"\x1b[K", b"\x08", b"\t"];
        let piece = pick(u, PIECES)?;
        data.splice(at..at, piece.iter().copied());
    }
    let chunks = cut(u, &data)?;
    inv::check_log_lines(&data, &chunks);
    let text = String::from_utf8_lossy(&data);
    inv::check_sse_roundtrip(&text);
    Ok(())
}

// ---- exec: the pipe dialect and the SSE text ----------------------------------------------------

fn pipe_messages(u: &mut Unstructured<'_>) -> Result<()> {
    let is_text = u.arbitrary()?;
    let frame = control_message(
        u,
        &["eof", "signal", "resize", "ping", "x"],
        &["signal", "cols", "rows", "type"],
        |u, k| {
            if k == "signal" && u.ratio(2, 3)? {
                let names = [
                    "SIGINT", "SIGTERM", "SIGKILL", "SIGSTOP", "SIGUSR1", "INT", "",
                ];
                Ok(Value::String((*pick(u, &names)?).into()))
            } else {
                json_value(u, 2)
            }
        },
    )?;
    inv::check_pipe_message(is_text, &frame);
    Ok(())
}

/// A language server's stdout: framed messages (some over the bound), extra headers and
/// garbage, cut anywhere.
fn lsp_stream(u: &mut Unstructured<'_>) -> Result<()> {
    let max = u.int_in_range(1..=300)?;
    let mut bodies = Vec::new();
    let mut data = Vec::new();
    let mut clean = true;
    for _ in 0..u.int_in_range(0..=8)? {
        match u.int_in_range(0..=9)? {
            0 => {
                // Garbage: the stream is no longer the bodies.
                data.extend(some_bytes(u, 40)?);
                clean = false;
            }
            n => {
                let body = json_value(u, 2)?.to_string();
                let body = if n == 1 { body.repeat(20) } else { body };
                let header = match u.int_in_range(0..=3)? {
                    0 => format!("Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: {}\r\n\r\n", body.len()),
                    1 => format!("Content-Length:{}\r\n\r\n", body.len()),
                    _ => format!("Content-Length: {}\r\n\r\n", body.len()),
                };
                data.extend_from_slice(header.as_bytes());
                data.extend_from_slice(body.as_bytes());
                bodies.push(body);
            }
        }
    }
    let mut pieces = Vec::new();
    let mut rest = &data[..];
    while !rest.is_empty() {
        let n = u.int_in_range(1..=rest.len().min(64))?;
        pieces.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    inv::check_lsp_stream(&pieces, max, clean.then_some(&bodies[..]));
    Ok(())
}

/// A client's frame to a language server: JSON-RPC-like messages, other JSON, or bytes.
fn lsp_client(u: &mut Unstructured<'_>) -> Result<()> {
    let is_text = u.arbitrary()?;
    let frame = match u.int_in_range(0..=2)? {
        0 => some_bytes(u, 64)?,
        1 => json_value(u, 3)?.to_string().into_bytes(),
        _ => {
            let method = *pick(u, &["initialize", "textDocument/hover", "exit", ""])?;
            let msg = serde_json::json!({"jsonrpc": "2.0", "id": json_value(u, 0)?, "method": method, "params": json_value(u, 2)?});
            msg.to_string().into_bytes()
        }
    };
    inv::check_lsp_client_message(is_text, &frame);
    Ok(())
}

fn exec_text(u: &mut Unstructured<'_>) -> Result<()> {
    // Text with multi-byte characters, line ends and invalid bytes, cut anywhere.
    const PIECES: &[&[u8]] = &[
        b"plain ",
        "\u{20ac}".as_bytes(),
        "\u{1f600}".as_bytes(),
        "\u{e9}".as_bytes(),
        b"\n",
        b"\r",
        b"\r\n",
        b"\xff",
        b"\x80",
        b"\xe2\x82",
        b"\xf0\x9f",
    ];
    let mut data = Vec::new();
    for _ in 0..u.int_in_range(0..=24)? {
        if u.ratio(1, 4)? {
            data.push(u.arbitrary()?);
        } else {
            data.extend_from_slice(pick(u, PIECES)?);
        }
    }
    let pieces = cut(u, &data)?;
    inv::check_exec_text(&pieces);
    Ok(())
}

// ---- recordings -------------------------------------------------------------------------------

fn asciicast(u: &mut Unstructured<'_>) -> Result<()> {
    let mut data = term_bytes(u, 24)?;
    // Multi-byte characters and broken ones, where a cut may fall inside.
    for _ in 0..u.int_in_range(0..=6)? {
        let at = u.int_in_range(0..=data.len())?;
        const PIECES: &[&[u8]] = &[
            "é".as_bytes(),
            "€".as_bytes(),
            "🦀".as_bytes(),
            b"\xe2\x82",
            b"\xff",
            b"\xf0\x9f",
        ];
        let piece = pick(u, PIECES)?;
        data.splice(at..at, piece.iter().copied());
    }
    let chunks = cut(u, &data)?;
    let times = (0..chunks.len())
        .map(|_| u.arbitrary::<f64>())
        .collect::<Result<Vec<_>>>()?;
    let label = text(u)?;
    inv::check_asciicast(&chunks, &times, &label);
    Ok(())
}

/// A live upgrade's image: one built from random sessions reads back as written; the same
/// bytes cut, flipped or made up are refused or read as something whose references all hold.
fn upgrade_image(u: &mut Unstructured<'_>) -> Result<()> {
    use ptyhub::upgrade::image::{Blobs, Image, ProcessImage, SessionImage};
    let mut blobs = Blobs::default();
    let mut image = Image {
        version: text(u)?,
        upgrades: u.arbitrary()?,
        token: if u.arbitrary()? { Some(text(u)?) } else { None },
        listener_fd: u.int_in_range(3..=8)?,
        ..Image::default()
    };
    let mut fd = image.listener_fd;
    for num in 1..=u.int_in_range(0..=4u8)? {
        let log = some_bytes(u, 64)?;
        let log_start: u64 = u.int_in_range(0..=1 << 40)?;
        let snapshot_offset = log_start + u.int_in_range(0..=log.len() as u64)?;
        let running: bool = u.arbitrary()?;
        fd += 1;
        let session = SessionImage {
            // Distinct per session, as a daemon's are.
            id: uuid::Uuid::from_u128((u128::from(u.arbitrary::<u64>()?) << 8) | u128::from(num)),
            // Past 255 sessions, a session has no number.
            num: if u.ratio(1, 8)? { None } else { Some(num) },
            name: text(u)?,
            snapshot: if u.arbitrary()? {
                Some(blobs.add(&some_bytes(u, 64)?))
            } else {
                None
            },
            snapshot_offset,
            log_start,
            log: blobs.add(&log),
            input: blobs.add(&some_bytes(u, 16)?),
            process: running.then_some(ProcessImage {
                pid: u.arbitrary()?,
                pty_fd: Some(fd),
            }),
            ..SessionImage::default()
        };
        image.sessions.push(session);
    }
    let mutation = if u.arbitrary()? {
        None
    } else {
        Some((
            u.arbitrary::<usize>()?,
            u.arbitrary::<u8>()?,
            u.arbitrary::<bool>()?,
        ))
    };
    let noise = some_bytes(u, 256)?;
    inv::check_upgrade_image(&image, &blobs, mutation, &noise);
    Ok(())
}

/// An audit trail file: real event lines (some with a session, detail, odd times), damaged
/// ones (cut, a byte changed, an unfinished last line) and random bytes, read with a random
/// query.
fn audit_file(u: &mut Unstructured<'_>) -> Result<()> {
    use ptyhub::audit::{Actor, Event, Query, MAX_LIMIT};
    const USERS: &[&str] = &["ann", "guest", "-", "bob"];
    const ACTIONS: &[&str] = &["typing", "login", "refused", "session.create"];
    const TIMES: &[&str] = &[
        "2026-05-01T12:00:00.000Z",
        "2026-05-01T12:00:01.500Z",
        "2026-05-02T00:00:00.000Z",
        "not a time",
    ];
    let sessions = [uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2)];
    let mut file = Vec::new();
    for _ in 0..u.int_in_range(0..=12)? {
        match u.int_in_range(0..=9)? {
            0 => file.extend(some_bytes(u, 40)?),
            n => {
                let actor = Actor {
                    user: (*pick(u, USERS)?).to_owned(),
                    ..Actor::nobody()
                };
                let mut event = Event::new(pick(u, ACTIONS)?, &actor);
                event.ts = (*pick(u, TIMES)?).to_owned();
                if u.arbitrary()? {
                    event.session = Some(*pick(u, &sessions)?);
                }
                if u.arbitrary()? {
                    event.detail = Some(json_value(u, 2)?);
                }
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                if n == 1 && !line.is_empty() {
                    // Damaged: cut, or a byte changed.
                    let at = u.choose_index(line.len())?;
                    if u.arbitrary()? {
                        line.truncate(at);
                    } else {
                        line[at] = u.arbitrary()?;
                    }
                }
                file.extend(line);
            }
        }
        if u.ratio(7, 8)? {
            file.push(b'\n');
        }
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    if u.arbitrary()? {
        pairs.push(("user".into(), (*pick(u, USERS)?).to_owned()));
    }
    if u.arbitrary()? {
        pairs.push(("action".into(), (*pick(u, ACTIONS)?).to_owned()));
    }
    if u.arbitrary()? {
        pairs.push(("session".into(), pick(u, &sessions)?.to_string()));
    }
    if u.arbitrary()? {
        pairs.push(("since".into(), "2026-05-01T12:00:01Z".into()));
    }
    if u.arbitrary()? {
        pairs.push(("until".into(), "2026-05-01T14:00:01+02:00".into()));
    }
    pairs.push(("limit".into(), u.int_in_range(1..=MAX_LIMIT)?.to_string()));
    let Ok(query) = Query::parse(&pairs) else {
        panic!("a well-formed query was refused: {pairs:?}");
    };
    inv::check_audit_read(&file, &query);
    Ok(())
}

/// Events of random sizes recorded into a trail with a small bound (files on disk, in a
/// temporary directory), then read back.
fn audit_rotation(u: &mut Unstructured<'_>) -> Result<()> {
    let mut sizes = Vec::new();
    for _ in 0..u.int_in_range(0..=60)? {
        sizes.push(u.int_in_range(0..=2000)?);
    }
    let max_bytes = u.int_in_range(4096..=12_000)?;
    let files = u.int_in_range(1..=3)?;
    inv::check_audit_rotation(&sizes, max_bytes, files);
    Ok(())
}
