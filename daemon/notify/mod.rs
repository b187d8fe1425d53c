//! Notifications beyond the browser: each session's transition into a state `[notify]` names
//! told to its webhooks (ptyhub's JSON, ntfy, Slack-compatible) and its command, once per
//! transition.
//!
//! The [`Notifier`] is the daemon's; it follows the sessions' changes of state
//! ([`Notifier::follow`]) and calls [`Notifier::notify`] for each, which never waits: it
//! puts the transition in the bounded inbox (`inbox`) of each receiver told of that state, the
//! oldest dropped when one is full. Each receiver has a task of its own (`delivery`) that
//! delivers its inbox in order, each attempt bounded by the timeout and retried a bounded
//! number of times, so a slow or dead receiver delays neither a session nor another receiver.
//! `payload` writes the webhooks' bodies, `command` runs the command, `transition` is what
//! the notifier is told and the event JSON it becomes. Outcomes are counted in `/metrics`.

mod command;
mod delivery;
mod inbox;
mod payload;
#[cfg(test)]
mod tests;
mod transition;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tracing::{error, warn};

use crate::attention::{State, Transitions};
use crate::config::NotifyConfig;
use crate::metrics::{Metrics, NotifyOutcome};
use crate::shutdown::Shutdown;
use delivery::{Bounds, Receiver};
use inbox::Inbox;
use payload::Target;

pub(crate) use payload::ntfy_split;
pub use payload::WebhookFormat;
pub use transition::Transition;

/// The wait before the first retry of a failed delivery (doubled before each next one).
const BACKOFF: Duration = Duration::from_secs(1);

/// Tells the configured receivers of sessions' transitions. Cloning it is cheap: every clone
/// feeds the same receivers.
#[derive(Clone)]
pub struct Notifier {
    shared: Arc<Shared>,
}

struct Shared {
    /// Every receiver's inbox, with the states it is told of.
    receivers: Vec<Told>,
    /// `[notify] link`: the base of the session pages' addresses.
    link: Option<String>,
    metrics: Arc<Metrics>,
}

/// One receiver as the notifier feeds it.
struct Told {
    on: Vec<State>,
    inbox: Arc<Inbox>,
}

impl Notifier {
    /// Starts a delivery task per configured receiver (none when nothing is configured: then
    /// [`Notifier::notify`] does nothing). The tasks end when `shutdown` is cancelled; what is
    /// still queued then is dropped. Counts into `metrics`. Needs a tokio runtime when
    /// receivers are configured.
    pub fn new(cfg: &NotifyConfig, metrics: Arc<Metrics>, shutdown: Shutdown) -> Self {
        Self::start(cfg, metrics, shutdown, BACKOFF)
    }

    /// [`Notifier::new`] with the first retry after `backoff`.
    fn start(
        cfg: &NotifyConfig,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
        backoff: Duration,
    ) -> Self {
        let bounds = Bounds {
            timeout: cfg.timeout,
            retries: cfg.retries,
            backoff,
        };
        let mut receivers = Vec::new();
        let mut spawn = |receiver: Receiver, on: &[State]| {
            let inbox = Arc::new(Inbox::new(cfg.queue));
            tokio::spawn(delivery::run(
                receiver,
                inbox.clone(),
                bounds,
                metrics.clone(),
                shutdown.clone(),
            ));
            receivers.push(Told {
                on: on.to_vec(),
                inbox,
            });
        };
        if !cfg.webhooks.is_empty() {
            match http_client(cfg.timeout) {
                Ok(client) => {
                    for hook in &cfg.webhooks {
                        // The config checked the URL: a target is always found.
                        match Target::new(&hook.url, hook.format) {
                            Ok(target) => spawn(
                                Receiver::Webhook {
                                    target,
                                    format: hook.format,
                                    client: client.clone(),
                                },
                                hook.on.as_deref().unwrap_or(&cfg.on),
                            ),
                            Err(why) => warn!("a webhook is left out: {why}"),
                        }
                    }
                }
                Err(e) => error!("webhooks are off: no HTTP client: {e}"),
            }
        }
        if let Some(argv) = &cfg.command {
            spawn(Receiver::Command(argv.clone()), &cfg.on);
        }
        Notifier {
            shared: Arc::new(Shared {
                receivers,
                link: cfg.link.clone(),
                metrics,
            }),
        }
    }

    /// Tells every receiver of `t.to` about `t`, without waiting: each gets it in its inbox (a
    /// full one drops its oldest, counted). Not a transition (`from` is `to`): nothing. Its
    /// `url`, when `None`, is made from `[notify] link`.
    pub fn notify(&self, mut t: Transition) {
        let shared = &*self.shared;
        if t.from == Some(t.to) || !shared.receivers.iter().any(|r| r.on.contains(&t.to)) {
            return;
        }
        if t.url.is_none() {
            t.url = shared
                .link
                .as_ref()
                .map(|link| format!("{link}/session/{}", t.session));
        }
        let t = Arc::new(t);
        let dropped: u64 = shared
            .receivers
            .iter()
            .filter(|r| r.on.contains(&t.to))
            .map(|r| r.inbox.push(t.clone()))
            .sum();
        if dropped > 0 {
            shared.metrics.notified(NotifyOutcome::Dropped, dropped);
        }
    }

    /// Tells the receivers every change of state `transitions` hears, until `shutdown`: the
    /// sessions that end because the daemon stops are not news (and an upgrade ends none).
    /// Nothing is started when no receiver is configured. Needs a tokio runtime otherwise.
    pub fn follow(&self, transitions: &Transitions, shutdown: Shutdown) {
        if self.shared.receivers.is_empty() {
            return;
        }
        let mut changes = transitions.subscribe();
        let notifier = self.clone();
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break,
                    change = changes.recv() => change,
                };
                match change {
                    Ok(change) => notifier.notify(Transition::from(&*change)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        notifier
                            .shared
                            .metrics
                            .notified(NotifyOutcome::Dropped, missed);
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
    }

    /// How many receivers it feeds (webhooks and the command).
    pub fn receivers(&self) -> usize {
        self.shared.receivers.len()
    }
}

/// The webhooks' client: redirects are not followed (a webhook that moved is a configuration
/// to fix, and a redirect could carry the body elsewhere); proxies from the environment
/// (`HTTPS_PROXY`, `NO_PROXY`) are honoured, as receivers are mostly on the internet.
fn http_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("ptyhub/", env!("CARGO_PKG_VERSION")))
        .build()
}
