//! `skua serve` settings: compiled-in defaults (`config/default.toml`), then the `--config`
//! file, then `SKUA_*` environment variables and flags (clap reads both; flags win).
//!
//! [`Settings`] is the flat surface (every key a flag, a variable and a TOML key, named alike);
//! [`sections`] reads it in typed sections, each checking its own keys; [`ServerConfig`] is
//! what the node runs with, the edge's part being [`EdgeConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;
use skua_core::NodeId;
use skua_edge::EdgeConfig;

pub mod secrets;
pub mod sections;

pub use sections::Sections;

/// The compiled-in defaults, which double as the settings' documentation.
pub const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");

/// Every setting, as a flag (with its `SKUA_*` variable) and as a config-file key.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// HTTP listener: WebSocket at /ws, /healthz, /readyz [default 0.0.0.0:8080].
    #[arg(long, env = "SKUA_LISTEN")]
    pub listen: Option<String>,
    /// Message bus: `memory` or `mqtt://host:port` [default memory].
    #[arg(long, env = "SKUA_BUS")]
    pub bus: Option<String>,
    /// Presence store: `memory` or `redis://host:port/db` [default memory].
    #[arg(long, env = "SKUA_PRESENCE")]
    pub presence: Option<String>,
    /// Session store: `sqlite://PATH`, `sqlite::memory:`, `postgres://…` or `memory` [default sqlite://skua-data/skua.db].
    #[arg(long, env = "SKUA_STORE")]
    pub store: Option<String>,
    /// Connections of the node's Postgres store pool (SQLite keeps its own small pool) [default 8].
    #[arg(long, env = "SKUA_STORE_POOL_SIZE")]
    pub store_pool_size: Option<u32>,
    /// `skua migrate` on Postgres: how long one statement waits for a lock before the attempt gives way; 0s = forever [default 2s].
    #[arg(long, env = "SKUA_MIGRATE_LOCK_TIMEOUT")]
    pub migrate_lock_timeout: Option<String>,
    /// `skua migrate` on Postgres: how long attempts are repeated after lock timeouts [default 5m].
    #[arg(long, env = "SKUA_MIGRATE_RETRY_FOR")]
    pub migrate_retry_for: Option<String>,
    /// One node of a cluster: refuse to start without an MQTT bus, Redis presence and a Postgres store [default false].
    #[arg(long, env = "SKUA_CLUSTER")]
    pub cluster: Option<bool>,
    /// Root of internal topics and key prefixes [default skua].
    #[arg(long, env = "SKUA_NAMESPACE")]
    pub namespace: Option<String>,
    /// This node's name [default random].
    #[arg(long, env = "SKUA_NODE_ID")]
    pub node_id: Option<String>,
    /// Load apps, rooms, lobbies, actors and tokens from this TOML file.
    #[arg(long, env = "SKUA_FIXTURES")]
    pub fixtures: Option<PathBuf>,
    /// Close 4000 after this long without any inbound frame [default 60s].
    #[arg(long, env = "SKUA_IDLE_TIMEOUT")]
    pub idle_timeout: Option<String>,
    /// Publishes per second per connection, also the burst [default 50].
    #[arg(long, env = "SKUA_RATE_LIMIT")]
    pub rate_limit: Option<u32>,
    /// The window the rate limit refills over [default 1s].
    #[arg(long, env = "SKUA_RATE_LIMIT_WINDOW")]
    pub rate_limit_window: Option<String>,
    /// `presence` updates per connection per rate_limit_window, also the burst; more get 42910 rate_limit_exceeded [default 10].
    #[arg(long, env = "SKUA_PRESENCE_RATE_LIMIT")]
    pub presence_rate_limit: Option<u32>,
    /// `subscribe`, `unsubscribe`, `setFilters`, `lobbySubscribe` and `lobbyUnsubscribe` frames per connection per rate_limit_window, also the burst [default 100].
    #[arg(long, env = "SKUA_SUBSCRIBE_RATE_LIMIT")]
    pub subscribe_rate_limit: Option<u32>,
    /// `getPresence`, `getLobbyPresence` and `history` requests per connection per rate_limit_window, also the burst [default 20].
    #[arg(long, env = "SKUA_QUERY_RATE_LIMIT")]
    pub query_rate_limit: Option<u32>,
    /// Largest publish `data` in bytes [default 921600].
    #[arg(long, env = "SKUA_MAX_MESSAGE_SIZE")]
    pub max_message_size: Option<usize>,
    /// Outbound queue bound per connection, in frames [default 4096].
    #[arg(long, env = "SKUA_OUTBOUND_QUEUE_MESSAGES")]
    pub outbound_queue_messages: Option<usize>,
    /// Outbound queue bound per connection, in bytes [default 4194304].
    #[arg(long, env = "SKUA_OUTBOUND_QUEUE_BYTES")]
    pub outbound_queue_bytes: Option<usize>,
    /// Node-wide bound on all outbound queues' bytes; past it the largest are closed 4008 first; 0: none [default 1073741824].
    #[arg(long, env = "SKUA_OUTBOUND_BUDGET_BYTES")]
    pub outbound_budget_bytes: Option<usize>,
    /// Most WebSocket connections on this node [default 100000].
    #[arg(long, env = "SKUA_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Open files kept free of client sockets; upgrades get 503 beyond the open-file limit less this [default 256].
    #[arg(long, env = "SKUA_FD_RESERVE")]
    pub fd_reserve: Option<usize>,
    /// Most topic plus lobby subscriptions per connection [default 1000].
    #[arg(long, env = "SKUA_MAX_SUBSCRIPTIONS_PER_CONNECTION")]
    pub max_subscriptions_per_connection: Option<usize>,
    /// Most topics a connection keeps resolved for its publishes; 0: none [default 8].
    #[arg(long, env = "SKUA_PUBLISH_TOPIC_CACHE")]
    pub publish_topic_cache: Option<usize>,
    /// Most publishes one connection has in flight while earlier ones commit [default 1024].
    #[arg(long, env = "SKUA_PUBLISH_PIPELINE")]
    pub publish_pipeline: Option<usize>,
    /// Most bytes of publish data one connection has in flight [default 4194304].
    #[arg(long, env = "SKUA_PUBLISH_PIPELINE_BYTES")]
    pub publish_pipeline_bytes: Option<usize>,
    /// Most retained messages kept per topic [default 1024].
    #[arg(long, env = "SKUA_MAX_RETAINED_PER_TOPIC")]
    pub max_retained_per_topic: Option<usize>,
    /// How long subscriptions stay restorable after a disconnect [default 24h].
    #[arg(long, env = "SKUA_RESTORE_TTL")]
    pub restore_ttl: Option<String>,
    /// How long a reconnect waits for a node suspected dead to release its restore record; 0s = never [default 8s].
    #[arg(long, env = "SKUA_RESTORE_WAIT")]
    pub restore_wait: Option<String>,
    /// A reconnect also restores the plain subscriptions of the actor's records that ended within this long of the one it claims (tabs that dropped together); 0s = never [default 2s].
    #[arg(long, env = "SKUA_RESTORE_MERGE_WINDOW")]
    pub restore_merge_window: Option<String>,
    /// How long connections get to close on shutdown [default 10s].
    #[arg(long, env = "SKUA_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<String>,
    /// On shutdown, how long readiness fails and upgrades are refused before sockets close [default 0s].
    #[arg(long, env = "SKUA_DRAIN_DELAY")]
    pub drain_delay: Option<String>,
    /// On shutdown, after drain_delay: close the sockets 1012 spread evenly over this window; 0s = all at once [default 0s].
    #[arg(long, env = "SKUA_DRAIN_SPREAD")]
    pub drain_spread: Option<String>,
    /// Capacity of the bus → fan-out delivery queue [default 8192].
    #[arg(long, env = "SKUA_BUS_QUEUE")]
    pub bus_queue: Option<usize>,
    /// Dispatch tasks fan-outs are spread over; 0: one per worker thread [default 1].
    #[arg(long, env = "SKUA_DISPATCH_SHARDS")]
    pub dispatch_shards: Option<usize>,
    /// How long a node's presence registration lives without refresh [default 10s].
    #[arg(long, env = "SKUA_NODE_TTL")]
    pub node_ttl: Option<String>,
    /// How often a node refreshes its registration and reaps lapsed nodes [default 3s].
    #[arg(long, env = "SKUA_NODE_REFRESH")]
    pub node_refresh: Option<String>,
    /// Publishes buffered while the MQTT broker is unreachable [default 1024].
    #[arg(long, env = "SKUA_BUS_PUBLISH_BUFFER")]
    pub bus_publish_buffer: Option<usize>,
    /// Logged messages older than this are deleted [default 7d].
    #[arg(long, env = "SKUA_LOG_MAX_AGE")]
    pub log_max_age: Option<String>,
    /// Most logged messages kept per topic, oldest deleted first [default 100000].
    #[arg(long, env = "SKUA_LOG_MAX_PER_TOPIC")]
    pub log_max_per_topic: Option<usize>,
    /// How often logged messages past retention are deleted (by one node of a cluster at a time) [default 60s].
    #[arg(long, env = "SKUA_LOG_PRUNE_INTERVAL")]
    pub log_prune_interval: Option<String>,
    /// How often expired and surplus restore records are deleted (by one node of a cluster at a time) [default 60s].
    #[arg(long, env = "SKUA_RESTORE_PRUNE_INTERVAL")]
    pub restore_prune_interval: Option<String>,
    /// Logged messages deleted per statement while pruning; a prune repeats until done [default 5000].
    #[arg(long, env = "SKUA_LOG_PRUNE_BATCH")]
    pub log_prune_batch: Option<u64>,
    /// Pending messages read per store page of a replay [default 256].
    #[arg(long, env = "SKUA_REPLAY_PAGE_SIZE")]
    pub replay_page_size: Option<u32>,
    /// Live logged messages queued per connection for durable delivery [default 1024].
    #[arg(long, env = "SKUA_DURABLE_QUEUE")]
    pub durable_queue: Option<usize>,
    /// Claim and ack requests of the node's durable tasks waiting for the store writer; beyond it
    /// a task waits for room [default 1024].
    #[arg(long, env = "SKUA_DURABLE_WRITER_QUEUE")]
    pub durable_writer_queue: Option<usize>,
    /// Batches of claims and acks in the store at the same time (each uses up to two store
    /// connections) [default 2].
    #[arg(long, env = "SKUA_DURABLE_WRITERS")]
    pub durable_writers: Option<usize>,
    /// How often durable deliveries look for pending messages nobody holds; 0s = off [default 5s].
    #[arg(long, env = "SKUA_DURABLE_SWEEP_INTERVAL")]
    pub durable_sweep_interval: Option<String>,
    /// Control-plane gRPC listener, e.g. 127.0.0.1:50051; empty = none [default empty; --dev 127.0.0.1:50051].
    #[arg(long, env = "SKUA_GRPC_LISTEN")]
    pub grpc_listen: Option<String>,
    /// The admin API key gRPC calls must present as `authorization: Bearer KEY` [required with grpc_listen].
    #[arg(long, env = "SKUA_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
    /// How often every connection is revalidated, besides on registry changes [default 10m].
    #[arg(long, env = "SKUA_REVALIDATE_INTERVAL")]
    pub revalidate_interval: Option<String>,
    /// How often the node checks the store for registry changes [default 250ms].
    #[arg(long, env = "SKUA_REGISTRY_POLL_INTERVAL")]
    pub registry_poll_interval: Option<String>,
    /// Control plane: most apps per project [default 100].
    #[arg(long, env = "SKUA_MAX_APPS_PER_PROJECT")]
    pub max_apps_per_project: Option<u32>,
    /// Control plane: most rooms per app unless the app sets its own cap [default 10000].
    #[arg(long, env = "SKUA_MAX_ROOMS_PER_APP")]
    pub max_rooms_per_app: Option<u32>,
    /// Control plane: most actors per project [default 100000].
    #[arg(long, env = "SKUA_MAX_ACTORS_PER_PROJECT")]
    pub max_actors_per_project: Option<u32>,
    /// Control plane: most grants per room [default 1000].
    #[arg(long, env = "SKUA_MAX_GRANTS_PER_ROOM")]
    pub max_grants_per_room: Option<u32>,
    /// Control plane: most lobbies per project [default 1000].
    #[arg(long, env = "SKUA_MAX_LOBBIES_PER_PROJECT")]
    pub max_lobbies_per_project: Option<u32>,
    /// Control plane: largest page of a List call [default 1000].
    #[arg(long, env = "SKUA_MAX_PAGE_SIZE")]
    pub max_page_size: Option<u32>,
    /// Largest presence `data` in bytes [default 65536].
    #[arg(long, env = "SKUA_MAX_PRESENCE_SIZE")]
    pub max_presence_size: Option<usize>,
    /// Most bytes of retained messages kept per topic [default 4194304].
    #[arg(long, env = "SKUA_MAX_RETAINED_BYTES_PER_TOPIC")]
    pub max_retained_bytes_per_topic: Option<usize>,
    /// Most bytes of retained messages kept by this node [default 268435456].
    #[arg(long, env = "SKUA_MAX_RETAINED_BYTES")]
    pub max_retained_bytes: Option<usize>,
    /// Most bytes of retained messages one project may keep on this node [default 67108864].
    #[arg(long, env = "SKUA_MAX_RETAINED_BYTES_PER_PROJECT")]
    pub max_retained_bytes_per_project: Option<usize>,
    /// Topic history: largest `size` a topic may use; larger saturate [default 10000].
    #[arg(long, env = "SKUA_HISTORY_MAX_SIZE")]
    pub history_max_size: Option<u32>,
    /// Topic history: most (room, topic) histories kept in memory [default 10000].
    #[arg(long, env = "SKUA_HISTORY_MAX_TOPICS")]
    pub history_max_topics: Option<usize>,
    /// Topic history: most payload bytes per in-memory history [default 16777216].
    #[arg(long, env = "SKUA_HISTORY_MAX_TOPIC_BYTES")]
    pub history_max_topic_bytes: Option<usize>,
    /// Topic history: most payload bytes one project's histories keep (per node in memory, per cluster in Redis); beyond it messages are delivered but not kept [default 67108864].
    #[arg(long, env = "SKUA_HISTORY_MAX_BYTES_PER_PROJECT")]
    pub history_max_bytes_per_project: Option<usize>,
    /// Topic history: most messages one recovery replays [default 10000].
    #[arg(long, env = "SKUA_HISTORY_MAX_REPLAY")]
    pub history_max_replay: Option<usize>,
    /// Topic history: most messages one `history` reply carries [default 100].
    #[arg(long, env = "SKUA_HISTORY_MAX_PAGE")]
    pub history_max_page: Option<usize>,
    /// Topic history: after a node died, what history stamped before it was last seen alive
    /// less this is taken as delivered to its clients [default 30s].
    #[arg(long, env = "SKUA_HISTORY_RECOVERY_MARGIN")]
    pub history_recovery_margin: Option<String>,
    /// Topic history: least time between two receipt pings on one connection; a cut
    /// connection replays up to this much again [default 1s].
    #[arg(long, env = "SKUA_HISTORY_RECEIPT_INTERVAL")]
    pub history_receipt_interval: Option<String>,
    /// Failed auths per connection; one more closes it 1008 [default 10].
    #[arg(long, env = "SKUA_MAX_AUTH_FAILURES")]
    pub max_auth_failures: Option<u32>,
    /// Close connections not authenticated within this long; 0s = off [default 0s].
    #[arg(long, env = "SKUA_AUTH_TIMEOUT")]
    pub auth_timeout: Option<String>,
    /// Failed auths per source address before further attempts are delayed [default 5].
    #[arg(long, env = "SKUA_AUTH_BACKOFF_AFTER")]
    pub auth_backoff_after: Option<u32>,
    /// Longest delay for an auth from a failing source address [default 10s].
    #[arg(long, env = "SKUA_AUTH_BACKOFF_MAX")]
    pub auth_backoff_max: Option<String>,
    /// Accepted `aud` values of client tokens, comma-separated [default none: tokens with aud are refused].
    #[arg(long, env = "SKUA_JWT_AUDIENCES", value_delimiter = ',')]
    pub jwt_audiences: Option<Vec<String>>,
    /// How long a node holds a logged topic's trigger beyond its current attempt [default 30s].
    #[arg(long, env = "SKUA_TRIGGER_LEASE")]
    pub trigger_lease: Option<String>,
    /// How long the first queued trigger waits for others to start with it, 0s: at once; at most 1s [default 5ms].
    #[arg(long, env = "SKUA_TRIGGER_BATCH_WINDOW")]
    pub trigger_batch_window: Option<String>,
    /// How often each node claims outbox triggers whose lease ran out [default 5s].
    #[arg(long, env = "SKUA_TRIGGER_SCAN_INTERVAL")]
    pub trigger_scan_interval: Option<String>,
    /// Webhook dead letters kept per project; the oldest are dropped beyond it [default 10000].
    #[arg(long, env = "SKUA_WEBHOOK_DEAD_LETTERS_PER_PROJECT")]
    pub webhook_dead_letters_per_project: Option<u64>,
    /// Non-logged triggers waiting to become dead letters after the trigger queue was full; beyond it they are dropped (counted) [default 1024].
    #[arg(long, env = "SKUA_TRIGGER_OVERFLOW_QUEUE")]
    pub trigger_overflow_queue: Option<usize>,
    /// Longest trigger body (JSON); a longer one is not sent but dead-lettered with its data omitted [default 2097152].
    #[arg(long, env = "SKUA_TRIGGER_MAX_BODY_BYTES")]
    pub trigger_max_body_bytes: Option<usize>,
    /// Bytes of trigger bodies queued or being delivered on a node [default 67108864].
    #[arg(long, env = "SKUA_TRIGGER_QUEUE_BYTES")]
    pub trigger_queue_bytes: Option<usize>,
    /// Bytes of trigger bodies one project may have queued or being delivered on a node [default 16777216].
    #[arg(long, env = "SKUA_TRIGGER_QUEUE_BYTES_PER_PROJECT")]
    pub trigger_queue_bytes_per_project: Option<usize>,
    /// Bytes of trigger bodies waiting to be written as dead letters; beyond it they are dropped (counted) [default 16777216].
    #[arg(long, env = "SKUA_TRIGGER_OVERFLOW_BYTES")]
    pub trigger_overflow_bytes: Option<usize>,
    /// Bytes of webhook dead-letter bodies kept per project; the oldest are dropped beyond it [default 67108864].
    #[arg(long, env = "SKUA_WEBHOOK_DEAD_LETTER_BYTES_PER_PROJECT")]
    pub webhook_dead_letter_bytes_per_project: Option<u64>,
    /// Close a socket that has not sent a complete HTTP request head (or TLS handshake, PROXY header) in this time [default 10s].
    #[arg(long, env = "SKUA_HTTP_HEADER_TIMEOUT")]
    pub http_header_timeout: Option<String>,
    /// A request whose body has not arrived in full this long after its head is answered 408 and its socket closed [default 10s].
    #[arg(long, env = "SKUA_HTTP_BODY_TIMEOUT")]
    pub http_body_timeout: Option<String>,
    /// Most sockets per client address (IPv6: per /64), pending or upgraded; 0 = no limit [default 1000].
    #[arg(long, env = "SKUA_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<u32>,
    /// Most new sockets per second per client address, also the burst; 0 = no limit [default 100].
    #[arg(long, env = "SKUA_MAX_NEW_CONNECTIONS_PER_IP_PER_SECOND")]
    pub max_new_connections_per_ip_per_second: Option<u32>,
    /// Proxies (CIDR ranges, comma-separated) whose X-Forwarded-For / PROXY header name the client [default none].
    #[arg(long, env = "SKUA_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Option<Vec<String>>,
    /// Every socket starts with a PROXY protocol v1/v2 header from a trusted proxy [default false].
    #[arg(long, env = "SKUA_PROXY_PROTOCOL")]
    pub proxy_protocol: Option<bool>,
    /// Origins (comma-separated, `https://app.example.com`, `https://*.example.com`) browsers may connect from; empty = any [default empty].
    #[arg(long, env = "SKUA_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Option<Vec<String>>,
    /// Serve /metrics on this address instead of the client listener; empty = on the client listener [default empty].
    #[arg(long, env = "SKUA_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// MQTT device listener (3.1.1 and 5.0, docs/mqtt.md), e.g. 0.0.0.0:1883; empty = off [default empty].
    #[arg(long, env = "SKUA_MQTT_LISTEN")]
    pub mqtt_listen: Option<String>,
    /// Bearer token /metrics requires (`Authorization: Bearer TOKEN`); empty = none [default empty].
    #[arg(long, env = "SKUA_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Serve /metrics without a token on purpose; outside --dev, `skua serve` refuses to start with neither this nor metrics_token [default false].
    #[arg(long, env = "SKUA_METRICS_PUBLIC")]
    pub metrics_public: Option<bool>,
    /// OTLP/gRPC endpoint spans are exported to, `http://host:4317`; empty: OTEL_EXPORTER_OTLP_ENDPOINT, else none [default empty].
    #[arg(long, env = "SKUA_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// PEM certificate chain of the client listener; with tls_key, clients connect over wss:// [default empty: plain ws://].
    #[arg(long, env = "SKUA_TLS_CERT")]
    pub tls_cert: Option<String>,
    /// PEM private key of tls_cert [default empty].
    #[arg(long, env = "SKUA_TLS_KEY")]
    pub tls_key: Option<String>,
    /// PEM certificate chain of the gRPC listener [default empty: tls_cert's].
    #[arg(long, env = "SKUA_GRPC_TLS_CERT")]
    pub grpc_tls_cert: Option<String>,
    /// PEM private key of grpc_tls_cert [default empty: tls_key's].
    #[arg(long, env = "SKUA_GRPC_TLS_KEY")]
    pub grpc_tls_key: Option<String>,
    /// How often certificate files are checked for changes and reloaded; 0s: never [default 10s].
    #[arg(long, env = "SKUA_TLS_RELOAD_INTERVAL")]
    pub tls_reload_interval: Option<String>,
    /// Serve gRPC reflection without the admin key [default false; --dev true].
    #[arg(long, env = "SKUA_GRPC_REFLECTION_PUBLIC")]
    pub grpc_reflection_public: Option<bool>,
    /// Longest a gRPC call may take, reading its request body included; beyond it the call is answered CANCELLED and its stream freed [default 30s].
    #[arg(long, env = "SKUA_GRPC_REQUEST_TIMEOUT")]
    pub grpc_request_timeout: Option<String>,
    /// Failed admin-key checks from one address before it is blocked; 0: never [default 5].
    #[arg(long, env = "SKUA_ADMIN_KEY_MAX_FAILURES")]
    pub admin_key_max_failures: Option<u32>,
    /// A failed admin-key check this long after the previous one counts from one again [default 1m].
    #[arg(long, env = "SKUA_ADMIN_KEY_FAILURE_WINDOW")]
    pub admin_key_failure_window: Option<String>,
    /// Longest block of an address failing admin-key checks [default 5m].
    #[arg(long, env = "SKUA_ADMIN_KEY_BACKOFF_MAX")]
    pub admin_key_backoff_max: Option<String>,
    /// mqtts:// bus: PEM CA certificates the broker's certificate must chain to [default empty: system roots].
    #[arg(long, env = "SKUA_BUS_TLS_CA")]
    pub bus_tls_ca: Option<String>,
    /// mqtts:// bus: PEM client certificate chain [default empty: none].
    #[arg(long, env = "SKUA_BUS_TLS_CERT")]
    pub bus_tls_cert: Option<String>,
    /// mqtts:// bus: PEM private key of bus_tls_cert [default empty].
    #[arg(long, env = "SKUA_BUS_TLS_KEY")]
    pub bus_tls_key: Option<String>,
    /// rediss:// presence: PEM CA certificates Redis's certificate must chain to [default empty: system roots].
    #[arg(long, env = "SKUA_PRESENCE_TLS_CA")]
    pub presence_tls_ca: Option<String>,
    /// rediss:// presence: PEM client certificate chain [default empty: none].
    #[arg(long, env = "SKUA_PRESENCE_TLS_CERT")]
    pub presence_tls_cert: Option<String>,
    /// rediss:// presence: PEM private key of presence_tls_cert [default empty].
    #[arg(long, env = "SKUA_PRESENCE_TLS_KEY")]
    pub presence_tls_key: Option<String>,
    /// Webhooks may call link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10) [default false].
    #[arg(long, env = "SKUA_WEBHOOK_ALLOW_LINK_LOCAL")]
    pub webhook_allow_link_local: Option<bool>,
    /// Hosts webhooks may call (comma-separated; `name`, `*.parent` or an address); empty = any [default empty].
    #[arg(long, env = "SKUA_WEBHOOK_ALLOWED_HOSTS", value_delimiter = ',')]
    pub webhook_allowed_hosts: Option<Vec<String>>,
    /// Hydration webhooks may call loopback addresses (127.0.0.0/8, ::1, localhost): their answer reaches clients [default false; --dev true].
    #[arg(long, env = "SKUA_WEBHOOK_ALLOW_LOOPBACK")]
    pub webhook_allow_loopback: Option<bool>,
    /// Fire-and-forget webhook requests (triggers) waiting on this node; beyond it they are refused [default 10000].
    #[arg(long, env = "SKUA_WEBHOOK_QUEUE")]
    pub webhook_queue: Option<usize>,
    /// Queued webhook requests being delivered at once, retry waits included [default 1024].
    #[arg(long, env = "SKUA_WEBHOOK_MAX_PENDING")]
    pub webhook_max_pending: Option<usize>,
    /// Webhook requests in flight at once to one target (scheme, host, port) [default 16].
    #[arg(long, env = "SKUA_WEBHOOK_CONCURRENCY_PER_TARGET")]
    pub webhook_concurrency_per_target: Option<usize>,
    /// Most bytes of a webhook answer read; longer answers fail [default 1048576].
    #[arg(long, env = "SKUA_WEBHOOK_MAX_RESPONSE_BYTES")]
    pub webhook_max_response_bytes: Option<usize>,
    /// Connection timeout of webhook requests [default 5s].
    #[arg(long, env = "SKUA_WEBHOOK_CONNECT_TIMEOUT")]
    pub webhook_connect_timeout: Option<String>,
    /// Attempts of a trigger webhook request before it fails [default 5].
    #[arg(long, env = "SKUA_WEBHOOK_TRIGGER_ATTEMPTS")]
    pub webhook_trigger_attempts: Option<u32>,
    /// Wait before a trigger's second attempt; each further wait doubles [default 4s: 4s, 8s, 16s, 32s].
    #[arg(long, env = "SKUA_WEBHOOK_TRIGGER_FIRST_RETRY")]
    pub webhook_trigger_first_retry: Option<String>,
    /// Webhook deliveries whose outcome a node keeps for the admin dashboard [default 100; 0: none].
    #[arg(long, env = "SKUA_WEBHOOK_RECENT_DELIVERIES")]
    pub webhook_recent_deliveries: Option<usize>,
    /// Serve the REST API under /v1 on the client listener [default true].
    #[arg(long, env = "SKUA_REST_API")]
    pub rest_api: Option<bool>,
    /// Largest REST request body in bytes; larger ones get 413 [default 1048576].
    #[arg(long, env = "SKUA_REST_MAX_BODY_BYTES")]
    pub rest_max_body_bytes: Option<usize>,
    /// REST requests per second per API key, also the burst; beyond it 429 [default 50].
    #[arg(long, env = "SKUA_REST_RATE_LIMIT")]
    pub rest_rate_limit: Option<u32>,
    /// Largest `limit` of a paginated REST list [default 100].
    #[arg(long, env = "SKUA_REST_MAX_PAGE_LIMIT")]
    pub rest_max_page_limit: Option<u32>,
    /// Serve the admin dashboard under /admin on the client listener when an admin key is set [default true].
    #[arg(long, env = "SKUA_DASHBOARD")]
    pub dashboard: Option<bool>,
    /// How long a dashboard sign-in lasts [default 8h].
    #[arg(long, env = "SKUA_DASHBOARD_SESSION_TTL")]
    pub dashboard_session_ttl: Option<String>,
    /// Most dashboard sessions at once; a new sign-in beyond it ends the oldest [default 64].
    #[arg(long, env = "SKUA_DASHBOARD_MAX_SESSIONS")]
    pub dashboard_max_sessions: Option<usize>,
    /// Messages a dashboard live topic view keeps [default 200].
    #[arg(long, env = "SKUA_DASHBOARD_LIVE_BUFFER")]
    pub dashboard_live_buffer: Option<usize>,
    /// Dashboard live topic views open at once on a node [default 8].
    #[arg(long, env = "SKUA_DASHBOARD_MAX_LIVE_VIEWS")]
    pub dashboard_max_live_views: Option<usize>,
    /// A live topic view nobody polled for this long is closed [default 1m].
    #[arg(long, env = "SKUA_DASHBOARD_LIVE_IDLE")]
    pub dashboard_live_idle: Option<String>,
    /// How often the dashboard samples the node's counters for its chart [default 5s].
    #[arg(long, env = "SKUA_DASHBOARD_SAMPLE_INTERVAL")]
    pub dashboard_sample_interval: Option<String>,
    /// Samples the dashboard's chart keeps [default 120: 10 minutes at 5s].
    #[arg(long, env = "SKUA_DASHBOARD_HISTORY")]
    pub dashboard_history: Option<usize>,
    /// Rows a dashboard list page shows at once (durable groups, rooms, actors) [default 100].
    #[arg(long, env = "SKUA_DASHBOARD_PAGE_SIZE")]
    pub dashboard_page_size: Option<usize>,
    /// Longest search term of a dashboard list page, in characters; longer ones are refused [default 200].
    #[arg(long, env = "SKUA_DASHBOARD_SEARCH_MAX_CHARS")]
    pub dashboard_search_max_chars: Option<usize>,
    /// How long a persistent presence member outlives its last connection (N46) [default 7d].
    #[arg(long, env = "SKUA_PRESENCE_TTL")]
    pub presence_ttl: Option<String>,
    /// Most persistent members a presenceList adds beside the live ones [default 1000].
    #[arg(long, env = "SKUA_PRESENCE_LIST_LIMIT")]
    pub presence_list_limit: Option<u32>,
    /// Most stored persistent presence members per project, cluster-wide; a new one beyond it is refused presence_limit_exceeded [default 10000].
    #[arg(long, env = "SKUA_PRESENCE_MAX_MEMBERS_PER_PROJECT")]
    pub presence_max_members_per_project: Option<u64>,
    /// How long a woken member has to connect when its wake.timeoutMs gives nothing (N47) [default 30s].
    #[arg(long, env = "SKUA_WAKE_TIMEOUT")]
    pub wake_timeout: Option<String>,
    /// The longest wake.timeoutMs honoured [default 5m].
    #[arg(long, env = "SKUA_WAKE_TIMEOUT_MAX")]
    pub wake_timeout_max: Option<String>,
    /// Publishes waiting for a wake check on a node; beyond it they wake nobody (counted) [default 4096].
    #[arg(long, env = "SKUA_WAKE_QUEUE")]
    pub wake_queue: Option<usize>,
    /// Offline members one wake check wakes at most [default 64].
    #[arg(long, env = "SKUA_WAKE_BATCH")]
    pub wake_batch: Option<u32>,
    /// In a cluster, how long a room without wakeable members is not checked again by a node (a single node: until a member changes) [default 1s].
    #[arg(long, env = "SKUA_WAKE_NEGATIVE_CACHE")]
    pub wake_negative_cache: Option<String>,
    /// Internal addresses wake URLs may name (comma-separated exact host names, addresses or CIDR ranges); loopback, private, link-local, CGNAT, multicast and metadata addresses are refused otherwise [default empty; --dev 127.0.0.0/8,::1,localhost].
    #[arg(long, env = "SKUA_WAKE_ALLOWED_HOSTS", value_delimiter = ',')]
    pub wake_allowed_hosts: Option<Vec<String>>,
    /// The shortest wake.timeoutMs honoured: a member is woken at most once per this long [default 1s].
    #[arg(long, env = "SKUA_WAKE_TIMEOUT_MIN")]
    pub wake_timeout_min: Option<String>,
    /// The period of the wake limits (wake_limit_per_actor, wake_limit_per_url, wake_log_limit) [default 1m].
    #[arg(long, env = "SKUA_WAKE_LIMIT_PERIOD")]
    pub wake_limit_period: Option<String>,
    /// Wakes started per actor (all its clientIds) per wake_limit_period, for the cluster with Redis presence (per node otherwise); beyond it members stay offline [default 64].
    #[arg(long, env = "SKUA_WAKE_LIMIT_PER_ACTOR")]
    pub wake_limit_per_actor: Option<u32>,
    /// Wakes started per project and wake URL origin (scheme, host, port) per wake_limit_period, for the cluster with Redis presence (per node otherwise) [default 256].
    #[arg(long, env = "SKUA_WAKE_LIMIT_PER_URL")]
    pub wake_limit_per_url: Option<u32>,
    /// Log lines about failed or limited wakes a node writes per wake_limit_period; the rest are counted [default 10].
    #[arg(long, env = "SKUA_WAKE_LOG_LIMIT")]
    pub wake_log_limit: Option<u32>,
    /// Most rooms a node remembers as having no wakeable members; beyond it it forgets them all [default 65536].
    #[arg(long, env = "SKUA_WAKE_NEGATIVE_ROOMS")]
    pub wake_negative_rooms: Option<usize>,
    /// A publish repeating an idempotencyKey (per project) within this window is acknowledged as a duplicate and not delivered [default 2m].
    #[arg(long, env = "SKUA_IDEMPOTENCY_WINDOW")]
    pub idempotency_window: Option<String>,
    /// Longest publish idempotencyKey in bytes; longer ones are refused [default 128].
    #[arg(long, env = "SKUA_IDEMPOTENCY_MAX_KEY_LENGTH")]
    pub idempotency_max_key_length: Option<usize>,
    /// Single node (memory presence): most idempotency keys remembered; when full the oldest is forgotten [default 100000].
    #[arg(long, env = "SKUA_IDEMPOTENCY_MAX_KEYS")]
    pub idempotency_max_keys: Option<usize>,
}

macro_rules! layer {
    ($lo:expr, $hi:expr; $($f:ident),+) => { $( if $hi.$f.is_some() { $lo.$f = $hi.$f.clone(); } )+ };
}

impl Settings {
    /// Lays `over` on top of `self`: every setting `over` has wins.
    pub fn overlay(&mut self, over: &Settings) {
        layer!(self, over; listen, bus, presence, store, namespace, node_id, fixtures, idle_timeout, rate_limit,
            rate_limit_window, presence_rate_limit, subscribe_rate_limit, query_rate_limit, max_message_size, outbound_queue_messages, outbound_queue_bytes, outbound_budget_bytes, max_connections, fd_reserve,
            max_subscriptions_per_connection, publish_topic_cache, publish_pipeline, publish_pipeline_bytes, max_retained_per_topic, restore_ttl, restore_wait, restore_merge_window, shutdown_grace, drain_delay, bus_queue, dispatch_shards, node_ttl,
            node_refresh, bus_publish_buffer, log_max_age, log_max_per_topic, log_prune_interval, replay_page_size,
            durable_queue, durable_writer_queue, durable_writers, durable_sweep_interval, grpc_listen, admin_key, revalidate_interval, registry_poll_interval, max_apps_per_project,
            max_rooms_per_app, max_actors_per_project, max_grants_per_room, max_lobbies_per_project, max_page_size, otlp_endpoint,
            max_presence_size, max_retained_bytes_per_topic, max_retained_bytes, max_retained_bytes_per_project, max_auth_failures, auth_timeout,
            auth_backoff_after, auth_backoff_max, jwt_audiences,
            http_header_timeout, http_body_timeout, max_connections_per_ip, max_new_connections_per_ip_per_second, trusted_proxies,
            proxy_protocol, allowed_origins, metrics_listen, mqtt_listen, metrics_token, metrics_public);
        layer!(self, over; tls_cert, tls_key, grpc_tls_cert, grpc_tls_key, tls_reload_interval, grpc_reflection_public,
            grpc_request_timeout,
            admin_key_max_failures, admin_key_failure_window, admin_key_backoff_max, bus_tls_ca, bus_tls_cert,
            bus_tls_key, presence_tls_ca, presence_tls_cert, presence_tls_key);
        layer!(self, over; trigger_lease, trigger_batch_window, trigger_scan_interval, webhook_dead_letters_per_project, trigger_overflow_queue,
            trigger_max_body_bytes, trigger_queue_bytes, trigger_queue_bytes_per_project, trigger_overflow_bytes,
            webhook_dead_letter_bytes_per_project);
        layer!(self, over; webhook_allow_link_local, webhook_allowed_hosts, webhook_queue, webhook_max_pending,
            webhook_concurrency_per_target, webhook_max_response_bytes, webhook_connect_timeout,
            webhook_trigger_attempts, webhook_trigger_first_retry, webhook_recent_deliveries);
        layer!(self, over; rest_api, rest_max_body_bytes, rest_rate_limit, rest_max_page_limit);
        layer!(self, over; dashboard, dashboard_session_ttl, dashboard_max_sessions, dashboard_live_buffer,
            dashboard_max_live_views, dashboard_live_idle, dashboard_sample_interval, dashboard_history,
            dashboard_page_size, dashboard_search_max_chars);
        layer!(self, over; cluster, drain_spread, log_prune_batch);
        layer!(self, over; store_pool_size, migrate_lock_timeout, migrate_retry_for, restore_prune_interval);
        layer!(self, over; history_max_size, history_max_topics, history_max_topic_bytes,
            history_max_bytes_per_project, history_max_replay,
            history_max_page, history_recovery_margin, history_receipt_interval);
        layer!(self, over; presence_ttl, presence_list_limit, presence_max_members_per_project, wake_timeout, wake_timeout_max, wake_queue, wake_batch,
            wake_negative_cache, wake_allowed_hosts, wake_timeout_min, wake_limit_period, wake_limit_per_actor,
            wake_limit_per_url, wake_log_limit, webhook_allow_loopback, wake_negative_rooms);
        layer!(self, over; idempotency_window, idempotency_max_key_length, idempotency_max_keys);
    }

    /// Parses a TOML config file's text.
    ///
    /// # Errors
    /// [`ConfigError::UnknownOrInvalid`] for unknown keys or wrongly typed values.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::UnknownOrInvalid(e.to_string()))
    }
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
        let edge = sections.edge();
        let Sections { backends, front, control, cluster, tls, telemetry, webhooks, idempotency, .. } = sections;
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
            idempotency_max_keys: idempotency.max_keys,
            grpc_listen: control.grpc_listen,
            admin_key: control.admin_key,
            registry_poll_interval: control.registry_poll_interval,
            control: control.limits,
            otlp_endpoint: telemetry.otlp_endpoint,
            metrics_listen: front.metrics_listen,
            mqtt_listen: front.mqtt_listen,
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
        let mut s = Settings::from_toml(DEFAULT_TOML)?;
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
        let s = Settings {
            webhook_connect_timeout: Some("750ms".into()),
            webhook_concurrency_per_target: Some(3),
            webhook_trigger_attempts: Some(4),
            webhook_trigger_first_retry: Some("2s".into()),
            ..Settings::default()
        };
        let c = ServerConfig::from_layers(&[&s]).unwrap();
        assert_eq!(c.webhooks.connect_timeout, std::time::Duration::from_millis(750));
        assert_eq!(c.webhooks.concurrency_per_target, 3);
        assert_eq!(c.webhooks.trigger_retry.delays, [2, 4, 8].map(std::time::Duration::from_secs));
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

    /// docs/security.md: its tables list every budget and rate limit with its default.
    const SECURITY_MD: &str = include_str!("../../../docs/security.md");

    /// Settings that bound nothing a client or tenant can grow (addresses, identities, the
    /// pace of background work, TLS material, switches documented elsewhere): docs/security.md
    /// need not list them. Every other key of config/default.toml must be in its tables.
    const NOT_BUDGETS: &[&str] = &[
        "listen",
        "mqtt_listen",
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
        bad(Settings { trusted_proxies: Some(vec!["10.0.0.0/40".into()]), ..Settings::default() }, "trusted_proxies");
        bad(Settings { proxy_protocol: Some(true), ..Settings::default() }, "proxy_protocol");
        bad(Settings { allowed_origins: Some(vec!["example.com".into()]), ..Settings::default() }, "allowed_origins");
        bad(Settings { metrics_listen: Some("nowhere".into()), ..Settings::default() }, "metrics_listen");
        bad(Settings { mqtt_listen: Some("nowhere".into()), ..Settings::default() }, "mqtt_listen");
        bad(Settings { metrics_token: Some("short".into()), ..Settings::default() }, "metrics_token");
        bad(Settings { http_header_timeout: Some("0s".into()), ..Settings::default() }, "http_header_timeout");
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
        let cluster = |bus: &str, presence: &str, store: &str| Settings {
            cluster: Some(true),
            bus: Some(bus.into()),
            presence: Some(presence.into()),
            store: Some(store.into()),
            ..Settings::default()
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
        let s = Settings { tls_cert: Some("c.pem".into()), tls_key: Some("k.pem".into()), ..Settings::default() };
        let c = ServerConfig::from_layers(&[&s]).unwrap();
        let pair = crate::tls::CertFiles { cert: "c.pem".into(), key: "k.pem".into() };
        assert_eq!(c.tls.client, Some(pair.clone()));
        assert_eq!(c.tls.grpc, Some(pair), "grpc_tls_* default to tls_*");
        let own = Settings { grpc_tls_cert: Some("g.pem".into()), grpc_tls_key: Some("gk.pem".into()), ..s.clone() };
        let c = ServerConfig::from_layers(&[&own]).unwrap();
        assert_eq!(c.tls.grpc.unwrap().cert, PathBuf::from("g.pem"));
        let half = Settings { tls_cert: Some("c.pem".into()), ..Settings::default() };
        assert!(matches!(ServerConfig::from_layers(&[&half]), Err(ConfigError::Invalid { key: "tls_cert", .. })));
    }

    #[test]
    fn backend_tls_needs_a_tls_url_and_credentials_are_not_echoed() {
        let s = Settings { bus_tls_ca: Some("ca.pem".into()), ..Settings::default() };
        assert!(matches!(ServerConfig::from_layers(&[&s]), Err(ConfigError::Invalid { key: "bus_tls_ca", .. })));
        let s = Settings {
            bus: Some("mqtts://skua:pw@broker:8883".into()),
            bus_tls_ca: Some("ca.pem".into()),
            presence: Some("rediss://skua:pw@redis:6380/0".into()),
            presence_tls_ca: Some("ca.pem".into()),
            ..Settings::default()
        };
        let c = ServerConfig::from_layers(&[&s]).unwrap();
        assert_eq!(c.bus_tls.ca, Some(PathBuf::from("ca.pem")));
        assert!(matches!(c.presence, PresenceConfig::Redis { .. }));
        let s = Settings { presence_tls_ca: Some("ca.pem".into()), ..Settings::default() };
        assert!(matches!(ServerConfig::from_layers(&[&s]), Err(ConfigError::Invalid { key: "presence_tls_ca", .. })));
        let s = Settings { bus: Some("amqp://user:hunter2@broker".into()), ..Settings::default() };
        let e = ServerConfig::from_layers(&[&s]).unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let s = Settings {
            bus: Some("mqtts://skua:hunter2@broker:8883".into()),
            presence: Some("rediss://default:hunter2@redis:6380/0".into()),
            store: Some("postgres://skua:hunter2@db/skua?sslmode=verify-full&password=hunter2".into()),
            admin_key: Some("hunter2-hunter2-hunter2".into()),
            ..Settings::default()
        };
        let shown = format!("{:#?}", ServerConfig::from_layers(&[&s]).unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sslmode=verify-full"));
    }

    #[test]
    fn layers_override_in_order_and_unknown_keys_fail() {
        let file = Settings::from_toml("idle_timeout = \"5s\"\nrate_limit = 7\n").unwrap();
        let flags = Settings { rate_limit: Some(9), ..Settings::default() };
        let c = ServerConfig::from_layers(&[&file, &flags]).unwrap();
        assert_eq!(c.edge.idle_timeout, std::time::Duration::from_secs(5));
        assert_eq!(c.edge.rate_limit, 9);
        assert!(matches!(Settings::from_toml("idle_timeut = \"5s\""), Err(ConfigError::UnknownOrInvalid(_))));
        let bad = Settings { idle_timeout: Some("5 parsecs".into()), ..Settings::default() };
        assert!(matches!(ServerConfig::from_layers(&[&bad]), Err(ConfigError::Invalid { key: "idle_timeout", .. })));
        let bad = Settings { bus: Some("amqp://x:5672".into()), ..Settings::default() };
        assert!(matches!(ServerConfig::from_layers(&[&bad]), Err(ConfigError::Invalid { key: "bus", .. })));
    }
}
