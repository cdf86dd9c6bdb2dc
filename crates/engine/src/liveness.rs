//! Node liveness and presence healing (cluster issue, item 4).
//!
//! Every `node_refresh` the node refreshes its registration in the presence backend. When the
//! backend reports it had no live registration (it restarted and lost its data, or this node
//! stalled past its ttl), the node re-announces every local presence entry, silently: the
//! clients already saw those joins. Then it removes the entries of nodes whose registration
//! lapsed and publishes their `leave` events; the backend hands each entry to exactly one
//! remover, so each leave goes out once.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use skua_core::{ActorId, ConnRef, Envelope, NodeId, Presence, PresenceChange, PresenceEvent, RoomKey, Store};
use tokio_util::sync::CancellationToken;

use crate::clock::now_unix_s;
use crate::durable::Durable;
use crate::hub::Hub;

/// A presence removal that failed (backend unreachable) and is retried by the liveness loop.
pub type DeferredRemoval = (RoomKey, ActorId, ConnRef);

/// Most deferred presence removals kept; beyond it the oldest are dropped (and logged): the
/// node's entries then heal when the backend loses them or the node restarts.
const MAX_DEFERRED_REMOVALS: usize = 100_000;

/// Presence removals that failed, pushed by closing sessions and retried by the liveness loop.
#[derive(Debug, Default)]
pub struct DeferredRemovals {
    // std Mutex: pushed by closing sessions, taken whole by the liveness loop; no await inside.
    queue: Mutex<VecDeque<DeferredRemoval>>,
}

impl DeferredRemovals {
    /// Queues a removal that failed; beyond `MAX_DEFERRED_REMOVALS` the oldest is dropped.
    pub fn push(&self, room: RoomKey, actor: ActorId, conn: ConnRef) {
        let mut q = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= MAX_DEFERRED_REMOVALS {
            q.pop_front();
            tracing::warn!("Deferred presence removals are full; dropping the oldest.");
        }
        q.push_back((room, actor, conn));
    }

    /// Takes every deferred removal.
    pub fn take(&self) -> Vec<DeferredRemoval> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).into()
    }
}

/// What the liveness loop uses.
#[derive(Clone)]
pub struct Liveness {
    /// This node.
    pub node: NodeId,
    /// The presence backend.
    pub presence: Arc<dyn Presence>,
    /// Local presence (to re-announce) and the bus (for leaves).
    pub hub: Arc<Hub>,
    /// Releases what lapsed nodes held.
    pub durable: Arc<Durable>,
    /// Ends the restore records of lapsed nodes' connections.
    pub store: Arc<dyn Store>,
    /// How long a released restore record stays claimable (`restore_ttl`).
    pub restore_ttl: Duration,
    /// Removals to retry.
    pub deferred: Arc<DeferredRemovals>,
    /// How often the node refreshes its registration (`node_refresh`).
    pub refresh: Duration,
    /// How long a registration lasts (`node_ttl`).
    pub ttl: Duration,
    /// Sets a lapsed node's persistent members offline (N46).
    pub members: Arc<crate::members::Members>,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness").field("node", &self.node).finish_non_exhaustive()
    }
}

/// Runs until `cancel` fires.
pub async fn run(st: Liveness, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(st.refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    forget_earlier_run(&st).await;
    let mut first = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        refresh(&st, first).await;
        first = false;
        retry_removals(&st).await;
        reap(&st).await;
    }
}

/// Removes the presence entries an earlier run of this node (same node id) left behind. A node
/// restarted within `node_ttl` keeps its registration alive, so no other node ever reaps them:
/// without this, a member whose connection died with the earlier run stayed listed on every node
/// (found by skua-chaos: `kill -9` and restart of a node). Entries of connections this run
/// already has are announced again right after.
async fn forget_earlier_run(st: &Liveness) {
    let gone = match st.presence.remove_node(&st.node).await {
        Ok(gone) => gone,
        Err(e) => {
            tracing::warn!(error = %e, "Could not remove the presence an earlier run of this node left.");
            return;
        }
    };
    let local = st.hub.local_presence();
    if !gone.is_empty() {
        tracing::info!(entries = gone.len(), "Removed the presence an earlier run of this node left.");
    }
    for (room, actor) in gone {
        if local.iter().any(|(r, a, _, _)| *r == room && *a == actor) {
            continue;
        }
        if !st.members.went_offline(&room, &actor, false).await {
            publish_leave(st, room, actor).await;
        }
    }
    reannounce(st, local).await;
}

async fn refresh(st: &Liveness, first: bool) {
    let ttl = st.ttl.as_secs().max(1);
    let bus_up = st.hub.bus().is_available();
    match st.presence.refresh_node(&st.node, now_unix_s(), ttl, bus_up).await {
        Ok(true) if !first => {
            let local = st.hub.local_presence();
            tracing::warn!(entries = local.len(), "Presence backend lost this node's registration; re-announcing.");
            reannounce(st, local).await;
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "Presence backend unreachable; node registration not refreshed."),
    }
}

/// Announces `local` (a snapshot of this node's presence) to the backend again.
async fn reannounce(st: &Liveness, local: Vec<crate::hub::LocalPresence>) {
    let mut announced = Vec::with_capacity(local.len());
    for (room, actor, conn, data) in local {
        let conn = ConnRef { node: st.node.clone(), conn };
        if let Err(e) = st.presence.announce(&room, &actor, &conn, data, now_unix_s()).await {
            tracing::warn!(error = %e, "Re-announcing presence failed; retrying at the next refresh.");
            return;
        }
        announced.push((room, actor, conn));
    }
    // A connection that left while the snapshot was being announced removed its entry
    // before the announce wrote it back (found by skua-chaos: the member stayed listed
    // on every node). Leaving removes the local entry before the backend's, so what is
    // no longer local now must not stay announced.
    let still: HashSet<_> = st.hub.local_presence().into_iter().map(|(r, a, c, _)| (r, a, c)).collect();
    for (room, actor, conn) in announced {
        if still.contains(&(room.clone(), actor.clone(), conn.conn)) {
            continue;
        }
        match st.presence.remove(&room, &actor, &conn).await {
            Ok(true) if !st.members.went_offline(&room, &actor, false).await => publish_leave(st, room, actor).await,
            Ok(_) => {}
            Err(_) => st.deferred.push(room, actor, conn),
        }
    }
}

/// Retries presence removals that failed while the backend was unreachable.
async fn retry_removals(st: &Liveness) {
    let pending = st.deferred.take();
    for (i, (room, actor, conn)) in pending.iter().enumerate() {
        match st.presence.remove(room, actor, conn).await {
            Ok(true) => {
                if !st.members.went_offline(room, actor, false).await {
                    publish_leave(st, room.clone(), actor.clone()).await;
                }
            }
            Ok(false) => {}
            Err(_) => {
                // Still down: keep this one and the rest for the next round.
                for (room, actor, conn) in pending.into_iter().skip(i) {
                    st.deferred.push(room, actor, conn);
                }
                return;
            }
        }
    }
}

async fn publish_leave(st: &Liveness, room: RoomKey, actor: ActorId) {
    let ev = PresenceEvent {
        room,
        actor,
        change: PresenceChange::Leave,
        data: Bytes::new(),
        node: st.node.clone(),
        persistent: None,
    };
    if let Err(e) = st.hub.bus().publish(Arc::new(Envelope::Presence(ev))).await {
        tracing::warn!(error = %e, "A leave event could not be published.");
    }
}

/// When lapsed `node` was last seen alive, unix ms: its last registration refresh as the presence
/// backend kept it; else (a backend that does not keep it, or a node of an older release) the
/// latest its last refresh can have been less one refresh interval. The registration lapsed at
/// most one of this loop's rounds ago, so its last refresh lies between now − ttl − refresh and
/// now − ttl; the lower end errs towards replaying too much, never too little
/// (docs/recovery.md).
async fn last_seen(st: &Liveness, node: &NodeId) -> u64 {
    match st.presence.node_last_seen(node).await {
        Ok(Some(seen)) => return seen,
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e, %node, "Could not read when a lapsed node was last seen."),
    }
    let lapse = u64::try_from((st.ttl + st.refresh).as_millis()).unwrap_or(u64::MAX);
    crate::clock::now_unix_ms().saturating_sub(lapse)
}

async fn reap(st: &Liveness) {
    let dead = match st.presence.expired_nodes(now_unix_s()).await {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(error = %e, "Could not list lapsed nodes.");
            return;
        }
    };
    for node in dead.into_iter().filter(|n| *n != st.node) {
        // Logged messages its connections held go back to their consumers (N26).
        st.durable.release_node(&node).await;
        // Its connections' restore records end, so their clients' reconnects can claim them
        // (N23), and recover history from when the node was last seen alive (issue 19).
        let seen = last_seen(st, &node).await;
        match st.store.release_node_restores(&node, now_unix_s(), st.restore_ttl.as_secs(), Some(seen)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(%node, records = n, "Released the restore records of a lapsed node."),
            Err(e) => tracing::warn!(error = %e, %node, "Releasing a lapsed node's restore records failed."),
        }
        match st.presence.remove_node(&node).await {
            Ok(gone) => {
                tracing::info!(%node, entries = gone.len(), "Removed the presence of a lapsed node.");
                for (room, actor) in gone {
                    // A persistent member goes offline rather than leaving (N46).
                    if !st.members.went_offline(&room, &actor, false).await {
                        publish_leave(st, room, actor).await;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, %node, "Removing a lapsed node's presence failed."),
        }
    }
}
