//! Starting and stopping one node: backends, registry, edge, listener, drain.

use std::net::SocketAddr;
use std::sync::Arc;

use skua_core::SharedRegistry;
use skua_edge::{Backends, EdgeState};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{BusConfig, PresenceConfig, ServerConfig, StoreConfig};

/// Embedded backends that several in-process nodes can share (tests, single node).
#[derive(Debug, Clone, Default)]
pub struct Embedded {
    /// The in-process bus every node connects to.
    pub bus: skua_bus::InProcessBus,
    /// In-memory presence.
    pub presence: Arc<skua_presence::MemoryPresence>,
    /// In-memory session store.
    pub store: Arc<skua_store::MemoryStore>,
}

/// Builds the backends `config` names; embedded slots come from `embedded`.
///
/// # Errors
/// When an external backend cannot be reached or its URL is invalid.
pub async fn backends(config: &ServerConfig, embedded: &Embedded) -> anyhow::Result<Backends> {
    let (bus, bus_deliveries) = match &config.bus {
        BusConfig::Memory => embedded.bus.connect(config.node_id.clone(), config.edge.bus_queue),
        BusConfig::Mqtt { url } => {
            let mut mqtt = skua_bus::mqtt::MqttBusConfig::new(url.clone(), config.edge.namespace.clone());
            mqtt.publish_buffer = config.bus_publish_buffer;
            // Client ids must be unique per broker: the namespace keeps two clusters (or test
            // runs) with the same node ids from taking over each other's connections.
            mqtt.client_id_prefix = format!("skua-{}", config.edge.namespace);
            skua_bus::mqtt::MqttBus::connect(mqtt, config.node_id.clone(), config.edge.bus_queue).await.map_err(
                |e| anyhow::anyhow!("while connecting to the MQTT broker at {}: {}", redact(url), error_chain(&e)),
            )?
        }
    };
    let presence: Arc<dyn skua_core::Presence> = match &config.presence {
        PresenceConfig::Memory => embedded.presence.clone(),
        PresenceConfig::Redis { url } => Arc::new(
            skua_presence::RedisPresence::connect(url, &config.edge.namespace)
                .await
                .map_err(|e| anyhow::anyhow!("while connecting to Redis presence at {}: {e}", redact(url)))?,
        ),
    };
    let store: Arc<dyn skua_core::Store> = match &config.store {
        StoreConfig::Memory => embedded.store.clone(),
        StoreConfig::Url(url) => {
            create_sqlite_dir(url)?;
            skua_store::open(url, skua_store::system_clock())
                .await
                .map_err(|e| anyhow::anyhow!("while opening the store {}: {}", redact(url), error_chain(&e)))?
        }
    };
    Ok(Backends { bus, bus_deliveries, presence, store })
}

/// Applies the store's migrations (`skua migrate`).
///
/// # Errors
/// When the store cannot be reached or a migration fails.
pub async fn migrate(url: &str) -> anyhow::Result<()> {
    create_sqlite_dir(url)?;
    skua_store::migrate(url).await.map_err(|e| anyhow::anyhow!("while migrating {}: {}", redact(url), error_chain(&e)))
}

/// `a: b: c` for an error and its sources.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Creates the directory of a `sqlite://PATH` store file.
fn create_sqlite_dir(url: &str) -> anyhow::Result<()> {
    let Some(path) = url.strip_prefix("sqlite://") else { return Ok(()) };
    let path = path.split('?').next().unwrap_or(path);
    if let Some(dir) = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("while creating {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// `scheme://host…` without credentials, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
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
        // Acknowledged publishes (and the sessions' presence leaves) still in the bus's buffer
        // go out before the process ends.
        self.state.hub.bus().close(std::time::Duration::from_secs(2)).await;
        self.state.dispatcher_stop.cancel();
        self.state.background.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.state.background.wait()).await;
        drained
    }
}
