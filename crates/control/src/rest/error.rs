//! The API's error body `{statusCode, message, error}` (both SDKs read it), always
//! `application/json`, and the map from the service layer's gRPC statuses.

use crate::service::{Code, Error};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error reply.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// The HTTP status.
    pub status_code: u16,
    /// What went wrong.
    pub message: String,
    /// The status's reason phrase (`Not Found`, …).
    pub error: String,
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for the caller.
    pub message: String,
    /// Seconds for `Retry-After` (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), retry_after: None }
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: also for ids of another project (never revealing they exist).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
}

/// The HTTP status of a service-layer status code (the REST API's and the dashboard's map);
/// 500 for internal errors.
pub(crate) fn http_status(code: Code) -> StatusCode {
    match code {
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::FailedPrecondition => StatusCode::FORBIDDEN,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for ApiError {
    /// The service layer's statuses: invalid input 400, missing 404, duplicate 409, what the
    /// project may not do (a cap, `ensure` without auto-provisioning) 403, exhausted 429,
    /// store trouble 503; internal errors are logged and answered without detail.
    fn from(s: Error) -> Self {
        let status = http_status(s.code());
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(message = s.message(), "REST request failed inside the control plane.");
            return Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
        }
        Self::new(status, rest_fields(s.message()))
    }
}

/// The service layer names fields as the gRPC API spells them; the REST API's bodies spell
/// them differently (issue 31). Each snake_case name a REST request can meet, and its REST form.
const REST_NAMES: &[(&str, &str)] = &[
    ("actor_id", "actorTokenId"),
    ("actor_type", "actorType"),
    ("expires_at", "expiresAt"),
    ("auto_provision_rooms", "config.autoProvisionRooms"),
    ("max_rooms", "config.maxRooms"),
    ("hydration_webhook", "hydrationWebhook"),
    ("trigger_webhook", "triggerWebhook"),
    ("on_subscribe", "onSubscribe"),
    ("on_publish", "onPublish"),
    ("timeout_ms", "timeoutMs"),
    ("ttl_ms", "ttl"),
    ("external_id", "externalId"),
    ("metadata_json", "metadata"),
];

/// One field path of a service message as the REST body spells it: each segment by
/// [`REST_NAMES`], `topics[i].name` as `topics[i]` (REST topics are strings) and
/// `topics.<topic>.…` as `topicConfigs.<topic>.…` (a topic's settings).
fn rest_path(path: &str) -> String {
    let mut segments: Vec<&str> = path
        .split('.')
        .map(|seg| REST_NAMES.iter().find(|(grpc, _)| *grpc == seg).map_or(seg, |(_, rest)| *rest))
        .collect();
    if segments.len() == 2 && segments[0].starts_with("topics[") && segments[1] == "name" {
        segments.pop();
    } else if segments.len() >= 3 && segments[0] == "topics" {
        segments[0] = "topicConfigs";
    }
    segments.join(".")
}

/// A service message with every field path outside quotes (quoted text is the caller's input,
/// echoed) spelt as the REST API spells it.
pub(crate) fn rest_fields(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    let mut word = String::new();
    let is_path = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']');
    for c in message.chars() {
        if !quoted && is_path(c) {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.push_str(&rest_path(&word));
            word.clear();
        }
        if c == '"' {
            quoted = !quoted;
        }
        out.push(c);
    }
    out.push_str(&rest_path(&word));
    out
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            status_code: self.status.as_u16(),
            message: self.message,
            error: self.status.canonical_reason().unwrap_or("Error").to_owned(),
        };
        let mut r = super::reply::json_response(self.status, &body);
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snake_case words of `text` outside quotes and `{…}` format arguments.
    fn snake_words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let (mut quoted, mut braced) = (false, 0u32);
        let mut word = String::new();
        for c in text.chars().chain(std::iter::once(' ')) {
            match c {
                '"' => quoted = !quoted,
                '{' => braced += 1,
                '}' => braced = braced.saturating_sub(1),
                _ => {}
            }
            if !quoted && braced == 0 && (c.is_ascii_alphanumeric() || c == '_') {
                word.push(c);
                continue;
            }
            if word.contains('_') && word.chars().any(|c| c.is_ascii_lowercase()) {
                out.push(word.clone());
            }
            word.clear();
        }
        out
    }

    /// The string literals of Rust source `src` (escaped quotes kept inside).
    fn literals(src: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut chars = src.chars();
        while let Some(c) = chars.next() {
            if c != '"' {
                continue;
            }
            let mut lit = String::new();
            let mut escaped = false;
            for c in chars.by_ref() {
                if c == '"' && !escaped {
                    break;
                }
                escaped = c == '\\' && !escaped;
                lit.push(c);
            }
            out.push(lit);
        }
        out
    }

    /// Names REST requests never meet in a message, with why: the server's settings (a cap's
    /// message names the setting an operator raises), fields only gRPC requests carry, and the
    /// protocol's own snake_case codes.
    const NOT_REST: &[&str] = &[
        // Settings.
        "max_apps_per_project",
        "max_rooms_per_app",
        "max_actors_per_project",
        "max_grants_per_room",
        "max_lobbies_per_project",
        "max_page_size",
        "webhook_allow_link_local",
        "webhook_allow_private",
        // gRPC-only request fields (the REST API sets or never sends them).
        "project_id",
        "page_token",
        "grant_id",
        "key_id",
        "delivery_ids",
        "jwt_secret",
        "rate_limit",
        "allowed_actors",
        "allowed_actor_types",
        "wake_secret",
        "webhook_secret",
        "scope_id",
        "max_connections",
        "monthly_message_quota",
        "max_message_size",
        // Wire codes and token prefixes, spelt so by the protocol.
        "token_not_found",
        "at_live_",
    ];

    #[test]
    fn rest_messages_spell_fields_as_rest_bodies_do() {
        let cases = [
            ("actor_type is required", "actorType is required"),
            ("give exactly one of actor_id and actor_type", "give exactly one of actorTokenId and actorType"),
            ("topics[1].name \"a b\" is invalid", "topics[1] \"a b\" is invalid"),
            (
                "app \"x\" does not allow it (auto_provision_rooms is off)",
                "app \"x\" does not allow it (config.autoProvisionRooms is off)",
            ),
            (
                "topics.t.history: size and ttl_ms must be at least 1",
                "topicConfigs.t.history: size and ttl must be at least 1",
            ),
            ("expires_at is in the past", "expiresAt is in the past"),
            ("room \"actor_id\" not found", "room \"actor_id\" not found"),
            ("the most allowed (max_rooms_per_app)", "the most allowed (max_rooms_per_app)"),
        ];
        for (grpc, rest) in cases {
            assert_eq!(rest_fields(grpc), rest);
        }
    }

    /// Every message the service layer (and the REST layer) can send a REST caller, scanned
    /// in the sources: once spelt for REST, no snake_case name is left but the settings and
    /// gRPC-only fields of [`NOT_REST`]. A new message naming a new field fails here until
    /// the field gets its REST name in [`REST_NAMES`] or is listed as never REST's.
    #[test]
    fn no_message_a_rest_caller_can_meet_names_a_snake_case_field() {
        let sources = [
            ("service/actors.rs", include_str!("../service/actors.rs")),
            ("service/annotations.rs", include_str!("../service/annotations.rs")),
            ("service/apps.rs", include_str!("../service/apps.rs")),
            ("service/grants.rs", include_str!("../service/grants.rs")),
            ("service/publish.rs", include_str!("../service/publish.rs")),
            ("service/rooms.rs", include_str!("../service/rooms.rs")),
            ("service/scopes.rs", include_str!("../service/scopes.rs")),
            ("service/shared.rs", include_str!("../service/shared.rs")),
            ("validate.rs", include_str!("../validate.rs")),
            ("rest/actors.rs", include_str!("actors.rs")),
            ("rest/apps.rs", include_str!("apps.rs")),
            ("rest/auth.rs", include_str!("auth.rs")),
            ("rest/body.rs", include_str!("body.rs")),
            ("rest/publish.rs", include_str!("publish.rs")),
            ("rest/rooms.rs", include_str!("rooms.rs")),
            ("rest/scopes.rs", include_str!("scopes.rs")),
        ];
        let mut bad = Vec::new();
        for (file, src) in sources {
            // Test modules, attributes and comments hold no messages.
            let code: Vec<&str> = src
                .split("#[cfg(test)]")
                .next()
                .unwrap_or(src)
                .lines()
                .filter(|l| !l.trim_start().starts_with("#[") && !l.trim_start().starts_with("//"))
                .collect();
            for lit in literals(&code.join("\n")) {
                for w in snake_words(&rest_fields(&lit)) {
                    if !NOT_REST.contains(&w.as_str()) {
                        bad.push(format!("{file}: {w} in {lit:?}"));
                    }
                }
            }
        }
        assert!(bad.is_empty(), "snake_case names REST callers would read:\n{}", bad.join("\n"));
    }
}
