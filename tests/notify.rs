//! `[notify]` through the daemon: a `Daemon` built from a configuration that names webhooks on
//! 127.0.0.1 (receivers this test runs; nothing leaves the machine) and a command, told of
//! transitions through its notifier, counting them in its `/metrics`; and a real session's own
//! changes of state reaching a webhook. Driven in-process.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use ptyhub::attention::State as StateName;
use ptyhub::daemon::Daemon;
use ptyhub::notify::Transition;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::TIMEOUT;

/// A webhook receiver on 127.0.0.1: each request's body, answered 200 and closed; or, with
/// `hang`, never answered.
async fn receiver(hang: bool) -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let body = loop {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else {
                        continue;
                    };
                    let length: usize = head
                        .lines()
                        .filter_map(|l| l.split_once(':'))
                        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.trim().parse().ok())
                        .unwrap_or(0);
                    if body.len() >= length {
                        break body.to_owned();
                    }
                };
                let _ = tx.send(body);
                if hang {
                    std::future::pending::<()>().await;
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (url, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<String>) -> serde_json::Value {
    let body = tokio::time::timeout(TIMEOUT, rx.recv())
        .await
        .expect("a notification in time")
        .expect("the receiver runs");
    serde_json::from_str(&body).expect("JSON")
}

fn waiting(session: Uuid, num: u8) -> Transition {
    Transition {
        session,
        num: Some(num),
        name: format!("job {num}"),
        assistant: "shell".to_owned(),
        from: Some(StateName::Working),
        to: StateName::Waiting,
        reason: "asks: Continue? [y/N]".to_owned(),
        at: UNIX_EPOCH + Duration::from_secs(1_790_000_000),
        url: None,
    }
}

/// A daemon of `notify` (the `[notify]` table's keys), served on 127.0.0.1:0.
async fn daemon(notify: &str) -> (Daemon, std::net::SocketAddr) {
    daemon_with("", notify).await
}

/// [`daemon`] with `extra` tables besides.
async fn daemon_with(extra: &str, notify: &str) -> (Daemon, std::net::SocketAddr) {
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n{}\n[notify]\n{notify}\n",
        crate::common::config(extra)
    );
    let cfg = Arc::new(ptyhub::config::from_toml_str(&toml, "notify.toml").expect("config"));
    let mut daemon = Daemon::new(cfg.clone(), None);
    let addr = daemon
        .serve(Daemon::bind(&cfg).await.expect("bind"))
        .expect("serve");
    (daemon, addr)
}

/// `GET /metrics`' notification counters: (sent, failed, dropped).
async fn counters(addr: std::net::SocketAddr) -> (u64, u64, u64) {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let count = |outcome: &str| {
        let prefix = format!("ptyhub_notifications_total{{outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} in /metrics:\n{text}"))
    };
    (count("sent"), count("failed"), count("dropped"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_configuration_sends_nothing() {
    let (daemon, addr) = daemon("").await;
    assert_eq!(daemon.notifier().receivers(), 0);
    daemon.notifier().notify(waiting(Uuid::new_v4(), 1));
    assert_eq!(counters(addr).await, (0, 0, 0));
    daemon.end().await;
}

/// A flood of transitions from many sessions reaches a receiver that answers, and the
/// command, while another receiver hangs; `notify()` never waits; `/metrics` counts it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_webhook_does_not_slow_a_flood_to_the_others() {
    let (good, mut good_rx) = receiver(false).await;
    let (hangs, mut hangs_rx) = receiver(true).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("events");
    let (daemon, addr) = daemon(&format!(
        r#"
webhooks = [{{ url = "{good}" }}, {{ url = "{hangs}" }}]
command = ["sh", "-c", "cat >> {}"]
link = "https://ptyhub.example/"
timeout = "2s"
retries = 0
queue = 100
"#,
        out.display()
    ))
    .await;
    let state = daemon.state().clone();
    let notifier = daemon.notifier();
    assert_eq!(notifier.receivers(), 3);

    let sessions: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for (i, id) in sessions.iter().enumerate() {
        let call = Instant::now();
        notifier.notify(waiting(*id, i as u8 + 1));
        slowest = slowest.max(call.elapsed());
    }
    // Far below the hanging receiver's 2 s timeout: no call waited for a delivery (the bound
    // is loose so that a busy 2-core host's scheduling never fails it).
    assert!(
        slowest < Duration::from_millis(500),
        "a notify() call waited {slowest:?}"
    );
    // The good receiver gets every one, in order, before the hanging one's first attempt
    // has even timed out.
    for (i, id) in sessions.iter().enumerate() {
        let got = next(&mut good_rx).await;
        assert_eq!(got["session"], id.to_string());
        assert_eq!(got["num"], i + 1);
        assert_eq!(got["url"], format!("https://ptyhub.example/session/{id}"));
        assert_eq!(
            (&got["from"], &got["state"]),
            (&"working".into(), &"waiting".into())
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "the good receiver waited for the hanging one: {:?}",
        start.elapsed()
    );
    assert_eq!(next(&mut hangs_rx).await["num"], 1);

    // The command ran once per transition; the hanging receiver's first failed at its timeout.
    let deadline = Instant::now() + TIMEOUT;
    while counters(addr).await.0 < 100 || counters(addr).await.1 < 1 {
        assert!(
            Instant::now() < deadline,
            "counters {:?}",
            counters(addr).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = std::fs::read_to_string(&out).expect("the command's output");
    let sessions_told: Vec<String> = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["session"].to_string())
        .collect();
    let want: Vec<String> = sessions.iter().map(|id| format!("\"{id}\"")).collect();
    assert_eq!(sessions_told, want);

    // Ending the daemon drops what the hanging receiver still had: its delivery task counts
    // them as it stops, which may be just after `end` returns (a CI run read 2 of 50).
    daemon.end().await;
    let count = |outcome| state.metrics.notifications(outcome);
    use ptyhub::metrics::NotifyOutcome::{Dropped, Failed, Sent};
    assert_eq!(count(Sent), 100);
    let deadline = Instant::now() + TIMEOUT;
    while count(Failed) + count(Dropped) < 50 {
        assert!(
            Instant::now() < deadline,
            "failed {} and dropped {}, not 50 in all",
            count(Failed),
            count(Dropped)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(Failed) + count(Dropped), 50);
}

/// A real session, found waiting by its screen and then ended, is told to the webhook once for
/// each (the default `on`: waiting and exited; its `working` start is not told), with its
/// reason and the link to its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_own_waiting_and_exit_reach_the_webhook() {
    let (hook, mut rx) = receiver(false).await;
    let agent = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/agents/permission-prompt"
    );
    let (daemon, addr) = daemon_with(
        &format!(
            "[assistants.claude]\nname = \"Claude\"\ncommand = [\"{agent}\"]\nstate_hooks = \"none\"\n"
        ),
        &format!("webhooks = [{{ url = \"{hook}\" }}]\nlink = \"https://ptyhub.example\"\nretries = 0"),
    )
    .await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let created: serde_json::Value = http
        .post(format!("http://{addr}/api/sessions"))
        .json(&serde_json::json!({"assistant": "claude"}))
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    let id = created["id"].as_str().expect("id").to_owned();

    let waiting = next(&mut rx).await;
    assert_eq!(waiting["session"], id.as_str());
    assert_eq!(waiting["state"], "waiting", "{waiting}");
    assert_eq!(waiting["assistant"], "claude");
    assert_eq!(waiting["reason"], "Claude asks: Do you want to proceed?");
    assert_eq!(
        waiting["url"],
        format!("https://ptyhub.example/session/{id}")
    );

    let resp = http
        .delete(format!("http://{addr}/api/sessions/{id}"))
        .send()
        .await
        .expect("DELETE");
    assert!(resp.status().is_success(), "{}", resp.status());
    let exited = next(&mut rx).await;
    assert_eq!(exited["session"], id.as_str());
    assert_eq!(
        (&exited["from"], &exited["state"]),
        (&"waiting".into(), &"exited".into()),
        "{exited}"
    );
    daemon.end().await;
}
