//! The `ptyhub` binary as a child process, shared by the integration tests (`tests/common`) and
//! the load generator (`benches/load.rs`, as a `#[path]` module): started on 127.0.0.1:0 with a
//! config file, its address read from the first line it prints on stdout, its stderr written to
//! a log file, and stopped with SIGTERM, then SIGKILL when it does not exit in time (also when
//! dropped). Nothing here depends on either harness; each adds its own checks on top.
#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The daemon binary cargo built for the target including this file: the debug build for the
/// integration tests, the release build for `cargo bench`.
pub const CARGO_BIN: &str = env!("CARGO_BIN_EXE_ptyhub");

/// How long a dropped daemon gets to exit after SIGTERM before it is SIGKILLed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// The first line the daemon prints once it listens: `ptyhub listening on http://ADDR/`
/// (`https://` with `[tls]`, the base path before the last `/` with `[server] base_path`).
const LISTENING: &str = "ptyhub listening on ";

/// How to start a daemon: the binary, its config file, its working directory and log file, and
/// whatever else it gets (flags, environment, a wrapper that execs it).
pub struct Launch {
    bin: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    wrapper: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    ready_timeout: Duration,
}

impl Launch {
    /// `bin --listen 127.0.0.1:0 --config CONFIG`, run in `dir`, its stderr in `log`.
    pub fn new(
        bin: impl Into<PathBuf>,
        config: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        log: impl Into<PathBuf>,
    ) -> Launch {
        Launch {
            bin: bin.into(),
            config: config.into(),
            dir: dir.into(),
            log: log.into(),
            wrapper: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            ready_timeout: Duration::from_secs(30),
        }
    }

    /// Runs the daemon as the last argument of `wrapper` (e.g. `prlimit --nofile=64:64`), which
    /// must exec it, so the child's pid is the daemon's.
    pub fn wrapper<I, S>(mut self, wrapper: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.wrapper = wrapper.into_iter().map(|a| a.as_ref().into()).collect();
        self
    }

    /// More flags after `--listen` and `--config`.
    pub fn args<I, S>(mut self, args: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Launch {
        self.env
            .push((key.as_ref().into(), Some(value.as_ref().into())));
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Launch {
        self.env.push((key.as_ref().into(), None));
        self
    }

    /// How long the daemon gets to print its address (default 30 s).
    pub fn ready_timeout(mut self, limit: Duration) -> Launch {
        self.ready_timeout = limit;
        self
    }

    /// Starts the daemon and waits until it listens. On failure it is killed, and the error
    /// says why, with the end of its log.
    pub fn spawn(self) -> Result<Process> {
        let stderr = File::create(&self.log)
            .with_context(|| format!("creating the daemon log {}", self.log.display()))?;
        let mut cmd = match self.wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(&self.bin);
                cmd
            }
            None => Command::new(&self.bin),
        };
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--config")
            .arg(&self.config)
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (key, value) in &self.env {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        let program = self.wrapper.first().map_or(self.bin.as_os_str(), |w| w);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", Path::new(program).display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let printed = Arc::new(Mutex::new(Vec::new()));
        let rest = printed.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(line) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining so the daemon never blocks on a full pipe.
            for line in lines.map_while(std::io::Result::ok) {
                rest.lock().unwrap().push(line);
            }
        });
        let limit = self.ready_timeout;
        let addr = match rx.recv_timeout(limit) {
            Ok(Ok(line)) => line
                .trim()
                .strip_prefix(LISTENING)
                .and_then(|s| {
                    s.strip_prefix("http://")
                        .or_else(|| s.strip_prefix("https://"))
                })
                .and_then(|s| s.split('/').next())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| anyhow!("unexpected first line from the daemon: {line:?}")),
            Ok(Err(e)) => Err(anyhow!("reading the daemon's stdout: {e}")),
            Err(RecvTimeoutError::Disconnected) => Err(anyhow!(
                "the daemon closed its stdout without printing its address"
            )),
            Err(RecvTimeoutError::Timeout) => {
                Err(anyhow!("the daemon printed no address within {limit:?}"))
            }
        };
        match addr {
            Ok(addr) => Ok(Process {
                child: Some(child),
                addr,
                log: self.log,
                printed,
            }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(anyhow!("{e:#}; daemon log:\n{}", log_tail(&self.log)))
            }
        }
    }
}

/// How a `stop` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It exited (after SIGTERM, or before) with this status.
    Exited(ExitStatus),
    /// It was still running after the time it had: SIGKILLed and reaped.
    Killed,
    /// It had been stopped before.
    NotRunning,
}

/// A running daemon binary. Stopped (SIGTERM, then SIGKILL after `STOP_TIMEOUT`) when dropped.
pub struct Process {
    child: Option<Child>,
    addr: SocketAddr,
    log: PathBuf,
    /// What it printed on stdout after the first line.
    printed: Arc<Mutex<Vec<String>>>,
}

impl Process {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its stderr.
    pub fn log(&self) -> &Path {
        &self.log
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Lines printed on stdout after the first one.
    pub fn printed(&self) -> Vec<String> {
        self.printed.lock().unwrap().clone()
    }

    /// Its pid, until it is stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (nothing once stopped).
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }

    /// Its exit status if it has exited (it is reaped then, and counts as stopped).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// SIGTERM, then waits up to `limit` for it to exit; SIGKILL if it has not.
    pub fn stop(&mut self, limit: Duration) -> Stopped {
        let Some(mut child) = self.child.take() else {
            return Stopped::NotRunning;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        match wait_child(&mut child, limit) {
            Some(status) => Stopped::Exited(status),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Stopped::Killed
            }
        }
    }

    /// SIGKILL now, and reap it.
    pub fn kill(&mut self) -> std::io::Result<ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| std::io::Error::other("not running"))?;
        child.kill()?;
        child.wait()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(STOP_TIMEOUT);
    }
}

/// Polls `child` until it exits or `limit` passes.
pub fn wait_child(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The last 20 lines of a log.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
