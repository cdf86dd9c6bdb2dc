//! What one delivery ends with: a 2xx [`WebhookResponse`] or a [`DeliveryError`].

use std::time::Duration;

use bytes::Bytes;

use crate::metrics::Outcome;

/// A transport failure, boxed (the source of [`DeliveryError::Transport`]).
pub(crate) type TransportError = Box<dyn std::error::Error + Send + Sync>;

/// A 2xx answer.
#[derive(Debug, Clone)]
pub struct WebhookResponse {
    /// Status code.
    pub status: u16,
    /// The body, at most `max_response_bytes`.
    pub body: Bytes,
    /// Whether `Content-Type` says JSON (`application/json` or `+json`).
    pub json_content_type: bool,
}

/// Why a delivery failed (after its last attempt).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The URL's address is refused (link-local or metadata, not allow-listed, unparsable).
    #[error("refused: {reason}")]
    Refused {
        /// Why.
        reason: String,
    },
    /// No complete answer within the timeout.
    #[error("timed out after {after:?}")]
    Timeout {
        /// The timeout.
        after: Duration,
    },
    /// A non-2xx answer.
    #[error("answered HTTP {status}")]
    Status {
        /// The status code.
        status: u16,
    },
    /// Connection or protocol failure.
    #[error("transport error")]
    Transport(#[source] TransportError),
    /// The answer was longer than `max_response_bytes`.
    #[error("answer longer than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The node is stopping.
    #[error("the node is shutting down")]
    Shutdown,
}

impl DeliveryError {
    /// Whether another attempt may succeed: 5xx, timeouts and transport errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Status { status } => *status >= 500,
            Self::Timeout { .. } | Self::Transport(_) => true,
            Self::Refused { .. } | Self::TooLarge { .. } | Self::Shutdown => false,
        }
    }

    /// The metric outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Refused { .. } => Outcome::Refused,
            Self::Timeout { .. } => Outcome::Timeout,
            Self::Status { .. } => Outcome::Status,
            Self::Transport(_) => Outcome::Transport,
            Self::TooLarge { .. } => Outcome::TooLarge,
            Self::Shutdown => Outcome::Shutdown,
        }
    }
}
