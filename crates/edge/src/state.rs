//! Everything a node's connections share: configuration, registry, backends, hub, counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use skua_core::{ConnId, EnvelopeId, NodeId, Presence, ProjectId, Registry, SessionKey, SharedRegistry, Store};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use skua_engine::Backends;

use crate::config::EdgeConfig;
use crate::durable::Durable;
use crate::hub::Hub;
use crate::liveness::DeferredRemovals;
use crate::metrics::Metrics;
use crate::outbound::ConnHandle;
use crate::revalidate::{ConnEntry, Registration};

/// Shared state of one edge node: plain data, no tasks ([`crate::node`] starts and stops them).
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
    /// Cancelled when the node starts draining.
    pub shutdown: CancellationToken,
    /// Authenticated connections, for control-plane changes (`revalidate`).
    pub connections: Arc<crate::revalidate::Connections>,
    /// The publish pipeline every entry point uses.
    pub publisher: crate::publish::Publisher,
    /// Durable delivery, local clientId sessions and node-to-node control.
    pub durable: Arc<Durable>,
    /// Presence removals that failed, for the liveness loop to retry.
    pub deferred_removals: Arc<DeferredRemovals>,
    /// Trigger webhooks (N44, N45), when the server gave their hooks.
    pub triggers: Option<Arc<crate::triggers::Triggers>>,
    /// Failed auths per source address (issue 12, item 6).
    pub auth_throttle: crate::auth::AuthThrottle,
    /// Further series for `/metrics`.
    pub metrics_sources: Vec<Arc<dyn crate::metrics::MetricsSource>>,
    /// Calls hydration webhooks (N43).
    pub hydrator: Option<Arc<dyn crate::hydrate::Hydrator>>,
    /// Persistent presence and wake (N46, N47).
    pub members: Arc<crate::members::Members>,
    /// Topic history (issue 19).
    pub history: Option<Arc<dyn skua_core::history::History>>,
    /// The routes served under `/v1` (the REST API), installed once the control plane runs;
    /// unset, `/v1` answers 404.
    pub api: std::sync::OnceLock<axum::Router>,
    /// The routes served under `/admin` (the admin dashboard), installed once the control
    /// plane runs with an admin key; unset, `/admin` answers 404.
    pub admin: std::sync::OnceLock<axum::Router>,
    pub(crate) draining: AtomicBool,
    /// The node-wide bound on queued outbound bytes (`outbound_budget_bytes`).
    pub(crate) outbound_budget: Arc<crate::outbound::OutboundBudget>,
    /// When the drain began (`skua_drain_seconds`).
    pub(crate) drain_started: std::sync::OnceLock<std::time::Instant>,
    pub(crate) next_conn: AtomicU64,
    /// Connection slots: a permit per open WebSocket.
    pub(crate) conn_slots: Arc<Semaphore>,
    /// Connection slots the open-file limit leaves room for (soft limit less `fd_reserve`),
    /// read once at start; [`None`] when unlimited or unknown.
    pub(crate) fd_budget: Option<usize>,
    // std Mutex: counter updates only, never across an await.
    pub(crate) project_conns: Mutex<HashMap<ProjectId, u32>>,
}

impl EdgeState {
    /// Connection slots held now: sockets still in HTTP plus WebSockets.
    pub(crate) fn slots_used(&self) -> usize {
        self.config.max_connections.saturating_sub(self.conn_slots.available_permits())
    }

    /// Whether the slots held (the asking socket's included) exceed what the open-file limit
    /// leaves room for, so that an upgrade must be refused ([`crate::front::reason::FD_LIMIT`]).
    pub(crate) fn over_fd_budget(&self) -> bool {
        self.fd_budget.is_some_and(|budget| self.slots_used() > budget)
    }

    /// Why the node must leave its load balancer now, or `None` (`/readyz`): only while it
    /// drains. A full node (`max_connections`, the open-file budget) stays ready and refuses
    /// new upgrades with 503 and `Retry-After` instead: a readiness that flapped at the cap
    /// would make load balancers that reset an unhealthy target's connections drop every
    /// client of a busy edge (issue 32, item 1). Backends are not asked either.
    pub(crate) fn not_ready(&self) -> Option<&'static str> {
        self.is_draining().then_some("draining")
    }

    /// Whether each backend slot is reachable now, by slot name (`bus`, `presence`, `store`).
    pub fn backends_up(&self) -> [(&'static str, bool); 3] {
        [
            ("bus", self.hub.bus().is_available()),
            ("presence", self.presence.is_available()),
            ("store", self.store.is_available()),
        ]
    }

    /// Records `conn` as a local connection of `session`; returns the others (to close).
    pub(crate) fn register_session(&self, session: &SessionKey, conn: &Arc<ConnHandle>) -> Vec<Arc<ConnHandle>> {
        self.durable.register_session(session, conn)
    }

    /// Forgets `conn` as a connection of `session`.
    pub(crate) fn unregister_session(&self, session: &SessionKey, conn: ConnId) {
        self.durable.unregister_session(session, conn);
    }

    /// Adds an authenticated connection to the table until the returned guard drops.
    pub(crate) fn register_connection(&self, id: ConnId, entry: ConnEntry) -> Registration {
        self.connections.register(id, entry)
    }

    /// Installs a new registry: swaps the snapshot, closes what it no longer allows, and has
    /// every session re-check its subscriptions (N15).
    pub fn install_registry(&self, registry: Registry) {
        let old = self.registry.load();
        self.registry.store(registry);
        let new = self.registry.load();
        self.connections.sweep(&new);
        self.connections.notify(old.delta(&new));
        // Deleted rooms (apps, projects) give their retained bytes back (issue 33).
        let released = self.hub.release_retained(|room| {
            crate::triggers::payload::app_of(&new, room).is_some_and(|a| a.rooms.contains_key(room.slug()))
        });
        if released > 0 {
            tracing::debug!(topics = released, "Released the retained messages of deleted rooms.");
        }
    }
}

impl std::fmt::Debug for EdgeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeState").field("node", &self.node).field("config", &self.config).finish_non_exhaustive()
    }
}

impl EdgeState {
    /// A fresh connection id.
    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// A fresh cluster-unique envelope id.
    pub fn next_envelope_id(&self) -> EnvelopeId {
        self.publisher.next_envelope_id()
    }

    /// Seconds since the drain began; 0 when the node is not draining.
    pub(crate) fn drain_seconds(&self) -> f64 {
        self.drain_started.get().map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    /// Whether the node is draining (readiness fails, upgrades are refused).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Fails readiness and refuses new upgrades (503) while open connections carry on: the
    /// first step of a drain, held for `drain_delay` so load balancers stop routing here.
    pub fn mark_draining(&self) {
        self.drain_started.get_or_init(std::time::Instant::now);
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
        self.deferred_removals.push(room, actor, conn);
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
