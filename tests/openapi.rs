//! The OpenAPI document at `/api/openapi.json` against the real API: every documented
//! operation is called, and each reply's status must be documented and its body valid against
//! the document's schema (jsonschema), with no field the schema does not declare.

use crate::common;

use std::collections::BTreeSet;

use common::Daemon;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "openapi-token-0123456789abcdef";

/// Checks replies against the document and remembers which operations answered.
struct Checker {
    doc: Value,
    http: reqwest::Client,
    base: String,
    /// `METHOD /path` of each operation whose success reply was checked.
    covered: BTreeSet<String>,
}

impl Checker {
    /// Calls `method path` (the document's `template` with values filled in) with the token
    /// and `body`; checks the reply; returns its JSON (or `Value::Null`).
    async fn call(
        &mut self,
        method: Method,
        template: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = resp.text().await.unwrap();
        let what = format!("{method} {path} → {status}");
        let op = &self.doc["paths"][template][method.as_str().to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in the document");
        let reply = &op["responses"][status.as_str()];
        assert!(reply.is_object(), "{what}: status not documented: {text}");
        let value = match reply["content"].as_object() {
            None => {
                assert!(text.is_empty(), "{what}: a body where none is documented");
                Value::Null
            }
            Some(content) => {
                let (media, spec) = content.iter().next().unwrap();
                let got = content_type.unwrap_or_default();
                assert!(
                    got.starts_with(media.as_str()),
                    "{what}: {got} is not {media}"
                );
                if media == "application/json" {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    self.validate(&spec["schema"], &value, &what);
                    value
                } else {
                    Value::Null
                }
            }
        };
        if status.is_success() {
            self.covered
                .insert(format!("{} {template}", method.as_str()));
        }
        (status, value)
    }

    /// `value` valid against `schema` (whose `$ref`s point into the document), and every
    /// field in it declared by the schema.
    fn validate(&self, schema: &Value, value: &Value, what: &str) {
        let mut root = schema.clone();
        root["components"] = self.doc["components"].clone();
        let validator = jsonschema::validator_for(&root)
            .unwrap_or_else(|e| panic!("{what}: the document's schema does not compile: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:#?}\n{value:#}");
        let mut undeclared = Vec::new();
        self.undeclared(schema, value, "", &mut undeclared);
        assert!(
            undeclared.is_empty(),
            "{what}: fields the document does not declare: {undeclared:?}"
        );
    }

    fn resolve<'a>(&'a self, mut schema: &'a Value) -> &'a Value {
        while let Some(r) = schema["$ref"].as_str() {
            let pointer = r.strip_prefix('#').expect("local $ref");
            schema = self.doc.pointer(pointer).expect("$ref resolves");
        }
        schema
    }

    /// The properties an object schema declares, through `$ref` and `allOf`.
    fn properties(&self, schema: &Value, into: &mut serde_json::Map<String, Value>) {
        let schema = self.resolve(schema);
        if let Some(p) = schema["properties"].as_object() {
            into.extend(p.clone());
        }
        for part in schema["allOf"].as_array().into_iter().flatten() {
            self.properties(part, into);
        }
    }

    /// Paths of the fields in `value` that `schema` does not declare.
    fn undeclared(&self, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
        let schema = self.resolve(schema);
        let variants = schema["oneOf"].as_array().or(schema["anyOf"].as_array());
        if let Some(variants) = variants {
            // The variant that explains the most.
            let best = variants
                .iter()
                .map(|v| {
                    let mut found = Vec::new();
                    self.undeclared(v, value, at, &mut found);
                    found
                })
                .min_by_key(Vec::len)
                .unwrap_or_default();
            out.extend(best);
            return;
        }
        match value {
            Value::Object(map) => {
                let mut declared = serde_json::Map::new();
                self.properties(schema, &mut declared);
                if declared.is_empty() && schema["type"] != "null" {
                    return; // a free-form object (this document itself)
                }
                for (k, v) in map {
                    match declared.get(k) {
                        Some(s) => self.undeclared(s, v, &format!("{at}.{k}"), out),
                        None => out.push(format!("{at}.{k}")),
                    }
                }
            }
            Value::Array(items) if schema.get("items").is_some() => {
                for (i, v) in items.iter().enumerate() {
                    self.undeclared(&schema["items"], v, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn every_operation_answers_as_the_document_says() {
    // A peer that refuses connections, so the merged list has an unreachable host.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let d = Daemon::in_process_auth(
        &common::config(&format!(
            "[cluster]\nhost = \"doc\"\npeers = [{closed:?}]\n"
        )),
        Some(TOKEN),
    );
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    // Public: no token needed, like /api/version.
    let resp = http.get(d.http("/api/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let doc: Value = resp.json().await.unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let version = http.get(d.http("/api/version")).send().await.unwrap();
    assert_eq!(version.status(), StatusCode::OK);

    let mut c = Checker {
        doc,
        http,
        base: d.http(""),
        covered: BTreeSet::new(),
    };
    c.call(Method::GET, "/api/version", "/api/version", None)
        .await;
    c.call(Method::GET, "/api/openapi.json", "/api/openapi.json", None)
        .await;
    c.call(Method::GET, "/api/assistants", "/api/assistants", None)
        .await;
    c.call(Method::GET, "/api/lsp", "/api/lsp", None).await;
    c.call(Method::GET, "/api/me", "/api/me", None).await;

    // Sessions: created (with a chosen uuid, and refused), listed, read, renamed.
    let id = Uuid::new_v4();
    let create = format!("/api/sessions?uuid={id}");
    let body = json!({"assistant": "shell", "name": "doc", "cols": 100, "rows": 30});
    let (status, created) = c
        .call(Method::POST, "/api/sessions", &create, Some(body.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["id"], id.to_string());
    let (status, _) = c
        .call(Method::POST, "/api/sessions", &create, Some(body))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let bad = json!({"cmd": "not an array"});
    let (status, _) = c
        .call(Method::POST, "/api/sessions", "/api/sessions", Some(bad))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let cmd = json!({"cmd": ["sh", "-c", "echo doc; sleep 60"]});
    let (status, second) = c
        .call(Method::POST, "/api/sessions", "/api/sessions", Some(cmd))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, own) = c
        .call(Method::GET, "/api/sessions", "/api/sessions", None)
        .await;
    assert_eq!(own.as_array().unwrap().len(), 2);
    let (_, all) = c
        .call(Method::GET, "/api/sessions", "/api/sessions?all=1", None)
        .await;
    assert_eq!(all["hosts"][1]["reachable"], false, "{all}");
    assert_eq!(all["sessions"][0]["host"], "doc");

    let one = format!("/api/sessions/{id}");
    let (status, _) = c.call(Method::GET, "/api/sessions/{id}", &one, None).await;
    assert_eq!(status, StatusCode::OK);
    let by_number = format!("/api/sessions/{}", second["num"]);
    c.call(Method::GET, "/api/sessions/{id}", &by_number, None)
        .await;
    let missing = format!("/api/sessions/{}", Uuid::new_v4());
    let (status, _) = c
        .call(Method::GET, "/api/sessions/{id}", &missing, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, renamed) = c
        .call(
            Method::PATCH,
            "/api/sessions/{id}",
            &one,
            Some(json!({"name": "renamed"})),
        )
        .await;
    assert_eq!(
        (status, &renamed["name"]),
        (StatusCode::OK, &json!("renamed"))
    );
    let (status, _) = c
        .call(
            Method::PATCH,
            "/api/sessions/{id}",
            &one,
            Some(json!({"name": "bad/name"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A state report (the daemon token may make one too), and a bad one; made once the shell
    // is idle, so that its prompt, drawn late on a busy host, cannot follow the report.
    let start = std::time::Instant::now();
    loop {
        let (_, now) = c.call(Method::GET, "/api/sessions/{id}", &one, None).await;
        if now["state"] == "idle" {
            break;
        }
        assert!(start.elapsed() < common::TIMEOUT, "never idle: {now}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let state = format!("{one}/state");
    let (status, _) = c
        .call(
            Method::POST,
            "/api/sessions/{id}/state",
            &state,
            Some(json!({"state": "waiting", "reason": "documented"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = c
        .call(
            Method::POST,
            "/api/sessions/{id}/state",
            &state,
            Some(json!({"state": "asleep"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, reported) = c.call(Method::GET, "/api/sessions/{id}", &one, None).await;
    assert_eq!(
        (
            &reported["state"],
            &reported["reason"],
            &reported["stateSource"]
        ),
        (&json!("waiting"), &json!("documented"), &json!("hook"))
    );

    // Output: scrollback, the SSE log, the event stream, the recording.
    c.call(
        Method::GET,
        "/api/sessions/{id}/scrollback",
        &format!("{one}/scrollback"),
        None,
    )
    .await;
    c.call(
        Method::GET,
        "/api/sessions/{id}/log",
        &format!("{one}/log?tail=5"),
        None,
    )
    .await;
    c.call(Method::GET, "/api/events", "/api/events?tail=5", None)
        .await;
    c.call(
        Method::GET,
        "/api/sessions/{id}/recording",
        &format!("{one}/recording"),
        None,
    )
    .await;
    c.call(Method::GET, "/api/recordings", "/api/recordings", None)
        .await;
    let rec = format!("/api/recordings/{id}");
    let (status, _) = c
        .call(Method::GET, "/api/recordings/{id}", &rec, None)
        .await;
    assert_eq!(status, StatusCode::OK);

    // Share links.
    let share = json!({"role": "viewer", "ttl": 600, "record": true});
    let (status, made) = c
        .call(
            Method::POST,
            "/api/sessions/{id}/share",
            &format!("{one}/share"),
            Some(share),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, shares) = c
        .call(
            Method::GET,
            "/api/sessions/{id}/share",
            &format!("{one}/share"),
            None,
        )
        .await;
    assert_eq!(shares.as_array().unwrap().len(), 1);
    let revoke = format!("{one}/share/{}", made["id"].as_str().unwrap());
    let (status, _) = c
        .call(
            Method::DELETE,
            "/api/sessions/{id}/share/{share}",
            &revoke,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = c
        .call(
            Method::DELETE,
            "/api/sessions/{id}/share/{share}",
            &revoke,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Ends: the session, then its recording.
    let (status, _) = c
        .call(Method::DELETE, "/api/sessions/{id}", &one, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = c
        .call(Method::DELETE, "/api/recordings/{id}", &rec, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = c
        .call(Method::DELETE, "/api/recordings/{id}", &rec, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The audit trail: what was done above, and a bad filter.
    let (status, trail) = c
        .call(Method::GET, "/api/audit", "/api/audit?limit=5", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(trail.as_array().map(Vec::len), Some(5), "{trail}");
    let (status, _) = c
        .call(
            Method::GET,
            "/api/audit",
            "/api/audit?since=yesterday",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // API tokens: made (and refused twice), listed, revoked (and not found).
    let body = json!({"name": "doc", "scopes": ["exec", "view"], "expiresIn": 3600});
    let (status, token) = c
        .call(
            Method::POST,
            "/api/tokens",
            "/api/tokens",
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(token["token"].as_str().unwrap().starts_with("ptyhub_"));
    let (status, _) = c
        .call(Method::POST, "/api/tokens", "/api/tokens", Some(body))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let bad = json!({"name": "doc2", "scopes": []});
    let (status, _) = c
        .call(Method::POST, "/api/tokens", "/api/tokens", Some(bad))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, tokens) = c
        .call(Method::GET, "/api/tokens", "/api/tokens", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tokens.as_array().unwrap().len(), 1);
    let revoke = format!("/api/tokens/{}", token["id"].as_str().unwrap());
    for want in [StatusCode::NO_CONTENT, StatusCode::NOT_FOUND] {
        let (status, _) = c
            .call(Method::DELETE, "/api/tokens/{token}", &revoke, None)
            .await;
        assert_eq!(status, want);
    }

    // Every documented operation was called for real.
    let mut documented = BTreeSet::new();
    for (path, item) in c.doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    let untested: Vec<_> = documented.difference(&c.covered).collect();
    assert!(
        untested.is_empty(),
        "documented but not called: {untested:?}"
    );
}
