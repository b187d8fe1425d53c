//! `ptyhub wait SESSION --until waiting|idle|exited|working [--timeout 10m]`: waits until a
//! session is in a state, following the daemon's event stream (`GET /api/events`, resumed
//! with `Last-Event-ID` across a live upgrade), not polling. Exits 0 when the state is reached
//! (at once if the session is in it), 1 on timeout, 2 when the session does not exist or ends
//! (or exits, unless waiting for that) first; a CI job or another agent hands work to an agent
//! and waits for it this way.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use uuid::Uuid;

use super::{ClientError, Server, Session};
use crate::attention::State;

/// Exit status: the session reached the state.
pub const REACHED: i32 = 0;
/// Exit status: the time ran out.
pub const TIMED_OUT: i32 = 1;
/// Exit status: no such session, or it ended (or exited) before reaching the state.
pub const NEVER: i32 = 2;

/// How long to wait before trying the event stream again when it ended (a live upgrade): it
/// doubles up to a second.
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// What the stream said of the session.
enum Heard {
    /// It is in this state now, for this reason.
    State(String, String),
    /// It is gone.
    Ended,
}

/// Waits until session `target` is in state `until`, for at most `timeout`; returns the exit
/// status, having said why on stdout (reached) or stderr (not).
pub async fn run(
    server: &Server,
    target: &str,
    until: State,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let deadline = Instant::now() + timeout;
    let session = match server.resolve(target).await {
        Ok(s) => s,
        Err(ClientError::NoSuchSession(name)) => {
            eprintln!("ptyhub: no session {name:?} (see `ptyhub ls`)");
            return Ok(NEVER);
        }
        Err(e) => return Err(e),
    };
    let label = session.label();
    let want = until.as_str();
    // The stream first, then the state: a change between the two is in the stream.
    let mut stream = Some(open(server, None).await?);
    let now = match server.session(session.id).await {
        Ok(now) => now,
        Err(ClientError::NoSuchSession(_)) => {
            eprintln!("ptyhub: session {label} has ended: it will never be {want}");
            return Ok(NEVER);
        }
        Err(e) => return Err(e),
    };
    let (mut state, mut reason) = current(&now);
    let mut last_id: Option<String> = None;
    let mut retry = RETRY_FIRST;
    loop {
        if state == want {
            println!("{label} {state}: {reason}");
            return Ok(REACHED);
        }
        if state == "exited" {
            eprintln!("ptyhub: session {label} {reason} before it was {want}");
            return Ok(NEVER);
        }
        let heard = match stream.as_mut() {
            Some(events) => {
                tokio::select! {
                    heard = next(events, session.id, &mut last_id) => heard,
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
            None => None,
        };
        match heard {
            Some(Heard::State(s, r)) => (state, reason) = (s, r),
            Some(Heard::Ended) if until == State::Exited => {
                println!("{label} ended");
                return Ok(REACHED);
            }
            Some(Heard::Ended) => {
                eprintln!("ptyhub: session {label} ended before it was {want}");
                return Ok(NEVER);
            }
            // The stream ended (the daemon restarts in a live upgrade, or stops): again, from
            // the last event heard.
            None => {
                stream = None;
                if Instant::now() + retry >= deadline {
                    break;
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(1));
                match open(server, last_id.as_deref()).await {
                    Ok(events) => {
                        stream = Some(events);
                        retry = RETRY_FIRST;
                    }
                    Err(ClientError::Unreachable(..)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    eprintln!(
        "ptyhub: timed out after {}: session {label} is still {state} ({reason})",
        spoken(timeout)
    );
    Ok(TIMED_OUT)
}

/// A session's state and reason as the REST API says them (an older daemon has none: running
/// or exited).
fn current(s: &Session) -> (String, String) {
    match (&s.state, s.alive) {
        (Some(state), _) => (state.clone(), s.reason.clone()),
        (None, true) => ("working".to_owned(), String::new()),
        (None, false) => ("exited".to_owned(), "has exited".to_owned()),
    }
}

/// An event stream: the response and what is read of it not parsed yet.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

/// Opens the event stream, after `last_id` if given (else from now on).
async fn open(server: &Server, last_id: Option<&str>) -> Result<Events, ClientError> {
    let path = match last_id {
        Some(_) => "api/events?follow=1".to_owned(),
        None => "api/events?follow=1&tail=0".to_owned(),
    };
    let mut req = server.streaming_request(&path)?;
    if let Some(id) = last_id {
        req = req.header("last-event-id", id);
    }
    let resp = req.send().await.map_err(|e| server.unreachable(&e))?;
    let status = resp.status();
    if matches!(status.as_u16(), 401 | 403) {
        return Err(ClientError::Unauthorized(status.as_u16()));
    }
    if !status.is_success() {
        return Err(ClientError::Server(format!(
            "the event stream was refused (HTTP {})",
            status.as_u16()
        )));
    }
    Ok(Events {
        resp,
        buf: String::new(),
    })
}

/// The next thing the stream says of session `id`; `None` when the stream ends.
async fn next(events: &mut Events, id: Uuid, last_id: &mut Option<String>) -> Option<Heard> {
    let id = id.to_string();
    loop {
        while let Some(end) = events.buf.find("\n\n") {
            let block: String = events.buf.drain(..end + 2).collect();
            let (mut kind, mut data) = ("message", String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    *last_id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = if v.trim() == "state" {
                        "state"
                    } else {
                        "other"
                    };
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if kind != "state" {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if v["session"].as_str() != Some(id.as_str()) {
                continue;
            }
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            match text("state").as_str() {
                "ended" => return Some(Heard::Ended),
                "created" => {}
                "exited" => {
                    let reason = match v["reason"].as_str() {
                        Some(r) if !r.is_empty() => r.to_owned(),
                        _ => format!("exited with code {}", v["exit_code"]),
                    };
                    return Some(Heard::State("exited".to_owned(), reason));
                }
                state => return Some(Heard::State(state.to_owned(), text("reason"))),
            }
        }
        match events.resp.chunk().await {
            Ok(Some(bytes)) => events.buf.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(None) | Err(_) => return None,
        }
    }
}

/// A duration as `--timeout` takes it: "10m", "90s", "1500ms".
fn spoken(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms >= 3_600_000 && ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        _ if ms >= 60_000 && ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_said_as_written() {
        assert_eq!(spoken(Duration::from_secs(600)), "10m");
        assert_eq!(spoken(Duration::from_secs(90)), "90s");
        assert_eq!(spoken(Duration::from_secs(7200)), "2h");
        assert_eq!(spoken(Duration::from_millis(1500)), "1500ms");
    }
}
