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
    ActorId, Claim, ClaimedRecord, Consumer, DeadLetter, DeadLetterFilter, Holder, MemberStatus, MemberStore,
    MemberWrite, MessageLog, NewDeadLetter, NewMessage, NodeId, OutboxTrigger, ProjectId, RecordId, Release,
    RestoreKey, RestoreRecord, Retention, SessionKey, Store, StoreError, StoredMember, StoredMessage, TriggerStore,
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
    /// Persistent presence members (their own lock: never taken with `state`).
    members: crate::memory_members::MemoryMembers,
}

struct State {
    /// Session records (clientId sessions, and the actor-wide records of earlier releases).
    sessions: HashMap<SessionKey, Kept>,
    /// Connection records by actor, so a claim looks at one actor's records only.
    connections: HashMap<(ProjectId, ActorId), HashMap<RecordId, Kept>>,
    /// How many records `connections` holds.
    connection_count: usize,
    /// The release order of connection records: the next release gets this number.
    next_release: u64,
    /// `save_restore` sweeps expired records once the maps hold this many.
    sweep_at: usize,
    /// The message log of logged topics.
    log: MemoryLog,
}

struct Kept {
    record: RestoreRecord,
    /// Unix seconds from which the record is gone; `None` while it is in use.
    expires_at: Option<u64>,
    /// For a released connection record: its place in the release order (claims take the
    /// highest); `None` while in use, and after a claim.
    released: Option<u64>,
    /// The node whose connection saved or claimed it last.
    node: NodeId,
    /// Unix seconds of its last release (kept through claims and saves), `None` if never released.
    ended_s: Option<u64>,
}

impl Kept {
    /// Expired once `ttl_s` whole seconds have passed since the release: a record released at
    /// `t` with ttl 60 loads at `t + 59` and not at `t + 60`.
    fn is_expired(&self, now_unix_s: u64) -> bool {
        self.expires_at.is_some_and(|at| now_unix_s >= at)
    }

    fn in_use(record: RestoreRecord, node: NodeId) -> Self {
        Self {
            record: RestoreRecord { holder_last_seen_ms: None, ..record },
            expires_at: None,
            released: None,
            node,
            ended_s: None,
        }
    }

    /// Starts the expiry; a connection record also takes its place in the release order.
    fn release(&mut self, connection: bool, now_unix_s: u64, ttl_s: u64, next_release: &mut u64) {
        self.expires_at = Some(now_unix_s.saturating_add(ttl_s));
        self.ended_s = Some(now_unix_s);
        self.record.holder_last_seen_ms = None;
        self.released = connection.then_some(*next_release);
        *next_release += 1;
    }
}

impl State {
    /// Drops the actor's ended connection records beyond the newest
    /// [`crate::MAX_ENDED_RECORDS_PER_ACTOR`].
    fn cap_ended(&mut self, project: &ProjectId, actor: &ActorId) {
        let Some(records) = self.connections.get_mut(&(project.clone(), actor.clone())) else { return };
        let ended = records.values().filter(|k| k.released.is_some()).count();
        if ended <= crate::MAX_ENDED_RECORDS_PER_ACTOR {
            return;
        }
        let mut order: Vec<(u64, RecordId)> =
            records.iter().filter_map(|(id, k)| k.released.map(|r| (r, id.clone()))).collect();
        order.sort_unstable();
        let excess = ended - crate::MAX_ENDED_RECORDS_PER_ACTOR;
        for (_, id) in order.into_iter().take(excess) {
            records.remove(&id);
        }
        self.connection_count = self.connection_count.saturating_sub(excess);
    }

    fn len(&self) -> usize {
        self.sessions.len() + self.connection_count
    }

    fn get_mut(&mut self, key: &RestoreKey) -> Option<&mut Kept> {
        match key {
            RestoreKey::Session(k) => self.sessions.get_mut(k),
            RestoreKey::Connection(c) => {
                self.connections.get_mut(&(c.project.clone(), c.actor.clone()))?.get_mut(&c.id)
            }
        }
    }

    fn insert(&mut self, key: &RestoreKey, kept: Kept) {
        match key {
            RestoreKey::Session(k) => {
                self.sessions.insert(k.clone(), kept);
            }
            RestoreKey::Connection(c) => {
                let records = self.connections.entry((c.project.clone(), c.actor.clone())).or_default();
                if records.insert(c.id.clone(), kept).is_none() {
                    self.connection_count += 1;
                }
            }
        }
    }

    fn remove(&mut self, key: &RestoreKey) {
        match key {
            RestoreKey::Session(k) => {
                self.sessions.remove(k);
            }
            RestoreKey::Connection(c) => {
                let actor = (c.project.clone(), c.actor.clone());
                if let Some(records) = self.connections.get_mut(&actor) {
                    if records.remove(&c.id).is_some() {
                        self.connection_count -= 1;
                    }
                    if records.is_empty() {
                        self.connections.remove(&actor);
                    }
                }
            }
        }
    }

    fn sweep(&mut self, now_unix_s: u64) {
        self.sessions.retain(|_, kept| !kept.is_expired(now_unix_s));
        self.connections.retain(|_, records| {
            records.retain(|_, kept| !kept.is_expired(now_unix_s));
            !records.is_empty()
        });
        self.connection_count = self.connections.values().map(HashMap::len).sum();
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
            state: Mutex::new(State {
                sessions: HashMap::new(),
                connections: HashMap::new(),
                connection_count: 0,
                next_release: 0,
                sweep_at: MIN_SWEEP_LEN,
                log: MemoryLog::default(),
            }),
            clock,
            members: crate::memory_members::MemoryMembers::default(),
        }
    }

    /// How many records are held, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.lock().len()
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
    async fn save_restore(&self, key: &RestoreKey, node: &NodeId, record: &RestoreRecord) -> Result<(), StoreError> {
        let now = (self.clock)();
        let mut state = self.lock();
        // A save keeps when the record last ended (contract 4's window).
        let ended_s = state.get_mut(key).and_then(|k| k.ended_s);
        state.insert(key, Kept { ended_s, ..Kept::in_use(record.clone(), node.clone()) });
        if state.len() >= state.sweep_at {
            state.sweep(now);
            state.sweep_at = (state.len() * 2).max(MIN_SWEEP_LEN);
        }
        Ok(())
    }

    /// # Errors
    /// None.
    async fn load_restore(&self, key: &RestoreKey) -> Result<Option<RestoreRecord>, StoreError> {
        let now = (self.clock)();
        let mut state = self.lock();
        match state.get_mut(key) {
            Some(kept) if kept.is_expired(now) => {
                state.remove(key);
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
    async fn release_restore(&self, key: &RestoreKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        let mut state = self.lock();
        let mut next = state.next_release;
        if let Some(kept) = state.get_mut(key) {
            kept.release(matches!(key, RestoreKey::Connection(_)), now_unix_s, ttl_s, &mut next);
        }
        state.next_release = next;
        if let RestoreKey::Connection(c) = key {
            state.cap_ended(&c.project, &c.actor);
        }
        Ok(())
    }

    /// Sweeps out every expired record (the cap of contract 6 is kept at each release already).
    ///
    /// # Errors
    /// None.
    async fn prune_restores(&self, now_unix_s: u64, _min_interval_s: u64, _batch: u64) -> Result<u64, StoreError> {
        let mut state = self.lock();
        let before = state.sessions.len() + state.connection_count;
        state.sweep(now_unix_s);
        let after = state.sessions.len() + state.connection_count;
        Ok(u64::try_from(before.saturating_sub(after)).unwrap_or(u64::MAX))
    }

    /// # Errors
    /// None.
    async fn claim_restore(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        node: &NodeId,
        together_s: Option<u64>,
    ) -> Result<Option<ClaimedRecord>, StoreError> {
        let now = (self.clock)();
        let mut state = self.lock();
        let Some(records) = state.connections.get_mut(&(project.clone(), actor.clone())) else { return Ok(None) };
        let last = records
            .iter_mut()
            .filter(|(_, kept)| kept.released.is_some() && !kept.is_expired(now))
            .max_by_key(|(_, kept)| kept.released);
        let Some((id, kept)) = last else { return Ok(None) };
        kept.expires_at = None;
        kept.released = None;
        kept.node = node.clone();
        let (id, record, ended_s) = (id.clone(), kept.record.clone(), kept.ended_s);
        let together = match (together_s, ended_s) {
            (Some(w), Some(ended)) => {
                let mut near: Vec<(u64, &Kept)> = records
                    .iter()
                    .filter(|(other, k)| **other != id && !k.is_expired(now))
                    .filter_map(|(_, k)| k.ended_s.filter(|e| e.abs_diff(ended) <= w).map(|e| (e, k)))
                    .collect();
                near.sort_by_key(|(e, _)| std::cmp::Reverse(*e));
                near.into_iter().take(skua_core::store::MAX_ENDED_TOGETHER).map(|(_, k)| k.record.clone()).collect()
            }
            _ => Vec::new(),
        };
        Ok(Some(ClaimedRecord { id, record, together }))
    }

    /// # Errors
    /// None.
    async fn restore_holders(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        except: &NodeId,
        limit: usize,
    ) -> Result<Vec<NodeId>, StoreError> {
        let state = self.lock();
        let Some(records) = state.connections.get(&(project.clone(), actor.clone())) else { return Ok(Vec::new()) };
        let holders: std::collections::BTreeSet<&NodeId> = records
            .values()
            .filter(|kept| kept.expires_at.is_none() && kept.node != *except)
            .map(|kept| &kept.node)
            .collect();
        Ok(holders.into_iter().take(limit).cloned().collect())
    }

    /// A scan of every record: nodes lapse rarely.
    ///
    /// # Errors
    /// None.
    async fn release_node_restores(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        last_seen_ms: Option<u64>,
    ) -> Result<u64, StoreError> {
        Ok(self.release_held(|n| n == node, now_unix_s, ttl_s, last_seen_ms))
    }

    async fn release_other_nodes_restores(
        &self,
        keep: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
    ) -> Result<u64, StoreError> {
        Ok(self.release_held(|n| n != keep, now_unix_s, ttl_s, None))
    }
}

impl MemoryStore {
    /// Releases every record in use held by a node `of` selects; returns how many.
    /// They load with `holder_last_seen_ms` set to `last_seen_ms`.
    fn release_held(
        &self,
        of: impl Fn(&NodeId) -> bool,
        now_unix_s: u64,
        ttl_s: u64,
        last_seen_ms: Option<u64>,
    ) -> u64 {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut next = state.next_release;
        let mut released = 0;
        let held = |kept: &Kept| kept.expires_at.is_none() && of(&kept.node);
        for kept in state.sessions.values_mut().filter(|k| held(k)) {
            kept.release(false, now_unix_s, ttl_s, &mut next);
            kept.record.holder_last_seen_ms = last_seen_ms;
            released += 1;
        }
        for kept in state.connections.values_mut().flat_map(HashMap::values_mut).filter(|k| held(k)) {
            kept.release(true, now_unix_s, ttl_s, &mut next);
            kept.record.holder_last_seen_ms = last_seen_ms;
            released += 1;
        }
        state.next_release = next;
        released
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

    async fn claim_many(&self, claims: &[skua_core::LiveClaim<'_>]) -> Result<Vec<Claim>, StoreError> {
        let mut g = self.lock();
        Ok(claims.iter().map(|c| g.log.claim(c.consumer, c.msg_id, c.holder)).collect())
    }

    async fn list_consumers(
        &self,
        prefix: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<skua_core::ConsumerBacklog>, StoreError> {
        Ok(self.lock().log.list_consumers(prefix, after, limit))
    }

    async fn backlog(&self, consumer: &str) -> Result<(u64, u64), StoreError> {
        Ok(self.lock().log.backlog(consumer))
    }

    async fn claim_page(
        &self,
        consumer: &str,
        holder: Holder<'_>,
        seqs: std::ops::RangeInclusive<u64>,
        limit: u32,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        Ok(self.lock().log.claim_page(consumer, holder, seqs, limit))
    }

    async fn ack(&self, consumer: &str, msg_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().log.ack(consumer, msg_id))
    }

    async fn ack_many(&self, acks: &[(&str, &str)]) -> Result<Vec<bool>, StoreError> {
        let mut g = self.lock();
        Ok(acks.iter().map(|(consumer, msg_id)| g.log.ack(consumer, msg_id)).collect())
    }

    async fn release(&self, scope: Release<'_>) -> Result<Vec<String>, StoreError> {
        Ok(self.lock().log.release(scope))
    }

    async fn prune_log(&self, now_unix_s: u64, retention: Retention) -> Result<u64, StoreError> {
        Ok(self.lock().log.prune(now_unix_s, retention))
    }
}

#[async_trait]
impl MemberStore for MemoryStore {
    async fn upsert_member(&self, write: &MemberWrite<'_>) -> Result<Option<StoredMember>, StoreError> {
        Ok(self.members.upsert(write))
    }

    async fn members_offline(
        &self,
        room: &str,
        actor: &str,
        expires_at_s: u64,
    ) -> Result<Vec<StoredMember>, StoreError> {
        Ok(self.members.members_offline(room, actor, expires_at_s))
    }

    async fn other_nodes_members_offline(
        &self,
        keep: &str,
        expires_at_s: u64,
    ) -> Result<Vec<StoredMember>, StoreError> {
        Ok(self.members.other_nodes_offline(keep, expires_at_s))
    }

    async fn delete_members(&self, room: &str, actor: &str) -> Result<u64, StoreError> {
        Ok(self.members.delete(room, actor))
    }

    async fn list_members(&self, room: &str, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        Ok(self.members.list(room, now_s, limit))
    }

    async fn wake_candidates(&self, room: &str, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        Ok(self.members.candidates(room, now_s, limit))
    }

    async fn begin_wake(&self, room: &str, actor: &str, client_id: &str, until_ms: u64) -> Result<bool, StoreError> {
        Ok(self.members.transition(room, actor, client_id, MemberStatus::Offline, MemberStatus::Waking, until_ms))
    }

    async fn end_wake(&self, room: &str, actor: &str, client_id: &str) -> Result<bool, StoreError> {
        Ok(self.members.transition(room, actor, client_id, MemberStatus::Waking, MemberStatus::Offline, 0))
    }

    async fn expired_wakes(&self, now_ms: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        Ok(self.members.expired_wakes(now_ms, limit))
    }

    async fn expire_members(&self, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        Ok(self.members.expire(now_s, limit))
    }
}

#[async_trait]
impl TriggerStore for MemoryStore {
    async fn claim_outbox(
        &self,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
        limit: u32,
    ) -> Result<Vec<OutboxTrigger>, StoreError> {
        Ok(self.lock().log.claim_outbox(owner, now_ms, lease_until_ms, limit))
    }

    async fn renew_outbox(&self, msg_id: &str, owner: &str, lease_until_ms: u64) -> Result<Option<u32>, StoreError> {
        Ok(self.lock().log.renew_outbox(msg_id, owner, lease_until_ms))
    }

    async fn finish_outbox(&self, msg_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().log.finish_outbox(msg_id))
    }

    async fn expire_outbox_leases(&self, keep: &str) -> Result<u64, StoreError> {
        Ok(self.lock().log.expire_outbox_leases(keep))
    }

    async fn dead_letter(&self, letter: &NewDeadLetter<'_>, cap: skua_core::DeadLetterCap) -> Result<u64, StoreError> {
        Ok(self.lock().log.dead_letter(letter, cap))
    }

    async fn dead_letters(
        &self,
        letters: &[NewDeadLetter<'_>],
        cap: skua_core::DeadLetterCap,
    ) -> Result<u64, StoreError> {
        let mut store = self.lock();
        Ok(letters.iter().map(|l| store.log.dead_letter(l, cap)).sum())
    }

    async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter<'_>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(self.lock().log.list_dead_letters(filter, after, limit))
    }

    async fn delete_dead_letters(&self, filter: DeadLetterFilter<'_>) -> Result<u64, StoreError> {
        Ok(self.lock().log.delete_dead_letters(filter))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn node() -> NodeId {
        NodeId::parse("node-1").unwrap()
    }

    fn key(i: usize) -> RestoreKey {
        RestoreKey::Session(SessionKey {
            project: ProjectId::parse("p").unwrap(),
            actor: ActorId::parse(&format!("actor-{i}")).unwrap(),
            client_id: None,
        })
    }

    #[tokio::test]
    async fn save_sweeps_expired_records_once_the_map_is_large() {
        let now = Arc::new(AtomicU64::new(1_000));
        let clock = now.clone();
        let store = MemoryStore::with_clock(Arc::new(move || clock.load(Ordering::Relaxed)));
        let record = RestoreRecord::default();
        for i in 0..MIN_SWEEP_LEN - 1 {
            store.save_restore(&key(i), &node(), &record).await.unwrap();
            store.release_restore(&key(i), 1_000, 10).await.unwrap();
        }
        assert_eq!(store.len(), MIN_SWEEP_LEN - 1);
        now.store(2_000, Ordering::Relaxed);
        store.save_restore(&key(MIN_SWEEP_LEN), &node(), &record).await.unwrap();
        assert_eq!(store.len(), 1, "only the record just saved is left");
    }

    #[tokio::test]
    async fn load_removes_an_expired_record() {
        let store = MemoryStore::with_clock(Arc::new(|| 5_000));
        store.save_restore(&key(1), &node(), &RestoreRecord::default()).await.unwrap();
        store.release_restore(&key(1), 1_000, 10).await.unwrap();
        assert_eq!(store.load_restore(&key(1)).await.unwrap(), None);
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn system_clock_is_the_default() {
        let store = MemoryStore::new();
        store.save_restore(&key(1), &node(), &RestoreRecord::default()).await.unwrap();
        store.release_restore(&key(1), 0, 10).await.unwrap();
        assert_eq!(store.load_restore(&key(1)).await.unwrap(), None, "released in 1970");
    }
}
