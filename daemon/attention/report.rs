//! What an agent reports about its session (`POST /api/sessions/{id}/state`): a plain
//! `{"state","reason"}`, or an agent's own hook JSON (`?from=claude|codex|gemini`) read the way
//! each agent means it; and the few fields of a hook's JSON worth sending (`ptyhub notify`
//! strips the rest, so a tool call that carries a whole file stays small).

use serde_json::{Map, Value};

use super::state::{reason_from, State, MAX_REASON_CHARS};

/// A state an agent reported, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `working`, `waiting` or `idle`.
    pub state: State,
    /// Why, for people (may be empty).
    pub reason: String,
}

/// The agents whose hook JSON the daemon reads (`?from=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code's command hooks (the JSON on their stdin).
    Claude,
    /// Codex's `notify` (the JSON as its last argument) and its hooks (as Claude's).
    Codex,
    /// Gemini CLI's command hooks.
    Gemini,
}

impl Agent {
    /// Every agent, as `?from=` spells it.
    pub const NAMES: [&'static str; 3] = ["claude", "codex", "gemini"];

    /// From `?from=`.
    pub fn parse(name: &str) -> Option<Agent> {
        match name {
            "claude" => Some(Agent::Claude),
            "codex" => Some(Agent::Codex),
            "gemini" => Some(Agent::Gemini),
            _ => None,
        }
    }

    /// As `?from=` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    /// How its reasons name it.
    fn brand(self) -> &'static str {
        match self {
            Agent::Claude => "Claude",
            Agent::Codex => "Codex",
            Agent::Gemini => "Gemini",
        }
    }
}

/// Why a report was refused (400), for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not JSON, or not an object of the right fields.
    #[error("bad report: {0}")]
    Body(String),
    /// A state there is no such thing as, or one only the daemon sets.
    #[error("unknown state {0:?}: report one of working, waiting, idle (exited is known from the program's exit)")]
    State(String),
    /// A reason longer than allowed.
    #[error("the reason is longer than {MAX_REASON_CHARS} characters")]
    ReasonTooLong,
    /// A reason with control characters (a terminal escape, a newline).
    #[error("the reason holds control characters (newlines, escapes): send one line of text")]
    ReasonControl,
}

/// Reads a plain report: `{"state": "waiting", "reason": "…"}` (`reason` optional, nothing
/// else).
pub fn plain(body: &[u8]) -> Result<Report, Refused> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| Refused::Body(format!("invalid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(Refused::Body(
            "expected a JSON object {\"state\": \"…\", \"reason\": \"…\"}".to_owned(),
        ));
    };
    if let Some(other) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "state" | "reason"))
    {
        return Err(Refused::Body(format!(
            "unknown field {other:?}: a report has state and reason"
        )));
    }
    let state = match obj.get("state") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(Refused::Body("state must be a string".to_owned())),
        None => return Err(Refused::Body("state is missing".to_owned())),
    };
    let state = match State::parse(state) {
        Some(s @ (State::Working | State::Waiting | State::Idle)) => s,
        _ => return Err(Refused::State(state.chars().take(40).collect())),
    };
    let reason = match obj.get("reason") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(r)) => r.trim().to_owned(),
        Some(_) => return Err(Refused::Body("reason must be a string".to_owned())),
    };
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(Refused::ReasonTooLong);
    }
    if reason.chars().any(char::is_control) {
        return Err(Refused::ReasonControl);
    }
    Ok(Report { state, reason })
}

/// Reads `agent`'s hook JSON: the state it means, or `None` for an event that says nothing
/// about it (the daemon answers 204 and changes nothing).
pub fn from_agent(agent: Agent, body: &[u8]) -> Result<Option<Report>, Refused> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| Refused::Body(format!("invalid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(Refused::Body("expected the hook's JSON object".to_owned()));
    };
    // No hook event at all: a plain report (what `ptyhub notify --state` sends), or refused
    // like one; so no body is taken for a hook's that is neither.
    let codex_notify = agent == Agent::Codex && obj.contains_key("type");
    if !codex_notify && !obj.contains_key("hook_event_name") {
        return plain(body).map(Some);
    }
    let brand = agent.brand();
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or_default();
    // Codex's `notify`: one kind of event, the end of a turn.
    if agent == Agent::Codex && obj.contains_key("type") {
        return Ok(match text("type") {
            "agent-turn-complete" => {
                Some(report(State::Idle, format!("{brand} finished its turn")))
            }
            _ => None,
        });
    }
    let tool = text("tool_name");
    let event = text("hook_event_name");
    let found = match (agent, event) {
        (Agent::Gemini, "BeforeAgent") => report(State::Working, "prompt submitted".to_owned()),
        (Agent::Gemini, "BeforeTool" | "AfterTool") => report(State::Working, running(tool, &obj)),
        (Agent::Gemini, "AfterAgent") => report(State::Idle, format!("{brand} finished its turn")),
        (Agent::Gemini, "Notification") => match text("notification_type") {
            "ToolPermission" => report(State::Waiting, asked(brand, text("message"))),
            _ => return Ok(None),
        },
        (Agent::Gemini, _) => return Ok(None),
        (_, "UserPromptSubmit") => report(State::Working, "prompt submitted".to_owned()),
        (_, "PreToolUse") => match tool {
            "AskUserQuestion" => report(State::Waiting, format!("{brand} asks a question")),
            "ExitPlanMode" => report(State::Waiting, format!("{brand} asks to approve its plan")),
            _ => report(State::Working, running(tool, &obj)),
        },
        (_, "PostToolUse" | "PostToolUseFailure") => {
            report(State::Working, format!("{} done", tool_name(tool)))
        }
        (_, "PermissionRequest") => report(State::Waiting, wants(brand, tool, &obj)),
        (_, "Notification") => match text("notification_type") {
            "permission_prompt" | "elicitation_dialog" | "elicitation_url_dialog" => {
                report(State::Waiting, asked(brand, text("message")))
            }
            _ => return Ok(None),
        },
        (_, "Stop") => report(State::Idle, format!("{brand} finished its turn")),
        (_, "StopFailure") => {
            let error = text("error");
            let why = if error.is_empty() { "an error" } else { error };
            report(State::Idle, format!("{brand}'s turn ended by {why}"))
        }
        // SessionEnd: the exit watcher knows better; the rest say nothing of the state.
        _ => return Ok(None),
    };
    Ok(Some(found))
}

fn report(state: State, reason: String) -> Report {
    Report {
        state,
        reason: reason_from(&reason),
    }
}

/// What a tool call is about: its command, file or description.
fn detail(obj: &Map<String, Value>) -> Option<&str> {
    let input = obj.get("tool_input")?;
    ["command", "file_path", "description", "url", "pattern"]
        .iter()
        .find_map(|k| input.get(k).and_then(Value::as_str))
        .filter(|s| !s.trim().is_empty())
}

fn tool_name(tool: &str) -> &str {
    if tool.is_empty() {
        "a tool"
    } else {
        tool
    }
}

/// "running Bash: cargo test".
fn running(tool: &str, obj: &Map<String, Value>) -> String {
    match detail(obj) {
        Some(d) => format!("running {}: {d}", tool_name(tool)),
        None => format!("running {}", tool_name(tool)),
    }
}

/// "Claude wants to run: cargo test", "Claude wants to edit: src/main.rs".
fn wants(brand: &str, tool: &str, obj: &Map<String, Value>) -> String {
    let verb = match tool {
        "Bash" => "run",
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => "edit",
        "WebFetch" => "fetch",
        "NetworkAccess" => "reach",
        _ => "",
    };
    match (verb, detail(obj)) {
        ("", Some(d)) => format!("{brand} wants to use {}: {d}", tool_name(tool)),
        ("", None) => format!("{brand} wants to use {}", tool_name(tool)),
        (verb, Some(d)) => format!("{brand} wants to {verb}: {d}"),
        (verb, None) => format!("{brand} wants to {verb}"),
    }
}

/// A notification's message, else that the agent asks.
fn asked(brand: &str, message: &str) -> String {
    if message.trim().is_empty() {
        format!("{brand} needs your permission")
    } else {
        message.to_owned()
    }
}

/// Longest string kept of a hook's JSON field by [`essentials`].
const MAX_FIELD_CHARS: usize = 1000;

/// The fields of a hook's JSON the daemon reads, each string cut short: a tool call's input
/// may carry a whole file, which the state needs none of.
pub fn essentials(value: &Value) -> Value {
    const TOP: [&str; 7] = [
        "hook_event_name",
        "tool_name",
        "notification_type",
        "message",
        "error",
        "type",
        "session_id",
    ];
    const INPUT: [&str; 5] = ["command", "file_path", "description", "url", "pattern"];
    let cut = |v: &Value| match v {
        Value::String(s) => Value::String(s.chars().take(MAX_FIELD_CHARS).collect()),
        _ => Value::Null,
    };
    let mut out = Map::new();
    for key in TOP {
        if let Some(v) = value.get(key).filter(|v| v.is_string()) {
            out.insert(key.to_owned(), cut(v));
        }
    }
    if let Some(input) = value.get("tool_input") {
        let kept: Map<String, Value> = INPUT
            .iter()
            .filter_map(|k| {
                let v = input.get(k).filter(|v| v.is_string())?;
                Some(((*k).to_owned(), cut(v)))
            })
            .collect();
        out.insert("tool_input".to_owned(), Value::Object(kept));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn agent(agent: Agent, v: Value) -> Option<Report> {
        from_agent(agent, v.to_string().as_bytes()).expect("read")
    }

    #[test]
    fn plain_reports_and_their_refusals() {
        let ok = plain(br#"{"state":"waiting","reason":"needs a password"}"#).unwrap();
        assert_eq!(
            ok,
            Report {
                state: State::Waiting,
                reason: "needs a password".into()
            }
        );
        assert_eq!(plain(br#"{"state":"idle"}"#).unwrap().reason, "");
        let refused = |b: &[u8]| plain(b).unwrap_err().to_string();
        assert!(refused(br#"{"state":"busy"}"#).contains("working, waiting, idle"));
        assert!(refused(br#"{"state":"exited"}"#).contains("unknown state"));
        assert!(refused(b"nope").starts_with("bad report: invalid JSON"));
        assert!(refused(br#"{"state":"idle","extra":1}"#).contains("unknown field"));
        let long = format!(r#"{{"state":"idle","reason":"{}"}}"#, "x".repeat(201));
        assert_eq!(plain(long.as_bytes()), Err(Refused::ReasonTooLong));
        assert_eq!(
            plain(br#"{"state":"idle","reason":"a\nb"}"#),
            Err(Refused::ReasonControl)
        );
        assert_eq!(
            plain(br#"{"state":"idle","reason":"\u001b[2J"}"#),
            Err(Refused::ReasonControl)
        );
    }

    /// The mapping of the research file (Claude's hooks.md, Codex's legacy_notify.rs,
    /// Gemini's hooks reference).
    #[test]
    fn agents_hooks_mean_states() {
        let claude = |v| agent(Agent::Claude, v);
        let r = claude(
            json!({"hook_event_name":"PermissionRequest","tool_name":"Bash",
            "tool_input":{"command":"cargo test","description":"Run the tests"}}),
        )
        .unwrap();
        assert_eq!(r.state, State::Waiting);
        assert_eq!(r.reason, "Claude wants to run: cargo test");
        let r = claude(
            json!({"hook_event_name":"PermissionRequest","tool_name":"Write",
            "tool_input":{"file_path":"/src/a.rs","content":"…"}}),
        )
        .unwrap();
        assert_eq!(r.reason, "Claude wants to edit: /src/a.rs");
        let r = claude(
            json!({"hook_event_name":"Notification","notification_type":"permission_prompt",
            "message":"Claude needs your permission to use Bash"}),
        )
        .unwrap();
        assert_eq!(
            (r.state, r.reason.as_str()),
            (State::Waiting, "Claude needs your permission to use Bash")
        );
        assert_eq!(
            claude(json!({"hook_event_name":"Notification","notification_type":"idle_prompt"})),
            None
        );
        assert_eq!(
            claude(json!({"hook_event_name":"PreToolUse","tool_name":"AskUserQuestion"}))
                .unwrap()
                .state,
            State::Waiting
        );
        let r = claude(json!({"hook_event_name":"PreToolUse","tool_name":"Bash",
            "tool_input":{"command":"ls"}}))
        .unwrap();
        assert_eq!(
            (r.state, r.reason.as_str()),
            (State::Working, "running Bash: ls")
        );
        for e in ["UserPromptSubmit", "PostToolUse"] {
            assert_eq!(
                claude(json!({ "hook_event_name": e })).unwrap().state,
                State::Working
            );
        }
        let r = claude(json!({"hook_event_name":"Stop"})).unwrap();
        assert_eq!(
            (r.state, r.reason.as_str()),
            (State::Idle, "Claude finished its turn")
        );
        let r = claude(json!({"hook_event_name":"StopFailure","error":"rate_limit"})).unwrap();
        assert_eq!(r.reason, "Claude's turn ended by rate_limit");
        assert_eq!(claude(json!({"hook_event_name":"SessionEnd"})), None);
        assert_eq!(claude(json!({"hook_event_name":"SomethingNew"})), None);

        let codex = |v| agent(Agent::Codex, v);
        let r = codex(
            json!({"type":"agent-turn-complete","thread-id":"t","last-assistant-message":"done"}),
        )
        .unwrap();
        assert_eq!(
            (r.state, r.reason.as_str()),
            (State::Idle, "Codex finished its turn")
        );
        let r = codex(
            json!({"hook_event_name":"PermissionRequest","tool_name":"Bash",
            "tool_input":{"command":"rm -rf target"}}),
        )
        .unwrap();
        assert_eq!(r.reason, "Codex wants to run: rm -rf target");

        let gemini = |v| agent(Agent::Gemini, v);
        assert_eq!(
            gemini(json!({"hook_event_name":"BeforeAgent","prompt":"hi"}))
                .unwrap()
                .state,
            State::Working
        );
        let r = gemini(
            json!({"hook_event_name":"Notification","notification_type":"ToolPermission",
            "message":"Tool Shell requires execution"}),
        )
        .unwrap();
        assert_eq!(
            (r.state, r.reason.as_str()),
            (State::Waiting, "Tool Shell requires execution")
        );
        assert_eq!(
            gemini(json!({"hook_event_name":"AfterAgent"}))
                .unwrap()
                .state,
            State::Idle
        );
        assert_eq!(gemini(json!({"hook_event_name":"AfterModel"})), None);

        assert!(from_agent(Agent::Claude, b"[1]").is_err());
    }

    #[test]
    fn essentials_keep_what_the_state_needs_and_little_else() {
        let big = "x".repeat(100_000);
        let hook = json!({"hook_event_name":"PreToolUse","tool_name":"Write","cwd":"/src",
            "transcript_path":"/t","tool_input":{"file_path":"/src/a.rs","content":big}});
        let kept = essentials(&hook);
        assert_eq!(
            kept,
            json!({"hook_event_name":"PreToolUse","tool_name":"Write",
                "tool_input":{"file_path":"/src/a.rs"}})
        );
        let long = essentials(&json!({ "message": big }));
        assert_eq!(long["message"].as_str().unwrap().len(), MAX_FIELD_CHARS);
    }
}
