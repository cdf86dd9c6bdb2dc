//! Everything a node's connections share: configuration, registry, backends, hub, counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use skua_core::{
    Bus, BusDelivery, ConnId, ConsumerId, EnvelopeId, NodeId, Presence, ProjectId, SessionKey, SharedRegistry, Store,
};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::EdgeConfig;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::outbound::ConnHandle;

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
    /// Told of every accepted publish, in this order ([`crate::publish`]).
    pub publish_observers: Vec<Arc<dyn crate::publish::PublishObserver>>,
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
    /// Authenticated connections, for control-plane changes (`revalidate`).
    pub connections: Arc<crate::revalidate::Connections>,
    /// The publish pipeline every entry point uses.
    pub publisher: crate::publish::Publisher,
    /// Failed auths per source address (issue 12, item 6).
    pub auth_throttle: crate::auth::AuthThrottle,
    draining: AtomicBool,
    next_conn: AtomicU64,
    /// Connection slots: a permit per open WebSocket.
    pub(crate) conn_slots: Arc<Semaphore>,
    // std Mutex: counter updates only, never across an await.
    project_conns: Mutex<HashMap<ProjectId, u32>>,
    // std Mutex: pushed by closing sessions, taken whole by the liveness loop.
    deferred_removals: Mutex<std::collections::VecDeque<DeferredRemoval>>,
    // std Mutex: map updates only, never across an await.
    /// Local connections of each clientId session (normally one), for takeovers.
    sessions: Mutex<HashMap<SessionKey, Vec<Arc<ConnHandle>>>>,
    /// Local durable tasks of each consumer, for kicks.
    consumer_tasks: Mutex<HashMap<ConsumerId, Vec<ConsumerTask>>>,
}

/// A presence removal that failed (backend unreachable) and is retried by the liveness loop.
pub type DeferredRemoval = (skua_core::RoomKey, skua_core::ActorId, skua_core::ConnRef);

/// Most deferred presence removals kept; beyond it the oldest are dropped (and logged): the
/// node's entries then heal when the backend loses them or the node restarts.
const MAX_DEFERRED_REMOVALS: usize = 100_000;

/// A local durable task serving a consumer: its connection and its command queue.
type ConsumerTask = (ConnId, mpsc::Sender<crate::durable::Cmd>);

/// Control messages (takeovers, kicks) queued between the dispatcher and their handler; beyond
/// it they are dropped with a warning (a kick is retried by the next release, a takeover by the
/// older connection's next reconnect).
const CONTROL_QUEUE: usize = 1024;

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl EdgeState {
    /// Records `conn` as a local connection of `session`; returns the others (to close).
    pub(crate) fn register_session(&self, session: &SessionKey, conn: &Arc<ConnHandle>) -> Vec<Arc<ConnHandle>> {
        let mut map = guard(&self.sessions);
        let list = map.entry(session.clone()).or_default();
        let others = list.iter().filter(|c| c.id != conn.id).cloned().collect();
        list.push(conn.clone());
        others
    }

    /// Forgets `conn` as a connection of `session`.
    pub(crate) fn unregister_session(&self, session: &SessionKey, conn: ConnId) {
        let mut map = guard(&self.sessions);
        if let Some(list) = map.get_mut(session) {
            list.retain(|c| c.id != conn);
            if list.is_empty() {
                map.remove(session);
            }
        }
    }

    /// The local connections of `session`.
    pub(crate) fn session_conns(&self, session: &SessionKey) -> Vec<Arc<ConnHandle>> {
        guard(&self.sessions).get(session).cloned().unwrap_or_default()
    }

    /// Registers a durable task as serving `consumer`.
    pub(crate) fn register_consumer_task(
        &self,
        consumer: &ConsumerId,
        conn: ConnId,
        tx: &mpsc::Sender<crate::durable::Cmd>,
    ) {
        let mut map = guard(&self.consumer_tasks);
        let list = map.entry(consumer.clone()).or_default();
        if !list.iter().any(|(c, _)| *c == conn) {
            list.push((conn, tx.clone()));
        }
    }

    /// Unregisters a durable task from `consumer`.
    pub(crate) fn unregister_consumer_task(&self, consumer: &ConsumerId, conn: ConnId) {
        let mut map = guard(&self.consumer_tasks);
        if let Some(list) = map.get_mut(consumer) {
            list.retain(|(c, _)| *c != conn);
            if list.is_empty() {
                map.remove(consumer);
            }
        }
    }

    /// The local durable tasks serving `consumer`.
    pub(crate) fn consumer_tasks(&self, consumer: &ConsumerId) -> Vec<mpsc::Sender<crate::durable::Cmd>> {
        guard(&self.consumer_tasks)
            .get(consumer)
            .map(|l| l.iter().map(|(_, t)| t.clone()).collect())
            .unwrap_or_default()
    }
}

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
        let backends = crate::timed::wrap(backends, &metrics);
        let limits = crate::retained::RetainedLimits {
            keys_per_topic: config.max_retained_per_topic,
            bytes_per_topic: config.max_retained_bytes_per_topic,
            bytes: config.max_retained_bytes,
        };
        let hub = Arc::new(Hub::new(backends.bus, metrics.clone(), limits));
        let auth_throttle = crate::auth::AuthThrottle::new(config.auth_backoff_after, config.auth_backoff_max);
        // The dispatcher outlives the drain (closing sessions still publish their presence
        // leaves); it stops when the bus closes or `dispatcher_stop` is cancelled.
        let dispatcher_stop = CancellationToken::new();
        let background = TaskTracker::new();
        hub.attach_sink();
        background.spawn(hub.clone().run_dispatcher(backends.bus_deliveries, dispatcher_stop.clone()));
        let connections = Arc::new(crate::revalidate::Connections::default());
        let publisher = crate::publish::Publisher::new(
            node.clone(),
            registry.clone(),
            hub.clone(),
            backends.store.clone(),
            metrics.clone(),
            connections.clone(),
            backends.publish_observers,
        );
        let state = Arc::new(Self {
            conn_slots: Arc::new(Semaphore::new(config.max_connections)),
            config,
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
            connections,
            publisher,
            auth_throttle,
            draining: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            project_conns: Mutex::new(HashMap::new()),
            deferred_removals: Mutex::new(std::collections::VecDeque::new()),
            sessions: Mutex::new(HashMap::new()),
            consumer_tasks: Mutex::new(HashMap::new()),
        });
        state.background.spawn(crate::liveness::run(state.clone(), state.dispatcher_stop.clone()));
        let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE);
        state.hub.set_control(control_tx);
        state.background.spawn(crate::durable::run_control(state.clone(), control_rx));
        state.background.spawn(crate::durable::run_retention(state.clone(), state.dispatcher_stop.clone()));
        // A node restarted under the same id frees what its previous run's connections held.
        let st = state.clone();
        state.background.spawn(async move { crate::durable::release_node(&st, &st.node).await });
        state.background.spawn(crate::revalidate::run(state.clone(), state.dispatcher_stop.clone()));
        state
    }

    /// A fresh connection id.
    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// A fresh cluster-unique envelope id.
    pub fn next_envelope_id(&self) -> EnvelopeId {
        self.publisher.next_envelope_id()
    }

    /// Whether the node is draining (readiness fails, upgrades are refused).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Fails readiness and refuses new upgrades (503) while open connections carry on: the
    /// first step of a drain, held for `drain_delay` so load balancers stop routing here.
    pub fn mark_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Starts draining: refuse new upgrades and close every connection with 1012.
    pub fn begin_drain(&self) {
        self.mark_draining();
        self.shutdown.cancel();
    }

    /// Open authenticated connections per project.
    pub fn connections_by_project(&self) -> Vec<(ProjectId, u32)> {
        let m = self.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<(ProjectId, u32)> = m.iter().map(|(p, n)| (p.clone(), *n)).collect();
        v.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        v
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
