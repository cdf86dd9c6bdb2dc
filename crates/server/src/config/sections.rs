//! The server's own settings ([`NodeSettings`](super::NodeSettings): backends, listeners,
//! TLS, the admin key) checked into typed sections, each failing with a [`ConfigError`] that
//! names the key; [`Sections::resolve`] runs them, and has each other crate check its own part
//! next to where it is declared ([`skua_edge::config::EdgeSettings::config`],
//! [`skua_control::ControlSettings`], [`skua_mqtt::MqttSettings::limits`]).
//!
//! Adding a setting: a field (doc comment, flag, variable, default) in the settings struct of
//! the crate that uses it (a part of [`Settings`]) and one line in the check below that
//! declaration; `config/default.toml` and docs/settings.md are regenerated from the structs
//! ([`super::generated`]), and the typed configuration's `Default` is the declared default.

use std::net::SocketAddr;
use std::path::PathBuf;

use skua_core::NodeId;
use skua_core::settings::SettingError;
use skua_core::settings::check::{duration, nonzero_duration, positive, required};
use skua_edge::EdgeConfig;

use super::{AdminKey, BackendTlsFiles, BusConfig, ConfigError, PresenceConfig, Settings, StoreConfig, redact_url};
use crate::tls::{CertFiles, ListenerTlsConfig};

/// A setting's key (its field name in [`Settings`]) with its value, as the checks take it.
type Key<'a, T> = skua_core::settings::check::Key<'a, T>;

/// `(key, value)` of the setting `$k` of `$s`, so that an error names exactly the field read.
macro_rules! key {
    ($s:expr, $k:ident) => {
        skua_core::setting!($s, $k)
    };
}

impl From<SettingError> for ConfigError {
    fn from(e: SettingError) -> Self {
        Self::Invalid { key: e.key, reason: e.reason }
    }
}

/// The refusal of `key` for `reason`.
fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}

/// A socket address; empty (or unset) is `None`.
fn optional_address((key, v): Key<'_, String>) -> Result<Option<SocketAddr>, ConfigError> {
    match v.map(String::as_str) {
        None | Some("") => Ok(None),
        Some(a) => a.parse().map(Some).map_err(|e| invalid(key, format!("{a:?}: {e}"))),
    }
}

/// A path; empty (or unset) is `None`.
fn path((_, v): Key<'_, String>) -> Option<PathBuf> {
    v.filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// A certificate and its key: both or neither (an error names the certificate's key).
fn pair(cert: Key<'_, String>, key: Key<'_, String>) -> Result<Option<CertFiles>, ConfigError> {
    match (path(cert), path(key)) {
        (None, None) => Ok(None),
        (Some(c), Some(k)) => Ok(Some(CertFiles { cert: c, key: k })),
        _ => Err(invalid(cert.0, "the certificate and its key must be set together")),
    }
}

/// Which backends the node uses and who it is: `bus`, `presence`, `store` (with the
/// certificates of `mqtts://` and `rediss://`: `bus_tls_*`, `presence_tls_*`), `node_id`,
/// `fixtures`.
#[derive(Debug, Clone)]
pub struct Backends {
    /// Bus backend.
    pub bus: BusConfig,
    /// Presence backend.
    pub presence: PresenceConfig,
    /// Certificates of an `mqtts://` bus.
    pub bus_tls: BackendTlsFiles,
    /// Certificates of a `rediss://` presence store.
    pub presence_tls: BackendTlsFiles,
    /// Session store.
    pub store: StoreConfig,
    /// Connections of a Postgres store's pool (`store_pool_size`).
    pub store_pool_size: u32,
    /// How `skua migrate` waits for Postgres' locks (`migrate_lock_timeout`, `migrate_retry_for`).
    pub migrate: skua_store::MigrateOptions,
    /// This node (random when not set).
    pub node_id: NodeId,
    /// Fixtures file, if any.
    pub fixtures: Option<PathBuf>,
    /// One node of a cluster (`cluster`): its bus, presence and store are shared ones.
    pub cluster: bool,
}

impl Backends {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let bus = match required(key!(s.node, bus))?.as_str() {
            "memory" => BusConfig::Memory,
            url if url.starts_with("mqtt://") || url.starts_with("mqtts://") => BusConfig::Mqtt { url: url.to_owned() },
            other => {
                return Err(invalid(
                    "bus",
                    format!("{:?}: use \"memory\", mqtt://host:port or mqtts://host:port", redact_url(other)),
                ));
            }
        };
        let presence = match required(key!(s.node, presence))?.as_str() {
            "memory" => PresenceConfig::Memory,
            url if url.starts_with("redis://") || url.starts_with("rediss://") => {
                PresenceConfig::Redis { url: url.to_owned() }
            }
            other => {
                return Err(invalid(
                    "presence",
                    format!("{:?}: use \"memory\", redis://host:port/db or rediss://host:port/db", redact_url(other)),
                ));
            }
        };
        let store = match required(key!(s.node, store))?.as_str() {
            "memory" => StoreConfig::Memory,
            url if url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                StoreConfig::Url(url.to_owned())
            }
            _ => return Err(invalid("store", "use sqlite://PATH, sqlite::memory:, postgres://… or memory")),
        };
        let node_id = match s.node.node_id.as_deref() {
            None | Some("") => {
                let id = uuid::Uuid::new_v4().simple().to_string();
                NodeId::parse(&format!("node-{}", &id[..12])).map_err(|e| invalid("node_id", e.to_string()))?
            }
            Some(id) => NodeId::parse(id).map_err(|e| invalid("node_id", e.to_string()))?,
        };
        let bus_tls = BackendTlsFiles {
            ca: path(key!(s.node, bus_tls_ca)),
            client: pair(key!(s.node, bus_tls_cert), key!(s.node, bus_tls_key))?,
        };
        if bus_tls.is_set() && !matches!(&bus, BusConfig::Mqtt { url } if url.starts_with("mqtts://")) {
            return Err(invalid("bus_tls_ca", "bus_tls_* need an mqtts:// bus"));
        }
        let presence_tls = BackendTlsFiles {
            ca: path(key!(s.node, presence_tls_ca)),
            client: pair(key!(s.node, presence_tls_cert), key!(s.node, presence_tls_key))?,
        };
        if presence_tls.is_set() && !matches!(&presence, PresenceConfig::Redis { url } if url.starts_with("rediss://"))
        {
            return Err(invalid("presence_tls_ca", "presence_tls_* need a rediss:// presence store"));
        }
        let cluster = required(key!(s.node, cluster))?;
        if cluster {
            let mut missing = Vec::new();
            if bus == BusConfig::Memory {
                missing.push("SKUA_BUS (mqtt:// or mqtts://)");
            }
            if presence == PresenceConfig::Memory {
                missing.push("SKUA_PRESENCE (redis:// or rediss://)");
            }
            if !matches!(&store, StoreConfig::Url(u) if !u.starts_with("sqlite:")) {
                missing.push("SKUA_STORE (postgres://)");
            }
            if !missing.is_empty() {
                return Err(invalid(
                    "cluster",
                    format!(
                        "a cluster node needs shared backends, and would otherwise run alone on in-process ones; \
                         set {}",
                        missing.join(", ")
                    ),
                ));
            }
        }
        let migrate = skua_store::MigrateOptions {
            lock_timeout: duration(key!(s.node, migrate_lock_timeout))?,
            retry_for: duration(key!(s.node, migrate_retry_for))?,
        };
        Ok(Self {
            bus,
            presence,
            bus_tls,
            presence_tls,
            store,
            store_pool_size: positive(key!(s.node, store_pool_size))?,
            migrate,
            node_id,
            fixtures: s.node.fixtures.clone(),
            cluster,
        })
    }
}

/// The node's listeners besides gRPC: `listen`, `metrics_listen`, `mqtt_listen`, and whether
/// `/metrics` may go without a token (what guards the client listener is the edge's).
#[derive(Debug, Clone)]
pub struct FrontDoor {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// The separate `/metrics` listener, if any.
    pub metrics_listen: Option<SocketAddr>,
    /// The MQTT device listener, if any (issue 37).
    pub mqtt_listen: Option<SocketAddr>,
    /// `/metrics` is served without a token on purpose.
    pub metrics_public: bool,
}

impl FrontDoor {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let listen = required(key!(s.node, listen))?;
        let listen = listen.parse().map_err(|e| invalid("listen", format!("{listen:?}: {e}")))?;
        Ok(Self {
            listen,
            metrics_listen: optional_address(key!(s.node, metrics_listen))?,
            mqtt_listen: optional_address(key!(s.node, mqtt_listen))?,
            metrics_public: required(key!(s.node, metrics_public))?,
        })
    }
}

/// Between nodes: the publishes the MQTT bus buffers (`bus_publish_buffer`), and the
/// idempotency keys the in-memory backend remembers (`idempotency_max_keys`).
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Publishes buffered while the broker is unreachable.
    pub bus_publish_buffer: usize,
    /// Keys the in-memory idempotency backend remembers at most.
    pub idempotency_max_keys: usize,
}

impl Cluster {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            bus_publish_buffer: positive(key!(s.node, bus_publish_buffer))?,
            idempotency_max_keys: positive(key!(s.node, idempotency_max_keys))?,
        })
    }
}

/// TLS of the node's listeners: `tls_cert`/`tls_key` (client), `grpc_tls_cert`/`grpc_tls_key`
/// (control plane; by default the client's pair), `tls_reload_interval`.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The listeners' certificates and their reloading.
    pub listeners: ListenerTlsConfig,
}

impl Tls {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let client = pair(key!(s.node, tls_cert), key!(s.node, tls_key))?;
        let grpc = pair(key!(s.node, grpc_tls_cert), key!(s.node, grpc_tls_key))?.or(client.clone());
        Ok(Self {
            listeners: ListenerTlsConfig {
                client,
                grpc,
                reload_interval: duration(key!(s.node, tls_reload_interval))?,
            },
        })
    }
}

/// The control plane: its gRPC listener, key and registry polling (the node's settings), and
/// what [`skua_control::ControlSettings`] checks: the back-off of failing keys, reflection, the
/// caps it enforces, the REST API and the dashboard.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// gRPC listener, if any.
    pub grpc_listen: Option<SocketAddr>,
    /// The admin API key.
    pub admin_key: Option<AdminKey>,
    /// Backing off addresses that fail the admin-key check.
    pub admin_key_throttle: skua_control::throttle::ThrottleConfig,
    /// Whether gRPC reflection needs no admin key.
    pub grpc_reflection_public: bool,
    /// Longest a gRPC call may take, reading its request body included.
    pub grpc_request_timeout: std::time::Duration,
    /// How often the store's registry version is polled.
    pub registry_poll_interval: std::time::Duration,
    /// Caps the control plane enforces.
    pub limits: skua_control::ControlLimits,
    /// The REST API.
    pub rest: skua_control::rest::RestConfig,
    /// The admin dashboard.
    pub dashboard: skua_control::dashboard::DashboardConfig,
}

impl ControlPlane {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let admin_key = s.node.admin_key.clone().filter(|k| !k.is_empty()).map(AdminKey);
        if admin_key.as_ref().is_some_and(|k| k.0.len() < 16) {
            return Err(invalid("admin_key", "must be at least 16 characters"));
        }
        let registry_poll_interval = duration(key!(s.node, registry_poll_interval))?;
        if registry_poll_interval.is_zero() || registry_poll_interval > std::time::Duration::from_secs(1) {
            return Err(invalid(
                "registry_poll_interval",
                "must be above 0 and at most 1s (changes reach every node within a second)",
            ));
        }
        let admin_key_throttle = s.control.admin_key_throttle()?;
        Ok(Self {
            grpc_listen: optional_address(key!(s.node, grpc_listen))?,
            admin_key,
            admin_key_throttle,
            grpc_reflection_public: s.control.grpc_reflection_public()?,
            grpc_request_timeout: s.control.grpc_request_timeout()?,
            registry_poll_interval,
            limits: s.control.limits()?,
            rest: s.control.rest()?,
            dashboard: s.control.dashboard()?,
        })
    }
}

/// Traces: the OTLP endpoint spans are exported to.
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// Where spans are exported (OTLP/gRPC); `None` exports nothing.
    pub otlp_endpoint: Option<String>,
}

impl Telemetry {
    /// This section of `s` (the endpoint falling back to `OTEL_EXPORTER_OTLP_ENDPOINT`), checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `otlp_endpoint`.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let otlp_endpoint = crate::telemetry::endpoint(s.node.otlp_endpoint.as_deref().filter(|e| !e.is_empty()));
        if let Some(e) = otlp_endpoint.as_deref().filter(|e| !e.starts_with("http://")) {
            return Err(invalid("otlp_endpoint", format!("{e:?}: use http://host:port")));
        }
        Ok(Self { otlp_endpoint })
    }
}

/// Webhooks: the address rules and limits of the webhook sender; the trigger queue, its
/// deliveries at once and the trigger retry schedule (`webhook_*` keys, read by the engine's
/// trigger delivery).
#[derive(Debug, Clone)]
pub struct Webhooks {
    /// The webhook sender's settings.
    pub engine: skua_webhooks::WebhookConfig,
    /// `webhook_queue`: triggers waiting on this node.
    pub trigger_queue: usize,
    /// `webhook_max_pending`: triggers being delivered at once, retry waits included.
    pub trigger_in_flight: usize,
    /// `webhook_trigger_attempts` and `webhook_trigger_first_retry`: the waits between a
    /// trigger's attempts.
    pub trigger_retry: Vec<std::time::Duration>,
}

impl Webhooks {
    /// This section of `s`, checked (the engine's part by [`skua_webhooks::WebhookSettings::config`]).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let attempts: u32 = positive(key!(s.webhooks, webhook_trigger_attempts))?;
        if attempts > 20 {
            return Err(invalid("webhook_trigger_attempts", "at most 20"));
        }
        Ok(Self {
            engine: skua_webhooks::WebhookConfig {
                wake_allowed_hosts: required(key!(s.members, wake_allowed_hosts))?,
                ..s.webhooks.config()?
            },
            trigger_queue: positive(key!(s.webhooks, webhook_queue))?,
            trigger_in_flight: positive(key!(s.webhooks, webhook_max_pending))?,
            trigger_retry: skua_core::webhook::exponential_delays(
                attempts,
                nonzero_duration(key!(s.webhooks, webhook_trigger_first_retry))?,
            ),
        })
    }
}

/// The MQTT device door's protocol bounds (`mqtt_*`) and its TLS listener (its plain
/// listener, `mqtt_listen`, is the front door's).
#[derive(Debug, Clone)]
pub struct MqttDoor {
    /// The MQTT-over-TLS listener, if any (`mqtt_tls_listen`).
    pub tls_listen: Option<SocketAddr>,
    /// The bounds the door's codec and connections enforce.
    pub limits: skua_mqtt::MqttLimits,
}

impl MqttDoor {
    /// This section of `s`, checked ([`skua_mqtt::MqttSettings::limits`],
    /// [`skua_mqtt::MqttSettings::tls_listen`]).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self { tls_listen: s.mqtt.tls_listen()?, limits: s.mqtt.limits()? })
    }
}

/// Every section of one node's settings, each checked.
#[derive(Debug, Clone)]
pub struct Sections {
    /// Backends and identity.
    pub backends: Backends,
    /// The node's listeners.
    pub front: FrontDoor,
    /// The edge's configuration: its settings checked by the engine, then what the server
    /// derives from the backends and listeners.
    pub edge: EdgeConfig,
    /// Bus buffering and the in-memory idempotency keys.
    pub cluster: Cluster,
    /// Listener TLS.
    pub tls: Tls,
    /// The control plane.
    pub control: ControlPlane,
    /// Tracing export.
    pub telemetry: Telemetry,
    /// Webhook delivery.
    pub webhooks: Webhooks,
    /// The MQTT door's bounds.
    pub mqtt: MqttDoor,
}

impl Sections {
    /// Every section of `s` (defaults already applied), checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let backends = Backends::resolve(s)?;
        let front = FrontDoor::resolve(s)?;
        let webhooks = Webhooks::resolve(s)?;
        let mut edge = s.edge.config(&s.triggers, &s.members)?;
        edge.metrics_separate = front.metrics_listen.is_some();
        let single = backends.bus == BusConfig::Memory;
        let t = &mut edge.triggers;
        t.queue = webhooks.trigger_queue;
        t.in_flight = webhooks.trigger_in_flight;
        t.retry_delays.clone_from(&webhooks.trigger_retry);
        // A single node on a durable store sends what an earlier run left, at once.
        t.take_over_at_start = single && matches!(backends.store, StoreConfig::Url(_));
        // A single node: whatever an earlier run left online is offline now, and it sees every
        // member change (no time bound on wake's negative answers).
        edge.members.offline_others_at_start = single;
        edge.members.negative_until_changed = single;
        Ok(Self {
            cluster: Cluster::resolve(s)?,
            tls: Tls::resolve(s)?,
            control: ControlPlane::resolve(s)?,
            telemetry: Telemetry::resolve(s)?,
            mqtt: MqttDoor::resolve(s)?,
            backends,
            front,
            edge,
            webhooks,
        })
    }
}
