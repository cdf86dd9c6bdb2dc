//! The edge's settings. The server crate fills them from defaults, the config file, the
//! environment and flags; tests build them directly.

mod cidr;
mod members;
mod origin;
mod triggers;

use std::time::Duration;

pub use cidr::Cidr;
pub use cidr::canonical;
pub use members::MembersConfig;
pub use origin::OriginPattern;
pub use triggers::TriggerConfig;

/// Limits and behaviour of one edge node. Every limit is documented in `config/default.toml`.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Root of internal topics and keys (`--namespace`).
    pub namespace: String,
    /// Close 4000 after this long without any inbound frame (N28, N30).
    pub idle_timeout: Duration,
    /// Publishes per `rate_limit_window` per connection; also the burst (N18).
    pub rate_limit: u32,
    /// The window the rate limit refills over (1 s in production); also the window of the
    /// other per-connection rate limits below.
    pub rate_limit_window: Duration,
    /// `presence` updates per `rate_limit_window` per connection, also the burst; more get
    /// 42910 `rate_limit_exceeded` (issue 33, item 5).
    pub presence_rate_limit: u32,
    /// `subscribe`, `unsubscribe`, `setFilters`, `lobbySubscribe` and `lobbyUnsubscribe`
    /// frames per `rate_limit_window` per connection, also the burst.
    pub subscribe_rate_limit: u32,
    /// `getPresence`, `getLobbyPresence` and `history` requests per `rate_limit_window` per
    /// connection, also the burst.
    pub query_rate_limit: u32,
    /// Largest publish `data` in bytes (N4).
    pub max_message_size: usize,
    /// Largest inbound WebSocket frame; larger closes 1009 (N4).
    pub max_frame_size: usize,
    /// Outbound queue bound per connection, in frames.
    pub outbound_queue_messages: usize,
    /// Outbound queue bound per connection, in bytes.
    pub outbound_queue_bytes: usize,
    /// Node-wide bound on the bytes queued in all outbound queues; past it the largest queues
    /// are closed 4008 first (0: none).
    pub outbound_budget_bytes: usize,
    /// Most WebSocket connections this node holds; more are refused with HTTP 503.
    pub max_connections: usize,
    /// Open files kept free of client sockets (store, bus, webhooks, gRPC, accepts): upgrades are
    /// refused 503 once the connection slots held reach the open-file soft limit less this.
    pub fd_reserve: usize,
    /// How long a restore record lives after its connection ends (N23).
    pub restore_ttl: Duration,
    /// A `reconnect:true` without clientId, while a node suspected dead still holds one of the
    /// actor's records, waits up to this long for that node's release (issue 19); zero: never.
    pub restore_wait: Duration,
    /// A `reconnect:true` without clientId also gets the plain subscriptions of the actor's
    /// other connection records that ended within this long of the one it claims (two tabs that
    /// dropped together, issue 31); zero: never.
    pub restore_merge_window: Duration,
    /// Logged messages older than this are deleted (`--log-max-age`).
    pub log_max_age: Duration,
    /// Most logged messages kept per topic; the oldest go first (`--log-max-per-topic`).
    pub log_max_per_topic: u64,
    /// How often each node deletes logged messages past retention.
    pub log_prune_interval: Duration,
    /// Logged messages deleted per statement while pruning.
    pub log_prune_batch: u64,
    /// How often expired restore records, and ended connection records beyond
    /// `MAX_ENDED_RECORDS_PER_ACTOR` per actor, are deleted: each node ticks at this interval,
    /// the store lets one node of a cluster prune about once per interval.
    pub restore_prune_interval: Duration,
    /// Pending messages read from the store per page of a replay.
    pub replay_page_size: u32,
    /// Live logged messages queued per connection for its durable delivery; beyond it they are
    /// read back from the store.
    pub durable_queue: usize,
    /// Claim and ack requests waiting for the node's durable writer; a task waits for room.
    pub durable_writer_queue: usize,
    /// Batches of claims and acks in the store at the same time (at least 1).
    pub durable_writers: usize,
    /// How often each connection's durable task delivers pending messages nobody holds (a
    /// logged message that missed the bus); zero: only on subscribe, restore and kicks.
    pub durable_sweep_interval: Duration,
    /// On shutdown, how long sessions get to close before the node stops waiting.
    pub shutdown_grace: Duration,
    /// How long a publish's idempotency key is remembered: a repeat within it is answered as
    /// a duplicate and not delivered (issue 19).
    pub idempotency_window: Duration,
    /// Longest publish idempotency key, in bytes; longer ones are refused.
    pub idempotency_max_key_length: usize,
    /// On shutdown, how long readiness fails and new upgrades are refused (503) before the
    /// sockets are closed 1012, so load balancers take the node out of rotation first.
    pub drain_delay: Duration,
    /// After `drain_delay`: the window the 1012 closes are spread evenly over; zero closes
    /// every socket at once.
    pub drain_spread: Duration,
    /// How long a close frame may take to reach a client that does not read.
    pub close_timeout: Duration,
    /// Most retained messages (one per filter key) kept per topic on this node.
    pub max_retained_per_topic: usize,
    /// Capacity of the bus → hub delivery queue, and of each dispatch shard's queue.
    pub bus_queue: usize,
    /// Dispatch tasks the hub spreads fan-outs over (0: one per runtime worker thread).
    pub dispatch_shards: usize,
    /// Most topics one connection keeps resolved for its publishes (`app/room/topic` → address
    /// and access, dropped on any registry or actor change and at the earliest grant expiry);
    /// a publish to a topic not kept resolves it again. 0 turns the cache off. Default 8.
    pub publish_topic_cache: usize,
    /// Most publishes one connection has in flight (issue 36): read and submitted while earlier
    /// logged ones commit, answered in order once each committed. When full, the connection is
    /// not read until one finished (backpressure). Default 4096: four of the store's group
    /// commits (1024 appends each), so one batch commits while the next ones fill.
    pub publish_pipeline: usize,
    /// Most bytes of publish data one connection has in flight (a single larger publish is
    /// still taken when nothing else is). Default 4 MiB.
    pub publish_pipeline_bytes: usize,
    /// Most topic plus lobby subscriptions one connection may hold.
    pub max_subscriptions_per_connection: usize,
    /// How long this node's presence registration lives without a refresh; after it lapses a
    /// surviving node removes this node's presence entries and sends their `leave` events.
    pub node_ttl: Duration,
    /// How often the node refreshes its registration and looks for lapsed nodes.
    pub node_refresh: Duration,
    /// How often every connection is revalidated against the registry, besides on changes.
    pub revalidate_interval: Duration,
    /// Largest presence `data` (packed msgpack) in bytes; larger gets 42930 `message_too_large`.
    pub max_presence_size: usize,
    /// Most bytes of retained messages kept per topic on this node; a retained publish beyond
    /// it is refused (`retained_limit_exceeded`) or, arriving from another node, not kept.
    pub max_retained_bytes_per_topic: usize,
    /// Most bytes of retained messages this node keeps over all topics (same behaviour).
    pub max_retained_bytes: usize,
    /// Most bytes of retained messages one project keeps on this node (its share of
    /// `max_retained_bytes`; same behaviour).
    pub max_retained_bytes_per_project: usize,
    /// Topic history (issue 19, docs/recovery.md): largest `size` a topic may use (larger
    /// configured sizes saturate).
    pub history_max_size: u32,
    /// Most (room, topic) histories one node keeps in memory (least recently used go first).
    pub history_max_topics: usize,
    /// Most payload bytes one in-memory (room, topic) history keeps (oldest go first).
    pub history_max_topic_bytes: usize,
    /// Most payload bytes one project's histories keep together (per node in memory, per
    /// cluster in Redis; issue 33): a message beyond it is delivered but not kept.
    pub history_max_bytes_per_project: usize,
    /// Most messages one subscription's recovery replays.
    pub history_max_replay: usize,
    /// Most messages one `history` reply carries (a larger `limit` saturates).
    pub history_max_page: usize,
    /// When a restore record was released for a node that died (its offsets are then older
    /// than what it delivered): what history stamped before the node was last seen alive less
    /// this margin is taken as delivered, and not replayed (docs/recovery.md).
    pub history_recovery_margin: Duration,
    /// Least time between two receipt pings on one connection (issue 19): history frames
    /// written meanwhile are proven by the next one. Longer is cheaper per message; a cut
    /// connection replays up to this much again (`isReplay`).
    pub history_receipt_interval: Duration,
    /// Failed `auth`s one connection may make; the next failure closes it 1008.
    pub max_auth_failures: u32,
    /// Close a connection that has not authenticated within this long (1008); `None`: no
    /// deadline beyond the idle timeout. On by default (10 s, issue 33, item 12).
    pub auth_timeout: Option<Duration>,
    /// Failed `auth`s one source address may make before its further attempts are delayed.
    pub auth_backoff_after: u32,
    /// Longest delay an `auth` from a failing source address waits (the delay doubles per
    /// further failure up to this).
    pub auth_backoff_max: Duration,
    /// Audiences a client token's `aud` may name. Empty: a token carrying `aud` is refused.
    pub jwt_audiences: Vec<String>,
    /// How long a socket may take to send a complete HTTP request head (also the limit for
    /// its TLS handshake plus PROXY header, and for an idle keep-alive socket); then it is closed.
    pub http_header_timeout: Duration,
    /// How long a request's body may take to arrive in full after its head; then the request
    /// is answered 408 and its socket closed (issue 33, item 6).
    pub http_body_timeout: Duration,
    /// Most sockets (pending or upgraded) per client address, IPv6 per /64; 0 = no limit.
    pub max_connections_per_ip: u32,
    /// Most new sockets per second per client address, also the burst; 0 = no limit.
    pub max_new_connections_per_ip_per_second: u32,
    /// Peers whose `X-Forwarded-For` (and PROXY header) name the client.
    pub trusted_proxies: Vec<Cidr>,
    /// Every socket starts with a PROXY protocol (v1 or v2) header from a trusted proxy.
    pub proxy_protocol: bool,
    /// Origins browsers may open WebSockets from; empty = any (requests without `Origin` always pass).
    pub allowed_origins: Vec<OriginPattern>,
    /// Bearer token `/metrics` requires, if any.
    pub metrics_token: Option<MetricsToken>,
    /// `/metrics` is served on its own listener, not next to `/ws`.
    pub metrics_separate: bool,
    /// Trigger webhook delivery (N44, N45).
    pub triggers: TriggerConfig,
    /// Persistent presence and wake (N46, N47).
    pub members: MembersConfig,
}

/// The bearer token of `/metrics`: never shown by `Debug`, compared in constant time.
#[derive(Clone)]
pub struct MetricsToken(String);

impl MetricsToken {
    /// Wraps a token.
    pub fn new(token: String) -> Self {
        Self(token)
    }

    /// The token itself, for the start-up check of placeholder secrets (never log it).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header carries the token as `Bearer TOKEN`.
    pub fn verify(&self, authorization: Option<&http::HeaderValue>) -> bool {
        use subtle::ConstantTimeEq;
        let Some(v) = authorization else { return false };
        let v = v.as_bytes();
        let Some(given) = v.get(..7).filter(|p| p.eq_ignore_ascii_case(b"bearer ")).map(|_| &v[7..]) else {
            return false;
        };
        bool::from(given.ct_eq(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsToken(<redacted>)")
    }
}

impl Default for EdgeConfig {
    fn default() -> Self {
        Self {
            namespace: "skua".into(),
            idle_timeout: Duration::from_secs(60),
            rate_limit: 50,
            rate_limit_window: Duration::from_secs(1),
            presence_rate_limit: 10,
            subscribe_rate_limit: 100,
            query_rate_limit: 20,
            max_message_size: skua_protocol::DEFAULT_MAX_PAYLOAD_BYTES,
            max_frame_size: skua_protocol::MAX_INBOUND_FRAME_BYTES,
            outbound_queue_messages: 1024,
            outbound_queue_bytes: 4 * 1024 * 1024,
            outbound_budget_bytes: 1024 * 1024 * 1024,
            max_connections: 100_000,
            fd_reserve: 256,
            restore_ttl: Duration::from_secs(24 * 3600),
            restore_wait: Duration::from_secs(8),
            restore_merge_window: Duration::from_secs(2),
            log_max_age: Duration::from_secs(7 * 24 * 3600),
            log_max_per_topic: 100_000,
            log_prune_interval: Duration::from_secs(60),
            log_prune_batch: 5_000,
            restore_prune_interval: Duration::from_secs(60),
            replay_page_size: 256,
            durable_queue: 1024,
            durable_writer_queue: 1024,
            durable_writers: 2,
            durable_sweep_interval: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(10),
            idempotency_window: Duration::from_secs(120),
            idempotency_max_key_length: 128,
            drain_delay: Duration::ZERO,
            drain_spread: Duration::ZERO,
            close_timeout: Duration::from_secs(2),
            max_retained_per_topic: 1024,
            bus_queue: 8192,
            dispatch_shards: 1,
            publish_topic_cache: 8,
            publish_pipeline: 4096,
            publish_pipeline_bytes: 4 << 20,
            max_subscriptions_per_connection: 1000,
            node_ttl: Duration::from_secs(10),
            node_refresh: Duration::from_secs(3),
            revalidate_interval: Duration::from_secs(600),
            max_presence_size: 64 * 1024,
            max_retained_bytes_per_topic: 4 * 1024 * 1024,
            max_retained_bytes: 256 * 1024 * 1024,
            max_retained_bytes_per_project: 64 * 1024 * 1024,
            history_max_size: 10_000,
            history_max_topics: 10_000,
            history_max_topic_bytes: 16 * 1024 * 1024,
            history_max_bytes_per_project: 64 * 1024 * 1024,
            history_max_replay: 10_000,
            history_max_page: 100,
            history_recovery_margin: Duration::from_secs(30),
            history_receipt_interval: Duration::from_secs(1),
            max_auth_failures: 10,
            auth_timeout: Some(Duration::from_secs(10)),
            auth_backoff_after: 5,
            auth_backoff_max: Duration::from_secs(10),
            jwt_audiences: Vec::new(),
            http_header_timeout: Duration::from_secs(10),
            http_body_timeout: Duration::from_secs(10),
            max_connections_per_ip: 1000,
            max_new_connections_per_ip_per_second: 100,
            trusted_proxies: Vec::new(),
            proxy_protocol: false,
            allowed_origins: Vec::new(),
            metrics_token: None,
            metrics_separate: false,
            triggers: TriggerConfig::default(),
            members: MembersConfig::default(),
        }
    }
}
