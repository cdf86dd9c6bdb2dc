//! Idempotency backends (implementations of [`skua_core::Idempotency`]): a bounded map in this
//! process's memory for a single node, and Redis for a cluster.
//!
//! # Memory
//!
//! [`MemoryIdempotency`] keeps at most `max_keys` claims. When a new claim finds it full, the
//! oldest claim is evicted (its repeat is then delivered again: the window is shortened for
//! the oldest keys, never for the newest) and counted in [`MemoryIdempotency::evicted`].
//! Expired claims are dropped on the next claim, oldest first.
//!
//! # Redis
//!
//! [`RedisIdempotency`] keeps one string per claim, `<key_prefix>:idem:<key>`, holding the
//! claim's value, written with `SET … NX PX <window> GET` (one round trip, atomic across nodes;
//! Redis 7.0 or later) and released by a compare-and-delete script. Redis expires claims on its
//! own clock; memory is bounded by Redis's `maxmemory` policy, not here.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::conn::RedisConn;
use ::redis::Script;
use async_trait::async_trait;
use skua_core::{Idempotency, IdempotencyError};

/// Claims of publish idempotency keys in this process's memory, at most `max_keys` of them.
#[derive(Debug)]
pub struct MemoryIdempotency {
    max_keys: usize,
    inner: Mutex<Claims>,
    evicted: AtomicU64,
}

/// The map and its claims in claim order (for expiry and eviction).
#[derive(Debug, Default)]
struct Claims {
    keys: HashMap<Arc<str>, Held>,
    /// `(seq, key)` in claim order (the key shared with the map); an entry whose key now holds
    /// another `seq` is stale.
    order: VecDeque<(u64, Arc<str>)>,
    next_seq: u64,
}

#[derive(Debug)]
struct Held {
    value: String,
    expires: Instant,
    seq: u64,
}

impl Claims {
    /// Drops claims expired at `now`, oldest first, and stale order entries on the way.
    fn expire(&mut self, now: Instant) {
        while let Some((seq, key)) = self.order.front() {
            match self.keys.get(key) {
                Some(h) if h.seq == *seq && h.expires > now => break,
                Some(h) if h.seq == *seq => {
                    self.keys.remove(key);
                }
                _ => {}
            }
            self.order.pop_front();
        }
    }

    /// Removes the oldest live claim; `false` when there is none.
    fn evict_oldest(&mut self) -> bool {
        while let Some((seq, key)) = self.order.pop_front() {
            if self.keys.get(&key).is_some_and(|h| h.seq == seq) {
                self.keys.remove(&key);
                return true;
            }
        }
        false
    }
}

impl MemoryIdempotency {
    /// A map holding at most `max_keys` claims (at least one).
    pub fn new(max_keys: usize) -> Self {
        Self { max_keys: max_keys.max(1), inner: Mutex::new(Claims::default()), evicted: AtomicU64::new(0) }
    }

    /// Claims evicted before their window ended because the map was full.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Claims held now (expired ones included until the next claim drops them).
    pub fn len(&self) -> usize {
        self.lock().keys.len()
    }

    /// Whether no claim is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Claims> {
        // A panic while holding the lock leaves consistent data (every step is a whole insert
        // or remove), so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`Idempotency::claim`] at `now` (tests pass their own clock).
    pub fn claim_at(&self, key: &str, value: &str, window: Duration, now: Instant) -> Option<String> {
        let mut c = self.lock();
        c.expire(now);
        if let Some(h) = c.keys.get(key)
            && h.expires > now
        {
            return Some(h.value.clone());
        }
        // An expired claim of this key not yet dropped (a longer window queued before it) is
        // replaced; its order entry goes stale.
        if c.keys.remove(key).is_none() {
            while c.keys.len() >= self.max_keys && c.evict_oldest() {
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let seq = c.next_seq;
        c.next_seq = c.next_seq.wrapping_add(1);
        let expires = now.checked_add(window).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
        let key: Arc<str> = Arc::from(key);
        c.keys.insert(key.clone(), Held { value: value.to_owned(), expires, seq });
        c.order.push_back((seq, key));
        // Released claims leave stale order entries: keep the queue within twice the cap.
        if c.order.len() > self.max_keys.saturating_mul(2) {
            let Claims { keys, order, .. } = &mut *c;
            order.retain(|(seq, key)| keys.get(&**key).is_some_and(|h| h.seq == *seq));
        }
        None
    }

    /// [`Idempotency::release`], synchronously.
    pub fn release_now(&self, key: &str, value: &str) {
        let mut c = self.lock();
        if c.keys.get(key).is_some_and(|h| h.value == value) {
            c.keys.remove(key);
        }
    }
}

#[async_trait]
impl Idempotency for MemoryIdempotency {
    async fn claim(&self, key: &str, value: &str, window: Duration) -> Result<Option<String>, IdempotencyError> {
        Ok(self.claim_at(key, value, window, Instant::now()))
    }

    async fn release(&self, key: &str, value: &str) -> Result<(), IdempotencyError> {
        self.release_now(key, value);
        Ok(())
    }
}

/// Deletes `KEYS[1]` only while it holds `ARGV[1]`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")
});

/// Claims of publish idempotency keys in Redis, shared by every node of a cluster that uses the
/// same Redis and key prefix.
pub struct RedisIdempotency {
    conn: RedisConn,
    prefix: String,
}

impl std::fmt::Debug for RedisIdempotency {
    // Not derived: the manager's `Debug` shows the connection info, password included.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIdempotency").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl RedisIdempotency {
    /// Keeps claims under `<key_prefix>:idem:` on `conn` (the presence's Redis connection:
    /// [`crate::RedisPresence::idempotency`]).
    pub(crate) fn new(conn: RedisConn, key_prefix: &str) -> Self {
        Self { conn, prefix: format!("{key_prefix}:idem:") }
    }

    /// The Redis key of the claim of `key`.
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

fn unavailable(e: ::redis::RedisError) -> IdempotencyError {
    IdempotencyError::Unavailable(Box::new(e))
}

#[async_trait]
impl Idempotency for RedisIdempotency {
    async fn claim(&self, key: &str, value: &str, window: Duration) -> Result<Option<String>, IdempotencyError> {
        let ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut conn = self.conn.clone();
        ::redis::cmd("SET")
            .arg(self.redis_key(key))
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(ms)
            .arg("GET")
            .query_async::<Option<String>>(&mut conn)
            .await
            .map_err(unavailable)
    }

    async fn release(&self, key: &str, value: &str) -> Result<(), IdempotencyError> {
        let mut conn = self.conn.clone();
        RELEASE.key(self.redis_key(key)).arg(value).invoke_async::<i64>(&mut conn).await.map(drop).map_err(unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(120);

    #[test]
    fn a_repeat_within_the_window_gets_the_first_value() {
        let m = MemoryIdempotency::new(10);
        let t = Instant::now();
        assert_eq!(m.claim_at("p:k", "one", W, t), None);
        assert_eq!(m.claim_at("p:k", "two", W, t + W - Duration::from_millis(1)), Some("one".to_owned()));
        assert_eq!(m.claim_at("q:k", "three", W, t), None, "another scope is another key");
    }

    #[test]
    fn a_key_is_free_again_once_its_window_ended() {
        let m = MemoryIdempotency::new(10);
        let t = Instant::now();
        assert_eq!(m.claim_at("k", "one", W, t), None);
        assert_eq!(m.claim_at("k", "two", W, t + W), None, "expired exactly at the window's end");
        assert_eq!(m.claim_at("k", "three", W, t + W), Some("two".to_owned()));
        // Expired claims are dropped on the next claim.
        assert_eq!(m.claim_at("other", "x", W, t + W * 3), None);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn a_full_map_evicts_the_oldest_claim() {
        let m = MemoryIdempotency::new(3);
        let t = Instant::now();
        for (i, k) in ["a", "b", "c"].into_iter().enumerate() {
            assert_eq!(m.claim_at(k, k, W, t + Duration::from_millis(i as u64)), None);
        }
        assert_eq!(m.claim_at("d", "d", W, t + Duration::from_millis(10)), None);
        assert_eq!(m.len(), 3);
        assert_eq!(m.evicted(), 1);
        assert_eq!(m.claim_at("b", "x", W, t + Duration::from_millis(11)), Some("b".to_owned()), "b is kept");
        assert_eq!(m.claim_at("a", "a2", W, t + Duration::from_millis(12)), None, "a, the oldest, was evicted");
        assert_eq!(m.evicted(), 2, "claiming a again evicted the next oldest, b");
        assert_eq!(m.claim_at("c", "c2", W, t + Duration::from_millis(13)), Some("c".to_owned()), "c is kept");
        assert_eq!(m.claim_at("b", "b2", W, t + Duration::from_millis(14)), None, "b was evicted");
    }

    #[test]
    fn release_frees_only_the_claim_that_holds_the_value() {
        let m = MemoryIdempotency::new(10);
        let t = Instant::now();
        assert_eq!(m.claim_at("k", "one", W, t), None);
        m.release_now("k", "other");
        assert_eq!(m.claim_at("k", "two", W, t), Some("one".to_owned()), "a wrong value releases nothing");
        m.release_now("k", "one");
        assert_eq!(m.claim_at("k", "two", W, t), None, "released: the retry claims it");
    }

    #[test]
    fn released_claims_do_not_grow_the_queue_beyond_twice_the_cap() {
        let m = MemoryIdempotency::new(4);
        let t = Instant::now();
        for i in 0..100 {
            let k = format!("k{i}");
            assert_eq!(m.claim_at(&k, "v", W, t), None);
            m.release_now(&k, "v");
        }
        assert!(m.lock().order.len() <= 8);
        assert_eq!(m.evicted(), 0, "released claims are never evicted");
    }
}
