//! Schemathesis (pinned, installed by tests/run) against a real daemon with a valid token:
//! `st run` with every check, every phase including the stateful one, must find nothing the
//! OpenAPI document does not say.
//!
//! Safety: Schemathesis creates sessions with generated bodies. The daemon under test runs
//! with `[session] own_commands = false` (no `cmd`, no exec: only its configured assistant
//! runs, and that is `cat`), a PATH holding `cat` alone, and a throwaway working and state
//! directory. No REST operation stops the daemon, so none is excluded.
//!
//! Its invalid-token probes come from 127.0.0.1 like everything else: the failed-auth limit
//! (429, `limits.failed_auth_per_minute`) and its hold on each wrong token's answer
//! (tests/security.rs) are set out of their way, as the document describes them.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::Daemon;

const TOKEN: &str = "schemathesis-token-0123456789abcdef";
/// The pinned version tests/run installs.
const VERSION: &str = "4.32.5";

#[test]
fn schemathesis_finds_nothing_the_document_does_not_say() {
    let st = Command::new("st").arg("--version").output();
    let version = st
        .as_ref()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        version.contains(VERSION),
        "Schemathesis {VERSION} is needed (tests/run installs it: pip install \
         schemathesis=={VERSION}); found {version:?} {:?}",
        st.err()
    );
    // A PATH with `cat` alone: the one program the daemon may start.
    let bin = tempfile::tempdir().unwrap();
    let cat = ["/usr/bin/cat", "/bin/cat"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("cat");
    std::os::unix::fs::symlink(cat, bin.path().join("cat")).unwrap();
    let config = r#"
[session]
own_commands = false
kill_grace = "1s"
reap_after_exit = "1s"

[limits]
failed_auth_per_minute = 1000000
failed_auth_delay_max = "0s"

[assistants.cat]
name = "Cat"
command = ["cat"]
"#;
    let d = Daemon::start_launch(config, |launch| {
        launch.args(["--token", TOKEN]).env("PATH", bin.path())
    });
    let work = tempfile::tempdir().unwrap();
    // A session's recording outlives the session on purpose (docs/protocol.md, recordings: kept
    // after `DELETE /api/sessions/{id}` until `DELETE /api/recordings/{id}` or `keep_days`).
    // Schemathesis' use-after-free check treats every path under a deleted one as gone, so its
    // stateful phase, when it happens to pair `DELETE /api/sessions/{id}` with a later
    // `GET /api/sessions/{id}/recording`, reports the documented 200. That one check is off for
    // that one operation; every other check, and that check everywhere else, stays on. All
    // checks are chosen in the file, not by `--checks all`: Schemathesis lets a check named on
    // its command line win over an operation's `enabled = false`.
    let st_config = work.path().join("schemathesis.toml");
    std::fs::write(
        &st_config,
        "[checks]\n\
         enabled = true\n\
         \n\
         [[operations]]\n\
         include-path = \"/api/sessions/{id}/recording\"\n\
         checks.use_after_free.enabled = false\n",
    )
    .unwrap();
    let started = Instant::now();
    // Bounded: 15 examples per operation and phase, a fixed seed (about 50 s on a busy
    // 2-core host; `timeout` ends it at 600 s whatever happens).
    let out = Command::new("timeout")
        .arg("600")
        .arg("st")
        .arg("--config-file")
        .arg(&st_config)
        .args(["run", &d.http("/api/openapi.json")])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", "15", "--seed", "38"])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--request-timeout", "30", "--workers", "2"])
        .current_dir(work.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("running st");
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    let tail: String = text
        .lines()
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("st run took {took:?}");
    assert!(
        out.status.success(),
        "Schemathesis found failures ({took:?}):\n{tail}\n{}\ndaemon log: {}",
        String::from_utf8_lossy(&out.stderr),
        d.log.display()
    );
    assert!(took < Duration::from_secs(600));
}
