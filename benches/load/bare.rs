//! The physical limits measured in the same run: a command on a bare PTY of our own (floods),
//! the echo round trip through the same raw-mode `cat` on a bare PTY, and through a bare relay
//! (plain TCP and two copying threads).

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout_at;

use crate::client::{contains, on_pool, tail, Tasks, STEP_TIMEOUT};
use crate::echo::{echo_samples, Arrival, Samples, ECHO_SCRIPT};
use crate::flood::MarkerScan;
use crate::launcher::{wait_child, STOP_TIMEOUT};
use crate::procfs::CpuTimes;
use crate::wire::{Stamped, WireClock};
use crate::Ctx;

/// Starts `bash -c cmd` on a PTY of our own (24×80, the kernel's default line discipline, as a
/// session's), in its own process group; returns it and the PTY's master.
pub(crate) fn spawn_on_pty(cmd: &str) -> Result<(Child, OwnedFd)> {
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(&size, None).context("openpty")?;
    let out = pty.slave.try_clone()?;
    let err = pty.slave.try_clone()?;
    // Our copies of the slave go with this Command, so the master reads EIO once bash is done.
    let child = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", cmd])
        // Its own group, so that ending it also ends cat (which holds the slave open too).
        .process_group(0)
        .stdin(Stdio::from(pty.slave))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .context("starting bash on a bare PTY")?;
    Ok((child, pty.master))
}

/// Kills what `spawn_on_pty` started (when `now`, or when it has not ended by itself) and reaps it.
pub(crate) fn end_group(child: &mut Child, now: bool) {
    let group = Pid::from_raw(-(child.id() as i32));
    if now {
        let _ = kill(group, Signal::SIGKILL);
    }
    if wait_child(child, STOP_TIMEOUT).is_none() {
        let _ = kill(group, Signal::SIGKILL);
        let _ = child.wait();
    }
}

/// Runs `cmd` on a bare PTY and reads the master until `marker`; returns the time from spawning
/// to the marker, and how busy the machine was meanwhile (`CpuTimes::busy_since`).
pub(crate) fn bare_pty(cmd: &str, marker: Vec<u8>, limit: Duration) -> Result<(Duration, f64)> {
    let machine_before = CpuTimes::now()?;
    let start = Instant::now();
    let (mut child, master) = spawn_on_pty(cmd)?;
    let mut master = File::from(master);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut scan = MarkerScan::new(marker);
        let mut buf = vec![0u8; 64 * 1024];
        let result = loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break Err(anyhow!("bash ended before the end marker")),
                Ok(n) if scan.feed(&buf[..n]) => break Ok(Instant::now()),
                Ok(_) => {}
            }
        };
        let _ = tx.send(result);
    });
    let result = rx.recv_timeout(limit);
    // At the marker, not after reaping bash, whose polling would count idle time.
    let machine_after = CpuTimes::now();
    // On a timeout, killing the group closes every copy of the slave, which unblocks the reader.
    end_group(&mut child, result.is_err());
    let _ = reader.join();
    match result {
        Ok(Ok(at)) => Ok((
            at.duration_since(start),
            machine_after?.busy_since(&machine_before),
        )),
        Ok(Err(e)) => Err(e),
        Err(_) => bail!("no end marker within {limit:?}"),
    }
}

/// The echo round trip through the same raw-mode cat on a bare PTY: the physical limit, read
/// with the same kind of wake-up (epoll, on this runtime) as the WebSocket writer. Sorted.
pub(crate) async fn bare_echo(samples: usize, pause: Duration) -> Result<Vec<Duration>> {
    let (mut child, master) = spawn_on_pty(ECHO_SCRIPT)?;
    let result = bare_echo_samples(master, samples, pause).await;
    end_group(&mut child, true);
    result
}

async fn bare_echo_samples(
    master: OwnedFd,
    samples: usize,
    pause: Duration,
) -> Result<Vec<Duration>> {
    fcntl(master.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).context("O_NONBLOCK")?;
    // SAFETY: `master` is an OwnedFd moved into the AsyncFd, so it stays open and the same
    // descriptor until the AsyncFd is dropped.
    let fd = unsafe { AsyncFd::register(master) }
        .map_err(|e| anyhow!("registering the PTY master: {e}"))?;
    let ready = Instant::now() + STEP_TIMEOUT;
    read_until(async |buf| read_fd(&fd, buf).await, b"ECHO-READY", ready).await?;
    let rtt = echo_samples(samples, pause, &mut [], async |i, byte, deadline| {
        nix::unistd::write(fd.get_ref(), &[byte]).context("writing to the PTY")?;
        read_until(async |buf| read_fd(&fd, buf).await, &[byte], deadline)
            .await
            .with_context(|| format!("sample {i}"))
    })
    .await?
    .rtt;
    Ok(rtt)
}

/// Reads with `read` (one read a call, 0 once closed) until `needle` has come, by `deadline`.
pub(crate) async fn read_until(
    mut read: impl AsyncFnMut(&mut [u8]) -> Result<usize>,
    needle: &[u8],
    deadline: Instant,
) -> Result<()> {
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    let what = || String::from_utf8_lossy(needle).into_owned();
    while !contains(&seen, needle) {
        let n = timeout_at(deadline.into(), read(&mut buf))
            .await
            .map_err(|_| anyhow!("no {:?} in time: {}", what(), tail(&seen)))??;
        if n == 0 {
            bail!("closed before {:?}: {}", what(), tail(&seen));
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// One read from a non-blocking fd, waiting for it to be readable.
pub(crate) async fn read_fd(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> Result<usize> {
    loop {
        let mut ready = fd.readable().await?;
        match ready
            .try_io(|inner| nix::unistd::read(inner.as_raw_fd(), buf).map_err(std::io::Error::from))
        {
            Ok(Ok(0)) => bail!("the PTY closed"),
            Ok(Ok(n)) => return Ok(n),
            Ok(Err(e)) => return Err(anyhow!("reading the PTY: {e}")),
            Err(_would_block) => continue,
        }
    }
}

/// The echo round trip through the least any server sharing a terminal must do, in the same
/// run: the typist on a plain TCP connection (no WebSocket, no HTTP), one thread copying its
/// bytes into the PTY, another copying the PTY's output to the typist and then to every idle
/// viewer's socket, and the same raw-mode cat. That is the bare PTY plus two loopback hops and
/// the fan-out, measured as the daemon's viewers are.
pub(crate) async fn relay_echo(
    ctx: &Ctx,
    viewers: usize,
    samples: usize,
    pause: Duration,
) -> Result<Samples> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the relay")?;
    let addr = listener.local_addr()?;
    let (mut child, master) = spawn_on_pty(ECHO_SCRIPT)?;
    let relay = std::thread::spawn(move || relay_thread(listener, viewers, master));
    let result = relay_echo_samples(ctx, addr, viewers, samples, pause).await;
    // Killing cat gives the PTY reader EIO; the closed typist connection ends the other thread.
    end_group(&mut child, true);
    let relayed = tokio::task::spawn_blocking(move || relay.join())
        .await
        .map_err(|e| anyhow!("joining the relay: {e}"))?
        .map_err(|_| anyhow!("the relay thread panicked"))?;
    let samples = result?;
    relayed?;
    Ok(samples)
}

/// The relay: accepts the typist, then `viewers` connections, and copies until the typist
/// leaves or cat ends.
fn relay_thread(listener: std::net::TcpListener, viewers: usize, master: OwnedFd) -> Result<()> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut conns = Vec::with_capacity(viewers + 1);
    while conns.len() < viewers + 1 {
        match listener.accept() {
            Ok((conn, _)) => {
                conn.set_nonblocking(false)?;
                conn.set_nodelay(true)?;
                conns.push(conn);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    bail!("the relay's clients did not connect within {STEP_TIMEOUT:?}");
                }
                // Set-up only: the generator is connecting, nothing is being timed.
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e).context("accepting a relay client"),
        }
    }
    let mut pty_in = File::from(master.try_clone()?);
    let mut typist_in = conns[0].try_clone()?;
    let input = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = typist_in.read(&mut buf) {
            if pty_in.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
    let mut pty_out = File::from(master);
    let mut buf = [0u8; 4096];
    // Until EIO: cat has been killed.
    while let Ok(n @ 1..) = pty_out.read(&mut buf) {
        for conn in &conns {
            // A viewer that left is the generator ending the run: keep serving the others.
            let _ = (&*conn).write_all(&buf[..n]);
        }
    }
    drop(conns);
    let _ = input.join();
    Ok(())
}

/// The relay's clients: the typist on this runtime, the viewers on `ctx.echo_pool`, measured
/// as `echo_run` measures the daemon.
async fn relay_echo_samples(
    ctx: &Ctx,
    addr: SocketAddr,
    viewers: usize,
    samples: usize,
    pause: Duration,
) -> Result<Samples> {
    let connect = |addr| async move {
        let conn = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connecting to the relay: no answer within {STEP_TIMEOUT:?}"))??;
        conn.set_nodelay(true)?;
        Ok::<_, anyhow::Error>(conn)
    };
    let mut typist = connect(addr).await?;
    let mut tasks = Tasks::default();
    let mut rxs = Vec::with_capacity(viewers);
    for _ in 0..viewers {
        let conn = on_pool(&ctx.echo_pool, connect(addr)).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (conn, clock) = Stamped::new(conn)?;
        tasks.0.push(
            ctx.echo_pool
                .spawn(raw_viewer(conn, clock, tx))
                .abort_handle(),
        );
        rxs.push(rx);
    }
    let ready = Instant::now() + STEP_TIMEOUT;
    read_until(
        async |buf| Ok(typist.read(buf).await?),
        b"ECHO-READY",
        ready,
    )
    .await
    .context("the relay")?;
    echo_samples(samples, pause, &mut rxs, async |i, byte, deadline| {
        typist.write_all(&[byte]).await?;
        read_until(async |buf| Ok(typist.read(buf).await?), &[byte], deadline)
            .await
            .with_context(|| format!("sample {i}: the relay"))
    })
    .await
}

/// A relay viewer: reads all the time and reports every read with its arrival.
async fn raw_viewer(
    mut conn: Stamped,
    clock: WireClock,
    tx: mpsc::UnboundedSender<(Arrival, Vec<u8>)>,
) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n @ 1..) = conn.read(&mut buf).await {
        let at = Arrival {
            read: Instant::now(),
            wire: clock.arrival(),
        };
        if tx.send((at, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}
