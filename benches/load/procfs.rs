//! What the generator reads from `/proc` (and the few process settings it makes): CPU time,
//! memory, the sessions' processes, the open-file limit, a thread's nice value.

use std::collections::HashSet;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use uuid::Uuid;

/// CPU seconds (user + system, all threads, ended ones included) process `pid` (or `self`) has
/// used so far. For `self` this is what getrusage(RUSAGE_SELF) adds up, read from /proc because
/// nix's `resource` feature is not enabled here; 10 ms resolution, fine for floods of seconds.
pub(crate) fn process_cpu_seconds(pid: &str) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Result<f64> {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .context("unexpected /proc stat format")
    };
    // /proc counts in USER_HZ, which is 100 on Linux whatever the kernel's HZ (nix's sysconf
    // needs a feature this crate does not enable).
    Ok((field(11)? + field(12)?) / 100.0)
}

/// The whole machine's CPU time so far (/proc/stat's aggregate `cpu` line, all cores), in ticks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuTimes {
    total: u64,
    /// Of which idle or waiting for IO.
    idle: u64,
}

impl CpuTimes {
    pub(crate) fn now() -> Result<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let line = stat
            .lines()
            .find_map(|l| l.strip_prefix("cpu "))
            .context("no cpu line in /proc/stat")?;
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().context("unexpected /proc/stat format"))
            .collect::<Result<_>>()?;
        if v.len() < 5 {
            bail!("unexpected /proc/stat cpu line: {line:?}");
        }
        // user nice system idle iowait irq softirq steal; guest and guest_nice (9, 10) are
        // already counted in user and nice.
        Ok(CpuTimes {
            total: v.iter().take(8).sum(),
            idle: v[3] + v[4],
        })
    }

    /// How busy all cores together were since `before`: 1.0 is every core busy all the time.
    pub(crate) fn busy_since(&self, before: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(before.total);
        let idle = self.idle.saturating_sub(before.idle);
        if total == 0 {
            return 0.0;
        }
        total.saturating_sub(idle) as f64 / total as f64
    }
}

/// Sets the calling thread's nice value. Linux keeps nice per thread, and `PRIO_PROCESS` with a
/// thread id names that one thread.
pub(crate) fn renice_this_thread(nice: i32) -> std::io::Result<()> {
    use std::ffi::{c_int, c_uint};
    // nix has no setpriority and this crate does not depend on libc; the C library is linked
    // anyway.
    extern "C" {
        fn setpriority(which: c_int, who: c_uint, prio: c_int) -> c_int;
    }
    const PRIO_PROCESS: c_int = 0;
    let tid = nix::unistd::gettid().as_raw() as c_uint;
    // SAFETY: integers in and out, no memory shared; the thread id is our own thread's.
    if unsafe { setpriority(PRIO_PROCESS, tid, nice) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The daemon's memory at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemSample {
    pub(crate) rss_kib: u64,
    /// Of which anonymous (heap, stacks): the part that grows with sessions and viewers.
    pub(crate) anon_kib: u64,
    pub(crate) threads: u64,
}

/// Sessions whose process, a child of `daemon`, now runs `program`.
pub(crate) fn running_sessions(daemon: i32, program: &str) -> HashSet<Uuid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // "pid (comm) state ppid …": comm may hold spaces, so split around the parentheses.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let comm = head.split_once('(').map_or("", |(_, c)| c);
            let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            comm == program && ppid == Some(daemon)
        })
        .filter_map(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            env.split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"PTYHUB_SESSION="))
                .and_then(|v| Uuid::try_parse_ascii(v).ok())
        })
        .collect()
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit then in force.
/// nix's `resource` feature is not enabled in this crate, so util-linux `prlimit` does it.
pub(crate) fn raise_nofile() -> Option<u64> {
    let read = || -> Option<(u64, u64)> {
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        let mut v = line["Max open files".len()..].split_whitespace();
        Some((v.next()?.parse().ok()?, v.next()?.parse().ok()?))
    };
    let (soft, hard) = read()?;
    if soft < hard {
        let status = Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--nofile={hard}:{hard}"))
            .stdout(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("load: could not raise the open-file limit from {soft} to {hard} (prlimit)");
        }
    }
    read().map(|(soft, _)| soft)
}

/// Pids of processes started for one of `sessions` (the daemon sets `PTYHUB_SESSION`).
pub(crate) fn session_processes(sessions: &[Uuid]) -> Vec<i32> {
    let markers: Vec<String> = sessions
        .iter()
        .map(|id| format!("PTYHUB_SESSION={id}"))
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    env.split(|&b| b == 0)
                        .any(|v| markers.iter().any(|m| v == m.as_bytes()))
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Processes started for one of `sessions`, with the session each belongs to (the daemon sets
/// `PTYHUB_SESSION`). Other daemons' sessions (tests running next to the generator) are not
/// ours and are left out.
pub(crate) fn processes_of(sessions: &HashSet<Uuid>) -> Vec<(i32, Uuid)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let id = env
                .split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"PTYHUB_SESSION="))
                .and_then(|v| Uuid::try_parse_ascii(v).ok())?;
            sessions.contains(&id).then_some((pid, id))
        })
        .collect()
}

/// Open descriptors of process `pid` (the entries of `/proc/PID/fd`).
pub(crate) fn fd_count(pid: i32) -> Result<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("reading /proc/{pid}/fd"))?;
    Ok(dir.count() as u64)
}

/// The children of `pid`, each with its state letter (`Z`: a zombie nobody has reaped).
pub(crate) fn children(pid: i32) -> Vec<(i32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // "pid (comm) state ppid …": comm may hold spaces, so split after the parentheses.
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let state = fields.next()?.chars().next()?;
            let ppid: i32 = fields.next()?.parse().ok()?;
            (ppid == pid).then_some((child, state))
        })
        .collect()
}

/// How many times the threads of `pid` were scheduled in so far (the second figure of each
/// /proc/<pid>/task/*/schedstat is time waiting, the third the number of times run): each is a
/// wake-up. Threads that ended are not counted, so read it twice around a quiet moment.
pub(crate) fn wakeups(pid: i32) -> Result<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("reading /proc/{pid}/task"))?;
    let mut total = 0;
    for task in tasks.flatten() {
        if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) {
            total += stat
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// A process's memory and threads now, from /proc/<pid>/status.
pub(crate) fn mem_sample(pid: i32) -> Result<MemSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (has the daemon died?)"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok(MemSample {
        rss_kib: field("VmRSS")?,
        anon_kib: field("RssAnon")?,
        threads: field("Threads")?,
    })
}

/// The proportional set size of `pid` (its share of every page it maps, file pages included),
/// KiB, from /proc/<pid>/smaps_rollup.
pub(crate) fn pss_kib(pid: i32) -> Result<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("reading /proc/{pid}/smaps_rollup"))?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no Pss in /proc/{pid}/smaps_rollup"))
}

/// Every process below `pid` (children, their children, …).
pub(crate) fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for (child, _) in children(p) {
            found.push(child);
            next.push(child);
        }
    }
    found
}
