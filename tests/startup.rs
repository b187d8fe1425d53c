//! Start-up: configuration errors stop the daemon with the file, line and reason; flags win
//! over the environment.

use std::process::{Command, Stdio};

fn ptyhub() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptyhub"));
    c.env_remove("PTYHUB_LISTEN").env_remove("PTYHUB_CONFIG");
    c
}

/// Starts the daemon with `text` as its config file (named by flag, or by `PTYHUB_CONFIG`),
/// expects it to refuse, and returns the file's path and what it printed on stderr.
fn refused_config(text: &str, via_env: bool) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, text).unwrap();
    let mut cmd = ptyhub();
    if via_env {
        cmd.env("PTYHUB_CONFIG", &cfg);
    } else {
        cmd.arg("--config").arg(&cfg);
    }
    let out = cmd.arg("--listen").arg("127.0.0.1:0").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (cfg.display().to_string(), err)
}

#[test]
fn an_unknown_key_stops_start_up_with_file_line_and_reason() {
    let (cfg, err) = refused_config("[session]\nrows = 24\nscrollbak_lines = 5\n", false);
    assert!(err.contains(&format!("{cfg}:3")), "{err}");
    assert!(err.contains("scrollbak_lines"), "{err}");
}

#[test]
fn a_bad_value_stops_start_up() {
    let (cfg, err) = refused_config("[session]\nkill_grace = \"soon\"\n", true);
    assert!(err.contains(&format!("{cfg}:2")), "{err}");
}

#[test]
fn flag_beats_environment_for_the_listen_address() {
    let mut daemon = ptyhub()
        .env("PTYHUB_LISTEN", "not-an-address")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(daemon.id() as i32);
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(daemon.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(
        line.starts_with("ptyhub listening on http://127.0.0.1:"),
        "{line}"
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success(), "SIGTERM exits 0");
    let bad = ptyhub()
        .env("PTYHUB_LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not-an-address"));
}
