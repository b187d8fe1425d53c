//! Every malformed frame gets its error, the connection stays up, and the session and the
//! other viewers keep working. The daemon runs in-process, but for the upload test, which
//! checks the binary's working directory.

use crate::common;

use common::{Client, Daemon};
use serde_json::json;
use uuid::Uuid;

async fn session(d: &Daemon) -> (Uuid, Client, Client) {
    let id = Uuid::new_v4();
    let mut a = Client::connect(&d.ws(id, "?assistant=shell")).await;
    a.wait_screen("$ ").await;
    let mut other = Client::connect(&d.ws(id, "")).await;
    other.wait_json("ready").await;
    (id, a, other)
}

async fn still_works(a: &mut Client, other: &mut Client, n: u32) {
    a.run(
        &format!("echo ok-$((1000+{n}))"),
        &format!("ok-{}", 1000 + n),
    )
    .await;
    other.wait_screen(&format!("ok-{}", 1000 + n)).await;
}

#[tokio::test]
async fn bad_json_gets_bad_message_and_the_connection_stays() {
    let d = Daemon::in_process();
    let (_id, mut a, mut other) = session(&d).await;
    let cases = [
        "not json",
        "[1,2]",
        r#"{"no":"type"}"#,
        r#"{"type":"frobnicate"}"#,
        r#"{"type":"resize","cols":"80","rows":24}"#,
        r#"{"type":"resize","cols":0,"rows":24}"#,
        r#"{"type":"resize","cols":-5,"rows":24}"#,
        r#"{"type":"ack","bytes":"many"}"#,
    ];
    for (i, case) in cases.iter().enumerate() {
        a.send_text(case).await;
        a.until(&format!("error #{i} for {case}"), |c| {
            c.count("error") == i + 1
        })
        .await;
        let err = a.last("error").unwrap();
        assert_eq!(err["code"], "bad_message", "{case}: {err}");
        assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    still_works(&mut a, &mut other, 1).await;
    assert_eq!(other.count("error"), 0, "errors go to the sender only");
}

#[tokio::test]
async fn ping_gets_pong_with_the_same_data_to_the_sender_only() {
    let d = Daemon::in_process();
    let (_id, mut a, mut other) = session(&d).await;
    a.send_json(json!({"type":"ping","data":{"ts":12345,"nested":[1,"x"]}}))
        .await;
    let pong = a.wait_json("pong").await;
    assert_eq!(pong["data"], json!({"ts":12345,"nested":[1,"x"]}));
    a.send_json(json!({"type":"ping"})).await;
    a.until("second pong", |c| c.count("pong") == 2).await;
    still_works(&mut a, &mut other, 2).await;
    assert_eq!(other.count("pong"), 0);
}

#[tokio::test]
async fn bad_upload_frames_and_empty_frames() {
    // The binary: its sessions start in its temp dir, where an upload would land.
    let d = Daemon::start();
    let (_id, mut a, mut other) = session(&d).await;
    // 0x01 with 3+ bytes that is not a valid upload: refused, nothing written.
    for frame in [
        vec![1u8, 0, 0],
        vec![1, 0, 0, 65],
        vec![1, 0, 9, b'a', b'b'],
        vec![1, 0xff, 0xff, 1, 2, 3],
    ] {
        let n = a.count("file_upload");
        a.send_binary(frame.clone()).await;
        a.until("file_upload error", |c| c.count("file_upload") == n + 1)
            .await;
        let r = a.last("file_upload").unwrap();
        assert_eq!(r["success"], false, "{frame:?}");
        assert_eq!(r["error"], "invalid upload frame", "{frame:?}");
    }
    a.send_binary(Vec::new()).await;
    let err = a.wait_json("error").await;
    assert_eq!(err["code"], "bad_message");
    assert!(
        !d.dir.path().join(".ptyhub").exists(),
        "an invalid upload wrote nothing"
    );
    still_works(&mut a, &mut other, 3).await;
}

#[tokio::test]
async fn short_frames_starting_with_command_bytes_are_input() {
    let d = Daemon::in_process();
    let (_id, mut a, mut other) = session(&d).await;
    // 1–2 byte frames are keystrokes whatever their first byte: 0x01 is Ctrl-A (line start).
    a.type_str("echo tail-$((2+3))").await;
    a.send_binary(vec![0x01]).await;
    a.type_str("X=1; \r").await;
    a.wait_screen("tail-5").await;
    still_works(&mut a, &mut other, 4).await;
}

#[tokio::test]
async fn an_oversized_message_closes_with_1009_and_disturbs_nobody() {
    let d = Daemon::in_process_with(&common::config(
        "[viewer]\nmax_message_bytes = 1048576\nupload_max_bytes = 524288\n",
    ));
    let (id, mut a, mut other) = session(&d).await;
    let mut big = vec![b'x'; 2 * 1024 * 1024];
    big[0] = b'#';
    a.send_binary(big).await;
    let (code, _) = a.until_closed().await;
    assert_eq!(code, 1009);
    let mut b = Client::connect(&d.ws(id, "")).await;
    b.wait_json("ready").await;
    still_works(&mut b, &mut other, 5).await;
}

#[tokio::test]
async fn non_uuid_path_is_400_before_the_upgrade() {
    let d = Daemon::in_process();
    let resp = reqwest::get(d.http("/ws/not-a-uuid")).await.unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("not a UUID"));
    let err = Client::try_connect(&format!("ws://{}/ws/1234?assistant=shell", d.addr)).await;
    match err {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 400),
        other => panic!("expected HTTP 400, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn unknown_or_missing_assistant_gets_an_error_and_4002() {
    let d = Daemon::in_process_with(&common::config(
        "[assistants.ghost]\ncommand = [\"no-such-program-ptyhub-test\"]\n",
    ));
    for query in [
        "?assistant=nope",
        "",
        "?assistant=ghost",
        "?assistant=shell&name=bad%21name",
    ] {
        let mut c = Client::connect(&d.ws(Uuid::new_v4(), query)).await;
        let (code, _) = c.until_closed().await;
        assert_eq!(code, 4002, "{query}");
        let err = c
            .last("error")
            .unwrap_or_else(|| panic!("{query}: no error message"));
        assert_eq!(err["code"], "session_create_failed");
        assert!(
            err["message"].as_str().is_some_and(|m| m.len() > 10),
            "{err}"
        );
    }
    assert!(
        d.sessions().await.is_empty(),
        "failed creations leave no session"
    );
}
