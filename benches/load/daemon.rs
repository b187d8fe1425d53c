//! The daemon under test: its config, its binary, and a handle that starts it on 127.0.0.1:0
//! (through `launcher`, tests/common/launcher.rs, shared with the integration tests), talks REST
//! and `/metrics` to it, and stops it, checking that no session process outlives it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use uuid::Uuid;

use crate::client::STEP_TIMEOUT;
use crate::echo::ECHO_SCRIPT;
use crate::launcher::{Launch, Process, Stopped, STOP_TIMEOUT};
use crate::procfs::{process_cpu_seconds, running_sessions, session_processes, MemSample};
use crate::Ctx;

/// RSS counts as settled when two reads this far apart differ by less than 0.5%.
const SETTLE_STEP: Duration = Duration::from_millis(200);
/// RSS counts as settled when it moved less than 0.5% over this many steps (2 s): jemalloc
/// hands freed pages back gradually over about 10 s, a little each step.
const SETTLE_STEPS: usize = 10;
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The config file of every scenario: sessions recorded (the default), into the run's directory.
pub(crate) const CONFIG: &str = "ptyhub.toml";
/// The same config with recording off, for the record scenario's comparison.
pub(crate) const NO_RECORDING_CONFIG: &str = "ptyhub-norec.toml";

/// `config()` with recordings into `dir`, on or off.
pub(crate) fn config_recording(dir: &std::path::Path, enabled: bool) -> String {
    format!(
        "{}\n[recording]\nenabled = {enabled}\ndir = {:?}\n",
        config(),
        dir.join("recordings")
    )
}

/// The daemon config: a quiet bash with a fixed prompt, the raw-mode `cat` for echo timing, an
/// idle program for memory, and for the soak the same bash as an agent with a YOLO mode.
pub(crate) fn config() -> String {
    format!(
        r#"
[session]
kill_grace = "1s"

# Every viewer of the run comes from 127.0.0.1, into one session; memory makes many sessions.
[limits]
max_sessions = 10000
max_viewers_per_session = 10000
max_connections_per_ip = 10000

[assistants.shell]
name = "Shell"
command = ["bash", "--norc", "--noprofile", "-i"]
env = {{ PS1 = "$ ", HISTFILE = "/dev/null" }}

[assistants.echo]
name = "Echo"
command = ["bash", "-c", "{ECHO_SCRIPT}"]

# memory: a program that holds a PTY, prints a prompt once (so its screen has been parsed, as
# an idle shell's has) and then nothing, so only the daemon's memory moves.
[assistants.idle]
name = "Idle"
command = ["sh", "-c", "printf 'idle $ '; exec sleep 3600"]

# soak: YOLO restarts. The YOLO run has SOAK_YOLO=1, so a viewer can tell which one is up. Its
# arguments differ from `command` in order only: a `yolo` equal to `command` would start every
# session in YOLO mode.
[assistants.agent]
name = "Agent"
command = ["bash", "--norc", "--noprofile", "-i"]
env = {{ PS1 = "$ ", HISTFILE = "/dev/null" }}
yolo = ["bash", "--noprofile", "--norc", "-i"]
yolo_env = {{ SOAK_YOLO = "1" }}
"#
    )
}

/// `PTYHUB_BIN`, else the binary cargo built for this bench (the release profile), else a build.
pub(crate) fn daemon_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PTYHUB_BIN") {
        return Ok(PathBuf::from(p));
    }
    let built = PathBuf::from(crate::launcher::CARGO_BIN);
    if built.exists() {
        return Ok(built);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "ptyhub"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .context("running cargo build")?;
    if !status.success() || !built.exists() {
        bail!(
            "cargo build --release --bin ptyhub failed ({status}); set PTYHUB_BIN to a daemon binary"
        );
    }
    Ok(built)
}

/// A daemon of our own on 127.0.0.1:0 (started by the launcher shared with tests/common).
/// Stopped (SIGTERM, then SIGKILL) when dropped.
pub(crate) struct Daemon {
    process: Process,
    pub(crate) addr: SocketAddr,
    pub(crate) log: PathBuf,
    /// Sessions we created, to find processes the daemon leaves behind.
    pub(crate) sessions: Vec<Uuid>,
    /// For `/metrics` and `/api/sessions` (with `--auth`, it presents the token).
    http: reqwest::Client,
    /// `--auth`: the token every connection presents (else the daemon runs `--no-auth`).
    token: Option<String>,
}

impl Daemon {
    pub(crate) fn start(ctx: &Ctx, name: &str) -> Result<Daemon> {
        Self::start_config(ctx, name, CONFIG)
    }

    /// A daemon with the config file `config` of the run's directory ([`CONFIG`] or
    /// [`NO_RECORDING_CONFIG`]).
    pub(crate) fn start_config(ctx: &Ctx, name: &str, config: &str) -> Result<Daemon> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &ctx.token {
            let bearer = format!("Bearer {token}")
                .parse()
                .context("the token header")?;
            headers.insert(reqwest::header::AUTHORIZATION, bearer);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            // 127.0.0.1 only, whatever HTTP_PROXY says.
            .no_proxy()
            // No idle keep-alive connection: it would hold up the daemon's graceful shutdown.
            .pool_max_idle_per_host(0)
            .timeout(STEP_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        let log = ctx.dir.join(format!("daemon-{name}.log"));
        let auth = match &ctx.token {
            Some(token) => vec!["--token".to_owned(), token.clone()],
            // Loopback only; without --auth the generator measures sessions, not
            // authentication.
            None => vec!["--no-auth".to_owned()],
        };
        let process = Launch::new(&ctx.bin, ctx.dir.join(config), &ctx.dir, &log)
            .args(auth)
            .env("RUST_LOG", "info")
            // API tokens and the audit trail in the run's directory, not the user's.
            .env("XDG_STATE_HOME", &ctx.dir)
            .env_remove("STATE_DIRECTORY")
            .ready_timeout(STEP_TIMEOUT)
            .spawn()?;
        Ok(Daemon {
            addr: process.addr(),
            process,
            log,
            sessions: Vec::new(),
            http,
            token: ctx.token.clone(),
        })
    }

    pub(crate) fn ws(&self, id: Uuid, query: &str) -> String {
        ws_url(self.addr, id, query, self.token.as_deref())
    }

    pub(crate) fn new_session(&mut self) -> Uuid {
        let id = Uuid::new_v4();
        self.sessions.push(id);
        id
    }

    pub(crate) fn pid(&self) -> Option<i32> {
        self.process.pid().map(|pid| pid as i32)
    }

    /// CPU seconds (user + system, all threads) the daemon has used so far.
    pub(crate) fn cpu_seconds(&self) -> Result<f64> {
        let pid = self.pid().context("daemon not running")?;
        process_cpu_seconds(&pid.to_string()).context("the daemon's CPU time")
    }

    /// `GET /metrics`: every sample line, keyed by name and labels as written.
    pub(crate) async fn metrics(&self) -> Result<Metrics> {
        self.api().metrics().await
    }

    /// A handle for REST calls from tasks on other threads.
    pub(crate) fn api(&self) -> Api {
        Api {
            addr: self.addr,
            http: self.http.clone(),
            token: self.token.clone(),
        }
    }

    /// Polls `/metrics` until `ptyhub_viewers` is `n`.
    pub(crate) async fn wait_viewer_gauge(&self, n: u64, limit: Duration) -> Result<()> {
        self.wait_gauge("ptyhub_viewers", n, limit).await
    }

    /// Waits until the daemon's gauge `name` reads `n`.
    pub(crate) async fn wait_gauge(&self, name: &str, n: u64, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let now = self.metrics().await?.get(name);
            if now == n {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the daemon's {name} is {now}, not {n}, after {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /api/sessions`: every session, as the API says it.
    pub(crate) async fn sessions_json(&self) -> Result<Vec<serde_json::Value>> {
        let url = format!("http://{}/api/sessions", self.addr);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .context("GET /api/sessions")?;
        resp.json().await.context("GET /api/sessions")
    }

    /// `POST /api/sessions` running `assistant`; the session is not necessarily up yet.
    pub(crate) async fn create_session(&mut self, assistant: &str) -> Result<Uuid> {
        let id = self.new_session();
        let url = format!("http://{}/api/sessions", self.addr);
        let resp = self
            .http
            .post(&url)
            .json(&json!({ "assistant": assistant, "id": id }))
            .send()
            .await
            .context("POST /api/sessions")?;
        let status = resp.status();
        if !status.is_success() {
            bail!(
                "POST /api/sessions: {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        Ok(id)
    }

    /// Waits until every one of `ids` runs `program` (its exec done), polling /proc.
    /// Creates `n` sessions of the idle program and waits until each runs it.
    pub(crate) async fn idle_sessions(&mut self, n: usize) -> Result<Vec<Uuid>> {
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let id = self
                .create_session("idle")
                .await
                .with_context(|| format!("creating idle session {i}"))?;
            ids.push(id);
        }
        let limit = STEP_TIMEOUT + Duration::from_millis(50 * n as u64);
        self.wait_running(&ids, "sleep", limit).await?;
        Ok(ids)
    }

    pub(crate) async fn wait_running(
        &self,
        ids: &[Uuid],
        program: &str,
        limit: Duration,
    ) -> Result<()> {
        let pid = self.pid().context("daemon not running")?;
        let deadline = Instant::now() + limit;
        loop {
            let up = running_sessions(pid, program);
            let missing = ids.iter().filter(|id| !up.contains(id)).count();
            if missing == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{missing} of {} sessions not running {program} after {limit:?}",
                    ids.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The daemon's memory now, from /proc/<pid>/status.
    pub(crate) fn memory(&self) -> Result<MemSample> {
        crate::procfs::mem_sample(self.pid().context("daemon not running")?)
    }

    /// The memory once RSS stops moving (queued writes drained, lazy allocations done), or after
    /// `SETTLE_LIMIT` at the latest.
    pub(crate) async fn settled_memory(&self) -> Result<MemSample> {
        let deadline = Instant::now() + SETTLE_LIMIT;
        let mut window = std::collections::VecDeque::from([self.memory()?.rss_kib]);
        loop {
            tokio::time::sleep(SETTLE_STEP).await;
            let now = self.memory()?;
            let then = window[0];
            if (window.len() == SETTLE_STEPS && now.rss_kib.abs_diff(then) * 200 < then)
                || Instant::now() >= deadline
            {
                return Ok(now);
            }
            if window.len() == SETTLE_STEPS {
                window.pop_front();
            }
            window.push_back(now.rss_kib);
        }
    }

    /// Resyncs the daemon logged, and its WARN/ERROR lines.
    fn log_findings(&self) -> (usize, Vec<String>) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let resyncs = text.lines().filter(|l| l.contains("resyncing")).count();
        let warnings = text
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_owned)
            .collect();
        (resyncs, warnings)
    }

    /// Its WARN/ERROR lines so far, counted by message (see [`warning_kinds`]).
    pub(crate) fn warnings_by_message(&self) -> Vec<(usize, String)> {
        warning_kinds(&self.log_findings().1)
    }

    /// SIGTERM, wait, SIGKILL if needed, then make sure no session process outlived it.
    /// Returns what went wrong (nothing, normally).
    fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        match self.process.stop(STOP_TIMEOUT) {
            Stopped::NotRunning => return problems,
            Stopped::Exited(status) if status.success() => {}
            Stopped::Exited(status) => {
                problems.push(format!("daemon exited with {status} after SIGTERM"))
            }
            Stopped::Killed => problems.push(format!(
                "daemon still running {STOP_TIMEOUT:?} after SIGTERM: killed"
            )),
        }
        let left = session_processes(&self.sessions);
        if !left.is_empty() {
            for &pid in &left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            problems.push(format!(
                "session processes outlived the daemon (killed them): pids {left:?}"
            ));
        }
        problems
    }

    /// Stops the daemon and files its findings under `what`.
    pub(crate) fn finish(mut self, what: &str, notes: &mut Vec<String>) -> usize {
        let (resyncs, warnings) = self.log_findings();
        for (count, kind) in warning_kinds(&warnings) {
            notes.push(format!("{what}: daemon logged {count} × {kind}"));
        }
        for p in self.stop() {
            notes.push(format!("{what}: {p}"));
        }
        resyncs
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        for p in self.stop() {
            eprintln!("load: {p}");
        }
    }
}

/// One scrape of `/metrics`.
pub(crate) struct Metrics(HashMap<String, f64>);

/// The daemon's address and an HTTP client: what a task needs to call its REST API.
#[derive(Clone)]
pub(crate) struct Api {
    addr: SocketAddr,
    http: reqwest::Client,
    token: Option<String>,
}

/// A session's WebSocket address with `query` (empty or `?...`), presenting `token` if any.
fn ws_url(addr: SocketAddr, id: Uuid, query: &str, token: Option<&str>) -> String {
    match token {
        None => format!("ws://{addr}/ws/{id}{query}"),
        Some(t) if query.is_empty() => format!("ws://{addr}/ws/{id}?token={t}"),
        Some(t) => format!("ws://{addr}/ws/{id}{query}&token={t}"),
    }
}

impl Api {
    pub(crate) fn ws(&self, id: Uuid, query: &str) -> String {
        ws_url(self.addr, id, query, self.token.as_deref())
    }

    /// `GET /metrics`: every sample line, keyed by name and labels as written.
    pub(crate) async fn metrics(&self) -> Result<Metrics> {
        let url = format!("http://{}/metrics", self.addr);
        let resp = self.http.get(&url).send().await.context("GET /metrics")?;
        let status = resp.status();
        let text = resp.text().await.context("reading /metrics")?;
        if !status.is_success() {
            bail!("GET /metrics: {status}: {text}");
        }
        Ok(Metrics(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (key, value) = l.rsplit_once(' ')?;
                    Some((key.to_owned(), value.parse().ok()?))
                })
                .collect(),
        ))
    }

    /// `POST /api/sessions` with our own uuid, running `assistant` in `cwd`.
    pub(crate) async fn create(&self, id: Uuid, assistant: &str, cwd: &Path) -> Result<()> {
        let url = format!("http://{}/api/sessions", self.addr);
        let body = json!({ "assistant": assistant, "id": id, "cwd": cwd });
        let resp = self.http.post(&url).json(&body).send().await;
        let resp = resp.context("POST /api/sessions")?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("POST /api/sessions: {status}: {text}");
        }
        Ok(())
    }

    /// `DELETE /api/sessions/{id}`: ends the session (SIGHUP, SIGTERM, SIGKILL after the grace).
    pub(crate) async fn delete(&self, id: Uuid) -> Result<()> {
        let url = format!("http://{}/api/sessions/{id}", self.addr);
        let resp = self.http.delete(&url).send().await;
        let resp = resp.with_context(|| format!("DELETE /api/sessions/{id}"))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("DELETE /api/sessions/{id}: {status}: {text}");
        }
        Ok(())
    }

    /// `GET /api/sessions`: how many sessions the daemon holds.
    pub(crate) async fn session_count(&self) -> Result<usize> {
        let url = format!("http://{}/api/sessions", self.addr);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .context("GET /api/sessions")?;
        let list: Vec<serde_json::Value> = resp.json().await.context("GET /api/sessions")?;
        Ok(list.len())
    }
}

impl Metrics {
    /// A sample by name (with labels, as written); 0 when absent.
    pub(crate) fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0.0) as u64
    }

    /// Whether the daemon reports `key` at all (an older binary may not).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// How much `key` grew since `before`.
    pub(crate) fn since(&self, before: &Metrics, key: &str) -> u64 {
        self.get(key).saturating_sub(before.get(key))
    }
}

/// WARN/ERROR lines grouped by what they say (level, module and message, without the time
/// and the `key=value` fields), most frequent first: every kind is reported, none cut off.
fn warning_kinds(lines: &[String]) -> Vec<(usize, String)> {
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for line in lines {
        let body = line
            .find(" WARN ")
            .or_else(|| line.find(" ERROR "))
            .map_or(line.as_str(), |at| line[at..].trim_start());
        let kind: Vec<&str> = body
            .split_whitespace()
            .filter(|w| !w.contains('='))
            .collect();
        *kinds.entry(kind.join(" ")).or_default() += 1;
    }
    let mut kinds: Vec<(usize, String)> = kinds.into_iter().map(|(k, n)| (n, k)).collect();
    kinds.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    kinds
}
