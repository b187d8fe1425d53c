//! Property tests (proptest) of every codec and parser that takes client or program bytes, over
//! the invariants stated once in `tests/fuzz/invariants.rs`; plus a short run of every fuzz
//! target and the replay of seeds that once failed. Case counts are modest so that `cargo test`
//! stays fast on two cores; the fuzz runner (`cargo run --release --example fuzz`) searches long.

// Each driver uses a different part of the shared files.
#[allow(dead_code)]
#[path = "fuzz/invariants.rs"]
mod invariants;
#[allow(dead_code)]
#[path = "fuzz/targets.rs"]
mod targets;

use invariants::{self as inv, ScreenOp};
use proptest::prelude::*;
use ptyhub::protocol::swe::ClientMessage;
use ptyhub::term::queries::Query;

/// Terminal output: pieces of real output, random CSI sequences and raw bytes.
fn term_bytes(max_pieces: usize) -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        6 => proptest::sample::select(inv::PIECES).prop_map(<[u8]>::to_vec),
        2 => (
            proptest::option::of(proptest::sample::select(&b"?>"[..])),
            proptest::collection::vec(0u16..2000, 0..4),
            proptest::sample::select(&b"@ABCDHJKLMPSTXZbcdfghlmnrs"[..]),
        )
            .prop_map(|(marker, params, fin)| {
                let params: Vec<String> = params
                    .into_iter()
                    .filter(|&p| p != 47)
                    .map(|p| p.to_string())
                    .collect();
                let mut s = b"\x1b[".to_vec();
                s.extend(marker);
                s.extend_from_slice(params.join(";").as_bytes());
                s.push(fin);
                s
            }),
        1 => proptest::collection::vec(any::<u8>(), 1..6),
        1 => any::<char>().prop_map(|c| c.to_string().into_bytes()),
    ];
    proptest::collection::vec(piece, 0..max_pieces).prop_map(|p| p.concat())
}

fn screen_size() -> impl Strategy<Value = (u16, u16)> {
    (1u16..=12, 1u16..=40)
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn client_message() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        (1u16.., 1u16..).prop_map(|(rows, cols)| ClientMessage::Resize { rows, cols }),
        proptest::option::of(json_value()).prop_map(|data| ClientMessage::Ping { data }),
        (any::<String>(), any::<String>())
            .prop_map(|(user_name, text)| ClientMessage::Chat { user_name, text }),
        any::<String>().prop_map(|name| ClientMessage::Rename { name }),
        Just(ClientMessage::ToggleYolo),
        any::<u64>().prop_map(|bytes| ClientMessage::Ack { bytes }),
        any::<String>().prop_map(|signal| ClientMessage::Signal { signal }),
    ]
}

fn query() -> impl Strategy<Value = Query> {
    proptest::sample::select(vec![
        Query::CursorPosition,
        Query::PrimaryAttributes,
        Query::SecondaryAttributes,
        Query::Status,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Binary client frames: never a panic, exactly the rules of docs/protocol.md section 2.
    #[test]
    fn client_binary_frames_decode_by_the_rules(
        first in prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
        rest in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let frame = [&[first][..], &rest].concat();
        inv::check_client_binary(&frame);
        inv::check_client_binary(&rest);
    }

    /// Binary client frames: encode then decode is identity.
    #[test]
    fn client_binary_encode_decode_is_identity(
        rows in any::<u16>(),
        cols in any::<u16>(),
        name in proptest::collection::vec(any::<u8>(), 0..300),
        data in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        inv::check_client_binary_roundtrip(rows, cols, &name, &data);
    }

    /// Text client frames: never a panic, bounded errors, decode-encode-decode stable.
    #[test]
    fn client_text_frames_never_panic(text in any::<String>()) {
        inv::check_client_text(&text);
        inv::check_client_text(&format!("{{\"type\":{text}}}"));
    }

    /// JSON client messages: encode then decode is identity, extra fields ignored.
    #[test]
    fn client_json_encode_decode_is_identity(
        msg in client_message(),
        extra in proptest::option::of((any::<String>(), json_value())),
    ) {
        inv::check_client_text_roundtrip(&msg, extra.as_ref().map(|(k, v)| (k.as_str(), v)));
    }

    /// Server messages: what a client decodes is what was encoded.
    #[test]
    fn server_messages_decode_to_what_was_encoded(
        strings in proptest::collection::vec(any::<String>(), 3),
        code in any::<i32>(),
        data in proptest::option::of(json_value()),
    ) {
        use ptyhub::protocol::swe::ServerMessage;
        for msg in [
            ServerMessage::Pong { data: data.clone() },
            ServerMessage::Chat {
                user_name: strings[0].clone(),
                guest: code % 3 == 0,
                text: strings[1].clone(),
                timestamp: strings[2].clone(),
            },
            ServerMessage::FileUpload {
                success: code % 2 == 0,
                filename: strings[0].clone(),
                error: Some(strings[1].clone()),
            },
            ServerMessage::Exit { exit_code: code, signal: Some(strings[2].clone()) },
            ServerMessage::error(strings[0].clone(), strings[1].clone()),
            ServerMessage::Ready,
        ] {
            inv::check_server_message(&msg);
        }
    }

    /// Live output frames: cover the output in order, at most 8 KiB, never a snapshot chunk.
    #[test]
    fn output_frames_keep_the_rules(
        data in proptest::collection::vec(prop_oneof![Just(2u8), any::<u8>()], 0..100),
        pad in prop_oneof![Just(0usize), 8189usize..8195, 16381usize..16387],
    ) {
        let mut long = vec![b'x'; pad];
        long.extend_from_slice(&data);
        inv::check_output_frames(&data);
        inv::check_output_frames(&long);
    }

    /// Snapshot chunks reassemble to the gzip stream; too long a stream is refused.
    #[test]
    fn snapshot_chunks_reassemble(
        len in prop_oneof![0usize..20_000, 255 * 8192 - 2usize..255 * 8192 + 3],
    ) {
        let gzip: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        inv::check_snapshot_frames(&gzip);
    }

    /// The query detector: split-invariant, and agrees with the parser's hook.
    #[test]
    fn query_scan_is_split_invariant(
        stream in term_bytes(40),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        inv::check_query_scan(&stream, &cuts);
    }

    /// Recordings: valid asciicast v2 whatever the output and however it was cut, times never
    /// going back, the output events joined equal to the output.
    #[test]
    fn recordings_are_valid_asciicast_and_keep_the_output(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in proptest::collection::vec(1usize..40, 0..12),
        times in proptest::collection::vec(any::<f64>(), 0..12),
        label in any::<String>(),
    ) {
        let mut chunks = Vec::new();
        let mut rest = &data[..];
        for n in cuts {
            let (a, b) = rest.split_at(n.min(rest.len()));
            chunks.push(a.to_vec());
            rest = b;
        }
        chunks.push(rest.to_vec());
        inv::check_asciicast(&chunks, &times, &label);
    }

    /// Viewers' replies: only replies are dropped, one per expected query.
    #[test]
    fn reply_filter_only_drops_replies(
        expected in proptest::collection::vec(query(), 0..4),
        input in term_bytes(12),
        before in proptest::collection::vec(any::<u8>(), 0..12),
        after in proptest::collection::vec(any::<u8>(), 0..12),
    ) {
        inv::check_reply_filter(&expected, &input, &before, &after);
    }

    /// Upload names: never a panic, never a separator, control character, `.` or `..`.
    #[test]
    fn upload_names_are_safe(
        raw in proptest::collection::vec(any::<u8>(), 0..300),
        parts in proptest::collection::vec(
            proptest::sample::select(vec!["/", "\\", ".", "..", " ", "\u{0}", "\u{85}", "a", "日本"]),
            0..8,
        ),
    ) {
        inv::check_upload_name(&raw);
        inv::check_upload_name(parts.concat().as_bytes());
    }

    /// Pipe-mode client messages: stdin unchanged, control exactly as its JSON says, anything
    /// else an error with a code.
    #[test]
    fn pipe_messages_decode_as_section_13_says(
        is_text in any::<bool>(),
        raw in proptest::collection::vec(any::<u8>(), 0..64),
        ty in proptest::sample::select(vec!["eof", "signal", "resize", "ping", ""]),
        signal in proptest::sample::select(vec!["SIGINT", "SIGTERM", "SIGKILL", "SIGSTOP", "int", ""]),
        extra in proptest::sample::select(vec!["", r#","cols":80,"rows":24"#, r#","signal":9"#]),
    ) {
        inv::check_pipe_message(is_text, &raw);
        let json = format!(r#"{{"type":"{ty}","signal":"{signal}"{extra}}}"#);
        inv::check_pipe_message(true, json.as_bytes());
        inv::check_pipe_message(false, json.as_bytes());
    }

    /// The board's client messages: decoded as section 11a says, or an error, never a panic.
    #[test]
    fn board_messages_decode_as_section_11a_says(
        raw in proptest::collection::vec(any::<u8>(), 0..64),
        ty in proptest::sample::select(vec!["visible", "reply", "card", ""]),
        id in proptest::sample::select(vec!["00000000-0000-0000-0000-000000000007", "x", ""]),
        keys in ".{0,8}",
    ) {
        inv::check_board_message(true, &raw);
        inv::check_board_message(false, &raw);
        let json = serde_json::json!({"type": ty, "id": id, "ids": [id], "keys": keys});
        inv::check_board_message(true, json.to_string().as_bytes());
    }

    /// A card's change applied to the old card is the new card, rows and all.
    #[test]
    fn board_changes_are_the_difference(
        seed in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut u = arbtest::arbitrary::Unstructured::new(&seed);
        // Too few bytes for two cards is no case.
        let _ = targets::board_changes(&mut u);
    }

    /// A language server's messages come out of the base protocol whole, in order and within
    /// the bound, whatever the reads (docs/protocol.md section 13a).
    #[test]
    fn lsp_messages_are_independent_of_reads(
        bodies in proptest::collection::vec(json_value().prop_map(|v| v.to_string()), 0..6),
        max in 1usize..400,
        cuts in proptest::collection::vec(1usize..50, 1..12),
        garbage in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..40)),
    ) {
        let mut data = Vec::new();
        for body in &bodies {
            data.extend_from_slice(ptyhub::lsp::framing::header(body.len()).as_bytes());
            data.extend_from_slice(body.as_bytes());
        }
        let clean = garbage.is_none();
        if let Some(g) = garbage {
            let at = cuts[0].min(data.len());
            data.splice(at..at, g);
        }
        let mut pieces = Vec::new();
        let (mut at, mut i) = (0, 0);
        while at < data.len() {
            let end = (at + cuts[i % cuts.len()]).min(data.len());
            pieces.push(data[at..end].to_vec());
            at = end;
            i += 1;
        }
        inv::check_lsp_stream(&pieces, max, clean.then_some(&bodies[..]));
    }

    /// A client's frame to a language server is passed on unchanged exactly when it is a JSON
    /// object or array in a text frame; anything else gets a JSON-RPC error.
    #[test]
    fn lsp_client_frames_are_json_rpc_or_answered(
        is_text in any::<bool>(),
        raw in proptest::collection::vec(any::<u8>(), 0..64),
        value in json_value(),
    ) {
        inv::check_lsp_client_message(is_text, &raw);
        inv::check_lsp_client_message(is_text, value.to_string().as_bytes());
    }

    /// Exec output as SSE text: the same whatever the reads, and exact through an SSE client.
    #[test]
    fn exec_text_is_independent_of_reads(
        parts in proptest::collection::vec(
            prop_oneof![
                3 => proptest::sample::select(vec!["a", "€", "😀", "é", "\n", "\r", "\r\n"])
                    .prop_map(|s| s.as_bytes().to_vec()),
                1 => proptest::collection::vec(any::<u8>(), 1..4),
            ],
            0..24,
        ),
        cuts in proptest::collection::vec(1usize..8, 1..12),
    ) {
        let data: Vec<u8> = parts.concat();
        let mut pieces = Vec::new();
        let (mut at, mut i) = (0, 0);
        while at < data.len() {
            let end = (at + cuts[i % cuts.len()]).min(data.len());
            pieces.push(data[at..end].to_vec());
            at = end;
            i += 1;
        }
        inv::check_exec_text(&pieces);
    }

    /// Shell quoting: the shell reads back the path.
    #[test]
    fn shell_quoting_round_trips(path in any::<String>()) {
        inv::check_shell_quote(&path);
    }

    /// The config loader: never a panic, one-line errors with their place, bounds kept.
    #[test]
    fn config_loader_never_panics(
        text in any::<String>(),
        lines in proptest::collection::vec(
            (proptest::sample::select(inv::CONFIG_KEYS), proptest::sample::select(inv::CONFIG_VALUES)),
            0..6,
        ),
    ) {
        inv::check_config(&text);
        let mut toml = String::new();
        for ((table, key), value) in lines {
            if !table.is_empty() {
                toml.push_str(&format!("[{table}]\n"));
            }
            toml.push_str(&format!("{key} = {value}\n"));
        }
        inv::check_config(&toml);
    }

    /// WebSocket frame rules: close replies and refused frames as RFC 6455 says.
    #[test]
    fn websocket_frame_rules_hold(
        code in prop_oneof![990u16..1020, any::<u16>()],
        reason in proptest::collection::vec(any::<u8>(), 0..6),
        short in proptest::collection::vec(any::<u8>(), 0..2),
        masked in any::<bool>(),
        opcode in any::<u8>(),
        len in prop_oneof![120usize..130, any::<usize>()],
    ) {
        let payload = [&code.to_be_bytes()[..], &reason].concat();
        inv::check_ws_frame_rules(&payload, masked, opcode, len);
        inv::check_ws_frame_rules(&short, masked, opcode, len);
    }

    /// The presented token comes from the request, a bearer header first.
    #[test]
    fn presented_token_comes_from_the_request(
        auth in proptest::collection::vec(any::<u8>(), 0..20),
        cookie in "[ -~]{0,20}",
        value in "[ -~]{0,10}",
    ) {
        let bearer = [&b"Bearer "[..], &auth].concat();
        inv::check_presented_token(&bearer, &[cookie.clone().into_bytes()], &[]);
        inv::check_presented_token(&auth, &[cookie.into_bytes()], &[("token".into(), value)]);
    }

    /// The proxy's user header gives a clean name or none: the last value, trimmed, bounded.
    #[test]
    fn proxied_user_is_the_last_clean_value(
        values in proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![any::<u8>(), Just(b','), Just(b' '), Just(b'a')],
                0..300,
            ),
            0..4,
        ),
        name in "[a-z@.]{1,40}",
    ) {
        inv::check_proxied_user(&values);
        let with_name = [values, vec![format!("  {name} ").into_bytes()]].concat();
        inv::check_proxied_user(&with_name);
    }
}

proptest! {
    // The screen model parses every case several times over: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Streaming the screen model: exact at every boundary, split-invariant, resizes included.
    #[test]
    fn screen_model_is_exact_at_every_boundary(
        (rows, cols) in screen_size(),
        scrollback in proptest::sample::select(vec![0usize, 3, 1000]),
        ops in proptest::collection::vec(
            prop_oneof![
                6 => term_bytes(12).prop_map(ScreenOp::Feed),
                1 => term_bytes(12).prop_map(ScreenOp::Bulk),
                1 => screen_size().prop_map(|(r, c)| ScreenOp::Resize(r, c)),
            ],
            1..10,
        ),
    ) {
        inv::check_screen_stream(rows, cols, scrollback, &ops);
    }

    /// Snapshots rendered into a fresh terminal give the model's screen.
    #[test]
    fn snapshots_round_trip(
        (rows, cols) in screen_size(),
        scrollback in proptest::sample::select(vec![0usize, 10, 1000]),
        stream in term_bytes(80),
        chunk in 1usize..300,
        max_scrollback in proptest::sample::select(vec![0usize, 5, usize::MAX]),
    ) {
        let chunks: Vec<Vec<u8>> = stream.chunks(chunk).map(<[u8]>::to_vec).collect();
        inv::check_snapshot(rows, cols, scrollback, &chunks, max_scrollback);
    }
}

proptest! {
    // Each case parses a 64 KiB flood twice.
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// The bulk skip leaves the model as a full parse would.
    #[test]
    fn bulk_skip_equals_a_full_parse(
        rows in 1u16..=10,
        cols in 1u16..=30,
        scrollback in proptest::sample::select(vec![0usize, 5, 50]),
        before in term_bytes(8),
        lines in proptest::collection::vec(
            (
                "[ -~\t]{0,40}",
                proptest::sample::select(vec!["\r\n", "\n", "\r", ""]),
                proptest::option::of((proptest::sample::select(inv::PEN_PIECES), 0usize..40)),
            ),
            0..5,
        ),
        after in term_bytes(8),
    ) {
        // Coloured lines too: a pen sequence somewhere in some of them.
        let lines: Vec<Vec<u8>> = lines
            .into_iter()
            .map(|(l, end, pen)| {
                let mut line = format!("{l}{end}").into_bytes();
                if let Some((pen, at)) = pen {
                    let at = at.min(line.len());
                    line.splice(at..at, pen.iter().copied());
                }
                line
            })
            .collect();
        let need = 2 * usize::from(rows) + scrollback + 4;
        let flood = inv::build_flood(&lines, 70_000, need + 10);
        inv::check_bulk(rows, cols, scrollback, &before, &flood, &after, None);
    }
}

proptest! {
    // Each case writes a few dozen lines to a temporary directory.
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The audit trail rotates at its bound, keeps its files, and reads back newest first
    /// without a gap or a repeat, whatever the events' sizes.
    #[test]
    fn the_audit_trail_rotates_and_reads_back_in_order(
        sizes in proptest::collection::vec(0usize..1500, 0..60),
        max_bytes in 4096u64..12_000,
        files in 1usize..4,
    ) {
        inv::check_audit_rotation(&sizes, max_bytes, files);
    }

    /// Reading a trail file: every matching whole line, newest first, damage skipped.
    #[test]
    fn an_audit_file_reads_its_matching_lines_newest_first(
        lines in proptest::collection::vec(
            prop_oneof![
                3 => ("(ann|guest|-)", "(typing|login)", 0u32..3).prop_map(|(user, action, t)| {
                    let actor = ptyhub::audit::Actor { user, ..ptyhub::audit::Actor::nobody() };
                    let mut e = ptyhub::audit::Event::new(&action, &actor);
                    e.ts = format!("2026-05-01T12:00:0{t}.000Z");
                    serde_json::to_string(&e).unwrap()
                }),
                1 => "[ -~]{0,30}",
            ],
            0..30,
        ),
        user in proptest::option::of("(ann|guest)"),
        since in proptest::option::of(0u32..3),
        limit in 1usize..10,
    ) {
        let mut pairs = vec![("limit".to_owned(), limit.to_string())];
        if let Some(user) = user {
            pairs.push(("user".to_owned(), user));
        }
        if let Some(t) = since {
            pairs.push(("since".to_owned(), format!("2026-05-01T12:00:0{t}Z")));
        }
        let query = ptyhub::audit::Query::parse(&pairs).unwrap();
        inv::check_audit_read(lines.join("\n").as_bytes(), &query);
    }
}

/// A plain flood from a clean start is actually skipped (the property above would also hold
/// if `process_bulk` never skipped anything).
#[test]
fn a_plain_flood_is_skipped() {
    let flood = inv::build_flood(&[b"some plain line\r\n".to_vec()], 200_000, 10_000);
    let skipped = inv::check_bulk(24, 80, 100, b"\x1b[1mstart ", &flood, b"\x1b[31mend", None);
    assert!(skipped > 100_000, "skipped {skipped}");
}

/// So is a coloured one (`ls --color` style), ending with the pen it left set.
#[test]
fn a_coloured_flood_is_skipped() {
    let lines = [
        b"\x1b[01;34mdir\x1b[0m  \x1b[01;32mrun.sh\x1b[0m\r\n".to_vec(),
        b"a \x1b[01;31m\x1b[Kmatch\x1b[m\x1b[K b\r\n".to_vec(),
        b"\x1b[38;5;200m256 colours left on\x1b[48;2;1;2;3m\x1b[K\r\n".to_vec(),
    ];
    let flood = inv::build_flood(&lines, 200_000, 10_000);
    let skipped = inv::check_bulk(24, 80, 100, b"\x1b[1mstart ", &flood, b"end\x1b[2bX", None);
    assert!(skipped > 100_000, "skipped {skipped}");
}

/// Seeds the fuzz runner once failed on, replayed forever: `(target, seed)`.
const REGRESSIONS: &[(&str, u64)] = &[
    // The bulk check asked the model's main scrollback count while it passed an oversized
    // sequence through under the alternate screen (the known limit pinned below).
    ("screen_bulk", 0xcb79_691e_0000_01c1),
    // The raw invariant allowed refusals only behind 0x01; a text object of a known type with
    // bad fields (`{"type":"signal"}`) is refused too, as section 10 says.
    ("raw_frames", 0x9dd6_f1df_0000_0013),
    // A VT ended a line inside a segment that a later LF (inside a CSI) ended again: lines now
    // end at LF, VT and FF alike, wherever the input is cut.
    ("log_lines", 0x54f3_3c68_0000_01da),
    // A lone CR at the end of an event's data was dropped instead of ending a line.
    ("log_lines", 0xbfbe_1dab_0000_0495),
];

/// Every fuzz target runs (a few fixed seeds each, so this stays fast and deterministic), and
/// every regression seed passes.
#[test]
fn fuzz_targets_run_and_regressions_pass() {
    for t in targets::TARGETS {
        for i in 0..8u64 {
            let size = (t.max_input >> (i % 4)) as u64;
            let seed = size | ((0x9E37_79B9 ^ i.wrapping_mul(0x85EB_CA6B)) << 32);
            replay(t, seed);
        }
    }
    for &(name, seed) in REGRESSIONS {
        let t = targets::TARGETS
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no target {name}"));
        replay(t, seed);
    }
}

fn replay(t: &targets::Target, seed: u64) {
    arbtest::arbtest(|u| {
        let _ = (t.run)(u);
        Ok(())
    })
    .seed(seed)
    .run();
}

// ---- known deviations the fuzz targets found, pinned until fixed ---------------------------
//
// Each is a real (minor) divergence; the checks in tests/fuzz/invariants.rs skip exactly these
// cases so that the runner keeps looking for others. Remove the `#[ignore]` with the fix.

/// The query detector (`term/queries.rs`, `QueryScan::scan`) finds exactly the queries
/// vt100's hook answers, on the sequences the old hand-written scanner read differently (found
/// by the `query_scan` fuzz target; fixed by the one scanner, `term/seq.rs`): bytes >= 0x80
/// inside ESC/CSI, C0/DEL after ESC, intermediates, sub-parameters, three or more parameters.
#[test]
fn query_scanner_agrees_with_the_hook_on_odd_sequences() {
    use ptyhub::term::queries::{QueryHook, QueryScan};
    let mut wrong = Vec::new();
    for s in [
        &b"\x1b[\xe2\x82\xacc"[..],
        b"\x1b[6\xc3\xa9n",
        b"\x1b\n[c",
        b"\x1b\x7f[c",
        b"\x1b[\"c",
        b"\x1b[!c",
        b"\x1b[> c",
        b"\x1b[ 6n",
        b"\x1b[:c",
        b"\x1b[0;0;0c",
    ] {
        let scanned = QueryScan::default().scan(s);
        let nz = |n| std::num::NonZeroU16::new(n).unwrap();
        let mut p = vt100::Parser::new_with_callbacks(nz(24), nz(80), 0, QueryHook::default());
        p.process(s);
        let hooked: Vec<Query> = p.callbacks().found.iter().map(|(q, _)| *q).collect();
        if scanned != hooked {
            wrong.push(format!(
                "{}: scanner {scanned:?}, hook {hooked:?}",
                s.escape_ascii()
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A ping's float `data` comes back in the pong exactly: serde_json parses floats inexactly
/// unless its `float_roundtrip` feature is on (it is, in Cargo.toml).
#[test]
fn pong_echoes_float_data_exactly() {
    use ptyhub::protocol::swe::{self, ServerMessage};
    let number = "4.2784605818983315e-191";
    let Ok(ClientMessage::Ping { data }) =
        swe::decode_text(&format!(r#"{{"type":"ping","data":{number}}}"#))
    else {
        panic!("not a ping");
    };
    assert_eq!(
        ServerMessage::Pong { data }.to_json(),
        format!(r#"{{"type":"pong","data":{number}}}"#)
    );
}

/// REP (`CSI n b`) repeats the last printed character until the next control function (as
/// xterm.js does; vt100 kept it across cursor moves). A snapshot carries it: a joiner whose
/// live stream starts with REP repeats what everyone else's terminal repeats, or nothing.
#[test]
fn snapshot_keeps_the_character_rep_repeats() {
    use ptyhub::term::model::ScreenModel;
    let nz = |n| std::num::NonZeroU16::new(n).unwrap();
    let mut model = ScreenModel::new(3, 20, 0);
    model.process(b"hello\x1b[1;1Hx\x1b[2;1H");
    let mut joiner = vt100::Parser::new(nz(3), nz(20), 0);
    joiner.process(&model.snapshot_ansi(usize::MAX));
    model.process(b"\x1b[3b");
    joiner.process(b"\x1b[3b");
    assert_eq!(joiner.screen().contents(), model.screen().contents());
    // Right after a printed character (a wide one, in colour, waiting to wrap at the margin),
    // the snapshot brings the character back.
    for (stream, rep) in [
        (&b"\x1b[31mhello"[..], "\x1b[3b"),
        ("\x1b[1;17Hab\u{4e16}".as_bytes(), "\x1b[2b"),
        (b"\x1b[?1049h\x1b[2;10Hxyz", "\x1b[b"),
    ] {
        let mut model = ScreenModel::new(3, 20, 0);
        model.process(stream);
        let mut joiner = vt100::Parser::new(nz(3), nz(20), 0);
        joiner.process(&model.snapshot_ansi(usize::MAX));
        assert_eq!(joiner.screen().contents(), model.screen().contents());
        let before = model.screen().contents();
        model.process(rep.as_bytes());
        joiner.process(rep.as_bytes());
        let what = String::from_utf8_lossy(stream);
        assert_ne!(model.screen().contents(), before, "{what}: REP repeated");
        assert_eq!(
            joiner.screen().contents(),
            model.screen().contents(),
            "{what}"
        );
        assert_eq!(
            joiner.screen().cursor_position(),
            model.screen().cursor_position()
        );
    }
}

/// A sequence too long to hold back is passed through, and the snapshot re-opens one of its
/// kind. REP's character outlives it when it ends without a dispatch (a CSI being ignored, in
/// vte and in xterm.js alike): the snapshot carries it into the open sequence, so a joiner
/// repeats what everyone else repeats. Found by the fuzz target `snapshot_roundtrip` (seed
/// 0xee24d71000000214: the character was lost behind an open DCS).
#[test]
fn snapshot_keeps_the_character_rep_repeats_inside_an_open_sequence() {
    use ptyhub::term::model::ScreenModel;
    let nz = |n| std::num::NonZeroU16::new(n).unwrap();
    // `<` among a CSI's parameters makes it one to ignore; 5000 of them overflow the carry.
    let open = [&b"\x1b[31mab\x1b[1<"[..], &[b'0'; 5000]].concat();
    let mut model = ScreenModel::new(3, 20, 0);
    model.process(&open);
    assert_eq!(model.pending_len(), 0, "the sequence is passed through");
    let mut joiner = vt100::Parser::new(nz(3), nz(20), 0);
    joiner.process(&model.snapshot_ansi(usize::MAX));
    let rest = b"m\x1b[3b";
    model.process(rest);
    joiner.process(rest);
    assert_eq!(model.screen().contents(), "abbbb", "the model repeats b");
    assert_eq!(joiner.screen().contents(), model.screen().contents());
    assert_eq!(
        joiner.screen().cursor_position(),
        model.screen().cursor_position()
    );
    assert_eq!(
        joiner.screen().cell(0, 4).map(vt100::Cell::fgcolor),
        model.screen().cell(0, 4).map(vt100::Cell::fgcolor),
    );
}

/// `ScreenModel::scrollback_len` (the main screen's, "even while the alternate screen is
/// active") is current while an oversized sequence is passed through: it is read from the
/// main grid, not noted after each chunk the parser ends at a sequence boundary.
#[test]
fn scrollback_len_is_current_under_an_oversized_sequence() {
    use ptyhub::term::model::ScreenModel;
    let mut model = ScreenModel::new(1, 10, 100);
    let mut stream = b"a".repeat(25);
    stream.extend_from_slice(b"\x1b[?1049h\x1b]52;c;");
    stream.extend(b"A".repeat(5000));
    model.process(&stream);
    let nz = |n| std::num::NonZeroU16::new(n).unwrap();
    let mut main = vt100::Parser::new(nz(1), nz(10), 0);
    *main.screen_mut() = model.screen().clone();
    main.process(b"\x1b[?47l");
    assert_eq!(main.screen().scrollback_len(), 2);
    assert_eq!(model.scrollback_len(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A token name is taken exactly when it is 1 to 64 characters after trimming, none a
    /// control character; a store makes a token for it, which authorises as that name and
    /// those scopes, and nothing else does.
    #[test]
    fn api_token_names_and_lookups(name in "\\PC{0,70}|[ \\t]{0,3}[a-z\\x07]{0,5}[ \\n]{0,3}", scopes in 1u8..16, other in "ptyhub_[A-Za-z0-9_-]{43}") {
        use ptyhub::auth::tokens::{check_name, Lookup, TokenStore};
        use ptyhub::auth::Scopes;
        let trimmed = name.trim();
        let want = !trimmed.is_empty()
            && trimmed.chars().count() <= 64
            && !trimmed.chars().any(char::is_control);
        prop_assert_eq!(check_name(&name).is_ok(), want);
        let names = ["view", "write", "exec", "admin"];
        let chosen: Vec<&str> = names.iter().enumerate().filter(|(i, _)| scopes & (1 << i) != 0).map(|(_, n)| *n).collect();
        let scopes = Scopes::from_names(&chosen).unwrap();
        let store = TokenStore::in_memory(4);
        match store.create(&name, scopes, None, "prop") {
            Ok(made) => {
                prop_assert!(want);
                prop_assert!(ptyhub::auth::tokens::looks_like_api_token(&made.token));
                match store.lookup(&made.token) {
                    Lookup::User(u) => {
                        prop_assert_eq!(u.name.as_str(), trimmed);
                        prop_assert_eq!(u.scopes, scopes);
                    }
                    _ => prop_assert!(false, "the token made does not authorise"),
                }
                prop_assert!(!matches!(store.lookup(&other), Lookup::User(_)));
                prop_assert_eq!(store.list()[0].scopes, scopes);
            }
            Err(_) => prop_assert!(!want),
        }
    }
}
