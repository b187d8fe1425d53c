//! The notifier against receivers this test runs on 127.0.0.1 (nothing leaves the machine):
//! what each receives, once per transition; that a receiver that hangs, fails or refuses
//! delays neither `notify` nor the others; the bounded queue; retries; the command.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use reqwest::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::*;
use crate::attention::State;
use crate::config::Webhook;

/// Generous: the machine may be busy; tests wait on conditions, never on time alone.
const PATIENCE: Duration = Duration::from_secs(20);

/// How the test receiver answers its `n`th request (from 0).
#[derive(Clone, Copy)]
enum Answer {
    Ok,
    Status(u16),
    /// Never: the connection stays open, unanswered.
    Hang,
}

/// One request the test receiver got.
#[derive(Debug)]
struct Got {
    path: String,
    /// Header lines, lower-cased names.
    headers: Vec<(String, String)>,
    body: String,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// An HTTP/1.1 server on 127.0.0.1, answering as `answer` says.
struct TestReceiver {
    url: Url,
    got: mpsc::UnboundedReceiver<Got>,
}

impl TestReceiver {
    async fn start(path: &str, answer: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}{path}", listener.local_addr().unwrap())).unwrap();
        let (tx, got) = mpsc::unbounded_channel();
        let answer = Arc::new(answer);
        let count = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, tx.clone(), answer.clone(), count.clone()));
            }
        });
        TestReceiver { url, got }
    }

    /// The next request, within PATIENCE.
    async fn next(&mut self) -> Got {
        tokio::time::timeout(PATIENCE, self.got.recv())
            .await
            .expect("a request in time")
            .expect("the receiver runs")
    }

    /// Whether another request comes within `wait`.
    async fn quiet_for(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.got.recv()).await.is_err()
    }
}

/// Reads requests off one connection and answers each.
async fn serve(
    mut socket: TcpStream,
    tx: mpsc::UnboundedSender<Got>,
    answer: Arc<impl Fn(usize) -> Answer>,
    count: Arc<AtomicUsize>,
) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or_default()
            .to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
        buf.drain(..head_end + length);
        let n = count.fetch_add(1, Ordering::SeqCst);
        let _ = tx.send(Got {
            path,
            headers,
            body,
        });
        let reply = match answer(n) {
            Answer::Ok => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_owned(),
            Answer::Status(s) => format!("HTTP/1.1 {s} Nope\r\ncontent-length: 0\r\n\r\n"),
            Answer::Hang => {
                std::future::pending::<()>().await;
                return;
            }
        };
        if socket.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn webhook(url: &Url, format: WebhookFormat) -> Webhook {
    Webhook {
        url: url.clone(),
        format,
        on: None,
    }
}

fn config(webhooks: Vec<Webhook>) -> NotifyConfig {
    NotifyConfig {
        webhooks,
        command: None,
        link: None,
        on: vec![State::Waiting, State::Exited],
        timeout: Duration::from_secs(5),
        retries: 0,
        queue: 256,
    }
}

/// A notifier counting into its own metrics, retrying after `backoff`.
fn notifier(cfg: &NotifyConfig, backoff: Duration) -> (Notifier, Arc<Metrics>, Shutdown) {
    let metrics = Arc::new(Metrics::default());
    let shutdown = Shutdown::new();
    let n = Notifier::start(cfg, metrics.clone(), shutdown.clone(), backoff);
    (n, metrics, shutdown)
}

/// Session `n` going from `from` to `to`.
fn transition(n: u8, from: Option<State>, to: State) -> Transition {
    Transition {
        session: Uuid::from_u128(u128::from(n)),
        num: Some(n),
        name: format!("job {n}"),
        assistant: "claude".to_owned(),
        from,
        to,
        reason: format!("reason {n}"),
        at: UNIX_EPOCH + Duration::from_secs(1_790_000_000),
        url: None,
    }
}

fn waiting(n: u8) -> Transition {
    transition(n, Some(State::Working), State::Waiting)
}

/// Waits until `metrics` counts `want` of `outcome`.
async fn counted(metrics: &Metrics, outcome: NotifyOutcome, want: u64) {
    let start = Instant::now();
    while metrics.notifications(outcome) < want {
        assert!(
            start.elapsed() < PATIENCE,
            "{} {:?} counted, {want} wanted",
            metrics.notifications(outcome),
            outcome
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metrics.notifications(outcome), want, "{outcome:?}");
}

#[tokio::test]
async fn each_format_is_posted_as_its_receiver_reads_it() {
    let mut json = TestReceiver::start("/hook", |_| Answer::Ok).await;
    let mut ntfy = TestReceiver::start("/ntfy/my-topic", |_| Answer::Ok).await;
    let mut slack = TestReceiver::start("/services/T0/B0/x", |_| Answer::Ok).await;
    let mut cfg = config(vec![
        webhook(&json.url, WebhookFormat::Json),
        webhook(&ntfy.url, WebhookFormat::Ntfy),
        webhook(&slack.url, WebhookFormat::Slack),
    ]);
    cfg.link = Some("https://ptyhub.example/base".to_owned());
    let (n, metrics, _shutdown) = notifier(&cfg, BACKOFF);
    assert_eq!(n.receivers(), 3);
    n.notify(waiting(7));

    let page = "https://ptyhub.example/base/session/00000000-0000-0000-0000-000000000007";
    let got = json.next().await;
    assert_eq!(got.path, "/hook");
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(
        got.body,
        format!(
            r#"{{"type":"state","session":"00000000-0000-0000-0000-000000000007","num":7,"name":"job 7","assistant":"claude","from":"working","state":"waiting","reason":"reason 7","since":"2026-09-21T14:13:20Z","sinceMs":1790000000000,"url":"{page}"}}"#
        )
    );
    let got = ntfy.next().await;
    assert_eq!(got.path, "/ntfy/", "ntfy's JSON goes to the root");
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(
        got.body,
        format!(
            r##"{{"topic":"my-topic","title":"#7 job 7 (claude) is waiting","message":"reason 7","priority":4,"tags":["warning"],"click":"{page}"}}"##
        )
    );
    let got = slack.next().await;
    assert_eq!(got.path, "/services/T0/B0/x");
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(
        got.body,
        format!(r##"{{"text":"#7 job 7 (claude) is waiting: reason 7\n{page}"}}"##)
    );
    counted(&metrics, NotifyOutcome::Sent, 3).await;
}

#[tokio::test]
async fn one_notification_per_transition_into_a_state_told() {
    let mut both = TestReceiver::start("/both", |_| Answer::Ok).await;
    let mut idle = TestReceiver::start("/idle", |_| Answer::Ok).await;
    let mut only_idle = webhook(&idle.url, WebhookFormat::Json);
    only_idle.on = Some(vec![State::Idle]);
    let cfg = config(vec![webhook(&both.url, WebhookFormat::Json), only_idle]);
    let (n, metrics, _shutdown) = notifier(&cfg, BACKOFF);
    use State::{Exited, Idle, Waiting, Working};
    for (from, to) in [
        (None, Working),
        (Some(Working), Waiting),
        (Some(Waiting), Waiting), // a redraw: not a transition
        (Some(Waiting), Working),
        (Some(Working), Idle),
        (Some(Idle), Idle),
        (Some(Idle), Exited),
    ] {
        n.notify(transition(1, from, to));
    }
    let states: Vec<_> = [both.next().await, both.next().await]
        .iter()
        .map(|g| (g.json()["from"].clone(), g.json()["state"].clone()))
        .collect();
    assert_eq!(
        states,
        [
            ("working".into(), "waiting".into()),
            ("idle".into(), "exited".into())
        ]
    );
    assert_eq!(idle.next().await.json()["state"], "idle");
    assert!(both.quiet_for(Duration::from_millis(300)).await);
    assert!(idle.quiet_for(Duration::from_millis(10)).await);
    counted(&metrics, NotifyOutcome::Sent, 3).await;
}

#[tokio::test]
async fn a_receiver_that_hangs_or_fails_delays_neither_callers_nor_the_others() {
    let mut hangs = TestReceiver::start("/hangs", |_| Answer::Hang).await;
    let mut fails = TestReceiver::start("/fails", |_| Answer::Status(500)).await;
    let mut good = TestReceiver::start("/good", |_| Answer::Ok).await;
    let mut cfg = config(vec![
        webhook(&hangs.url, WebhookFormat::Json),
        webhook(&fails.url, WebhookFormat::Slack),
        webhook(&good.url, WebhookFormat::Ntfy),
    ]);
    cfg.retries = 3;
    cfg.timeout = Duration::from_secs(5);
    let (n, metrics, _shutdown) = notifier(&cfg, Duration::from_millis(50));

    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..200u8 {
        let call = Instant::now();
        n.notify(waiting(i));
        slowest = slowest.max(call.elapsed());
    }
    let all_calls = start.elapsed();
    assert!(
        slowest < Duration::from_millis(20) && all_calls < Duration::from_millis(200),
        "notify() waited: slowest call {slowest:?}, 200 calls {all_calls:?}"
    );
    for i in 0..200u8 {
        assert_eq!(good.next().await.json()["message"], format!("reason {i}"));
    }
    let delivered = start.elapsed();
    assert!(
        delivered < cfg.timeout,
        "the good receiver waited for the hanging one: {delivered:?}"
    );
    // The hanging receiver has its first request, and nothing more yet.
    assert!(hangs.next().await.body.contains(r#""num":0,"#));
    // The failing one: the first transition tried 1 + 3 times, then the next.
    for _ in 0..4 {
        assert!(fails.next().await.body.starts_with(r##"{"text":"#0 "##));
    }
    assert!(fails.next().await.body.starts_with(r##"{"text":"#1 "##));
    counted(&metrics, NotifyOutcome::Sent, 200).await;
    assert!(metrics.notifications(NotifyOutcome::Failed) >= 1);
    assert_eq!(metrics.notifications(NotifyOutcome::Dropped), 0);
}

#[tokio::test]
async fn a_refusal_is_not_retried() {
    let mut refuses = TestReceiver::start("/gone", |_| Answer::Status(404)).await;
    let mut cfg = config(vec![webhook(&refuses.url, WebhookFormat::Json)]);
    cfg.retries = 3;
    let (n, metrics, _shutdown) = notifier(&cfg, Duration::from_millis(10));
    n.notify(waiting(1));
    refuses.next().await;
    counted(&metrics, NotifyOutcome::Failed, 1).await;
    assert!(refuses.quiet_for(Duration::from_millis(300)).await);
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest() {
    // The first request hangs until the timeout; the others are answered.
    let mut slow =
        TestReceiver::start("/slow", |n| if n == 0 { Answer::Hang } else { Answer::Ok }).await;
    let mut cfg = config(vec![webhook(&slow.url, WebhookFormat::Json)]);
    cfg.queue = 4;
    cfg.timeout = Duration::from_secs(1);
    let (n, metrics, _shutdown) = notifier(&cfg, BACKOFF);
    n.notify(waiting(1));
    assert_eq!(slow.next().await.json()["num"], 1);
    // Delivering 1: 2 to 10 come while it hangs; the inbox keeps the last 4.
    for i in 2..=10 {
        n.notify(waiting(i));
    }
    assert_eq!(metrics.notifications(NotifyOutcome::Dropped), 5);
    for want in 7..=10 {
        assert_eq!(slow.next().await.json()["num"], want);
    }
    counted(&metrics, NotifyOutcome::Failed, 1).await;
    counted(&metrics, NotifyOutcome::Sent, 4).await;
    let text = metrics.render(crate::metrics::SessionCounts::default());
    for line in [
        "ptyhub_notifications_total{outcome=\"sent\"} 4",
        "ptyhub_notifications_total{outcome=\"failed\"} 1",
        "ptyhub_notifications_total{outcome=\"dropped\"} 5",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

#[tokio::test]
async fn what_is_queued_when_the_daemon_stops_is_dropped() {
    let mut hangs = TestReceiver::start("/hangs", |_| Answer::Hang).await;
    let cfg = config(vec![webhook(&hangs.url, WebhookFormat::Json)]);
    let (n, metrics, shutdown) = notifier(&cfg, BACKOFF);
    for i in 1..=3 {
        n.notify(waiting(i));
    }
    hangs.next().await;
    shutdown.cancel();
    counted(&metrics, NotifyOutcome::Dropped, 3).await;
    n.notify(waiting(4));
    assert_eq!(metrics.notifications(NotifyOutcome::Dropped), 4);
}

#[tokio::test]
async fn nothing_configured_nothing_told() {
    let (n, metrics, _shutdown) = notifier(&config(Vec::new()), BACKOFF);
    assert_eq!(n.receivers(), 0);
    n.notify(waiting(1));
    let text = metrics.render(crate::metrics::SessionCounts::default());
    assert!(text.contains("ptyhub_notifications_total{outcome=\"dropped\"} 0"));
}

#[tokio::test]
async fn the_command_gets_the_event_json_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("event.json");
    let script = format!("cat > {0}.part && mv {0}.part {0}", out.display());
    let mut cfg = config(Vec::new());
    cfg.command = Some(vec!["sh".to_owned(), "-c".to_owned(), script]);
    let (n, metrics, _shutdown) = notifier(&cfg, BACKOFF);
    assert_eq!(n.receivers(), 1);
    let t = waiting(5);
    let mut want = t.to_json();
    want.push(b'\n');
    n.notify(t);
    counted(&metrics, NotifyOutcome::Sent, 1).await;
    assert_eq!(
        String::from_utf8(std::fs::read(&out).unwrap()).unwrap(),
        String::from_utf8(want).unwrap()
    );
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The shell and a child of it in the background, both waiting far longer than allowed.
    let script = format!(
        "sleep 300 & echo $$ $! > {0}.part && mv {0}.part {0}; wait",
        pids.display()
    );
    let mut cfg = config(Vec::new());
    cfg.command = Some(vec!["sh".to_owned(), "-c".to_owned(), script]);
    cfg.timeout = Duration::from_millis(500);
    cfg.retries = 1;
    let (n, metrics, _shutdown) = notifier(&cfg, Duration::from_millis(10));
    let start = Instant::now();
    n.notify(waiting(1));
    counted(&metrics, NotifyOutcome::Failed, 1).await;
    assert!(start.elapsed() >= Duration::from_secs(1), "two attempts");
    let text = std::fs::read_to_string(&pids).unwrap();
    for pid in text.split_whitespace() {
        let ended = || {
            // Gone, or a zombie its parent has yet to reap.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let waited = Instant::now();
        while !ended() {
            assert!(waited.elapsed() < PATIENCE, "process {pid} still runs");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test]
async fn a_command_that_fails_is_retried_and_one_not_found_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let script = format!("echo run >> {}; exit 3", runs.display());
    let mut cfg = config(Vec::new());
    cfg.command = Some(vec!["sh".to_owned(), "-c".to_owned(), script]);
    cfg.retries = 2;
    let (n, metrics, _shutdown) = notifier(&cfg, Duration::from_millis(10));
    n.notify(waiting(1));
    counted(&metrics, NotifyOutcome::Failed, 1).await;
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\nrun\nrun\n");

    cfg.command = Some(vec!["/nonexistent/ptyhub-notify-test".to_owned()]);
    let (n, metrics, _shutdown) = notifier(&cfg, Duration::from_secs(60));
    let start = Instant::now();
    n.notify(waiting(1));
    counted(&metrics, NotifyOutcome::Failed, 1).await;
    assert!(start.elapsed() < Duration::from_secs(30), "not retried");
}

/// Basic authentication from the URL, and never a redirect followed.
#[tokio::test]
async fn credentials_in_the_url_are_sent_and_redirects_not_followed() {
    let mut auth = TestReceiver::start("/t", |_| Answer::Ok).await;
    let mut url = auth.url.clone();
    url.set_username("").unwrap();
    url.set_password(Some("tk_secret")).unwrap();
    let mut moved = TestReceiver::start("/moved", |_| Answer::Status(301)).await;
    let mut cfg = config(vec![
        webhook(&url, WebhookFormat::Ntfy),
        webhook(&moved.url, WebhookFormat::Json),
    ]);
    cfg.retries = 3;
    let (n, metrics, _shutdown) = notifier(&cfg, Duration::from_millis(10));
    n.notify(waiting(1));
    let got = auth.next().await;
    // base64(":tk_secret")
    assert_eq!(got.header("authorization"), Some("Basic OnRrX3NlY3JldA=="));
    moved.next().await;
    counted(&metrics, NotifyOutcome::Sent, 1).await;
    counted(&metrics, NotifyOutcome::Failed, 1).await;
    assert!(moved.quiet_for(Duration::from_millis(200)).await);
}
