//! Echo through a real bash, two viewers, the join snapshot, size policy, exit.

use crate::common;

use common::{Client, Daemon};
use serde_json::json;
use uuid::Uuid;

#[tokio::test]
async fn echo_reaches_two_viewers_and_a_late_joiner_gets_the_screen() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_json("ready").await;
    let status = a.wait_json("status").await;
    assert_eq!(status["viewers"], 1);
    assert_eq!(status["sessionUUID"], id.to_string());
    assert_eq!(status["uuidShort"], id.to_string()[..5]);
    assert_eq!(status["assistant"], "Shell");
    assert_eq!(status["readOnly"], false);
    a.wait_screen("$ ").await;

    let mut b = Client::connect(&d.ws(id, "")).await;
    b.wait_json("ready").await;
    // The snapshot came first: b already shows the prompt.
    assert!(
        b.snapshots.len() == 1,
        "a joiner of a drawn session gets one snapshot"
    );
    assert!(b.screen_text().contains("$ "));
    a.until("status with 2 viewers", |c| {
        c.last("status").is_some_and(|s| s["viewers"] == 2)
    })
    .await;

    a.run("echo hello-$((6*7))", "hello-42").await;
    b.wait_screen("hello-42").await;
    b.type_str("echo from-b-$((1+1))\r").await;
    a.wait_screen("from-b-2").await;
    b.wait_screen("from-b-2").await;

    // A third, late joiner sees exactly the same screen.
    let mut c = Client::connect(&d.ws(id, "")).await;
    c.wait_json("ready").await;
    a.until("settled", |c| c.screen_text().contains("from-b-2\n$ "))
        .await;
    c.until("settled", |c| c.screen_text().contains("from-b-2\n$ "))
        .await;
    assert_eq!(c.screen_text(), a.screen_text());
    assert_eq!(
        c.term.screen().cursor_position(),
        a.term.screen().cursor_position()
    );
}

#[tokio::test]
async fn join_order_is_snapshot_then_ready_then_status() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_screen("$ ").await;
    let mut b = Client::connect(&d.ws(id, "")).await;
    b.wait_json("status").await;
    let kinds: Vec<String> = b
        .events
        .iter()
        .map(|(k, v)| match *k {
            "json" => serde_json::from_slice::<serde_json::Value>(v).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned(),
            other => other.to_owned(),
        })
        .collect();
    let pos = |k: &str| {
        kinds
            .iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("no {k} in {kinds:?}"))
    };
    assert_eq!(pos("snapshot"), 0, "{kinds:?}");
    assert!(pos("ready") < pos("status"), "{kinds:?}");
}

#[tokio::test]
async fn size_is_the_minimum_of_sized_writers_and_grows_back() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.resize(40, 120).await;
    a.wait_screen("$ ").await;
    a.until("status 40x120", |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == 40 && s["cols"] == 120)
    })
    .await;

    let mut b = Client::connect(&d.ws(id, "")).await;
    b.resize(30, 150).await;
    // An unsized viewer does not count.
    let mut unsized_viewer = Client::connect(&d.ws(id, "")).await;
    unsized_viewer.wait_json("ready").await;
    a.until("status 30x120", |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == 30 && s["cols"] == 120)
    })
    .await;
    a.set_term_size(30, 120);
    a.run("echo size=$(stty size)", "size=30 120").await;

    // JSON resize works the same way.
    b.send_json(json!({"type": "resize", "cols": 100, "rows": 35}))
        .await;
    a.until("status 35x100", |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == 35 && s["cols"] == 100)
    })
    .await;

    b.close().await;
    a.until("status 40x120 after b left", |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == 40 && s["cols"] == 120 && s["viewers"] == 2)
    })
    .await;
    a.set_term_size(40, 120);
    a.run("clear; echo size=$(stty size)", "size=40 120").await;
}

#[tokio::test]
async fn sizes_are_clamped() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.send_binary(vec![0, 0xff, 0xff, 0xff, 0xff]).await;
    a.until("clamped status", |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == 500 && s["cols"] == 1000)
    })
    .await;
    a.send_binary(vec![0, 0, 0, 0, 0]).await;
    a.until("clamped status", |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == 1 && s["cols"] == 1)
    })
    .await;
}

#[tokio::test]
async fn exit_code_reaches_viewers_and_late_joiners() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_screen("$ ").await;
    a.type_str("exit 7\r").await;
    let exit = a.wait_json("exit").await;
    assert_eq!(exit["exitCode"], 7);
    assert_eq!(exit["signal"], serde_json::Value::Null);
    assert!(
        a.screen_text().contains("[Process exited (code 7)]"),
        "{}",
        a.screen_text()
    );

    let mut late = Client::connect(&d.ws(id, "")).await;
    let exit = late.wait_json("exit").await;
    assert_eq!(exit["exitCode"], 7);
    assert!(late.screen_text().contains("[Process exited (code 7)]"));
    assert!(late.snapshots.len() == 1);
    let info: serde_json::Value = reqwest::get(d.http(&format!("/api/sessions/{id}")))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["alive"], false);
    assert_eq!(info["exitCode"], 7);
}

#[tokio::test]
async fn a_signal_death_is_reported_with_its_name() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_screen("$ ").await;
    a.type_str("kill -KILL $$\r").await;
    let exit = a.wait_json("exit").await;
    assert_eq!(exit["exitCode"], 137);
    assert_eq!(exit["signal"], "SIGKILL");
}

#[tokio::test]
async fn exit_is_noticed_while_a_background_job_holds_the_terminal() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_screen("$ ").await;
    a.type_str("sleep 300 & exit 3\r").await;
    let exit = a.wait_json("exit").await;
    assert_eq!(exit["exitCode"], 3);
    common::eventually("the background sleep to be ended", || {
        common::processes_of(id).is_empty()
    })
    .await;
}
