//! `GET /api/audit` (admins): the audit trail, newest first, filtered by user, session,
//! action and time, read from the current and the rotated files off the runtime.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use crate::audit::Query;

use super::*;

pub(super) async fn list(req: Request<Incoming>, state: &Arc<AppState>) -> Response<Body> {
    let query = match Query::parse(&query_pairs(&req)) {
        Ok(q) => q,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let audit = state.audit.clone();
    match tokio::task::spawn_blocking(move || audit.read(&query)).await {
        Ok(Ok(events)) => json(StatusCode::OK, &events),
        Ok(Err(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("reading the audit trail: {e}"),
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("reading the audit trail failed: {e}"),
        ),
    }
}
