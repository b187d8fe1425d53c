//! The command receiver: `[notify] command` run once per transition, in a process group of its
//! own, with the event JSON on its stdin; the whole group is killed when its time is up.

use std::process::Stdio;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::delivery::Attempt;

/// Runs `argv` once with `json` on its stdin. Dropping the future (its time is up, or the
/// daemon stops) kills the command's process group.
pub(super) async fn run(argv: &[String], json: &[u8]) -> Attempt {
    let Some((program, args)) = argv.split_first() else {
        return Attempt::Refused("the command is empty".to_owned());
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        // Not found or not executable: trying again will not help.
        Err(e) => return Attempt::Refused(format!("cannot run {program}: {e}")),
    };
    let mut group = Group(
        child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw),
    );
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its stdin closes it early: that is its business.
        let _ = stdin.write_all(json).await;
        let _ = stdin.write_all(b"\n").await;
    }
    let status = child.wait().await;
    // It exited by itself: what it left running in the background may go on.
    group.0 = None;
    match status {
        Ok(s) if s.success() => Attempt::Sent,
        Ok(s) => Attempt::Retry(format!("{program} failed ({s})"), None),
        Err(e) => Attempt::Retry(format!("waiting for {program}: {e}"), None),
    }
}

/// The command's process group, killed when this is dropped while it holds it (before the
/// command exited).
struct Group(Option<Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        // The group is the child's own (process_group(0)), and the child is not reaped yet
        // (its `Child`, declared before this guard, is dropped after it), so the id is still
        // ours to signal.
        if let Some(pid) = self.0 {
            let _ = killpg(pid, Signal::SIGKILL);
        }
    }
}
