//! `POST /v1/publish`: `{topic: "app/room/topic", data, filter?, retain?}` as JSON, or as a
//! MessagePack map with `Content-Type: application/msgpack`, through the service layer's
//! server-side publish (the node's publish pipeline: limits, logged topics, observers).
//! An `idempotencyKey` body field or `Idempotency-Key` header makes a repeat within the
//! idempotency window answer `duplicate: true` without publishing again (issue 19).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::Rest;
use super::auth::Caller;
use super::body;
use super::error::{ApiError, ErrorBody};
use super::reply::json_response;
use crate::node::PublishRefused;
use crate::pb;
use crate::service::publish::publish_in;

/// The body of `POST /v1/publish`, as JSON or as a MessagePack map (the schema of both).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct PublishBody {
    /// `app/room/topic`.
    topic: String,
    /// The payload: any JSON value (sent to subscribers as the equivalent MessagePack), or any
    /// MessagePack value in a MessagePack body (forwarded as is).
    #[schema(value_type = Object)]
    data: Value,
    /// Filter key: only subscribers whose filters include it receive the message.
    filter: Option<String>,
    /// Keep it as the topic's retained message (per filter key).
    retain: Option<bool>,
    /// A repeat of this key (per project) within the idempotency window is answered with
    /// `duplicate: true` and not published again; also accepted as the `Idempotency-Key` header.
    #[schema(rename = "idempotencyKey")]
    idempotency_key: Option<String>,
}

/// The reply of `POST /v1/publish`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Published {
    /// Unix ms the message carries.
    timestamp: u64,
    /// The stored message's id (logged topics only).
    #[serde(skip_serializing_if = "Option::is_none")]
    msg_id: Option<String>,
    /// Present (`true`) when the idempotency key repeated one of the window: nothing was
    /// published now; `timestamp` and `msgId` are the first publish's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    duplicate: bool,
}

/// A request's fields, whichever encoding carried them.
struct Request {
    topic: String,
    data: Vec<u8>,
    filter: String,
    retain: bool,
    idempotency_key: Option<String>,
}

/// JSON → the MessagePack value subscribers receive.
fn to_msgpack(v: &Value) -> rmpv::Value {
    match v {
        Value::Null => rmpv::Value::Nil,
        Value::Bool(b) => rmpv::Value::Boolean(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => rmpv::Value::from(u),
            (None, Some(i), _) => rmpv::Value::from(i),
            (None, None, f) => rmpv::Value::F64(f.unwrap_or(0.0)),
        },
        Value::String(s) => rmpv::Value::from(s.as_str()),
        Value::Array(a) => rmpv::Value::Array(a.iter().map(to_msgpack).collect()),
        Value::Object(m) => {
            rmpv::Value::Map(m.iter().map(|(k, v)| (rmpv::Value::from(k.as_str()), to_msgpack(v))).collect())
        }
    }
}

fn encode(v: &rmpv::Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

fn from_json(b: &[u8]) -> Result<Request, ApiError> {
    let v: Value = serde_json::from_slice(b).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    let Value::Object(m) = v else { return Err(ApiError::bad_request("the body must be a JSON object")) };
    let data = m.get("data").ok_or_else(|| ApiError::bad_request("data is required"))?;
    Ok(Request {
        topic: string_field(m.get("topic"), "topic")?.ok_or_else(|| ApiError::bad_request("topic is required"))?,
        data: encode(&to_msgpack(data)),
        filter: string_field(m.get("filter"), "filter")?.unwrap_or_default(),
        retain: match m.get("retain") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::bad_request("retain must be a boolean")),
        },
        idempotency_key: string_field(m.get("idempotencyKey"), "idempotencyKey")?,
    })
}

fn string_field(v: Option<&Value>, name: &str) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(format!("{name} must be a string"))),
    }
}

fn from_msgpack(b: &[u8]) -> Result<Request, ApiError> {
    let mut rest = b;
    let v = rmpv::decode::read_value(&mut rest)
        .map_err(|e| ApiError::bad_request(format!("invalid MessagePack body: {e}")))?;
    if !rest.is_empty() {
        return Err(ApiError::bad_request("the MessagePack body must be exactly one map"));
    }
    let rmpv::Value::Map(entries) = v else { return Err(ApiError::bad_request("the MessagePack body must be a map")) };
    let get = |k: &str| entries.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, v)| v);
    let text = |k: &str| -> Result<Option<String>, ApiError> {
        match get(k) {
            None | Some(rmpv::Value::Nil) => Ok(None),
            Some(rmpv::Value::String(s)) => {
                s.as_str().map(|s| Some(s.to_owned())).ok_or_else(|| ApiError::bad_request(format!("{k} is not UTF-8")))
            }
            Some(_) => Err(ApiError::bad_request(format!("{k} must be a string"))),
        }
    };
    Ok(Request {
        topic: text("topic")?.ok_or_else(|| ApiError::bad_request("topic is required"))?,
        data: encode(get("data").ok_or_else(|| ApiError::bad_request("data is required"))?),
        filter: text("filter")?.unwrap_or_default(),
        retain: match get("retain") {
            None | Some(rmpv::Value::Nil) => false,
            Some(rmpv::Value::Boolean(b)) => *b,
            Some(_) => return Err(ApiError::bad_request("retain must be a boolean")),
        },
        idempotency_key: text("idempotencyKey")?,
    })
}

/// The request's idempotency key: the `Idempotency-Key` header or the body's `idempotencyKey`
/// (both: they must agree); empty means none is given (the pipeline checks the length).
fn idempotency_key(headers: &HeaderMap, body: Option<String>) -> Result<String, ApiError> {
    let header = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("the Idempotency-Key header must be visible ASCII"))?
                .to_owned(),
        ),
    };
    match (header, body) {
        (Some(h), Some(b)) if h != b => {
            Err(ApiError::bad_request("the Idempotency-Key header and the body's idempotencyKey differ"))
        }
        (Some(k), _) | (None, Some(k)) if k.is_empty() => {
            Err(ApiError::bad_request("idempotencyKey must not be empty"))
        }
        (Some(k), _) | (None, Some(k)) => Ok(k),
        (None, None) => Ok(String::new()),
    }
}

/// Whether the request says its body is MessagePack.
fn is_msgpack(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).and_then(|v| v.split(';').next()).is_some_and(|t| {
        matches!(t.trim(), "application/msgpack" | "application/x-msgpack" | "application/vnd.msgpack")
    })
}

/// The HTTP status of a refused server-side publish (the REST API's and the dashboard's).
pub(crate) fn http_status(r: &PublishRefused) -> StatusCode {
    use PublishRefused as R;
    match r {
        R::Unknown(_) => StatusCode::NOT_FOUND,
        R::Access(_) | R::InvalidData | R::Filter(_) | R::InvalidIdempotencyKey { .. } => StatusCode::BAD_REQUEST,
        R::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        R::RetainedLimit(_) | R::QuotaExceeded | R::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        R::Store(_) | R::Bus(_) | R::Idempotency(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Publish a message to `app/room/topic` from the backend (subscribers see `from: "server"`).
#[utoipa::path(post, path = "/v1/publish", tag = "publish",
    request_body(content((PublishBody = "application/json"), (PublishBody = "application/msgpack"))),
    params(("Idempotency-Key" = Option<String>, Header, description = "The idempotency key, as the body's idempotencyKey")),
    responses((status = 200, body = Published), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 429, body = ErrorBody),
    (status = 503, body = ErrorBody)))]
pub(crate) async fn publish(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b = body::bytes(b)?;
    let r = if is_msgpack(&headers) { from_msgpack(&b)? } else { from_json(&b)? };
    let idempotency_key = idempotency_key(&headers, r.idempotency_key)?;
    let topic = r.topic.clone();
    let project = skua_core::ProjectId::parse(&caller.project).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let req = pb::PublishRequest {
        project_id: String::new(),
        topic: r.topic,
        data: r.data,
        filter: r.filter,
        from_actor: String::new(),
        retain: r.retain,
        idempotency_key,
    };
    let p = publish_in(&rest.svc, project, req).await.map_err(|e| ApiError::new(http_status(&e), e.to_string()))?;
    caller.audit("publish", &topic);
    let reply = Published {
        timestamp: p.timestamp_ms,
        msg_id: Some(p.msg_id).filter(|m| !m.is_empty()),
        duplicate: p.duplicate,
    };
    Ok(json_response(StatusCode::OK, &reply))
}
