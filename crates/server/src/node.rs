//! Starting and stopping one node: backends, registry, edge, listener, drain.

use std::net::SocketAddr;
use std::sync::Arc;

use skua_core::SharedRegistry;
use skua_edge::{Backends, EdgeNode, EdgeState, Listeners};
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
    /// The registry of the `memory` store: one in-memory SQLite database, opened by the first
    /// node and shared by the others.
    pub registry: Arc<tokio::sync::OnceCell<Arc<dyn skua_core::RegistryStore>>>,
    /// In-memory idempotency keys (issue 19), made by the first node with its
    /// `idempotency_max_keys` and shared by the others.
    pub idempotency: Arc<std::sync::OnceLock<Arc<skua_presence::MemoryIdempotency>>>,
}

/// Builds the backends `config` names; embedded slots come from `embedded`.
///
/// # Errors
/// When an external backend cannot be reached or its URL is invalid.
pub async fn backends(config: &ServerConfig, embedded: &Embedded) -> anyhow::Result<Backends> {
    // redis-rs and sqlx build their rustls configs from the process's default provider.
    crate::tls::install_provider();
    let mut mqtt_bus = None;
    let (bus, bus_deliveries) = match &config.bus {
        BusConfig::Memory => embedded.bus.connect(config.node_id.clone(), config.edge.bus_queue),
        BusConfig::Mqtt { url } => {
            let mut mqtt = skua_bus::mqtt::MqttBusConfig::new(url.clone(), config.edge.namespace.clone());
            mqtt.publish_buffer = config.bus_publish_buffer;
            // Client ids must be unique per broker: the namespace keeps two clusters (or test
            // runs) with the same node ids from taking over each other's connections.
            mqtt.client_id_prefix = format!("skua-{}", config.edge.namespace);
            if url.starts_with("mqtts://") {
                let (ca_pem, client_pem) = backend_tls_pem(&config.bus_tls)?;
                mqtt.tls = Some(skua_bus::mqtt::MqttTls { ca_pem, client_pem });
                // Renewed files reach the next connection (issue 32, item 7): no restart.
                let files = config.bus_tls.clone();
                mqtt.tls_reload = Some(skua_bus::mqtt::MqttTlsReload(Arc::new(move || {
                    let (ca_pem, client_pem) = backend_tls_pem(&files).map_err(|e| e.to_string())?;
                    Ok(skua_bus::mqtt::MqttTls { ca_pem, client_pem })
                })));
            }
            let (bus, rx) =
                skua_bus::mqtt::MqttBus::open(mqtt, config.node_id.clone(), config.edge.bus_queue).await.map_err(
                    |e| anyhow::anyhow!("while connecting to the MQTT broker at {}: {}", redact(url), error_chain(&e)),
                )?;
            mqtt_bus = Some(bus.clone());
            (bus as Arc<dyn skua_core::Bus>, rx)
        }
    };
    let e = &config.edge;
    let limits = skua_presence::history::HistoryLimits {
        max_size: e.history_max_size,
        max_topics: e.history_max_topics,
        max_topic_bytes: e.history_max_topic_bytes,
        max_project_bytes: e.history_max_bytes_per_project,
    };
    // Topic history (issue 19): in memory on one node, Redis streams with Redis presence.
    let mut history: Arc<dyn skua_core::history::History> =
        Arc::new(skua_presence::history::MemoryHistory::new(limits));
    // Idempotency keys live where presence does: in memory on one node, in Redis in a cluster.
    let mut memory_idempotency = None;
    // So do the wake limits' counters (issue 33): per node in memory, the cluster's in Redis.
    let mut shared_limits: Option<Arc<dyn skua_core::limits::SharedLimits>> = None;
    let mut redis_presence = None;
    let (presence, idempotency): (Arc<dyn skua_core::Presence>, Arc<dyn skua_core::Idempotency>) = match &config
        .presence
    {
        PresenceConfig::Memory => {
            let keys = embedded
                .idempotency
                .get_or_init(|| Arc::new(skua_presence::MemoryIdempotency::new(config.idempotency_max_keys)))
                .clone();
            memory_idempotency = Some(keys.clone());
            (embedded.presence.clone(), keys)
        }
        PresenceConfig::Redis { url } => {
            let presence = if config.presence_tls.is_set() {
                // Read now (a missing file stops the start) and again when the connection fails.
                backend_tls_pem(&config.presence_tls)?;
                let files = config.presence_tls.clone();
                let reload: skua_presence::RedisTlsReload = Arc::new(move || {
                    let (ca_pem, client_pem) = backend_tls_pem(&files).map_err(|e| e.to_string())?;
                    Ok(skua_presence::RedisTls { ca_pem, client_pem })
                });
                skua_presence::RedisPresence::connect_with_tls_files(url, &config.edge.namespace, reload).await
            } else {
                skua_presence::RedisPresence::connect_with_tls(url, &config.edge.namespace, None).await
            }
            .map_err(|e| anyhow::anyhow!("while connecting to Redis presence at {}: {e}", redact(url)))?;
            shared_limits = Some(Arc::new(presence.shared_limits(&config.edge.namespace)));
            history = Arc::new(
                presence.history(&config.edge.namespace).with_max_project_bytes(e.history_max_bytes_per_project as u64),
            );
            let keys = presence.idempotency(&config.edge.namespace);
            let presence = Arc::new(presence);
            redis_presence = Some(presence.clone());
            (presence, Arc::new(keys))
        }
    };
    let store: Arc<dyn skua_core::Store> = match &config.store {
        StoreConfig::Memory => embedded.store.clone(),
        StoreConfig::Url(url) => {
            create_sqlite_dir(url)?;
            skua_store::open_with(url, skua_store::system_clock(), config.store_pool_size)
                .await
                .map_err(|e| anyhow::anyhow!("while opening the store {}: {}", redact(url), error_chain(&e)))?
        }
    };
    Ok(Backends {
        bus,
        bus_deliveries,
        presence,
        store,
        publish_observers: Vec::new(),
        webhooks: None,
        metrics_sources: vec![
            Arc::new(BusMetrics(mqtt_bus.clone())),
            Arc::new(IdempotencyMetrics(memory_idempotency)),
            Arc::new(CertExpiryMetrics(crate::cert_expiry::watched(config))),
            Arc::new(TlsReloadMetrics { bus: mqtt_bus.clone(), presence: redis_presence }),
        ],
        shared_limits,
        history: Some(history),
        idempotency,
    })
}

/// When the certificate files this node uses expire (`crate::cert_expiry`).
struct CertExpiryMetrics(Vec<(&'static str, std::path::PathBuf)>);

impl skua_edge::prom::MetricsSource for CertExpiryMetrics {
    fn render(&self, out: &mut String) {
        crate::cert_expiry::render(&self.0, out);
    }
}

/// Renewed backend certificate files picked up by a reconnection, per backend.
struct TlsReloadMetrics {
    bus: Option<Arc<skua_bus::mqtt::MqttBus>>,
    presence: Option<Arc<skua_presence::RedisPresence>>,
}

impl skua_edge::prom::MetricsSource for TlsReloadMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let bus = self.bus.as_ref().map_or(0, |b| b.stats().tls_reloads);
        let presence = self.presence.as_ref().map_or(0, |p| p.tls_reloads());
        let _ = write!(
            out,
            "# HELP skua_backend_tls_reloads_total Times changed backend certificate files were read and used for the next connection, by backend (Postgres reads its files at every new connection).\n\
             # TYPE skua_backend_tls_reloads_total counter\n\
             skua_backend_tls_reloads_total{{backend=\"bus\"}} {bus}\n\
             skua_backend_tls_reloads_total{{backend=\"presence\"}} {presence}\n"
        );
    }
}

/// The in-memory idempotency keys' evictions on `/metrics` (always 0 with Redis).
struct IdempotencyMetrics(Option<Arc<skua_presence::MemoryIdempotency>>);

impl skua_edge::prom::MetricsSource for IdempotencyMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let evicted = self.0.as_ref().map_or(0, |m| m.evicted());
        let _ = write!(
            out,
            "# HELP skua_idempotency_evictions_total Idempotency keys forgotten before their window ended because idempotency_max_keys was reached.\n\
             # TYPE skua_idempotency_evictions_total counter\nskua_idempotency_evictions_total {evicted}\n"
        );
    }
}

/// The bus's series on `/metrics` (issue 23, item 10); the in-process bus never reconnects
/// and buffers nothing.
struct BusMetrics(Option<Arc<skua_bus::mqtt::MqttBus>>);

impl skua_edge::prom::MetricsSource for BusMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let stats = self.0.as_ref().map(|b| b.stats());
        let (reconnects, failures, held, decode_errors) = stats
            .map_or((0, 0, 0, 0), |s| (s.connects.saturating_sub(1), s.connection_failures, s.held, s.decode_errors));
        let _ = write!(
            out,
            "# HELP skua_bus_reconnects_total Connections to the MQTT broker made again after one was lost.\n\
             # TYPE skua_bus_reconnects_total counter\nskua_bus_reconnects_total {reconnects}\n\
             # HELP skua_bus_connection_failures_total Connections to the MQTT broker lost, or attempts that failed.\n\
             # TYPE skua_bus_connection_failures_total counter\nskua_bus_connection_failures_total {failures}\n\
             # HELP skua_bus_buffered_messages Publications held for the broker (waiting, or sent and not yet acknowledged).\n\
             # TYPE skua_bus_buffered_messages gauge\nskua_bus_buffered_messages {held}\n\
             # HELP skua_bus_decode_errors_total Inbound MQTT messages dropped because they were not an envelope this node reads.\n\
             # TYPE skua_bus_decode_errors_total counter\nskua_bus_decode_errors_total {decode_errors}\n"
        );
    }
}

/// The commit this binary was built from: `SKUA_GIT_SHA` (or CI's `GITHUB_SHA`) at build time.
pub const GIT_SHA: &str = match option_env!("SKUA_GIT_SHA") {
    Some(s) => s,
    None => match option_env!("GITHUB_SHA") {
        Some(s) => s,
        None => "unknown",
    },
};

/// The server's own series on `/metrics`: build info, and registry propagation once the
/// control plane runs ([`RunningNode::launch`]).
#[derive(Default)]
struct ServerMetrics {
    propagator: std::sync::OnceLock<Arc<skua_control::Propagator>>,
}

impl skua_edge::prom::MetricsSource for ServerMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        // Label values from the build: kept to characters that need no escaping.
        let clean =
            |v: &str| v.chars().filter(|c| c.is_ascii_alphanumeric() || "._+-".contains(*c)).collect::<String>();
        let _ = write!(
            out,
            "# HELP skua_build_info The running build: version and git commit.\n# TYPE skua_build_info gauge\n\
             skua_build_info{{version=\"{}\",git_sha=\"{}\"}} 1\n",
            clean(env!("CARGO_PKG_VERSION")),
            clean(GIT_SHA)
        );
        let Some(p) = self.propagator.get() else { return };
        let _ = write!(
            out,
            "# HELP skua_registry_lag_seconds Time since this node last read the registry version from the store \
             (its registry is at most this stale, plus one registry_poll_interval).\n\
             # TYPE skua_registry_lag_seconds gauge\nskua_registry_lag_seconds {:.3}\n\
             # HELP skua_registry_version The registry version this node serves.\n\
             # TYPE skua_registry_version gauge\nskua_registry_version {}\n\
             # HELP skua_registry_resets_total Times the stored registry version went backwards (a restored store) \
             and the stored registry was installed.\n\
             # TYPE skua_registry_resets_total counter\nskua_registry_resets_total {}\n",
            p.lag().as_secs_f64(),
            p.snapshot().version,
            p.resets()
        );
    }
}

/// A PEM CA file and client pair, read.
type BackendPem = (Option<Vec<u8>>, Option<(Vec<u8>, Vec<u8>)>);

/// Reads a backend's certificate files (at start, and again before a reconnection).
fn backend_tls_pem(files: &crate::config::BackendTlsFiles) -> anyhow::Result<BackendPem> {
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()));
    let ca = files.ca.as_deref().map(read).transpose()?;
    let client = match &files.client {
        None => None,
        Some(c) => Some((read(&c.cert)?, read(&c.key)?)),
    };
    Ok((ca, client))
}

/// Opens the registry store in the configured store (`memory`: `embedded`'s shared one).
///
/// # Errors
/// When the store cannot be reached, is not migrated, or its URL is invalid.
pub async fn registry_store(
    config: &ServerConfig,
    embedded: &Embedded,
) -> anyhow::Result<Arc<dyn skua_core::RegistryStore>> {
    match &config.store {
        StoreConfig::Memory => embedded
            .registry
            .get_or_try_init(|| async {
                skua_store::open_registry("sqlite::memory:")
                    .await
                    .map_err(|e| anyhow::anyhow!("while opening the in-memory registry: {}", error_chain(&e)))
            })
            .await
            .cloned(),
        StoreConfig::Url(url) => {
            create_sqlite_dir(url)?;
            skua_store::open_registry(url)
                .await
                .map_err(|e| anyhow::anyhow!("while opening the registry in {}: {}", redact(url), error_chain(&e)))
        }
    }
}

/// Applies the store's migrations (`skua migrate`); returns the versions applied in the
/// database that this build does not know (a newer release's: this is a rollback), which are
/// left alone.
///
/// # Errors
/// When the store cannot be reached or a migration fails.
pub async fn migrate(url: &str) -> anyhow::Result<Vec<i64>> {
    migrate_with(url, skua_store::MigrateOptions::default()).await
}

/// [`migrate`] with Postgres' lock waits bounded and retried as `options` say
/// (`migrate_lock_timeout`, `migrate_retry_for`).
///
/// # Errors
/// As [`migrate`].
pub async fn migrate_with(url: &str, options: skua_store::MigrateOptions) -> anyhow::Result<Vec<i64>> {
    create_sqlite_dir(url)?;
    skua_store::migrate_with(url, options)
        .await
        .map_err(|e| anyhow::anyhow!("while migrating {}: {}", redact(url), error_chain(&e)))
}

pub use crate::errors::error_chain;

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
    crate::config::redact_url(url)
}

/// A running node.
pub struct RunningNode {
    /// Where the HTTP listener is bound.
    pub addr: SocketAddr,
    /// Where the separate `/metrics` listener is bound, if any (`metrics_listen`).
    pub metrics_addr: Option<SocketAddr>,
    /// Where the MQTT device listener is bound, if any (`mqtt_listen`).
    pub mqtt_addr: Option<SocketAddr>,
    /// Where the MQTT-over-TLS device listener is bound, if any (`mqtt_tls_listen`).
    pub mqtt_tls_addr: Option<SocketAddr>,
    /// The MQTT door (when `mqtt_listen` or `mqtt_tls_listen` is set) and its listeners, bound
    /// and not yet accepting (until [`Self::launch`] opens the edge).
    mqtt: Option<MqttListeners>,
    /// The edge's shared state.
    pub state: Arc<EdgeState>,
    /// Where the control-plane gRPC listener is bound, if any.
    pub grpc_addr: Option<SocketAddr>,
    /// Whether the admin dashboard is served under `/admin` ([`Self::launch`] with an admin key).
    pub dashboard: bool,
    /// The registry propagator, when the node runs with the control plane ([`Self::launch`]).
    pub propagator: Option<Arc<skua_control::Propagator>>,
    /// The listeners' TLS (certificates and their reloaders), when configured.
    pub tls: crate::tls::NodeTls,
    /// The node's webhook sender, its one webhook seam (triggers, hydration, wakes); its idle
    /// sweep stops with the control plane, after the edge drains.
    pub webhooks: skua_webhooks::WebhookSender,
    edge: EdgeNode,
    control_stop: CancellationToken,
    control_tasks: TaskTracker,
    server_metrics: Arc<ServerMetrics>,
}

/// The MQTT door of a node and its listeners, before they accept.
struct MqttListeners {
    door: Arc<skua_mqtt::MqttDoor>,
    plain: Option<TcpListener>,
    tls: Option<(TcpListener, tokio_rustls::TlsAcceptor)>,
}

/// Binds `at`, not accepting yet.
fn bind(at: SocketAddr) -> std::io::Result<TcpListener> {
    let l = std::net::TcpListener::bind(at)?;
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

/// The webhook engine's counters on `/metrics`.
struct WebhookMetricsSource(Arc<skua_webhooks::WebhookMetrics>);

impl skua_edge::prom::MetricsSource for WebhookMetricsSource {
    fn render(&self, out: &mut String) {
        self.0.render_prometheus(out);
    }
}

impl std::fmt::Debug for RunningNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningNode").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl RunningNode {
    /// Builds a node on `listener` (over TLS when `tls_cert` is configured) and binds its
    /// metrics listener, when configured; neither accepts until [`Self::launch`] has installed
    /// every route and opens the edge.
    ///
    /// # Errors
    /// When the listener's address cannot be read, the certificate files do not load or the
    /// metrics listener cannot be bound.
    fn start(
        config: &ServerConfig,
        registry: Arc<SharedRegistry>,
        mut backends: Backends,
        listener: TcpListener,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        crate::tls::install_provider();
        let control_stop = CancellationToken::new();
        let control_tasks = TaskTracker::new();
        let webhooks = skua_webhooks::WebhookSender::new(config.webhooks.clone(), &control_tasks, control_stop.clone())
            .map_err(|e| std::io::Error::other(error_chain(&e)))?;
        backends.metrics_sources.push(Arc::new(WebhookMetricsSource(webhooks.metrics().clone())));
        let server_metrics = Arc::new(ServerMetrics::default());
        backends.metrics_sources.push(server_metrics.clone());
        // The one webhook seam: triggers, hydration and wakes all post through the sender.
        backends.webhooks = Some(Arc::new(webhooks.clone()));
        let tls = crate::tls::NodeTls::load(&config.tls)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let (metrics, metrics_addr) = match config.metrics_listen {
            None => (None, None),
            Some(at) => {
                let l = std::net::TcpListener::bind(at)?;
                l.set_nonblocking(true)?;
                let l = TcpListener::from_std(l)?;
                let bound = l.local_addr()?;
                tracing::info!(addr = %bound, "Metrics listening.");
                (Some(l), Some(bound))
            }
        };
        let plain = config.mqtt_listen.map(bind).transpose()?;
        let mqtt_tls = match (config.mqtt_tls_listen, &tls.mqtt) {
            (None, _) => None,
            (Some(at), Some(t)) => Some((bind(at)?, t.acceptor.clone())),
            (Some(_), None) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "mqtt_tls_listen needs the client listener's certificate (tls_cert and tls_key, or --tls-self-signed)",
                ));
            }
        };
        let mqtt_addr = plain.as_ref().map(TcpListener::local_addr).transpose()?;
        let mqtt_tls_addr = mqtt_tls.as_ref().map(|(l, _)| l.local_addr()).transpose()?;
        let mqtt = (plain.is_some() || mqtt_tls.is_some()).then(|| {
            let mqtt_metrics = Arc::new(skua_mqtt::MqttMetrics::default());
            backends.metrics_sources.push(mqtt_metrics.clone());
            MqttListeners { door: skua_mqtt::MqttDoor::new(mqtt_metrics, config.mqtt), plain, tls: mqtt_tls }
        });
        let listeners = Listeners { client: listener, tls: tls.client.as_ref().map(|t| t.acceptor.clone()), metrics };
        let edge = EdgeNode::start(config.edge.clone(), config.node_id.clone(), registry, backends, listeners);
        let state = edge.state().clone();
        if !tls.reload_interval.is_zero() {
            for reloader in tls.reloaders() {
                control_tasks.spawn(reloader.watch(tls.reload_interval, control_stop.clone()));
            }
        }
        Ok(Self {
            addr,
            metrics_addr,
            mqtt_addr,
            mqtt_tls_addr,
            mqtt,
            state,
            grpc_addr: None,
            dashboard: false,
            propagator: None,
            tls,
            webhooks,
            edge,
            control_stop,
            control_tasks,
            server_metrics,
        })
    }

    /// Starts a node with its control plane: writes `fixtures` (if any) to the registry store
    /// through the same change sets as the API, loads the registry from the store, starts the
    /// edge on `listener`, keeps the registry current ([`skua_control::Propagator`]) and, with
    /// `grpc`, serves `skua.control.v1` there.
    ///
    /// # Errors
    /// When the fixtures conflict with the stored registry, the store fails, or a listener
    /// cannot be used.
    pub async fn launch(
        config: &ServerConfig,
        backends: Backends,
        registry_store: Arc<dyn skua_core::RegistryStore>,
        fixtures: Option<&skua_core::RegistryData>,
        listener: TcpListener,
        grpc: Option<TcpListener>,
    ) -> anyhow::Result<Self> {
        if let Some(f) = fixtures {
            skua_control::fixtures::load(registry_store.as_ref(), f)
                .await
                .map_err(|e| anyhow::anyhow!("while loading the fixtures: {}", error_chain(&e)))?;
        }
        let first = registry_store
            .load()
            .await
            .map_err(|e| anyhow::anyhow!("while loading the registry: {}", error_chain(&e)))?;
        let registry = first.data.build().map_err(|e| anyhow::anyhow!("the stored registry is invalid: {}", e.0))?;
        // A single node (in-process bus) on a durable store is the only user of its restore
        // records: whatever earlier runs still hold (a crash under another node id; nothing
        // else would ever end them) is released now, so reconnecting clients can claim it.
        if config.bus == BusConfig::Memory && matches!(config.store, StoreConfig::Url(_)) {
            let ttl = config.edge.restore_ttl.as_secs();
            match backends
                .store
                .release_other_nodes_restores(&config.node_id, skua_edge::clock::now_unix_s(), ttl)
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(records = n, "Released the restore records an earlier run of this node held."),
                Err(e) => tracing::warn!(error = %e, "Releasing an earlier run's restore records failed."),
            }
        }
        // An earlier run under this node id (a restart with a configured `node_id`) may have died
        // holding restore records; while this id stays registered no other node releases them.
        // Released now, before this run has a connection, with when that run was last seen
        // alive, so its clients recover from then (issue 19, docs/recovery.md).
        if matches!(config.store, StoreConfig::Url(_)) {
            let seen = match backends.presence.node_last_seen(&config.node_id).await {
                Ok(seen) => seen,
                Err(e) => {
                    tracing::warn!(error = %e, "Could not read when an earlier run of this node was last seen.");
                    None
                }
            };
            let ttl = config.edge.restore_ttl.as_secs();
            let now = skua_edge::clock::now_unix_s();
            match backends.store.release_node_restores(&config.node_id, now, ttl, seen).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(records = n, "Released the restore records an earlier run of this node id held.")
                }
                Err(e) => tracing::warn!(error = %e, "Releasing an earlier run's restore records failed."),
            }
        }
        let mut node = Self::start(config, Arc::new(SharedRegistry::new(registry)), backends, listener)?;
        // The engine is the control plane's node: no adapter between them.
        let admin: Arc<dyn skua_control::NodeAdmin> = node.state.engine.clone();
        // A store several nodes share (Postgres) also carries every node's connections.
        let shared = matches!(&config.store, StoreConfig::Url(u) if !u.starts_with("sqlite:"));
        let propagator = skua_control::Propagator::start(registry_store, admin, config.registry_poll_interval, shared)
            .await
            .map_err(|e| anyhow::anyhow!("while starting registry propagation: {}", error_chain(&e)))?;
        node.control_tasks.spawn(propagator.clone().run(node.control_stop.clone()));
        // Set once: `launch` is the only writer.
        let _ = node.server_metrics.propagator.set(propagator.clone());
        // One table of failed admin-key checks for the gRPC listener and the dashboard's
        // sign-in: an address gets `admin_key_max_failures` tries in all (issue 33, item 11).
        let admin_throttle = Arc::new(skua_control::throttle::AdminKeyThrottle::new(config.admin_key_throttle));
        if let Some(grpc) = grpc {
            let key = config
                .admin_key
                .clone()
                .ok_or_else(|| anyhow::anyhow!("the gRPC listener needs an admin key (admin_key)"))?;
            node.grpc_addr = Some(grpc.local_addr()?);
            let service = skua_control::ControlService::new(propagator.clone(), config.control)
                .with_webhook_policy(config.webhook_policy());
            let stop = node.control_stop.clone();
            let options = skua_control::server::ServeOptions {
                admin_key: key.0,
                tls: node.tls.grpc.as_ref().map(|t| t.acceptor.clone()),
                reflection_public: config.grpc_reflection_public,
                throttle: admin_throttle.clone(),
                request_timeout: config.grpc_request_timeout,
            };
            node.control_tasks.spawn(async move {
                if let Err(e) = skua_control::server::serve(grpc, service, options, stop).await {
                    tracing::error!(error = %e, "Control-plane gRPC server stopped.");
                }
            });
        }
        // The REST API and the dashboard, served on the edge's listener once it opens.
        let mut routes = skua_edge::ApiRoutes::default();
        if let Some(key) = config.admin_key.as_ref().filter(|_| config.dashboard.enabled) {
            let service = skua_control::ControlService::new(propagator.clone(), config.control)
                .with_webhook_policy(config.webhook_policy());
            let dashboard = skua_control::dashboard::Dashboard::new(
                service,
                &key.0,
                config.dashboard,
                admin_throttle,
                node.tls.client.is_some(),
            );
            node.control_tasks.spawn(dashboard.clone().run(node.control_stop.clone()));
            routes.admin = Some(skua_control::dashboard::router(dashboard));
        }
        if config.rest.enabled {
            // The same address rules as gRPC and the dashboard (issue 33): a tenant's API key
            // configures webhooks here.
            let service = skua_control::ControlService::new(propagator.clone(), config.control)
                .with_webhook_policy(config.webhook_policy());
            routes.api = Some(skua_control::rest::router(service, config.rest));
        }
        node.propagator = Some(propagator);
        node.dashboard = routes.admin.is_some();
        // Only now, with every route in place: until then connections wait in the backlog
        // rather than meet a `/v1` or `/admin` that answers 404 (issue 31).
        if let Some(mqtt) = node.mqtt.as_ref() {
            // MQTT over WebSocket at `/mqtt` comes with the door (docs/mqtt.md), like `/v1` and
            // `/admin` in place before the edge opens.
            routes.mqtt_ws = Some(mqtt.door.clone());
        }
        node.edge.open(routes);
        if let Some(mqtt) = node.mqtt.take() {
            // On the connections' tracker: they stop accepting when the drain begins.
            let st = &node.state;
            if let Some(l) = mqtt.plain {
                st.tracker.spawn(mqtt.door.clone().serve(l, None, st.clone()));
                tracing::info!(addr = ?node.mqtt_addr, "MQTT device listener open.");
            }
            if let Some((l, acceptor)) = mqtt.tls {
                st.tracker.spawn(mqtt.door.clone().serve(l, Some(acceptor), st.clone()));
                tracing::info!(addr = ?node.mqtt_tls_addr, "MQTT over TLS device listener open.");
            }
        }
        tracing::info!(addr = %node.addr, node = %config.node_id, tls = node.tls.client.is_some(), "Skua node listening.");
        Ok(node)
    }

    /// Drains and stops: readiness fails and new upgrades are refused, for the drain delay
    /// while open sockets carry on; then every socket closes 1012 after its presence is
    /// released, and the node waits up to the shutdown grace for all connection tasks.
    /// Returns whether everything finished within the grace.
    pub async fn shutdown(mut self) -> bool {
        let drained = self.edge.drain(self.state.config.shutdown_grace).await;
        // The control plane after the drain: its final flush carries the drained connections'
        // counts; the edge's own tasks last.
        self.control_stop.cancel();
        self.control_tasks.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.control_tasks.wait()).await;
        self.edge.stop().await;
        drained
    }
}
