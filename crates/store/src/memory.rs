//! [`MemoryStore`]: restore records in this process's memory.
//!
//! For a single node that may lose its sessions on restart, and for tests; durable stores
//! (`SqliteStore`, `PostgresStore`) sit beside it. One map behind one `std::sync::Mutex`, each
//! operation one short critical section with no `.await`.
//!
//! Memory stays bounded by the live sessions plus the released ones still inside their ttl:
//! an expired record is removed when `load_restore` finds it, and `save_restore` sweeps out
//! every expired record whenever the map has doubled since the last sweep (amortised O(1)).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use skua_core::{
    Claim, Consumer, Holder, MessageLog, NewMessage, Release, RestoreRecord, Retention, SessionKey, Store, StoreError,
    StoredMessage,
};

use crate::clock::{UnixClock, system_clock};
use crate::memory_log::MemoryLog;

/// Below this many records `save_restore` never sweeps.
const MIN_SWEEP_LEN: usize = 1024;

/// In-memory restore records. Cheap to create; share one instance (behind an `Arc`) among all
/// users.
pub struct MemoryStore {
    /// `std::sync::Mutex`: every section is a few map operations and never awaits.
    state: Mutex<State>,
    clock: UnixClock,
}

struct State {
    records: HashMap<SessionKey, Kept>,
    /// `save_restore` sweeps expired records once the map is this large.
    sweep_at: usize,
    /// The message log of logged topics.
    log: MemoryLog,
}

struct Kept {
    record: RestoreRecord,
    /// Unix seconds from which the record is gone; `None` while it is in use.
    expires_at: Option<u64>,
}

impl Kept {
    /// Expired once `ttl_s` whole seconds have passed since the release: a record released at
    /// `t` with ttl 60 loads at `t + 59` and not at `t + 60`.
    fn is_expired(&self, now_unix_s: u64) -> bool {
        self.expires_at.is_some_and(|at| now_unix_s >= at)
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(system_clock())
    }

    /// An empty store that reads the time from `clock` when it checks expiry (tests inject a
    /// settable clock instead of sleeping).
    pub fn with_clock(clock: UnixClock) -> Self {
        Self {
            state: Mutex::new(State { records: HashMap::new(), sweep_at: MIN_SWEEP_LEN, log: MemoryLog::default() }),
            clock,
        }
    }

    /// How many records are held, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, so a poisoned map is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("records", &self.len()).finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for MemoryStore {
    /// # Errors
    /// None.
    async fn save_restore(&self, key: &SessionKey, record: &RestoreRecord) -> Result<(), StoreError> {
        let now = (self.clock)();
        let mut state = self.lock();
        state.records.insert(key.clone(), Kept { record: record.clone(), expires_at: None });
        if state.records.len() >= state.sweep_at {
            state.records.retain(|_, kept| !kept.is_expired(now));
            state.sweep_at = (state.records.len() * 2).max(MIN_SWEEP_LEN);
        }
        Ok(())
    }

    /// # Errors
    /// None.
    async fn load_restore(&self, key: &SessionKey) -> Result<Option<RestoreRecord>, StoreError> {
        let now = (self.clock)();
        let mut state = self.lock();
        match state.records.get(key) {
            Some(kept) if kept.is_expired(now) => {
                state.records.remove(key);
                Ok(None)
            }
            Some(kept) => Ok(Some(kept.record.clone())),
            None => Ok(None),
        }
    }

    /// Releasing a key without a record does nothing.
    ///
    /// # Errors
    /// None.
    async fn release_restore(&self, key: &SessionKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        if let Some(kept) = self.lock().records.get_mut(key) {
            kept.expires_at = Some(now_unix_s.saturating_add(ttl_s));
        }
        Ok(())
    }
}

/// The log in maps ([`crate::memory_log`]), behind the same lock as the records.
#[async_trait]
impl MessageLog for MemoryStore {
    async fn append(&self, message: &NewMessage<'_>, now_unix_s: u64) -> Result<u64, StoreError> {
        Ok(self.lock().log.append(message, now_unix_s))
    }

    async fn open_consumer(&self, consumer: &Consumer, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        self.lock().log.open_consumer(consumer, now_unix_s, ttl_s);
        Ok(())
    }

    async fn touch_consumers(&self, ids: &[&str], now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        self.lock().log.touch(ids, now_unix_s, ttl_s);
        Ok(())
    }

    async fn drop_consumer(&self, id: &str) -> Result<(), StoreError> {
        self.lock().log.drop_consumer(id);
        Ok(())
    }

    async fn claim(&self, consumer: &str, msg_id: &str, holder: Holder<'_>) -> Result<Claim, StoreError> {
        Ok(self.lock().log.claim(consumer, msg_id, holder))
    }

    async fn backlog(&self, consumer: &str) -> Result<(u64, u64), StoreError> {
        Ok(self.lock().log.backlog(consumer))
    }

    async fn claim_page(
        &self,
        consumer: &str,
        holder: Holder<'_>,
        up_to: u64,
        limit: u32,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        Ok(self.lock().log.claim_page(consumer, holder, up_to, limit))
    }

    async fn ack(&self, consumer: &str, msg_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().log.ack(consumer, msg_id))
    }

    async fn release(&self, scope: Release<'_>) -> Result<Vec<String>, StoreError> {
        Ok(self.lock().log.release(scope))
    }

    async fn prune_log(&self, now_unix_s: u64, retention: Retention) -> Result<u64, StoreError> {
        Ok(self.lock().log.prune(now_unix_s, retention))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use skua_core::{ActorId, ProjectId};

    use super::*;

    fn key(i: usize) -> SessionKey {
        SessionKey {
            project: ProjectId::parse("p").unwrap(),
            actor: ActorId::parse(&format!("actor-{i}")).unwrap(),
            client_id: None,
        }
    }

    #[tokio::test]
    async fn save_sweeps_expired_records_once_the_map_is_large() {
        let now = Arc::new(AtomicU64::new(1_000));
        let clock = now.clone();
        let store = MemoryStore::with_clock(Arc::new(move || clock.load(Ordering::Relaxed)));
        let record = RestoreRecord::default();
        for i in 0..MIN_SWEEP_LEN - 1 {
            store.save_restore(&key(i), &record).await.unwrap();
            store.release_restore(&key(i), 1_000, 10).await.unwrap();
        }
        assert_eq!(store.len(), MIN_SWEEP_LEN - 1);
        now.store(2_000, Ordering::Relaxed);
        store.save_restore(&key(MIN_SWEEP_LEN), &record).await.unwrap();
        assert_eq!(store.len(), 1, "only the record just saved is left");
    }

    #[tokio::test]
    async fn load_removes_an_expired_record() {
        let store = MemoryStore::with_clock(Arc::new(|| 5_000));
        store.save_restore(&key(1), &RestoreRecord::default()).await.unwrap();
        store.release_restore(&key(1), 1_000, 10).await.unwrap();
        assert_eq!(store.load_restore(&key(1)).await.unwrap(), None);
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn system_clock_is_the_default() {
        let store = MemoryStore::new();
        store.save_restore(&key(1), &RestoreRecord::default()).await.unwrap();
        store.release_restore(&key(1), 0, 10).await.unwrap();
        assert_eq!(store.load_restore(&key(1)).await.unwrap(), None, "released in 1970");
    }
}
