//! The session's program and where it is in its life: the process with its PTY, its exit
//! watch and its input writer while there is one, the phase (`phase.rs`) and its transitions,
//! and the pid of the latest program, whose leftovers go with the session.

use std::future::Future;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::attention::Foreground;
use super::events::EndReason;
use super::input::{pty_writer, HeldInput, InputPermit, PtyInput, ANSWER_QUEUE_BYTES};
use super::phase::{Ending, Phase, Then};
use super::process::{self, ExitInfo, ExitWatch, Spawned};
use super::pty::PtyMaster;
use super::refusal::{Action, Refusal};
use super::signal::StopLadder;
use crate::metrics::Metrics;
use crate::term::queries::Query;
use crate::upgrade::image::{ExitImage, ProcessImage, SessionImage};

/// After the program exits, how long output still arriving from its PTY is collected.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// After leftover processes got SIGHUP at the program's exit, when they get SIGTERM.
const LEFTOVER_TERM_AFTER: Duration = Duration::from_secs(1);

/// At most this much of what the program wrote is collected when its terminal is hung up
/// (about what the kernel holds for a PTY; a program still flooding is cut there).
const HANG_UP_COLLECT: usize = 256 * 1024;

/// Processes left behind by an exited program got SIGHUP; give them SIGTERM, then SIGKILL.
/// `marker` is `None` after a restart, when the replacement carries the same marker.
pub(super) async fn end_leftovers(pid: i32, marker: Option<Uuid>, grace: Duration) {
    tokio::time::sleep(LEFTOVER_TERM_AFTER).await;
    let mut ladder = StopLadder::without_terminal(grace);
    let what = format!("what the program {pid} left behind");
    while !process::session_pids(pid, marker).is_empty() {
        let Some(rung) = ladder.next_rung(&what) else {
            return;
        };
        process::signal_session(pid, marker, rung.signal);
        match rung.wait {
            Some(wait) => tokio::time::sleep(wait).await,
            None => return,
        }
    }
}

/// The program and its PTY, while there is one.
#[derive(Default)]
struct Proc {
    /// Reports the program's exit; gone once it has.
    exit: Option<ExitWatch>,
    pid: i32,
    terminal: Terminal,
    input: Option<mpsc::UnboundedSender<Box<PtyInput>>>,
    /// Bytes of query answers sent to the writer task and not yet written to the PTY.
    answers_queued: Arc<AtomicUsize>,
    /// Items sent to the writer task and not yet written whole: while there are any, input
    /// queues behind them rather than going straight to the PTY.
    input_queued: Arc<AtomicUsize>,
    /// The writer task, and how to stop it and get back what it has not written.
    writer: Option<(CancellationToken, tokio::task::JoinHandle<Vec<u8>>)>,
}

/// The program's terminal, as the daemon holds it.
#[derive(Default)]
enum Terminal {
    /// The PTY master: read, resized, written a key with nothing queued.
    Open(PtyMaster),
    /// Hung up by the daemon (see [`Program::hang_up`]), which signalled the program: what
    /// the program had written and was not read yet, read next, then the end (an empty
    /// chunk); `None` once the end was read.
    HungUp(Option<Bytes>),
    /// Read to its end (every process let go of it), or never held (an adopted program whose
    /// terminal had closed).
    #[default]
    Closed,
}

impl Terminal {
    fn master(&self) -> Option<&PtyMaster> {
        match self {
            Self::Open(pty) => Some(pty),
            _ => None,
        }
    }

    /// Whether output (or its end) is still to be read from it.
    fn has_output(&self) -> bool {
        matches!(self, Self::Open(_) | Self::HungUp(Some(_)))
    }
}

/// The session's program, its phase, and the pid of the latest one.
pub(super) struct Program {
    /// The session's uuid: the marker its processes carry (see `process.rs`), and the logs'.
    session: Uuid,
    proc: Proc,
    /// Where the program is in its life, and so the session.
    phase: Phase,
    /// The pid of the latest program, kept after it exits: its leftovers are found through it.
    last_pid: i32,
    /// The daemon's counters: input taken for the program is counted.
    metrics: Arc<Metrics>,
}

impl Program {
    /// No program attached yet; `last_pid` is the latest one's (0 for none). Input is counted
    /// in `metrics`.
    pub(super) fn new(session: Uuid, last_pid: i32, metrics: Arc<Metrics>) -> Self {
        Self {
            session,
            proc: Proc::default(),
            phase: Phase::Running,
            last_pid,
            metrics,
        }
    }

    /// Takes over a started program: the actor reads its PTY, a writer task of its own
    /// writes queued input to it.
    pub(super) fn attach(&mut self, spawned: Spawned) {
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        self.last_pid = spawned.pid;
        let stop = CancellationToken::new();
        let writer = tokio::spawn(pty_writer(spawned.pty.clone(), input_rx, stop.clone()));
        self.proc = Proc {
            writer: Some((stop, writer)),
            exit: Some(spawned.exit),
            pid: spawned.pid,
            terminal: Terminal::Open(spawned.pty),
            input: Some(input_tx),
            answers_queued: Default::default(),
            input_queued: Default::default(),
        };
        self.phase = Phase::Running;
    }

    /// Watches an adopted program whose terminal had already closed: only its exit is left.
    pub(super) fn watch_exit(&mut self, exit: ExitWatch, pid: i32) {
        self.proc = Proc {
            exit: Some(exit),
            pid,
            ..Proc::default()
        };
    }

    /// No program: it exited with `exit`, just now (an adopted session's had).
    pub(super) fn set_exited(&mut self, exit: ExitInfo) {
        self.phase = Phase::Exited {
            exit,
            idle_since: Instant::now(),
        };
    }

    /// What the actor waits for from the program: its next output (an error or an empty
    /// chunk at EOF), and its exit. Each is pending while there is none to wait for.
    pub(super) fn waits(
        &mut self,
    ) -> (
        impl Future<Output = std::io::Result<Bytes>> + '_,
        impl Future<Output = std::io::Result<ExitInfo>> + '_,
    ) {
        (
            read_pty(&mut self.proc.terminal),
            wait_exit(&mut self.proc.exit),
        )
    }

    /// How the program ended, once the session reports it.
    pub(super) fn exit(&self) -> Option<&ExitInfo> {
        self.phase.exit()
    }

    /// Whether a YOLO restart is under way.
    pub(super) fn restarting(&self) -> bool {
        self.phase.restarting()
    }

    /// Whether the session is over (the actor's loop stops).
    pub(super) fn ended(&self) -> bool {
        matches!(self.phase, Phase::Ended)
    }

    /// Whether no transition is under way (a live upgrade hands over only then).
    pub(super) fn settled(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::Exited { .. })
    }

    /// When the actor stops waiting for the exited program's last output.
    pub(super) fn drain_until(&self) -> Option<Instant> {
        self.phase.drain_until()
    }

    /// When the stopping program gets the next, firmer signal.
    pub(super) fn escalate_at(&self) -> Option<Instant> {
        self.phase.escalate_at()
    }

    /// When an exited session is reaped: `after` its last viewer left (`unwatched`: whether
    /// it has none now).
    pub(super) fn reap_at(&self, unwatched: bool, after: Duration) -> Option<Instant> {
        match self.phase {
            Phase::Exited { idle_since, .. } if unwatched => Some(idle_since + after),
            _ => None,
        }
    }

    /// The last viewer left: an exited session is unwatched from now.
    pub(super) fn unwatched(&mut self) {
        if let Phase::Exited { idle_since, .. } = &mut self.phase {
            *idle_since = Instant::now();
        }
    }

    /// Whether input has somewhere to go: the program, or (during a restart) the next one.
    pub(super) fn takes_input(&self) -> bool {
        self.phase.restarting() || self.proc.input.is_some()
    }

    /// Writes input the caller checked [`Self::takes_input`] for: held for the next program
    /// during a restart, else straight to the PTY when nothing is queued before it (the usual
    /// key), else queued for the writer task.
    pub(super) fn write(&mut self, data: Bytes, permit: InputPermit) {
        let len = data.len();
        if let Some(held) = self.phase.held_input_mut() {
            self.metrics.bytes_in.add(len as u64);
            held.push(HeldInput::new(data, permit));
            return;
        }
        let Some(input) = &self.proc.input else {
            return;
        };
        let mut data = data;
        // Straight to the PTY when nothing is queued before it (the usual key): no hop through
        // the writer task, which may wait its turn behind this very actor on a busy worker.
        if let (0, Some(pty)) = (
            self.proc.input_queued.load(Ordering::Acquire),
            self.proc.terminal.master(),
        ) {
            // An error other than a full PTY is the writer task's to find and report.
            if let Ok(n) = pty.try_write(&data) {
                let _ = data.split_to(n);
            }
        }
        if data.is_empty() {
            self.metrics.bytes_in.add(len as u64);
            return;
        }
        // The writer task ends only with the program, and then `proc.input` is gone too.
        let item = PtyInput::new(data, permit, None, &self.proc.input_queued);
        if input.send(item).is_ok() {
            self.metrics.bytes_in.add(len as u64);
        }
    }

    /// Queues input that was waiting (a live upgrade's), before any key typed next.
    pub(super) fn queue_input(&mut self, data: &[u8]) {
        if let (false, Some(tx)) = (data.is_empty(), &self.proc.input) {
            let data = Bytes::copy_from_slice(data);
            let _ = tx.send(PtyInput::new(data, None, None, &self.proc.input_queued));
        }
    }

    /// The screen model's answers to queries in the output: each goes to the program once.
    pub(super) fn answer(&mut self, found: Vec<(Query, Vec<u8>)>) {
        for (query, answer) in found {
            debug!(session = %self.session, ?query, "answering terminal query");
            let Some(input) = &self.proc.input else {
                continue;
            };
            let queued = &self.proc.answers_queued;
            if queued.load(Ordering::Relaxed) + answer.len() > ANSWER_QUEUE_BYTES {
                debug!(session = %self.session, "program is not reading its input: answer dropped");
                continue;
            }
            queued.fetch_add(answer.len(), Ordering::Relaxed);
            let item = PtyInput::new(
                Bytes::from(answer),
                None,
                Some(queued.clone()),
                &self.proc.input_queued,
            );
            let _ = input.send(item);
        }
    }

    /// Sets the terminal's size. Here, not in the writer task: a key right after a resize
    /// goes straight to the PTY from the actor, and the program must see the new size first.
    pub(super) fn resize(&self, rows: u16, cols: u16) {
        if let Some(pty) = self.proc.terminal.master() {
            if let Err(e) = pty.resize(rows, cols) {
                debug!(session = %self.session, "pty resize failed: {e}");
            }
        }
    }

    /// Sends `signal` (named `name`) to the program's foreground process group.
    pub(super) fn signal_foreground(&self, signal: Signal, name: &str) -> Result<(), Refusal> {
        if !self.phase.running() {
            return Err(Refusal::NotRunning(Action::Signal));
        }
        match process::foreground_group(self.proc.pid) {
            Some(pgrp) => {
                debug!(session = %self.session, ?signal, pgrp, "signal from viewer");
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgrp), signal)
                    .map_err(|e| Refusal::SignalFailed(format!("could not send {name}: {e}")))
            }
            None => Err(Refusal::SignalFailed(
                "the terminal has no foreground process group".to_owned(),
            )),
        }
    }

    /// Who is in the terminal's foreground (`tpgid`): the program itself or another, and its
    /// name; none once the program is gone. Reads `/proc`: for the quiet check only.
    pub(super) fn foreground(&self) -> Option<Foreground> {
        if !self.phase.running() || self.proc.pid <= 0 {
            return None;
        }
        let group = process::foreground_group(self.proc.pid)?;
        let program = std::fs::read_to_string(format!("/proc/{group}/comm"))
            .map(|c| c.trim_end().to_owned())
            .unwrap_or_default();
        Some(Foreground {
            own: group == self.proc.pid,
            program,
        })
    }

    /// The PTY read EOF, or EIO once every process has closed the terminal side.
    pub(super) fn pty_closed(&mut self) {
        self.proc.terminal = match self.proc.terminal {
            Terminal::HungUp(_) => Terminal::HungUp(None),
            _ => Terminal::Closed,
        };
    }

    /// The program exited, as `status` says: its output is drained next. Whether it is
    /// drained already (the PTY closed first), so the exit can be finished now.
    pub(super) fn exited(&mut self, status: std::io::Result<ExitInfo>) -> bool {
        self.proc.exit = None;
        let info = status.unwrap_or_else(|e| {
            warn!(session = %self.session, "waiting for the program failed: {e}");
            ExitInfo::exited(-1)
        });
        // Background jobs may keep the terminal open; hang them up like a terminal would.
        process::signal_session(self.proc.pid, None, Signal::SIGHUP);
        let then = match self.phase.take() {
            Phase::Running => Then::Stay,
            Phase::Stopping { then, .. } => then,
            other => {
                // No program was watched in these states.
                self.phase = other;
                return false;
            }
        };
        let drained = !self.proc.terminal.has_output();
        self.phase = Phase::Draining {
            status: info,
            then,
            until: Instant::now() + DRAIN_AFTER_EXIT,
        };
        drained
    }

    /// Once the exited program's output is collected: how it ended, what follows, and its
    /// pid. Its PTY and writer task are let go (which closes the PTY master). `None` when no
    /// exit is being drained.
    pub(super) fn drained(&mut self) -> Option<(ExitInfo, Then, i32)> {
        match self.phase.take() {
            Phase::Draining { status, then, .. } => {
                let pid = self.proc.pid;
                self.proc = Proc::default();
                Some((status, then, pid))
            }
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// Input typed during a restart, for the new program, in order. Counted as queued for
    /// its writer, so no key typed next overtakes them.
    pub(super) fn queue_held(&mut self, held: Vec<HeldInput>) {
        if let Some(input) = &self.proc.input {
            for item in held {
                let _ = input.send(item.into_pty_input(&self.proc.input_queued));
            }
        }
    }

    /// Prepares the program's stop for a restart (SIGHUP, SIGTERM, SIGKILL within `grace`,
    /// begun by [`Program::terminate_for_restart`]), unless it is not running or already
    /// restarting.
    pub(super) fn begin_restart(&mut self, grace: Duration) -> Result<(), Refusal> {
        if self.phase.restarting() {
            return Err(Refusal::RestartInProgress);
        }
        if !matches!(self.phase, Phase::Running) {
            return Err(Refusal::NotRunning(Action::ToggleYolo));
        }
        self.phase = Phase::Stopping {
            then: Then::Restart(Vec::new()),
            ladder: StopLadder::for_terminal(grace),
            next_at: None,
        };
        Ok(())
    }

    /// The restart's hang-up, as a terminal closing would do it (an interactive bash
    /// ignores SIGTERM), then firmer signals (see [`Program::escalate`]).
    pub(super) fn terminate_for_restart(&mut self) {
        self.escalate();
    }

    /// Begins ending the session for `reason` (`done` waits for it): the program is asked
    /// to stop (SIGHUP, SIGTERM, SIGKILL within `grace`). The ending, when it is to complete
    /// now (no program).
    pub(super) fn begin_end(
        &mut self,
        reason: EndReason,
        done: Option<oneshot::Sender<()>>,
        grace: Duration,
    ) -> Option<Ending> {
        if let Some(ending) = self.phase.ending_mut() {
            ending.waiters.extend(done);
            return None;
        }
        let ending = Ending {
            reason,
            waiters: done.into_iter().collect(),
        };
        info!(session = %self.session, ?reason, "ending session");
        match self.phase.take() {
            // An ongoing restart is abandoned: the session ends instead.
            Phase::Running | Phase::Stopping { .. } => {
                self.phase = Phase::Stopping {
                    then: Then::End(ending),
                    ladder: StopLadder::for_terminal(grace),
                    next_at: None,
                };
                self.escalate();
                None
            }
            // Exited and still draining: stop waiting for the output.
            Phase::Draining { status, .. } => {
                self.phase = Phase::Draining {
                    status,
                    then: Then::End(ending),
                    until: Instant::now(),
                };
                None
            }
            Phase::Exited { .. } | Phase::Ended => Some(ending),
        }
    }

    /// The stopping program gets the next signal of its ladder: the first, or a firmer one
    /// when it is still there after the last one's share of the grace period.
    pub(super) fn escalate(&mut self) {
        // While restarting, the marker would also match the replacement: use the kernel session.
        let marker = (!self.phase.restarting()).then_some(self.session);
        let what = format!("session {} program", self.session);
        let Phase::Stopping {
            ladder, next_at, ..
        } = &mut self.phase
        else {
            return;
        };
        let rung = ladder.next_rung(&what);
        *next_at = rung.and_then(|r| r.wait).map(|wait| Instant::now() + wait);
        if let Some(rung) = rung {
            // A terminal hung up signals its program itself, once (and SIGCONT), as its reads
            // end. A second SIGHUP from here could cut short the exit the first began: bash
            // left its exit trap half run in 13 of 200 tries on a busy host, 91 of 200 when
            // the second came 1 ms later; none with the hang-up's alone.
            let spared = (rung.signal == Signal::SIGHUP && self.hang_up()).then_some(self.proc.pid);
            process::signal_session_but(self.proc.pid, marker, rung.signal, spared);
        }
    }

    /// Hangs up the program's terminal, as closing a terminal window does: what it wrote
    /// and was not read yet is collected first (read next, then the end), the writer task
    /// stops, and the master closes with the last handle, so the kernel hangs up the
    /// terminal side: the program's reads of it end and its writes fail, and it gets
    /// SIGHUP. A SIGHUP alone can be missed: an interactive bash that gets it just before it
    /// waits for a key (readline checks for signals, then waits) waits on, ignores the
    /// SIGTERM after it and dies at the SIGKILL without running its exit trap or saving its
    /// history (7 in 300 tries on a busy host). Whether the terminal is hung up, now or
    /// before (a session ended during a restart's stop): the kernel signalled the program.
    fn hang_up(&mut self) -> bool {
        let Terminal::Open(pty) = &self.proc.terminal else {
            return matches!(self.proc.terminal, Terminal::HungUp(_));
        };
        self.proc.terminal = Terminal::HungUp(Some(pty.read_now(HANG_UP_COLLECT)));
        if let Some((stop, _task)) = self.proc.writer.take() {
            // It lets its handle go as it ends; what it had not written was for this program.
            stop.cancel();
        }
        self.proc.input = None;
        true
    }

    /// The session ends: whatever the latest program left behind, escaped into its own
    /// session or not, goes with it (the registry still holds this uuid, so no other session
    /// shares the marker).
    pub(super) fn end(&mut self) {
        self.phase = Phase::Ended;
        if self.last_pid > 0 {
            process::signal_session(self.last_pid, Some(self.session), Signal::SIGKILL);
        }
    }

    /// A live upgrade: stops the writer task and takes back what it has not written, in order.
    pub(super) async fn take_unwritten(&mut self) -> Vec<u8> {
        match self.proc.writer.take() {
            Some((stop, task)) => {
                stop.cancel();
                task.await.unwrap_or_default()
            }
            None => Vec::new(),
        }
    }

    /// A duplicate of the PTY master, for the next image.
    pub(super) fn dup_pty(&self) -> Option<OwnedFd> {
        self.proc
            .terminal
            .master()
            .and_then(|r| rustix::io::fcntl_dupfd_cloexec(r.as_fd(), 3).ok())
    }

    /// Whether a program runs that the next image must watch.
    pub(super) fn runs(&self) -> bool {
        self.phase.exit().is_none() && self.proc.pid > 0
    }

    /// The program's part of the image: the process to watch (when one runs), the latest
    /// pid, the exit.
    pub(super) fn write_image(&self, image: &mut SessionImage) {
        image.process = self.runs().then_some(ProcessImage {
            pid: self.proc.pid,
            pty_fd: None,
        });
        image.last_pid = self.last_pid;
        image.exit = self.phase.exit().map(|e| ExitImage {
            code: e.code,
            signal: e.signal.clone(),
        });
    }

    /// Handed over: lets the session's own PTY descriptors and pidfd go (never the program:
    /// the duplicate keeps the terminal open, and nothing is signalled); the session is over.
    pub(super) fn release(&mut self) {
        self.proc = Proc::default();
        self.phase = Phase::Ended;
    }
}

/// The program's next output: from its PTY, or once it was hung up what was left of it
/// and then the end. Ready at its first poll when there is something left, so a read the
/// actor's loop drops unpolled loses nothing.
async fn read_pty(terminal: &mut Terminal) -> std::io::Result<Bytes> {
    match terminal {
        Terminal::Open(pty) => pty.read().await,
        Terminal::HungUp(left) => match left.take() {
            Some(chunk) if !chunk.is_empty() => {
                *left = Some(Bytes::new());
                Ok(chunk)
            }
            // The end, as a closed terminal reads.
            Some(end) => Ok(end),
            None => std::future::pending().await,
        },
        Terminal::Closed => std::future::pending().await,
    }
}

async fn wait_exit(exit: &mut Option<ExitWatch>) -> std::io::Result<ExitInfo> {
    match exit {
        Some(watch) => watch.wait().await,
        None => std::future::pending().await,
    }
}
