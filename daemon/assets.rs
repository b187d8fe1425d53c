//! The browser UI, embedded in the binary at build time and served with content types,
//! ETags and caching.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    HeaderValue, ACCESS_CONTROL_ALLOW_ORIGIN, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH,
};
use hyper::{HeaderMap, Response, StatusCode};

/// Everything under `static/`.
#[derive(rust_embed::Embed)]
#[folder = "static/"]
struct Static;

/// Whether an embedded file has this path (relative to `static/`).
pub fn exists(path: &str) -> bool {
    Static::get(path).is_some()
}

/// What every page's `<base>` says as written; a daemon under `[server] base_path` serves its
/// pages with the base path in it, so their relative URLs (and the scripts', which build theirs
/// from `document.baseURI`) land under it.
const BASE_TAG: &str = "<base href=\"/\">";

/// The embedded file at `path` (relative to `static/`), honouring `If-None-Match`; an HTML page
/// gets `base` (empty or `/name`) in its `<base>`.
pub fn serve(path: &str, request_headers: &HeaderMap, base: &str) -> Option<Response<Full<Bytes>>> {
    let file = Static::get(path)?;
    let etag = format!(
        "\"{}\"",
        file.metadata
            .sha256_hash()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    // Vendored libraries change only with a new version; our own files are revalidated.
    let cache = if path.starts_with("vendor/") {
        "public, max-age=86400"
    } else {
        "no-cache"
    };
    let not_modified = request_headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if not_modified {
        let mut r = Response::new(Full::default());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let data = file.data.into_owned();
        let data = if !base.is_empty() && path.ends_with(".html") {
            String::from_utf8_lossy(&data)
                .replacen(BASE_TAG, &format!("<base href=\"{base}/\">"), 1)
                .into_bytes()
        } else {
            data
        };
        Response::new(Full::new(Bytes::from(data)))
    };
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(ETAG, v);
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    // A page embedding a terminal from another origin imports the addon and xterm.js from here:
    // module scripts need CORS, and these files are public anyway.
    if path.starts_with("addon/") || path.starts_with("vendor/") {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    }
    let mime = file.metadata.mimetype();
    let mime = if mime.starts_with("text/") || mime == "application/javascript" {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_owned()
    };
    if let Ok(v) = HeaderValue::from_str(&mime) {
        headers.insert(CONTENT_TYPE, v);
    }
    Some(resp)
}
