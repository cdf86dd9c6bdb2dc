//! The idempotency slot: remembers publish idempotency keys for a window, so a repeated publish
//! is answered without being delivered again (issue 19, item 4).
//!
//! Keys arrive already scoped by the caller (`<project>:<client key>`): two projects never
//! share one. The first publish of a key *claims* it with a value (what the repeat is answered
//! with); a repeat within the window gets that value back and claims nothing; a first publish
//! that then fails *releases* its claim, so the key does not block a retry.

use std::time::Duration;

use async_trait::async_trait;

/// Why an idempotency operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The backend is unreachable.
    #[error("idempotency backend unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Remembers claimed keys for a window. Every implementation guarantees:
///
/// 1. `claim` is atomic per key: of any number of concurrent claims of one free key, exactly
///    one returns `None` (it claimed the key), every other one the winner's value.
/// 2. A claimed key is free again `window` after its claim (or earlier: see each backend's
///    bound on how many keys it keeps).
/// 3. `release(key, value)` frees the key only while it still holds `value` (a claim made
///    after the window by someone else is left alone).
#[async_trait]
pub trait Idempotency: std::fmt::Debug + Send + Sync + 'static {
    /// Claims `key` with `value` for `window`; `None` when this call claimed it, else the value
    /// of the claim that holds it.
    ///
    /// # Errors
    /// [`IdempotencyError`] when the backend failed; nothing was claimed.
    async fn claim(&self, key: &str, value: &str, window: Duration) -> Result<Option<String>, IdempotencyError>;

    /// Frees `key` if it still holds `value`.
    ///
    /// # Errors
    /// [`IdempotencyError`] when the backend failed; the claim then lapses with its window.
    async fn release(&self, key: &str, value: &str) -> Result<(), IdempotencyError>;
}
