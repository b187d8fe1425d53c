//! A server-sent events client that parses per the spec (the HTML standard's "event stream
//! interpretation"): lines end at CRLF, LF or CR, `data:` lines join with LF, one optional
//! space after the colon, comments ignored, an event with no data not dispatched. Bytes are
//! buffered until a line is whole, so a UTF-8 character cut between two reads is kept.

use std::time::Duration;

use super::TIMEOUT;

/// One event as an SSE client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ev {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// A client of one stream.
pub struct Sse {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends no second line.
    after_cr: bool,
    id: Option<String>,
    event: String,
    data: Vec<String>,
    pub events: Vec<Ev>,
    pub ended: bool,
}

impl Sse {
    /// `GET url`, with `Last-Event-ID` when given; asserts a 200 event stream.
    pub async fn open(url: &str, last_id: Option<&str>) -> Sse {
        let mut req = reqwest::Client::new().get(url);
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        Self::from_response(req.send().await.expect("GET"), url)
    }

    /// A response that must be a 200 event stream.
    pub fn from_response(resp: reqwest::Response, url: &str) -> Sse {
        assert_eq!(resp.status(), 200, "{url}");
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            resp,
            buf: Vec::new(),
            after_cr: false,
            id: None,
            event: String::new(),
            data: Vec::new(),
            events: Vec::new(),
            ended: false,
        }
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            if !self.data.is_empty() {
                self.events.push(Ev {
                    id: self.id.clone(),
                    event: if self.event.is_empty() {
                        "message".to_owned()
                    } else {
                        std::mem::take(&mut self.event)
                    },
                    data: self.data.join("\n"),
                });
            }
            self.data.clear();
            self.event.clear();
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => self.id = Some(value.to_owned()),
            "event" => self.event = value.to_owned(),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' && self.after_cr {
                self.after_cr = false;
                continue;
            }
            self.after_cr = b == b'\r';
            if b == b'\n' || b == b'\r' {
                let line = std::mem::take(&mut self.buf);
                self.line(std::str::from_utf8(&line).expect("UTF-8 line"));
            } else {
                self.buf.push(b);
            }
        }
    }

    /// Reads one chunk (or waits a moment); sets `ended` at the end of the stream.
    pub async fn read_some(&mut self) {
        match tokio::time::timeout(Duration::from_millis(500), self.resp.chunk()).await {
            Err(_) => {}
            Ok(Ok(Some(bytes))) => self.feed(&bytes),
            Ok(_) => self.ended = true,
        }
    }

    /// Reads until `cond` holds over the events so far.
    pub async fn until(&mut self, what: &str, cond: impl Fn(&[Ev]) -> bool) {
        let start = std::time::Instant::now();
        while !cond(&self.events) {
            assert!(
                !self.ended,
                "stream ended waiting for {what}: {:?}",
                self.events
            );
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out waiting for {what}: {:?}",
                self.events
            );
            self.read_some().await;
        }
    }

    /// Reads until the server ends the stream.
    pub async fn until_end(&mut self) {
        let start = std::time::Instant::now();
        while !self.ended {
            assert!(
                start.elapsed() < TIMEOUT,
                "stream did not end: {:?}",
                self.events
            );
            self.read_some().await;
        }
    }

    /// The data of every event of type `message`.
    pub fn texts(&self) -> Vec<&str> {
        self.of("message")
    }

    /// The data of every event of this type.
    pub fn of(&self, event: &str) -> Vec<&str> {
        self.events
            .iter()
            .filter(|e| e.event == event)
            .map(|e| e.data.as_str())
            .collect()
    }
}
