//! `skua serve` settings: compiled-in defaults (`config/default.toml`), then the `--config`
//! file, then `SKUA_*` environment variables and flags (clap reads both; flags win).
//!
//! [`Settings`] composes the settings each crate declares ([`NodeSettings`] here, the edge's
//! [`EdgeSettings`], [`TriggerSettings`] and [`MembersSettings`], [`WebhookSettings`],
//! [`ControlSettings`], [`MqttSettings`]): every key a flag, a variable and a TOML key, named alike, declared once
//! with its default. [`sections`] reads it in typed sections, each checking its own keys;
//! [`ServerConfig`] is what the node runs with, the edge's part being [`EdgeConfig`].
//! [`generated`] renders `config/default.toml` and docs/settings.md from the declarations.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use skua_control::ControlSettings;
use skua_core::NodeId;
use skua_edge::EdgeConfig;
use skua_edge::config::{EdgeSettings, MembersSettings, TriggerSettings};
use skua_mqtt::MqttSettings;
use skua_webhooks::WebhookSettings;

pub mod generated;
pub mod secrets;
pub mod sections;

pub use sections::Sections;

/// `config/default.toml`: the compiled-in defaults with their documentation, generated from the
/// declarations ([`generated::default_toml`]; a test keeps the two equal).
pub const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");

skua_core::settings! {
    /// The node's own settings: backends and identity, listeners and their TLS, the admin
    /// key, tracing. The other settings are the crates': [`EdgeSettings`],
    /// [`TriggerSettings`], [`MembersSettings`], [`WebhookSettings`], [`ControlSettings`].
    pub struct NodeSettings {
        /// HTTP listener: WebSocket at /ws, /healthz, /readyz [default 0.0.0.0:8080].
        ///
        /// HTTP listener: WebSocket at /ws, /healthz, /healthz/backends, /readyz (this node can take clients:
        /// not draining, a connection slot left, below the open-file limit; backends are not asked).
        #[arg(long, env = "SKUA_LISTEN")]
        pub listen: String = "0.0.0.0:8080",
        /// Message bus: `memory` or `mqtt://host:port` [default memory].
        ///
        /// Message bus between nodes: "memory" (in-process, single node) or "mqtt://host:port" (MQTT v5).
        #[arg(long, env = "SKUA_BUS")]
        pub bus: String = "memory",
        /// Presence store: `memory` or `redis://host:port/db` [default memory].
        ///
        /// Presence store: "memory" (in-process, single node) or "redis://host:port/db".
        #[arg(long, env = "SKUA_PRESENCE")]
        pub presence: String = "memory",
        /// Session store: `sqlite://PATH`, `sqlite::memory:`, `postgres://…` or `memory` [default sqlite://skua-data/skua.db].
        ///
        /// Session store (restore records; later stored messages): "sqlite://PATH" (the directory is
        /// created), "sqlite::memory:", "postgres://user@host/db" (run `skua migrate` first), or "memory".
        #[arg(long, env = "SKUA_STORE")]
        pub store: String = "sqlite://skua-data/skua.db",
        /// Connections of the node's Postgres store pool (SQLite keeps its own small pool) [default 8].
        ///
        /// Connections of the node's pool to a Postgres store (SQLite keeps its own: one writer and a
        /// few readers). Size it from the store work per second (docs/operations.md, "Sizing the store
        /// pool"); every node's pool counts against Postgres' max_connections.
        #[arg(long, env = "SKUA_STORE_POOL_SIZE")]
        pub store_pool_size: u32 = skua_store::postgres::POOL_SIZE,
        /// `skua migrate` on Postgres: how long one statement waits for a lock before the attempt gives way; 0s = forever [default 2s].
        ///
        /// `skua migrate` on Postgres: how long one statement waits for a lock (held by a pg_dump, a long
        /// transaction) before the attempt gives way, so that the reads queued behind it go on; the
        /// attempt is repeated with a backoff. "0s" waits forever (Postgres' own default).
        #[arg(long, env = "SKUA_MIGRATE_LOCK_TIMEOUT")]
        pub migrate_lock_timeout: String = "2s",
        /// `skua migrate` on Postgres: how long attempts are repeated after lock timeouts [default 5m].
        ///
        /// `skua migrate` on Postgres: how long attempts are repeated after lock timeouts before it fails.
        #[arg(long, env = "SKUA_MIGRATE_RETRY_FOR")]
        pub migrate_retry_for: String = "5m",
        /// One node of a cluster: refuse to start without an MQTT bus, Redis presence and a Postgres store [default false].
        ///
        /// This node is one of a cluster: it refuses to start unless bus is mqtt(s)://, presence is
        /// redis(s):// and store is postgres:// (instead of running alone on in-memory backends when
        /// SKUA_BUS or SKUA_PRESENCE is missing). Set it (SKUA_CLUSTER=true) on every clustered node.
        #[arg(long, env = "SKUA_CLUSTER")]
        pub cluster: bool = false,
        /// This node's name [default random].
        ///
        /// This node's name in logs and presence bookkeeping; empty picks a random one at start.
        #[arg(long, env = "SKUA_NODE_ID")]
        pub node_id: String = "",
        /// Load apps, rooms, lobbies, actors and tokens from this TOML file.
        ///
        /// Apps, rooms, lobbies, actors and tokens loaded from this TOML file at start (the schema of
        /// the demo fixtures, docs/control-plane.md); unset = none.
        #[arg(long, env = "SKUA_FIXTURES")]
        pub fixtures: PathBuf,
        /// Publishes buffered while the MQTT broker is unreachable [default 1024].
        ///
        /// Cluster: publishes buffered while the MQTT broker is unreachable; beyond it publishes get
        /// broker_unavailable (and never `published`).
        #[arg(long, env = "SKUA_BUS_PUBLISH_BUFFER")]
        pub bus_publish_buffer: usize = 1024,
        /// Serve /metrics on this address instead of the client listener; empty = on the client listener [default empty].
        ///
        /// /metrics on its own listener ("127.0.0.1:9090"), and then not on the client listener.
        /// Empty = served next to /ws, where it lists every project id to anyone who can reach it: set
        /// this or metrics_token on any node reachable from outside.
        #[arg(long, env = "SKUA_METRICS_LISTEN")]
        pub metrics_listen: String = "",
        /// MQTT device listener (3.1.1 and 5.0, docs/mqtt.md), e.g. 0.0.0.0:1883; empty = off [default empty].
        ///
        /// MQTT device listener (3.1.1 and 5.0 on one port, docs/mqtt.md), e.g. "0.0.0.0:1883": devices
        /// connect with an access token or client JWT as password and reach the same rooms as the SDKs.
        /// Empty = off (also under --dev: the machine's own Mosquitto often holds 1883).
        #[arg(long, env = "SKUA_MQTT_LISTEN")]
        pub mqtt_listen: String = "",
        /// Serve /metrics without a token on purpose; outside --dev, `skua serve` refuses to start with neither this nor metrics_token [default false].
        ///
        /// Serve /metrics without a token on purpose (a private network, a scraper that cannot send
        /// one). Outside `--dev`, `skua serve` refuses to start when /metrics has no token and this is
        /// false.
        #[arg(long, env = "SKUA_METRICS_PUBLIC")]
        pub metrics_public: bool = false,
        /// Control-plane gRPC listener, e.g. 127.0.0.1:50051; empty = none [default 127.0.0.1:50051, started only with an admin key].
        ///
        /// Control plane (docs/control-plane.md). gRPC listener of the `skua.control.v1` API, with
        /// health and reflection; empty = no listener. Left at this default, the listener starts only
        /// when admin_key is set (or with `--dev`, which brings a dev key), and a node whose port is
        /// taken goes on without it (logged); set explicitly, both are errors.
        #[arg(long, env = "SKUA_GRPC_LISTEN")]
        pub grpc_listen: String = "127.0.0.1:50051",
        /// The admin API key gRPC calls must present as `authorization: Bearer KEY` [required with grpc_listen].
        ///
        /// The admin API key gRPC calls present as `authorization: Bearer KEY`; required when
        /// grpc_listen is set (at least 16 characters). `--dev` defaults it to "skua-dev-admin-key".
        /// Set it through SKUA_ADMIN_KEY rather than a file where possible. Outside `--dev` a placeholder
        /// (CHANGE-ME…, changeme, replace-me, <…>, skua-dev-…) stops the server, as it does for
        /// metrics_token, the passwords in the bus/presence/store URLs and the fixtures' secrets.
        #[arg(long, env = "SKUA_ADMIN_KEY", hide_env_values = true)]
        pub admin_key: String,
        /// How often the node checks the store for registry changes [default 250ms].
        ///
        /// How often the node reads the registry version from the store; a change reaches every node
        /// within this plus the reload (at most 1s).
        #[arg(long, env = "SKUA_REGISTRY_POLL_INTERVAL")]
        pub registry_poll_interval: String = "250ms",
        /// OTLP/gRPC endpoint spans are exported to, `http://host:4317`; empty: OTEL_EXPORTER_OTLP_ENDPOINT, else none [default empty].
        ///
        /// Traces: the OTLP/gRPC endpoint (an OpenTelemetry Collector, Jaeger, Tempo…) spans are
        /// exported to, "http://host:4317". Empty: the standard OTEL_EXPORTER_OTLP_ENDPOINT variable,
        /// and when that is unset too nothing is exported and no tracing work is done.
        #[arg(long, env = "SKUA_OTLP_ENDPOINT")]
        pub otlp_endpoint: String = "",
        /// PEM certificate chain of the client listener; with tls_key, clients connect over wss:// [default empty: plain ws://].
        ///
        /// TLS (docs/security.md). The client listener serves wss:// (and https:// for /healthz,
        /// /readyz, /metrics) when tls_cert and tls_key name a PEM certificate chain (leaf first) and its
        /// private key (PKCS#8, PKCS#1 or SEC1); empty: plain ws://. A missing or unreadable file stops
        /// startup (exit 2).
        #[arg(long, env = "SKUA_TLS_CERT")]
        pub tls_cert: String = "",
        /// PEM private key of tls_cert [default empty].
        #[arg(long, env = "SKUA_TLS_KEY")]
        pub tls_key: String = "",
        /// PEM certificate chain of the gRPC listener [default empty: tls_cert's].
        ///
        /// The control plane's pair; empty: the client listener's (so one pair serves both).
        #[arg(long, env = "SKUA_GRPC_TLS_CERT")]
        pub grpc_tls_cert: String = "",
        /// PEM private key of grpc_tls_cert [default empty: tls_key's].
        #[arg(long, env = "SKUA_GRPC_TLS_KEY")]
        pub grpc_tls_key: String = "",
        /// How often certificate files are checked for changes and reloaded; 0s: never [default 10s].
        ///
        /// How often the certificate files are checked (modification time and size) and, when changed,
        /// reloaded without a restart; a pair that does not load is logged and the old one stays. 0s:
        /// never on a timer. SIGHUP checks them at once either way.
        #[arg(long, env = "SKUA_TLS_RELOAD_INTERVAL")]
        pub tls_reload_interval: String = "10s",
        /// mqtts:// bus: PEM CA certificates the broker's certificate must chain to [default empty: system roots].
        ///
        /// mqtts:// bus: CA certificates (PEM) the broker's certificate must chain to (empty: the
        /// system's roots), and a client certificate chain and key for brokers that require one. The
        /// broker user and password go in the url: mqtts://user:password@host:8883 (percent-encoded).
        #[arg(long, env = "SKUA_BUS_TLS_CA")]
        pub bus_tls_ca: String = "",
        /// mqtts:// bus: PEM client certificate chain [default empty: none].
        #[arg(long, env = "SKUA_BUS_TLS_CERT")]
        pub bus_tls_cert: String = "",
        /// mqtts:// bus: PEM private key of bus_tls_cert [default empty].
        #[arg(long, env = "SKUA_BUS_TLS_KEY")]
        pub bus_tls_key: String = "",
        /// rediss:// presence: PEM CA certificates Redis's certificate must chain to [default empty: system roots].
        ///
        /// rediss:// presence: as above for Redis. An ACL user and password go in the url:
        /// rediss://user:password@host:6380/0 (redis://:password@… for the default user).
        #[arg(long, env = "SKUA_PRESENCE_TLS_CA")]
        pub presence_tls_ca: String = "",
        /// rediss:// presence: PEM client certificate chain [default empty: none].
        #[arg(long, env = "SKUA_PRESENCE_TLS_CERT")]
        pub presence_tls_cert: String = "",
        /// rediss:// presence: PEM private key of presence_tls_cert [default empty].
        #[arg(long, env = "SKUA_PRESENCE_TLS_KEY")]
        pub presence_tls_key: String = "",
        /// Single node (memory presence): most idempotency keys remembered; when full the oldest is forgotten [default 100000].
        ///
        /// Idempotent publish on a single node (memory presence): most keys remembered. When full, a new key evicts the oldest
        /// one (whose repeat is then delivered again before its window ended); counted in
        /// skua_idempotency_evictions_total. About 350 bytes per key (35 MB at 100000). Redis (cluster)
        /// keeps every key for its whole window.
        #[arg(long, env = "SKUA_IDEMPOTENCY_MAX_KEYS")]
        pub idempotency_max_keys: usize = 100_000,
    }
}

/// Calls `$m!(field, Type)` for each part of [`Settings`], in the order of `config/default.toml`.
macro_rules! parts {
    ($m:ident) => {
        $m! {
            node: NodeSettings,
            edge: EdgeSettings,
            triggers: TriggerSettings,
            members: MembersSettings,
            webhooks: WebhookSettings,
            control: ControlSettings,
            mqtt: MqttSettings
        }
    };
}

/// Defines [`Settings`] over the parts [`parts!`] lists.
macro_rules! composed {
    ($($part:ident: $ty:ident),*) => {
        /// Every setting of `skua serve`: the parts each crate owns, composed. Each setting is a
        /// flag (`--idle-timeout`), a `SKUA_*` variable (`SKUA_IDLE_TIMEOUT`) and a
        /// config-file key (`idle_timeout`), named alike. Adding one is one field, with its
        /// doc comment and default, in the part of the crate that uses it; `config/default.toml`
        /// and docs/settings.md are generated from the parts ([`generated`]).
        #[derive(Debug, Clone, Default, PartialEq, Args)]
        pub struct Settings {
            $(
                #[doc = concat!("The settings of [`", stringify!($ty), "`].")]
                #[command(flatten)]
                pub $part: $ty,
            )*
        }

        impl Settings {
            /// The compiled-in defaults (what `config/default.toml` shows).
            pub fn defaults() -> Self {
                Self { $($part: $ty::defaults(),)* }
            }

            /// Lays `over` on top of `self`: every setting `over` has wins.
            pub fn overlay(&mut self, over: &Settings) {
                $(self.$part.overlay(&over.$part);)*
            }

            /// Every part: the name of its struct, its settings' docs and its defaults (as
            /// JSON values), in order.
            pub fn parts() -> Vec<generated::Part> {
                vec![$(generated::Part {
                    name: stringify!($ty),
                    docs: $ty::DOCS,
                    defaults: serde_json::to_value($ty::defaults()).unwrap_or_default(),
                },)*]
            }

            /// Every key, in order.
            pub fn keys() -> impl Iterator<Item = &'static str> {
                [$($ty::KEYS,)*].into_iter().flatten().copied()
            }

            /// The settings of a parsed config file, each part reading its own keys.
            fn from_table(table: &toml::Table) -> Result<Self, toml::de::Error> {
                Ok(Self { $($part: part(table)?,)* })
            }
        }
    };
}

parts!(composed);

/// One part of [`Settings`] from a config file's table (other parts' keys are ignored).
fn part<T: serde::de::DeserializeOwned>(table: &toml::Table) -> Result<T, toml::de::Error> {
    T::deserialize(toml::Value::Table(table.clone()))
}

impl Settings {
    /// Parses a TOML config file's text.
    ///
    /// # Errors
    /// [`ConfigError::UnknownOrInvalid`] for unknown keys or wrongly typed values, pointing at
    /// the line as the TOML parser does.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::UnknownOrInvalid(e.to_string()))?;
        if let Some(unknown) = table.keys().find(|k| !Self::keys().any(|known| known == k.as_str())) {
            let expected: Vec<String> = Self::keys().map(|k| format!("`{k}`")).collect();
            let message = format!("unknown field `{unknown}`, expected one of {}", expected.join(", "));
            return Err(ConfigError::UnknownOrInvalid(at_key(text, unknown, false, &message)));
        }
        Self::from_table(&table).map_err(|e| {
            // Name the key whose value is wrong, and where it is.
            let bad = table.iter().find_map(|(k, v)| {
                let one: toml::Table = [(k.clone(), v.clone())].into_iter().collect();
                Self::from_table(&one).err().map(|e| (k, e))
            });
            match bad {
                Some((key, e)) => ConfigError::UnknownOrInvalid(at_key(text, key, true, e.message())),
                None => ConfigError::UnknownOrInvalid(e.to_string()),
            }
        })
    }
}

/// `message` located at `key`'s line of `text` (its key, or with `value` its value, underlined),
/// in the TOML parser's own format; the message alone naming the key when the line is not found.
fn at_key(text: &str, key: &str, value: bool, message: &str) -> String {
    let found = text.lines().enumerate().find_map(|(n, line)| {
        let rest = line.trim_start().strip_prefix(key)?;
        let after = rest.trim_start().strip_prefix('=')?;
        let key_col = line.len() - line.trim_start().len();
        Some((n + 1, line, key_col, line.len() - after.trim_start().len()))
    });
    let Some((n, line, key_col, value_col)) = found else { return format!("{message}\nin `{key}`\n") };
    let (col, len) = if value {
        let v = line[value_col..].split(" #").next().unwrap_or("").trim_end();
        (value_col, v.chars().count().max(1))
    } else {
        (key_col, key.len())
    };
    let pad = " ".repeat(n.to_string().len());
    let marks = format!("{}{}", " ".repeat(line[..col].chars().count()), "^".repeat(len));
    format!(
        "TOML parse error at line {n}, column {}\n{pad} |\n{n} | {line}\n{pad} | {marks}\n{message}\n",
        line[..col].chars().count() + 1
    )
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An unknown key or a value of the wrong type in a config file (exit status 2).
    #[error("configuration file: {0}")]
    UnknownOrInvalid(String),
    /// A value that parses but is not acceptable (exit status 64).
    #[error("invalid setting {key}: {reason}")]
    Invalid {
        /// The setting.
        key: &'static str,
        /// Why.
        reason: String,
    },
}

/// `scheme://host…` for messages and `--print-config`: `user:password@` becomes `…@` and a
/// `password=` query parameter (Postgres accepts one) is masked.
pub fn redact_url(url: &str) -> String {
    let mut out = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    };
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=…"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{base}{}", masked.join("&"));
    }
    out
}

/// The message bus a node uses.
#[derive(Clone, PartialEq, Eq)]
pub enum BusConfig {
    /// In-process (single node).
    Memory,
    /// MQTT v5 broker (cluster), `mqtt://host:port`.
    Mqtt {
        /// Broker URL.
        url: String,
    },
}

// Not derived: urls may carry passwords (`--print-config` prints these).
impl std::fmt::Debug for BusConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Mqtt { url } => f.debug_struct("Mqtt").field("url", &redact_url(url)).finish(),
        }
    }
}

impl std::fmt::Debug for PresenceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Redis { url } => f.debug_struct("Redis").field("url", &redact_url(url)).finish(),
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Url(url) => f.debug_tuple("Url").field(&redact_url(url)).finish(),
        }
    }
}

/// The presence store a node uses.
#[derive(Clone, PartialEq, Eq)]
pub enum PresenceConfig {
    /// In-process (single node).
    Memory,
    /// Redis (cluster), `redis://host:port/db`.
    Redis {
        /// Redis URL.
        url: String,
    },
}

/// The session store a node uses.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// In this process's memory (tests; nothing survives a restart).
    Memory,
    /// A SQLite or Postgres URL.
    Url(String),
}

/// Certificate files of a TLS connection to a backend (`mqtts://`, `rediss://`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendTlsFiles {
    /// PEM CA certificates; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain and private key.
    pub client: Option<crate::tls::CertFiles>,
}

impl BackendTlsFiles {
    /// Whether anything is configured.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

/// The admin API key: never shown by `Debug` (`--print-config` masks it).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminKey(pub String);

impl std::fmt::Debug for AdminKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminKey(<redacted>)")
    }
}

/// The effective configuration of one node.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Bus backend.
    pub bus: BusConfig,
    /// Presence backend.
    pub presence: PresenceConfig,
    /// Session store.
    pub store: StoreConfig,
    /// Connections of a Postgres store's pool.
    pub store_pool_size: u32,
    /// How `skua migrate` waits for Postgres' locks.
    pub migrate: skua_store::MigrateOptions,
    /// This node.
    pub node_id: NodeId,
    /// Fixtures file, if any.
    pub fixtures: Option<PathBuf>,
    /// One node of a cluster (`cluster`): checked to run on shared backends.
    pub cluster: bool,
    /// Edge limits and behaviour (namespace included).
    pub edge: EdgeConfig,
    /// Publishes the MQTT bus buffers while the broker is unreachable.
    pub bus_publish_buffer: usize,
    /// Idempotency keys the in-memory backend (memory presence) remembers at most.
    pub idempotency_max_keys: usize,
    /// Control-plane gRPC listener, if any.
    pub grpc_listen: Option<SocketAddr>,
    /// The admin API key.
    pub admin_key: Option<AdminKey>,
    /// How often the node polls the store's registry version.
    pub registry_poll_interval: std::time::Duration,
    /// Caps the control plane enforces.
    pub control: skua_control::ControlLimits,
    /// Where spans are exported (OTLP/gRPC); `None` exports nothing.
    pub otlp_endpoint: Option<String>,
    /// The separate `/metrics` listener, if any.
    pub metrics_listen: Option<SocketAddr>,
    /// The MQTT device listener, if any (`mqtt_listen`, issue 37).
    pub mqtt_listen: Option<SocketAddr>,
    /// The MQTT-over-TLS device listener, if any (`mqtt_tls_listen`); it needs the client
    /// listener's certificate.
    pub mqtt_tls_listen: Option<SocketAddr>,
    /// The MQTT door's protocol bounds (`mqtt_*`).
    pub mqtt: skua_mqtt::MqttLimits,
    /// `/metrics` may be served without a token (outside `--dev`, `skua serve` refuses a
    /// tokenless `/metrics` unless this is set: issue 33, item 12).
    pub metrics_public: bool,
    /// TLS of the client and control-plane listeners.
    pub tls: crate::tls::ListenerTlsConfig,
    /// Whether gRPC reflection needs no admin key.
    pub grpc_reflection_public: bool,
    /// Longest a gRPC call may take, its request body included.
    pub grpc_request_timeout: std::time::Duration,
    /// Backing off addresses that fail the admin-key check.
    pub admin_key_throttle: skua_control::throttle::ThrottleConfig,
    /// Certificates of an `mqtts://` bus.
    pub bus_tls: BackendTlsFiles,
    /// Certificates of a `rediss://` presence store.
    pub presence_tls: BackendTlsFiles,
    /// The webhook engine's settings (its address rules are also the control plane's checks).
    pub webhooks: skua_webhooks::WebhookConfig,
    /// The REST API under `/v1` (docs/rest-api.md).
    pub rest: skua_control::rest::RestConfig,
    /// The admin dashboard under `/admin` (docs/dashboard.md).
    pub dashboard: skua_control::dashboard::DashboardConfig,
}

impl ServerConfig {
    /// Resolves layered settings (defaults already applied) into a checked configuration:
    /// each section checks its own keys ([`sections`]), then they are assembled.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad setting.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self::from_sections(Sections::resolve(s)?))
    }

    /// The node's configuration from its checked sections.
    pub fn from_sections(sections: Sections) -> Self {
        let Sections { backends, front, edge, control, cluster, tls, telemetry, webhooks, mqtt } = sections;
        Self {
            listen: front.listen,
            bus: backends.bus,
            presence: backends.presence,
            store: backends.store,
            store_pool_size: backends.store_pool_size,
            migrate: backends.migrate,
            node_id: backends.node_id,
            fixtures: backends.fixtures,
            cluster: backends.cluster,
            edge,
            bus_publish_buffer: cluster.bus_publish_buffer,
            idempotency_max_keys: cluster.idempotency_max_keys,
            grpc_listen: control.grpc_listen,
            admin_key: control.admin_key,
            registry_poll_interval: control.registry_poll_interval,
            control: control.limits,
            otlp_endpoint: telemetry.otlp_endpoint,
            metrics_listen: front.metrics_listen,
            mqtt_listen: front.mqtt_listen,
            mqtt_tls_listen: mqtt.tls_listen,
            mqtt: mqtt.limits,
            metrics_public: front.metrics_public,
            tls: tls.listeners,
            grpc_reflection_public: control.grpc_reflection_public,
            grpc_request_timeout: control.grpc_request_timeout,
            admin_key_throttle: control.admin_key_throttle,
            bus_tls: backends.bus_tls,
            presence_tls: backends.presence_tls,
            webhooks: webhooks.engine,
            rest: control.rest,
            dashboard: control.dashboard,
        }
    }

    /// The control plane's webhook URL rules: the engine's address rules.
    pub fn webhook_policy(&self) -> skua_control::WebhookPolicy {
        skua_control::WebhookPolicy {
            allow_link_local: self.webhooks.allow_link_local,
            allow_loopback: self.webhooks.allow_loopback,
            allowed_hosts: self.webhooks.allowed_hosts.clone(),
        }
    }

    /// The defaults with `over` laid on top, resolved.
    ///
    /// # Errors
    /// As [`Self::resolve`]; also when the compiled-in defaults do not parse (a build defect).
    pub fn from_layers(layers: &[&Settings]) -> Result<Self, ConfigError> {
        let mut s = Settings::defaults();
        for l in layers {
            s.overlay(l);
        }
        Self::resolve(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The webhook engine's settings reach the engine (its own tests check what it does with
    /// them: `crates/webhooks/tests/it/engine.rs`), and the trigger schedule doubles.
    #[test]
    fn webhook_settings_reach_the_engine() {
        let s = {
            let mut layer = Settings::default();
            layer.webhooks.webhook_connect_timeout = Some("750ms".into());
            layer.webhooks.webhook_concurrency_per_target = Some(3);
            layer.webhooks.webhook_trigger_attempts = Some(4);
            layer.webhooks.webhook_trigger_first_retry = Some("2s".into());
            layer
        };
        let c = ServerConfig::from_layers(&[&s]).unwrap();
        assert_eq!(c.webhooks.connect_timeout, std::time::Duration::from_millis(750));
        assert_eq!(c.webhooks.concurrency_per_target, 3);
        assert_eq!(c.edge.triggers.retry_delays, [2, 4, 8].map(std::time::Duration::from_secs));
    }

    #[test]
    fn compiled_defaults_are_the_documented_ones() {
        let c = ServerConfig::from_layers(&[]).unwrap();
        let d = EdgeConfig::default();
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(c.edge.idle_timeout, d.idle_timeout);
        assert_eq!(c.edge.rate_limit, d.rate_limit);
        assert_eq!(c.edge.rate_limit_window, d.rate_limit_window);
        assert_eq!(c.edge.max_message_size, d.max_message_size);
        assert_eq!(c.edge.outbound_queue_messages, d.outbound_queue_messages);
        assert_eq!(c.edge.outbound_queue_bytes, d.outbound_queue_bytes);
        assert_eq!(c.edge.outbound_budget_bytes, d.outbound_budget_bytes);
        assert_eq!(c.edge.max_connections, d.max_connections);
        assert_eq!(c.edge.fd_reserve, d.fd_reserve);
        assert_eq!(c.edge.max_subscriptions_per_connection, d.max_subscriptions_per_connection);
        assert_eq!(c.edge.publish_topic_cache, d.publish_topic_cache);
        assert_eq!(c.edge.publish_pipeline, d.publish_pipeline);
        assert_eq!(c.edge.publish_pipeline_bytes, d.publish_pipeline_bytes);
        assert_eq!(c.edge.max_retained_per_topic, d.max_retained_per_topic);
        assert_eq!(c.edge.restore_ttl, d.restore_ttl);
        assert_eq!(c.edge.restore_wait, d.restore_wait);
        assert_eq!(c.edge.restore_merge_window, d.restore_merge_window);
        assert_eq!(c.edge.history_recovery_margin, d.history_recovery_margin);
        assert_eq!(c.edge.history_receipt_interval, d.history_receipt_interval);
        assert_eq!(c.edge.shutdown_grace, d.shutdown_grace);
        assert_eq!(c.edge.drain_delay, d.drain_delay);
        assert_eq!(c.edge.drain_spread, d.drain_spread);
        assert_eq!(c.edge.log_prune_batch, d.log_prune_batch);
        assert_eq!(c.edge.restore_prune_interval, d.restore_prune_interval);
        assert_eq!(c.edge.members.wake_negative_cache, d.members.wake_negative_cache);
        assert_eq!(c.edge.members.wake_negative_rooms, d.members.wake_negative_rooms);
        assert_eq!(c.store_pool_size, skua_store::postgres::POOL_SIZE);
        assert_eq!(c.migrate, skua_store::MigrateOptions::default());
        assert!(!c.cluster);
        assert_eq!(c.edge.bus_queue, d.bus_queue);
        assert_eq!(c.edge.dispatch_shards, d.dispatch_shards);
        assert_eq!(c.edge.node_ttl, d.node_ttl);
        assert_eq!(c.edge.node_refresh, d.node_refresh);
        assert_eq!(c.edge.namespace, "skua");
        assert_eq!(c.edge.revalidate_interval, d.revalidate_interval);
        assert_eq!(c.control, skua_control::ControlLimits::default());
        assert_eq!(c.webhooks, skua_webhooks::WebhookConfig::default());
        assert_eq!(c.grpc_listen, Some("127.0.0.1:50051".parse().unwrap()), "CONTRACT.md's default");
        assert_eq!(c.admin_key, None);
        assert_eq!(c.registry_poll_interval, std::time::Duration::from_millis(250));
        assert!(c.node_id.as_str().starts_with("node-"));
        assert_eq!(c.edge.http_header_timeout, d.http_header_timeout);
        assert_eq!(c.edge.http_body_timeout, d.http_body_timeout);
        assert_eq!(c.edge.presence_rate_limit, d.presence_rate_limit);
        assert_eq!(c.edge.subscribe_rate_limit, d.subscribe_rate_limit);
        assert_eq!(c.edge.query_rate_limit, d.query_rate_limit);
        assert_eq!(c.edge.auth_timeout, d.auth_timeout);
        assert!(!c.metrics_public, "a tokenless /metrics is refused outside --dev unless asked for");
        assert_eq!(c.edge.max_connections_per_ip, d.max_connections_per_ip);
        assert_eq!(c.edge.max_new_connections_per_ip_per_second, d.max_new_connections_per_ip_per_second);
        assert_eq!(c.edge.trusted_proxies, d.trusted_proxies);
        assert_eq!(c.edge.proxy_protocol, d.proxy_protocol);
        assert_eq!(c.edge.allowed_origins, d.allowed_origins);
        assert!(c.edge.metrics_token.is_none() && !c.edge.metrics_separate && c.metrics_listen.is_none());
        assert!(c.mqtt_listen.is_none(), "no MQTT listener unless asked for");
        assert_eq!(c.tls, crate::tls::ListenerTlsConfig::default(), "plain listeners unless certificates are set");
        assert!(!c.grpc_reflection_public);
        assert_eq!(c.admin_key_throttle, skua_control::throttle::ThrottleConfig::default());
        assert_eq!(c.bus_tls, BackendTlsFiles::default());
        assert_eq!(c.presence_tls, BackendTlsFiles::default());
        assert_eq!(c.edge.idempotency_window, d.idempotency_window);
        assert_eq!(c.edge.idempotency_max_key_length, d.idempotency_max_key_length);
        assert_eq!(c.idempotency_max_keys, 100_000);
        assert_eq!(c.edge.history_max_bytes_per_project, d.history_max_bytes_per_project);
        assert_eq!(c.edge.history_max_bytes_per_project, skua_presence::history::DEFAULT_MAX_PROJECT_BYTES);
        assert_eq!(c.edge.members.max_per_project, d.members.max_per_project);
        assert_eq!(c.grpc_request_timeout, skua_control::server::DEFAULT_REQUEST_TIMEOUT);
    }

    /// The crates' typed configurations (`Default`, used by their own tests) agree with the
    /// declared settings' defaults, field by field: the whole `EdgeConfig`, triggers and
    /// members included, the webhook engine's, the control plane's.
    #[test]
    fn typed_defaults_are_the_declared_ones() {
        let c = ServerConfig::from_layers(&[]).unwrap();
        let mut edge = EdgeConfig::default();
        // Not settings: what the server derives from the backends in use.
        edge.triggers.take_over_at_start = c.edge.triggers.take_over_at_start;
        edge.members.offline_others_at_start = c.edge.members.offline_others_at_start;
        edge.members.negative_until_changed = c.edge.members.negative_until_changed;
        let (got, want) = (format!("{:#?}", c.edge), format!("{edge:#?}"));
        let wrong: Vec<String> = got
            .lines()
            .zip(want.lines())
            .filter(|(g, w)| g != w)
            .map(|(g, w)| format!("settings give {}, EdgeConfig::default() {}", g.trim(), w.trim()))
            .collect();
        assert!(wrong.is_empty() && got.lines().count() == want.lines().count(), "{}", wrong.join("\n"));
        assert_eq!(c.webhooks, skua_webhooks::WebhookConfig::default());
        assert_eq!(c.control, skua_control::ControlLimits::default());
        assert_eq!(c.rest, skua_control::rest::RestConfig::default());
        assert_eq!(c.dashboard, skua_control::dashboard::DashboardConfig::default());
        assert_eq!(c.admin_key_throttle, skua_control::throttle::ThrottleConfig::default());
        assert_eq!(c.mqtt, skua_mqtt::MqttLimits::default());
    }

    /// The trigger retry schedule has one source (`skua_core::webhook::TRIGGER_FIRST_RETRY`,
    /// doubling): the settings' defaults, the trigger delivery and
    /// docs/webhooks.md all give 4 s, 8 s, 16 s, 32 s.
    #[test]
    fn the_trigger_retry_schedule_has_one_source() {
        let want = skua_core::webhook::trigger_retry_delays();
        assert_eq!(want, [4, 8, 16, 32].map(std::time::Duration::from_secs));
        let c = ServerConfig::from_layers(&[]).unwrap();
        assert_eq!(c.edge.triggers.retry_delays, want, "the trigger delivery's, from the settings");
        assert_eq!(skua_edge::config::TriggerConfig::default().retry_delays, want);
        let spelled: Vec<String> = want.iter().map(|d| format!("{} s", d.as_secs())).collect();
        let docs = include_str!("../../../docs/webhooks.md");
        assert!(docs.contains(&spelled.join(", ")), "docs/webhooks.md gives the schedule as {}", spelled.join(", "));
    }

    /// A config file's unknown key or wrongly typed value is reported where it is, as the TOML
    /// parser reports its own errors.
    #[test]
    fn file_errors_point_at_the_key() {
        let e = Settings::from_toml("listen = \"0.0.0.0:1\"\n\nrate_limit = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("line 3, column 14") && e.contains("3 | rate_limit = \"x\"\n  |              ^^^\n"), "{e}");
        assert!(e.contains("invalid type: string \"x\", expected u32"), "{e}");
        let e = Settings::from_toml("idle_timeut = \"5s\"").unwrap_err().to_string();
        assert!(
            e.contains("line 1, column 1") && e.contains("unknown field `idle_timeut`, expected one of `listen`"),
            "{e}"
        );
    }

    /// docs/security.md: its tables list every budget and rate limit with its default.
    const SECURITY_MD: &str = include_str!("../../../docs/security.md");

    /// Settings that bound nothing a client or tenant can grow (addresses, identities, the
    /// pace of background work, TLS material, switches documented elsewhere): docs/security.md
    /// need not list them. Every other key of config/default.toml must be in its tables.
    const NOT_BUDGETS: &[&str] = &[
        "listen",
        "mqtt_listen",
        "mqtt_tls_listen",
        "bus",
        "presence",
        "store",
        "cluster",
        "namespace",
        "node_id",
        "fixtures",
        "config",
        "history_recovery_margin",
        "history_receipt_interval",
        "restore_wait",
        "restore_merge_window",
        "log_prune_interval",
        "log_prune_batch",
        "durable_sweep_interval",
        "shutdown_grace",
        "drain_delay",
        "drain_spread",
        "drain_rate",
        "dispatch_shards",
        "node_ttl",
        "node_refresh",
        "grpc_listen",
        "revalidate_interval",
        "registry_poll_interval",
        "otlp_endpoint",
        "webhook_trigger_first_retry",
        "dashboard_live_idle",
        "dashboard_sample_interval",
        "trigger_lease",
        "trigger_batch_window",
        "trigger_scan_interval",
        "wake_negative_cache",
        "tls_cert",
        "tls_key",
        "grpc_tls_cert",
        "grpc_tls_key",
        "tls_reload_interval",
        "bus_tls_ca",
        "bus_tls_cert",
        "bus_tls_key",
        "presence_tls_ca",
        "presence_tls_cert",
        "presence_tls_key",
        "log_level",
        "log_format",
        "migrate_lock_timeout",
        "migrate_retry_for",
    ];

    /// The first `n` values of a default cell, separated by ` / ` or ` per `: `` `10s` ``, a
    /// number, or `N MiB` / `N KiB` (as bytes). `None` when the cell does not start so.
    fn cell_values(cell: &str, n: usize) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut rest = cell;
        for i in 0..n {
            let (v, r) = if let Some(r) = rest.strip_prefix('`') {
                let (v, r) = r.split_once('`')?;
                (v.to_owned(), r)
            } else {
                let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
                let num: u64 = rest[..end].parse().ok()?;
                let r = &rest[end..];
                match (r.strip_prefix(" MiB"), r.strip_prefix(" KiB")) {
                    (Some(r), _) => ((num << 20).to_string(), r),
                    (_, Some(r)) => ((num << 10).to_string(), r),
                    _ => (num.to_string(), r),
                }
            };
            out.push(v);
            if i + 1 < n {
                rest = r.strip_prefix(" / ").or_else(|| r.strip_prefix(" per "))?;
            }
        }
        Some(out)
    }

    #[test]
    fn security_md_lists_every_budget_and_rate_limit_with_its_default() {
        let defaults: std::collections::HashMap<String, String> =
            documented_keys().into_iter().map(|(k, v)| (k, v.trim_matches('"').to_owned())).collect();
        let mut listed = std::collections::BTreeSet::new();
        let mut compared = 0;
        let mut wrong = Vec::new();
        // Lists and empty strings are described in words ("none", "any").
        let in_words = |v: &str| v.starts_with('[') || v.is_empty();
        for line in SECURITY_MD.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.trim_start_matches("| ").split(" | ").collect();
            let [keys_cell, default_cell, ..] = cells.as_slice() else { continue };
            let keys: Vec<&str> =
                keys_cell.split('`').skip(1).step_by(2).filter(|k| defaults.contains_key(*k)).collect();
            listed.extend(keys.iter().map(|k| (*k).to_owned()));
            // A cell of settings only (`a` / `b` per `c`): its defaults are given in order.
            let only_keys = {
                let mut rebuilt = keys_cell.to_string();
                for k in &keys {
                    rebuilt = rebuilt.replacen(&format!("`{k}`"), "", 1);
                }
                !keys.is_empty() && rebuilt.split([' ', '/']).all(|w| w.is_empty() || w == "per")
            };
            if !only_keys || keys.iter().all(|k| in_words(&defaults[*k])) {
                continue;
            }
            let Some(values) = cell_values(default_cell, keys.len()) else {
                wrong.push(format!("the defaults of {keys:?} do not parse: {default_cell}"));
                continue;
            };
            for (k, v) in keys.iter().zip(values) {
                let want = &defaults[*k];
                if !in_words(want) {
                    if v != *want {
                        wrong.push(format!("{k}: {v}, config/default.toml {want}"));
                    }
                    compared += 1;
                }
            }
        }
        assert!(wrong.is_empty(), "docs/security.md vs config/default.toml:\n{}", wrong.join("\n"));
        assert!(compared > 60, "only {compared} defaults compared: did the tables' layout change?");
        let missing: Vec<&String> =
            defaults.keys().filter(|k| !listed.contains(*k) && !NOT_BUDGETS.contains(&k.as_str())).collect();
        assert!(
            missing.is_empty(),
            "settings docs/security.md does not list (or add them to NOT_BUDGETS): {missing:?}"
        );
    }

    #[test]
    fn front_door_settings_are_parsed_and_checked() {
        let file = Settings::from_toml(
            "trusted_proxies = [\"10.0.0.0/8\", \"fd00::/8\"]\nproxy_protocol = true\n\
             allowed_origins = [\"https://*.example.com\"]\nmetrics_listen = \"127.0.0.1:9090\"\nmqtt_listen = \"127.0.0.1:1884\"\n\
             metrics_token = \"0123456789abcdef\"\nhttp_header_timeout = \"3s\"\nmax_connections_per_ip = 0\n",
        )
        .unwrap();
        let c = ServerConfig::from_layers(&[&file]).unwrap();
        assert_eq!(c.edge.trusted_proxies.len(), 2);
        assert!(c.edge.proxy_protocol);
        assert_eq!(c.edge.allowed_origins[0].to_string(), "https://*.example.com");
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(c.mqtt_listen, Some("127.0.0.1:1884".parse().unwrap()));
        assert!(c.edge.metrics_separate);
        assert!(!format!("{c:?}").contains("0123456789abcdef"), "the token is never printed");
        assert_eq!(c.edge.http_header_timeout, std::time::Duration::from_secs(3));
        assert_eq!(c.edge.max_connections_per_ip, 0);
        let bad = |s: Settings, key: &str| match ServerConfig::from_layers(&[&s]) {
            Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key}: {other:?}"),
        };
        bad(
            {
                let mut layer = Settings::default();
                layer.edge.trusted_proxies = Some(vec!["10.0.0.0/40".into()]);
                layer
            },
            "trusted_proxies",
        );
        bad(
            {
                let mut layer = Settings::default();
                layer.edge.proxy_protocol = Some(true);
                layer
            },
            "proxy_protocol",
        );
        bad(
            {
                let mut layer = Settings::default();
                layer.edge.allowed_origins = Some(vec!["example.com".into()]);
                layer
            },
            "allowed_origins",
        );
        bad(
            {
                let mut layer = Settings::default();
                layer.node.metrics_listen = Some("nowhere".into());
                layer
            },
            "metrics_listen",
        );
        bad(
            {
                let mut layer = Settings::default();
                layer.node.mqtt_listen = Some("nowhere".into());
                layer
            },
            "mqtt_listen",
        );
        bad(
            {
                let mut layer = Settings::default();
                layer.edge.metrics_token = Some("short".into());
                layer
            },
            "metrics_token",
        );
        bad(
            {
                let mut layer = Settings::default();
                layer.edge.http_header_timeout = Some("0s".into());
                layer
            },
            "http_header_timeout",
        );
    }

    /// The keys `config/default.toml` documents: those it sets and those it shows commented
    /// out (`# key = value`), each with the value it gives.
    fn documented_keys() -> Vec<(String, String)> {
        DEFAULT_TOML
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .filter_map(|l| l.split_once(" = "))
            .filter(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn every_setting_is_a_documented_key_a_flag_and_a_variable_of_one_name() {
        use clap::Args as _;
        let cmd = Settings::augment_args(clap::Command::new("serve"));
        let fields: std::collections::BTreeSet<String> =
            cmd.get_arguments().map(|a| a.get_id().as_str().to_owned()).collect();
        let keys: std::collections::BTreeSet<String> = documented_keys().into_iter().map(|(k, _)| k).collect();
        assert_eq!(fields, keys, "Settings fields vs keys documented in config/default.toml");
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            assert_eq!(a.get_long(), Some(id.replace('_', "-").as_str()), "flag of {id}");
            let env = format!("SKUA_{}", id.to_ascii_uppercase());
            assert_eq!(a.get_env(), Some(std::ffi::OsStr::new(&env)), "variable of {id}");
        }
    }

    #[test]
    fn every_documented_key_is_read_from_a_file_and_overlay_carries_it() {
        let all: String = documented_keys().iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
        let full = Settings::from_toml(&all).unwrap();
        let mut layered = Settings::default();
        layered.overlay(&full);
        assert_eq!(format!("{layered:?}"), format!("{full:?}"));
        assert!(!format!("{full:?}").contains(": None"), "a documented key was not read: {full:?}");
    }

    #[test]
    fn each_section_names_the_key_it_refuses() {
        for (line, key) in [
            ("store = \"mysql://db\"", "store"),
            ("namespace = \"a/b\"", "namespace"),
            ("node_id = \"a b\"", "node_id"),
            ("listen = \"nowhere\"", "listen"),
            ("max_connections = 0", "max_connections"),
            ("rate_limit = 0", "rate_limit"),
            ("rate_limit_window = \"soon\"", "rate_limit_window"),
            ("max_message_size = 2000000", "max_message_size"),
            ("max_presence_size = 0", "max_presence_size"),
            ("outbound_queue_bytes = 0", "outbound_queue_bytes"),
            ("max_auth_failures = 0", "max_auth_failures"),
            ("auth_backoff_max = \"1 year\"", "auth_backoff_max"),
            ("max_retained_bytes = 0", "max_retained_bytes"),
            ("log_max_per_topic = 0", "log_max_per_topic"),
            ("replay_page_size = 0", "replay_page_size"),
            ("durable_queue = 0", "durable_queue"),
            ("bus_publish_buffer = 0", "bus_publish_buffer"),
            ("node_refresh = \"10s\"", "node_refresh"),
            ("drain_delay = \"-1s\"", "drain_delay"),
            ("drain_spread = \"10s\"", "drain_spread"),
            ("cluster = true", "cluster"),
            ("log_prune_batch = 0", "log_prune_batch"),
            ("grpc_listen = \"nowhere\"", "grpc_listen"),
            ("admin_key = \"short\"", "admin_key"),
            ("revalidate_interval = \"0s\"", "revalidate_interval"),
            ("registry_poll_interval = \"2s\"", "registry_poll_interval"),
            ("max_page_size = 0", "max_page_size"),
            ("otlp_endpoint = \"https://collector:4317\"", "otlp_endpoint"),
            ("bus_tls_ca = \"ca.pem\"", "bus_tls_ca"),
            ("presence_tls_cert = \"c.pem\"", "presence_tls_cert"),
            ("tls_key = \"k.pem\"", "tls_cert"),
            ("grpc_tls_key = \"k.pem\"", "grpc_tls_cert"),
            ("tls_reload_interval = \"often\"", "tls_reload_interval"),
            ("admin_key_backoff_max = \"500ms\"", "admin_key_backoff_max"),
            ("admin_key_failure_window = \"\"", "admin_key_failure_window"),
            ("idempotency_window = \"0s\"", "idempotency_window"),
            ("idempotency_max_key_length = 2000", "idempotency_max_key_length"),
            ("idempotency_max_keys = 0", "idempotency_max_keys"),
            ("trigger_batch_window = \"2s\"", "trigger_batch_window"),
            ("trigger_max_body_bytes = 16777217", "trigger_max_body_bytes"),
            ("trigger_queue_bytes_per_project = 1024", "trigger_max_body_bytes"),
            ("trigger_queue_bytes = 0", "trigger_queue_bytes"),
            ("webhook_dead_letter_bytes_per_project = 0", "webhook_dead_letter_bytes_per_project"),
            ("max_retained_bytes_per_project = 0", "max_retained_bytes_per_project"),
            ("trigger_batch_window = \"soon\"", "trigger_batch_window"),
            ("mqtt_max_topic_bytes = 0", "mqtt_max_topic_bytes"),
            ("mqtt_max_topic_bytes = 65536", "mqtt_max_topic_bytes"),
            ("mqtt_max_filters = 0", "mqtt_max_filters"),
            ("mqtt_max_filters = 100000", "mqtt_max_filters"),
            ("mqtt_max_user_properties = 0", "mqtt_max_user_properties"),
            ("mqtt_max_user_properties = 5000", "mqtt_max_user_properties"),
            ("mqtt_max_client_id_bytes = 0", "mqtt_max_client_id_bytes"),
            ("mqtt_max_client_id_bytes = 22", "mqtt_max_client_id_bytes"),
            ("mqtt_max_client_id_bytes = 70000", "mqtt_max_client_id_bytes"),
            ("mqtt_receive_maximum = 0", "mqtt_receive_maximum"),
            ("mqtt_max_inflight = 0", "mqtt_max_inflight"),
        ] {
            let s = Settings::from_toml(line).unwrap();
            match ServerConfig::from_layers(&[&s]) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_cluster_node_needs_every_shared_backend() {
        let cluster = |bus: &str, presence: &str, store: &str| {
            let mut layer = Settings::default();
            layer.node.cluster = Some(true);
            layer.node.bus = Some(bus.into());
            layer.node.presence = Some(presence.into());
            layer.node.store = Some(store.into());
            layer
        };
        let (mqtt, redis, pg) = ("mqtt://broker:1883", "redis://redis:6379/0", "postgres://skua@db/skua");
        let c = ServerConfig::from_layers(&[&cluster(mqtt, redis, pg)]).unwrap();
        assert!(c.cluster);
        for (s, missing) in [
            (cluster("memory", redis, pg), "SKUA_BUS"),
            (cluster(mqtt, "memory", pg), "SKUA_PRESENCE"),
            (cluster(mqtt, redis, "sqlite://skua-data/skua.db"), "SKUA_STORE"),
            (cluster(mqtt, redis, "memory"), "SKUA_STORE"),
        ] {
            let e = ServerConfig::from_layers(&[&s]).unwrap_err();
            assert!(matches!(e, ConfigError::Invalid { key: "cluster", .. }), "{e}");
            assert!(e.to_string().contains(missing), "{e}");
        }
        // Without `cluster`, a single node on in-process backends is the default.
        assert!(ServerConfig::from_layers(&[]).is_ok());
    }

    #[test]
    fn tls_settings_resolve_and_the_control_plane_follows_the_client_pair() {
        let s = {
            let mut layer = Settings::default();
            layer.node.tls_cert = Some("c.pem".into());
            layer.node.tls_key = Some("k.pem".into());
            layer
        };
        let c = ServerConfig::from_layers(&[&s]).unwrap();
        let pair = crate::tls::CertFiles { cert: "c.pem".into(), key: "k.pem".into() };
        assert_eq!(c.tls.client, Some(pair.clone()));
        assert_eq!(c.tls.grpc, Some(pair), "grpc_tls_* default to tls_*");
        let own = {
            let mut layer = s.clone();
            layer.node.grpc_tls_cert = Some("g.pem".into());
            layer.node.grpc_tls_key = Some("gk.pem".into());
            layer
        };
        let c = ServerConfig::from_layers(&[&own]).unwrap();
        assert_eq!(c.tls.grpc.unwrap().cert, PathBuf::from("g.pem"));
        let half = {
            let mut layer = Settings::default();
            layer.node.tls_cert = Some("c.pem".into());
            layer
        };
        assert!(matches!(ServerConfig::from_layers(&[&half]), Err(ConfigError::Invalid { key: "tls_cert", .. })));
    }

    #[test]
    fn backend_tls_needs_a_tls_url_and_credentials_are_not_echoed() {
        let s = {
            let mut layer = Settings::default();
            layer.node.bus_tls_ca = Some("ca.pem".into());
            layer
        };
        assert!(matches!(ServerConfig::from_layers(&[&s]), Err(ConfigError::Invalid { key: "bus_tls_ca", .. })));
        let s = {
            let mut layer = Settings::default();
            layer.node.bus = Some("mqtts://skua:pw@broker:8883".into());
            layer.node.bus_tls_ca = Some("ca.pem".into());
            layer.node.presence = Some("rediss://skua:pw@redis:6380/0".into());
            layer.node.presence_tls_ca = Some("ca.pem".into());
            layer
        };
        let c = ServerConfig::from_layers(&[&s]).unwrap();
        assert_eq!(c.bus_tls.ca, Some(PathBuf::from("ca.pem")));
        assert!(matches!(c.presence, PresenceConfig::Redis { .. }));
        let s = {
            let mut layer = Settings::default();
            layer.node.presence_tls_ca = Some("ca.pem".into());
            layer
        };
        assert!(matches!(ServerConfig::from_layers(&[&s]), Err(ConfigError::Invalid { key: "presence_tls_ca", .. })));
        let s = {
            let mut layer = Settings::default();
            layer.node.bus = Some("amqp://user:hunter2@broker".into());
            layer
        };
        let e = ServerConfig::from_layers(&[&s]).unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let s = {
            let mut layer = Settings::default();
            layer.node.bus = Some("mqtts://skua:hunter2@broker:8883".into());
            layer.node.presence = Some("rediss://default:hunter2@redis:6380/0".into());
            layer.node.store = Some("postgres://skua:hunter2@db/skua?sslmode=verify-full&password=hunter2".into());
            layer.node.admin_key = Some("hunter2-hunter2-hunter2".into());
            layer
        };
        let shown = format!("{:#?}", ServerConfig::from_layers(&[&s]).unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sslmode=verify-full"));
    }

    #[test]
    fn layers_override_in_order_and_unknown_keys_fail() {
        let file = Settings::from_toml("idle_timeout = \"5s\"\nrate_limit = 7\n").unwrap();
        let flags = {
            let mut layer = Settings::default();
            layer.edge.rate_limit = Some(9);
            layer
        };
        let c = ServerConfig::from_layers(&[&file, &flags]).unwrap();
        assert_eq!(c.edge.idle_timeout, std::time::Duration::from_secs(5));
        assert_eq!(c.edge.rate_limit, 9);
        assert!(matches!(Settings::from_toml("idle_timeut = \"5s\""), Err(ConfigError::UnknownOrInvalid(_))));
        let bad = {
            let mut layer = Settings::default();
            layer.edge.idle_timeout = Some("5 parsecs".into());
            layer
        };
        assert!(matches!(ServerConfig::from_layers(&[&bad]), Err(ConfigError::Invalid { key: "idle_timeout", .. })));
        let bad = {
            let mut layer = Settings::default();
            layer.node.bus = Some("amqp://x:5672".into());
            layer
        };
        assert!(matches!(ServerConfig::from_layers(&[&bad]), Err(ConfigError::Invalid { key: "bus", .. })));
    }
}
