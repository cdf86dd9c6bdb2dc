//! [`RedisSharedLimits`]: fixed-window counters in Redis (issue 33). One script per take: it
//! reads every key's count, and only when each is below its maximum increments them all,
//! giving a key its expiry (the period) when it is created, so a window starts at a key's
//! first take. Keys: `<prefix>:limit:<key>`, a few bytes each, gone after their period.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::conn::RedisConn;
use ::redis::Script;
use async_trait::async_trait;
use skua_core::limits::SharedLimits;
use skua_core::presence::PresenceError;

/// KEYS = the counters; ARGV = their maxima, then the period in ms. Returns 1 when taken.
static TAKE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
for i, k in ipairs(KEYS) do
  if tonumber(redis.call('GET', k) or '0') >= tonumber(ARGV[i]) then return 0 end
end
for _, k in ipairs(KEYS) do
  if redis.call('INCR', k) == 1 then redis.call('PEXPIRE', k, ARGV[#ARGV]) end
end
return 1
",
    )
});

/// Fixed-window counters in Redis, shared by every node on the same Redis and prefix.
#[derive(Clone)]
pub struct RedisSharedLimits {
    conn: RedisConn,
    prefix: Arc<str>,
}

impl std::fmt::Debug for RedisSharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSharedLimits").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl RedisSharedLimits {
    /// Counters over `conn`, keys under `<key_prefix>:limit:`.
    pub fn new(conn: RedisConn, key_prefix: &str) -> Self {
        Self { conn, prefix: Arc::from(format!("{key_prefix}:limit:")) }
    }
}

#[async_trait]
impl SharedLimits for RedisSharedLimits {
    async fn take_all(&self, keys: &[(&str, u32)], period: Duration) -> Result<bool, PresenceError> {
        let mut inv = TAKE_ALL.prepare_invoke();
        for (k, _) in keys {
            inv.key(format!("{}{k}", self.prefix));
        }
        for (_, max) in keys {
            inv.arg(*max);
        }
        inv.arg(u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1));
        let mut conn = self.conn.clone();
        let taken: u8 = inv.invoke_async(&mut conn).await.map_err(|e| PresenceError::Unavailable(Box::new(e)))?;
        Ok(taken == 1)
    }
}
