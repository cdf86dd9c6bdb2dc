//! The settings in typed sections. Each section reads its own keys from the flat [`Settings`]
//! and checks them, failing with a [`ConfigError`] that names the key; [`Sections::resolve`]
//! runs them all, and the edge's [`EdgeConfig`] is assembled from them in one place.
//!
//! Adding a setting: a field (doc comment, flag, variable, default) in the settings struct of
//! the crate that uses it (a part of [`Settings`]), then one line in the section it belongs
//! to; `config/default.toml` and docs/settings.md are regenerated from the structs
//! ([`super::generated`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use skua_core::NodeId;
use skua_edge::EdgeConfig;
use skua_edge::config::{Cidr, OriginPattern};
use skua_edge::config::{MembersConfig, MetricsToken};

use super::{AdminKey, BackendTlsFiles, BusConfig, ConfigError, PresenceConfig, Settings, StoreConfig, redact_url};
use crate::duration;
use crate::tls::{CertFiles, ListenerTlsConfig};

/// A setting's key (its field name in [`Settings`]) with its value, as the checks take it.
type Key<'a, T> = (&'static str, Option<&'a T>);

/// `(key, value)` of the setting `$k` of `$s`, so that an error names exactly the field read.
macro_rules! key {
    ($s:expr, $k:ident) => {
        (stringify!($k), $s.$k.as_ref())
    };
}

/// The refusal of `key` for `reason`.
fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}

/// A setting the compiled-in defaults always give.
fn required<T: Clone>((key, v): Key<'_, T>) -> Result<T, ConfigError> {
    v.cloned().ok_or_else(|| invalid(key, "missing"))
}

/// A duration (`500ms`, `5s`, `10m`, `2h`, `1d`).
fn duration((key, v): Key<'_, String>) -> Result<Duration, ConfigError> {
    let v = required((key, v))?;
    duration::parse(&v).map_err(|reason| invalid(key, reason))
}

/// A duration above zero.
fn nonzero_duration(k: Key<'_, String>) -> Result<Duration, ConfigError> {
    let d = duration(k)?;
    if d.is_zero() { Err(invalid(k.0, "must be above 0")) } else { Ok(d) }
}

/// A duration of at most `max` (0 allowed).
fn at_most(k: Key<'_, String>, max: Duration) -> Result<Duration, ConfigError> {
    let d = duration(k)?;
    if d > max { Err(invalid(k.0, format!("must be at most {}ms", max.as_millis()))) } else { Ok(d) }
}

/// A count of at least 1.
fn positive<T: Copy + Default + PartialEq>(k: Key<'_, T>) -> Result<T, ConfigError> {
    let v = required(k)?;
    if v == T::default() { Err(invalid(k.0, "must be at least 1")) } else { Ok(v) }
}

/// A count in `min..=max`.
fn between<T: Copy + PartialOrd + std::fmt::Display>(k: Key<'_, T>, min: T, max: T) -> Result<T, ConfigError> {
    let v = required(k)?;
    if v < min || v > max { Err(invalid(k.0, format!("{v}: must be between {min} and {max}"))) } else { Ok(v) }
}

/// A socket address; empty (or unset) is `None`.
fn optional_address((key, v): Key<'_, String>) -> Result<Option<SocketAddr>, ConfigError> {
    match v.map(String::as_str) {
        None | Some("") => Ok(None),
        Some(a) => a.parse().map(Some).map_err(|e| invalid(key, format!("{a:?}: {e}"))),
    }
}

/// Each entry of a list, parsed with `parse`.
fn each<T>((key, v): Key<'_, Vec<String>>, parse: fn(&str) -> Result<T, String>) -> Result<Vec<T>, ConfigError> {
    required((key, v))?.iter().map(|x| parse(x)).collect::<Result<_, _>>().map_err(|reason| invalid(key, reason))
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

/// The largest payload any frame may carry: the 1 MiB outbound frame cap (N4) less room for
/// the frame's other fields.
fn payload_cap(key: &'static str, v: usize) -> Result<usize, ConfigError> {
    let cap = skua_protocol::MAX_PAYLOAD_CEILING_BYTES;
    if v > cap {
        return Err(invalid(
            key,
            format!("at most {cap} bytes (the 1 MiB frame cap less room for the frame's other fields)"),
        ));
    }
    Ok(v)
}

/// Which backends the node uses and who it is: `bus`, `presence`, `store` (with the
/// certificates of `mqtts://` and `rediss://`: `bus_tls_*`, `presence_tls_*`), `namespace`,
/// `node_id`, `fixtures`.
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
    /// Root of internal topics and key prefixes.
    pub namespace: String,
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
        let namespace = required(key!(s.edge, namespace))?;
        if !skua_core::ids::is_slug(&namespace) {
            return Err(invalid("namespace", "1-64 letters, digits, '-' or '_'"));
        }
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
            namespace,
            node_id,
            fixtures: s.node.fixtures.clone(),
            cluster,
        })
    }
}

/// The client listener and what guards it before a WebSocket exists: `listen`,
/// `max_connections`, `http_header_timeout`, the per-address limits, proxies, origins and
/// `/metrics`.
#[derive(Debug, Clone)]
pub struct FrontDoor {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Most sockets this node holds.
    pub max_connections: usize,
    /// Open files kept free of client sockets.
    pub fd_reserve: usize,
    /// How long a socket may take to send its request head.
    pub http_header_timeout: Duration,
    /// How long a request's body may take to arrive after its head.
    pub http_body_timeout: Duration,
    /// Most sockets per client address; 0 = no limit.
    pub max_connections_per_ip: u32,
    /// New sockets per second per client address; 0 = no limit.
    pub max_new_connections_per_ip_per_second: u32,
    /// Proxies whose forwarding headers are believed.
    pub trusted_proxies: Vec<Cidr>,
    /// Every socket starts with a PROXY protocol header.
    pub proxy_protocol: bool,
    /// Origins browsers may connect from; empty = any.
    pub allowed_origins: Vec<OriginPattern>,
    /// The separate `/metrics` listener, if any.
    pub metrics_listen: Option<SocketAddr>,
    /// The MQTT device listener, if any (issue 37).
    pub mqtt_listen: Option<SocketAddr>,
    /// The bearer token `/metrics` requires, if any.
    pub metrics_token: Option<MetricsToken>,
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
        let metrics_token = match s.edge.metrics_token.as_deref() {
            None | Some("") => None,
            Some(t) if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) => {
                return Err(invalid("metrics_token", "must be at least 16 printable ASCII characters, no spaces"));
            }
            Some(t) => Some(MetricsToken::new(t.to_owned())),
        };
        let front = Self {
            listen,
            max_connections: positive(key!(s.edge, max_connections))?,
            fd_reserve: required(key!(s.edge, fd_reserve))?,
            http_header_timeout: nonzero_duration(key!(s.edge, http_header_timeout))?,
            http_body_timeout: nonzero_duration(key!(s.edge, http_body_timeout))?,
            max_connections_per_ip: required(key!(s.edge, max_connections_per_ip))?,
            max_new_connections_per_ip_per_second: required(key!(s.edge, max_new_connections_per_ip_per_second))?,
            trusted_proxies: each(key!(s.edge, trusted_proxies), Cidr::parse)?,
            proxy_protocol: required(key!(s.edge, proxy_protocol))?,
            allowed_origins: each(key!(s.edge, allowed_origins), OriginPattern::parse)?,
            metrics_listen: optional_address(key!(s.node, metrics_listen))?,
            mqtt_listen: optional_address(key!(s.node, mqtt_listen))?,
            metrics_token,
            metrics_public: required(key!(s.node, metrics_public))?,
        };
        if front.proxy_protocol && front.trusted_proxies.is_empty() {
            return Err(invalid(
                "proxy_protocol",
                "needs trusted_proxies: the addresses of the proxies that send the header",
            ));
        }
        Ok(front)
    }
}

/// What one connection may do and queue: idle timeout, rate limit, message and presence
/// sizes, outbound queue bounds, subscriptions.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Close after this long without an inbound frame.
    pub idle_timeout: Duration,
    /// Publishes per window, also the burst.
    pub rate_limit: u32,
    /// The window the rate limit refills over.
    pub rate_limit_window: Duration,
    /// `presence` updates per window, also the burst.
    pub presence_rate_limit: u32,
    /// Subscription changes per window, also the burst.
    pub subscribe_rate_limit: u32,
    /// Presence and history queries per window, also the burst.
    pub query_rate_limit: u32,
    /// Largest publish payload in bytes.
    pub max_message_size: usize,
    /// Largest presence payload in bytes.
    pub max_presence_size: usize,
    /// Outbound queue bound in frames.
    pub outbound_queue_messages: usize,
    /// Outbound queue bound in bytes.
    pub outbound_queue_bytes: usize,
    /// Node-wide bound on queued outbound bytes (0: none).
    pub outbound_budget_bytes: usize,
    /// Most topic plus lobby subscriptions.
    pub max_subscriptions_per_connection: usize,
    /// Most topics a connection keeps resolved for its publishes (0: none).
    pub publish_topic_cache: usize,
    /// Most publishes a connection has in flight (issue 36).
    pub publish_pipeline: usize,
    /// Most bytes of publish data a connection has in flight.
    pub publish_pipeline_bytes: usize,
}

impl Limits {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            idle_timeout: duration(key!(s.edge, idle_timeout))?,
            rate_limit: positive(key!(s.edge, rate_limit))?,
            rate_limit_window: duration(key!(s.edge, rate_limit_window))?,
            presence_rate_limit: positive(key!(s.edge, presence_rate_limit))?,
            subscribe_rate_limit: positive(key!(s.edge, subscribe_rate_limit))?,
            query_rate_limit: positive(key!(s.edge, query_rate_limit))?,
            max_message_size: payload_cap("max_message_size", positive(key!(s.edge, max_message_size))?)?,
            max_presence_size: payload_cap("max_presence_size", positive(key!(s.edge, max_presence_size))?)?,
            outbound_queue_messages: positive(key!(s.edge, outbound_queue_messages))?,
            outbound_queue_bytes: positive(key!(s.edge, outbound_queue_bytes))?,
            outbound_budget_bytes: required(key!(s.edge, outbound_budget_bytes))?,
            max_subscriptions_per_connection: positive(key!(s.edge, max_subscriptions_per_connection))?,
            publish_topic_cache: required(key!(s.edge, publish_topic_cache))?,
            publish_pipeline: positive(key!(s.edge, publish_pipeline))?,
            publish_pipeline_bytes: positive(key!(s.edge, publish_pipeline_bytes))?,
        })
    }
}

/// Auth abuse: `max_auth_failures`, `auth_timeout`, `auth_backoff_after`, `auth_backoff_max`,
/// and the token audiences accepted (`jwt_audiences`).
#[derive(Debug, Clone)]
pub struct Auth {
    /// Failed auths per connection before it closes.
    pub max_auth_failures: u32,
    /// Deadline for the first auth; `None` = none.
    pub auth_timeout: Option<Duration>,
    /// Failed auths per source address before further ones are delayed.
    pub auth_backoff_after: u32,
    /// Longest such delay.
    pub auth_backoff_max: Duration,
    /// Accepted `aud` values.
    pub jwt_audiences: Vec<String>,
}

impl Auth {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            max_auth_failures: positive(key!(s.edge, max_auth_failures))?,
            auth_timeout: Some(duration(key!(s.edge, auth_timeout))?).filter(|d| !d.is_zero()),
            auth_backoff_after: required(key!(s.edge, auth_backoff_after))?,
            auth_backoff_max: duration(key!(s.edge, auth_backoff_max))?,
            jwt_audiences: s
                .edge
                .jwt_audiences
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|a| !a.is_empty())
                .collect(),
        })
    }
}

/// Retained messages this node keeps: per topic (count and bytes) and in all.
#[derive(Debug, Clone)]
pub struct Retained {
    /// Most retained messages per topic.
    pub max_retained_per_topic: usize,
    /// Most retained bytes per topic.
    pub max_retained_bytes_per_topic: usize,
    /// Most retained bytes on this node.
    pub max_retained_bytes: usize,
    /// Most retained bytes of one project on this node.
    pub max_retained_bytes_per_project: usize,
}

impl Retained {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            max_retained_per_topic: positive(key!(s.edge, max_retained_per_topic))?,
            max_retained_bytes_per_topic: positive(key!(s.edge, max_retained_bytes_per_topic))?,
            max_retained_bytes: positive(key!(s.edge, max_retained_bytes))?,
            max_retained_bytes_per_project: positive(key!(s.edge, max_retained_bytes_per_project))?,
        })
    }
}

/// Topic history (issue 19, docs/recovery.md): `history_max_size`, `history_max_topics`,
/// `history_max_topic_bytes`, `history_max_bytes_per_project`, `history_max_replay`, `history_max_page`,
/// `history_recovery_margin`, `history_receipt_interval`.
#[derive(Debug, Clone)]
pub struct History {
    /// Largest `size` a topic's history may use.
    pub max_size: u32,
    /// Most (room, topic) histories in memory.
    pub max_topics: usize,
    /// Most payload bytes of one in-memory history.
    pub max_topic_bytes: usize,
    /// Most payload bytes one project's histories keep.
    pub max_bytes_per_project: usize,
    /// Most messages one recovery replays.
    pub max_replay: usize,
    /// Most messages one `history` reply carries.
    pub max_page: usize,
    /// After a node died: what history stamped before it was last seen alive less this counts
    /// as delivered to its connections.
    pub recovery_margin: Duration,
    /// Least time between two receipt pings on one connection.
    pub receipt_interval: Duration,
}

impl History {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            max_size: positive(key!(s.edge, history_max_size))?,
            max_topics: positive(key!(s.edge, history_max_topics))?,
            max_topic_bytes: positive(key!(s.edge, history_max_topic_bytes))?,
            max_bytes_per_project: positive(key!(s.edge, history_max_bytes_per_project))?,
            max_replay: positive(key!(s.edge, history_max_replay))?,
            max_page: positive(key!(s.edge, history_max_page))?,
            recovery_margin: duration(key!(s.edge, history_recovery_margin))?,
            receipt_interval: duration(key!(s.edge, history_receipt_interval))?,
        })
    }
}

/// Sessions and logged topics: `restore_ttl`, the log's retention and pruning, replay paging
/// and the durable delivery queue.
#[derive(Debug, Clone)]
pub struct Durable {
    /// How long a session outlives its connection.
    pub restore_ttl: Duration,
    /// How long a reconnect waits for a node suspected dead to release its restore record.
    pub restore_wait: Duration,
    /// Records of one actor that ended within this long of each other restore together.
    pub restore_merge_window: Duration,
    /// Logged messages older than this are deleted.
    pub log_max_age: Duration,
    /// Most logged messages kept per topic.
    pub log_max_per_topic: u64,
    /// How often retention is applied.
    pub log_prune_interval: Duration,
    /// Messages deleted per statement while pruning.
    pub log_prune_batch: u64,
    /// How often expired and surplus restore records are deleted.
    pub restore_prune_interval: Duration,
    /// Pending messages read per store page of a replay.
    pub replay_page_size: u32,
    /// Live logged messages queued per connection.
    pub durable_queue: usize,
    /// Claim and ack requests waiting for the node's durable writer.
    pub durable_writer_queue: usize,
    /// Batches of claims and acks in the store at the same time.
    pub durable_writers: usize,
    /// How often durable deliveries look for pending messages nobody holds (zero: never).
    pub durable_sweep_interval: Duration,
}

impl Durable {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            restore_ttl: duration(key!(s.edge, restore_ttl))?,
            restore_wait: duration(key!(s.edge, restore_wait))?,
            restore_merge_window: duration(key!(s.edge, restore_merge_window))?,
            log_max_age: duration(key!(s.edge, log_max_age))?,
            log_max_per_topic: positive(key!(s.edge, log_max_per_topic))? as u64,
            log_prune_interval: duration(key!(s.edge, log_prune_interval))?,
            log_prune_batch: positive(key!(s.edge, log_prune_batch))?,
            restore_prune_interval: nonzero_duration(key!(s.edge, restore_prune_interval))?,
            replay_page_size: positive(key!(s.edge, replay_page_size))?,
            durable_queue: positive(key!(s.edge, durable_queue))?,
            durable_writer_queue: positive(key!(s.edge, durable_writer_queue))?,
            durable_writers: positive(key!(s.edge, durable_writers))?,
            durable_sweep_interval: duration(key!(s.edge, durable_sweep_interval))?,
        })
    }
}

/// Trigger webhooks (docs/webhooks.md): the outbox lease and scan, and the dead letters' cap.
/// The queue, the deliveries at once and the retry schedule are the engine's (`webhook_queue`,
/// `webhook_max_pending`, `webhook_trigger_attempts`, `webhook_trigger_first_retry`).
#[derive(Debug, Clone)]
pub struct Triggers {
    /// How long a node holds a logged topic's trigger beyond its current attempt and wait.
    pub lease: Duration,
    /// How long the first queued trigger waits for others to start with it.
    pub batch_window: Duration,
    /// How often each node claims outbox triggers whose lease ran out.
    pub scan_interval: Duration,
    /// Dead letters kept per project.
    pub dead_letters_per_project: u64,
    /// Non-logged triggers waiting to become dead letters after the queue was full.
    pub overflow_queue: usize,
    /// Longest trigger body.
    pub max_body_bytes: usize,
    /// Bytes of trigger bodies queued or being delivered on a node.
    pub queue_bytes: usize,
    /// The part of `queue_bytes` one project may take.
    pub queue_bytes_per_project: usize,
    /// Bytes of bodies waiting to become dead letters.
    pub overflow_bytes: usize,
    /// Bytes of dead-letter bodies kept per project.
    pub dead_letter_bytes_per_project: u64,
}

impl Triggers {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let t = Self {
            lease: nonzero_duration(key!(s.triggers, trigger_lease))?,
            batch_window: at_most(key!(s.triggers, trigger_batch_window), Duration::from_secs(1))?,
            scan_interval: nonzero_duration(key!(s.triggers, trigger_scan_interval))?,
            dead_letters_per_project: positive(key!(s.triggers, webhook_dead_letters_per_project))?,
            overflow_queue: positive(key!(s.triggers, trigger_overflow_queue))?,
            max_body_bytes: positive(key!(s.triggers, trigger_max_body_bytes))?,
            queue_bytes: positive(key!(s.triggers, trigger_queue_bytes))?,
            queue_bytes_per_project: positive(key!(s.triggers, trigger_queue_bytes_per_project))?,
            overflow_bytes: positive(key!(s.triggers, trigger_overflow_bytes))?,
            dead_letter_bytes_per_project: positive(key!(s.triggers, webhook_dead_letter_bytes_per_project))?,
        };
        // A body that could never fit a queue would never be sent nor dead-lettered (a logged
        // one would wait in the outbox for ever).
        let fits = t.queue_bytes_per_project.min(t.queue_bytes).min(t.overflow_bytes);
        if t.max_body_bytes > fits {
            return Err(invalid(
                "trigger_max_body_bytes",
                format!(
                    "must be at most trigger_queue_bytes, trigger_queue_bytes_per_project and trigger_overflow_bytes ({fits})"
                ),
            ));
        }
        Ok(t)
    }
}

/// Persistent presence and wake (`presence_ttl`, `presence_list_limit`,
/// `presence_max_members_per_project`, `wake_*`; N46, N47),
/// checked: the edge's own settings, `offline_others_at_start` left to [`Sections::edge`].
///
/// # Errors
/// [`ConfigError::Invalid`] naming the first bad key.
fn members(s: &Settings) -> Result<MembersConfig, ConfigError> {
    Ok(MembersConfig {
        ttl: nonzero_duration(key!(s.members, presence_ttl))?,
        list_limit: required(key!(s.members, presence_list_limit))?,
        max_per_project: positive(key!(s.members, presence_max_members_per_project))?,
        wake_timeout: nonzero_duration(key!(s.members, wake_timeout))?,
        wake_timeout_max: nonzero_duration(key!(s.members, wake_timeout_max))?,
        wake_queue: positive(key!(s.members, wake_queue))?,
        wake_batch: positive(key!(s.members, wake_batch))?,
        wake_negative_cache: duration(key!(s.members, wake_negative_cache))?,
        wake_timeout_min: duration(key!(s.members, wake_timeout_min))?,
        wake_allowed: skua_core::webhook::InternalAllowList::parse(&required(key!(s.members, wake_allowed_hosts))?)
            .map_err(|e| invalid("wake_allowed_hosts", e))?,
        wake_limit_period: nonzero_duration(key!(s.members, wake_limit_period))?,
        wake_limit_per_actor: positive(key!(s.members, wake_limit_per_actor))?,
        wake_limit_per_url: positive(key!(s.members, wake_limit_per_url))?,
        wake_log_limit: required(key!(s.members, wake_log_limit))?,
        wake_negative_rooms: positive(key!(s.members, wake_negative_rooms))?,
        offline_others_at_start: false,
        negative_until_changed: false,
    })
}

/// Between nodes: the bus queues (`bus_queue`, `bus_publish_buffer`) and node liveness
/// (`node_ttl`, `node_refresh`).
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Capacity of the bus → fan-out delivery queue (and of each dispatch shard's queue).
    pub bus_queue: usize,
    /// Dispatch tasks (0: one per worker thread).
    pub dispatch_shards: usize,
    /// Publishes buffered while the broker is unreachable.
    pub bus_publish_buffer: usize,
    /// How long a node's registration lives without refresh.
    pub node_ttl: Duration,
    /// How often a node refreshes it.
    pub node_refresh: Duration,
}

impl Cluster {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let c = Self {
            bus_queue: positive(key!(s.edge, bus_queue))?,
            dispatch_shards: required(key!(s.edge, dispatch_shards))?,
            bus_publish_buffer: positive(key!(s.node, bus_publish_buffer))?,
            node_ttl: duration(key!(s.edge, node_ttl))?,
            node_refresh: duration(key!(s.edge, node_refresh))?,
        };
        if c.node_refresh.is_zero() || c.node_refresh >= c.node_ttl {
            return Err(invalid("node_refresh", "must be above 0 and below node_ttl"));
        }
        Ok(c)
    }
}

/// Idempotent publish (issue 19): `idempotency_window`, `idempotency_max_key_length`,
/// `idempotency_max_keys`.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// How long a key is remembered.
    pub window: Duration,
    /// Longest key in bytes.
    pub max_key_length: usize,
    /// Keys the in-memory backend remembers at most.
    pub max_keys: usize,
}

/// Longest `idempotency_max_key_length` accepted: keys are echoed in Redis key names and logs.
const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 1024;

impl Idempotency {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let max_key_length = positive(key!(s.edge, idempotency_max_key_length))?;
        if max_key_length > MAX_IDEMPOTENCY_KEY_LENGTH {
            return Err(invalid("idempotency_max_key_length", format!("at most {MAX_IDEMPOTENCY_KEY_LENGTH}")));
        }
        Ok(Self {
            window: nonzero_duration(key!(s.edge, idempotency_window))?,
            max_key_length,
            max_keys: positive(key!(s.node, idempotency_max_keys))?,
        })
    }
}

/// Stopping: `drain_delay`, then `shutdown_grace` (with the closes spread over `drain_spread`).
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// How long connections get to close.
    pub shutdown_grace: Duration,
    /// How long readiness fails before they are closed.
    pub drain_delay: Duration,
    /// The window the 1012 closes are spread over.
    pub drain_spread: Duration,
}

impl Shutdown {
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let shutdown_grace = duration(key!(s.edge, shutdown_grace))?;
        let drain_spread = duration(key!(s.edge, drain_spread))?;
        if !drain_spread.is_zero() && drain_spread >= shutdown_grace {
            return Err(invalid(
                "drain_spread",
                "must be below shutdown_grace (the closes are spread inside it, with time left for the last ones)",
            ));
        }
        Ok(Self { shutdown_grace, drain_delay: duration(key!(s.edge, drain_delay))?, drain_spread })
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

/// The control plane: its gRPC listener, key and the back-off of failing keys, reflection,
/// registry polling and revalidation, and the caps it enforces.
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
    pub grpc_request_timeout: Duration,
    /// How often every connection is revalidated.
    pub revalidate_interval: Duration,
    /// How often the store's registry version is polled.
    pub registry_poll_interval: Duration,
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
        if registry_poll_interval.is_zero() || registry_poll_interval > Duration::from_secs(1) {
            return Err(invalid(
                "registry_poll_interval",
                "must be above 0 and at most 1s (changes reach every node within a second)",
            ));
        }
        let admin_key_throttle = skua_control::throttle::ThrottleConfig {
            max_failures: required(key!(s.control, admin_key_max_failures))?,
            window: duration(key!(s.control, admin_key_failure_window))?,
            backoff_max: duration(key!(s.control, admin_key_backoff_max))?,
        };
        if admin_key_throttle.backoff_max < Duration::from_secs(1) {
            return Err(invalid("admin_key_backoff_max", "must be at least 1s"));
        }
        Ok(Self {
            grpc_listen: optional_address(key!(s.node, grpc_listen))?,
            admin_key,
            admin_key_throttle,
            grpc_reflection_public: required(key!(s.control, grpc_reflection_public))?,
            grpc_request_timeout: nonzero_duration(key!(s.control, grpc_request_timeout))?,
            revalidate_interval: nonzero_duration(key!(s.edge, revalidate_interval))?,
            registry_poll_interval,
            limits: skua_control::ControlLimits {
                max_apps_per_project: positive(key!(s.control, max_apps_per_project))?,
                max_rooms_per_app: positive(key!(s.control, max_rooms_per_app))?,
                max_actors_per_project: positive(key!(s.control, max_actors_per_project))?,
                max_grants_per_room: positive(key!(s.control, max_grants_per_room))?,
                max_lobbies_per_project: positive(key!(s.control, max_lobbies_per_project))?,
                max_page_size: positive(key!(s.control, max_page_size))?,
            },
            rest: skua_control::rest::RestConfig {
                enabled: required(key!(s.control, rest_api))?,
                max_body_bytes: positive(key!(s.control, rest_max_body_bytes))?,
                rate_limit: positive(key!(s.control, rest_rate_limit))?,
                max_page_limit: positive(key!(s.control, rest_max_page_limit))?,
            },
            dashboard: skua_control::dashboard::DashboardConfig {
                enabled: required(key!(s.control, dashboard))?,
                session_ttl: nonzero_duration(key!(s.control, dashboard_session_ttl))?,
                max_sessions: positive(key!(s.control, dashboard_max_sessions))?,
                live_buffer: positive(key!(s.control, dashboard_live_buffer))?,
                max_live_views: positive(key!(s.control, dashboard_max_live_views))?,
                live_idle: nonzero_duration(key!(s.control, dashboard_live_idle))?,
                sample_interval: nonzero_duration(key!(s.control, dashboard_sample_interval))?,
                history: positive(key!(s.control, dashboard_history))?,
                page_size: positive(key!(s.control, dashboard_page_size))?,
                search_max_chars: positive(key!(s.control, dashboard_search_max_chars))?,
            },
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
    /// This section of `s`, checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let allowed_hosts: Vec<String> = required(key!(s.webhooks, webhook_allowed_hosts))?
            .into_iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        if let Some(bad) =
            allowed_hosts.iter().find(|h| h.contains(['/', ':', ' ']) && h.parse::<std::net::IpAddr>().is_err())
        {
            return Err(invalid("webhook_allowed_hosts", format!("{bad:?}: give host names (or *.parent), not URLs")));
        }
        let attempts: u32 = positive(key!(s.webhooks, webhook_trigger_attempts))?;
        if attempts > 20 {
            return Err(invalid("webhook_trigger_attempts", "at most 20"));
        }
        Ok(Self {
            engine: skua_webhooks::WebhookConfig {
                concurrency_per_target: positive(key!(s.webhooks, webhook_concurrency_per_target))?,
                max_response_bytes: positive(key!(s.webhooks, webhook_max_response_bytes))?,
                connect_timeout: nonzero_duration(key!(s.webhooks, webhook_connect_timeout))?,
                allow_link_local: required(key!(s.webhooks, webhook_allow_link_local))?,
                allowed_hosts,
                allow_loopback: required(key!(s.webhooks, webhook_allow_loopback))?,
                wake_allowed_hosts: required(key!(s.members, wake_allowed_hosts))?,
                recent_deliveries: required(key!(s.webhooks, webhook_recent_deliveries))?,
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
    /// This section of `s`, checked: each bound above 0 and below what MQTT itself allows.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        use skua_mqtt::MqttLimits as L;
        Ok(Self {
            tls_listen: optional_address(key!(s.mqtt, mqtt_tls_listen))?,
            limits: L {
                max_topic_bytes: between(key!(s.mqtt, mqtt_max_topic_bytes), 1, L::MAX_STRING)?,
                max_filters: between(key!(s.mqtt, mqtt_max_filters), 1, L::MAX_PER_PACKET)?,
                max_user_properties: between(key!(s.mqtt, mqtt_max_user_properties), 1, L::MAX_PER_PACKET)?,
                max_client_id_bytes: between(key!(s.mqtt, mqtt_max_client_id_bytes), L::MIN_CLIENT_ID, L::MAX_STRING)?,
                receive_maximum: between(key!(s.mqtt, mqtt_receive_maximum), 1, u16::MAX)?,
                max_inflight: between(key!(s.mqtt, mqtt_max_inflight), 1, u16::MAX)?,
            },
        })
    }
}

/// Every section of one node's settings, each checked.
#[derive(Debug, Clone)]
pub struct Sections {
    /// Backends and identity.
    pub backends: Backends,
    /// The client listener.
    pub front: FrontDoor,
    /// Per-connection limits.
    pub limits: Limits,
    /// Auth abuse and audiences.
    pub auth: Auth,
    /// Retained-message bounds.
    pub retained: Retained,
    /// Sessions and logged topics.
    pub durable: Durable,
    /// Bus queues and node liveness.
    pub cluster: Cluster,
    /// Draining and closing.
    pub shutdown: Shutdown,
    /// Listener TLS.
    pub tls: Tls,
    /// The control plane.
    pub control: ControlPlane,
    /// Tracing export.
    pub telemetry: Telemetry,
    /// Trigger webhooks.
    pub triggers: Triggers,
    /// Persistent presence and wake.
    pub members: MembersConfig,
    /// Webhook delivery.
    pub webhooks: Webhooks,
    /// Topic history.
    pub history: History,
    /// Idempotent publish.
    pub idempotency: Idempotency,
    /// The MQTT door's bounds.
    pub mqtt: MqttDoor,
}

impl Sections {
    /// Every section of `s` (defaults already applied), checked.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        let limits = Limits::resolve(s)?;
        Ok(Self {
            backends: Backends::resolve(s)?,
            front: FrontDoor::resolve(s)?,
            auth: Auth::resolve(s)?,
            retained: Retained::resolve(s)?,
            history: History::resolve(s)?,
            durable: Durable::resolve(s)?,
            cluster: Cluster::resolve(s)?,
            shutdown: Shutdown::resolve(s)?,
            tls: Tls::resolve(s)?,
            control: ControlPlane::resolve(s)?,
            telemetry: Telemetry::resolve(s)?,
            triggers: Triggers::resolve(s)?,
            members: members(s)?,
            webhooks: Webhooks::resolve(s)?,
            idempotency: Idempotency::resolve(s)?,
            mqtt: MqttDoor::resolve(s)?,
            limits,
        })
    }

    /// The edge's view of these settings.
    pub fn edge(&self) -> EdgeConfig {
        let Self {
            backends,
            front,
            limits,
            auth,
            retained,
            durable,
            cluster,
            shutdown,
            control,
            tls: _,
            telemetry: _,
            triggers,
            webhooks,
            members,
            history,
            idempotency,
            mqtt: _,
        } = self;
        EdgeConfig {
            namespace: backends.namespace.clone(),
            idle_timeout: limits.idle_timeout,
            rate_limit: limits.rate_limit,
            rate_limit_window: limits.rate_limit_window,
            presence_rate_limit: limits.presence_rate_limit,
            subscribe_rate_limit: limits.subscribe_rate_limit,
            query_rate_limit: limits.query_rate_limit,
            max_message_size: limits.max_message_size,
            max_presence_size: limits.max_presence_size,
            outbound_queue_messages: limits.outbound_queue_messages,
            outbound_queue_bytes: limits.outbound_queue_bytes,
            outbound_budget_bytes: limits.outbound_budget_bytes,
            max_subscriptions_per_connection: limits.max_subscriptions_per_connection,
            publish_topic_cache: limits.publish_topic_cache,
            publish_pipeline: limits.publish_pipeline,
            publish_pipeline_bytes: limits.publish_pipeline_bytes,
            max_connections: front.max_connections,
            fd_reserve: front.fd_reserve,
            http_header_timeout: front.http_header_timeout,
            http_body_timeout: front.http_body_timeout,
            max_connections_per_ip: front.max_connections_per_ip,
            max_new_connections_per_ip_per_second: front.max_new_connections_per_ip_per_second,
            trusted_proxies: front.trusted_proxies.clone(),
            proxy_protocol: front.proxy_protocol,
            allowed_origins: front.allowed_origins.clone(),
            metrics_token: front.metrics_token.clone(),
            metrics_separate: front.metrics_listen.is_some(),
            max_auth_failures: auth.max_auth_failures,
            auth_timeout: auth.auth_timeout,
            auth_backoff_after: auth.auth_backoff_after,
            auth_backoff_max: auth.auth_backoff_max,
            jwt_audiences: auth.jwt_audiences.clone(),
            max_retained_per_topic: retained.max_retained_per_topic,
            max_retained_bytes_per_topic: retained.max_retained_bytes_per_topic,
            max_retained_bytes: retained.max_retained_bytes,
            max_retained_bytes_per_project: retained.max_retained_bytes_per_project,
            history_max_size: history.max_size,
            history_max_topics: history.max_topics,
            history_max_topic_bytes: history.max_topic_bytes,
            history_max_bytes_per_project: history.max_bytes_per_project,
            history_max_replay: history.max_replay,
            history_max_page: history.max_page,
            history_recovery_margin: history.recovery_margin,
            history_receipt_interval: history.receipt_interval,
            restore_ttl: durable.restore_ttl,
            restore_wait: durable.restore_wait,
            restore_merge_window: durable.restore_merge_window,
            log_max_age: durable.log_max_age,
            log_max_per_topic: durable.log_max_per_topic,
            log_prune_interval: durable.log_prune_interval,
            log_prune_batch: durable.log_prune_batch,
            restore_prune_interval: durable.restore_prune_interval,
            replay_page_size: durable.replay_page_size,
            durable_queue: durable.durable_queue,
            durable_writer_queue: durable.durable_writer_queue,
            durable_writers: durable.durable_writers,
            durable_sweep_interval: durable.durable_sweep_interval,
            bus_queue: cluster.bus_queue,
            dispatch_shards: cluster.dispatch_shards,
            node_ttl: cluster.node_ttl,
            node_refresh: cluster.node_refresh,
            shutdown_grace: shutdown.shutdown_grace,
            idempotency_window: idempotency.window,
            idempotency_max_key_length: idempotency.max_key_length,
            drain_delay: shutdown.drain_delay,
            drain_spread: shutdown.drain_spread,
            revalidate_interval: control.revalidate_interval,
            triggers: skua_edge::config::TriggerConfig {
                queue: webhooks.trigger_queue,
                in_flight: webhooks.trigger_in_flight,
                batch_window: triggers.batch_window,
                retry_delays: webhooks.trigger_retry.clone(),
                lease: triggers.lease,
                attempt_timeout: skua_core::webhook::WebhookKind::Trigger.max_timeout(),
                scan_interval: triggers.scan_interval,
                dead_letters_per_project: triggers.dead_letters_per_project,
                overflow_queue: triggers.overflow_queue,
                max_body_bytes: triggers.max_body_bytes,
                queue_bytes: triggers.queue_bytes,
                queue_bytes_per_project: triggers.queue_bytes_per_project,
                overflow_bytes: triggers.overflow_bytes,
                dead_letter_bytes_per_project: triggers.dead_letter_bytes_per_project,
                // A single node on a durable store sends what an earlier run left, at once.
                take_over_at_start: backends.bus == BusConfig::Memory && matches!(backends.store, StoreConfig::Url(_)),
            },
            members: MembersConfig {
                // A single node: whatever an earlier run left online is offline now.
                offline_others_at_start: backends.bus == BusConfig::Memory,
                // A single node sees every member change: no time bound on wake's negative answers.
                negative_until_changed: backends.bus == BusConfig::Memory,
                ..members.clone()
            },
            ..EdgeConfig::default()
        }
    }
}
