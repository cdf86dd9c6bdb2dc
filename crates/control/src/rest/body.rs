//! Request bodies in, resource shapes out: JSON parsing with the API's errors, ISO 8601
//! timestamps, and the App / Room / RoomActorAccess / Actor types of the notes (keys the
//! SDKs read; what Skua does not keep is `null`), whose schemas the OpenAPI document carries.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::ToSchema;

use super::error::ApiError;
use crate::pb;
use crate::service::annotations::AnnotationsUpdate;

/// The body as bytes, or the API's error for one over the size limit.
pub(crate) fn bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| ApiError::new(e.status(), format!("request body: {}", e.body_text())))
}

/// A JSON body as `T` (unknown keys ignored); an empty body reads as `{}`.
pub(crate) fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let b = bytes(body)?;
    let b: &[u8] = if b.iter().all(u8::is_ascii_whitespace) { b"{}" } else { &b };
    serde_json::from_slice(b).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A key that is present, even as `null`, is `Some` (absent keys take the default, `None`).
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `description`, `externalId` and `metadata` of a create or update body (issue 31): an
/// absent key keeps the field, `null` clears it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AnnotationsIn {
    /// At most 1024 bytes; line breaks and tabs are the only control characters allowed.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    description: Option<Value>,
    /// Your own id for the object: at most 256 bytes, not checked for uniqueness.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    external_id: Option<Value>,
    /// A JSON object, at most 16384 bytes as compact JSON.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

impl AnnotationsIn {
    /// The change it asks for; 400 naming a field of the wrong JSON type.
    pub(crate) fn update(&self) -> Result<AnnotationsUpdate, ApiError> {
        Ok(AnnotationsUpdate {
            description: text_key("description", self.description.as_ref())?,
            external_id: text_key("externalId", self.external_id.as_ref())?,
            metadata: metadata_key("metadata", self.metadata.as_ref())?,
        })
    }
}

/// A string key of a body: absent `None`, `null` `Some(None)`, a string `Some(Some(_))`.
pub(crate) fn text_key(field: &str, v: Option<&Value>) -> Result<Option<Option<String>>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
        Some(_) => Err(ApiError::bad_request(format!("{field} must be a string or null"))),
    }
}

/// A `metadata` key: a JSON object, as compact JSON text (or `null`, or absent).
pub(crate) fn metadata_key(field: &str, v: Option<&Value>) -> Result<Option<Option<String>>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(v @ Value::Object(_)) => Ok(Some(Some(v.to_string()))),
        Some(_) => Err(ApiError::bad_request(format!("{field} must be a JSON object or null"))),
    }
}

/// Stored metadata text as JSON (`null` when unset or, never expected, unreadable).
fn metadata_out(text: &str) -> Option<Value> {
    if text.is_empty() { None } else { serde_json::from_str(text).ok() }
}

/// `description`, `externalId` and `metadata` of a reply.
fn annotations_out(a: Option<&pb::Annotations>) -> (Option<String>, Option<String>, Option<Value>) {
    let opt = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
    match a {
        None => (None, None, None),
        Some(a) => (opt(&a.description), opt(&a.external_id), metadata_out(&a.metadata_json)),
    }
}

/// Unix ms as an RFC 3339 (ISO 8601) string.
pub(crate) fn iso_ms(ms: u64) -> Value {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .map_or(Value::Null, Value::String)
}

/// An ISO 8601 (RFC 3339) timestamp or a number of unix seconds, as unix seconds.
pub(crate) fn unix_s(field: &str, v: &Value) -> Result<u64, ApiError> {
    let bad = || ApiError::bad_request(format!("{field} must be an ISO 8601 timestamp such as 2030-01-01T00:00:00Z"));
    match v {
        Value::String(s) => {
            let t = OffsetDateTime::parse(s, &Rfc3339).map_err(|_| bad())?;
            u64::try_from(t.unix_timestamp()).map_err(|_| bad())
        }
        Value::Number(n) => n.as_u64().ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A slug from a display name: lower-case letters and digits, other runs become `-`.
pub(crate) fn slugify(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
        if s.len() >= 64 {
            break;
        }
    }
    s.trim_end_matches('-').to_owned()
}

/// An ISO 8601 string of unix ms (`None` when out of range).
fn iso(ms: u64) -> Option<String> {
    iso_ms(ms).as_str().map(str::to_owned)
}

/// An app's `config`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppConfigOut {
    /// Whether `rooms/ensure` may create rooms.
    auto_provision_rooms: bool,
    /// The app's own room cap (`null`: the server's `max_rooms_per_app`).
    max_rooms: Option<u32>,
}

/// An app.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct App {
    /// Id (also accepted: the slug).
    pub(crate) app_id: String,
    project_id: String,
    pub(crate) name: String,
    /// Unique in the project; the first segment of every topic address.
    pub(crate) slug: String,
    description: Option<String>,
    external_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    blueprint_id: Option<String>,
    config: AppConfigOut,
    /// The topics actors may address in the app's rooms.
    topics: Vec<String>,
    room_count: u32,
    /// App-level hydration webhook.
    hydration_webhook: Option<WebhookOut>,
    /// App-level trigger webhook.
    trigger_webhook: Option<WebhookOut>,
    /// The topics' own webhooks: `{<topic>: {webhooks: {onSubscribe?, onPublish?}}}`.
    topic_configs: BTreeMap<String, TopicConfigOut>,
    /// Whether the app has a webhook secret.
    has_webhook_secret: bool,
    /// The webhook secret: only in the answer that created the app (shown once).
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook_secret: Option<String>,
    pub(crate) created_at: Option<String>,
    updated_at: Option<String>,
    deleted_at: Option<String>,
}

/// One webhook endpoint.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WebhookOut {
    url: String,
    headers: BTreeMap<String, String>,
    /// `null`: the default of its kind.
    timeout_ms: Option<u32>,
}

/// The webhooks of one topic.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TopicWebhooksOut {
    on_subscribe: Option<WebhookOut>,
    on_publish: Option<WebhookOut>,
}

/// One entry of `topicConfigs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TopicConfigOut {
    webhooks: TopicWebhooksOut,
    /// The topic's history, `{size, ttl}` (ttl in seconds), when it has one (issue 19).
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<TopicHistoryOut>,
}

/// `topicConfigs.<topic>.history`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub(crate) struct TopicHistoryOut {
    size: u32,
    ttl: u64,
}

fn webhook_out(t: Option<&pb::WebhookTarget>) -> Option<WebhookOut> {
    t.filter(|t| !t.url.is_empty()).map(|t| WebhookOut {
        url: t.url.clone(),
        headers: t.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        timeout_ms: Some(t.timeout_ms).filter(|ms| *ms > 0),
    })
}

/// The App shape.
pub(crate) fn app(a: &pb::App) -> App {
    let (description, external_id, metadata) = annotations_out(a.annotations.as_ref());
    App {
        app_id: a.id.clone(),
        project_id: a.project_id.clone(),
        name: a.name.clone(),
        slug: a.slug.clone(),
        description,
        external_id,
        metadata,
        blueprint_id: None,
        config: AppConfigOut {
            auto_provision_rooms: a.auto_provision_rooms,
            max_rooms: Some(a.max_rooms).filter(|n| *n > 0),
        },
        topics: a.topics.iter().map(|t| t.name.clone()).collect(),
        room_count: a.room_count,
        hydration_webhook: webhook_out(a.hydration_webhook.as_ref()),
        trigger_webhook: webhook_out(a.trigger_webhook.as_ref()),
        topic_configs: a
            .topics
            .iter()
            .filter_map(|t| {
                let w = t.webhooks.as_ref();
                let webhooks = TopicWebhooksOut {
                    on_subscribe: webhook_out(w.and_then(|w| w.on_subscribe.as_ref())),
                    on_publish: webhook_out(w.and_then(|w| w.on_publish.as_ref())),
                };
                let history = t.history.map(|h| TopicHistoryOut { size: h.size, ttl: h.ttl_ms.div_ceil(1000) });
                (webhooks.on_subscribe.is_some() || webhooks.on_publish.is_some() || history.is_some())
                    .then(|| (t.name.clone(), TopicConfigOut { webhooks, history }))
            })
            .collect(),
        has_webhook_secret: a.has_webhook_secret,
        webhook_secret: Some(a.webhook_secret.clone()).filter(|s| !s.is_empty()),
        created_at: iso(a.created_at_ms),
        updated_at: iso(a.created_at_ms),
        deleted_at: None,
    }
}

/// A room's `config`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoomConfig {
    /// Whether any grant names the room (then only granted actors may use it).
    is_private: bool,
}

/// A room: `roomId` is its slug (unique in its app).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Room {
    room_id: String,
    app_id: String,
    name: String,
    slug: String,
    description: Option<String>,
    external_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// `static` (provisioned by the operator) or `dynamic` (created over REST or by `ensure`).
    #[schema(pattern = "^(static|dynamic)$")]
    room_type: &'static str,
    is_enabled: bool,
    /// The app's topics.
    topics: Vec<String>,
    config: RoomConfig,
    created_at: Option<String>,
    updated_at: Option<String>,
}

/// The Room shape, with its app's `topics`.
pub(crate) fn room(r: &pb::Room, topics: &[String]) -> Room {
    let (description, external_id, metadata) = annotations_out(r.annotations.as_ref());
    Room {
        room_id: r.slug.clone(),
        app_id: r.app_id.clone(),
        name: r.name.clone(),
        slug: r.slug.clone(),
        description,
        external_id,
        metadata,
        room_type: if r.dynamic { "dynamic" } else { "static" },
        is_enabled: true,
        topics: topics.to_vec(),
        config: RoomConfig { is_private: r.private },
        created_at: iso(r.created_at_ms),
        updated_at: iso(r.created_at_ms),
    }
}

/// A room grant.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoomActorAccess {
    room_actor_access_id: String,
    room_id: String,
    app_id: String,
    /// The actor granted, or `null` for a grant to an actor type.
    actor_token_id: Option<String>,
    /// The actor type granted, or `null` for a grant to one actor.
    actor_type: Option<String>,
    /// `subscribe`, `publish` or `pubSub`.
    permission: String,
    /// The topics it covers (`null`: all of the app's).
    topics: Option<Vec<String>>,
    is_active: bool,
    expires_at: Option<String>,
    role: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    created_at: Option<String>,
    updated_at: Option<String>,
}

/// The RoomActorAccess shape of a grant.
pub(crate) fn grant(g: &pb::Grant) -> RoomActorAccess {
    let opt = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
    RoomActorAccess {
        room_actor_access_id: g.id.clone(),
        room_id: g.room.clone(),
        app_id: g.app_id.clone(),
        actor_token_id: opt(&g.actor_id),
        actor_type: opt(&g.actor_type),
        permission: g.permission.clone(),
        topics: Some(g.topics.clone()).filter(|t| !t.is_empty()),
        is_active: true,
        expires_at: if g.expires_at == 0 { None } else { iso(g.expires_at.saturating_mul(1000)) },
        role: opt(&g.role),
        metadata: metadata_out(&g.metadata_json),
        created_at: iso(g.created_at_ms),
        updated_at: iso(g.created_at_ms),
    }
}

/// An actor (never its token).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Actor {
    /// Id.
    pub(crate) actor_token_id: String,
    project_id: String,
    name: String,
    /// `user`, `device`, `agent`, `orchestrator`, `observer` or `server`.
    actor_type: String,
    description: Option<String>,
    external_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// Deactivated actors cannot connect.
    is_active: bool,
    last_connected_at: Option<String>,
    /// The access scope it belongs to (`null`: none).
    access_scope_id: Option<String>,
    created_at: Option<String>,
    updated_at: Option<String>,
}

/// The Actor shape.
pub(crate) fn actor(a: &pb::Actor) -> Actor {
    let (description, external_id, metadata) = annotations_out(a.annotations.as_ref());
    Actor {
        actor_token_id: a.id.clone(),
        project_id: a.project_id.clone(),
        name: a.name.clone(),
        actor_type: a.actor_type.clone(),
        description,
        external_id,
        metadata,
        is_active: a.active,
        last_connected_at: None,
        access_scope_id: Some(a.scope_id.clone()).filter(|s| !s.is_empty()),
        created_at: iso(a.created_at_ms),
        updated_at: iso(a.created_at_ms),
    }
}

/// An actor with its new access token (only in the reply that created it).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActorWithToken {
    #[serde(flatten)]
    pub(crate) actor: Actor,
    /// `at_live_<keyId>.<secret>`: store it now, it is shown only here.
    pub(crate) access_token: String,
}

/// The reply of a delete that answers with a body.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// Always true.
    pub(crate) success: bool,
    /// Objects deleted (the object and what went with it).
    pub(crate) deleted: u32,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn timestamps_round_trip_through_iso_8601() {
        let v = iso_ms(1_893_456_000_000);
        assert_eq!(v, json!("2030-01-01T00:00:00Z"));
        assert_eq!(unix_s("expiresAt", &v).unwrap(), 1_893_456_000);
        assert!(unix_s("expiresAt", &json!("tomorrow")).is_err());
    }

    #[test]
    fn names_become_slugs() {
        assert_eq!(slugify("My Chat App!"), "my-chat-app");
        assert_eq!(slugify("  --x"), "x");
        assert_eq!(slugify("日本"), "");
    }
}
