//! The session core through its library API, without a wire: a real program on a real PTY,
//! with and without a screen model, and the lifecycle's exit reporting (pid watched by pidfd).

use std::sync::Arc;
use std::time::Duration;

use ptyhub::session::{
    self, event_queue, CreateSpec, EndReason, ExitInfo, LiveOutput, Role, SessionHandle,
    ViewerEvent,
};
use uuid::Uuid;

/// Output reaches the test through the log; a viewer's live pushes are not needed here.
struct NoLive;

impl LiveOutput for NoLive {
    fn try_push(&self, _start: u64, _chunk: &[u8]) -> bool {
        false
    }
    fn wake(&self) {}
}

const FORM: ptyhub::session::SnapshotForm =
    ptyhub::session::SnapshotForm::gzip(ptyhub::protocol::swe::SNAPSHOT_LIMIT);
const LIMIT: usize = FORM.limit;
const WAIT: Duration = Duration::from_secs(20);

fn config() -> Arc<ptyhub::config::Config> {
    let toml = r#"
[assistants.lines]
name = "Lines"
command = ["sh", "-c", "for i in 1 2 3 4 5; do echo line-$i; done; exec sleep 60"]

[assistants.three]
name = "Three"
command = ["sh", "-c", "echo bye; exit 3"]
"#;
    Arc::new(ptyhub::config::from_toml_str(toml, "test").expect("config"))
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
    };
    session::start(config(), spec, 1, Box::new(|_| {})).expect("session starts")
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
    event_queue::EventReceiver,
) {
    let (events, rx) = event_queue::channel(64, 1 << 20);
    let (member, reply) = handle
        .join(role, events, Arc::new(NoLive), FORM)
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
    let resync = handle.resync(FORM).await.expect("resync");
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
