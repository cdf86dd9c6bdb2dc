//! [`RedisPresence`]: room presence in Redis 7, shared by every node of a cluster.
//!
//! Every mutation is one Lua script (`EVALSHA`, reloaded by `redis::Script` after a `NOSCRIPT`,
//! for instance once Redis has restarted), and `list` is one `HGETALL`, so each operation is
//! atomic with respect to every other, from every node (contract 6). Liveness uses Redis's own
//! clock, key expiry: `refresh_node`, `expired_nodes` and `nodes` use their `now_unix_s` argument
//! for nothing else than the last-seen time `refresh_node` stores, which the contract allows; expiry is exact to the millisecond, and `ttl_s` is in whole seconds.
//!
//! # Key layout
//!
//! `P` is `<key_prefix>:presence:`; `<room>` is `<project>/<app>/<room slug>` (project and app
//! are slugs, so the first two `/` split it; the slug is the rest); actor, node and connection
//! ids are slugs or decimal numbers, so none holds `/` or `:`.
//!
//! | Key | Type | Contents |
//! |---|---|---|
//! | `P room:<room>` | hash | actor → entry: `joined_at` as 8 bytes big-endian, then the announced presence data (packed MessagePack, stored untouched) |
//! | `P conns:<room>:<actor>` | set | the actor's connections in the room, `<node>/<conn>` |
//! | `P node:<node>:held` | set | what the node holds, `<actor>/<conn>/<room>`: what `remove_node` undoes |
//! | `P node:<node>:alive` | string | `<unix ms> <version> bus-up` (or `bus-down`): when the node last refreshed it (its clock), the Skua version it runs and whether its bus link was up, with the TTL of the last `refresh_node` (older nodes wrote `1`, or no bus word: unknown) |
//! | `P node:<node>:seen` | string | unix ms of the last `refresh_node` (the refreshing node's clock), kept a day: what `node_last_seen` reads |
//! | `P nodes` | set | registered node ids: what `expired_nodes` checks |
//!
//! `node:<node>:seen` outlives the registration on purpose (a lapsed node's last refresh is what
//! recovery needs, docs/recovery.md); it expires a day after the last refresh. No key is left empty: an entry goes with its last connection, and sets and hashes vanish with
//! their last member. The `remove_node` and `expired_nodes` scripts derive key names from the
//! node set's members, which Redis Cluster does not allow: use one Redis (a primary with
//! replicas or Sentinel is fine), not a Redis Cluster.
//!
//! Costs: `announce` and `remove` are O(1); `list` is O(entries in the room); `remove_node` is
//! O(connections the node held) inside one script, which blocks Redis for that long;
//! `expired_nodes` is O(registered nodes).
//!
//! # Failures
//!
//! Every failure, from an unreachable Redis to a reply of the wrong shape, is
//! [`PresenceError::Unavailable`], and is not logged here: the caller handles it. A stored entry
//! that does not decode (only something else writing under the prefix makes one) is skipped with
//! a warning.
//!
//! redis-rs's `ConnectionManager` reconnects by itself (with renewed certificates: [`crate::conn`]). While Redis is down an operation fails after
//! at most [`RESPONSE_TIMEOUT`] plus one round of reconnect attempts (bounded by
//! [`RECONNECT_RETRIES`], [`CONNECT_TIMEOUT`] and [`RECONNECT_MAX_DELAY`]; about a second against
//! a refused port). When the connection drops after a script was sent, the script may or may not
//! have run: a failed call changed nothing *or* all of what it would have (scripts are atomic),
//! never part of it.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::conn::RedisConn;
pub use crate::conn::{RedisTls, RedisTlsReload};
use ::redis::aio::ConnectionManagerConfig;
use ::redis::{RedisError, Script};
use async_trait::async_trait;
use bytes::Bytes;
use skua_core::{
    ActorId, AppId, ConnRef, NodeId, Presence, PresenceChange, PresenceEntry, PresenceError, ProjectId, RoomKey,
};

/// How long one connection attempt to Redis may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a command or script may wait for its reply. Longer than redis-rs's 500 ms default:
/// `remove_node` of a node with many connections is one long script.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Reconnect attempts per outage before pending operations fail; the next operation starts a
/// new round, so the manager never gives up for good.
pub const RECONNECT_RETRIES: usize = 3;
/// Upper bound on the (exponential, jittered, from 100 ms) delay between reconnect attempts.
pub const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);

/// Bytes of the `joined_at` header in front of an entry's data.
const JOINED_AT_LEN: usize = 8;

/// Presence in Redis, for a cluster: every node connects to the same Redis with the same
/// `key_prefix` (the cluster's namespace), and sees the same entries.
///
/// Cheap to share behind an `Arc`; the one multiplexed connection inside serves concurrent
/// operations.
pub struct RedisPresence {
    conn: RedisConn,
    keys: Keys,
    // Whether the last operation got a reply; read by readiness. The liveness loop's periodic
    // `refresh_node` keeps it current while no client is active.
    reachable: AtomicBool,
}

impl RedisPresence {
    /// Connects to the Redis at `url` (`redis://[[user]:password@]host:port[/db]`, or
    /// `rediss://…` for TLS with the system's roots) and keeps every key under `key_prefix`
    /// (see the [module docs](self) for the layout), so namespaces isolate clusters and test
    /// runs sharing one Redis.
    ///
    /// # Errors
    /// [`PresenceError::Unavailable`] when `url` does not parse or Redis cannot be reached
    /// within [`CONNECT_TIMEOUT`] and [`RECONNECT_RETRIES`] retries.
    pub async fn connect(url: &str, key_prefix: &str) -> Result<Self, PresenceError> {
        Self::connect_with_tls(url, key_prefix, None).await
    }

    /// [`Self::connect`] to a `rediss://` url with a CA and/or client certificate of its own.
    ///
    /// # Errors
    /// As [`Self::connect`]; also when the certificates are not usable.
    pub async fn connect_with_tls(url: &str, key_prefix: &str, tls: Option<RedisTls>) -> Result<Self, PresenceError> {
        Self::open(url, key_prefix, tls, None).await
    }

    /// [`Self::connect_with_tls`] with the certificates `reload` reads (their files), read again
    /// when the connection fails, so renewed files reach the next connection without a restart
    /// ([`crate::conn`]).
    ///
    /// # Errors
    /// As [`Self::connect_with_tls`]; also when `reload` fails the first time.
    pub async fn connect_with_tls_files(
        url: &str,
        key_prefix: &str,
        reload: RedisTlsReload,
    ) -> Result<Self, PresenceError> {
        let tls = reload().map_err(|e| PresenceError::Unavailable(e.into()))?;
        Self::open(url, key_prefix, Some(tls), Some(reload)).await
    }

    async fn open(
        url: &str,
        key_prefix: &str,
        tls: Option<RedisTls>,
        reload: Option<RedisTlsReload>,
    ) -> Result<Self, PresenceError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(RECONNECT_RETRIES)
            .set_max_delay(RECONNECT_MAX_DELAY);
        let conn = RedisConn::connect(url, config, tls, reload).await.map_err(|e| unavailable("connect", e))?;
        Ok(Self { conn, keys: Keys::new(key_prefix), reachable: AtomicBool::new(true) })
    }

    /// How many times renewed certificate files replaced the Redis connection.
    pub fn tls_reloads(&self) -> u64 {
        self.conn.tls_reloads()
    }

    /// The idempotency slot on this presence's Redis connection, claims under
    /// `<key_prefix>:idem:` (issue 19).
    pub fn idempotency(&self, key_prefix: &str) -> crate::idempotency::RedisIdempotency {
        crate::idempotency::RedisIdempotency::new(self.conn.clone(), key_prefix)
    }

    /// Fixed-window counters on this presence's Redis connection, keys under
    /// `<key_prefix>:limit:` (the wake limits, issue 33).
    pub fn shared_limits(&self, key_prefix: &str) -> crate::limits::RedisSharedLimits {
        crate::limits::RedisSharedLimits::new(self.conn.clone(), key_prefix)
    }

    /// The history slot on this presence's Redis connection, keys under `key_prefix` (issue 19).
    pub fn history(&self, key_prefix: &str) -> crate::history::RedisHistory {
        crate::history::RedisHistory::new(self.conn.clone(), key_prefix)
    }

    /// Runs `script` with `keys` and `args`, cloning the manager (one `Arc`) so `&self` suffices.
    async fn run<T: ::redis::FromRedisValue>(
        &self,
        op: &'static str,
        script: &Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T, PresenceError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.conn.clone();
        let r = invocation.invoke_async(&mut conn).await;
        self.reachable.store(r.is_ok(), Ordering::Relaxed);
        r.map_err(|e| unavailable(op, e))
    }
}

impl fmt::Debug for RedisPresence {
    // Not derived: the manager's `Debug` shows the connection info, password included.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPresence").field("keys", &self.keys.base).finish_non_exhaustive()
    }
}

#[async_trait]
impl Presence for RedisPresence {
    async fn announce(
        &self,
        room: &RoomKey,
        actor: &ActorId,
        conn: &ConnRef,
        data: Bytes,
        now_unix_s: u64,
    ) -> Result<PresenceChange, PresenceError> {
        let room_id = room_id(room);
        let joined: i64 = self
            .run(
                "announce",
                &ANNOUNCE,
                &[
                    self.keys.room(&room_id).as_bytes(),
                    self.keys.conns(&room_id, actor).as_bytes(),
                    self.keys.held(&conn.node).as_bytes(),
                ],
                &[
                    actor.as_str().as_bytes(),
                    conn_member(conn).as_bytes(),
                    held_member(&room_id, actor, conn).as_bytes(),
                    &now_unix_s.to_be_bytes(),
                    &data,
                ],
            )
            .await?;
        Ok(if joined == 1 { PresenceChange::Join } else { PresenceChange::Update })
    }

    async fn remove(&self, room: &RoomKey, actor: &ActorId, conn: &ConnRef) -> Result<bool, PresenceError> {
        let room_id = room_id(room);
        let last: i64 = self
            .run(
                "remove",
                &REMOVE,
                &[
                    self.keys.room(&room_id).as_bytes(),
                    self.keys.conns(&room_id, actor).as_bytes(),
                    self.keys.held(&conn.node).as_bytes(),
                ],
                &[
                    actor.as_str().as_bytes(),
                    conn_member(conn).as_bytes(),
                    held_member(&room_id, actor, conn).as_bytes(),
                ],
            )
            .await?;
        Ok(last == 1)
    }

    async fn list(&self, room: &RoomKey) -> Result<Vec<PresenceEntry>, PresenceError> {
        let mut conn = self.conn.clone();
        let fields: Result<HashMap<Vec<u8>, Vec<u8>>, RedisError> =
            ::redis::cmd("HGETALL").arg(self.keys.room(&room_id(room))).query_async(&mut conn).await;
        self.reachable.store(fields.is_ok(), Ordering::Relaxed);
        let fields = fields.map_err(|e| unavailable("list", e))?;
        let entries = fields.into_iter().filter_map(|(actor, value)| {
            let entry = decode_entry(&actor, value);
            if entry.is_none() {
                tracing::warn!(?room, actor = %String::from_utf8_lossy(&actor), "Skipped a malformed presence entry.");
            }
            entry
        });
        Ok(entries.collect())
    }

    async fn remove_node(&self, node: &NodeId) -> Result<Vec<(RoomKey, ActorId)>, PresenceError> {
        let gone: Vec<Vec<u8>> = self
            .run(
                "remove_node",
                &REMOVE_NODE,
                &[self.keys.nodes().as_bytes(), self.keys.alive(node).as_bytes(), self.keys.held(node).as_bytes()],
                &[node.as_str().as_bytes(), self.keys.base.as_bytes()],
            )
            .await?;
        // The script replies room, actor, room, actor, ...
        let entries = gone.chunks_exact(2).filter_map(|pair| {
            let entry =
                decode_room(&pair[0]).zip(std::str::from_utf8(&pair[1]).ok().and_then(|a| ActorId::parse(a).ok()));
            if entry.is_none() {
                tracing::warn!(%node, "Removed a malformed presence entry; its leave is not sent.");
            }
            entry
        });
        Ok(entries.collect())
    }

    /// Uses Redis's clock: the registration lasts `ttl_s` seconds (at least a millisecond when
    /// `ttl_s` is 0) from when Redis runs the script. `now_unix_s` is only kept as the time of
    /// this refresh (`node_last_seen`).
    async fn refresh_node(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        bus_up: bool,
    ) -> Result<bool, PresenceError> {
        let ttl_ms = ttl_s.saturating_mul(1000).max(1);
        let seen_ms = now_unix_s.saturating_mul(1000);
        let fresh: i64 = self
            .run(
                "refresh_node",
                &REFRESH_NODE,
                &[self.keys.alive(node).as_bytes(), self.keys.nodes().as_bytes(), self.keys.seen(node).as_bytes()],
                &[
                    node.as_str().as_bytes(),
                    ttl_ms.to_string().as_bytes(),
                    alive_value(seen_ms, bus_up).as_bytes(),
                    seen_ms.to_string().as_bytes(),
                ],
            )
            .await?;
        Ok(fresh == 1)
    }

    /// Kept a day after the last refresh, removal or not.
    async fn node_last_seen(&self, node: &NodeId) -> Result<Option<u64>, PresenceError> {
        let mut conn = self.conn.clone();
        let seen: Option<u64> = ::redis::cmd("GET")
            .arg(self.keys.seen(node).as_bytes())
            .query_async(&mut conn)
            .await
            .map_err(|e| unavailable("node_last_seen", e))?;
        Ok(seen)
    }

    /// Liveness is Redis's (the alive key's TTL): `now_unix_s` is ignored.
    async fn nodes(&self, _now_unix_s: u64) -> Result<Vec<skua_core::NodeSeen>, PresenceError> {
        let flat: Vec<String> =
            self.run("nodes", &NODES, &[self.keys.nodes().as_bytes()], &[self.keys.base.as_bytes()]).await?;
        Ok(flat
            .chunks_exact(2)
            .filter_map(|pair| {
                let node = NodeId::parse(&pair[0]).ok()?;
                Some(node_seen(node, &pair[1]))
            })
            .collect())
    }

    /// Uses Redis's clock: `now_unix_s` is ignored.
    async fn expired_nodes(&self, _now_unix_s: u64) -> Result<Vec<NodeId>, PresenceError> {
        let expired: Vec<String> = self
            .run("expired_nodes", &EXPIRED_NODES, &[self.keys.nodes().as_bytes()], &[self.keys.base.as_bytes()])
            .await?;
        let nodes = expired.into_iter().filter_map(|n| {
            let node = NodeId::parse(&n).ok();
            if node.is_none() {
                tracing::warn!(node = %n, "Skipped a malformed node id in the node set.");
            }
            node
        });
        Ok(nodes.collect())
    }

    fn is_available(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }
}

// ----------------------------------------------------------------------------------------------
// Scripts. The key names built inside `REMOVE_NODE` and `EXPIRED_NODES` must match `Keys`.

/// KEYS: room hash, conns set, node's held set. ARGV: actor, conn member, held member,
/// `joined_at` header, data. Replies 1 for a join, 0 for an update.
static ANNOUNCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
if old then
  redis.call('HSET', KEYS[1], ARGV[1], string.sub(old, 1, 8) .. ARGV[5])
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4] .. ARGV[5])
return 1
",
    )
});

/// KEYS: room hash, conns set, node's held set. ARGV: actor, conn member, held member.
/// Replies 1 when the connection was the actor's last (the entry is gone), else 0.
static REMOVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SREM', KEYS[2], ARGV[2]) == 0 then
  return 0
end
redis.call('SREM', KEYS[3], ARGV[3])
if redis.call('SCARD', KEYS[2]) > 0 then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
",
    )
});

/// KEYS: node set, node's alive key, node's held set. ARGV: node, key base `P`. Forgets the node
/// and undoes everything it held, in one script, so of concurrent callers the first gets every
/// disappeared entry and the others find nothing (contract 8). Replies room, actor, ... for each
/// entry that disappeared.
static REMOVE_NODE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
local held = redis.call('SMEMBERS', KEYS[3])
redis.call('DEL', KEYS[3])
local gone = {}
for _, member in ipairs(held) do
  local actor, conn, room = string.match(member, '^([^/]+)/([^/]+)/(.+)$')
  if actor then
    local conns = ARGV[2] .. 'conns:' .. room .. ':' .. actor
    redis.call('SREM', conns, ARGV[1] .. '/' .. conn)
    if redis.call('SCARD', conns) == 0 and redis.call('HDEL', ARGV[2] .. 'room:' .. room, actor) == 1 then
      gone[#gone + 1] = room
      gone[#gone + 1] = actor
    end
  end
end
return gone
",
    )
});

/// The alive key's value: when the node refreshed it (unix ms, its clock), its version, and
/// whether its bus link is up.
fn alive_value(now_ms: u64, bus_up: bool) -> String {
    let bus = if bus_up { BUS_UP } else { BUS_DOWN };
    format!("{now_ms} {} {bus}", env!("CARGO_PKG_VERSION"))
}

/// The alive key's last word while the node's bus link is up, and while it is down.
const BUS_UP: &str = "bus-up";
const BUS_DOWN: &str = "bus-down";

/// A registered node from its alive key's value (`""`: none, the registration lapsed; `1`:
/// written by a node that did not say more).
fn node_seen(node: NodeId, value: &str) -> skua_core::NodeSeen {
    let (ms, version) = value
        .split_once(' ')
        .map_or((None, None), |(ms, v)| (ms.parse().ok(), Some(v.to_owned()).filter(|v| !v.is_empty())));
    // The bus word is last; an older node wrote none (its link state is unknown).
    let (version, bus_up) = match version.as_deref().and_then(|v| v.rsplit_once(' ')) {
        Some((v, BUS_UP)) => (Some(v.to_owned()), Some(true)),
        Some((v, BUS_DOWN)) => (Some(v.to_owned()), Some(false)),
        _ => (version, None),
    };
    skua_core::NodeSeen { node, alive: !value.is_empty(), last_seen_unix_ms: ms, version, bus_up }
}

/// KEYS: node's alive key, node set, node's seen key. ARGV: node, ttl in ms, the alive key's
/// value, unix ms now. Replies 1 when the node had no live registration.
static REFRESH_NODE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local fresh = redis.call('EXISTS', KEYS[1]) == 0
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], ARGV[4], 'PX', 86400000)
if fresh then
  return 1
end
return 0
",
    )
});

/// KEYS: node set. ARGV: key base `P`. Replies the registered nodes without an alive key.
static EXPIRED_NODES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local expired = {}
for _, node in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. 'node:' .. node .. ':alive') == 0 then
    expired[#expired + 1] = node
  end
end
return expired
",
    )
});

/// KEYS: node set. ARGV: key base `P`. Replies node, alive key's value (`""` when it lapsed), for
/// every registered node.
static NODES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
for _, node in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = node
  out[#out + 1] = redis.call('GET', ARGV[1] .. 'node:' .. node .. ':alive') or ''
end
return out
",
    )
});

// ----------------------------------------------------------------------------------------------
// Key names and encodings.

/// Key names under one prefix; see the module docs.
struct Keys {
    /// `<key_prefix>:presence:`
    base: String,
}

impl Keys {
    fn new(key_prefix: &str) -> Self {
        Self { base: format!("{key_prefix}:presence:") }
    }

    fn room(&self, room_id: &str) -> String {
        format!("{}room:{room_id}", self.base)
    }

    fn conns(&self, room_id: &str, actor: &ActorId) -> String {
        format!("{}conns:{room_id}:{actor}", self.base)
    }

    fn held(&self, node: &NodeId) -> String {
        format!("{}node:{node}:held", self.base)
    }

    fn alive(&self, node: &NodeId) -> String {
        format!("{}node:{node}:alive", self.base)
    }

    fn seen(&self, node: &NodeId) -> String {
        format!("{}node:{node}:seen", self.base)
    }

    fn nodes(&self) -> String {
        format!("{}nodes", self.base)
    }
}

/// `<project>/<app>/<room slug>`.
fn room_id(room: &RoomKey) -> String {
    format!("{}/{}/{}", room.project, room.app, room.room)
}

/// The inverse of [`room_id`].
fn decode_room(raw: &[u8]) -> Option<RoomKey> {
    let mut parts = std::str::from_utf8(raw).ok()?.splitn(3, '/');
    let project = ProjectId::parse(parts.next()?).ok()?;
    let app = AppId::parse(parts.next()?).ok()?;
    Some(RoomKey { project, app, room: Arc::from(parts.next()?) })
}

/// A member of a conns set: `<node>/<conn>`.
fn conn_member(conn: &ConnRef) -> String {
    format!("{}/{}", conn.node, conn.conn.0)
}

/// A member of a node's held set: `<actor>/<conn>/<room>`.
fn held_member(room_id: &str, actor: &ActorId, conn: &ConnRef) -> String {
    format!("{actor}/{}/{room_id}", conn.conn.0)
}

/// An entry from its hash field and value (`joined_at` header, then data).
fn decode_entry(actor: &[u8], value: Vec<u8>) -> Option<PresenceEntry> {
    let actor = ActorId::parse(std::str::from_utf8(actor).ok()?).ok()?;
    let header: [u8; JOINED_AT_LEN] = value.get(..JOINED_AT_LEN)?.try_into().ok()?;
    let data = Bytes::from(value).slice(JOINED_AT_LEN..);
    Some(PresenceEntry { actor, data, joined_at: u64::from_be_bytes(header) })
}

/// What failed, with the Redis error as its source.
#[derive(Debug, thiserror::Error)]
#[error("redis presence {op} failed")]
struct OpError {
    op: &'static str,
    #[source]
    source: RedisError,
}

fn unavailable(op: &'static str, source: RedisError) -> PresenceError {
    PresenceError::Unavailable(Box::new(OpError { op, source }))
}

#[cfg(test)]
mod tests {
    use skua_core::ConnId;

    use super::*;

    #[test]
    fn alive_values_read_back() {
        let n = NodeId::parse("n1").unwrap();
        let seen = node_seen(n.clone(), &alive_value(1_700_000_000_123, true));
        assert!(seen.alive);
        assert_eq!(seen.last_seen_unix_ms, Some(1_700_000_000_123));
        assert_eq!(seen.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
        assert_eq!(seen.bus_up, Some(true));
        let down = node_seen(n.clone(), &alive_value(1_700_000_000_123, false));
        assert_eq!((down.version.as_deref(), down.bus_up), (Some(env!("CARGO_PKG_VERSION")), Some(false)));
        let older = node_seen(n.clone(), "1700000000123 0.0.9");
        assert_eq!((older.version.as_deref(), older.bus_up), (Some("0.0.9"), None), "no bus word: unknown");
        let old = node_seen(n.clone(), "1");
        assert_eq!(
            (old.alive, old.last_seen_unix_ms, old.version, old.bus_up),
            (true, None, None, None),
            "an older node's value"
        );
        let gone = node_seen(n, "");
        assert_eq!((gone.alive, gone.last_seen_unix_ms, gone.version), (false, None, None), "lapsed");
    }

    fn room(slug: &str) -> RoomKey {
        RoomKey {
            project: ProjectId::parse("proj").unwrap_or_else(|e| panic!("{e}")),
            app: AppId::parse("app").unwrap_or_else(|e| panic!("{e}")),
            room: Arc::from(slug),
        }
    }

    #[test]
    fn room_ids_round_trip_even_with_slashes_and_colons_in_the_slug() {
        for slug in ["lobby", "a/b", "a:b/c:", "x"] {
            assert_eq!(decode_room(room_id(&room(slug)).as_bytes()), Some(room(slug)));
        }
        assert_eq!(decode_room(b"proj/app"), None, "no slug");
        assert_eq!(decode_room(b"pr oj/app/x"), None, "not a project slug");
    }

    #[test]
    fn key_names_follow_the_documented_layout() {
        let keys = Keys::new("ns");
        let actor = ActorId::parse("alice").unwrap_or_else(|e| panic!("{e}"));
        let node = NodeId::parse("n1").unwrap_or_else(|e| panic!("{e}"));
        let conn = ConnRef { node: node.clone(), conn: ConnId(7) };
        let id = room_id(&room("r"));
        assert_eq!(keys.room(&id), "ns:presence:room:proj/app/r");
        assert_eq!(keys.conns(&id, &actor), "ns:presence:conns:proj/app/r:alice");
        assert_eq!(keys.held(&node), "ns:presence:node:n1:held");
        assert_eq!(keys.alive(&node), "ns:presence:node:n1:alive");
        assert_eq!(keys.nodes(), "ns:presence:nodes");
        assert_eq!(conn_member(&conn), "n1/7");
        assert_eq!(held_member(&id, &actor, &conn), "alice/7/proj/app/r");
    }

    #[test]
    fn entries_decode_the_header_and_keep_the_data_untouched() {
        let mut value = 1_700_000_000_u64.to_be_bytes().to_vec();
        value.extend_from_slice(&[0x81, 0xa1, b'k', 0xc0]);
        let entry = decode_entry(b"alice", value).unwrap_or_else(|| panic!("decodes"));
        assert_eq!(entry.joined_at, 1_700_000_000);
        assert_eq!(&entry.data[..], [0x81, 0xa1, b'k', 0xc0]);
        assert_eq!(decode_entry(b"alice", vec![0; 7]), None, "short header");
        assert!(decode_entry(b"alice", vec![0; 8]).is_some_and(|e| e.data.is_empty()), "empty data");
    }
}
