//! Fixed-window counters shared by the nodes of a cluster (issue 33): the wake limits
//! (`wake_limit_per_actor`, `wake_limit_per_url`) count in Redis when presence is in Redis, so
//! N nodes allow the limit once, not N times.

use std::time::Duration;

use async_trait::async_trait;

use crate::presence::PresenceError;

/// Counters per key in fixed windows of a period, shared by every node that uses the same
/// backend.
#[async_trait]
pub trait SharedLimits: std::fmt::Debug + Send + Sync + 'static {
    /// Takes one from every `(key, max)` of `keys` if each has fewer than `max` taken in its
    /// current window (a window starts at a key's first take and lasts `period`): `Ok(true)`.
    /// Otherwise takes nothing: `Ok(false)`. Atomic across nodes.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed (callers fall back to counting locally).
    async fn take_all(&self, keys: &[(&str, u32)], period: Duration) -> Result<bool, PresenceError>;
}
