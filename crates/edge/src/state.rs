//! Everything the WebSocket door's connections share: the [`Engine`] they talk to, and the
//! door's own slots, throttles and drain flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use skua_core::ProjectId;
use tokio::sync::Semaphore;

pub(crate) use skua_engine::ProjectSlot;
pub use skua_engine::{Backends, Engine};

/// `/readyz`'s body while only this node's bus link is down.
const BUS_UNREACHABLE: &str = "bus_unreachable";

/// Shared state of the WebSocket door of one node: plain data, no tasks ([`crate::node`] starts
/// and stops them). Derefs to the node's [`Engine`], so `state.hub`, `state.publisher`... name
/// the engine's parts.
pub struct EdgeState {
    /// The broker core every door of the node shares.
    pub engine: Arc<Engine>,
    /// Failed auths per source address (issue 12, item 6).
    pub auth_throttle: crate::auth::AuthThrottle,
    pub(crate) draining: AtomicBool,
    /// When the drain began (`skua_drain_seconds`).
    pub(crate) drain_started: std::sync::OnceLock<std::time::Instant>,
    /// Connection slots: a permit per open WebSocket or device connection, whatever its door.
    pub(crate) conn_slots: Arc<Semaphore>,
    /// Per-address limits (`max_connections_per_ip`, `max_new_connections_per_ip_per_second`),
    /// one count for every door of the node: a client's WebSocket and MQTT sockets share it.
    pub(crate) ip_limits: Arc<crate::ip::IpLimits>,
    /// Connection slots the open-file limit leaves room for (soft limit less `fd_reserve`),
    /// read once at start; [`None`] when unlimited or unknown.
    pub(crate) fd_budget: Option<usize>,
}

impl std::ops::Deref for EdgeState {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl EdgeState {
    /// The door's state over `engine`: `config.max_connections` slots, `fd_budget` of them
    /// backed by file descriptors ([`None`]: unlimited or unknown).
    pub(crate) fn new(engine: Arc<Engine>, fd_budget: Option<usize>) -> Self {
        let config = &engine.config;
        Self {
            conn_slots: Arc::new(Semaphore::new(config.max_connections)),
            ip_limits: crate::ip::IpLimits::new(
                config.max_connections_per_ip,
                config.max_new_connections_per_ip_per_second,
            ),
            fd_budget,
            auth_throttle: crate::auth::AuthThrottle::new(config.auth_backoff_after, config.auth_backoff_max),
            draining: AtomicBool::new(false),
            drain_started: std::sync::OnceLock::new(),
            engine,
        }
    }

    /// Connection slots held now: sockets still in HTTP plus WebSockets.
    pub(crate) fn slots_used(&self) -> usize {
        self.config.max_connections.saturating_sub(self.conn_slots.available_permits())
    }

    /// Whether the slots held (the asking socket's included) exceed what the open-file limit
    /// leaves room for, so that an upgrade must be refused ([`crate::front::reason::FD_LIMIT`]).
    pub(crate) fn over_fd_budget(&self) -> bool {
        self.fd_budget.is_some_and(|budget| self.slots_used() > budget)
    }

    /// Why the node must leave its load balancer now, or `None` (`/readyz`): while it drains,
    /// and while its own bus link is down though a live peer's is up (issue 32, item 11:
    /// every new `auth` here would be refused `broker_unavailable` while its peers serve;
    /// [`skua_engine::readiness`]). A full node (`max_connections`, the open-file budget)
    /// stays ready and refuses new upgrades with 503 and `Retry-After` instead: a readiness
    /// that flapped at the cap would make load balancers that reset an unhealthy target's
    /// connections drop every client of a busy edge (issue 32, item 1). A shared backend's
    /// outage (the broker, Redis, the store) leaves every node ready.
    pub(crate) async fn not_ready(&self) -> Option<&'static str> {
        if self.is_draining() {
            return Some("draining");
        }
        self.bus_outage_is_local().await.then_some(BUS_UNREACHABLE)
    }

    /// [`Self::not_ready`] without asking the presence backend: the last answer while the
    /// bus link is down (the `skua_ready` gauge).
    pub(crate) fn not_ready_now(&self) -> Option<&'static str> {
        if self.is_draining() {
            return Some("draining");
        }
        self.bus_outage_was_local().then_some(BUS_UNREACHABLE)
    }

    /// Claims a connection of `project` against `max`; `None` when the project is full.
    pub(crate) fn claim_project_slot(&self, project: &ProjectId, max: Option<u32>) -> Option<ProjectSlot> {
        self.engine.claim_project_slot(project, max)
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
}

impl std::fmt::Debug for EdgeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeState").field("node", &self.node).field("config", &self.config).finish_non_exhaustive()
    }
}
