//! What the OpenAPI document says beyond the schemas derived from the handlers' types
//! (`openapi.rs`), written onto the derived document: the statuses every guarded operation can
//! return (the guard's 401, 403 and 429, a path id's 400, a body's 408 and 413), the path ids'
//! and queries' real patterns and ranges, and a session's creation as this daemon's config
//! allows it (its assistants, its name length, whether a client may choose the program). A
//! client generated from the document, or a tool such as Schemathesis, then expects what the
//! daemon does.

use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::session::CUSTOM_ASSISTANT;

/// A hyphenated uuid, any case.
const HYPHENATED: &str =
    "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";
/// A uuid's 32 hex digits without hyphens.
const SIMPLE: &str = "[0-9A-Fa-f]{32}";
/// A session number, 1 to 255, in one to three digits (`7`, `07`, `007`).
const NUMBER: &str = "00[1-9]|0?[1-9]|0[1-9][0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5]";
/// The whitespace Rust's `str::trim` removes (Unicode `White_Space`), which the name and the
/// reason rules trim first.
const SPACE: &str =
    "[\\t\\n\\u000B\\f\\r \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]";
/// The largest integer a `u64` (or, here, `usize`) query value takes.
const U64_MAX: u64 = u64::MAX;

/// A path's `{id}` that names a session: its uuid or its number. Paths are not percent-decoded,
/// so the braced and `urn:uuid:` forms the body takes cannot be written in one.
fn session_id() -> String {
    format!("^({NUMBER}|{HYPHENATED}|{SIMPLE})$")
}

/// A uuid in a path.
fn path_uuid() -> String {
    format!("^({HYPHENATED}|{SIMPLE})$")
}

/// A uuid in a body or a (decoded) query: every form the uuid parser takes.
fn any_uuid() -> String {
    format!("^({HYPHENATED}|{SIMPLE}|\\{{{HYPHENATED}\\}}|urn:uuid:{HYPHENATED})$")
}

/// A session name as [`crate::session::validate_name`] takes it: trimmed, at most `max`
/// characters of letters, digits, spaces, `-` and `_` (empty: no name).
fn name_pattern(max: usize) -> String {
    format!("^{SPACE}*[A-Za-z0-9 _-]{{0,{max}}}{SPACE}*$")
}

/// An error reply of this status, described.
fn error_reply(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

/// Adds `status` to `responses`, or appends its description to the one already there.
fn add(responses: &mut Map<String, Value>, status: &str, description: &str) {
    match responses.get_mut(status) {
        Some(reply) => {
            let had = reply["description"].as_str().unwrap_or_default().to_owned();
            reply["description"] = Value::String(format!("{had}; or: {description}"));
        }
        None => {
            responses.insert(status.to_owned(), error_reply(description));
        }
    }
}

const UNAUTHORIZED: &str = "No token, or a wrong one. Each wrong token from an address is \
    answered later than the one before: 25 ms for its first in a minute, doubling, up to \
    `limits.failed_auth_delay_max` (2 s); a request without a token and a correct token are \
    never held back";
const FORBIDDEN: &str = "Refused to this caller: a token whose scopes do not reach this (an \
    API token without `view`, `write`, `exec` or `admin` as the route needs), a share link (or a \
    session's capability token) that does not reach this, a cross-site request (its Origin is \
    not the server's), a Host that is not loopback while authentication is off, or a person the \
    trusted proxy signed in (`[auth] user_header`) who has no scope here";
const TOO_MANY: &str = "Too many wrong tokens from this address in a minute \
    (`limits.failed_auth_per_minute`; a correct token is never refused), or too many \
    connections from it (`limits.max_connections_per_ip`): `Retry-After` says when to try again";
const BAD_SESSION_ID: &str = "The path's id is neither a uuid nor a session number (1 to 255)";
const BAD_UUID: &str = "The path's id is not a uuid";

/// Writes onto `doc` (the derived document) what its types cannot say; see the module's doc.
pub(super) fn apply(doc: &mut Value, cfg: &Config) {
    add_query_token(doc);
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for op in item.values_mut() {
                operation(path, op);
            }
        }
    }
    let create = &mut doc["paths"]["/api/sessions"]["post"];
    create["requestBody"]["content"]["application/json"]["schema"] = create_body(cfg);
    if let Some(responses) = create["responses"].as_object_mut() {
        add(
            responses,
            "404",
            "The cwd is no directory on this host, or the program to run (the assistant's, or \
             cmd's) is not installed",
        );
        if !cfg.session.own_commands {
            add(
                responses,
                "403",
                "`cmd` given while `[session] own_commands` is off",
            );
        }
    }
    doc["paths"]["/api/sessions/{id}"]["patch"]["requestBody"]["content"]["application/json"]
        ["schema"] = json!({
        "type": "object",
        "required": ["name"],
        "additionalProperties": false,
        "properties": {"name": {
            "type": "string",
            "pattern": name_pattern(cfg.limits.max_name_chars),
            "description": format!(
                "The new name, trimmed: at most {} letters, digits, spaces, '-' and '_'; \
                 empty clears it", cfg.limits.max_name_chars),
        }},
    });
    let schemas = &mut doc["components"]["schemas"];
    schemas["StateReport"]["properties"]["reason"] = json!({
        "type": ["string", "null"],
        "pattern": format!("^{SPACE}*[^\\u0000-\\u001F\\u007F-\\u009F]{{0,200}}{SPACE}*$"),
        "description": "Why, for people: trimmed, at most 200 characters, none a control character",
    });
    schemas["ShareRequest"]["properties"]["ttl"]["maximum"] = json!(365 * 24 * 3600);
    token_request(doc);
}

/// `POST /api/tokens`'s body exactly: a name of 1 to 64 characters after trimming (none a
/// control character), at least one scope by its exact name, `expiresIn` 1 to ten years.
fn token_request(doc: &mut Value) {
    let schema = &mut doc["components"]["schemas"]["TokenRequest"];
    schema["properties"]["name"] = json!({
        "type": "string",
        "pattern": token_name_pattern(),
        "description": "Trimmed: 1 to 64 characters, none a control character; unique among \
            live tokens (409)",
    });
    schema["properties"]["scopes"] = json!({
        "type": "array",
        "minItems": 1,
        "items": {"type": "string", "enum": super::tokens::SCOPE_NAMES},
        "description": "view, write (implies view), exec, admin (implies all)",
    });
    schema["properties"]["expiresIn"] = json!({
        "type": ["integer", "null"],
        "minimum": 1,
        "maximum": crate::auth::tokens::MAX_EXPIRES_IN_SECS,
        "description": "Seconds until it stops working; none: until revoked",
    });
    let revoke = &mut doc["paths"]["/api/tokens/{token}"]["delete"]["parameters"];
    if let Some(param) = revoke.as_array_mut().and_then(|ps| ps.first_mut()) {
        param["schema"] = json!({"type": "string", "pattern": "^[0-9a-f]{16}$"});
    }
}

/// A token's name as [`crate::auth::tokens::check_name`] takes it.
fn token_name_pattern() -> String {
    // A character that is neither trimmed nor a control character, and one that is no control.
    let spaces = SPACE.trim_start_matches('[').trim_end_matches(']');
    let solid = format!("[^{spaces}\\u0000-\\u001F\\u007F-\\u009F]");
    let inner = "[^\\u0000-\\u001F\\u007F-\\u009F]";
    format!("^{SPACE}*({solid}|{solid}{inner}{{0,62}}{solid}){SPACE}*$")
}

/// The query token's other name, `access_token`, beside `token`.
fn add_query_token(doc: &mut Value) {
    doc["components"]["securitySchemes"]["access_token"] =
        json!({"type": "apiKey", "in": "query", "name": "access_token"});
    if let Some(security) = doc["security"].as_array_mut() {
        security.push(json!({"access_token": []}));
    }
}

/// One operation: its parameters' real types and the statuses the guard and the path add.
fn operation(path: &str, op: &mut Value) {
    // A public operation says so (`security: [{}]`); the others are the guard's.
    let public = op["security"]
        .as_array()
        .is_some_and(|s| s.iter().all(|r| r.as_object().is_some_and(Map::is_empty)));
    let has_body = op.get("requestBody").is_some();
    let mut bad_id = None;
    let params = op.get_mut("parameters").and_then(Value::as_array_mut);
    for param in params.into_iter().flatten() {
        let (name, place) = (
            param["name"].as_str().unwrap_or_default().to_owned(),
            param["in"].as_str().unwrap_or_default().to_owned(),
        );
        match (place.as_str(), name.as_str()) {
            ("path", "id") if path.starts_with("/api/recordings/") => {
                param["schema"] = json!({"type": "string", "pattern": path_uuid()});
                bad_id = Some(BAD_UUID);
            }
            ("path", "id") => {
                param["schema"] = json!({"type": "string", "pattern": session_id()});
                bad_id = Some(BAD_SESSION_ID);
            }
            ("query", "uuid") => {
                param["schema"] = json!({"type": "string", "pattern": any_uuid()});
            }
            ("query", "tail") => {
                param["schema"] = json!({"type": "integer", "minimum": 0, "maximum": U64_MAX});
            }
            ("query", "since" | "until") => {
                param["schema"] =
                    json!({"type": "string", "pattern": crate::audit::INSTANT_PATTERN});
            }
            ("query", "limit") if path == "/api/audit" => {
                param["schema"] = json!({
                    "type": "integer", "minimum": 1, "maximum": crate::audit::MAX_LIMIT,
                });
            }
            ("query", "session") => {
                param["schema"] = json!({"type": "string", "pattern": any_uuid()});
            }
            ("query", "from") => {
                param["schema"] = json!({"type": "string", "enum": ["claude", "codex", "gemini"]});
            }
            _ => {}
        }
    }
    let stream = op
        .get("parameters")
        .and_then(Value::as_array)
        .is_some_and(|ps| ps.iter().any(|p| p["name"] == "tail"));
    if stream {
        if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
            params.push(json!({
                "name": "lastEventId", "in": "query", "required": false,
                "description": "Resume after this event id (as the `Last-Event-ID` header)",
                "schema": {"type": "integer", "minimum": 0, "maximum": U64_MAX},
            }));
        }
    }
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    // A stream's schema is each event's, as Schemathesis reads an OpenAPI 3.1 stream.
    for reply in responses.values_mut() {
        if let Some(events) = reply.pointer_mut("/content/text~1event-stream") {
            events["schema"] = json!({
                "type": "object",
                "description": "One server-sent event",
                "properties": {
                    "event": {"type": "string"}, "data": {"type": "string"},
                    "id": {"type": "string"}, "retry": {"type": "integer"},
                },
            });
        }
    }
    if let Some(why) = bad_id {
        add(responses, "400", why);
        if why == BAD_SESSION_ID && !responses.contains_key("404") {
            add(responses, "404", "No such session");
        }
    }
    if stream {
        add(
            responses,
            "400",
            "`tail` or `lastEventId` is not a non-negative integer",
        );
    }
    if has_body {
        add(
            responses,
            "408",
            "The body did not arrive within `limits.header_timeout`",
        );
        if !responses.contains_key("413") {
            add(responses, "413", "Body over 64 KiB");
        }
    }
    if !public {
        add(responses, "401", UNAUTHORIZED);
        add(responses, "403", FORBIDDEN);
        add(responses, "429", TOO_MANY);
    }
}

/// `POST /api/sessions`'s body as this config takes it: a configured assistant, or (when
/// `[session] own_commands` allows it) a command of the client's choosing, which an assistant
/// may lend its name and environment to.
fn create_body(cfg: &Config) -> Value {
    let keys: Vec<&str> = cfg.assistants.keys().map(String::as_str).collect();
    let mut lenders: Vec<Value> = keys.iter().map(|k| json!(k)).collect();
    if !keys.contains(&CUSTOM_ASSISTANT) {
        lenders.push(json!(CUSTOM_ASSISTANT));
    }
    lenders.push(Value::Null);
    let common = |assistant: Value| {
        json!({
            "assistant": assistant,
            "name": {
                "type": ["string", "null"],
                "pattern": name_pattern(cfg.limits.max_name_chars),
                "description": format!(
                    "Trimmed: at most {} letters, digits, spaces, '-' and '_'",
                    cfg.limits.max_name_chars),
            },
            "cwd": {
                "type": ["string", "null"],
                "description": "The working directory (the daemon's own without it): 404 when it \
                    is no directory on this host",
            },
            "id": {
                "type": ["string", "null"],
                "pattern": any_uuid(),
                "description": "The uuid the session gets (also `uuid`, or `?uuid=`): 409 when a \
                    session has it or the query names another",
            },
            "cols": {"type": ["integer", "null"], "minimum": 1, "maximum": U64_MAX,
                     "description": "Initial width, columns (clamped to the size policy)"},
            "rows": {"type": ["integer", "null"], "minimum": 1, "maximum": U64_MAX,
                     "description": "Initial height, rows (clamped to the size policy)"},
        })
    };
    let mut by_assistant = common(json!({"type": "string", "enum": keys}));
    by_assistant["cmd"] = json!({"type": "null"});
    let mut shapes = vec![json!({
        "type": "object",
        "title": "An assistant",
        "description": "Runs a configured assistant (GET /api/assistants): 404 when its program \
            is not installed",
        "required": ["assistant"],
        "additionalProperties": false,
        "properties": by_assistant,
    })];
    if cfg.session.own_commands {
        let mut by_command = common(json!({"type": ["string", "null"], "enum": lenders}));
        by_command["cmd"] = json!({
            "type": "array",
            "minItems": 1,
            "prefixItems": [{"type": "string", "minLength": 1, "pattern": "^[^\\u0000]*$"}],
            "items": {"type": "string", "pattern": "^[^\\u0000]*$"},
            "description": "The program and its arguments, never run through a shell (also \
                `command`): 404 when the program is not found (a name without `/` is looked up \
                in the daemon's PATH)",
        });
        shapes.push(json!({
            "type": "object",
            "title": "A command",
            "description": "Runs the client's own command; `assistant` (a configured one, or \
                `custom`) lends it a name and environment",
            "required": ["cmd"],
            "additionalProperties": false,
            "properties": by_command,
        }));
    }
    json!({"description": "`POST /api/sessions` body", "oneOf": shapes})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        regex::Regex::new(pattern).unwrap().is_match(text)
    }

    /// The patterns say exactly what the parsers take, on the edges.
    #[test]
    fn the_patterns_are_the_parsers() {
        let registry_takes = |id: &str| crate::registry::parse_session_id(id).is_ok();
        let uuid = uuid::Uuid::new_v4();
        let ids = [
            "0", "00", "000", "1", "01", "001", "9", "09", "10", "99", "099", "100", "199", "200",
            "249", "250", "255", "256", "260", "300", "999", "0255", "1000", "-1", "1.5", "",
            "xyz", "+1",
        ];
        let uuids = [
            uuid.hyphenated().to_string(),
            uuid.simple().to_string(),
            uuid.hyphenated().to_string().to_uppercase(),
            uuid.braced().to_string(),
            uuid.urn().to_string(),
            format!("{}0", uuid.simple()),
            uuid.simple().to_string()[1..].to_owned(),
        ];
        for id in ids
            .iter()
            .map(|s| s.to_string())
            .chain(uuids.iter().cloned())
        {
            let path_form = !id.starts_with('{') && !id.starts_with("urn:");
            assert_eq!(
                matches(&session_id(), &id),
                registry_takes(&id) && path_form,
                "session id {id:?}"
            );
            assert_eq!(
                matches(&any_uuid(), &id),
                uuid::Uuid::parse_str(&id).is_ok(),
                "uuid {id:?}"
            );
        }
        for name in [
            "",
            "ok name",
            " padded\t",
            "a-b_c",
            "bad/name",
            "é",
            &"x".repeat(33),
        ] {
            assert_eq!(
                matches(&name_pattern(32), name),
                crate::session::validate_name(name, 32).is_ok(),
                "name {name:?}"
            );
        }
        let long = "y".repeat(64);
        let longer = "y".repeat(65);
        for name in [
            "", " ", "ci", " ci ", "a b", "\tci\n", "a\u{7}b", "é", &long, &longer, "\u{85}x",
            "x\u{a0}y", "\u{3000}",
        ] {
            assert_eq!(
                matches(&token_name_pattern(), name),
                crate::auth::tokens::check_name(name).is_ok(),
                "token name {name:?}"
            );
        }
    }
}
