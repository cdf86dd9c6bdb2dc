//! The one seam every webhook request of a node goes through: trigger (N44), hydration (N43)
//! and wake (N47) deliveries are each a [`Post`] handed to the node's [`Poster`] with its
//! [`Attempts`]. `skua-webhooks` implements it (pooled HTTP clients, the address rules, N42
//! signing, counters per kind and outcome); the engine decides what to post and when.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::{WebhookKind, WebhookSecret, WebhookTarget};

/// The waits between the attempts of a request its caller waits for (hydration, wake): 3
/// attempts, 1 s then 2 s apart, every attempt and wait within the request's timeout (N43).
pub const CALL_RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(2)];

/// One webhook request: where it goes and what it carries.
#[derive(Debug, Clone)]
pub struct Post<'a> {
    /// What it is for: picks the address rule and the counters' `kind` label.
    pub kind: WebhookKind,
    /// The URL, the configured headers and timeout.
    pub target: &'a WebhookTarget,
    /// The secret the body is signed with (N42), when there is one.
    pub secret: Option<&'a WebhookSecret>,
    /// The body's `deliveryId` (the same on every attempt), for traces.
    pub delivery_id: &'a str,
    /// The JSON body, sent as is ([`json_body`] builds one from a payload).
    pub body: Bytes,
}

/// How many attempts a [`Post`] gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts<'a> {
    /// One attempt within the target's timeout, for a caller that runs its own retries and
    /// queue (triggers); `retry`: an earlier attempt of this delivery was made (counted in
    /// `skua_webhook_retries_total`).
    Once {
        /// Whether an earlier attempt of this delivery was made.
        retry: bool,
    },
    /// Attempts `delays` apart (a failure that may succeed on another attempt only: 5xx,
    /// timeouts, transport errors), every attempt and wait within `budget` overall.
    Within {
        /// The wait before attempt 2, 3, …; attempts = delays + 1.
        delays: &'a [Duration],
        /// The time all attempts may take together.
        budget: Duration,
    },
}

/// A 2xx answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body, at most `webhook_max_response_bytes`.
    pub body: Bytes,
}

/// Why a post failed (its last attempt's failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct PostFailure {
    /// The `skua_webhook_deliveries_total` outcome label (`status`, `timeout`, `transport`,
    /// `refused`, `too_large`, `shutdown`).
    pub outcome: &'static str,
    /// What happened, with its causes, for logs and dead letters.
    pub error: String,
    /// Whether another attempt may succeed (5xx, timeouts, transport errors); a refused
    /// address or a 4xx answer will not.
    pub retryable: bool,
}

/// One recent webhook delivery of a node, as the admin dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentWebhook {
    /// `hydration`, `trigger` or `wake`.
    pub kind: &'static str,
    /// The target's host (never its path or query).
    pub host: String,
    /// How it ended: `ok`, `status`, `timeout`, `transport`, `refused`, … (the
    /// `skua_webhook_deliveries_total` outcome label).
    pub outcome: &'static str,
    /// The HTTP status of the last answer, if one came.
    pub status: Option<u16>,
    /// From the first attempt to the outcome, ms.
    pub latency_ms: u64,
    /// When it ended, unix ms.
    pub at_unix_ms: u64,
}

/// Sends a node's webhook requests.
#[async_trait::async_trait]
pub trait Poster: Send + Sync + 'static {
    /// Posts `post` with `attempts`; each attempt is counted, the outcome once.
    ///
    /// # Errors
    /// [`PostFailure`]: the last attempt's failure (no 2xx answer).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future abandons the request.
    async fn post(&self, post: Post<'_>, attempts: Attempts<'_>) -> Result<Answer, PostFailure>;

    /// The last deliveries' outcomes (every kind), newest first.
    fn recent(&self) -> Vec<RecentWebhook>;
}

/// The body of a request built from `payload`: the payload with `deliveryId` and `timestamp`
/// (unix ms) added, as JSON.
pub fn json_body(mut payload: Map<String, Value>, delivery_id: &str, timestamp_ms: u64) -> Bytes {
    payload.insert("deliveryId".into(), Value::String(delivery_id.to_owned()));
    payload.insert("timestamp".into(), Value::from(timestamp_ms));
    // A map of JSON values always serializes.
    Bytes::from(serde_json::to_vec(&payload).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_body_carries_the_delivery_id_and_timestamp() {
        let mut m = Map::new();
        m.insert("topicName".into(), "t".into());
        let body = json_body(m, "d-1", 1_700_000_000_000);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["deliveryId"], "d-1");
        assert_eq!(v["timestamp"], 1_700_000_000_000u64);
        assert_eq!(v["topicName"], "t");
    }
}
