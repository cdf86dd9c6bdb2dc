//! Replies without a resource shape: a JSON reply and 204. The floor under [`super::body`] and
//! [`super::error`] (whose error body is a JSON reply too).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A reply with `value` as `application/json`.
pub(crate) fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    let text = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
    let mut r = (status, text).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// 204, no body.
pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}
