//! The session's program: spawning it on a fresh PTY in its own session, reporting how it
//! ended, and signalling every process that belongs to it.
//!
//! A process belongs to a session when its kernel session id is the program's pid, or when
//! its environment carries `PTYHUB_SESSION={uuid}` (that also catches a background job that
//! called `setsid` to escape). Ending a session signals all of them, so nothing is orphaned.

use std::collections::BTreeMap;
use std::path::Path;

use std::os::fd::{AsFd, OwnedFd};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rustix::process::{waitid, PidfdFlags, WaitId, WaitIdOptions, WaitIdStatus};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::pty::PtyMaster;

/// The terminal type every program is told it runs in.
pub const TERM: &str = "xterm-256color";

/// The environment variable that marks every process of a session.
pub const SESSION_ENV: &str = "PTYHUB_SESSION";

/// Why a program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The argument array was empty.
    #[error("the assistant has an empty command")]
    EmptyCommand,
    /// The working directory is missing or not a directory.
    #[error("working directory {0} does not exist or is not a directory")]
    BadWorkDir(String),
    /// Opening the PTY or starting the program failed.
    #[error("could not start `{program}`: {source}")]
    Spawn {
        /// The program that failed.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A running program and the master side of its PTY: a pid and a descriptor, nothing tied to
/// this process's runtime, so both can be handed over and adopted.
pub struct Spawned {
    /// Its pid, which is also its session id and process group id.
    pub pid: i32,
    /// Reports its exit (and reaps it).
    pub exit: ExitWatch,
    /// The PTY master.
    pub pty: PtyMaster,
}

/// What to run and where.
pub struct SpawnSpec<'a> {
    /// Program and arguments, never split or passed through a shell.
    pub argv: &'a [String],
    /// Extra environment on top of the daemon's.
    pub env: &'a BTreeMap<String, String>,
    /// Working directory.
    pub cwd: &'a Path,
    /// Initial PTY size.
    pub rows: u16,
    /// Initial PTY size.
    pub cols: u16,
    /// The session, exported as `PTYHUB_SESSION`.
    pub session: Uuid,
}

/// Starts the program on a new PTY, as leader of a new session with the PTY as its
/// controlling terminal.
pub fn spawn(spec: &SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
    let (program, args) = spec.argv.split_first().ok_or(SpawnError::EmptyCommand)?;
    if !spec.cwd.is_dir() {
        return Err(SpawnError::BadWorkDir(spec.cwd.display().to_string()));
    }
    let fail = |source| SpawnError::Spawn {
        program: program.clone(),
        source,
    };
    let (pty, pts) = PtyMaster::open(spec.rows, spec.cols).map_err(fail)?;
    let cmd = pty_process::blocking::Command::new(program)
        .args(args)
        .envs(spec.env)
        .env("TERM", TERM)
        .env("COLORTERM", "truecolor")
        .env("NCURSES_NO_UTF8_ACS", "1")
        .env(SESSION_ENV, spec.session.to_string())
        .current_dir(spec.cwd);
    let cmd = crate::sys::clean_mask_pty(cmd);
    // `pts` is consumed: the daemon keeps no handle on the terminal side, so the master
    // reads EOF/EIO once every process of the session has let go of it. The std `Child` is
    // dropped unwaited (that neither kills nor reaps): the exit is watched by pid.
    let child = cmd.spawn(pts).map_err(|e| fail(std::io::Error::other(e)))?;
    let pid = i32::try_from(child.id())
        .map_err(|_| fail(std::io::Error::other("the child's pid is out of range")))?;
    let exit = ExitWatch::new(pid).map_err(fail)?;
    Ok(Spawned { pid, exit, pty })
}

/// How a program ended, as the protocol reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit status, or 128 + the signal number.
    pub code: i32,
    /// The signal's name when a signal ended it.
    pub signal: Option<String>,
}

impl ExitInfo {
    /// A program that called `exit(code)`.
    pub fn exited(code: i32) -> Self {
        Self { code, signal: None }
    }

    /// A program ended by signal `sig`.
    pub fn killed(sig: i32) -> Self {
        Self {
            code: 128 + sig,
            signal: Some(
                Signal::try_from(sig)
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_else(|_| format!("signal {sig}")),
            ),
        }
    }

    /// Converts what `waitid` reported.
    fn from_waitid(status: &WaitIdStatus) -> Self {
        match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => Self::exited(code),
            (None, Some(sig)) => Self::killed(sig),
            (None, None) => Self::exited(-1),
        }
    }
}

/// Waits for a child's exit by its pid and reaps it: through a pidfd on the reactor where the
/// kernel has them (Linux 5.3+), else with a blocking `waitid` on a thread of its own.
pub struct ExitWatch(Watch);

enum Watch {
    PidFd(AsyncFd<OwnedFd>),
    Thread(oneshot::Receiver<std::io::Result<ExitInfo>>),
}

impl ExitWatch {
    /// Watches `pid`, which must be a child of this process.
    pub fn new(pid: i32) -> std::io::Result<Self> {
        let id = rustix::process::Pid::from_raw(pid)
            .ok_or_else(|| std::io::Error::other("pid 0 is not a child"))?;
        match rustix::process::pidfd_open(id, PidfdFlags::NONBLOCK) {
            Ok(fd) => Ok(Self(Watch::PidFd(crate::sys::register(fd)?))),
            Err(rustix::io::Errno::NOSYS) => {
                let (tx, rx) = oneshot::channel();
                std::thread::Builder::new()
                    .name(format!("wait-{pid}"))
                    .spawn(move || {
                        let status = waitid(WaitId::Pid(id), WaitIdOptions::EXITED);
                        let _ = tx.send(match status {
                            Ok(Some(status)) => Ok(ExitInfo::from_waitid(&status)),
                            Ok(None) => Err(std::io::Error::other("waitid reported nothing")),
                            Err(e) => Err(e.into()),
                        });
                    })?;
                Ok(Self(Watch::Thread(rx)))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Resolves once the program has exited, with how; reaps it. Cancel-safe.
    pub async fn wait(&mut self) -> std::io::Result<ExitInfo> {
        match &mut self.0 {
            Watch::PidFd(fd) => loop {
                let mut ready = fd.readable().await?;
                let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
                match waitid(WaitId::PidFd(fd.get_ref().as_fd()), options)? {
                    Some(status) => return Ok(ExitInfo::from_waitid(&status)),
                    None => ready.clear_ready(),
                }
            },
            Watch::Thread(rx) => rx
                .await
                .unwrap_or_else(|_| Err(std::io::Error::other("the wait thread died"))),
        }
    }
}

/// The pids of every running process of the kernel session led by `leader`, and of every one
/// marked with `session` when given.
pub fn session_pids(leader: i32, session: Option<Uuid>) -> Vec<i32> {
    let marker = session.map(|s| format!("{SESSION_ENV}={s}"));
    pids_where(|pid| {
        (kernel_session(pid) == Some(leader)
            || marker.as_deref().is_some_and(|m| has_marker(pid, m)))
            && !ended(pid)
    })
}

/// The pids of every running process in process group `group`, and of every one whose
/// environment holds `marker` (`NAME=value`): what an exec leaves behind, even a process that
/// left the group.
pub fn group_pids(group: i32, marker: &str) -> Vec<i32> {
    pids_where(|pid| (stat_field(pid, 2) == Some(group) || has_marker(pid, marker)) && !ended(pid))
}

/// Whether a process has ended and only waits for its parent to reap it (a zombie): no
/// signal reaches it, so a stop that counted it waited its whole grace for nothing (a live
/// upgrade held for `session.kill_grace` twice by an exec killed with its group).
fn ended(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|at| stat[at + 1..].split_whitespace().next())
            .is_some_and(|state| matches!(state, "Z" | "X"))
    })
}

/// The pids of the children of `parent` (their parent pid, `ppid`, is `parent`).
pub fn children(parent: i32) -> Vec<i32> {
    pids_where(|pid| stat_field(pid, 1) == Some(parent))
}

/// Every process but this one that `keep` picks.
fn pids_where(keep: impl Fn(i32) -> bool) -> Vec<i32> {
    let own = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own && keep(pid))
        .collect()
}

/// A numeric field of /proc/PID/stat, counted from `state` (0) after the command name, which
/// may hold spaces and parentheses and so ends at the last ')'.
fn stat_field(pid: i32, index: usize) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(index)?.parse().ok()
}

/// The kernel session id of a process (state ppid pgrp session).
fn kernel_session(pid: i32) -> Option<i32> {
    stat_field(pid, 3)
}

/// The foreground process group of the terminal controlled by `leader`'s session (`tpgid`).
pub fn foreground_group(leader: i32) -> Option<i32> {
    stat_field(leader, 5).filter(|&g| g > 0)
}

fn has_marker(pid: i32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|var| var == marker.as_bytes()))
        .unwrap_or(false)
}

/// Sends `signal` to every process of the session (see [`session_pids`]); returns how many
/// were signalled.
pub fn signal_session(leader: i32, session: Option<Uuid>, signal: Signal) -> usize {
    signal_session_but(leader, session, signal, None)
}

/// [`signal_session`], but for the process `spared` when there is one.
pub fn signal_session_but(
    leader: i32,
    session: Option<Uuid>,
    signal: Signal,
    spared: Option<i32>,
) -> usize {
    let mut pids = session_pids(leader, session);
    pids.retain(|&pid| Some(pid) != spared);
    signal_pids(&pids, signal)
}

/// Sends `signal` to every process of an exec's group or carrying its marker (see
/// [`group_pids`]); returns how many were signalled.
pub fn signal_group(group: i32, marker: &str, signal: Signal) -> usize {
    signal_pids(&group_pids(group, marker), signal)
}

fn signal_pids(pids: &[i32], signal: Signal) -> usize {
    for &pid in pids {
        let _ = kill(Pid::from_raw(pid), signal);
        if signal == Signal::SIGHUP {
            // A stopped job would sit on SIGHUP forever.
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
    pids.len()
}

#[cfg(test)]
mod tests {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use rustix::process::{waitid, WaitId, WaitIdOptions};

    use super::{children, ended, group_pids, kernel_session, ExitInfo, ExitWatch};

    #[test]
    fn exit_info_from_code_and_signal() {
        assert_eq!(
            ExitInfo::exited(3),
            ExitInfo {
                code: 3,
                signal: None
            }
        );
        let e = ExitInfo::killed(9);
        assert_eq!(e.code, 137);
        assert_eq!(e.signal.as_deref(), Some("SIGKILL"));
    }

    /// The watch reports a real child's exit code and signal, through a pidfd here.
    // The children are reaped by the watch, which is what is under test, not by `Child::wait`.
    #[allow(clippy::zombie_processes)]
    #[tokio::test]
    async fn exit_watch_reports_and_reaps() {
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 7"])
            .spawn()
            .expect("sh runs");
        let pid = child.id() as i32;
        let mut watch = ExitWatch::new(pid).expect("watch");
        assert_eq!(watch.wait().await.expect("exit"), ExitInfo::exited(7));
        // Reaped: the pid is no longer this process's child.
        assert!(waitid(
            WaitId::Pid(rustix::process::Pid::from_raw(pid).expect("pid")),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG
        )
        .is_err());
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let mut watch = ExitWatch::new(child.id() as i32).expect("watch");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("kill");
        assert_eq!(watch.wait().await.expect("exit"), ExitInfo::killed(15));
    }

    #[test]
    fn children_are_found_by_their_parent_pid() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let own = std::process::id() as i32;
        assert!(children(own).contains(&(child.id() as i32)));
        let _ = child.kill();
        let _ = child.wait();
        assert!(!children(own).contains(&(child.id() as i32)));
    }

    #[test]
    fn kernel_session_of_self_is_readable() {
        assert!(kernel_session(std::process::id() as i32).is_some());
    }

    /// A killed child that nobody reaped yet is no longer counted in its group: signalling it
    /// does nothing, and a stop that waited for it waited its whole grace.
    // Reaped below with `wait`, after the zombie was looked at.
    #[allow(clippy::zombie_processes)]
    #[test]
    fn a_zombie_is_not_counted_in_its_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        assert_eq!(group_pids(pid, "PTYHUB_TEST_NO_SUCH_MARKER=1"), vec![pid]);
        kill(Pid::from_raw(pid), Signal::SIGKILL).expect("kill");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !ended(pid) {
            assert!(std::time::Instant::now() < deadline, "no zombie in 10 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(group_pids(pid, "PTYHUB_TEST_NO_SUCH_MARKER=1").is_empty());
        child.wait().expect("reaped");
    }
}
