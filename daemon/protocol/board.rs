//! The board's wire (`GET /ws/board`, docs/protocol.md section 11a): a card per session, the
//! messages that carry a card's changes, and the client's `visible` and `reply` messages, as a
//! pure codec.
//!
//! A card is sent whole once (`cards`, or a `card` for a session that appears later); after
//! that a `card` message carries only the fields that changed ([`changes`]), and its `rows` only
//! the rows that changed, by index. [`apply`] is the client's side of it, used by the tests and
//! the fuzz target to hold `changes` to "old plus the change is the new card".

use serde::Serialize;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::Closing;
use crate::attention::state::{Choice, State};

/// Most ids one `visible` message may name.
pub const MAX_VISIBLE: usize = 1024;
/// Most bytes of keys one `reply` may carry (a typed line and its Enter).
pub const MAX_REPLY_BYTES: usize = 4096;
/// Longest error message the codec writes, bytes.
pub const MAX_ERROR_CHARS: usize = 200;

/// A session as the board shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Card {
    /// The session's uuid.
    pub id: Uuid,
    /// Its number (none past 255 sessions).
    pub num: Option<u8>,
    /// Its name, possibly empty.
    pub name: String,
    /// Its assistant's key in the config.
    pub assistant: String,
    /// Its assistant's display name.
    pub assistant_name: String,
    /// Working, waiting, idle or exited.
    pub state: State,
    /// When it entered that state, milliseconds since the Unix epoch.
    pub since: u64,
    /// Why, for people.
    pub reason: String,
    /// The quick replies a waiting screen offers.
    pub choices: Vec<Choice>,
    /// Whether this connection may type into it (a reply is refused otherwise).
    pub may_type: bool,
    /// Whether its program runs.
    pub alive: bool,
    /// Who watches it, by name.
    pub people: Vec<String>,
    /// Who created it (a user's name), when known.
    pub created_by: Option<String>,
    /// Its visible rows as plain text, without trailing blanks (the miniature).
    pub rows: Vec<String>,
    /// The cursor, `[row, column]` from 0.
    pub cursor: (u16, u16),
}

/// What a board client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoardRequest {
    /// Only these cards are on the client's screen: only they get row updates.
    Visible(Vec<Uuid>),
    /// Type `keys` into the session (a quick reply).
    Reply {
        /// The session.
        id: Uuid,
        /// What to type, as a terminal sends it (Enter is `\r`).
        keys: String,
    },
}

/// A message the codec could not read: answered with an `error`, the connection stays up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    /// What was wrong, for people.
    pub message: String,
}

impl BadRequest {
    fn new(message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if message.len() > MAX_ERROR_CHARS {
            let mut end = MAX_ERROR_CHARS;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        BadRequest { message }
    }
}

/// The close code and reason for `why`: the browser dialect's (docs/protocol.md section 8).
pub fn close(why: Closing<'_>) -> (u16, &str) {
    super::swe::close(why)
}

/// Reads a binary message: the board has none.
pub fn decode_binary(_: &[u8]) -> Result<BoardRequest, BadRequest> {
    Err(BadRequest::new(
        "binary messages are not part of the board's protocol",
    ))
}

/// Reads a text message.
pub fn decode_text(text: &str) -> Result<BoardRequest, BadRequest> {
    let v: Value = serde_json::from_str(text).map_err(|_| BadRequest::new("not a JSON message"))?;
    let Value::Object(m) = v else {
        return Err(BadRequest::new("a message is a JSON object"));
    };
    let uuid = |v: &Value| v.as_str().and_then(|s| Uuid::parse_str(s).ok());
    match m.get("type").and_then(Value::as_str) {
        Some("visible") => {
            let Some(ids) = m.get("ids").and_then(Value::as_array) else {
                return Err(BadRequest::new("visible needs ids, a list of session ids"));
            };
            if ids.len() > MAX_VISIBLE {
                return Err(BadRequest::new(format!(
                    "visible names at most {MAX_VISIBLE} ids"
                )));
            }
            let ids = ids
                .iter()
                .map(|v| uuid(v).ok_or(()))
                .collect::<Result<Vec<_>, ()>>()
                .map_err(|()| BadRequest::new("visible ids are session uuids, as strings"))?;
            Ok(BoardRequest::Visible(ids))
        }
        Some("reply") => {
            let Some(id) = m.get("id").and_then(uuid) else {
                return Err(BadRequest::new("reply needs id, a session uuid"));
            };
            let keys = match m.get("keys").and_then(Value::as_str) {
                Some(k) if !k.is_empty() && k.len() <= MAX_REPLY_BYTES => k.to_owned(),
                _ => {
                    return Err(BadRequest::new(format!(
                        "reply needs keys, a string of 1 to {MAX_REPLY_BYTES} bytes"
                    )))
                }
            };
            Ok(BoardRequest::Reply { id, keys })
        }
        Some(other) => Err(BadRequest::new(format!(
            "unknown message type {:?}",
            other.chars().take(32).collect::<String>()
        ))),
        None => Err(BadRequest::new("a message needs a type")),
    }
}

/// `{"type":"cards","cards":[…]}`: every card, whole.
pub fn cards(all: &[Card]) -> String {
    json!({"type": "cards", "cards": all}).to_string()
}

/// `{"type":"card",…}` with every field: a card the client has not seen.
pub fn whole(card: &Card) -> String {
    let mut v = serde_json::to_value(card).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("type".into(), json!("card"));
    }
    v.to_string()
}

/// `{"type":"gone","id":…}`: the session has ended.
pub fn gone(id: Uuid) -> String {
    json!({"type": "gone", "id": id}).to_string()
}

/// `{"type":"error","message":…,"code":…}`, about session `id` if given.
pub fn error(code: &str, message: &str, id: Option<Uuid>) -> String {
    let mut m = Map::new();
    m.insert("type".into(), json!("error"));
    m.insert("code".into(), json!(code));
    m.insert("message".into(), json!(message));
    if let Some(id) = id {
        m.insert("id".into(), json!(id));
    }
    Value::Object(m).to_string()
}

/// The `card` message that turns `old` into `new` (same id): only the fields that differ,
/// and, when `rows` is true, only the rows that differ, as `{"rows":{"index":"text"}}` with
/// `height` when the number of rows changed. `None` when nothing is to be said.
pub fn changes(old: &Card, new: &Card, rows: bool) -> Option<String> {
    let mut m = Map::new();
    let mut put = |k: &str, differs: bool, v: Value| {
        if differs {
            m.insert(k.into(), v);
        }
    };
    put("num", old.num != new.num, json!(new.num));
    put("name", old.name != new.name, json!(new.name));
    put(
        "assistant",
        old.assistant != new.assistant,
        json!(new.assistant),
    );
    put(
        "assistantName",
        old.assistant_name != new.assistant_name,
        json!(new.assistant_name),
    );
    put("state", old.state != new.state, json!(new.state));
    put("since", old.since != new.since, json!(new.since));
    put("reason", old.reason != new.reason, json!(new.reason));
    put("choices", old.choices != new.choices, json!(new.choices));
    put("mayType", old.may_type != new.may_type, json!(new.may_type));
    put("alive", old.alive != new.alive, json!(new.alive));
    put("people", old.people != new.people, json!(new.people));
    put(
        "createdBy",
        old.created_by != new.created_by,
        json!(new.created_by),
    );
    if rows {
        put("cursor", old.cursor != new.cursor, json!(new.cursor));
        let changed: Map<String, Value> = new
            .rows
            .iter()
            .enumerate()
            .filter(|(i, r)| old.rows.get(*i) != Some(*r))
            .map(|(i, r)| (i.to_string(), json!(r)))
            .collect();
        put("rows", !changed.is_empty(), Value::Object(changed));
        put(
            "height",
            old.rows.len() != new.rows.len(),
            json!(new.rows.len()),
        );
    }
    if m.is_empty() {
        return None;
    }
    m.insert("type".into(), json!("card"));
    m.insert("id".into(), json!(new.id));
    Some(Value::Object(m).to_string())
}

/// Why a `card` message could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad card change: {0}")]
pub struct BadChange(pub String);

/// Applies a `card` message to `card`, as a client does: the inverse of [`changes`].
pub fn apply(card: &mut Card, message: &str) -> Result<(), BadChange> {
    let bad = |what: &str| BadChange(what.to_owned());
    let v: Value = serde_json::from_str(message).map_err(|e| BadChange(e.to_string()))?;
    let m = v.as_object().ok_or_else(|| bad("not an object"))?;
    if m.get("type") != Some(&json!("card")) || m.get("id") != Some(&json!(card.id)) {
        return Err(bad("not a card message for this card"));
    }
    macro_rules! set {
        ($key:literal, $field:expr) => {
            if let Some(v) = m.get($key) {
                $field = serde_json::from_value(v.clone()).map_err(|e| BadChange(e.to_string()))?;
            }
        };
    }
    set!("num", card.num);
    set!("name", card.name);
    set!("assistant", card.assistant);
    set!("assistantName", card.assistant_name);
    set!("state", card.state);
    set!("since", card.since);
    set!("reason", card.reason);
    set!("choices", card.choices);
    set!("mayType", card.may_type);
    set!("alive", card.alive);
    set!("people", card.people);
    set!("createdBy", card.created_by);
    set!("cursor", card.cursor);
    if let Some(h) = m.get("height") {
        let h = h.as_u64().ok_or_else(|| bad("height"))?;
        card.rows
            .resize(usize::try_from(h).unwrap_or(0), String::new());
    }
    if let Some(rows) = m.get("rows") {
        let rows = rows.as_object().ok_or_else(|| bad("rows"))?;
        for (i, text) in rows {
            let i: usize = i.parse().map_err(|_| bad("row index"))?;
            let text = text.as_str().ok_or_else(|| bad("row text"))?;
            let row = card.rows.get_mut(i).ok_or_else(|| bad("row past height"))?;
            *row = text.to_owned();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> Card {
        Card {
            id: Uuid::from_u128(7),
            num: Some(3),
            name: "review".into(),
            assistant: "shell".into(),
            assistant_name: "Shell".into(),
            state: State::Working,
            since: 1,
            reason: String::new(),
            choices: vec![],
            may_type: true,
            alive: true,
            people: vec![],
            created_by: Some("ann".into()),
            rows: vec!["$ ls".into(), String::new()],
            cursor: (1, 0),
        }
    }

    #[test]
    fn a_change_carries_only_what_changed() {
        let old = card();
        let mut new = old.clone();
        new.state = State::Waiting;
        new.rows[1] = "Do you want to proceed?".into();
        let msg = changes(&old, &new, false).expect("a change");
        let v: Value = serde_json::from_str(&msg).expect("json");
        assert_eq!(v, json!({"type": "card", "id": old.id, "state": "waiting"}));
        let msg = changes(&old, &new, true).expect("a change");
        let v: Value = serde_json::from_str(&msg).expect("json");
        assert_eq!(v["rows"], json!({"1": "Do you want to proceed?"}));
        let mut applied = old.clone();
        apply(&mut applied, &msg).expect("applies");
        assert_eq!(applied, new);
        assert_eq!(changes(&new, &new, true), None);
    }

    #[test]
    fn bad_messages_are_errors() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"type":"visible"}"#,
            r#"{"type":"visible","ids":[1]}"#,
            r#"{"type":"reply","id":"x","keys":"1"}"#,
            r#"{"type":"reply","id":"00000000-0000-0000-0000-000000000007","keys":""}"#,
            r#"{"type":"dance"}"#,
        ] {
            assert!(decode_text(bad).is_err(), "{bad}");
        }
        let id = Uuid::from_u128(7);
        assert_eq!(
            decode_text(&json!({"type": "reply", "id": id, "keys": "1"}).to_string()),
            Ok(BoardRequest::Reply {
                id,
                keys: "1".into()
            })
        );
    }
}
