//! Request bodies in, resource shapes out: JSON parsing with the API's errors, ISO 8601
//! timestamps, and the App / Room / RoomActorAccess / Actor shapes of the notes (keys the
//! SDKs read; what Skua does not keep is `null`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::error::ApiError;
use crate::pb;

/// A reply with `value` as `application/json`.
pub(crate) fn json_response(status: StatusCode, value: Value) -> Response {
    let mut r = (status, value.to_string()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// 204, no body.
pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

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

/// The App shape.
pub(crate) fn app(a: &pb::App) -> Value {
    let created = iso_ms(a.created_at_ms);
    json!({
        "appId": a.id,
        "projectId": a.project_id,
        "name": a.name,
        "slug": a.slug,
        "description": null,
        "blueprintId": null,
        "config": {
            "autoProvisionRooms": a.auto_provision_rooms,
            "maxRooms": if a.max_rooms == 0 { Value::Null } else { a.max_rooms.into() },
        },
        "topics": a.topics.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        "roomCount": a.room_count,
        "createdAt": created,
        "updatedAt": created,
        "deletedAt": null,
    })
}

/// The Room shape: `roomId` is the room's slug (unique in its app); `topics` the app's.
pub(crate) fn room(r: &pb::Room, topics: &[String]) -> Value {
    let created = iso_ms(r.created_at_ms);
    json!({
        "roomId": r.slug,
        "appId": r.app_id,
        "name": r.name,
        "slug": r.slug,
        "description": null,
        "roomType": if r.dynamic { "dynamic" } else { "static" },
        "isEnabled": true,
        "topics": topics,
        "config": { "isPrivate": r.private },
        "createdAt": created,
        "updatedAt": created,
    })
}

/// The RoomActorAccess shape of a grant.
pub(crate) fn grant(g: &pb::Grant) -> Value {
    let created = iso_ms(g.created_at_ms);
    let opt = |s: &str| if s.is_empty() { Value::Null } else { Value::String(s.to_owned()) };
    json!({
        "roomActorAccessId": g.id,
        "roomId": g.room,
        "appId": g.app_id,
        "actorTokenId": opt(&g.actor_id),
        "actorType": opt(&g.actor_type),
        "permission": g.permission,
        "topics": if g.topics.is_empty() { Value::Null } else { json!(g.topics) },
        "isActive": true,
        "expiresAt": if g.expires_at == 0 { Value::Null } else { iso_ms(g.expires_at.saturating_mul(1000)) },
        "role": null,
        "metadata": null,
        "createdAt": created,
        "updatedAt": created,
    })
}

/// The Actor shape (never a token).
pub(crate) fn actor(a: &pb::Actor) -> Value {
    let created = iso_ms(a.created_at_ms);
    json!({
        "actorTokenId": a.id,
        "projectId": a.project_id,
        "name": a.name,
        "actorType": a.actor_type,
        "description": null,
        "externalId": null,
        "metadata": null,
        "isActive": a.active,
        "lastConnectedAt": null,
        "accessScopeId": null,
        "createdAt": created,
        "updatedAt": created,
    })
}

#[cfg(test)]
mod tests {
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
