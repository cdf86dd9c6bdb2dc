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
            let tls = if config.presence_tls.is_set() {
                let (ca_pem, client_pem) = backend_tls_pem(&config.presence_tls)?;
                Some(skua_presence::RedisTls { ca_pem, client_pem })
            } else {
                None
            };
            let presence = skua_presence::RedisPresence::connect_with_tls(url, &config.edge.namespace, tls)
                .await
                .map_err(|e| anyhow::anyhow!("while connecting to Redis presence at {}: {e}", redact(url)))?;
            shared_limits = Some(Arc::new(presence.shared_limits(&config.edge.namespace)));
            history = Arc::new(
                presence.history(&config.edge.namespace).with_max_project_bytes(e.history_max_bytes_per_project as u64),
            );
            let keys = presence.idempotency(&config.edge.namespace);
            (Arc::new(presence), Arc::new(keys))
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
        trigger_hooks: None,
        metrics_sources: vec![Arc::new(BusMetrics(mqtt_bus)), Arc::new(IdempotencyMetrics(memory_idempotency))],
        hydrator: None,
        wake_poster: None,
        shared_limits,
        history: Some(history),
        idempotency,
    })
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

/// Reads a backend's certificate files.
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
    /// The registry propagator, when the node runs with the control plane ([`Self::launch`]).
    pub propagator: Option<Arc<skua_control::Propagator>>,
    /// The listeners' TLS (certificates and their reloaders), when configured.
    pub tls: crate::tls::NodeTls,
    /// The node's webhook sender (hydration, triggers); stopped after the edge drains.
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

/// Trigger webhooks through the webhook engine: the topic's trigger entry (N41) from the
/// registry, each attempt one engine request (`post_once`, on the trigger's task) with the
/// target's headers, timeout and the app's secret (N42).
struct EngineHooks(skua_webhooks::WebhookSender);

#[async_trait::async_trait]
impl skua_edge::triggers::TriggerHooks for EngineHooks {
    fn target(
        &self,
        registry: &skua_core::Registry,
        topic: &skua_core::TopicAddress,
    ) -> Option<skua_edge::triggers::TriggerTarget> {
        let kind = skua_core::webhook::WebhookKind::Trigger;
        let (target, _) = registry.webhook_target(topic, kind)?;
        Some(skua_edge::triggers::TriggerTarget { url: Arc::from(target.url.as_str()), timeout: target.timeout(kind) })
    }

    async fn post(
        &self,
        registry: &skua_core::Registry,
        topic: &skua_core::TopicAddress,
        url: &str,
        delivery_id: &str,
        body: bytes::Bytes,
        retry: bool,
    ) -> Result<(), skua_edge::triggers::PostFailure> {
        use skua_core::webhook::{WebhookKind, WebhookTarget};
        let kind = WebhookKind::Trigger;
        // The app's secret, whether or not the entry is still the one the trigger was made for.
        let secret = registry
            .project(&topic.room.project)
            .and_then(|p| p.apps.iter().find(|a| a.id == topic.room.app))
            .and_then(|a| a.webhook_secret.as_ref());
        let unchanged = registry.webhook_target(topic, kind).map(|(t, _)| t).filter(|t| t.url == url);
        // The configuration changed since (a dead letter's retry): the stored URL, signed with
        // the app's current secret, without the new entry's headers.
        let stored;
        let target: &WebhookTarget = match unchanged {
            Some(t) => t,
            None => {
                stored = WebhookTarget { url: url.to_owned(), headers: Vec::new(), timeout_ms: None };
                &stored
            }
        };
        match self.0.post_once(kind, target, secret, delivery_id, body, retry).await {
            Ok(_) => Ok(()),
            Err(e) => Err(skua_edge::triggers::PostFailure { retryable: e.is_retryable(), error: error_chain(&e) }),
        }
    }
}

/// Wake requests (N47) through the webhook engine: signed with the project's wake secret (N42),
/// up to 3 attempts (1 s, then 2 s apart) within the member's wake timeout. The engine counts them
/// under `kind="wake"`; `skua_wakes_total` counts wakes by outcome.
struct EngineWaker {
    sender: skua_webhooks::WebhookSender,
    registry: Arc<SharedRegistry>,
}

#[async_trait::async_trait]
impl skua_edge::members::WakePoster for EngineWaker {
    async fn post(
        &self,
        project: &skua_core::ProjectId,
        target: &skua_edge::members::WakeTarget,
        payload: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), String> {
        use skua_core::webhook::{WebhookCall, WebhookKind, WebhookTarget};
        let secret = self.registry.load().project(project).and_then(|p| p.wake_secret.clone());
        let text = |k: &str| payload.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
        let call = WebhookCall {
            kind: WebhookKind::Wake,
            target: Arc::new(WebhookTarget {
                url: target.url.clone(),
                headers: target.headers.clone(),
                timeout_ms: None,
            }),
            secret,
            app_slug: Arc::from(text("app")),
            room_name: Arc::from(text("room")),
        };
        let request = skua_webhooks::WebhookRequest::new(call, payload);
        let schedule = skua_webhooks::RetrySchedule::hydration();
        match self.sender.call(&request, &schedule, target.timeout).await {
            Ok(_) => Ok(()),
            Err(e) => Err(error_chain(&e)),
        }
    }
}

/// The edge as the control plane sees it ([`skua_control::NodeAdmin`]).
struct EdgeAdmin(Arc<EdgeState>, skua_webhooks::WebhookSender);

#[async_trait::async_trait]
impl skua_control::NodeAdmin for EdgeAdmin {
    fn node_id(&self) -> String {
        self.0.node.to_string()
    }

    fn registry(&self) -> Arc<skua_core::Registry> {
        self.0.registry.load()
    }

    fn install_registry(&self, registry: skua_core::Registry) {
        self.0.install_registry(registry);
    }

    fn connections(
        &self,
        project: &skua_core::ProjectId,
        actor: Option<&skua_core::ActorId>,
    ) -> Vec<skua_control::ConnectionInfo> {
        self.0
            .connections
            .list(project, actor)
            .into_iter()
            .map(|(id, e)| skua_control::ConnectionInfo {
                connection_id: id.to_string(),
                actor: e.actor,
                client_id: e.client_id,
                connected_at_ms: e.connected_at_ms,
                subscriptions: e.subscriptions.load(std::sync::atomic::Ordering::Relaxed),
                protocol: e.protocol.as_str(),
            })
            .collect()
    }

    fn all_connections(&self) -> Vec<(skua_core::ProjectId, skua_control::ConnectionInfo)> {
        self.0
            .connections
            .all()
            .into_iter()
            .map(|(id, e)| {
                let info = skua_control::ConnectionInfo {
                    connection_id: id.to_string(),
                    actor: e.actor,
                    client_id: e.client_id,
                    connected_at_ms: e.connected_at_ms,
                    subscriptions: e.subscriptions.load(std::sync::atomic::Ordering::Relaxed),
                    protocol: e.protocol.as_str(),
                };
                (e.project, info)
            })
            .collect()
    }

    fn disconnect(&self, actor: &skua_core::ActorId) -> u32 {
        self.0.connections.disconnect(actor)
    }

    async fn publish(
        &self,
        p: skua_control::ServerPublish,
    ) -> Result<skua_control::ServerPublished, skua_control::PublishRefused> {
        use skua_edge::publish::{Origin, PublishRequest};
        let req = PublishRequest {
            origin: Origin::Api { project: &p.project, topic: &p.topic, from: p.from.as_deref() },
            filter: skua_protocol::filters::publish_filter_key(&p.filter),
            data: p.data,
            retain: p.retain,
            qos: 0,
            idempotency_key: p.idempotency_key.as_deref(),
            wake_reply: None,
        };
        let a = self.0.publisher.publish(req).await?;
        Ok(skua_control::ServerPublished { msg_id: a.msg_id, timestamp_ms: a.timestamp_ms, duplicate: a.duplicate })
    }

    fn take_usage(&self) -> Vec<(skua_core::ProjectId, u64)> {
        self.0.connections.take_usage()
    }

    async fn webhook_failures(
        &self,
        filter: skua_core::DeadLetterFilter<'_>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<skua_core::DeadLetter>, String> {
        self.0.store.list_dead_letters(filter, after, limit).await.map_err(|e| error_chain(&e))
    }

    async fn retry_webhook_failures(
        &self,
        filter: skua_core::DeadLetterFilter<'_>,
        limit: u32,
    ) -> Result<Vec<(String, Option<String>)>, String> {
        let Some(t) = &self.0.triggers else {
            return Err("this node posts no webhooks (no webhook engine configured)".into());
        };
        let done = t.retry_dead_letters(filter, limit).await.map_err(|e| error_chain(&e))?;
        Ok(done.into_iter().map(|o| (o.delivery_id, o.error)).collect())
    }

    async fn purge_webhook_failures(&self, filter: skua_core::DeadLetterFilter<'_>) -> Result<u64, String> {
        self.0.store.delete_dead_letters(filter).await.map_err(|e| error_chain(&e))
    }

    fn return_usage(&self, counts: Vec<(skua_core::ProjectId, u64)>) {
        self.0.connections.return_usage(counts);
    }

    fn stats(&self) -> skua_control::NodeStats {
        use std::sync::atomic::Ordering::Relaxed;
        let m = &self.0.metrics;
        let opened = m.connections_opened.load(Relaxed);
        // Summed over the authenticated connections now, as the Prometheus gauges are.
        let (frames, bytes) = self
            .0
            .connections
            .all()
            .iter()
            .fold((0usize, 0usize), |(f, b), (_, e)| (f + e.handle.queued_frames(), b + e.handle.queued_bytes()));
        skua_control::NodeStats {
            connections: opened.saturating_sub(m.connections_closed.load(Relaxed)),
            messages_in: m.publishes_accepted.load(Relaxed),
            messages_out: m.deliveries.load(Relaxed),
            refused: m.publishes_refused.load(Relaxed),
            retained_bytes: self.0.hub.retained_bytes() as u64,
            backends: self.0.backends_up().to_vec(),
            outbound_frames: frames as u64,
            outbound_bytes: bytes as u64,
            bus_queued: self.0.hub.queued_deliveries() as u64,
            triggers_queued: self.0.triggers.as_ref().map(|t| {
                let (queued, overflow) = t.queued();
                (queued as u64, overflow as u64)
            }),
        }
    }

    fn recent_webhooks(&self) -> Vec<skua_control::RecentWebhook> {
        self.1
            .recent()
            .into_iter()
            .map(|d| skua_control::RecentWebhook {
                kind: d.kind.as_str(),
                host: d.host,
                outcome: d.outcome.as_str(),
                status: d.status,
                latency_ms: u64::try_from(d.latency.as_millis()).unwrap_or(u64::MAX),
                at_unix_ms: d.at_unix_ms,
            })
            .collect()
    }

    async fn cluster_nodes(&self) -> Result<Vec<skua_core::NodeSeen>, String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.0.presence.nodes(now).await.map_err(|e| error_chain(&e))
    }

    async fn durable_groups(
        &self,
        project: &skua_core::ProjectId,
        after: &str,
        limit: u32,
    ) -> Result<Vec<skua_core::ConsumerBacklog>, String> {
        let prefix = skua_core::ConsumerId::group_prefix(project);
        self.0.store.list_consumers(&prefix, after, limit).await.map_err(|e| error_chain(&e))
    }

    fn local_group_members(&self, group: &skua_core::GroupKey) -> Vec<(skua_core::ActorId, Option<String>)> {
        let members = self.0.hub.group_members(group);
        if members.is_empty() {
            return Vec::new();
        }
        let conns: std::collections::HashMap<_, _> =
            self.0.connections.list(&group.topic.room.project, None).into_iter().collect();
        members
            .into_iter()
            .map(|(actor, conn)| {
                let client = conns.get(&conn).and_then(|e| e.client_id.clone());
                (actor, client)
            })
            .collect()
    }

    async fn room_presence(&self, room: &skua_core::RoomKey) -> Result<Vec<skua_core::PresenceEntry>, String> {
        self.0.presence.list(room).await.map_err(|e| error_chain(&e))
    }

    async fn watch_topic(
        &self,
        topic: &skua_core::TopicAddress,
        capacity: usize,
    ) -> Result<tokio::sync::mpsc::Receiver<Arc<skua_core::Envelope>>, String> {
        let mut tap = self.0.hub.tap(topic, capacity).await.map_err(|e| e.to_string())?;
        let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        let hub = self.0.hub.clone();
        // Forwards until the dashboard drops its receiver (or the node stops), then ends the
        // watch and its bus subscription.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tx.closed() => break,
                    e = tap.rx.recv() => match e {
                        Some(e) => {
                            let _ = tx.try_send(e);
                        }
                        None => break,
                    },
                }
            }
            hub.untap(tap).await;
        });
        Ok(rx)
    }

    fn set_usage(&self, project: &skua_core::ProjectId, period: &str, total: u64) {
        self.0.connections.set_usage(project, period, total);
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
        backends.trigger_hooks = Some(Arc::new(EngineHooks(webhooks.clone())));
        backends.wake_poster = Some(Arc::new(EngineWaker { sender: webhooks.clone(), registry: registry.clone() }));
        if backends.hydrator.is_none() {
            backends.hydrator = Some(Arc::new(crate::hydration::WebhookHydrator(webhooks.clone())));
        }
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
        let admin: Arc<dyn skua_control::NodeAdmin> = Arc::new(EdgeAdmin(node.state.clone(), node.webhooks.clone()));
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
            // Set once per node: `launch` is the only writer.
            let _ = node.state.admin.set(skua_control::dashboard::router(dashboard));
        }
        if config.rest.enabled {
            // The same address rules as gRPC and the dashboard (issue 33): a tenant's API key
            // configures webhooks here.
            let service = skua_control::ControlService::new(propagator.clone(), config.control)
                .with_webhook_policy(config.webhook_policy());
            // Set once per node: `launch` is the only writer.
            let _ = node.state.api.set(skua_control::rest::router(service, config.rest));
        }
        node.propagator = Some(propagator);
        // Only now, with every route in place: until then connections wait in the backlog
        // rather than meet a `/v1` or `/admin` that answers 404 (issue 31).
        node.edge.open();
        if let Some(mqtt) = node.mqtt.take() {
            // MQTT over WebSocket at `/mqtt` comes with the door (docs/mqtt.md); installed before
            // the edge opens, like `/v1` and `/admin`. Set once per node: `launch` is the only writer.
            let _ = node.state.mqtt_ws.set(mqtt.door.clone());
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
