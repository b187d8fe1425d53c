//! Interactive use: a typist at human speed with 100 viewers (real WebSocket clients reading
//! all the time) is never resynced, and every viewer gets every key once, in order (no byte
//! lost or duplicated for a viewer that keeps up); a session printing a flood takes turns with
//! a typist in another session, and only then. What is typed into one daemon is counted in
//! that daemon's `/metrics` only, even with another daemon in the same process.

use crate::common;

use std::time::Duration;

use common::{Client, Daemon};
use uuid::Uuid;

const VIEWERS: usize = 100;
/// Keys typed, one every `KEY_GAP`: about 12 keys a second, a quick typist.
const KEYS: usize = 60;
const KEY_GAP: Duration = Duration::from_millis(80);

/// The keys typed: letters, so a viewer's output is exactly them.
fn keys() -> String {
    (0..KEYS).map(|i| (b'a' + (i % 26) as u8) as char).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typist_with_100_viewers_is_never_resynced_and_nobody_misses_a_key() {
    let d = Daemon::start_with(&common::config(
        r#"
[limits]
max_viewers_per_session = 128
max_connections_per_ip = 1000

[assistants.echo]
name = "Echo"
command = ["sh", "-c", "stty raw -echo && printf ECHO-READY && exec cat"]
"#,
    ));
    let id = Uuid::new_v4();
    let mut typist = Client::connect(&d.ws(id, "?assistant=echo")).await;
    typist.wait_screen("ECHO-READY").await;
    // From here on the typist's output is the keys' echoes only.
    typist.output.clear();

    let mut viewers = Vec::with_capacity(VIEWERS);
    for _ in 0..VIEWERS {
        let mut v = Client::connect(&d.ws(id, "")).await;
        v.until("ready", |c| c.count("ready") == 1).await;
        viewers.push(v);
    }
    let before = d.metric("ptyhub_resyncs_total").await;
    let want = keys();
    // Each viewer reads on its own task, as a browser tab would, until it has every key.
    let readers: Vec<_> = viewers
        .into_iter()
        .map(|mut v| {
            let want = want.clone();
            tokio::spawn(async move {
                v.until("every key", |c| c.output.len() >= want.len()).await;
                v
            })
        })
        .collect();
    // Human speed: the gap between keys is the typist's, not a wait for anything.
    let mut tick = tokio::time::interval(KEY_GAP);
    for key in want.chars() {
        tick.tick().await;
        typist.type_str(&key.to_string()).await;
    }
    typist
        .until("every echo", |c| c.output.len() >= want.len())
        .await;
    assert_eq!(
        String::from_utf8_lossy(&typist.output),
        want,
        "the typist's echo"
    );
    for reader in readers {
        let v = reader.await.expect("viewer task");
        assert_eq!(
            String::from_utf8_lossy(&v.output),
            want,
            "a viewer's output"
        );
        assert_eq!(
            v.snapshots.len(),
            1,
            "a viewer got a snapshot besides its join"
        );
    }
    assert_eq!(
        d.metric("ptyhub_resyncs_total").await,
        before,
        "resyncs while typing"
    );
}

/// A session printing a flood gives its worker back after its long reads while someone types
/// into another session (`ptyhub_turns_given_total` grows), and never while nobody does, so a
/// flood alone keeps its worker as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_takes_turns_with_a_typist_elsewhere_and_only_then() {
    let d = Daemon::start_with(&common::config(
        r#"
[assistants.echo]
name = "Echo"
command = ["sh", "-c", "stty raw -echo && printf ECHO-READY && exec cat"]

[assistants.flood]
name = "Flood"
command = ["yes", "a line of plain text, printed as fast as the terminal takes it"]
"#,
    ));
    // The flood runs on with nobody watching (reading it here would only slow the test).
    let flood = Client::connect(&d.ws(Uuid::new_v4(), "?assistant=flood")).await;
    flood.close().await;
    common::eventually_async("4 MiB of the flood", || async {
        d.sessions()
            .await
            .iter()
            .any(|s| s["outputBytes"].as_u64().is_some_and(|n| n > 4 << 20))
    })
    .await;
    assert_eq!(
        d.metric("ptyhub_turns_given_total").await,
        0,
        "turns given with nobody typing"
    );

    let mut typist = Client::connect(&d.ws(Uuid::new_v4(), "?assistant=echo")).await;
    typist.wait_screen("ECHO-READY").await;
    typist.output.clear();
    // A key at a time, each echoed, until the flood has given a turn.
    let mut typed = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while d.metric("ptyhub_turns_given_total").await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no turn given in 30 s of typing ({} keys)",
            typed.len()
        );
        let key = (b'a' + (typed.len() % 26) as u8) as char;
        typed.push(key);
        typist.type_str(&key.to_string()).await;
        typist
            .until("the echo", |c| c.output.len() >= typed.len())
            .await;
    }
    assert_eq!(String::from_utf8_lossy(&typist.output), typed, "the echoes");
}

/// Two daemons in one process keep their own counts: keys typed into a session of one are in
/// its `/metrics`, and nothing is in the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_in_one_process_count_apart() {
    let cfg = common::config(
        r#"
[assistants.echo]
name = "Echo"
command = ["sh", "-c", "stty raw -echo && printf ECHO-READY && exec cat"]
"#,
    );
    let (typed_into, other) = (Daemon::in_process_with(&cfg), Daemon::in_process_with(&cfg));
    let mut typist = Client::connect(&typed_into.ws(Uuid::new_v4(), "?assistant=echo")).await;
    typist.wait_screen("ECHO-READY").await;
    typist.type_str("counted").await;
    typist.wait_screen("ECHO-READYcounted").await;
    assert_eq!(typed_into.metric("ptyhub_bytes_in_total").await, 7);
    assert!(typed_into.metric("ptyhub_bytes_out_total").await >= 7);
    assert_eq!(typed_into.metric("ptyhub_viewers").await, 1);
    for name in [
        "ptyhub_bytes_in_total",
        "ptyhub_bytes_out_total",
        "ptyhub_snapshots_total",
        "ptyhub_viewers",
    ] {
        assert_eq!(other.metric(name).await, 0, "{name} of the other daemon");
    }
    typist.close().await;
}
