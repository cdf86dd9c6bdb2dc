//! The edge's settings: declared in [`EdgeSettings`] (and [`TriggerSettings`],
//! [`MembersSettings`]), checked into an [`EdgeConfig`] right below the declaration
//! ([`EdgeSettings::config`]). The server lays defaults, the config file, the environment and
//! flags over each other and checks the result with it; `EdgeConfig::default()` is the declared
//! defaults, checked.

mod cidr;
mod members;
mod origin;
mod triggers;

use std::time::Duration;

use skua_core::setting;
use skua_core::settings::SettingError;
use skua_core::settings::check::{duration, each, invalid, nonzero_duration, positive, required};

pub use cidr::Cidr;
pub use cidr::canonical;
pub use members::{MembersConfig, MembersSettings};
pub use origin::OriginPattern;
pub use triggers::{TriggerConfig, TriggerSettings};

/// Limits and behaviour of one edge node. Its settings are declared (with their defaults) in
/// [`EdgeSettings`], [`TriggerSettings`] and [`MembersSettings`] and checked into it by
/// [`EdgeSettings::config`]; `Default` is the declared defaults, checked.
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
    /// Most 1012 closes per second of a drain (0: no limit): a node holding more than
    /// `drain_spread × drain_rate` connections stretches the window to fit, up to
    /// `shutdown_grace` less the close timeout.
    pub drain_rate: u32,
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
    /// The declared defaults of [`EdgeSettings`], [`TriggerSettings`] and [`MembersSettings`],
    /// checked (`tests::the_declared_defaults_pass_their_checks`).
    fn default() -> Self {
        EdgeSettings::defaults()
            .config(&TriggerSettings::defaults(), &MembersSettings::defaults())
            .unwrap_or_else(|e| unreachable!("the declared defaults: {e}"))
    }
}

/// How long a close frame may take to reach a client that does not read (not a setting).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest `idempotency_max_key_length` accepted: keys are echoed in Redis key names and logs.
const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 1024;

skua_core::settings! {
    /// The edge's settings, as flags, `SKUA_*` variables and config-file keys (checked into an
    /// [`EdgeConfig`] by the server, with [`TriggerSettings`] and [`MembersSettings`]).
    pub struct EdgeSettings {
        /// Root of internal topics and key prefixes [default skua].
        ///
        /// Root of internal topics and key prefixes; clusters with different namespaces never meet.
        #[arg(long, env = "SKUA_NAMESPACE")]
        pub namespace: String = "skua",
        /// Close 4000 after this long without any inbound frame [default 60s].
        ///
        /// Close a connection (4000 idle_timeout) after this long without any inbound frame.
        #[arg(long, env = "SKUA_IDLE_TIMEOUT")]
        pub idle_timeout: String = "60s",
        /// Publishes per second per connection, also the burst [default 50].
        ///
        /// Publishes per connection per rate_limit_window; also the burst (N18).
        #[arg(long, env = "SKUA_RATE_LIMIT")]
        pub rate_limit: u32 = 50,
        /// The window the rate limit refills over [default 1s].
        ///
        /// The window the rate limit refills over (also the window of the three limits below).
        #[arg(long, env = "SKUA_RATE_LIMIT_WINDOW")]
        pub rate_limit_window: String = "1s",
        /// `presence` updates per connection per rate_limit_window, also the burst; more get 42910 rate_limit_exceeded [default 10].
        ///
        /// Per connection per rate_limit_window, each also the burst; beyond it the frame is answered
        /// 42910 rate_limit_exceeded and does nothing (docs/security.md):
        /// `presence` updates (each is sent to every member of the room, and stored when persistent),
        #[arg(long, env = "SKUA_PRESENCE_RATE_LIMIT")]
        pub presence_rate_limit: u32 = 10,
        /// `subscribe`, `unsubscribe`, `setFilters`, `lobbySubscribe` and `lobbyUnsubscribe` frames per connection per rate_limit_window, also the burst [default 100].
        ///
        /// `subscribe`, `unsubscribe`, `setFilters`, `lobbySubscribe`, `lobbyUnsubscribe`,
        #[arg(long, env = "SKUA_SUBSCRIBE_RATE_LIMIT")]
        pub subscribe_rate_limit: u32 = 100,
        /// `getPresence`, `getLobbyPresence` and `history` requests per connection per rate_limit_window, also the burst [default 20].
        ///
        /// `getPresence`, `getLobbyPresence`, `history`.
        #[arg(long, env = "SKUA_QUERY_RATE_LIMIT")]
        pub query_rate_limit: u32 = 20,
        /// Largest publish `data` in bytes [default 921600].
        ///
        /// Largest publish `data` (packed MessagePack) in bytes; larger gets 42930 message_too_large.
        #[arg(long, env = "SKUA_MAX_MESSAGE_SIZE")]
        pub max_message_size: usize = skua_protocol::DEFAULT_MAX_PAYLOAD_BYTES,
        /// Outbound queue bound per connection, in frames [default 1024].
        ///
        /// Outbound queue bound per connection, in frames; overflow closes it 4008 slow_consumer.
        #[arg(long, env = "SKUA_OUTBOUND_QUEUE_MESSAGES")]
        pub outbound_queue_messages: usize = 1024,
        /// Outbound queue bound per connection, in bytes [default 4194304].
        ///
        /// Outbound queue bound per connection, in bytes; overflow closes it 4008 slow_consumer.
        #[arg(long, env = "SKUA_OUTBOUND_QUEUE_BYTES")]
        pub outbound_queue_bytes: usize = 4_194_304,
        /// Node-wide bound on all outbound queues' bytes; past it the largest are closed 4008 first; 0: none [default 1073741824].
        ///
        /// Node-wide bound on the bytes waiting in all connections' outbound queues (1 GiB). Past it the
        /// largest queues are closed 4008 slow_consumer first, so many slow consumers together cannot
        /// fill the pod's memory limit (an OOM kill drops every client without a 1012). Size it with the
        /// memory limit (docs/operations.md, "Capacity"); 0: no budget.
        #[arg(long, env = "SKUA_OUTBOUND_BUDGET_BYTES")]
        pub outbound_budget_bytes: usize = 1_073_741_824,
        /// Most WebSocket connections on this node [default 100000].
        ///
        /// Most WebSocket connections this node holds; more are refused with HTTP 503.
        #[arg(long, env = "SKUA_MAX_CONNECTIONS")]
        pub max_connections: usize = 100_000,
        /// Open files kept free of client sockets; upgrades get 503 beyond the open-file limit less this [default 256].
        ///
        /// Open files kept free of client sockets for the store, bus, presence, webhooks, gRPC, the
        /// /metrics listener and sockets not yet upgraded beyond max_connections. Upgrades get HTTP 503
        /// (fd_limit, Retry-After) once the connection slots held reach the open-file soft limit (raised
        /// to the hard limit at start) less this, and /readyz answers 503. Unlimited or unknown limits
        /// disable the check (docs/operations.md, "Open-file limit").
        #[arg(long, env = "SKUA_FD_RESERVE")]
        pub fd_reserve: usize = 256,
        /// Most topic plus lobby subscriptions per connection [default 1000].
        ///
        /// Most topic plus lobby subscriptions per connection; more get too_many_subscriptions.
        #[arg(long, env = "SKUA_MAX_SUBSCRIPTIONS_PER_CONNECTION")]
        pub max_subscriptions_per_connection: usize = 1000,
        /// Most topics a connection keeps resolved for its publishes; 0: none [default 8].
        ///
        /// Most topics one connection keeps resolved for its publishes (address and access checked once,
        /// then kept until the registry or the actor changes or a grant of the room expires); a publish
        /// to a topic not kept is resolved again. 0: nothing is kept.
        #[arg(long, env = "SKUA_PUBLISH_TOPIC_CACHE")]
        pub publish_topic_cache: usize = 8,
        /// Most publishes one connection has in flight while earlier ones commit [default 4096].
        ///
        /// Most publishes one connection has in flight: it keeps reading and submitting publishes while
        /// earlier logged ones commit, and gets their `published` receipts in order once each committed.
        /// When full (or when `publish_pipeline_bytes` of data are in flight) the connection is not read
        /// until one finished (backpressure, nothing dropped). 1: one publish at a time. Keep it well
        /// above the store's group commit (1024 appends), so that one batch commits while the next fills.
        #[arg(long, env = "SKUA_PUBLISH_PIPELINE")]
        pub publish_pipeline: usize = 4096,
        /// Most bytes of publish data one connection has in flight [default 4194304].
        #[arg(long, env = "SKUA_PUBLISH_PIPELINE_BYTES")]
        pub publish_pipeline_bytes: usize = 4_194_304,
        /// Most retained messages kept per topic [default 1024].
        ///
        /// Most retained messages (one per filter key) this node keeps per topic.
        #[arg(long, env = "SKUA_MAX_RETAINED_PER_TOPIC")]
        pub max_retained_per_topic: usize = 1024,
        /// Most bytes of retained messages kept per topic [default 4194304].
        ///
        /// Most bytes of retained messages (their data) kept per topic, and by this node over all
        /// topics. A retained publish that would go beyond either is refused with the error
        /// `retained_limit_exceeded` (nothing is published); one arriving from another node is
        /// delivered live but not kept. Counted in /metrics (skua_retained_bytes, skua_retained_refused_total).
        #[arg(long, env = "SKUA_MAX_RETAINED_BYTES_PER_TOPIC")]
        pub max_retained_bytes_per_topic: usize = 4_194_304,
        /// Most bytes of retained messages kept by this node [default 268435456].
        #[arg(long, env = "SKUA_MAX_RETAINED_BYTES")]
        pub max_retained_bytes: usize = 268_435_456,
        /// Most bytes of retained messages one project may keep on this node [default 67108864].
        ///
        /// Most bytes of retained messages one project may keep on this node (its share of
        /// max_retained_bytes, so one tenant cannot take the whole pool): beyond it a retained publish
        /// is refused the same way (skua_retained_refused_total{cap="project_bytes"}). Deleting a room,
        /// an app or a project gives back the bytes of its retained messages.
        #[arg(long, env = "SKUA_MAX_RETAINED_BYTES_PER_PROJECT")]
        pub max_retained_bytes_per_project: usize = 67_108_864,
        /// Topic history: largest `size` a topic may use; larger saturate [default 10000].
        ///
        /// Topic history (topics configured with `history: {size, ttl}`, docs/recovery.md). A topic's
        /// `size` saturates at history_max_size. In memory (single node) at most history_max_topics
        /// (room, topic) histories are kept (the least recently used goes, and its epoch with it), each
        /// at most history_max_topic_bytes of payload. One recovery on reconnect replays at most
        /// history_max_replay messages (then `recovery` with `recovered: false`); one `history` reply
        /// carries at most history_max_page messages (a larger `limit` saturates).
        #[arg(long, env = "SKUA_HISTORY_MAX_SIZE")]
        pub history_max_size: u32 = 10_000,
        /// Topic history: most (room, topic) histories kept in memory [default 10000].
        #[arg(long, env = "SKUA_HISTORY_MAX_TOPICS")]
        pub history_max_topics: usize = 10_000,
        /// Topic history: most payload bytes per in-memory history [default 16777216].
        #[arg(long, env = "SKUA_HISTORY_MAX_TOPIC_BYTES")]
        pub history_max_topic_bytes: usize = 16_777_216,
        /// Topic history: most payload bytes one project's histories keep (per node in memory, per cluster in Redis); beyond it messages are delivered but not kept [default 67108864].
        ///
        /// Payload bytes one project's histories keep together: per node in memory, per cluster in
        /// Redis (so one tenant cannot fill the node's memory or the shared Redis). A message that would
        /// pass it is delivered, with its offset, but not kept, and its topic's older entries are dropped
        /// with it (a recovery across it gets `recovered: false`); skua_history_not_kept_total counts
        /// them and a WARN names the project at most every 10 s.
        #[arg(long, env = "SKUA_HISTORY_MAX_BYTES_PER_PROJECT")]
        pub history_max_bytes_per_project: usize = 67_108_864,
        /// Topic history: most messages one recovery replays [default 10000].
        #[arg(long, env = "SKUA_HISTORY_MAX_REPLAY")]
        pub history_max_replay: usize = 10_000,
        /// Topic history: most messages one `history` reply carries [default 100].
        #[arg(long, env = "SKUA_HISTORY_MAX_PAGE")]
        pub history_max_page: usize = 100,
        /// Topic history: after a node died, what history stamped before it was last seen alive
        /// less this is taken as delivered to its clients [default 30s].
        ///
        /// A node that dies (kill -9, crash) writes no final offsets for its connections' history
        /// subscriptions: their records keep the offset of the last subscription change. When such a
        /// client reconnects, what history stamped before the dead node was last seen alive (its last
        /// registration refresh) less this margin is taken as delivered and not replayed; what came
        /// after is replayed (isReplay). The margin covers messages accepted before that refresh but
        /// still on their way (bus, outbound queue, socket buffers) and clock skew between nodes; a
        /// client lagging behind by more than it may miss messages (docs/recovery.md).
        #[arg(long, env = "SKUA_HISTORY_RECOVERY_MARGIN")]
        pub history_recovery_margin: String = "30s",
        /// Topic history: least time between two receipt pings on one connection; a cut
        /// connection replays up to this much again [default 1s].
        ///
        /// A connection proves which history frames it received by answering the server's WebSocket
        /// pings (every client does by itself). At most one such ping per history_receipt_interval per
        /// connection: frames written meanwhile are proven by the next one. A cut connection's reconnect
        /// replays (isReplay) up to about this much that it had already received; shorter costs a ping and
        /// a pong per message on a quiet topic.
        #[arg(long, env = "SKUA_HISTORY_RECEIPT_INTERVAL")]
        pub history_receipt_interval: String = "1s",
        /// Largest presence `data` in bytes [default 65536].
        ///
        /// Largest presence `data` (packed MessagePack) in bytes; larger gets 42930 message_too_large.
        #[arg(long, env = "SKUA_MAX_PRESENCE_SIZE")]
        pub max_presence_size: usize = 65_536,
        /// Failed auths per connection; one more closes it 1008 [default 10].
        ///
        /// Auth abuse (docs/security.md). A connection making more failed `auth`s than this is closed
        /// 1008 (too_many_auth_failures).
        #[arg(long, env = "SKUA_MAX_AUTH_FAILURES")]
        pub max_auth_failures: u32 = 10,
        /// Close connections not authenticated within this long; 0s = off [default 10s; --dev 0s].
        ///
        /// Close connections that have not authenticated within this long (1008 auth_timeout); 0s =
        /// off. `--dev` turns it off unless set, for clients typed by hand.
        #[arg(long, env = "SKUA_AUTH_TIMEOUT")]
        pub auth_timeout: String = "10s",
        /// Failed auths per source address before further attempts are delayed [default 5].
        ///
        /// Per source address: after this many failed auths (in a row, forgotten after a minute without
        /// one), each further failed auth is answered late, 250ms doubling per failure up to
        /// auth_backoff_max. A valid credential is answered at once.
        #[arg(long, env = "SKUA_AUTH_BACKOFF_AFTER")]
        pub auth_backoff_after: u32 = 5,
        /// Longest delay for an auth from a failing source address [default 10s].
        #[arg(long, env = "SKUA_AUTH_BACKOFF_MAX")]
        pub auth_backoff_max: String = "10s",
        /// Accepted `aud` values of client tokens, comma-separated [default none: tokens with aud are refused].
        ///
        /// Audiences a client token's `aud` claim may name (any one of them). Empty: a token that
        /// carries `aud` is refused (access_denied); tokens without `aud` are always accepted.
        #[arg(long, env = "SKUA_JWT_AUDIENCES", value_delimiter = ',')]
        pub jwt_audiences: Vec<String> = Vec::new(),
        /// How long subscriptions stay restorable after a disconnect [default 24h].
        ///
        /// How long a session outlives its connection: its subscriptions stay restorable
        /// (reconnect:true), and a persistent session (agent/orchestrator with a clientId) keeps
        /// collecting its logged topics' messages, for this long after it disconnects.
        #[arg(long, env = "SKUA_RESTORE_TTL")]
        pub restore_ttl: String = "24h",
        /// How long a reconnect waits for a node suspected dead to release its restore record; 0s = never [default 8s].
        ///
        /// A reconnect:true without clientId, while a node not seen alive for over node_refresh + 1s
        /// still holds one of the actor's records (it was killed), waits up to this long for that node's
        /// release before it claims a record and replies to auth (issue 19; below the Python SDK's 10 s
        /// auth timeout). "0s": never wait.
        #[arg(long, env = "SKUA_RESTORE_WAIT")]
        pub restore_wait: String = "8s",
        /// A reconnect also restores the plain subscriptions of the actor's records that ended within this long of the one it claims (tabs that dropped together); 0s = never [default 2s].
        ///
        /// A reconnect:true without clientId claims the actor's record that ended last; two tabs of one
        /// actor that dropped together cannot be told apart, so each such reconnect also gets the plain
        /// (not load-balanced) subscriptions of the actor's other records that ended within this long of
        /// the claimed one (issue 31, docs/protocol.md "Restore records"). "0s": never merge.
        #[arg(long, env = "SKUA_RESTORE_MERGE_WINDOW")]
        pub restore_merge_window: String = "2s",
        /// Logged messages older than this are deleted [default 7d].
        ///
        /// Logged topics (N24): messages older than this are deleted, delivered or not.
        #[arg(long, env = "SKUA_LOG_MAX_AGE")]
        pub log_max_age: String = "7d",
        /// Most logged messages kept per topic, oldest deleted first [default 100000].
        ///
        /// Logged topics: at most this many messages are kept per topic; the oldest are deleted first.
        #[arg(long, env = "SKUA_LOG_MAX_PER_TOPIC")]
        pub log_max_per_topic: usize = 100_000,
        /// How often logged messages past retention are deleted (by one node of a cluster at a time) [default 60s].
        ///
        /// How often logged messages past log_max_age / log_max_per_topic are deleted. On a store the
        /// nodes share (Postgres) one node prunes at a time (an advisory lock) and a node skips its turn
        /// when another pruned less than half of this ago, so the cluster prunes once or twice per
        /// interval whatever its size. Per-topic caps only look at topics that received messages since
        /// the last prune (no scan of the whole table).
        #[arg(long, env = "SKUA_LOG_PRUNE_INTERVAL")]
        pub log_prune_interval: String = "60s",
        /// How often expired and surplus restore records are deleted (by one node of a cluster at a time) [default 60s].
        ///
        /// How often expired restore records, and an actor's ended connection records beyond the 64 it
        /// keeps, are deleted. Never done on a connection's release path; on a store the nodes share
        /// (Postgres) one node prunes at a time (an advisory lock) and a node skips its turn when another
        /// pruned less than half of this ago. Only actors released since the last prune are looked at.
        #[arg(long, env = "SKUA_RESTORE_PRUNE_INTERVAL")]
        pub restore_prune_interval: String = "60s",
        /// Logged messages deleted per statement while pruning; a prune repeats until done [default 5000].
        ///
        /// Logged messages deleted per statement while pruning; a prune repeats statements until
        /// nothing past retention is left, so no single DELETE holds locks on millions of rows.
        #[arg(long, env = "SKUA_LOG_PRUNE_BATCH")]
        pub log_prune_batch: u64 = 5000,
        /// Pending messages read per store page of a replay [default 256].
        ///
        /// Pending messages read from the store per page while replaying a backlog.
        #[arg(long, env = "SKUA_REPLAY_PAGE_SIZE")]
        pub replay_page_size: u32 = 256,
        /// Live logged messages queued per connection for durable delivery [default 1024].
        ///
        /// Live logged messages queued per connection for its durable delivery; beyond it they are read
        /// back from the store (never dropped, never a slow_consumer close).
        #[arg(long, env = "SKUA_DURABLE_QUEUE")]
        pub durable_queue: usize = 1024,
        /// Claim and ack requests of the node's durable tasks waiting for the store writer; beyond it
        /// a task waits for room [default 1024].
        ///
        /// Claim and ack requests of all the node's durable tasks waiting for its store writer, which
        /// stores what waits together in one statement each; beyond it a task waits for room.
        #[arg(long, env = "SKUA_DURABLE_WRITER_QUEUE")]
        pub durable_writer_queue: usize = 1024,
        /// Batches of claims and acks in the store at the same time (each uses up to two store
        /// connections) [default 2].
        ///
        /// Batches of claims and acks in the store at the same time (each up to two store connections).
        #[arg(long, env = "SKUA_DURABLE_WRITERS")]
        pub durable_writers: usize = 2,
        /// How often durable deliveries look for pending messages nobody holds; 0s = off [default 5s].
        ///
        /// How often each connection's durable deliveries look in the store for pending messages nobody
        /// holds (a logged message that missed the bus: a broker restart, a node killed with it in
        /// flight), and deliver them. 0s = only on the usual events (subscribe, restore, a kick).
        #[arg(long, env = "SKUA_DURABLE_SWEEP_INTERVAL")]
        pub durable_sweep_interval: String = "5s",
        /// How long connections get to close on shutdown [default 10s].
        ///
        /// On SIGTERM/SIGINT: how long connections get to close (1012) before the process exits.
        #[arg(long, env = "SKUA_SHUTDOWN_GRACE")]
        pub shutdown_grace: String = "10s",
        /// On shutdown, how long readiness fails and upgrades are refused before sockets close [default 0s].
        ///
        /// On SIGTERM/SIGINT, before that: how long /readyz answers 503 and new WebSocket upgrades are
        /// refused (503) while open connections carry on, so a load balancer (a Kubernetes Service)
        /// stops routing here before the sockets close 1012. 0s closes at once (the Kubernetes base: 3s).
        #[arg(long, env = "SKUA_DRAIN_DELAY")]
        pub drain_delay: String = "0s",
        /// On shutdown, after drain_delay: close the sockets 1012 spread evenly over this window; 0s = all at once [default 0s].
        ///
        /// On SIGTERM/SIGINT, after drain_delay: the sockets close 1012 spread evenly over this window
        /// (lame-duck style) instead of all in the same instant, so their clients do not reconnect to
        /// the other nodes in one burst. 0s closes every socket at once. Counted inside shutdown_grace:
        /// keep drain_spread below it (a spread of at least shutdown_grace is refused).
        #[arg(long, env = "SKUA_DRAIN_SPREAD")]
        pub drain_spread: String = "0s",
        /// On shutdown: most sockets closed 1012 per second, stretching drain_spread to fit; 0 = no limit [default 0].
        ///
        /// On SIGTERM/SIGINT: the most sockets closed 1012 per second (the evacuation rate limit).
        /// A node holding more than drain_spread x drain_rate connections stretches the window to
        /// connections / drain_rate, so its clients reach the other nodes at this rate whatever
        /// its size; the window never passes shutdown_grace less the 2 s close timeout (past that
        /// the closes go faster and the node logs it). 0 = no limit: drain_spread alone.
        #[arg(long, env = "SKUA_DRAIN_RATE")]
        pub drain_rate: u32 = 0,
        /// Capacity of the bus → fan-out delivery queue [default 8192].
        ///
        /// Capacity of the bus -> local fan-out delivery queue, and of each dispatch shard's queue.
        /// When a shard's queue is full the bus queue fills behind it and the bus's own overflow
        /// behaviour applies (the in-process bus makes publishers wait); nothing is dropped.
        #[arg(long, env = "SKUA_BUS_QUEUE")]
        pub bus_queue: usize = 8192,
        /// Dispatch tasks fan-outs are spread over; 0: one per worker thread [default 1].
        ///
        /// Dispatch tasks the node's fan-out is spread over (topics hashed over them; fan-outs above 64
        /// local subscribers split by connection). 0: one per runtime worker thread. Default 1 until a
        /// quiet-machine A/B shows more pay off (docs/benchmarks.md "Issue 21": two cost +6.6 % CPU).
        #[arg(long, env = "SKUA_DISPATCH_SHARDS")]
        pub dispatch_shards: usize = 1,
        /// How long a node's presence registration lives without refresh [default 10s].
        ///
        /// Cluster: how long a node's presence registration lives without a refresh. After it lapses
        /// (the node died), a surviving node removes its presence entries and sends their leaves.
        #[arg(long, env = "SKUA_NODE_TTL")]
        pub node_ttl: String = "10s",
        /// How often a node refreshes its registration and reaps lapsed nodes [default 3s].
        ///
        /// Cluster: how often a node refreshes its registration and looks for lapsed nodes.
        #[arg(long, env = "SKUA_NODE_REFRESH")]
        pub node_refresh: String = "3s",
        /// Close a socket that has not sent a complete HTTP request head (or TLS handshake, PROXY header) in this time [default 10s].
        ///
        /// Front door (docs/operations.md, "Front door"). A socket that has not sent a complete HTTP
        /// request head within this time is closed; the same bound applies to the TLS handshake plus
        /// PROXY header together, and to an idle keep-alive socket between requests. Every socket holds
        /// one of max_connections from accept until it closes or becomes a WebSocket (which keeps it).
        #[arg(long, env = "SKUA_HTTP_HEADER_TIMEOUT")]
        pub http_header_timeout: String = "10s",
        /// A request whose body has not arrived in full this long after its head is answered 408 and its socket closed [default 10s].
        ///
        /// A request whose body has not arrived in full this long after its head (REST, dashboard,
        /// /admin/login ...) is answered 408 and its socket closed, freeing its connection slot.
        #[arg(long, env = "SKUA_HTTP_BODY_TIMEOUT")]
        pub http_body_timeout: String = "10s",
        /// Most sockets per client address (IPv6: per /64), pending or upgraded; 0 = no limit [default 1000].
        ///
        /// Most sockets (pending or WebSocket) per client address (IPv6: per /64); more get HTTP 429.
        /// 0 = no limit. Behind a proxy, set trusted_proxies (or proxy_protocol), or every client
        /// shares the proxy's address and this becomes a limit on the whole proxy.
        #[arg(long, env = "SKUA_MAX_CONNECTIONS_PER_IP")]
        pub max_connections_per_ip: u32 = 1000,
        /// Most new sockets per second per client address, also the burst; 0 = no limit [default 100].
        ///
        /// New sockets per second per client address, also the burst; more get HTTP 429. 0 = no limit.
        #[arg(long, env = "SKUA_MAX_NEW_CONNECTIONS_PER_IP_PER_SECOND")]
        pub max_new_connections_per_ip_per_second: u32 = 100,
        /// Proxies (CIDR ranges, comma-separated) whose X-Forwarded-For / PROXY header name the client [default none].
        ///
        /// Proxies / load balancers, as CIDR ranges ("10.0.0.0/8", "fd00::/8", "192.0.2.7"). Only for
        /// sockets from these is the client address read: from X-Forwarded-For (the rightmost entry
        /// that is not itself a trusted proxy) on WebSocket upgrades, or from the PROXY header.
        #[arg(long, env = "SKUA_TRUSTED_PROXIES", value_delimiter = ',')]
        pub trusted_proxies: Vec<String> = Vec::new(),
        /// Every socket starts with a PROXY protocol v1/v2 header from a trusted proxy [default false].
        ///
        /// true: every socket must come from trusted_proxies and start with a PROXY protocol v1 or v2
        /// header (HAProxy, AWS NLB, ...), read within http_header_timeout; others are closed.
        #[arg(long, env = "SKUA_PROXY_PROTOCOL")]
        pub proxy_protocol: bool = false,
        /// Origins (comma-separated, `https://app.example.com`, `https://*.example.com`) browsers may connect from; empty = any [default empty].
        ///
        /// Origins browsers may open WebSockets from: exact "https://app.example.com",
        /// "http://localhost:3000", or "https://*.example.com" (any subdomain, not the apex). An upgrade
        /// with another Origin gets HTTP 403; one without an Origin header (SDKs, servers, CLIs) always
        /// passes. Empty = any origin.
        #[arg(long, env = "SKUA_ALLOWED_ORIGINS", value_delimiter = ',')]
        pub allowed_origins: Vec<String> = Vec::new(),
        /// Bearer token /metrics requires (`Authorization: Bearer TOKEN`); empty = none [default empty].
        ///
        /// Bearer token /metrics then requires (`Authorization: Bearer TOKEN`, at least 16 characters),
        /// on whichever listener serves it; without it: 401. Prefer SKUA_METRICS_TOKEN to a file.
        #[arg(long, env = "SKUA_METRICS_TOKEN", hide_env_values = true)]
        pub metrics_token: String,
        /// How often every connection is revalidated, besides on registry changes [default 10m].
        ///
        /// How often every connection is revalidated against the registry (deleted or deactivated
        /// actors close 4001, projects over their connection limit lose their newest connections
        /// with 4002, expired grants end subscriptions), besides on every registry change.
        #[arg(long, env = "SKUA_REVALIDATE_INTERVAL")]
        pub revalidate_interval: String = "10m",
        /// A publish repeating an idempotencyKey (per project) within this window is acknowledged as a duplicate and not delivered [default 2m].
        ///
        /// Idempotent publish (issue 19; docs/protocol.md "Idempotent publish"). A publish (the
        /// `publish` frame, POST /v1/publish) carrying an idempotencyKey that repeats one of the same
        /// project within this window is acknowledged as published with duplicate: true and is not
        /// delivered, stored or triggered again. Clusters share the keys through Redis (presence).
        #[arg(long, env = "SKUA_IDEMPOTENCY_WINDOW")]
        pub idempotency_window: String = "2m",
        /// Longest publish idempotencyKey in bytes; longer ones are refused [default 128].
        ///
        /// Longest idempotencyKey in bytes (at most 1024); longer or empty ones are refused
        /// (invalid_idempotency_key, REST 400).
        #[arg(long, env = "SKUA_IDEMPOTENCY_MAX_KEY_LENGTH")]
        pub idempotency_max_key_length: usize = 128,
    }
}

/// The largest payload any frame may carry: the 1 MiB outbound frame cap (N4) less room for
/// the frame's other fields.
fn payload_cap(key: &'static str, v: usize) -> Result<usize, SettingError> {
    let cap = skua_protocol::MAX_PAYLOAD_CEILING_BYTES;
    if v > cap {
        return Err(invalid(
            key,
            format!("at most {cap} bytes (the 1 MiB frame cap less room for the frame's other fields)"),
        ));
    }
    Ok(v)
}

impl EdgeSettings {
    /// These settings, with the trigger and members parts, checked into the edge's
    /// configuration: one line per setting, then the rules between settings. What the server
    /// derives from the backends (`metrics_separate`, the single-node switches of triggers and
    /// members) is left off; the trigger queue and retries are the webhook settings' (the
    /// server sets them).
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn config(&self, triggers: &TriggerSettings, members: &MembersSettings) -> Result<EdgeConfig, SettingError> {
        let s = self;
        let namespace = required(setting!(s, namespace))?;
        if !skua_core::ids::is_slug(&namespace) {
            return Err(invalid("namespace", "1-64 letters, digits, '-' or '_'"));
        }
        let metrics_token = match s.metrics_token.as_deref() {
            None | Some("") => None,
            Some(t) if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) => {
                return Err(invalid("metrics_token", "must be at least 16 printable ASCII characters, no spaces"));
            }
            Some(t) => Some(MetricsToken::new(t.to_owned())),
        };
        let c = EdgeConfig {
            namespace,
            idle_timeout: duration(setting!(s, idle_timeout))?,
            rate_limit: positive(setting!(s, rate_limit))?,
            rate_limit_window: duration(setting!(s, rate_limit_window))?,
            presence_rate_limit: positive(setting!(s, presence_rate_limit))?,
            subscribe_rate_limit: positive(setting!(s, subscribe_rate_limit))?,
            query_rate_limit: positive(setting!(s, query_rate_limit))?,
            max_message_size: payload_cap("max_message_size", positive(setting!(s, max_message_size))?)?,
            max_frame_size: skua_protocol::MAX_INBOUND_FRAME_BYTES,
            outbound_queue_messages: positive(setting!(s, outbound_queue_messages))?,
            outbound_queue_bytes: positive(setting!(s, outbound_queue_bytes))?,
            outbound_budget_bytes: required(setting!(s, outbound_budget_bytes))?,
            max_connections: positive(setting!(s, max_connections))?,
            fd_reserve: required(setting!(s, fd_reserve))?,
            restore_ttl: duration(setting!(s, restore_ttl))?,
            restore_wait: duration(setting!(s, restore_wait))?,
            restore_merge_window: duration(setting!(s, restore_merge_window))?,
            log_max_age: duration(setting!(s, log_max_age))?,
            log_max_per_topic: positive(setting!(s, log_max_per_topic))? as u64,
            log_prune_interval: duration(setting!(s, log_prune_interval))?,
            log_prune_batch: positive(setting!(s, log_prune_batch))?,
            restore_prune_interval: nonzero_duration(setting!(s, restore_prune_interval))?,
            replay_page_size: positive(setting!(s, replay_page_size))?,
            durable_queue: positive(setting!(s, durable_queue))?,
            durable_writer_queue: positive(setting!(s, durable_writer_queue))?,
            durable_writers: positive(setting!(s, durable_writers))?,
            durable_sweep_interval: duration(setting!(s, durable_sweep_interval))?,
            shutdown_grace: duration(setting!(s, shutdown_grace))?,
            idempotency_window: nonzero_duration(setting!(s, idempotency_window))?,
            idempotency_max_key_length: positive(setting!(s, idempotency_max_key_length))?,
            drain_delay: duration(setting!(s, drain_delay))?,
            drain_spread: duration(setting!(s, drain_spread))?,
            drain_rate: required(setting!(s, drain_rate))?,
            close_timeout: CLOSE_TIMEOUT,
            max_retained_per_topic: positive(setting!(s, max_retained_per_topic))?,
            bus_queue: positive(setting!(s, bus_queue))?,
            dispatch_shards: required(setting!(s, dispatch_shards))?,
            publish_topic_cache: required(setting!(s, publish_topic_cache))?,
            publish_pipeline: positive(setting!(s, publish_pipeline))?,
            publish_pipeline_bytes: positive(setting!(s, publish_pipeline_bytes))?,
            max_subscriptions_per_connection: positive(setting!(s, max_subscriptions_per_connection))?,
            node_ttl: duration(setting!(s, node_ttl))?,
            node_refresh: duration(setting!(s, node_refresh))?,
            revalidate_interval: nonzero_duration(setting!(s, revalidate_interval))?,
            max_presence_size: payload_cap("max_presence_size", positive(setting!(s, max_presence_size))?)?,
            max_retained_bytes_per_topic: positive(setting!(s, max_retained_bytes_per_topic))?,
            max_retained_bytes: positive(setting!(s, max_retained_bytes))?,
            max_retained_bytes_per_project: positive(setting!(s, max_retained_bytes_per_project))?,
            history_max_size: positive(setting!(s, history_max_size))?,
            history_max_topics: positive(setting!(s, history_max_topics))?,
            history_max_topic_bytes: positive(setting!(s, history_max_topic_bytes))?,
            history_max_bytes_per_project: positive(setting!(s, history_max_bytes_per_project))?,
            history_max_replay: positive(setting!(s, history_max_replay))?,
            history_max_page: positive(setting!(s, history_max_page))?,
            history_recovery_margin: duration(setting!(s, history_recovery_margin))?,
            history_receipt_interval: duration(setting!(s, history_receipt_interval))?,
            max_auth_failures: positive(setting!(s, max_auth_failures))?,
            auth_timeout: Some(duration(setting!(s, auth_timeout))?).filter(|d| !d.is_zero()),
            auth_backoff_after: required(setting!(s, auth_backoff_after))?,
            auth_backoff_max: duration(setting!(s, auth_backoff_max))?,
            jwt_audiences: s.jwt_audiences.clone().unwrap_or_default().into_iter().filter(|a| !a.is_empty()).collect(),
            http_header_timeout: nonzero_duration(setting!(s, http_header_timeout))?,
            http_body_timeout: nonzero_duration(setting!(s, http_body_timeout))?,
            max_connections_per_ip: required(setting!(s, max_connections_per_ip))?,
            max_new_connections_per_ip_per_second: required(setting!(s, max_new_connections_per_ip_per_second))?,
            trusted_proxies: each(setting!(s, trusted_proxies), Cidr::parse)?,
            proxy_protocol: required(setting!(s, proxy_protocol))?,
            allowed_origins: each(setting!(s, allowed_origins), OriginPattern::parse)?,
            metrics_token,
            metrics_separate: false,
            triggers: triggers.config()?,
            members: members.config()?,
        };
        // The rules between settings.
        if c.proxy_protocol && c.trusted_proxies.is_empty() {
            return Err(invalid(
                "proxy_protocol",
                "needs trusted_proxies: the addresses of the proxies that send the header",
            ));
        }
        if c.node_refresh.is_zero() || c.node_refresh >= c.node_ttl {
            return Err(invalid("node_refresh", "must be above 0 and below node_ttl"));
        }
        if c.idempotency_max_key_length > MAX_IDEMPOTENCY_KEY_LENGTH {
            return Err(invalid("idempotency_max_key_length", format!("at most {MAX_IDEMPOTENCY_KEY_LENGTH}")));
        }
        if !c.drain_spread.is_zero() && c.drain_spread >= c.shutdown_grace {
            return Err(invalid(
                "drain_spread",
                "must be below shutdown_grace (the closes are spread inside it, with time left for the last ones)",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_defaults_pass_their_checks() {
        let c = EdgeSettings::defaults().config(&TriggerSettings::defaults(), &MembersSettings::defaults()).unwrap();
        assert_eq!(c.durable_queue, 1024);
        assert_eq!(c.auth_timeout, Some(Duration::from_secs(10)));
        assert_eq!(c.triggers.batch_window, Duration::from_millis(5));
        assert_eq!(c.members.wake_timeout, Duration::from_secs(30));
    }

    #[test]
    fn a_rule_between_settings_names_the_key_it_refuses() {
        let s = EdgeSettings { node_refresh: Some("10s".into()), ..EdgeSettings::defaults() };
        let e = s.config(&TriggerSettings::defaults(), &MembersSettings::defaults()).unwrap_err();
        assert_eq!((e.key, e.reason.as_str()), ("node_refresh", "must be above 0 and below node_ttl"));
        let t = TriggerSettings { trigger_max_body_bytes: Some(1 << 30), ..TriggerSettings::defaults() };
        let e = EdgeSettings::defaults().config(&t, &MembersSettings::defaults()).unwrap_err();
        assert_eq!(e.key, "trigger_max_body_bytes");
    }
}
