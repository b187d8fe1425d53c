//! `ptyhub upgrade`: asks the daemon on this machine to replace its binary in place (SIGUSR2,
//! as `systemctl reload` does), waits until the new image answers, and says what changed.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use super::{ClientError, Server};

/// How often the daemon is asked whether the new image is up.
const POLL: Duration = Duration::from_millis(25);

fn field_u64(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn error_at(v: &Value) -> u64 {
    v.get("lastUpgradeError")
        .map(|e| field_u64(e, "atMs"))
        .unwrap_or(0)
}

/// Signals the daemon `server` names (its pid from `/api/version`, or `pid`), waits at most
/// `limit` for the new image; returns the exit status (0: upgraded, 1: refused or failed).
pub async fn run(server: &Server, pid: Option<i32>, limit: Duration) -> Result<i32, ClientError> {
    let before = server.version().await?;
    let pid = match pid {
        Some(pid) => pid,
        None => before
            .get("pid")
            .and_then(Value::as_i64)
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| ClientError::Server("the daemon did not say its pid".into()))?,
    };
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(ClientError::Server(format!(
            "the daemon's process {pid} is not on this machine: run `ptyhub upgrade` on its host"
        )));
    }
    let version = |v: &Value| {
        v.get("version")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    let (old, upgrades, failed_at) = (
        version(&before),
        field_u64(&before, "upgrades"),
        error_at(&before),
    );
    let started = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGUSR2)
        .map_err(|e| ClientError::Server(format!("cannot signal process {pid}: {e}")))?;
    loop {
        tokio::time::sleep(POLL).await;
        if started.elapsed() > limit {
            return Err(ClientError::Server(format!(
                "the daemon did not come back within {} s; see its log",
                limit.as_secs()
            )));
        }
        // While the images change hands, connections wait in the listener's backlog; an error
        // here is the daemon still busy (or gone: then the time limit says so).
        let Ok(now) = server.version().await else {
            continue;
        };
        if field_u64(&now, "upgrades") > upgrades {
            println!(
                "upgraded ptyhub {old} → {} in {} ms (pid {pid}, {} sessions kept)",
                version(&now),
                started.elapsed().as_millis(),
                field_u64(&now, "sessions"),
            );
            return Ok(0);
        }
        if error_at(&now) > failed_at {
            let why = now
                .pointer("/lastUpgradeError/message")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            eprintln!("ptyhub: upgrade refused, the daemon goes on as it was: {why}");
            return Ok(1);
        }
    }
}
