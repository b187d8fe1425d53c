//! The documents a clone reads are kept true to the tree: every route of the table is in the
//! wire contract (docs/protocol.md), and every repository path ARCHITECTURE.md, the README and
//! the contract cite exists. The OpenAPI document is checked against the same table in the
//! http module's unit tests.

use std::path::Path;

use ptyhub::http::routes::{ANY_METHOD, ROUTES};

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"))
}

/// Whether `c` can continue a path, so that `GET /api/sessions` is not found inside
/// `GET /api/sessions/{id}`.
fn continues_path(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '{' | '}' | '_' | '-' | '.')
}

/// Whether `text` holds `needle` as a whole: not followed by more of a path.
fn holds(text: &str, needle: &str) -> bool {
    text.match_indices(needle)
        .any(|(at, _)| !text[at + needle.len()..].starts_with(continues_path))
}

/// Whether `text` holds `pattern` after some method: `GET /healthz`, `POST /healthz`, ….
fn holds_with_any_method(text: &str, pattern: &str) -> bool {
    let after_method = |at: usize| {
        let before = text[..at].strip_suffix(' ').unwrap_or("");
        let method = before
            .rsplit(|c: char| !c.is_ascii_uppercase())
            .next()
            .unwrap_or("");
        !method.is_empty()
    };
    text.match_indices(pattern)
        .any(|(at, _)| after_method(at) && !text[at + pattern.len()..].starts_with(continues_path))
}

#[test]
fn every_route_is_in_the_protocol() {
    let protocol = read("docs/protocol.md");
    let mut missing = Vec::new();
    for route in ROUTES {
        for method in route.methods {
            let found = if *method == ANY_METHOD {
                holds_with_any_method(&protocol, route.pattern)
            } else {
                holds(&protocol, &format!("{method} {}", route.pattern))
            };
            if !found {
                missing.push(format!("{method} {}", route.pattern));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "routes docs/protocol.md does not name (as `METHOD /path`): {missing:?}"
    );
}

/// The folders of the repository a document may point into.
const ROOTS: &[&str] = &[
    "daemon/", "static/", "tests/", "docs/", "benches/", "config/", "systemd/", "debian/",
];

/// Inline code spans of a Markdown text, fenced code blocks left out (a span may run over a
/// line break, as Markdown allows).
fn code_spans(markdown: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The repository path a code span cites, if it cites one: its first word, when that starts
/// at one of [`ROOTS`] and is not a pattern (`tests/*.rs`, `benches/load/{name}.rs`).
fn cited_path(span: &str) -> Option<&str> {
    let word = span.split_whitespace().next()?;
    let word = word.trim_end_matches([',', ';', ':', ')']);
    let is_path = ROOTS.iter().any(|r| word.starts_with(r));
    let is_pattern = word.contains(['*', '{', '<', '…']);
    (is_path && !is_pattern).then_some(word)
}

/// Paths the repository ignores (`/tests/artifacts` in `.gitignore`): where runs write their
/// output, cited as such, never a file of the clone.
fn ignored(path: &str) -> bool {
    read(".gitignore")
        .lines()
        .filter_map(|l| l.trim().strip_prefix('/'))
        .any(|prefix| path.starts_with(prefix))
}

#[test]
fn every_cited_path_exists() {
    let mut missing = Vec::new();
    for doc in ["ARCHITECTURE.md", "README.md", "docs/protocol.md"] {
        for span in code_spans(&read(doc)) {
            let Some(path) = cited_path(&span) else {
                continue;
            };
            if !root().join(path).exists() && !ignored(path) {
                missing.push(format!("{doc}: `{path}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths cited that are not in the repository: {missing:#?}"
    );
}

#[test]
fn the_checks_read_markdown_as_meant() {
    assert!(holds("`GET /api/sessions` lists", "GET /api/sessions"));
    assert!(!holds("`GET /api/sessions/{id}`", "GET /api/sessions"));
    assert!(holds("`GET /`: the home page", "GET /"));
    assert!(!holds("`GET /api/version`", "GET /"));
    assert!(holds_with_any_method("`GET /healthz`", "/healthz"));
    assert!(!holds_with_any_method(
        "outside the base path, /healthz",
        "/healthz"
    ));
    let spans = code_spans(
        "a `daemon/lib.rs` b\n```sh\ntests/run\n```\n`cargo test --test\nx` `tests/run`",
    );
    assert_eq!(
        spans,
        ["daemon/lib.rs", "cargo test --test\nx", "tests/run"]
    );
    assert_eq!(
        cited_path("tests/browser/run.sh [files]"),
        Some("tests/browser/run.sh")
    );
    assert_eq!(cited_path("tests/*.rs"), None);
    assert_eq!(cited_path("cargo bench"), None);
    assert!(ignored("tests/artifacts/browser/"));
}
