//! Starting and stopping one node: backends, registry, edge, listener, drain.

use std::net::SocketAddr;
use std::sync::Arc;

use skua_core::SharedRegistry;
use skua_edge::{Backends, EdgeState};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{BusConfig, PresenceConfig, ServerConfig};

/// Builds the embedded backends for one node: a private in-process bus, in-memory presence
/// and an in-memory session store.
pub fn embedded_backends(config: &ServerConfig) -> Backends {
    let broker = skua_bus::InProcessBus::new();
    let (bus, bus_deliveries) = broker.connect(config.node_id.clone(), config.edge.bus_queue);
    Backends {
        bus,
        bus_deliveries,
        presence: Arc::new(skua_presence::MemoryPresence::new()),
        store: Arc::new(skua_store::MemoryStore::new()),
    }
}

/// Builds the backends `config` names.
pub fn backends(config: &ServerConfig) -> Backends {
    match (&config.bus, &config.presence) {
        (BusConfig::Memory, PresenceConfig::Memory) => embedded_backends(config),
    }
}

/// A running node.
pub struct RunningNode {
    /// Where the HTTP listener is bound.
    pub addr: SocketAddr,
    /// The edge's shared state.
    pub state: Arc<EdgeState>,
    tracker: TaskTracker,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl std::fmt::Debug for RunningNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningNode").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl RunningNode {
    /// Starts a node on `listener`.
    pub fn start(
        config: &ServerConfig,
        registry: Arc<SharedRegistry>,
        backends: Backends,
        listener: TcpListener,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let tracker = TaskTracker::new();
        let state = EdgeState::start(
            config.edge.clone(),
            config.node_id.clone(),
            registry,
            backends,
            tracker.clone(),
            CancellationToken::new(),
        );
        let server = tokio::spawn(skua_edge::serve(listener, state.clone()));
        tracing::info!(%addr, node = %config.node_id, "Skua node listening.");
        Ok(Self { addr, state, tracker, server })
    }

    /// Drains and stops: readiness fails, new upgrades are refused, every socket closes 1012
    /// after its presence is released, and the node waits up to the shutdown grace for all
    /// connection tasks. Returns whether everything finished within the grace.
    pub async fn shutdown(self) -> bool {
        self.state.begin_drain();
        let grace = self.state.config.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        let _ = tokio::time::timeout_at(deadline, self.server).await;
        self.tracker.close();
        // Connection tasks first; the dispatcher keeps running so their leaves still go out.
        let drained = tokio::time::timeout_at(deadline, self.tracker.wait()).await.is_ok();
        self.state.dispatcher_stop.cancel();
        self.state.background.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.state.background.wait()).await;
        drained
    }
}
