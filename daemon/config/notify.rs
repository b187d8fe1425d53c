//! `[notify]`'s values: a webhook as written and as the daemon reads it, the command, the
//! page link, and the state names of `on`. The keys are in `keys`.

use reqwest::Url;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use super::keys::RawNotify;
use super::values::Checked;
use crate::attention::State;
use crate::notify::{ntfy_split, WebhookFormat};

/// One of `[notify] webhooks`.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// Where it is posted (for ntfy: the topic's URL; the post goes to the server's root).
    /// A `user:password@` in it is sent as Basic authentication.
    pub url: Url,
    /// How its body is written.
    pub format: WebhookFormat,
    /// The states whose transitions it is told; `None`: `[notify] on`.
    pub on: Option<Vec<State>>,
}

/// A webhook as written: `{ url = "…", format = "json" | "ntfy" | "slack", on = […] }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WebhookEntry {
    url: Spanned<WebhookUrl>,
    #[serde(default)]
    format: WebhookFormat,
    on: Option<Vec<State>>,
}

impl Checked<Webhook> for WebhookEntry {
    fn into_value(self) -> Webhook {
        Webhook {
            url: self.url.into_inner().0,
            format: self.format,
            on: self.on,
        }
    }
}

/// A webhook's URL: `http://` or `https://` with a host. It may hold a secret (Slack's do, in
/// the path): the errors do not repeat it.
struct WebhookUrl(Url);

impl<'de> Deserialize<'de> for WebhookUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let url = Url::parse(&text)
            .map_err(|e| de::Error::custom(format!("the webhook's url is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(de::Error::custom(
                "the webhook's url must be http:// or https:// with a host",
            ));
        }
        if url.fragment().is_some() {
            return Err(de::Error::custom(
                "the webhook's url must have no #fragment",
            ));
        }
        Ok(WebhookUrl(url))
    }
}

/// The first ntfy webhook of `raw` whose URL is no topic's: the offset of its URL and why.
/// Checked on each layer once it is parsed (the URL alone cannot know its format), so that the
/// error points at the URL.
pub(super) fn misplaced_ntfy(raw: &RawNotify) -> Option<(usize, String)> {
    let hooks = raw.webhooks.as_ref()?.get_ref();
    hooks
        .iter()
        .filter(|hook| hook.format == WebhookFormat::Ntfy)
        .find_map(|hook| {
            let url = &hook.url.get_ref().0;
            let why = if url.query().is_some() {
                Err(
                    "an ntfy webhook's url must have no query: ntfy's JSON is posted to the \
                     server's root"
                        .to_owned(),
                )
            } else {
                ntfy_split(url).map(|_| ())
            };
            why.err().map(|why| (hook.url.span().start, why))
        })
}

impl Checked<State> for State {
    fn into_value(self) -> State {
        self
    }
}

/// `[notify] command`: an argument array, run without a shell.
pub(super) struct NotifyCommand(Vec<String>);

impl<'de> Deserialize<'de> for NotifyCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(d)?;
        match super::argv_problem(&argv) {
            Some(problem) => Err(de::Error::custom(problem)),
            None => Ok(NotifyCommand(argv)),
        }
    }
}

impl Checked<Vec<String>> for NotifyCommand {
    fn into_value(self) -> Vec<String> {
        self.0
    }
}

/// `[notify] link`: the address people open ptyhub at, without a trailing slash.
pub(super) struct PageLink(String);

impl<'de> Deserialize<'de> for PageLink {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let bad = |why: &str| {
            de::Error::custom(format!(
                "link {text:?} {why} (expected the address people open ptyhub at, such as \
                 \"https://ptyhub.example.org\")"
            ))
        };
        let url = Url::parse(&text).map_err(|e| bad(&format!("is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(bad("must be http:// or https:// with a host"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(bad("must have no query, fragment or user"));
        }
        Ok(PageLink(url.as_str().trim_end_matches('/').to_owned()))
    }
}

impl Checked<String> for PageLink {
    fn into_value(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{from_toml_str, ConfigError};

    #[test]
    fn nothing_is_sent_by_default() {
        let c = from_toml_str("", "t").unwrap().notify;
        assert!(c.webhooks.is_empty());
        assert_eq!(c.command, None);
        assert_eq!(c.link, None);
        assert_eq!(c.on, vec![State::Waiting, State::Exited]);
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.retries, 3);
        assert_eq!(c.queue, 256);
    }

    #[test]
    fn webhooks_command_and_link_are_read() {
        let c = from_toml_str(
            r#"
[notify]
command = ["notify-send", "ptyhub"]
link = "https://ptyhub.example.org/base/"
on = ["idle", "exited"]
timeout = "2s"
retries = 0
queue = 10

[[notify.webhooks]]
url = "http://127.0.0.1:9/hook"

[[notify.webhooks]]
url = "https://ntfy.example/my-topic"
format = "ntfy"
on = ["waiting"]

[[notify.webhooks]]
url = "https://chat.example/hooks/x"
format = "slack"
"#,
            "t",
        )
        .unwrap()
        .notify;
        let hooks: Vec<_> = c
            .webhooks
            .iter()
            .map(|w| (w.url.as_str(), w.format, w.on.clone()))
            .collect();
        assert_eq!(
            hooks,
            [
                ("http://127.0.0.1:9/hook", WebhookFormat::Json, None),
                (
                    "https://ntfy.example/my-topic",
                    WebhookFormat::Ntfy,
                    Some(vec![State::Waiting])
                ),
                ("https://chat.example/hooks/x", WebhookFormat::Slack, None),
            ]
        );
        assert_eq!(
            c.command,
            Some(vec!["notify-send".to_owned(), "ptyhub".to_owned()])
        );
        assert_eq!(c.link.as_deref(), Some("https://ptyhub.example.org/base"));
        assert_eq!(c.on, vec![State::Idle, State::Exited]);
        assert_eq!(
            (c.timeout, c.retries, c.queue),
            (Duration::from_secs(2), 0, 10)
        );
    }

    /// (line, column, reason) of the error `text` gives.
    fn placed(text: &str) -> (usize, usize, String) {
        match from_toml_str(text, "n.toml") {
            Err(ConfigError::Invalid {
                line,
                column,
                reason,
                ..
            }) => (line, column, reason),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn bad_values_are_placed_at_their_line() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "[notify]\nwebhooks = [\n  { url = \"ftp://x.example/a\" },\n]\n",
                3,
                "the webhook's url must be http:// or https:// with a host",
            ),
            (
                "[notify]\nwebhooks = [\n  { url = \"not a url\" },\n]\n",
                3,
                "the webhook's url is not a URL",
            ),
            (
                "[notify]\nwebhooks = [\n  { url = \"http://x.example/\", format = \"xml\" },\n]\n",
                3,
                "unknown variant `xml`, expected one of `json`, `ntfy`, `slack`",
            ),
            (
                "[notify]\nwebhooks = [\n  { url = \"https://ntfy.sh/\", format = \"ntfy\" },\n]\n",
                3,
                "an ntfy URL ends with its topic",
            ),
            (
                "[notify]\nwebhooks = [\n  { url = \"http://x.example/\", on = [\"busy\"] },\n]\n",
                3,
                "unknown variant `busy`, expected one of `working`, `waiting`, `idle`, `exited`",
            ),
            (
                "[notify]\nwebhooks = [\n  { url = \"http://x.example/\", when = [] },\n]\n",
                3,
                "unknown field `when`",
            ),
            (
                "[[notify.webhooks]]\nformat = \"ntfy\"\nurl = \"https://ntfy.sh/a?b=1\"\n",
                3,
                "an ntfy webhook's url must have no query",
            ),
            (
                "[[notify.webhooks]]\nurl = \"https://ntfy.sh\"\nformat = \"ntfy\"\n",
                2,
                "an ntfy URL ends with its topic",
            ),
            (
                "[[notify.webhooks]]\nformat = \"slack\"\n",
                1,
                "missing field `url`",
            ),
            ("[notify]\ncommand = []\n", 2, "the command is empty"),
            ("[notify]\non = [\"done\"]\n", 2, "unknown variant `done`"),
            ("[notify]\ntimeout = \"0s\"\n", 2, "must be more than 0"),
            (
                "[notify]\nretries = 11\n",
                2,
                "expected an integer from 0 to 10",
            ),
            (
                "[notify]\nqueue = 0\n",
                2,
                "expected an integer from 1 to 100000",
            ),
            (
                "[notify]\nlink = \"https://x.example/?a=1\"\n",
                2,
                "must have no query, fragment or user",
            ),
            ("[notify]\nwebhook = []\n", 2, "unknown field `webhook`"),
        ];
        for (text, line, reason) in cases {
            let (got, _, why) = placed(text);
            assert_eq!(got, *line, "{text:?}: {why}");
            assert!(why.contains(reason), "{text:?}: {why:?} lacks {reason:?}");
        }
    }

    /// The examples `config/ptyhub.toml` gives in comments, uncommented, are a valid `[notify]`.
    #[test]
    fn the_documented_examples_are_valid() {
        let notify = crate::config::DEFAULT_TOML
            .split_once("\n[notify]\n")
            .map(|(_, table)| table)
            .unwrap();
        let mut examples = String::from("[notify]\n");
        let mut in_list = false;
        for line in notify.lines() {
            let Some(code) = line.strip_prefix("# ") else {
                continue;
            };
            let starts = ["webhooks = [", "command = [", "link = "]
                .iter()
                .any(|k| code.starts_with(k));
            if starts || in_list {
                examples.push_str(code);
                examples.push('\n');
                in_list = (in_list || code.starts_with("webhooks = [")) && code != "]";
            }
        }
        let c = from_toml_str(&examples, "examples").unwrap().notify;
        assert_eq!(c.webhooks.len(), 3, "{examples}");
        assert_eq!(c.webhooks[0].format, WebhookFormat::Ntfy);
        assert_eq!(c.command.map(|argv| argv.len()), Some(3));
        assert!(c.link.is_some());
    }

    #[test]
    fn an_error_does_not_repeat_a_webhook_secret() {
        let (_, _, why) = placed(
            "[notify]\nwebhooks = [{ url = \"https://hooks.example/services/SECRET#x\" }]\n",
        );
        assert!(!why.contains("SECRET"), "{why}");
    }
}
