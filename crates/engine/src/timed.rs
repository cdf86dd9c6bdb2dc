//! Latency and error accounting around the backend slots: [`TimedBus`], [`TimedPresence`] and
//! [`TimedStore`] wrap any implementation, record each operation's duration in
//! [`Metrics::backend_latency`] and its failures in [`Metrics::backend_errors`], and forward
//! everything else (availability, close) unchanged. Every trait method is forwarded explicitly,
//! so a default method of the trait never hides the wrapped backend's own.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use skua_core::{
    ActorId, Bus, BusError, BusSubscription, Claim, ClaimedRecord, ConnRef, Consumer, Envelope, Holder, MemberStore,
    MemberWrite, MessageLog, NewMessage, NodeId, Presence, PresenceChange, PresenceEntry, PresenceError, ProjectId,
    Release, RestoreKey, RestoreRecord, Retention, RoomKey, Store, StoreError, StoredMember, StoredMessage,
    TriggerStore,
};

use crate::metrics::Metrics;

/// Times `fut` as operation `op` of `slot`, counting it as an error when it fails.
async fn timed<T, E>(
    metrics: &Metrics,
    slot: &'static str,
    op: &'static str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let start = Instant::now();
    let r = if crate::trace::enabled() {
        tracing::Instrument::instrument(fut, crate::trace::backend_span(slot, op)).await
    } else {
        fut.await
    };
    metrics.backend_latency.observe(slot, op, start.elapsed());
    if r.is_err() {
        metrics.backend_errors.inc(slot, op);
    }
    r
}

/// A bus whose operations are timed.
pub struct TimedBus {
    inner: Arc<dyn Bus>,
    metrics: Arc<Metrics>,
    /// The `bus`/`publish` histogram, taken from the family at the first publish: every
    /// publish passes here, so it skips the family's lock and look-up.
    publish_latency: std::sync::OnceLock<Arc<crate::metrics::Histogram>>,
}

impl TimedBus {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Bus>, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics, publish_latency: std::sync::OnceLock::new() }
    }
}

#[async_trait]
impl Bus for TimedBus {
    async fn publish(&self, envelope: Arc<Envelope>) -> Result<(), BusError> {
        if crate::trace::enabled() {
            return timed(&self.metrics, "bus", "publish", self.inner.publish(envelope)).await;
        }
        let start = Instant::now();
        let r = self.inner.publish(envelope).await;
        self.publish_latency
            .get_or_init(|| self.metrics.backend_latency.get("bus", "publish"))
            .observe(start.elapsed());
        if r.is_err() {
            self.metrics.backend_errors.inc("bus", "publish");
        }
        r
    }

    async fn subscribe(&self, sub: &BusSubscription) -> Result<(), BusError> {
        timed(&self.metrics, "bus", "subscribe", self.inner.subscribe(sub)).await
    }

    async fn unsubscribe(&self, sub: &BusSubscription) -> Result<(), BusError> {
        timed(&self.metrics, "bus", "unsubscribe", self.inner.unsubscribe(sub)).await
    }

    fn is_available(&self) -> bool {
        self.inner.is_available()
    }

    fn forget_retained(&self, topics: &[skua_core::TopicAddress]) {
        self.inner.forget_retained(topics);
    }

    fn set_sink(&self, sink: std::sync::Weak<dyn skua_core::DeliverySink>) -> bool {
        self.inner.set_sink(sink)
    }

    async fn close(&self, grace: std::time::Duration) {
        self.inner.close(grace).await;
    }
}

/// A presence store whose operations are timed.
pub struct TimedPresence {
    inner: Arc<dyn Presence>,
    metrics: Arc<Metrics>,
}

impl TimedPresence {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Presence>, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }
}

#[async_trait]
impl Presence for TimedPresence {
    async fn announce(
        &self,
        room: &RoomKey,
        actor: &ActorId,
        conn: &ConnRef,
        data: Bytes,
        now_unix_s: u64,
    ) -> Result<PresenceChange, PresenceError> {
        timed(&self.metrics, "presence", "announce", self.inner.announce(room, actor, conn, data, now_unix_s)).await
    }

    async fn remove(&self, room: &RoomKey, actor: &ActorId, conn: &ConnRef) -> Result<bool, PresenceError> {
        timed(&self.metrics, "presence", "remove", self.inner.remove(room, actor, conn)).await
    }

    async fn list(&self, room: &RoomKey) -> Result<Vec<PresenceEntry>, PresenceError> {
        timed(&self.metrics, "presence", "list", self.inner.list(room)).await
    }

    async fn remove_node(&self, node: &NodeId) -> Result<Vec<(RoomKey, ActorId)>, PresenceError> {
        timed(&self.metrics, "presence", "remove_node", self.inner.remove_node(node)).await
    }

    async fn refresh_node(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        bus_up: bool,
    ) -> Result<bool, PresenceError> {
        let refresh = self.inner.refresh_node(node, now_unix_s, ttl_s, bus_up);
        timed(&self.metrics, "presence", "refresh_node", refresh).await
    }

    async fn expired_nodes(&self, now_unix_s: u64) -> Result<Vec<NodeId>, PresenceError> {
        timed(&self.metrics, "presence", "expired_nodes", self.inner.expired_nodes(now_unix_s)).await
    }

    async fn node_last_seen(&self, node: &NodeId) -> Result<Option<u64>, PresenceError> {
        timed(&self.metrics, "presence", "node_last_seen", self.inner.node_last_seen(node)).await
    }

    async fn nodes(&self, now_unix_s: u64) -> Result<Vec<skua_core::NodeSeen>, PresenceError> {
        timed(&self.metrics, "presence", "nodes", self.inner.nodes(now_unix_s)).await
    }

    fn is_available(&self) -> bool {
        self.inner.is_available()
    }
}

/// A store whose operations are timed.
pub struct TimedStore {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl TimedStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }
}

#[async_trait]
impl Store for TimedStore {
    async fn save_restore(&self, key: &RestoreKey, node: &NodeId, record: &RestoreRecord) -> Result<(), StoreError> {
        timed(&self.metrics, "store", "save_restore", self.inner.save_restore(key, node, record)).await
    }

    async fn load_restore(&self, key: &RestoreKey) -> Result<Option<RestoreRecord>, StoreError> {
        timed(&self.metrics, "store", "load_restore", self.inner.load_restore(key)).await
    }

    async fn release_restore(&self, key: &RestoreKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        timed(&self.metrics, "store", "release_restore", self.inner.release_restore(key, now_unix_s, ttl_s)).await
    }

    async fn claim_restore(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        node: &NodeId,
        together_s: Option<u64>,
    ) -> Result<Option<ClaimedRecord>, StoreError> {
        timed(&self.metrics, "store", "claim_restore", self.inner.claim_restore(project, actor, node, together_s)).await
    }

    async fn restore_holders(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        except: &NodeId,
        limit: usize,
    ) -> Result<Vec<NodeId>, StoreError> {
        timed(&self.metrics, "store", "restore_holders", self.inner.restore_holders(project, actor, except, limit))
            .await
    }

    async fn release_node_restores(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        last_seen_ms: Option<u64>,
    ) -> Result<u64, StoreError> {
        let released = self.inner.release_node_restores(node, now_unix_s, ttl_s, last_seen_ms);
        timed(&self.metrics, "store", "release_node_restores", released).await
    }

    async fn release_other_nodes_restores(
        &self,
        keep: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
    ) -> Result<u64, StoreError> {
        let released = self.inner.release_other_nodes_restores(keep, now_unix_s, ttl_s);
        timed(&self.metrics, "store", "release_other_nodes_restores", released).await
    }

    async fn prune_restores(&self, now_unix_s: u64, min_interval_s: u64, batch: u64) -> Result<u64, StoreError> {
        let pruned = self.inner.prune_restores(now_unix_s, min_interval_s, batch);
        timed(&self.metrics, "store", "prune_restores", pruned).await
    }

    fn is_available(&self) -> bool {
        self.inner.is_available()
    }
}

#[async_trait]
impl MemberStore for TimedStore {
    async fn upsert_member(&self, write: &MemberWrite<'_>) -> Result<Option<StoredMember>, StoreError> {
        timed(&self.metrics, "store", "upsert_member", self.inner.upsert_member(write)).await
    }

    async fn members_offline(
        &self,
        room: &str,
        actor: &str,
        expires_at_s: u64,
    ) -> Result<Vec<StoredMember>, StoreError> {
        timed(&self.metrics, "store", "members_offline", self.inner.members_offline(room, actor, expires_at_s)).await
    }

    async fn other_nodes_members_offline(
        &self,
        keep: &str,
        expires_at_s: u64,
    ) -> Result<Vec<StoredMember>, StoreError> {
        let changed = self.inner.other_nodes_members_offline(keep, expires_at_s);
        timed(&self.metrics, "store", "other_nodes_members_offline", changed).await
    }

    async fn delete_members(&self, room: &str, actor: &str) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "delete_members", self.inner.delete_members(room, actor)).await
    }

    async fn list_members(&self, room: &str, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        timed(&self.metrics, "store", "list_members", self.inner.list_members(room, now_s, limit)).await
    }

    async fn wake_candidates(&self, room: &str, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        timed(&self.metrics, "store", "wake_candidates", self.inner.wake_candidates(room, now_s, limit)).await
    }

    async fn begin_wake(&self, room: &str, actor: &str, client_id: &str, until_ms: u64) -> Result<bool, StoreError> {
        timed(&self.metrics, "store", "begin_wake", self.inner.begin_wake(room, actor, client_id, until_ms)).await
    }

    async fn end_wake(&self, room: &str, actor: &str, client_id: &str) -> Result<bool, StoreError> {
        timed(&self.metrics, "store", "end_wake", self.inner.end_wake(room, actor, client_id)).await
    }

    async fn expired_wakes(&self, now_ms: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        timed(&self.metrics, "store", "expired_wakes", self.inner.expired_wakes(now_ms, limit)).await
    }

    async fn expire_members(&self, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError> {
        timed(&self.metrics, "store", "expire_members", self.inner.expire_members(now_s, limit)).await
    }
}

#[async_trait]
impl TriggerStore for TimedStore {
    async fn claim_outbox(
        &self,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
        limit: u32,
    ) -> Result<Vec<skua_core::OutboxTrigger>, StoreError> {
        let claimed = self.inner.claim_outbox(owner, now_ms, lease_until_ms, limit);
        timed(&self.metrics, "store", "claim_outbox", claimed).await
    }

    async fn renew_outbox(&self, msg_id: &str, owner: &str, lease_until_ms: u64) -> Result<Option<u32>, StoreError> {
        timed(&self.metrics, "store", "renew_outbox", self.inner.renew_outbox(msg_id, owner, lease_until_ms)).await
    }

    async fn finish_outbox(&self, msg_id: &str) -> Result<bool, StoreError> {
        timed(&self.metrics, "store", "finish_outbox", self.inner.finish_outbox(msg_id)).await
    }

    async fn expire_outbox_leases(&self, keep: &str) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "expire_outbox_leases", self.inner.expire_outbox_leases(keep)).await
    }

    async fn dead_letter(
        &self,
        letter: &skua_core::NewDeadLetter<'_>,
        cap: skua_core::DeadLetterCap,
    ) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "dead_letter", self.inner.dead_letter(letter, cap)).await
    }

    async fn dead_letters(
        &self,
        letters: &[skua_core::NewDeadLetter<'_>],
        cap: skua_core::DeadLetterCap,
    ) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "dead_letters", self.inner.dead_letters(letters, cap)).await
    }

    async fn list_dead_letters(
        &self,
        filter: skua_core::DeadLetterFilter<'_>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<skua_core::DeadLetter>, StoreError> {
        timed(&self.metrics, "store", "list_dead_letters", self.inner.list_dead_letters(filter, after, limit)).await
    }

    async fn delete_dead_letters(&self, filter: skua_core::DeadLetterFilter<'_>) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "delete_dead_letters", self.inner.delete_dead_letters(filter)).await
    }
}

#[async_trait]
impl MessageLog for TimedStore {
    async fn append(&self, message: &NewMessage<'_>, now_unix_s: u64) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "append", self.inner.append(message, now_unix_s)).await
    }

    async fn append_queued(
        &self,
        message: &NewMessage<'_>,
        now_unix_s: u64,
    ) -> Result<skua_core::AppendCommit, StoreError> {
        // Timed from queueing to commit, as `append`.
        let start = Instant::now();
        let commit = match self.inner.append_queued(message, now_unix_s).await {
            Ok(c) => c,
            Err(e) => {
                self.metrics.backend_errors.inc("store", "append");
                return Err(e);
            }
        };
        let metrics = self.metrics.clone();
        Ok(Box::pin(async move {
            let r = commit.await;
            metrics.backend_latency.observe("store", "append", start.elapsed());
            if r.is_err() {
                metrics.backend_errors.inc("store", "append");
            }
            r
        }))
    }

    fn append_batches(&self) -> Option<skua_core::AppendBatches> {
        self.inner.append_batches()
    }

    async fn open_consumer(&self, consumer: &Consumer, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        timed(&self.metrics, "store", "open_consumer", self.inner.open_consumer(consumer, now_unix_s, ttl_s)).await
    }

    async fn touch_consumers(&self, ids: &[&str], now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        timed(&self.metrics, "store", "touch_consumers", self.inner.touch_consumers(ids, now_unix_s, ttl_s)).await
    }

    async fn drop_consumer(&self, id: &str) -> Result<(), StoreError> {
        timed(&self.metrics, "store", "drop_consumer", self.inner.drop_consumer(id)).await
    }

    async fn claim(&self, consumer: &str, msg_id: &str, holder: Holder<'_>) -> Result<Claim, StoreError> {
        timed(&self.metrics, "store", "claim", self.inner.claim(consumer, msg_id, holder)).await
    }

    async fn claim_many(&self, claims: &[skua_core::LiveClaim<'_>]) -> Result<Vec<Claim>, StoreError> {
        timed(&self.metrics, "store", "claim_many", self.inner.claim_many(claims)).await
    }

    async fn list_consumers(
        &self,
        prefix: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<skua_core::ConsumerBacklog>, StoreError> {
        timed(&self.metrics, "store", "list_consumers", self.inner.list_consumers(prefix, after, limit)).await
    }

    async fn backlog(&self, consumer: &str) -> Result<(u64, u64), StoreError> {
        timed(&self.metrics, "store", "backlog", self.inner.backlog(consumer)).await
    }

    async fn claim_page(
        &self,
        consumer: &str,
        holder: Holder<'_>,
        seqs: std::ops::RangeInclusive<u64>,
        limit: u32,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        timed(&self.metrics, "store", "claim_page", self.inner.claim_page(consumer, holder, seqs, limit)).await
    }

    async fn ack(&self, consumer: &str, msg_id: &str) -> Result<bool, StoreError> {
        timed(&self.metrics, "store", "ack", self.inner.ack(consumer, msg_id)).await
    }

    async fn ack_many(&self, acks: &[(&str, &str)]) -> Result<Vec<bool>, StoreError> {
        timed(&self.metrics, "store", "ack_many", self.inner.ack_many(acks)).await
    }

    async fn release(&self, scope: Release<'_>) -> Result<Vec<String>, StoreError> {
        timed(&self.metrics, "store", "release", self.inner.release(scope)).await
    }

    async fn prune_log(&self, now_unix_s: u64, retention: Retention) -> Result<u64, StoreError> {
        timed(&self.metrics, "store", "prune_log", self.inner.prune_log(now_unix_s, retention)).await
    }
}

/// Wraps every slot of `backends` in its timed decorator.
pub fn wrap(backends: crate::Backends, metrics: &Arc<Metrics>) -> crate::Backends {
    crate::Backends {
        bus: Arc::new(TimedBus::new(backends.bus, metrics.clone())),
        bus_deliveries: backends.bus_deliveries,
        presence: Arc::new(TimedPresence::new(backends.presence, metrics.clone())),
        store: Arc::new(TimedStore::new(backends.store, metrics.clone())),
        publish_observers: backends.publish_observers,
        webhooks: backends.webhooks,
        metrics_sources: backends.metrics_sources,
        shared_limits: backends.shared_limits,
        history: backends.history,
        idempotency: backends.idempotency,
    }
}
