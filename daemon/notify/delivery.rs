//! One receiver's delivery task: takes its inbox's transitions in order and delivers each
//! (a webhook's post, or a run of the command), every attempt bounded by the timeout, failed
//! ones retried a bounded number of times with a doubling wait; each outcome counted.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;
use tracing::{debug, warn};

use super::command;
use super::inbox::Inbox;
use super::payload::{Target, WebhookFormat};
use super::transition::Transition;
use crate::metrics::{Metrics, NotifyOutcome};
use crate::shutdown::Shutdown;

/// Longest wait between two attempts, a receiver's `Retry-After` included.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Where a receiver's notifications go.
pub(super) enum Receiver {
    /// A webhook, posted with `client`.
    Webhook {
        /// Where and for ntfy which topic.
        target: Target,
        /// How the body is written.
        format: WebhookFormat,
        /// Shared by every webhook of the daemon.
        client: reqwest::Client,
    },
    /// `[notify] command`.
    Command(Vec<String>),
}

impl Receiver {
    /// What logs call it: a webhook by its format and host (its URL may hold a secret), the
    /// command by its program.
    fn describe(&self) -> String {
        match self {
            Receiver::Webhook { target, format, .. } => format!(
                "{} webhook to {}",
                format.as_str(),
                target.url.host_str().unwrap_or_default()
            ),
            Receiver::Command(argv) => {
                format!("command {}", argv.first().map_or("", String::as_str))
            }
        }
    }

    /// One attempt at delivering `t`, within `timeout`.
    async fn attempt(&self, t: &Transition, timeout: Duration) -> Attempt {
        let attempt = async {
            match self {
                Receiver::Webhook {
                    target,
                    format,
                    client,
                } => post(client, target, target.body(*format, t)).await,
                Receiver::Command(argv) => command::run(argv, &t.to_json()).await,
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(attempt) => attempt,
            Err(_) => Attempt::Retry(format!("no answer within {timeout:?}"), None),
        }
    }
}

/// How one attempt went.
pub(super) enum Attempt {
    /// Delivered.
    Sent,
    /// Failed in a way another attempt may not: after the wait the receiver asked for, if any.
    Retry(String, Option<Duration>),
    /// Refused for good (a 4xx answer, a command that cannot be run).
    Refused(String),
}

/// Posts `body` (JSON) to the target.
async fn post(client: &reqwest::Client, target: &Target, body: Vec<u8>) -> Attempt {
    let sent = client
        .post(target.url.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(e) => {
            // reqwest's Display is "error sending request for url (...)": the URL may hold a
            // secret, and the cause says more.
            let cause = std::error::Error::source(&e)
                .map_or_else(|| "request failed".to_owned(), ToString::to_string);
            return Attempt::Retry(cause, None);
        }
    };
    let status = response.status();
    if status.is_success() {
        return Attempt::Sent;
    }
    let why = format!("answered {status}");
    if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        let after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Attempt::Retry(why, after)
    } else {
        Attempt::Refused(why)
    }
}

/// How deliveries are bounded.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// Longest attempt.
    pub(super) timeout: Duration,
    /// Retries after the first attempt.
    pub(super) retries: u16,
    /// The wait before the first retry; doubled before each next one.
    pub(super) backoff: Duration,
}

impl Bounds {
    /// The wait before retry number `retry` (from 0), at least what the receiver asked for.
    fn wait(&self, retry: u16, asked: Option<Duration>) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(1u32.checked_shl(u32::from(retry)).unwrap_or(u32::MAX));
        doubled.max(asked.unwrap_or_default()).min(MAX_BACKOFF)
    }
}

/// Delivers what comes into `inbox` to `receiver` until the daemon stops; then closes the
/// inbox, counting what it held as dropped.
pub(super) async fn run(
    receiver: Receiver,
    inbox: Arc<Inbox>,
    bounds: Bounds,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) {
    let name = receiver.describe();
    loop {
        let t = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            t = inbox.pop() => t,
        };
        let outcome = tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                metrics.notified(NotifyOutcome::Dropped, 1);
                break;
            }
            outcome = deliver(&receiver, &name, &t, bounds) => outcome,
        };
        metrics.notified(outcome, 1);
    }
    metrics.notified(NotifyOutcome::Dropped, inbox.close());
}

/// Delivers `t`: attempts until one succeeds, the receiver refuses, or the retries are spent.
async fn deliver(receiver: &Receiver, name: &str, t: &Transition, bounds: Bounds) -> NotifyOutcome {
    let (session, state) = (t.session, t.to.as_str());
    let mut retry = 0;
    loop {
        match receiver.attempt(t, bounds.timeout).await {
            Attempt::Sent => {
                debug!(%session, state, receiver = name, "notification sent");
                return NotifyOutcome::Sent;
            }
            Attempt::Refused(why) => {
                warn!(%session, state, receiver = name, "notification refused: {why}");
                return NotifyOutcome::Failed;
            }
            Attempt::Retry(why, asked) => {
                if retry >= bounds.retries {
                    warn!(
                        %session,
                        state,
                        receiver = name,
                        attempts = retry + 1,
                        "notification failed: {why}"
                    );
                    return NotifyOutcome::Failed;
                }
                let wait = bounds.wait(retry, asked);
                debug!(%session, receiver = name, ?wait, "notification failed, retrying: {why}");
                tokio::time::sleep(wait).await;
                retry += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_backoff_up_to_a_minute() {
        let bounds = Bounds {
            timeout: Duration::from_secs(5),
            retries: 10,
            backoff: Duration::from_secs(1),
        };
        let waits: Vec<u64> = (0..8).map(|r| bounds.wait(r, None).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(bounds.wait(0, Some(Duration::from_secs(10))).as_secs(), 10);
        assert_eq!(
            bounds.wait(0, Some(Duration::from_secs(3600))).as_secs(),
            60
        );
        assert_eq!(bounds.wait(40, None).as_secs(), 60, "no overflow");
    }
}
