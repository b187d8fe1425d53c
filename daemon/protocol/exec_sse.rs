//! The exec-over-SSE codec (docs/protocol.md section 13, seed 003): the `POST /api/exec` body, the
//! process's output bytes as text (a UTF-8 character cut between two reads is carried, not
//! replaced), and the `done` event's data. Pure: no I/O, no clock.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The shell a string `cmd` runs under.
pub const SHELL: &str = "/bin/sh";
/// Longest `timeout_sec` accepted (one day): a longer run belongs in a session.
pub const MAX_TIMEOUT_SEC: f64 = 86_400.0;

/// What `POST /api/exec` asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecRequest {
    /// Program and arguments (a string `cmd` became `/bin/sh -c LINE`).
    pub argv: Vec<String>,
    /// The command as the client wrote it, for the journal.
    pub shown: String,
    /// Environment added to the daemon's.
    pub env: BTreeMap<String, String>,
    /// Working directory; `None`: the daemon's.
    pub cwd: Option<String>,
    /// Killed (the whole group) after this long; `None`: no limit but the client's patience.
    pub timeout: Option<Duration>,
    /// Written to stdin, which is then closed (empty when not given).
    pub stdin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    cmd: Cmd,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    timeout_sec: Option<f64>,
    #[serde(default)]
    stdin: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Cmd {
    Line(String),
    Argv(Vec<String>),
}

/// A `timeout_sec` (of an SSE body or a pipe-mode query) checked: above 0, at most
/// [`MAX_TIMEOUT_SEC`].
pub fn timeout_sec(t: f64) -> Result<Duration, String> {
    if t > 0.0 && t <= MAX_TIMEOUT_SEC {
        Ok(Duration::from_secs_f64(t))
    } else {
        Err(format!(
            "timeout_sec must be more than 0 and at most {MAX_TIMEOUT_SEC}, not {t}"
        ))
    }
}

/// Parses and checks a request body; `Err` says what is wrong, for a 400.
pub fn parse_request(body: &[u8]) -> Result<ExecRequest, String> {
    let body: Body = serde_json::from_slice(body).map_err(|e| {
        format!(
            "bad exec request: {e} (expected {{\"cmd\": \"line\" | [\"prog\", \"arg\", …], \
             \"env\": {{}}, \"cwd\": \"…\", \"timeout_sec\": N, \"stdin\": \"…\"}})"
        )
    })?;
    let (argv, shown) = match body.cmd {
        Cmd::Line(line) if line.trim().is_empty() => return Err("cmd is empty".to_owned()),
        Cmd::Line(line) => (vec![SHELL.to_owned(), "-c".to_owned(), line.clone()], line),
        Cmd::Argv(argv) if argv.first().is_none_or(String::is_empty) => {
            return Err("cmd needs a program as its first element".to_owned())
        }
        Cmd::Argv(argv) => {
            let shown = argv.join(" ");
            (argv, shown)
        }
    };
    check_argv(&argv)?;
    for (k, v) in &body.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(format!("env name {k:?} or its value is not allowed"));
        }
    }
    let cwd = body.cwd.filter(|c| !c.is_empty());
    if cwd.as_deref().is_some_and(|c| c.contains('\0')) {
        return Err("cwd contains a NUL byte".to_owned());
    }
    let timeout = body.timeout_sec.map(timeout_sec).transpose()?;
    Ok(ExecRequest {
        argv,
        shown,
        env: body.env,
        cwd,
        timeout,
        stdin: body.stdin.unwrap_or_default(),
    })
}

/// Checks an argument array a client sent: no NUL byte anywhere (no program could get it).
pub fn check_argv(argv: &[String]) -> Result<(), String> {
    match argv.iter().find(|a| a.contains('\0')) {
        Some(a) => Err(format!("argument {a:?} contains a NUL byte")),
        None => Ok(()),
    }
}

/// Turns one stream's bytes, read in pieces, into text: invalid UTF-8 becomes U+FFFD, but a
/// character cut between two reads is kept until its end arrives, and so is a CR that may be
/// the first half of a CRLF (SSE treats CR, LF and CRLF alike as one line end).
#[derive(Debug, Default)]
pub struct TextCarry {
    carry: Vec<u8>,
}

impl TextCarry {
    /// The text of `bytes` after what was carried, minus what must wait for the next piece;
    /// borrowed from `bytes` when nothing was carried and they are valid (no copy).
    pub fn feed<'a>(&mut self, bytes: &'a [u8]) -> Cow<'a, str> {
        if self.carry.is_empty() {
            let keep = held_back(bytes);
            self.carry.extend_from_slice(&bytes[bytes.len() - keep..]);
            return lossy(&bytes[..bytes.len() - keep]);
        }
        let mut all = std::mem::take(&mut self.carry);
        all.extend_from_slice(bytes);
        let keep = held_back(&all);
        self.carry = all.split_off(all.len() - keep);
        Cow::Owned(lossy(&all).into_owned())
    }

    /// What is still carried, at the end of the stream (an unfinished character is invalid).
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.carry);
        String::from_utf8_lossy(&rest).into_owned()
    }
}

/// `bytes` as text, invalid sequences as U+FFFD. Valid text (nearly all output) is checked by
/// `from_utf8`, several times faster than the lossy decoder, which only runs when it must.
fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// How many bytes at the end of `bytes` wait for the next piece: an unfinished UTF-8
/// character, or a final CR.
fn held_back(bytes: &[u8]) -> usize {
    if bytes.last() == Some(&b'\r') {
        return 1;
    }
    // The last character starts at most 3 bytes from the end; a lead byte there whose sequence
    // is valid so far but short is carried.
    let from = bytes.len().saturating_sub(3);
    for i in (from..bytes.len()).rev() {
        if bytes[i] & 0xC0 != 0x80 {
            return match std::str::from_utf8(&bytes[i..]) {
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => bytes.len() - i,
                _ => 0,
            };
        }
    }
    0
}

/// The `done` event's data.
pub fn done_json(
    exit_code: Option<i32>,
    signal: Option<&str>,
    timed_out: bool,
    duration_ms: u64,
) -> String {
    #[derive(Serialize)]
    struct Done<'a> {
        exit_code: Option<i32>,
        signal: Option<&'a str>,
        timed_out: bool,
        duration_ms: u64,
    }
    let done = Done {
        exit_code,
        signal,
        timed_out,
        duration_ms,
    };
    // Numbers, booleans and a plain string: serialising cannot fail.
    serde_json::to_string(&done).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_cmd_runs_under_sh_and_an_array_never() {
        let r = parse_request(br#"{"cmd":"echo hi | wc -c"}"#).expect("ok");
        assert_eq!(r.argv, ["/bin/sh", "-c", "echo hi | wc -c"]);
        assert_eq!(r.shown, "echo hi | wc -c");
        let r = parse_request(
            br#"{"cmd":["printf","%s","a b"],"env":{"K":"V"},"cwd":"/tmp","timeout_sec":1.5,"stdin":"x"}"#,
        )
        .expect("ok");
        assert_eq!(r.argv, ["printf", "%s", "a b"]);
        assert_eq!(r.env.get("K").map(String::as_str), Some("V"));
        assert_eq!(r.cwd.as_deref(), Some("/tmp"));
        assert_eq!(r.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(r.stdin, "x");
    }

    #[test]
    fn bad_bodies_say_why() {
        for bad in [
            &b""[..],
            b"[]",
            b"{}",
            br#"{"cmd":""}"#,
            br#"{"cmd":"  "}"#,
            br#"{"cmd":[]}"#,
            br#"{"cmd":[""]}"#,
            br#"{"cmd":7}"#,
            br#"{"cmd":["a",1]}"#,
            br#"{"cmd":"a","bogus":1}"#,
            br#"{"cmd":"a","env":{"A=B":"c"}}"#,
            br#"{"cmd":"a","env":{"A":1}}"#,
            br#"{"cmd":["a\u0000b"]}"#,
            br#"{"cmd":"a","timeout_sec":0}"#,
            br#"{"cmd":"a","timeout_sec":-1}"#,
            br#"{"cmd":"a","timeout_sec":1e9}"#,
            br#"{"cmd":"a","timeout_sec":"5"}"#,
        ] {
            let e = parse_request(bad).expect_err(&String::from_utf8_lossy(bad));
            assert!(!e.is_empty());
        }
    }

    #[test]
    fn text_carries_cut_characters_and_crs() {
        let mut t = TextCarry::default();
        let euro = "€".as_bytes();
        assert_eq!(t.feed(&[b'a', euro[0]]), "a");
        assert_eq!(t.feed(&euro[1..2]), "");
        assert_eq!(t.feed(&[euro[2], b'b', b'\r']), "€b");
        assert_eq!(t.feed(b"\nc"), "\r\nc");
        // Invalid bytes are replaced, not carried.
        assert_eq!(t.feed(b"\xff\xfeok"), "\u{fffd}\u{fffd}ok");
        assert_eq!(t.feed(&[0xF0, 0x9F]), "");
        assert_eq!(t.finish(), "\u{fffd}");
        assert_eq!(t.finish(), "");
        // A lone continuation byte at the end is invalid at once.
        assert_eq!(t.feed(b"x\x80"), "x\u{fffd}");
    }

    #[test]
    fn done_data() {
        assert_eq!(
            done_json(Some(0), None, false, 42),
            r#"{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":42}"#
        );
        assert_eq!(
            done_json(Some(137), Some("SIGKILL"), true, 1),
            r#"{"exit_code":137,"signal":"SIGKILL","timed_out":true,"duration_ms":1}"#
        );
    }
}
