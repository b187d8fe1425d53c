//! Live upgrade: the daemon replaces its own binary without ending a session. On SIGUSR2 (or
//! `ptyhub upgrade`, or `systemctl reload`) it checks the new binary (`--check-config`), hands
//! every session's image and descriptors to a new image of itself with `execve` of its own
//! path (same pid, so every program stays its child), and the new image adopts them.
//!
//! - [`image`]: the versioned format of what is handed over.
//! - this module: checking the new binary, the sealed memfd, `execve`, reading the image back,
//!   the status `/api/version` reports ([`Upgrades`], one per daemon), holding the daemon's
//!   signals across the `execve`, and ending the sessions of an image that cannot be adopted
//!   (never orphaning them).
//!
//! The sequence itself (check, hand over, `execve`, and taking the sessions back when that
//! fails) is [`crate::daemon::Daemon::live_upgrade`].

pub mod image;

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use nix::sys::signal::{SigSet, Signal};
use tracing::warn;

use image::{Blobs, Image, ImageError};

/// The hidden flag that tells a new image where its image is (a descriptor number).
pub const IMAGE_FLAG: &str = "--upgrade-image";

/// The flag that loads and validates the configuration, prints what is wrong, and exits.
pub const CHECK_FLAG: &str = "--check-config";

/// What `--check-config` prints on success, followed by the image formats it reads.
pub const CHECK_OK: &str = "image formats:";

/// How long the new binary's `--check-config` may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the running image reports about upgrades (`/api/version`).
#[derive(Debug, Clone)]
pub struct Status {
    /// When this image started (the process's start, or the upgrade that made it).
    pub image_started: SystemTime,
    /// Upgrades since the process started.
    pub upgrades: u64,
    /// The last upgrade that failed: when, and why.
    pub last_error: Option<(SystemTime, String)>,
}

/// This image's live upgrades, owned by its daemon (so two daemons in one process never share
/// them): when the image started, how many upgrades came before it, the last that failed.
#[derive(Debug)]
pub struct Upgrades {
    /// When this image started.
    image_started: SystemTime,
    /// Upgrades before this image.
    upgrades: u64,
    /// The last upgrade that failed: when, and why.
    last_error: Mutex<Option<(SystemTime, String)>>,
}

impl Upgrades {
    /// An image starting now, after `upgrades` upgrades, and the last failure it knows of.
    pub fn new(upgrades: u64, last_error: Option<(SystemTime, String)>) -> Self {
        Self {
            image_started: SystemTime::now(),
            upgrades,
            last_error: Mutex::new(last_error),
        }
    }

    /// What `/api/version` reports.
    pub fn status(&self) -> Status {
        Status {
            image_started: self.image_started,
            upgrades: self.upgrades,
            last_error: self.last_error().clone(),
        }
    }

    /// Records a failed upgrade (the daemon goes on as it was).
    pub fn failed(&self, why: String) {
        *self.last_error() = Some((SystemTime::now(), why));
    }

    fn last_error(&self) -> std::sync::MutexGuard<'_, Option<(SystemTime, String)>> {
        // Each update is a plain assignment: a poisoned lock still holds a whole value.
        self.last_error.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Upgrades {
    /// A process's first image, starting now.
    fn default() -> Self {
        Self::new(0, None)
    }
}

/// Why an upgrade did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The new binary is missing or does not run.
    #[error("cannot run the new binary {path}: {source}")]
    Binary {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The new binary refuses the configuration.
    #[error("the new binary refuses the configuration: {0}")]
    Config(String),
    /// The new binary does not read this binary's image format.
    #[error("the new binary does not read image format {FORMAT} (it reads {0})", FORMAT = image::FORMAT)]
    Format(String),
    /// Writing the image failed.
    #[error("could not write the image: {0}")]
    Image(String),
    /// `execve` failed.
    #[error("execve of {path} failed: {source}")]
    Exec {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The signals the daemon handles. Between `execve` and the new image's handlers their
/// default action would end the daemon (and every session with it), so the old image blocks
/// them before the exec (a signal mask survives it) and the new one lets them through once
/// its handlers are in place: one that came meanwhile is then handled, not lost.
fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGUSR2,
        Signal::SIGHUP,
        Signal::SIGTERM,
        Signal::SIGINT,
    ] {
        set.add(signal);
    }
    set
}

/// Holds the handled signals pending on this thread. Called before the runtime starts (so
/// every thread it makes inherits the mask and only the thread that releases them takes
/// signals) and when an upgrade begins (so one sent during the check, the handover or the
/// exec is handled afterwards, by this image or the next, never lost with this image).
pub fn hold_signals() {
    if let Err(e) = handled_signals().thread_block() {
        warn!("cannot block the daemon's signals: {e}");
    }
}

/// Lets the handled signals through on this thread (the one that handles them), once their
/// handlers are installed; after an upgrade, one that arrived during it is handled now.
pub fn release_signals() {
    if let Err(e) = handled_signals().thread_unblock() {
        warn!("cannot unblock the daemon's signals: {e}");
    }
}

/// The arguments this process was started with, less a previous upgrade's image flag: what
/// the next image is started with (so it loads the same configuration the same way).
pub fn own_args() -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == IMAGE_FLAG {
            args.next();
            continue;
        }
        out.push(arg);
    }
    out
}

/// Runs `exe --check-config` with this image's arguments: the new binary must accept the
/// configuration and read this binary's image format.
pub async fn check(exe: &Path, args: &[OsString]) -> Result<(), UpgradeError> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(args)
        .arg(CHECK_FLAG)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(CHECK_TIMEOUT, cmd.output())
        .await
        .map_err(|_| UpgradeError::Config("--check-config did not finish in 10 s".into()))?
        .map_err(|source| UpgradeError::Binary {
            path: exe.to_owned(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr.trim();
        return Err(UpgradeError::Config(if why.is_empty() {
            format!("it exited with {}", out.status)
        } else {
            why.lines().last().unwrap_or(why).to_owned()
        }));
    }
    let formats = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHECK_OK))
        .map(str::trim)
        .unwrap_or("none");
    let reads = formats
        .split(',')
        .filter_map(|f| f.trim().parse::<u32>().ok())
        .any(|f| f == image::FORMAT);
    if !reads {
        return Err(UpgradeError::Format(formats.to_owned()));
    }
    Ok(())
}

/// What `--check-config` prints on success.
pub fn check_report() -> String {
    let formats: Vec<String> = image::READS.iter().map(u32::to_string).collect();
    format!("{CHECK_OK} {}", formats.join(", "))
}

/// Everything a new image needs: the image, its byte areas, and the descriptors it names.
pub struct Handoff {
    /// The description.
    pub image: Image,
    /// The byte areas.
    pub blobs: Blobs,
    /// The listening socket.
    pub listener: OwnedFd,
    /// Each running session's PTY master, by session.
    pub ptys: Vec<(uuid::Uuid, OwnedFd)>,
    /// The last failed upgrade, for the daemon that adopts this handoff to report. Kept when
    /// an image takes its own sessions back after a failed `execve`; not part of the image, so
    /// a new image starts without one.
    pub last_error: Option<(SystemTime, String)>,
}

impl Handoff {
    /// Replaces this process's image with `exe`, handing everything over. Returns only if
    /// that failed; the handoff is then intact, for this image to adopt itself.
    pub fn exec(&mut self, exe: &Path, args: &[OsString]) -> UpgradeError {
        self.image.listener_fd = self.listener.as_raw_fd();
        let ptys: std::collections::HashMap<uuid::Uuid, i32> = self
            .ptys
            .iter()
            .map(|(id, fd)| (*id, fd.as_raw_fd()))
            .collect();
        for s in &mut self.image.sessions {
            if let Some(p) = &mut s.process {
                p.pty_fd = ptys.get(&s.id).copied();
            }
        }
        let bytes = match image::encode(&self.image, &self.blobs) {
            Ok(bytes) => bytes,
            Err(e) => return UpgradeError::Image(e.to_string()),
        };
        let memfd = match sealed_memfd(&bytes) {
            Ok(fd) => fd,
            Err(e) => return UpgradeError::Image(e.to_string()),
        };
        let fds: Vec<BorrowedFd<'_>> = std::iter::once(self.listener.as_fd())
            .chain(self.ptys.iter().map(|(_, fd)| fd.as_fd()))
            .chain(std::iter::once(memfd.as_fd()))
            .collect();
        for fd in &fds {
            if let Err(e) = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()) {
                set_cloexec(&fds);
                return UpgradeError::Image(format!("cannot keep a descriptor open: {e}"));
            }
        }
        // Held pending from here to the new image's handlers (see `handled_signals`).
        hold_signals();
        let source = std::process::Command::new(exe)
            .args(args)
            .arg(IMAGE_FLAG)
            .arg(memfd.as_raw_fd().to_string())
            .exec();
        release_signals();
        set_cloexec(&fds);
        UpgradeError::Exec {
            path: exe.to_owned(),
            source,
        }
    }
}

fn set_cloexec(fds: &[BorrowedFd<'_>]) {
    for fd in fds {
        let _ = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC);
    }
}

/// The image in an anonymous memory file, sealed against any change.
fn sealed_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        "ptyhub-image",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )?;
    Ok(OwnedFd::from(file))
}

/// Reads the image this new image was started with (descriptor `fd`) and takes over the
/// descriptors it names. On an error nothing named is left open but what [`abandon`] needs.
pub fn receive(fd: i32) -> Result<Handoff, ImageError> {
    let damaged = |what: String| ImageError::Damaged(what);
    let memfd = crate::sys::adopt_inherited(fd)
        .map_err(|e| damaged(format!("the image's descriptor {fd}: {e}")))?;
    let mut bytes = Vec::new();
    let mut file = std::fs::File::from(memfd);
    std::io::Seek::rewind(&mut file).map_err(|e| damaged(e.to_string()))?;
    file.read_to_end(&mut bytes)
        .map_err(|e| damaged(e.to_string()))?;
    let (image, blobs) = image::decode(&bytes)?;
    let listener = crate::sys::adopt_inherited(image.listener_fd)
        .map_err(|e| damaged(format!("the listening socket: {e}")))?;
    let mut ptys = Vec::new();
    for s in &image.sessions {
        if let Some(fd) = s.process.as_ref().and_then(|p| p.pty_fd) {
            match crate::sys::adopt_inherited(fd) {
                Ok(owned) => ptys.push((s.id, owned)),
                Err(e) => warn!(session = %s.id, "its PTY descriptor {fd} is gone: {e}"),
            }
        }
    }
    Ok(Handoff {
        image,
        blobs,
        listener,
        ptys,
        last_error: None,
    })
}

/// Ends the sessions of an image that cannot be adopted, as a shutdown would (SIGHUP and
/// SIGTERM to every process of each, SIGKILL after `grace`), and reaps the programs: nothing
/// is orphaned.
pub fn abandon(image: &Image, grace: Duration) {
    let running: Vec<(uuid::Uuid, i32)> = image
        .sessions
        .iter()
        .filter_map(|s| s.process.as_ref().map(|p| (s.id, p.pid)))
        .collect();
    use crate::session::process::signal_session;
    for &(id, pid) in &running {
        signal_session(pid, Some(id), Signal::SIGHUP);
        signal_session(pid, Some(id), Signal::SIGTERM);
    }
    let until = std::time::Instant::now() + grace;
    let reaped = |pid: i32| {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        !matches!(
            waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
            Ok(WaitStatus::StillAlive)
        )
    };
    let mut left: Vec<(uuid::Uuid, i32)> = running;
    while !left.is_empty() && std::time::Instant::now() < until {
        left.retain(|&(_, pid)| !reaped(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    for &(id, pid) in &left {
        signal_session(pid, Some(id), Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    }
}

/// Ends every session program that is a child of this process (what an image that cannot
/// be read leaves: its pids are unknown), as [`abandon`] does.
pub fn abandon_children(grace: Duration) {
    let own = std::process::id() as i32;
    let children = crate::session::process::children(own);
    let image = Image {
        sessions: children
            .into_iter()
            .map(|pid| image::SessionImage {
                process: Some(image::ProcessImage { pid, pty_fd: None }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    abandon(&image, grace);
}
