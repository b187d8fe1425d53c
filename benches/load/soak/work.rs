//! The soak's workload: workers that run sessions one after the other and operate on them
//! (pastes, floods, counters, chat, uploads, YOLO restarts, viewers joining, leaving and
//! dropping out), visitors that come and go across sessions, and the seeded generator behind
//! every choice.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::json;
use tokio::time::timeout_at;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use super::viewer::{Checked, Peer};
use super::{
    lock, Env, END_LIMIT, MAX_COUNT, MAX_EXTRAS, MAX_FLOOD, MAX_PASTE, MAX_UPLOAD, MAX_VISITORS,
};
use crate::client::{connect, Ws, STEP_TIMEOUT};
use crate::procfs::processes_of;

/// SplitMix64: small, fast, and the same sequence for the same seed everywhere.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A generator of its own for a task, so tasks do not share one sequence.
    pub(super) fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }

    /// Uniform in `lo..=hi`.
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }

    /// Log-uniform in `lo..=hi`: small sizes often, large ones now and then.
    pub(super) fn size(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo.max(1) as f64).ln(), (hi as f64).ln());
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((a + (b - a) * u).exp() as u64).clamp(lo, hi)
    }

    pub(super) fn duration_ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    pub(super) fn uuid(&mut self) -> Uuid {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next().to_le_bytes());
        bytes[8..].copy_from_slice(&self.next().to_le_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// Printable ASCII lines (0 to 120 characters and a newline), `len` bytes in all.
    pub(super) fn printable(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let line = self.range(0, 120) as usize;
            for _ in 0..line.min(len - out.len() - 1) {
                out.push(b' ' + (self.next() % 95) as u8);
            }
            out.push(b'\n');
        }
        out.truncate(len);
        out
    }

    pub(super) fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// What a worker does next on its session.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    Paste,
    Flood,
    Counter,
    Chat,
    Upload,
    Yolo,
    Join,
    Leave,
    Resize,
    Reconnect,
}

impl Op {
    pub(super) fn pick(rng: &mut Rng) -> Op {
        const WEIGHTS: [(Op, u64); 10] = [
            (Op::Paste, 14),
            (Op::Flood, 8),
            (Op::Counter, 10),
            (Op::Chat, 14),
            (Op::Upload, 10),
            (Op::Yolo, 6),
            (Op::Join, 12),
            (Op::Leave, 10),
            (Op::Resize, 6),
            (Op::Reconnect, 4),
        ];
        let total: u64 = WEIGHTS.iter().map(|(_, w)| w).sum();
        let mut x = rng.range(0, total - 1);
        for (op, w) in WEIGHTS {
            if x < w {
                return op;
            }
            x -= w;
        }
        Op::Chat
    }
}

/// A worker: sessions one after the other until `until`, each with a few dozen operations.
pub(super) async fn worker(w: usize, phase: u64, mut rng: Rng, env: Arc<Env>, until: Instant) {
    let mut round = 0;
    while Instant::now() < until {
        let tag = format!("p{phase}-w{w}-r{round}");
        // The warm-up's first session does each large operation once.
        let big = phase == 0 && round == 0;
        if let Err(e) = session_round(&mut rng, &tag, big, &env, until).await {
            env.fail(format!("{tag}: {e:#}"));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        round += 1;
    }
}

/// One session's life: created, joined, operated on, ended, its processes checked gone.
pub(super) async fn session_round(
    rng: &mut Rng,
    tag: &str,
    big: bool,
    env: &Arc<Env>,
    until: Instant,
) -> Result<()> {
    let id = rng.uuid();
    let agent = rng.chance(0.3);
    let cwd = env.root.join(tag);
    std::fs::create_dir_all(&cwd).context("creating the session's directory")?;
    lock(&env.sessions).insert(id);
    env.api
        .create(id, if agent { "agent" } else { "shell" }, &cwd)
        .await?;
    env.add(|c| &c.sessions_created, 1);
    lock(&env.live).push(id);
    let mut s = Sess {
        id,
        cwd,
        agent,
        typist: None,
        extras: Vec::new(),
        n: 0,
    };
    let result = async {
        let url = env.api.ws(id, "");
        s.typist = Some(Peer::open(env, url, rng.chance(0.5), true).await?);
        let k = s.next();
        s.typed(
            &format!("echo SOAK-$((1+{k}))-UP\r"),
            &format!("SOAK-{}-UP", k + 1),
            0,
        )
        .await
        .context("waiting for the shell")?;
        let mut ops: Vec<Op> = if big {
            vec![Op::Paste, Op::Flood, Op::Counter, Op::Upload]
        } else {
            Vec::new()
        };
        let more = rng.range(6, 30) as usize;
        ops.extend((0..more).map(|_| Op::pick(rng)));
        for (i, op) in ops.into_iter().enumerate() {
            if Instant::now() >= until {
                break;
            }
            let largest = big && i < 4;
            s.op(op, largest, rng, env)
                .await
                .with_context(|| format!("session {id}, {op:?}"))?;
            tokio::time::sleep(rng.duration_ms(10, 300)).await;
        }
        anyhow::Ok(())
    }
    .await;
    // Out of the visitors' reach first, so a visitor refused by an ending session knows why.
    lock(&env.live).retain(|x| *x != id);
    let ended = s.end(rng, env, result.is_ok()).await;
    let _ = std::fs::remove_dir_all(&s.cwd);
    result.and(ended.with_context(|| format!("ending session {id}")))
}

/// A worker's session and its viewers.
pub(super) struct Sess {
    id: Uuid,
    cwd: PathBuf,
    agent: bool,
    /// The viewer that types and reads everything; `None` once it failed.
    typist: Option<Peer>,
    extras: Vec<Extra>,
    /// The number of the next marker, so every marker of the session is new.
    n: u64,
}

/// An extra viewer: one that reads (and verifies counters), or one that never reads.
pub(super) enum Extra {
    Reader(Box<Peer>),
    // Both boxed: a client socket (TLS-capable) makes either variant a few hundred bytes.
    Stalled(Box<Ws>),
}

impl Sess {
    pub(super) fn next(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    pub(super) fn typist(&mut self) -> Result<&mut Peer> {
        self.typist.as_mut().context("the typist is gone")
    }

    /// Types `line` and waits for `marker` (in output or a snapshot), allowing for `bytes`.
    pub(super) async fn typed(&mut self, line: &str, marker: &str, bytes: u64) -> Result<()> {
        let t = self.typist()?;
        t.send(Message::Binary(line.as_bytes().to_vec())).await?;
        t.wait_output(marker, op_deadline(bytes)).await
    }

    pub(super) async fn op(
        &mut self,
        op: Op,
        largest: bool,
        rng: &mut Rng,
        env: &Arc<Env>,
    ) -> Result<()> {
        match op {
            Op::Paste => self.paste(largest, rng, env).await,
            Op::Flood => self.flood(largest, false, rng, env).await,
            Op::Reconnect => self.flood(false, true, rng, env).await,
            Op::Counter => self.counter(largest, rng, env).await,
            Op::Chat => self.chat(rng, env).await,
            Op::Upload => self.upload(largest, rng, env).await,
            Op::Yolo if self.agent => self.toggle_yolo(env).await,
            Op::Yolo | Op::Resize => self.resize(rng, env).await,
            Op::Join => self.join(rng, env).await,
            Op::Leave => {
                self.leave(rng, env).await;
                Ok(())
            }
        }
    }

    /// Printable lines into `head -c N > file` on a raw, non-echoing terminal, in frames of
    /// 64 KiB (as the UI sends a paste) or of random sizes; the file must hold them exactly.
    pub(super) async fn paste(&mut self, largest: bool, rng: &mut Rng, env: &Env) -> Result<()> {
        let len = if largest {
            MAX_PASTE
        } else {
            rng.size(1, MAX_PASTE)
        };
        let data = rng.printable(len as usize);
        let k = self.next();
        let file = format!("paste-{k}.txt");
        let line = format!(
            "stty raw -echo; printf 'PASTE-%s-READY' {k}; head -c {len} > {file}; stty sane; \
             printf 'PASTE-%s-DONE\\n' {k}\r"
        );
        self.typed(&line, &format!("PASTE-{k}-READY"), 0).await?;
        let fixed = rng.chance(0.5);
        let path = self.cwd.join(&file);
        let t = self.typist()?;
        let mut at = 0;
        while at < data.len() {
            let frame = if fixed {
                64 << 10
            } else {
                rng.size(1, 64 << 10) as usize
            };
            let end = (at + frame).min(data.len());
            t.send(Message::Binary(data[at..end].to_vec())).await?;
            at = end;
        }
        let done = t
            .wait_output(&format!("PASTE-{k}-DONE"), op_deadline(len))
            .await;
        if let Err(e) = done {
            let size = std::fs::metadata(&path).map(|m| m.len()).ok();
            bail!("{e:#}; {len} bytes pasted, the file holds {size:?}");
        }
        let got = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let _ = std::fs::remove_file(&path);
        check_bytes(env, "paste", &data, &got)?;
        env.add(|c| &c.pastes, 1);
        env.add(|c| &c.paste_bytes, len);
        Ok(())
    }

    /// `yes | head -c N`, to the end marker; with `reconnect`, the typist is dropped mid-way
    /// and joins again (the marker then comes in its snapshot or its live output). Otherwise an
    /// extra viewer may be dropped mid-way.
    pub(super) async fn flood(
        &mut self,
        largest: bool,
        reconnect: bool,
        rng: &mut Rng,
        env: &Arc<Env>,
    ) -> Result<()> {
        let len = if largest {
            MAX_FLOOD
        } else {
            rng.size(4 << 10, MAX_FLOOD)
        };
        let k = self.next();
        let word =
            ["y", "flood", "soak line of text", "0123456789abcdef"][rng.range(0, 3) as usize];
        let line = format!("yes '{word}' | head -c {len}; printf '\\nFLOOD-%s-END\\n' {k}\r");
        let marker = format!("FLOOD-{k}-END");
        self.typist()?
            .send(Message::Binary(line.into_bytes()))
            .await?;
        if reconnect {
            tokio::time::sleep(rng.duration_ms(0, 200)).await;
            if let Some(old) = self.typist.take() {
                old.drop_abruptly();
            }
            let url = env.api.ws(self.id, "");
            self.typist = Some(Peer::open(env, url, rng.chance(0.5), true).await?);
            env.add(|c| &c.typist_reconnects, 1);
        } else {
            self.maybe_drop_mid_stream(rng, env).await;
        }
        self.typist()?
            .wait_output(&marker, op_deadline(len))
            .await?;
        env.add(|c| &c.floods, 1);
        env.add(|c| &c.flood_bytes, len);
        Ok(())
    }

    /// `seq 1 N` between two markers; the typist must have verified every line.
    pub(super) async fn counter(&mut self, largest: bool, rng: &mut Rng, env: &Env) -> Result<()> {
        let n = if largest {
            MAX_COUNT
        } else {
            rng.size(10, MAX_COUNT)
        };
        let k = self.next();
        let line =
            format!("printf 'CNT-%s-%s-BEGIN\\n' {k} {n}; seq 1 {n}; printf 'CNT-%s-END\\n' {k}\r");
        self.typist()?
            .send(Message::Binary(line.into_bytes()))
            .await?;
        self.maybe_drop_mid_stream(rng, env).await;
        let t = self.typist()?;
        let deadline = op_deadline(n * 8);
        t.wait_output(&format!("CNT-{k}-END"), deadline).await?;
        // The marker may have come before the end of its line, which completes the check.
        t.wait_counted(k, Instant::now() + STEP_TIMEOUT).await;
        env.add(|c| &c.counters, 1);
        match t.counted.iter().find(|(x, _)| *x == k) {
            Some((_, Checked::Verified { .. })) => Ok(()),
            // A resync is the daemon's right when a viewer falls behind; counted, not failed.
            Some((_, Checked::Skipped)) => Ok(()),
            Some((_, Checked::Wrong(why))) => bail!("counter {k} of {n} lines: {why}"),
            None => bail!("counter {k}: the typist saw its end but not its beginning"),
        }
    }

    /// A random extra viewer dropped without a close frame, after a short while, half the time.
    pub(super) async fn maybe_drop_mid_stream(&mut self, rng: &mut Rng, env: &Env) {
        if self.extras.is_empty() || !rng.chance(0.5) {
            return;
        }
        tokio::time::sleep(rng.duration_ms(0, 150)).await;
        let i = rng.range(0, self.extras.len() as u64 - 1) as usize;
        match self.extras.swap_remove(i) {
            Extra::Reader(p) => p.drop_abruptly(),
            Extra::Stalled(ws) => drop(ws),
        }
        env.add(|c| &c.viewers_dropped, 1);
        env.add(|c| &c.mid_stream_drops, 1);
    }

    pub(super) async fn chat(&mut self, rng: &mut Rng, env: &Env) -> Result<()> {
        let k = self.next();
        let words = [
            "soak",
            "hello",
            "ünïcödé",
            "tab\there",
            "quote\"s",
            "<b>",
            "🙂",
        ];
        let mut text = format!("chat {k} from {}", self.id);
        for _ in 0..rng.range(0, 30) {
            text.push(' ');
            text.push_str(words[rng.range(0, words.len() as u64 - 1) as usize]);
        }
        let t = self.typist()?;
        let msg = json!({ "type": "chat", "userName": "soak", "text": text });
        t.send(Message::Text(msg.to_string())).await?;
        t.wait_json("the chat's echo", op_deadline(0), |v| {
            v["type"] == "chat" && v["text"] == text.as_str()
        })
        .await?;
        env.add(|c| &c.chats, 1);
        Ok(())
    }

    /// An upload of random bytes: saved byte for byte, its path typed into the shell (cleared
    /// with Ctrl-U); or, one time in ten, a bad name that must be refused.
    pub(super) async fn upload(&mut self, largest: bool, rng: &mut Rng, env: &Env) -> Result<()> {
        let k = self.next();
        let bad = !largest && rng.chance(0.1);
        let name = if bad {
            "..".to_owned()
        } else {
            format!("up-{k}.bin")
        };
        let len = if largest {
            MAX_UPLOAD
        } else {
            rng.size(1, MAX_UPLOAD) - 1
        };
        let data = rng.bytes(len as usize);
        let mut frame = vec![0x01];
        frame.extend_from_slice(&(name.len() as u16).to_be_bytes());
        frame.extend_from_slice(name.as_bytes());
        frame.extend_from_slice(&data);
        let t = self.typist()?;
        t.pending.clear();
        t.send(Message::Binary(frame)).await?;
        let reply = t
            .wait_json("file_upload", op_deadline(len), |v| {
                v["type"] == "file_upload"
            })
            .await?;
        if bad {
            if reply["success"] != false {
                bail!("an upload named {name:?} was not refused: {reply}");
            }
            env.add(|c| &c.upload_refusals, 1);
            return Ok(());
        }
        if reply["success"] != true {
            bail!("upload of {len} bytes as {name}: {reply}");
        }
        // Clear the path the daemon typed at the prompt.
        t.send(Message::Binary(vec![0x15])).await?;
        let saved = reply["filename"].as_str().unwrap_or(&name);
        let path = self.cwd.join(".ptyhub/uploads").join(saved);
        let got = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let _ = std::fs::remove_file(&path);
        check_bytes(env, "upload", &data, &got)?;
        env.add(|c| &c.uploads, 1);
        env.add(|c| &c.upload_bytes, len);
        Ok(())
    }

    /// Restarts the agent in the other mode; the new one must be up, alone, in that mode.
    pub(super) async fn toggle_yolo(&mut self, env: &Env) -> Result<()> {
        let t = self.typist()?;
        // Every status before the toggle has the mode it leaves; the one after the restart, with
        // `restarting` false, has the mode it enters.
        if t.yolo.is_none() {
            t.wait_json("a status", op_deadline(0), |v| v["type"] == "status")
                .await?;
        }
        let want = !t.yolo.context("a status without yoloMode")?;
        t.pending.clear();
        t.send(Message::Text(json!({ "type": "toggle_yolo" }).to_string()))
            .await?;
        t.wait_json("status after the restart", op_deadline(0), |v| {
            v["type"] == "status" && v["yoloMode"] == want && v["restarting"] == false
        })
        .await?;
        let k = self.next();
        let mode = u8::from(want);
        self.typed(
            &format!("echo Y-$((1+{k}))-${{SOAK_YOLO:-0}}-UP\r"),
            &format!("Y-{}-{mode}-UP", k + 1),
            0,
        )
        .await
        .context("the restarted agent")?;
        let ours = HashSet::from([self.id]);
        let deadline = Instant::now() + END_LIMIT;
        loop {
            let procs = processes_of(&ours);
            if procs.len() <= 1 {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "after a YOLO restart the session has {} processes",
                    procs.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        env.add(|c| &c.yolo_restarts, 1);
        Ok(())
    }

    pub(super) async fn resize(&mut self, rng: &mut Rng, env: &Env) -> Result<()> {
        let rows = rng.range(10, 60) as u16;
        let cols = rng.range(40, 220) as u16;
        let [rh, rl] = rows.to_be_bytes();
        let [ch, cl] = cols.to_be_bytes();
        self.typist()?
            .send(Message::Binary(vec![0x00, rh, rl, ch, cl]))
            .await?;
        env.add(|c| &c.resizes, 1);
        Ok(())
    }

    pub(super) async fn join(&mut self, rng: &mut Rng, env: &Arc<Env>) -> Result<()> {
        if self.extras.len() >= MAX_EXTRAS {
            return Ok(());
        }
        let url = env.api.ws(self.id, "");
        if rng.chance(0.2) {
            self.extras
                .push(Extra::Stalled(Box::new(stalled_viewer(&url).await?)));
            env.add(|c| &c.stalled_joined, 1);
        } else {
            let peer = Peer::open(env, url, rng.chance(0.5), false).await?;
            self.extras.push(Extra::Reader(Box::new(peer)));
            env.add(|c| &c.viewers_joined, 1);
        }
        Ok(())
    }

    pub(super) async fn leave(&mut self, rng: &mut Rng, env: &Env) {
        if self.extras.is_empty() {
            return;
        }
        let i = rng.range(0, self.extras.len() as u64 - 1) as usize;
        match (self.extras.swap_remove(i), rng.chance(0.5)) {
            (Extra::Reader(p), true) => {
                p.close().await;
                env.add(|c| &c.viewers_left, 1);
            }
            (Extra::Reader(p), false) => {
                p.drop_abruptly();
                env.add(|c| &c.viewers_dropped, 1);
            }
            (Extra::Stalled(mut ws), true) => {
                // It never read, so its close may wait behind a full socket: bounded.
                let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
                env.add(|c| &c.viewers_left, 1);
            }
            (Extra::Stalled(ws), false) => {
                drop(ws);
                env.add(|c| &c.viewers_dropped, 1);
            }
        }
    }

    /// Ends the session (after its program exits, a third of the time): every viewer must be
    /// told 4003, and every process of the session must be gone within `END_LIMIT`.
    pub(super) async fn end(&mut self, rng: &mut Rng, env: &Env, healthy: bool) -> Result<()> {
        let mut problems = Vec::new();
        if healthy && rng.chance(0.3) {
            let exited = async {
                let t = self.typist()?;
                t.pending.clear();
                t.send(Message::Binary(b"exit\r".to_vec())).await?;
                t.wait_json("exit", op_deadline(0), |v| v["type"] == "exit")
                    .await
            };
            match exited.await {
                Ok(_) => env.add(|c| &c.programs_exited, 1),
                Err(e) => problems.push(format!("exit: {e:#}")),
            }
        }
        if let Err(e) = env.api.delete(self.id).await {
            problems.push(format!("{e:#}"));
        } else {
            env.add(|c| &c.sessions_ended, 1);
        }
        if let Some(mut t) = self.typist.take() {
            match t.wait_closed(op_deadline(0)).await {
                Ok(Some(4003)) => env.add(|c| &c.closes_4003, 1),
                Ok(code) if healthy => {
                    problems.push(format!("the typist was closed with {code:?}, not 4003"))
                }
                Err(e) if healthy => problems.push(format!("the typist: {e:#}")),
                _ => {}
            }
        }
        for extra in self.extras.drain(..) {
            match extra {
                Extra::Reader(p) => p.drop_abruptly(),
                Extra::Stalled(ws) => drop(ws),
            }
        }
        let ours = HashSet::from([self.id]);
        let deadline = Instant::now() + END_LIMIT;
        loop {
            let left = processes_of(&ours);
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                env.add(|c| &c.orphan_sessions, 1);
                let pids: Vec<i32> = left.iter().map(|(p, _)| *p).collect();
                problems.push(format!(
                    "processes {pids:?} still there {END_LIMIT:?} after the end"
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }
}

/// Now plus 30 s, plus 4 s per MiB the operation moves (the machine is shared and small).
pub(super) fn op_deadline(bytes: u64) -> Instant {
    Instant::now() + Duration::from_secs(30) + Duration::from_millis(bytes * 4000 / (1 << 20))
}

/// Compares what arrived with what was sent; counts the bytes past the first difference as lost.
pub(super) fn check_bytes(env: &Env, what: &str, sent: &[u8], got: &[u8]) -> Result<()> {
    if sent == got {
        return Ok(());
    }
    let same = sent.iter().zip(got).take_while(|(a, b)| a == b).count();
    let lost = sent.len().max(got.len()) - same;
    env.add(|c| &c.lost_bytes, lost as u64);
    bail!(
        "{what}: {} bytes sent, {} arrived, the first {same} identical",
        sent.len(),
        got.len()
    )
}

/// Visitors: viewers joining, leaving and dropping out of the workers' sessions at random.
pub(super) async fn visitors(mut rng: Rng, env: Arc<Env>, until: Instant) {
    let mut present: Vec<Peer> = Vec::new();
    while Instant::now() < until {
        tokio::time::sleep(rng.duration_ms(100, 1000)).await;
        // Those whose session ended were closed by the daemon.
        let before = present.len();
        present.retain(|p| !p.reader.is_finished());
        env.add(|c| &c.visitors_ended, (before - present.len()) as u64);
        match rng.range(0, 9) {
            0..=5 if present.len() < MAX_VISITORS => {
                let pick = {
                    let live = lock(&env.live);
                    (!live.is_empty()).then(|| live[rng.range(0, live.len() as u64 - 1) as usize])
                };
                let Some(id) = pick else { continue };
                let linger0 = rng.chance(0.5);
                match Peer::open(&env, env.api.ws(id, ""), linger0, false).await {
                    Ok(p) => {
                        present.push(p);
                        env.add(|c| &c.visitors_joined, 1);
                    }
                    // Ended between the pick and the join: refused, and that is right.
                    Err(_) if !lock(&env.live).contains(&id) => env.add(|c| &c.visitors_missed, 1),
                    Err(e) => env.fail(format!("visitor of {id}: {e:#}")),
                }
            }
            6..=7 if !present.is_empty() => {
                let i = rng.range(0, present.len() as u64 - 1) as usize;
                present.swap_remove(i).close().await;
                env.add(|c| &c.visitors_left, 1);
            }
            8..=9 if !present.is_empty() => {
                let i = rng.range(0, present.len() as u64 - 1) as usize;
                present.swap_remove(i).drop_abruptly();
                env.add(|c| &c.visitors_dropped, 1);
            }
            _ => {}
        }
    }
    for p in present {
        p.drop_abruptly();
        env.add(|c| &c.visitors_dropped, 1);
    }
}

/// A viewer that joins, reads to `ready`, and never reads again.
pub(super) async fn stalled_viewer(url: &str) -> Result<Ws> {
    let mut ws = connect(url).await?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match timeout_at(deadline.into(), ws.next()).await {
            Err(_) => bail!("{url}: no ready within {STEP_TIMEOUT:?}"),
            Ok(None) | Ok(Some(Err(_))) => bail!("{url}: closed before ready"),
            Ok(Some(Ok(Message::Text(t)))) if t.contains("\"ready\"") => return Ok(ws),
            Ok(Some(Ok(Message::Text(t)))) if t.contains("\"error\"") => bail!("{url}: {t}"),
            Ok(Some(Ok(_))) => {}
        }
    }
}
