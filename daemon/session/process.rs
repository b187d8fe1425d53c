//! The session's program: spawning it on a fresh PTY in its own session, reporting how it
//! ended, and signalling every process that belongs to it.
//!
//! A process belongs to a session when its kernel session id is the program's pid, or when
//! its environment carries `PTYHUB_SESSION={uuid}` (that also catches a background job that
//! called `setsid` to escape). Ending a session signals all of them, so nothing is orphaned.

use std::collections::BTreeMap;
use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use uuid::Uuid;

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
        source: pty_process::Error,
    },
}

/// A running program and the master side of its PTY.
pub struct Spawned {
    /// The program; waiting on it reaps it.
    pub child: tokio::process::Child,
    /// Its pid, which is also its session id and process group id.
    pub pid: i32,
    /// The PTY master, read half (output).
    pub reader: pty_process::OwnedReadPty,
    /// The PTY master, write half (input and resize).
    pub writer: pty_process::OwnedWritePty,
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
    let (pty, pts) = pty_process::open().map_err(fail)?;
    pty.resize(pty_process::Size::new(spec.rows, spec.cols))
        .map_err(fail)?;
    let cmd = pty_process::Command::new(program)
        .args(args)
        .envs(spec.env)
        .env("TERM", "xterm-256color")
        .env("COLORTERM", "truecolor")
        .env("NCURSES_NO_UTF8_ACS", "1")
        .env(SESSION_ENV, spec.session.to_string())
        .current_dir(spec.cwd);
    // `pts` is consumed: the daemon keeps no handle on the terminal side, so the master
    // reads EOF/EIO once every process of the session has let go of it.
    let child = cmd.spawn(pts).map_err(fail)?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| fail(std::io::Error::other("child has no pid").into()))?;
    let (reader, writer) = pty.into_split();
    Ok(Spawned {
        child,
        pid,
        reader,
        writer,
    })
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
    /// Converts a wait status.
    pub fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Self { code, signal: None },
            (None, Some(sig)) => Self {
                code: 128 + sig,
                signal: Some(
                    Signal::try_from(sig)
                        .map(|s| s.as_str().to_owned())
                        .unwrap_or_else(|_| format!("signal {sig}")),
                ),
            },
            (None, None) => Self {
                code: -1,
                signal: None,
            },
        }
    }
}

/// The pids of every process of the kernel session led by `leader`, and of every process
/// marked with `session` when given.
pub fn session_pids(leader: i32, session: Option<Uuid>) -> Vec<i32> {
    let marker = session.map(|s| format!("{SESSION_ENV}={s}"));
    let own = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own)
        .filter(|&pid| {
            kernel_session(pid) == Some(leader)
                || marker.as_deref().is_some_and(|m| has_marker(pid, m))
        })
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
    let pids = session_pids(leader, session);
    for &pid in &pids {
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
    use super::*;

    #[test]
    fn exit_info_from_code_and_signal() {
        use std::os::unix::process::ExitStatusExt;
        let e = ExitInfo::from_status(std::process::ExitStatus::from_raw(3 << 8));
        assert_eq!(
            e,
            ExitInfo {
                code: 3,
                signal: None
            }
        );
        let e = ExitInfo::from_status(std::process::ExitStatus::from_raw(9));
        assert_eq!(e.code, 137);
        assert_eq!(e.signal.as_deref(), Some("SIGKILL"));
    }

    #[test]
    fn kernel_session_of_self_is_readable() {
        assert!(kernel_session(std::process::id() as i32).is_some());
    }
}
