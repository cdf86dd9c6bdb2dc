//! The API's error body `{statusCode, message, error}` (both SDKs read it), always
//! `application/json`, and the map from the service layer's gRPC statuses.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tonic::{Code, Status};
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
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::FailedPrecondition | Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable | Code::DeadlineExceeded => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Status> for ApiError {
    /// The service layer's statuses: invalid input 400, missing 404, duplicate 409, what the
    /// project may not do (a cap, `ensure` without auto-provisioning) 403, exhausted 429,
    /// store trouble 503; internal errors are logged and answered without detail.
    fn from(s: Status) -> Self {
        let status = http_status(s.code());
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(message = s.message(), "REST request failed inside the control plane.");
            return Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
        }
        Self::new(status, s.message())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            status_code: self.status.as_u16(),
            message: self.message,
            error: self.status.canonical_reason().unwrap_or("Error").to_owned(),
        };
        let mut r = super::body::json_response(self.status, &body);
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}
