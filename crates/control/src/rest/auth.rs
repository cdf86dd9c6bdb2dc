//! Who calls: the project API key of `Authorization: Bearer <key>`, found by its key id and
//! verified by its SHA-256 (compared in constant time), then the key's request rate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use skua_core::registry_store::{api_key_id, hex};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use super::Rest;
use super::error::ApiError;

/// Most keys the limiter remembers; beyond it, idle ones are forgotten first (a forgotten key
/// starts again with a full bucket).
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

/// Token buckets per API key (`rate` requests per `window`, burst `rate`), following tokio's
/// clock. Only keys that authenticated get a bucket, so the map is bounded by the registry's
/// keys (and [`MAX_TRACKED_KEYS`]).
#[derive(Debug)]
pub struct KeyLimiter {
    capacity: f64,
    per_sec: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl KeyLimiter {
    /// A limiter allowing `rate` requests per `window` per key.
    pub fn new(rate: u32, window: Duration) -> Self {
        let capacity = f64::from(rate.max(1));
        Self { capacity, per_sec: capacity / window.as_secs_f64().max(1e-9), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a request of `key`; how long until the next one is allowed when none is left.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let mut b = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if b.len() >= MAX_TRACKED_KEYS && !b.contains_key(key) {
            let (cap, rate) = (self.capacity, self.per_sec);
            b.retain(|_, (t, last)| *t + now.saturating_duration_since(*last).as_secs_f64() * rate < cap);
        }
        let (tokens, last) = b.entry(key.to_owned()).or_insert((self.capacity, now));
        *tokens = (*tokens + now.saturating_duration_since(*last).as_secs_f64() * self.per_sec).min(self.capacity);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_sec))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_gets_its_burst_then_waits_for_refill() {
        let l = KeyLimiter::new(3, Duration::from_secs(1));
        for _ in 0..3 {
            assert!(l.check("a").is_ok());
        }
        let wait = l.check("a").expect_err("the fourth request within the second is refused");
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(334), "{wait:?}");
        assert!(l.check("b").is_ok(), "another key has its own bucket");
        tokio::time::advance(Duration::from_millis(334)).await;
        assert!(l.check("a").is_ok());
    }
}
