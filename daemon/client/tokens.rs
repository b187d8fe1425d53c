//! `ptyhub token create|list|revoke`: API tokens through `/api/tokens` (an admin's token),
//! and the list as a table a person reads (id, name, scopes, created, by, last used, expires).

use serde::Deserialize;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::{ClientError, Server};

/// A token as `GET /api/tokens` lists it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRow {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its scopes.
    pub scopes: Vec<String>,
    /// RFC 3339.
    pub created_at: String,
    /// Who made it.
    pub created_by: String,
    /// RFC 3339, or never.
    pub last_used_at: Option<String>,
    /// RFC 3339, or never.
    pub expires_at: Option<String>,
}

impl Server {
    /// Makes a token; returns the server's answer (with `token`, shown this once).
    pub async fn create_token(
        &self,
        name: &str,
        scopes: &[String],
        expires_in: Option<u64>,
    ) -> Result<Value, ClientError> {
        let mut body = json!({"name": name, "scopes": scopes});
        if let Some(secs) = expires_in {
            body["expiresIn"] = json!(secs);
        }
        let req = self
            .request(reqwest::Method::POST, "api/tokens")?
            .json(&body);
        self.call(req).await
    }

    /// Every token, as the server's JSON.
    pub async fn tokens_json(&self) -> Result<Value, ClientError> {
        self.call(self.request(reqwest::Method::GET, "api/tokens")?)
            .await
    }

    /// Every token.
    pub async fn tokens(&self) -> Result<Vec<TokenRow>, ClientError> {
        let value = self.tokens_json().await?;
        serde_json::from_value(value)
            .map_err(|e| ClientError::Server(format!("unexpected token list: {e}")))
    }

    /// Revokes the token with this id.
    pub async fn revoke_token(&self, id: &str) -> Result<(), ClientError> {
        let path = format!("api/tokens/{}", urlencoding(id));
        let req = self.request(reqwest::Method::DELETE, &path)?;
        self.call(req).await.map(|_| ())
    }
}

/// `id` as one path segment.
fn urlencoding(id: &str) -> String {
    form_urlencoded::byte_serialize(id.as_bytes()).collect()
}

/// The scope names as the daemon takes them: each trimmed and lower-cased; commas split.
pub fn scope_names(given: &[String]) -> Vec<String> {
    given
        .iter()
        .flat_map(|s| s.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// What `ptyhub token create` prints: the token alone on stdout (so `$(ptyhub token create
/// ...)` is the token), and how to use it on stderr.
pub fn created_lines(made: &Value) -> (String, String) {
    let s = |k: &str| made.get(k).and_then(Value::as_str).unwrap_or_default();
    let scopes: Vec<&str> = made
        .get("scopes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let expires = match made.get("expiresAt").and_then(Value::as_str) {
        Some(at) => format!("expires {at}"),
        None => "never expires".to_owned(),
    };
    let help = format!(
        "token {:?} (id {}, scopes {}, {expires}): shown this once, keep it now.\n\
         Use it as `Authorization: Bearer TOKEN`, `?token=TOKEN`, or PTYHUB_TOKEN=TOKEN for \
         ptyhub's commands; revoke it with `ptyhub token revoke {}`.",
        s("name"),
        s("id"),
        scopes.join(","),
        s("id"),
    );
    (s("token").to_owned(), help)
}

/// The tokens as aligned columns, oldest first, with a header line.
pub fn render(tokens: &[TokenRow], now: OffsetDateTime) -> String {
    let when = |t: &Option<String>, never: &str| match t {
        None => never.to_owned(),
        Some(t) => match OffsetDateTime::parse(t, &Rfc3339) {
            Ok(at) if at <= now => format!("{} ago", super::table::age(now - at)),
            Ok(at) => format!("in {}", super::table::age(at - now)),
            Err(_) => t.clone(),
        },
    };
    let mut rows = vec![[
        "ID",
        "NAME",
        "SCOPES",
        "CREATED",
        "BY",
        "LAST USED",
        "EXPIRES",
    ]
    .map(str::to_owned)];
    for t in tokens {
        rows.push([
            t.id.clone(),
            t.name.clone(),
            t.scopes.join(","),
            when(&Some(t.created_at.clone()), "?"),
            t.created_by.clone(),
            when(&t.last_used_at, "never"),
            when(&t.expires_at, "never"),
        ]);
    }
    super::table::aligned(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_of_tokens() {
        let now = OffsetDateTime::parse("2026-01-10T12:00:00Z", &Rfc3339).unwrap();
        let row = TokenRow {
            id: "0123456789abcdef".into(),
            name: "ci".into(),
            scopes: vec!["exec".into()],
            created_at: "2026-01-08T12:00:00Z".into(),
            created_by: "alice".into(),
            last_used_at: None,
            expires_at: Some("2026-02-09T12:00:00Z".into()),
        };
        let text = render(&[row], now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID  "), "{text}");
        assert!(
            lines[1].contains("ci") && lines[1].contains("2d ago"),
            "{text}"
        );
        assert!(
            lines[1].contains("never") && lines[1].contains("in 30d"),
            "{text}"
        );
    }

    #[test]
    fn scopes_are_split_and_lowered() {
        let given = vec!["Exec, view".to_owned(), "write".to_owned()];
        assert_eq!(scope_names(&given), ["exec", "view", "write"]);
    }
}
