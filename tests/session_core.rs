//! The session core through its library API, without a wire: a real program on a real PTY,
//! with and without a screen model, the lifecycle's exit reporting (pid watched by pidfd), and
//! the subscription every driver pumps output through, over a transport of the test's own.

use std::sync::Arc;
use std::time::Duration;

use ptyhub::metrics::Metrics;
use ptyhub::session::{
    self, viewer_queue, CreateSpec, EndReason, ExitInfo, LiveOutput, Role, SessionHandle,
    ViewerEvent,
};
use ptyhub::viewer::live::Live;
use ptyhub::viewer::subscription::{Framing, Pumped, Scratch, Subscription};
use ptyhub::viewer::transport::{MessageKind as Kind, Sink, Transport};
use uuid::Uuid;

/// Output reaches the test through the log; a viewer's live pushes are not needed here.
struct NoLive;

impl LiveOutput for NoLive {
    fn try_push(&self, _start: u64, _chunk: &[u8]) -> bool {
        false
    }
    fn wake(&self) {}
}

const FORM: ptyhub::term::snapshot::SnapshotForm =
    ptyhub::term::snapshot::SnapshotForm::gzip(ptyhub::protocol::swe::SNAPSHOT_LIMIT);
const LIMIT: usize = FORM.limit;
const WAIT: Duration = Duration::from_secs(20);

fn config() -> Arc<ptyhub::config::Config> {
    let toml = r#"
[assistants.lines]
name = "Lines"
command = ["sh", "-c", "for i in 1 2 3 4 5; do echo line-$i; done; exec sleep 60"]

[assistants.echo]
name = "Echo"
command = ["sh", "-c", "stty raw -echo && printf READY && exec cat"]

[assistants.three]
name = "Three"
command = ["sh", "-c", "echo bye; exit 3"]
"#;
    Arc::new(ptyhub::config::from_toml_str(toml, "test").expect("config"))
}

/// The keys of a daemon of the test's own.
fn keys() -> Arc<session::RecentKeys> {
    Arc::new(session::RecentKeys::new())
}

/// The counters of a daemon of the test's own.
fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::default())
}

/// What a daemon of the test's own gives a session to tell its state (no daemon listens).
fn links() -> session::StateLinks {
    session::StateLinks {
        transitions: ptyhub::attention::Transitions::new(ptyhub::journal::Journal::new()),
        url: "http://127.0.0.1:9".into(),
        ptyhub: "ptyhub".into(),
        token: ptyhub::auth::generate_token(),
        dir: std::env::temp_dir(),
        audit: audit(),
    }
}

/// The audit trail of a daemon of the test's own, in a directory of its own.
fn audit() -> Arc<ptyhub::audit::Audit> {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"));
    ptyhub::audit::Audit::new(&ptyhub::config::AuditConfig {
        dir: dir.path().to_owned(),
        max_bytes: 1 << 20,
        files: 1,
    })
}

fn start(assistant: &str, screen: bool) -> SessionHandle {
    let spec = CreateSpec {
        id: Uuid::new_v4(),
        assistant: assistant.to_owned(),
        name: None,
        cwd: Some(std::env::temp_dir()),
        screen,
        command: None,
        size: None,
        created_by: None,
    };
    let on_end = Box::new(|_| {});
    session::start(config(), spec, Some(1), keys(), metrics(), links(), on_end)
        .expect("session starts")
}

/// Everything the log holds from `from`.
fn log_text(handle: &SessionHandle, from: u64) -> String {
    let mut out = Vec::new();
    let _ = handle.log().read(from, usize::MAX, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Joins as `role`; the membership lasts as long as the returned guard.
async fn join(
    handle: &SessionHandle,
    role: Role,
) -> (
    session::Membership,
    session::JoinReply,
    viewer_queue::EventReceiver,
) {
    let (events, rx) = viewer_queue::channel(64, 1 << 20);
    let (member, reply) = handle
        .join(role, Default::default(), events, Arc::new(NoLive), FORM)
        .await
        .expect("join");
    (member, reply, rx)
}

/// Waits (bounded) until the log holds `want`.
async fn wait_for_output(handle: &SessionHandle, want: &str) {
    let found = tokio::time::timeout(WAIT, async {
        while !log_text(handle, 0).contains(want) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "no {want:?} in {:?}", log_text(handle, 0));
}

#[tokio::test]
async fn without_a_screen_model_joiners_replay_the_log() {
    let handle = start("lines", false);
    wait_for_output(&handle, "line-5").await;
    let (_member, join, _rx) = join(&handle, Role::Viewer).await;
    assert!(join.snapshot.is_none(), "no model, no snapshot");
    assert_eq!(join.offset, handle.log().start());
    let replay = log_text(&handle, join.offset);
    for i in 1..=5 {
        assert!(replay.contains(&format!("line-{i}")), "{replay:?}");
    }
    let resync = handle
        .resync(FORM)
        .await
        .expect("resync")
        .expect("no model: nothing to fail");
    assert!(resync.snapshot.is_none());
    assert_eq!(resync.offset, handle.log().start());
    handle.end(EndReason::Deleted).await.expect("ends");
}

#[tokio::test]
async fn with_a_screen_model_joiners_get_a_snapshot_at_the_head() {
    let handle = start("lines", true);
    wait_for_output(&handle, "line-5").await;
    let (_member, join, _rx) = join(&handle, Role::Viewer).await;
    let snapshot = join.snapshot.expect("a snapshot of what was drawn");
    assert!(!snapshot.bytes.is_empty() && snapshot.bytes.len() <= LIMIT);
    assert_eq!(join.offset, handle.log().head());
    handle.end(EndReason::Deleted).await.expect("ends");
}

/// The exit is seen through the pid watch, after the output is drained: code, then the
/// session stays (exited) until it is ended.
#[tokio::test]
async fn the_exit_code_is_reported_after_the_last_output() {
    let handle = start("three", true);
    let (_member, join, mut rx) = join(&handle, Role::Writer).await;
    let info = match join.exit {
        Some(info) => info,
        None => tokio::time::timeout(WAIT, async {
            loop {
                match rx.recv().await {
                    Some(ViewerEvent::Exit { info, .. }) => break info,
                    Some(_) => continue,
                    None => panic!("the session went without an exit event"),
                }
            }
        })
        .await
        .expect("exit within the wait"),
    };
    assert_eq!(info, ExitInfo::exited(3));
    let text = log_text(&handle, 0);
    assert!(
        text.contains("bye") && text.contains("[Process exited (code 3)]"),
        "{text:?}"
    );
    assert!(!handle.info().alive);
    assert!(!handle.ended().is_cancelled(), "an exited session stays");
    handle.end(EndReason::Deleted).await.expect("ends");
    assert!(handle.ended().is_cancelled());
}

/// A second transport beside the WebSocket: each message recorded whole, as `(kind, payload)`,
/// so the test reads back exactly what a driver wrote.
#[derive(Clone, Default)]
struct Recorder(Arc<std::sync::Mutex<Vec<u8>>>);

impl Recorder {
    /// The messages written: a kind byte (b = binary, t = text, c = close/control), a u32
    /// length, the payload.
    fn messages(&self) -> Vec<(u8, Vec<u8>)> {
        let bytes = self.0.lock().expect("lock").clone();
        let mut out = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let kind = rest[0];
            let len = u32::from_be_bytes(rest[1..5].try_into().expect("4 bytes")) as usize;
            out.push((kind, rest[5..5 + len].to_vec()));
            rest = &rest[5 + len..];
        }
        out
    }
}

impl Transport for Recorder {
    fn frame(out: &mut Vec<u8>, kind: Kind, payload: &[u8]) {
        out.push(match kind {
            Kind::Binary => b'b',
            Kind::Text => b't',
            Kind::Control(_) => b'c',
        });
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
    }

    fn close_frame(out: &mut Vec<u8>, code: u16, _reason: &str) {
        Self::frame(
            out,
            Kind::Control(fastwebsockets::OpCode::Close),
            &code.to_be_bytes(),
        );
    }

    async fn write_all<'a>(&'a mut self, bytes: &'a [u8]) -> std::io::Result<bool> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(false)
    }

    fn direct(&self) -> Option<Arc<tokio::net::TcpStream>> {
        None
    }
}

/// Output as one binary message per chunk; a snapshot as a text message, told apart.
struct Plain;

impl Framing for Plain {
    fn output<T: Transport>(&self, out: &mut Vec<u8>, data: &[u8]) {
        T::frame(out, Kind::Binary, data);
    }
    fn snapshot<T: Transport>(&self, out: &mut Vec<u8>, packed: &[u8]) {
        T::frame(out, Kind::Text, packed);
    }
}

/// The subscription that every driver pumps through works over any transport: the output a
/// session's log holds arrives whole and in order, and a resync sends a snapshot and resumes
/// at the head.
#[tokio::test]
async fn a_subscription_pumps_the_log_through_any_transport() {
    let handle = start("lines", false);
    wait_for_output(&handle, "line-5").await;
    let notify = Arc::new(tokio::sync::Notify::new());
    let live = Live::waking(notify);
    let (events, _rx) = viewer_queue::channel(64, 1 << 20);
    let (_member, join) = handle
        .join(Role::Viewer, Default::default(), events, live.clone(), FORM)
        .await
        .expect("join");
    let sub = Subscription::new(handle.clone(), live, FORM, WAIT, metrics());
    sub.set_offset(join.offset);
    let recorder = Recorder::default();
    let mut sink = Sink::new(recorder.clone());
    let mut scratch = Scratch::new();
    let head = handle.log().head();
    let pumped = sub
        .catch_up(&mut sink, &Plain, head, &mut scratch)
        .await
        .expect("written");
    assert_eq!(pumped, Pumped::Sent);
    assert_eq!(sub.offset(), head);
    let sent: Vec<u8> = recorder
        .messages()
        .into_iter()
        .flat_map(|(kind, payload)| {
            assert_eq!(kind, b'b', "output only");
            payload
        })
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&sent),
        log_text(&handle, join.offset)
    );

    // Without a screen model a resync replays from the log's oldest byte.
    let resynced = sub
        .resync(&mut sink, &Plain, "test")
        .await
        .expect("written");
    assert_eq!(resynced, Pumped::Sent);
    assert_eq!(sub.offset(), handle.log().start());
    sink.close(1000, "bye").await.expect("written");
    let last = recorder.messages().pop().expect("a close");
    assert_eq!(last, (b'c', 1000u16.to_be_bytes().to_vec()));

    handle.end(EndReason::Deleted).await.expect("ends");
    let gone = sub
        .resync(&mut sink, &Plain, "test")
        .await
        .expect("written");
    assert_eq!(
        gone,
        Pumped::Gone,
        "an ended session has nothing more to give"
    );
}

/// A viewer that is always idle and caught up: takes every push, and catches up from the log
/// (as a writer task would) when woken. Counts both.
struct Taker {
    log: Arc<session::output_log::SharedLog>,
    got: std::sync::Mutex<Taken>,
    arrived: tokio::sync::Notify,
}

#[derive(Default)]
struct Taken {
    offset: u64,
    bytes: Vec<u8>,
    deliveries: usize,
}

impl Taker {
    fn new(handle: &SessionHandle) -> Arc<Taker> {
        Arc::new(Taker {
            log: handle.log().clone(),
            got: Default::default(),
            arrived: tokio::sync::Notify::new(),
        })
    }

    fn take(&self, from: u64, bytes: &[u8]) {
        let mut got = self.got.lock().expect("lock");
        got.offset = from + bytes.len() as u64;
        got.bytes.extend_from_slice(bytes);
        got.deliveries += 1;
        self.arrived.notify_waiters();
    }

    /// Waits until `n` bytes have come; returns the number of deliveries they took.
    async fn wait_for(&self, n: usize) -> usize {
        let waited = tokio::time::timeout(WAIT, async {
            loop {
                let arrived = self.arrived.notified();
                if let Some(d) = {
                    let got = self.got.lock().expect("lock");
                    (got.bytes.len() >= n).then_some(got.deliveries)
                } {
                    return d;
                }
                arrived.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("{n} bytes did not come within {WAIT:?}"))
    }
}

impl LiveOutput for Taker {
    fn try_push(&self, start: u64, chunk: &[u8]) -> bool {
        let offset = self.got.lock().expect("lock").offset;
        let Some(lacking) = offset
            .checked_sub(start)
            .and_then(|skip| chunk.get(skip as usize..))
        else {
            return false;
        };
        if !lacking.is_empty() {
            self.take(offset, lacking);
        }
        true
    }
    fn wake(&self) {
        let offset = self.got.lock().expect("lock").offset;
        let mut out = Vec::new();
        if self.log.read(offset, usize::MAX, &mut out).is_ok() && !out.is_empty() {
            self.take(offset, &out);
        }
    }
}

/// Keys typed back to back with many viewers: the typist gets each echo as it comes, every
/// other viewer gets the same bytes exactly (nothing lost or repeated), joined into at most
/// one delivery per [`session::FANOUT_PACE`].
#[tokio::test]
async fn others_get_fast_output_joined_and_exact() {
    const KEYS: usize = 300;
    let handle = start("echo", true);
    wait_for_output(&handle, "READY").await;
    let mut takers = Vec::new();
    let mut members = Vec::new();
    // Enough viewers for the rounds to be paced.
    let roles = std::iter::once(Role::Writer).chain(std::iter::repeat_n(
        Role::Viewer,
        session::FANOUT_PACED_FROM,
    ));
    for role in roles {
        let taker = Taker::new(&handle);
        let (events, _rx) = viewer_queue::channel(64, 1 << 20);
        let (member, join) = handle
            .join(role, Default::default(), events, taker.clone(), FORM)
            .await
            .expect("join");
        taker.got.lock().expect("lock").offset = join.offset;
        takers.push(taker);
        members.push((member, _rx));
    }
    let typist = members[0].0.viewer();
    let keys: Vec<u8> = (0..KEYS).map(|i| b'a' + (i % 26) as u8).collect();
    let began = std::time::Instant::now();
    for (i, key) in keys.iter().enumerate() {
        handle
            .input(typist, bytes::Bytes::copy_from_slice(&[*key]))
            .await
            .expect("input");
        // Each key goes once the previous one has come back, as a fast typist's would.
        takers[0].wait_for(i + 1).await;
    }
    for taker in &takers[1..] {
        let deliveries = taker.wait_for(KEYS).await;
        let took = began.elapsed();
        let got = taker.got.lock().expect("lock").bytes.clone();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&keys)
        );
        // A round begins at least a pace after the last one ended, and delivers at most once
        // to a viewer.
        let rounds = (took.as_secs_f64() / session::FANOUT_PACE.as_secs_f64()) as usize + 2;
        assert!(
            deliveries <= rounds,
            "{deliveries} deliveries of {KEYS} keys in {took:?}: not joined"
        );
    }
    assert_eq!(takers[0].got.lock().expect("lock").bytes, keys);
    handle.end(EndReason::Deleted).await.expect("ends");
}

/// A viewer whose pushes can be held, to catch the fan-out in the middle of a round: once
/// armed, the first push of the round waits for the test's word, and every later one notes
/// whether the program had already been given the key typed meanwhile.
struct Gated {
    taker: Arc<Taker>,
    gate: Arc<Gate>,
}

#[derive(Default)]
struct Gate {
    /// Whether pushes are held.
    armed: std::sync::atomic::AtomicBool,
    /// Set by the test once its key is queued; the held first push then goes on.
    state: std::sync::Mutex<GateState>,
    changed: std::sync::Condvar,
    /// The file the program creates once it has read the key.
    marker: std::path::PathBuf,
}

#[derive(Default)]
struct GateState {
    /// A push of the round has begun (the test may type).
    round_began: bool,
    /// The test's key is in the session's command queue.
    key_queued: bool,
    /// For each push after the first: whether the program had the key by then.
    later_pushes: Vec<bool>,
}

impl Gate {
    /// Waits (bounded) until `ready` holds of the state.
    fn wait(&self, ready: impl Fn(&GateState) -> bool) {
        let state = self.state.lock().expect("lock");
        let _ = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(10), |s| !ready(s))
            .expect("lock");
    }
}

impl LiveOutput for Gated {
    fn try_push(&self, start: u64, chunk: &[u8]) -> bool {
        use std::sync::atomic::Ordering;
        if self.gate.armed.load(Ordering::Acquire) {
            let first = {
                let mut state = self.gate.state.lock().expect("lock");
                !std::mem::replace(&mut state.round_began, true)
            };
            if first {
                self.gate.changed.notify_all();
                self.gate.wait(|s| s.key_queued);
            } else {
                // The program needs a moment to read the key and create the file; a round that
                // did not stop for the key never lets it, so one long wait is enough to tell.
                let missed = self
                    .gate
                    .state
                    .lock()
                    .expect("lock")
                    .later_pushes
                    .contains(&false);
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while !missed && !self.gate.marker.exists() && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let had_key = self.gate.marker.exists();
                self.gate
                    .state
                    .lock()
                    .expect("lock")
                    .later_pushes
                    .push(had_key);
            }
        }
        self.taker.try_push(start, chunk)
    }
    fn wake(&self) {
        self.taker.wake()
    }
}

/// A key typed while output is being handed to many viewers reaches the program before the
/// rest of that round: the hand-out stops after the send during which the key came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_typed_mid_round_reaches_the_program_before_the_rest_of_the_round() {
    const OTHERS: usize = 16;
    let marker = std::env::temp_dir().join(format!("ptyhub-key-{}", Uuid::new_v4()));
    let script = format!(
        "stty raw -echo && printf READY && head -c1 >/dev/null && printf GO && head -c1 >/dev/null && : > '{}' && exec sleep 60",
        marker.display()
    );
    let spec = CreateSpec {
        id: Uuid::new_v4(),
        assistant: "echo".to_owned(),
        name: None,
        cwd: Some(std::env::temp_dir()),
        screen: true,
        command: Some(vec!["sh".into(), "-c".into(), script]),
        size: None,
        created_by: None,
    };
    let on_end = Box::new(|_| {});
    let handle = session::start(config(), spec, Some(1), keys(), metrics(), links(), on_end)
        .expect("starts");
    wait_for_output(&handle, "READY").await;
    let gate = Arc::new(Gate {
        marker: marker.clone(),
        ..Default::default()
    });
    let typist = Taker::new(&handle);
    let mut others = Vec::new();
    let mut members = Vec::new();
    for i in 0..=OTHERS {
        // The first joins as the typist; the others' pushes go through the gate.
        let (role, taker, live): (_, _, Arc<dyn LiveOutput>) = if i == 0 {
            (Role::Writer, typist.clone(), typist.clone())
        } else {
            let taker = Taker::new(&handle);
            let gated = Gated {
                taker: taker.clone(),
                gate: gate.clone(),
            };
            others.push(taker.clone());
            (Role::Viewer, taker, Arc::new(gated))
        };
        let (events, rx) = viewer_queue::channel(64, 1 << 20);
        let (member, join) = handle
            .join(role, Default::default(), events, live, FORM)
            .await
            .expect("join");
        taker.got.lock().expect("lock").offset = join.offset;
        members.push((member, rx));
    }
    let typist_id = members[0].0.viewer();
    gate.armed.store(true, std::sync::atomic::Ordering::Release);
    // The first key makes the program print, which starts a round to the others.
    handle
        .input(typist_id, bytes::Bytes::from_static(b"a"))
        .await
        .expect("input");
    let round_began = {
        let gate = gate.clone();
        tokio::task::spawn_blocking(move || {
            gate.wait(|s| s.round_began);
            gate.state.lock().expect("lock").round_began
        })
    };
    assert!(round_began.await.expect("waits"), "no round began");
    // The second key comes while the round's first push is under way.
    handle
        .input(typist_id, bytes::Bytes::from_static(b"b"))
        .await
        .expect("input");
    gate.state.lock().expect("lock").key_queued = true;
    gate.changed.notify_all();
    for taker in &others {
        taker.wait_for(2).await;
    }
    let later = gate.state.lock().expect("lock").later_pushes.clone();
    assert_eq!(later.len(), OTHERS - 1, "{later:?}");
    assert!(
        later.iter().all(|had| *had),
        "pushes after the key came, before the program had it: {later:?}"
    );
    let _ = std::fs::remove_file(&marker);
    handle.end(EndReason::Deleted).await.expect("ends");
}
