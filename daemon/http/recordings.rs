//! The recordings' REST API: a session's `.cast` file (running or ended, from this daemon run
//! or an earlier one), the listing, one recording's listing, and deletion.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::io::AsyncReadExt as _;
use tracing::{info, warn};
use uuid::Uuid;

use crate::protocol::asciicast::MEDIA_TYPE;

use super::*;

/// Bytes read from the file per body chunk.
const READ_CHUNK: usize = 64 * 1024;

/// `GET /api/sessions/{id}/recording`: the file, streamed
/// as it is on disk now (a running recording is at most a moment behind).
pub(super) async fn cast(id: Uuid, state: &Arc<AppState>) -> Response<Body> {
    let recordings = state.registry.recordings();
    let Some(path) = recordings.file(id) else {
        return error(StatusCode::NOT_FOUND, "no recording of that session");
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return error(StatusCode::NOT_FOUND, "no recording of that session")
        }
        Err(e) => {
            warn!(session = %id, "cannot open recording: {e}");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot read the recording",
            );
        }
    };
    let name = match state.registry.get(&id) {
        Some(h) => h.info().name.clone(),
        None => recordings
            .info(id, false)
            .await
            .map(|i| i.name)
            .unwrap_or_default(),
    };
    // Streamed in chunks: a recording may be tens of MiB. A read error ends the body early
    // (the client sees a short file), and is logged.
    let chunks = futures_util::stream::unfold(Some(file), move |file| async move {
        let mut file = file?;
        let mut buf = vec![0; READ_CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Bytes::from(buf), Some(file)))
            }
            Err(e) => {
                warn!(session = %id, "reading recording failed: {e}");
                None
            }
        }
    });
    let body = StreamBody::new(chunks.map(|b| Ok(Frame::data(b)))).boxed_unsync();
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&disposition(&name, id)) {
        headers.insert(CONTENT_DISPOSITION, v);
    }
    resp
}

/// `attachment` with the session's name as the file name (its uuid when unnamed): an ASCII
/// fallback and the name itself as RFC 5987 UTF-8.
fn disposition(name: &str, id: Uuid) -> String {
    let base = if name.trim().is_empty() {
        id.to_string()
    } else {
        name.trim().to_owned()
    };
    let ascii: String = base
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect();
    let encoded: String = format!("{base}.cast")
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("attachment; filename=\"{ascii}.cast\"; filename*=UTF-8''{encoded}")
}

/// `GET /api/recordings`.
pub(super) async fn list(state: &Arc<AppState>) -> Response<Body> {
    let registry = state.registry.clone();
    let all = state
        .registry
        .recordings()
        .list(move |id| registry.get(&id).is_some())
        .await;
    json(StatusCode::OK, &all)
}

/// `GET /api/recordings/{id}`.
pub(super) async fn one(id: Uuid, state: &Arc<AppState>) -> Response<Body> {
    let live = state.registry.get(&id).is_some();
    match state.registry.recordings().info(id, live).await {
        Some(info) => json(StatusCode::OK, &info),
        None => error(StatusCode::NOT_FOUND, "no such recording"),
    }
}

/// `DELETE /api/recordings/{id}`. A running session's recording goes too (what it records
/// from then on is not kept).
pub(super) async fn delete(id: Uuid, state: &Arc<AppState>) -> Response<Body> {
    match state.registry.recordings().delete(id).await {
        Ok(true) => {
            info!(session = %id, "recording deleted through the API");
            no_content()
        }
        Ok(false) => error(StatusCode::NOT_FOUND, "no such recording"),
        Err(e) => {
            warn!(session = %id, "deleting recording failed: {e}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "could not delete the recording",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disposition_names_the_file_safely() {
        let id = Uuid::nil();
        assert_eq!(
            disposition("", id),
            format!("attachment; filename=\"{id}.cast\"; filename*=UTF-8''{id}.cast")
        );
        assert_eq!(
            disposition("bé \"x\"", id),
            "attachment; filename=\"b_ _x_.cast\"; filename*=UTF-8''b%C3%A9%20%22x%22.cast"
        );
    }
}
