//! Who calls: the project API key of `Authorization: Bearer <key>`, found by its key id and
//! verified by its SHA-256 (compared in constant time), then the key's request rate.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use skua_core::registry_store::{api_key_id, hex};
use subtle::ConstantTimeEq;

use super::Rest;
use super::error::ApiError;

/// Keys the limiter tracks before it forgets those back at a full burst.
const MAX_TRACKED_KEYS: usize = 10_000;

/// An authenticated caller: the key's id (logged with every write, never the key) and project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The API key's id.
    pub key_id: String,
    /// The key's project: every request sees only it.
    pub project: String,
}

impl Caller {
    /// Logs a write made with this key.
    pub(crate) fn audit(&self, action: &str, id: &str) {
        tracing::info!(key_id = %self.key_id, project = %self.project, action, id, "REST write.");
    }
}

impl FromRequestParts<Arc<Rest>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, rest: &Arc<Rest>) -> Result<Self, ApiError> {
        let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m);
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(unauthorized("missing API key: send `Authorization: Bearer <key>`"));
        };
        let value = value.to_str().unwrap_or_default().trim();
        let key = match value.split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => key.trim(),
            _ => return Err(unauthorized("the Authorization header must be `Bearer <key>`")),
        };
        if key.is_empty() || key.len() > 512 {
            return Err(unauthorized("invalid API key"));
        }
        let id = api_key_id(key);
        let snap = rest.svc.snapshot();
        let given = hex(&skua_core::registry::digest(key));
        let record = snap.data.api_keys.get(&id).filter(|k| bool::from(k.sha256.as_bytes().ct_eq(given.as_bytes())));
        let Some(record) = record else {
            tracing::debug!(key_id = %id, "REST request with an unknown or wrong API key.");
            return Err(unauthorized("invalid API key"));
        };
        if let Err(wait) = rest.limiter.check(&record.key_id) {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("more than {} requests per second with this API key; retry in {secs}s", rest.config.rate_limit),
            );
            e.retry_after = Some(secs.max(1));
            return Err(e);
        }
        Ok(Self { key_id: record.key_id.clone(), project: record.project.clone() })
    }
}

/// Requests per API key: governor's keyed GCRA limiter (`rate` per `window`, burst `rate`).
/// Only keys that authenticated are tracked, so the state is bounded by the registry's keys;
/// past [`MAX_TRACKED_KEYS`] the ones that are back to a full burst are forgotten.
pub struct KeyLimiter {
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

impl std::fmt::Debug for KeyLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLimiter").field("keys", &self.limiter.len()).finish()
    }
}

impl KeyLimiter {
    /// A limiter allowing `rate` requests per `window` per key.
    pub fn new(rate: u32, window: Duration) -> Self {
        let burst = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
        let quota =
            Quota::with_period(window / burst.get()).unwrap_or_else(|| Quota::per_second(burst)).allow_burst(burst);
        Self { limiter: RateLimiter::keyed(quota), clock: DefaultClock::default() }
    }

    /// Takes a request of `key`; how long until the next one is allowed when none is left.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let key = key.to_owned();
        if self.limiter.len() >= MAX_TRACKED_KEYS {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&key).map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_is_told_how_long_to_wait() {
        let l = KeyLimiter::new(3, Duration::from_secs(1));
        for _ in 0..3 {
            assert!(l.check("a").is_ok());
        }
        let wait = l.check("a").expect_err("the fourth request within the second is refused");
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(334), "{wait:?}");
        assert!(l.check("b").is_ok(), "another key has its own budget");
    }
}
