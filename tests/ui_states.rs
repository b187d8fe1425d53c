//! What the browser UI relies on from the daemon: viewers that do not size the session
//! (`{"type":"resize","follow":true}`), input held through a YOLO restart for the new
//! program, and a shutdown told as one (close 1001), never as the program's exit.

use crate::common;

use common::{Client, Daemon};
use serde_json::json;
use uuid::Uuid;

/// Waits until `c` was told the session is `rows`×`cols`.
async fn until_size(c: &mut Client, rows: u16, cols: u16) {
    c.until(&format!("status {rows}x{cols}"), |c| {
        c.last("status")
            .is_some_and(|s| s["rows"] == rows && s["cols"] == cols)
    })
    .await;
}

#[tokio::test]
async fn a_following_viewer_does_not_count_in_the_size_until_it_sends_a_size_again() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut desk = Client::connect(&d.ws(id, "?assistant=shell")).await;
    desk.resize(40, 160).await;
    desk.wait_json("ready").await;
    until_size(&mut desk, 40, 160).await;

    let mut phone = Client::connect(&d.ws(id, "")).await;
    phone.wait_json("ready").await;
    phone.resize(30, 50).await;
    until_size(&mut desk, 30, 50).await;

    // "Don't size from me": the desktop gets its size back, and the phone is told it.
    phone
        .send_json(json!({"type":"resize","follow":true}))
        .await;
    until_size(&mut desk, 40, 160).await;
    until_size(&mut phone, 40, 160).await;

    // A size sent again counts again.
    phone.resize(30, 50).await;
    until_size(&mut desk, 30, 50).await;
    phone
        .send_json(json!({"type":"resize","follow":true}))
        .await;
    until_size(&mut desk, 40, 160).await;

    // Following twice, or as a read-only viewer, is no error and changes nothing.
    let mut watcher = Client::connect(&d.ws(id, "?role=viewer")).await;
    watcher.wait_json("ready").await;
    watcher
        .send_json(json!({"type":"resize","follow":true}))
        .await;
    phone
        .send_json(json!({"type":"resize","follow":true}))
        .await;
    // A ping after them: its pong says they were handled, with no error before it.
    for c in [&mut watcher, &mut phone] {
        c.send_json(json!({"type":"ping","data":"after"})).await;
        c.wait_json("pong").await;
        assert_eq!(c.count("error"), 0, "{:?}", c.messages);
    }
    assert_eq!(desk.last("status").unwrap()["cols"], 160);

    // "Take control of the size": the desktop's size wins, the phone follows until it sends
    // a size again.
    phone.resize(30, 50).await;
    until_size(&mut desk, 30, 50).await;
    desk.send_json(json!({"type":"resize","rows":40,"cols":160,"control":true}))
        .await;
    until_size(&mut phone, 40, 160).await;
    phone.resize(30, 50).await;
    until_size(&mut desk, 30, 50).await;
    // A read-only viewer may not take it.
    watcher
        .send_json(json!({"type":"resize","rows":10,"cols":20,"control":true}))
        .await;
    let err = watcher.wait_json("error").await;
    assert_eq!(err["code"], "read_only");
    phone
        .send_json(json!({"type":"resize","follow":true}))
        .await;
    until_size(&mut desk, 40, 160).await;

    // `follow` only counts as `true`: anything else is still an ordinary resize, checked.
    phone
        .send_json(json!({"type":"resize","follow":"yes"}))
        .await;
    let err = phone.wait_json("error").await;
    assert_eq!(err["code"], "bad_message");
}

fn restart_config() -> String {
    common::config(
        r#"
[assistants.reader]
name = "Reader"
command = ["bash", "-c", "trap 'sleep 1.5; exit 0' TERM; echo old-up; while read -r l; do echo old-got:$l; done"]
yolo = ["bash", "-c", "echo new-up; while read -r l; do echo new-got:$l; done"]
"#,
    )
}

#[tokio::test]
async fn keys_typed_during_a_yolo_restart_go_to_the_new_program() {
    let d = Daemon::start_with(&restart_config());
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=reader")).await;
    a.resize(24, 100).await;
    a.wait_screen("old-up").await;
    a.send_json(json!({"type":"toggle_yolo"})).await;
    a.until("restarting", |c| {
        c.last("status").is_some_and(|s| s["restarting"] == true)
    })
    .await;
    // The old program takes 1.5 s to go: these keys arrive while it does.
    a.type_str("held-1\r").await;
    a.type_str("held-2\r").await;
    a.wait_screen("new-got:held-2").await;
    let screen = a.screen_text();
    assert!(screen.contains("new-got:held-1"), "{screen}");
    assert!(!screen.contains("old-got:"), "{screen}");
    assert_eq!(screen.matches("new-got:held-1").count(), 1, "{screen}");
    a.type_str("after\r").await;
    a.wait_screen("new-got:after").await;
    assert_eq!(a.count("exit"), 0);
}

#[tokio::test]
async fn a_shutdown_closes_viewers_with_1001_and_sends_no_exit() {
    let mut d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_screen("$ ").await;
    let status = d.terminate();
    assert!(status.success(), "daemon exit status {status:?}");
    let (code, reason) = a.until_closed().await;
    assert_eq!(code, 1001);
    assert_eq!(reason, "ptyhub is shutting down");
    assert_eq!(a.count("exit"), 0, "{:?}", a.messages);
}

/// The token a daemon started without one printed in its URL line.
async fn printed_token(d: &Daemon) -> String {
    common::eventually("the URL line", || !d.printed().is_empty()).await;
    let line = d.printed()[0].clone();
    line.split("?token=")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"))
        .trim()
        .to_owned()
}

#[tokio::test]
async fn a_generated_token_is_kept_across_restarts_until_rotated() {
    use std::os::unix::fs::PermissionsExt as _;
    let state = tempfile::tempdir().unwrap();
    let start = |args: &'static [&'static str]| {
        let home = state.path().to_owned();
        Daemon::start_launch(&common::config(""), move |l| {
            l.args(args).env("XDG_STATE_HOME", &home)
        })
    };
    let file = state.path().join("ptyhub").join("token");

    let mut d = start(&[]);
    let first = printed_token(&d).await;
    assert_eq!(first.len(), 64);
    assert!(d.terminate().success());
    let kept = std::fs::read_to_string(&file).unwrap();
    assert_eq!(kept.trim(), first);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token file is private");

    let mut d = start(&[]);
    assert_eq!(
        printed_token(&d).await,
        first,
        "the same token after a restart"
    );
    assert!(d.terminate().success());

    let mut d = start(&["--new-token"]);
    let rotated = printed_token(&d).await;
    assert_ne!(rotated, first, "--new-token rotates it");
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), rotated);
    assert!(d.terminate().success());

    // Deleting the file rotates it too.
    std::fs::remove_file(&file).unwrap();
    let mut d = start(&[]);
    let fresh = printed_token(&d).await;
    assert_ne!(fresh, rotated);
    assert!(d.terminate().success());
}

#[tokio::test]
async fn a_browser_gets_a_page_for_an_address_with_nothing_there_and_a_script_json() {
    let d = Daemon::start();
    let http = reqwest::Client::new();
    for (path, status) in [("/no/such/page", 404), ("/session/not-a-uuid", 400)] {
        let page = http
            .get(d.http(path))
            .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), status, "{path}");
        assert!(page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        let text = page.text().await.unwrap();
        assert!(text.contains("There is nothing at this address"), "{text}");
        let api = http.get(d.http(path)).send().await.unwrap();
        assert_eq!(api.status(), status);
        let body: serde_json::Value = api.json().await.unwrap();
        assert!(body["error"].is_string(), "{body}");
    }
}
