//! The webhooks' bodies: ptyhub's own event JSON, ntfy's JSON publishing, and the `{"text"}`
//! of Slack-compatible incoming webhooks (Slack, Mattermost, Discord's `/slack` URLs).

use reqwest::Url;
use serde::{Deserialize, Serialize};

use super::transition::Transition;
use crate::attention::State;

/// How a webhook's body is written (`format` in `[notify] webhooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// The event JSON, as the command gets it on stdin.
    #[default]
    Json,
    /// ntfy's JSON publishing: posted to the server's root, the topic in the body.
    Ntfy,
    /// `{"text": "..."}`.
    Slack,
}

impl WebhookFormat {
    /// The name as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookFormat::Json => "json",
            WebhookFormat::Ntfy => "ntfy",
            WebhookFormat::Slack => "slack",
        }
    }
}

/// Where a webhook's posts go and the topic they name: ntfy's JSON is posted to the server's
/// root with the topic (the configured URL's last path segment) in the body; the others are
/// posted to the URL as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    /// Where to post.
    pub(super) url: Url,
    /// ntfy's topic.
    pub(super) topic: Option<String>,
}

impl Target {
    /// The target of a webhook at `url` in `format`, or why there is none (an ntfy URL without
    /// a topic).
    pub(super) fn new(url: &Url, format: WebhookFormat) -> Result<Self, String> {
        if format != WebhookFormat::Ntfy {
            return Ok(Target {
                url: url.clone(),
                topic: None,
            });
        }
        let (root, topic) = ntfy_split(url)?;
        Ok(Target {
            url: root,
            topic: Some(topic),
        })
    }

    /// The body of the post telling `t`.
    pub(super) fn body(&self, format: WebhookFormat, t: &Transition) -> Vec<u8> {
        match format {
            WebhookFormat::Json => t.to_json(),
            WebhookFormat::Ntfy => ntfy(self.topic.as_deref().unwrap_or_default(), t),
            WebhookFormat::Slack => slack(t),
        }
    }
}

/// An ntfy topic URL (`https://ntfy.sh/mytopic`, or under a path) split into the root it is
/// published to (`https://ntfy.sh/`) and the topic.
pub(crate) fn ntfy_split(url: &Url) -> Result<(Url, String), String> {
    let path = url.path();
    let trimmed = path.trim_end_matches('/');
    let (parent, topic) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
    let valid = (1..=64).contains(&topic.len())
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(
            "an ntfy URL ends with its topic (1 to 64 letters, digits, '-' or '_'), \
             e.g. \"https://ntfy.sh/my-topic\""
                .to_owned(),
        );
    }
    let mut root = url.clone();
    root.set_path(&format!("{parent}/"));
    Ok((root, topic.to_owned()))
}

/// ntfy's JSON publishing body: priority 4 (high) when the session waits for its user, 3
/// (default) otherwise but 2 for work starting; an emoji tag per state; a tap opens the
/// session's page.
fn ntfy(topic: &str, t: &Transition) -> Vec<u8> {
    #[derive(Serialize)]
    struct Ntfy<'a> {
        topic: &'a str,
        title: String,
        message: String,
        priority: u8,
        tags: [&'static str; 1],
        #[serde(skip_serializing_if = "Option::is_none")]
        click: Option<&'a str>,
    }
    let (priority, tag) = match t.to {
        State::Waiting => (4, "warning"),
        State::Exited => (3, "checkered_flag"),
        State::Idle => (3, "white_check_mark"),
        State::Working => (2, "hourglass_flowing_sand"),
    };
    let body = Ntfy {
        topic,
        title: t.title(),
        message: t.message(),
        priority,
        tags: [tag],
        click: t.url.as_deref(),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The Slack-compatible body: one line saying what happened, the page's address on the next.
fn slack(t: &Transition) -> Vec<u8> {
    let mut text = t.title();
    if !t.reason.is_empty() {
        text.push_str(": ");
        text.push_str(&t.reason);
    }
    if let Some(url) = &t.url {
        text.push('\n');
        text.push_str(url);
    }
    serde_json::to_vec(&serde_json::json!({ "text": slack_escape(&text) })).unwrap_or_default()
}

/// Slack reads `&`, `<` and `>` as markup (links, mentions): escaped, a name or a reason is
/// shown as written and can mention nobody.
fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use uuid::Uuid;

    use super::*;

    fn transition() -> Transition {
        Transition {
            session: Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            num: Some(3),
            name: "build <main> & co".to_owned(),
            assistant: "claude".to_owned(),
            from: Some(State::Working),
            to: State::Waiting,
            reason: "Claude wants to run: cargo test > log".to_owned(),
            at: UNIX_EPOCH + Duration::from_millis(1_790_000_000_123),
            url: Some(
                "https://ptyhub.example/session/01234567-89ab-cdef-0123-456789abcdef".to_owned(),
            ),
        }
    }

    fn text(body: Vec<u8>) -> String {
        String::from_utf8(body).unwrap()
    }

    #[test]
    fn json_is_the_event_as_api_events_names_it() {
        let url = Url::parse("http://127.0.0.1:9/hook").unwrap();
        let target = Target::new(&url, WebhookFormat::Json).unwrap();
        assert_eq!(target.url, url);
        assert_eq!(
            text(target.body(WebhookFormat::Json, &transition())),
            r#"{"type":"state","session":"01234567-89ab-cdef-0123-456789abcdef","num":3,"name":"build <main> & co","assistant":"claude","from":"working","state":"waiting","reason":"Claude wants to run: cargo test > log","since":"2026-09-21T14:13:20Z","sinceMs":1790000000123,"url":"https://ptyhub.example/session/01234567-89ab-cdef-0123-456789abcdef"}"#
        );
        let first = Transition {
            num: None,
            from: None,
            url: None,
            ..transition()
        };
        let json = text(target.body(WebhookFormat::Json, &first));
        assert!(
            json.contains(r#""num":null,"#) && json.contains(r#""from":null,"#),
            "{json}"
        );
        assert!(json.ends_with(r#""url":null}"#), "{json}");
    }

    #[test]
    fn ntfy_publishes_to_the_root_with_the_topic_in_the_body() {
        let url = Url::parse("https://ntfy.example/my-topic").unwrap();
        let target = Target::new(&url, WebhookFormat::Ntfy).unwrap();
        assert_eq!(target.url.as_str(), "https://ntfy.example/");
        assert_eq!(
            text(target.body(WebhookFormat::Ntfy, &transition())),
            r##"{"topic":"my-topic","title":"#3 build <main> & co (claude) is waiting","message":"Claude wants to run: cargo test > log","priority":4,"tags":["warning"],"click":"https://ptyhub.example/session/01234567-89ab-cdef-0123-456789abcdef"}"##
        );
        let exited = Transition {
            name: String::new(),
            to: State::Exited,
            reason: String::new(),
            url: None,
            ..transition()
        };
        assert_eq!(
            text(target.body(WebhookFormat::Ntfy, &exited)),
            r##"{"topic":"my-topic","title":"#3 claude has exited","message":"#3 claude has exited","priority":3,"tags":["checkered_flag"]}"##
        );
        // Under a path, with a trailing slash: the root keeps the path.
        let url = Url::parse("http://127.0.0.1:8080/ntfy/alerts_1/").unwrap();
        let target = Target::new(&url, WebhookFormat::Ntfy).unwrap();
        assert_eq!(target.url.as_str(), "http://127.0.0.1:8080/ntfy/");
        assert_eq!(target.topic.as_deref(), Some("alerts_1"));
        for bad in [
            "https://ntfy.example/",
            "https://ntfy.example",
            "https://n.example/a%20b",
        ] {
            let url = Url::parse(bad).unwrap();
            assert!(Target::new(&url, WebhookFormat::Ntfy).is_err(), "{bad}");
        }
    }

    #[test]
    fn slack_is_one_escaped_text() {
        let url = Url::parse("https://hooks.slack.example/services/T0/B0/x").unwrap();
        let target = Target::new(&url, WebhookFormat::Slack).unwrap();
        assert_eq!(target.url, url);
        assert_eq!(
            text(target.body(WebhookFormat::Slack, &transition())),
            r##"{"text":"#3 build &lt;main&gt; &amp; co (claude) is waiting: Claude wants to run: cargo test &gt; log\nhttps://ptyhub.example/session/01234567-89ab-cdef-0123-456789abcdef"}"##
        );
        let bare = Transition {
            num: None,
            reason: String::new(),
            url: None,
            to: State::Idle,
            ..transition()
        };
        assert_eq!(
            text(target.body(WebhookFormat::Slack, &bare)),
            r#"{"text":"build &lt;main&gt; &amp; co (claude) is idle"}"#
        );
    }
}
