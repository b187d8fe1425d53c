//! One exec process: started on pipes in a process group of its own, its output read only
//! when the caller asks (so a client that does not read stalls only its own process), and
//! ended with its whole group: SIGTERM, SIGKILL after the grace period (the session's
//! [`StopLadder`] without SIGHUP: an exec has no terminal to close), always reaped.
//!
//! Every process of an exec also carries `PTYHUB_EXEC={daemon pid}-{id}` in its environment,
//! so one that left the group (`setsid`) is still found and ended with it.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::protocol::pipe::Stream;
use crate::session::process::{signal_group, SpawnError};
use crate::session::{ExitInfo, StopLadder};

/// The environment variable that marks every process of an exec.
pub const EXEC_ENV: &str = "PTYHUB_EXEC";
/// Most bytes read from one pipe at a time: one message to the client. The output pipes are
/// made this large too (Linux's default is 64 KiB), so a fast writer is read in a quarter of
/// the wake-ups; what one exec can hold in its pipes stays bounded (twice this).
pub const READ_BYTES: usize = 256 * 1024;
/// After the program exits, how long output still arriving from processes it left holding its
/// pipes is passed on before they are ended.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// What to run and where.
pub struct ExecSpec<'a> {
    /// Program and arguments, never split or passed through a shell.
    pub argv: &'a [String],
    /// Environment added to the daemon's.
    pub env: &'a BTreeMap<String, String>,
    /// Working directory; `None`: the daemon's.
    pub cwd: Option<&'a Path>,
    /// The exec's id, exported (after the daemon's pid) as `PTYHUB_EXEC`.
    pub id: u64,
}

/// A running exec process and its pipes.
pub struct ExecChild {
    /// Its pid, which is also its process group id.
    pid: i32,
    /// `PTYHUB_EXEC={daemon pid}-{id}`.
    marker: String,
    child: tokio::process::Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    /// Read buffers, one per stream: a piece is split off each read and the memory is taken
    /// back once the piece has been sent, instead of a new allocation per read.
    bufs: [BytesMut; 2],
    /// How it ended, once reaped.
    exit: Option<ExitInfo>,
    /// When the program exited: output is drained until then plus [`DRAIN_AFTER_EXIT`].
    drain_until: Option<tokio::time::Instant>,
}

/// Starts the program, stdin, stdout and stderr on pipes, leading a new process group.
pub fn spawn(spec: &ExecSpec<'_>) -> Result<ExecChild, SpawnError> {
    let (program, args) = spec.argv.split_first().ok_or(SpawnError::EmptyCommand)?;
    if let Some(cwd) = spec.cwd {
        if !cwd.is_dir() {
            return Err(SpawnError::BadWorkDir(cwd.display().to_string()));
        }
    }
    // The daemon's pid too: another daemon's exec of the same number is not this one.
    let value = format!("{}-{}", std::process::id(), spec.id);
    let marker = format!("{EXEC_ENV}={value}");
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(spec.env)
        .env(EXEC_ENV, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // A safety net only: every path that ends an exec ends its group first and reaps it.
        .kill_on_drop(true);
    crate::sys::clean_mask(&mut cmd);
    if let Some(cwd) = spec.cwd {
        cmd.current_dir(cwd);
    }
    let fail = |source| SpawnError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = cmd.spawn().map_err(fail)?;
    // Best effort: an unprivileged process may be held below this (`pipe-max-size`).
    if let Some(out) = &child.stdout {
        let _ = rustix::pipe::fcntl_setpipe_size(out, READ_BYTES);
    }
    if let Some(err) = &child.stderr {
        let _ = rustix::pipe::fcntl_setpipe_size(err, READ_BYTES);
    }
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| fail(std::io::Error::other("the child has no pid")))?;
    Ok(ExecChild {
        pid,
        marker,
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        child,
        bufs: [BytesMut::new(), BytesMut::new()],
        exit: None,
        drain_until: None,
    })
}

/// What happened next.
#[derive(Debug)]
pub enum Event {
    /// Bytes one stream carried: the stream's tag byte first ([`Stream::tag`]), then the
    /// bytes (never none).
    Output(Stream, Bytes),
    /// The program has exited and its output is all read (or given up on after the drain).
    Exited(ExitInfo),
}

impl ExecChild {
    /// The pid (and process group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its stdin, for the task that writes it; dropping it closes stdin.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The next output, or the exit once the output is done. Only reads what the caller asks
    /// for: a caller that stops calling leaves the pipes to fill and the program to wait.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Event {
        loop {
            if let Some(exit) = &self.exit {
                let drained = self.stdout.is_none() && self.stderr.is_none();
                let late = self
                    .drain_until
                    .is_some_and(|t| t <= tokio::time::Instant::now());
                if drained || late {
                    return Event::Exited(exit.clone());
                }
            }
            let drain_until = self.drain_until;
            let exited = self.exit.is_some();
            let [out_buf, err_buf] = &mut self.bufs;
            tokio::select! {
                got = read(&mut self.stdout, out_buf, Stream::Stdout), if self.stdout.is_some() => {
                    if let Some(bytes) = got {
                        return Event::Output(Stream::Stdout, bytes);
                    }
                }
                got = read(&mut self.stderr, err_buf, Stream::Stderr), if self.stderr.is_some() => {
                    if let Some(bytes) = got {
                        return Event::Output(Stream::Stderr, bytes);
                    }
                }
                status = self.child.wait(), if !exited => {
                    self.exit = Some(match status {
                        Ok(status) => exit_info(status),
                        Err(_) => ExitInfo::exited(-1),
                    });
                    self.drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                }
                _ = sleep_until(drain_until), if drain_until.is_some() => {}
            }
        }
    }

    /// Sends `signal` to the process group, while the program runs.
    pub fn signal(&self, signal: Signal) -> nix::Result<()> {
        if self.exit.is_some() {
            return Err(nix::errno::Errno::ESRCH);
        }
        killpg(Pid::from_raw(self.pid), signal)
    }

    /// Ends the program and its group: SIGTERM, then SIGKILL after `grace`; reaps it. Returns
    /// how it ended (it may have exited by itself meanwhile).
    pub async fn terminate(&mut self, grace: Duration) -> ExitInfo {
        if let Some(exit) = &self.exit {
            return exit.clone();
        }
        let mut ladder = StopLadder::without_terminal(grace);
        let what = format!("exec {}", self.pid);
        let status = loop {
            let Some(rung) = ladder.next_rung(&what) else {
                break self.child.wait().await;
            };
            self.signal_all(rung.signal);
            match rung.wait {
                Some(wait) => {
                    if let Ok(status) = tokio::time::timeout(wait, self.child.wait()).await {
                        break status;
                    }
                }
                None => break self.child.wait().await,
            }
        };
        let exit = status
            .map(exit_info)
            .unwrap_or_else(|_| ExitInfo::exited(-1));
        self.exit = Some(exit.clone());
        self.drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
        exit
    }

    /// Ends what the program left behind (its group, and any process with its marker):
    /// SIGTERM, then SIGKILL after `grace` to those still there. For after the exit.
    pub async fn end_leftovers(self, grace: Duration) {
        let (pid, marker) = (self.pid, self.marker.clone());
        // The pipes close: a leftover blocked writing to them gets EPIPE rather than waiting.
        drop(self);
        let mut ladder = StopLadder::without_terminal(grace);
        let what = format!("what exec {pid} left behind");
        while let Some(rung) = ladder.next_rung(&what) {
            let m = marker.clone();
            let found = move || signal_group(pid, &m, rung.signal);
            // The scan reads /proc: off the runtime's threads.
            if tokio::task::spawn_blocking(found).await.unwrap_or(0) == 0 {
                return;
            }
            match rung.wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return,
            }
        }
    }

    fn signal_all(&self, signal: Signal) {
        // The group first, at once; then a scan for processes that left it.
        let _ = killpg(Pid::from_raw(self.pid), signal);
        signal_group(self.pid, &self.marker, signal);
    }
}

impl Drop for ExecChild {
    fn drop(&mut self) {
        if self.exit.is_none() {
            // Dropped while running (a task cancelled mid-way): nothing may outlive it. The
            // leader is killed and reaped by tokio (`kill_on_drop`).
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
            signal_group(self.pid, &self.marker, Signal::SIGKILL);
        }
    }
}

/// Reads the next piece of one pipe, after its tag byte; `None` (and the pipe closed) at its
/// end. Cancel-safe: nothing is read unless it completes.
async fn read<R: tokio::io::AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut BytesMut,
    stream: Stream,
) -> Option<Bytes> {
    let r = pipe.as_mut()?;
    if buf.is_empty() {
        // Takes back the memory of the pieces already sent and dropped.
        buf.reserve(READ_BYTES + 1);
        buf.extend_from_slice(&[stream.tag()]);
    }
    match r.read_buf(buf).await {
        Ok(n) if n > 0 => Some(buf.split().freeze()),
        _ => {
            *pipe = None;
            None
        }
    }
}

async fn sleep_until(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn exit_info(status: std::process::ExitStatus) -> ExitInfo {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitInfo::exited(code),
        (None, Some(sig)) => ExitInfo::killed(sig),
        (None, None) => ExitInfo::exited(-1),
    }
}
