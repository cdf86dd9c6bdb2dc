//! Everything a node's connections share: configuration, registry, backends, hub, counters.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use skua_core::{Bus, BusDelivery, ConnId, EnvelopeId, NodeId, Presence, ProjectId, SharedRegistry, Store};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::EdgeConfig;
use crate::hub::Hub;
use crate::metrics::Metrics;

/// The backends an edge runs on, chosen by the server crate.
pub struct Backends {
    /// This node's bus client.
    pub bus: Arc<dyn Bus>,
    /// Deliveries the bus sends to this node.
    pub bus_deliveries: mpsc::Receiver<BusDelivery>,
    /// Presence store.
    pub presence: Arc<dyn Presence>,
    /// Session store.
    pub store: Arc<dyn Store>,
}

/// Shared state of one edge node.
pub struct EdgeState {
    /// Settings.
    pub config: EdgeConfig,
    /// This node.
    pub node: NodeId,
    /// Apps, rooms, actors; swapped at run time (N15).
    pub registry: Arc<SharedRegistry>,
    /// Presence store.
    pub presence: Arc<dyn Presence>,
    /// Session store.
    pub store: Arc<dyn Store>,
    /// Local fan-out.
    pub hub: Arc<Hub>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Connection tasks; waited for on shutdown.
    pub tracker: TaskTracker,
    /// Node-level tasks (the hub's dispatcher); stopped after connections drained.
    pub background: TaskTracker,
    /// Cancelled when the node starts draining.
    pub shutdown: CancellationToken,
    /// Cancelled once connections have drained: stops the hub's dispatcher.
    pub dispatcher_stop: CancellationToken,
    draining: AtomicBool,
    next_conn: AtomicU64,
    next_envelope: AtomicU64,
    node_hash: u64,
    /// Connection slots: a permit per open WebSocket.
    pub(crate) conn_slots: Arc<Semaphore>,
    // std Mutex: counter updates only, never across an await.
    project_conns: Mutex<HashMap<ProjectId, u32>>,
    // std Mutex: pushed by closing sessions, taken whole by the liveness loop.
    deferred_removals: Mutex<std::collections::VecDeque<DeferredRemoval>>,
}

/// A presence removal that failed (backend unreachable) and is retried by the liveness loop.
pub type DeferredRemoval = (skua_core::RoomKey, skua_core::ActorId, skua_core::ConnRef);

/// Most deferred presence removals kept; beyond it the oldest are dropped (and logged): the
/// node's entries then heal when the backend loses them or the node restarts.
const MAX_DEFERRED_REMOVALS: usize = 100_000;

impl std::fmt::Debug for EdgeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeState").field("node", &self.node).field("config", &self.config).finish_non_exhaustive()
    }
}

impl EdgeState {
    /// Builds the node state and starts the hub's dispatcher on `tracker`.
    pub fn start(
        config: EdgeConfig,
        node: NodeId,
        registry: Arc<SharedRegistry>,
        backends: Backends,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let metrics = Arc::new(Metrics::default());
        let hub = Arc::new(Hub::new(backends.bus, metrics.clone(), config.max_retained_per_topic));
        // The dispatcher outlives the drain (closing sessions still publish their presence
        // leaves); it stops when the bus closes or `dispatcher_stop` is cancelled.
        let dispatcher_stop = CancellationToken::new();
        let background = TaskTracker::new();
        background.spawn(hub.clone().run_dispatcher(backends.bus_deliveries, dispatcher_stop.clone()));
        let mut h = std::collections::hash_map::DefaultHasher::new();
        node.hash(&mut h);
        let state = Arc::new(Self {
            conn_slots: Arc::new(Semaphore::new(config.max_connections)),
            config,
            node_hash: h.finish(),
            node,
            registry,
            presence: backends.presence,
            store: backends.store,
            hub,
            metrics,
            tracker,
            background,
            shutdown,
            dispatcher_stop,
            draining: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            next_envelope: AtomicU64::new(1),
            project_conns: Mutex::new(HashMap::new()),
            deferred_removals: Mutex::new(std::collections::VecDeque::new()),
        });
        state.background.spawn(crate::liveness::run(state.clone(), state.dispatcher_stop.clone()));
        state
    }

    /// A fresh connection id.
    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// A fresh cluster-unique envelope id.
    pub fn next_envelope_id(&self) -> EnvelopeId {
        EnvelopeId((u128::from(self.node_hash) << 64) | u128::from(self.next_envelope.fetch_add(1, Ordering::Relaxed)))
    }

    /// Whether the node is draining (readiness fails, upgrades are refused).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Starts draining: refuse new upgrades and close every connection with 1012.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.shutdown.cancel();
    }

    /// Claims a connection of `project` against `max`; `None` when the project is full.
    pub(crate) fn claim_project_slot(self: &Arc<Self>, project: &ProjectId, max: Option<u32>) -> Option<ProjectSlot> {
        let mut m = self.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = m.entry(project.clone()).or_insert(0);
        if max.is_some_and(|max| *n >= max) {
            return None;
        }
        *n += 1;
        Some(ProjectSlot { state: self.clone(), project: project.clone() })
    }

    /// Queues a presence removal that failed, for the liveness loop to retry.
    pub fn defer_presence_removal(
        &self,
        room: skua_core::RoomKey,
        actor: skua_core::ActorId,
        conn: skua_core::ConnRef,
    ) {
        let mut q = self.deferred_removals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= MAX_DEFERRED_REMOVALS {
            q.pop_front();
            tracing::warn!("Deferred presence removals are full; dropping the oldest.");
        }
        q.push_back((room, actor, conn));
    }

    /// Takes every deferred presence removal.
    pub fn take_deferred_removals(&self) -> Vec<DeferredRemoval> {
        std::mem::take(&mut *self.deferred_removals.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).into()
    }

    /// Open connections of `project` on this node.
    pub fn project_connections(&self, project: &ProjectId) -> u32 {
        self.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(project).copied().unwrap_or(0)
    }
}

/// One authenticated connection counted against its project; released on drop.
pub(crate) struct ProjectSlot {
    state: Arc<EdgeState>,
    project: ProjectId,
}

impl Drop for ProjectSlot {
    fn drop(&mut self) {
        let mut m = self.state.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.project) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.project);
            }
        }
    }
}

/// Unix seconds now.
pub fn now_unix_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Unix milliseconds now.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
