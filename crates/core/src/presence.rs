//! The presence slot: who is in which room.

use async_trait::async_trait;
use bytes::Bytes;

use crate::address::RoomKey;
use crate::envelope::PresenceChange;
use crate::ids::{ActorId, ConnId, NodeId};

/// A connection on a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnRef {
    /// The node.
    pub node: NodeId,
    /// The connection.
    pub conn: ConnId,
}

/// One actor's entry in a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceEntry {
    /// The actor.
    pub actor: ActorId,
    /// Packed presence map of the latest announce.
    pub data: Bytes,
    /// Unix seconds of the actor's first announce, kept across updates (N21).
    pub joined_at: u64,
}

/// A node registration as [`Presence::nodes`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeen {
    /// The node.
    pub node: NodeId,
    /// Whether its registration is live (it refreshed it within its ttl).
    pub alive: bool,
    /// When it last refreshed its registration (its own clock), unix ms; unknown once the
    /// registration lapsed.
    pub last_seen_unix_ms: Option<u64>,
    /// The Skua version it runs, when it said so with its last refresh.
    pub version: Option<String>,
    /// Whether its link to the bus was up at its last refresh; `None` when it did not say (an
    /// older node, or the registration lapsed). A node whose own link is down while a peer's is
    /// up knows the outage is its own and leaves its load balancer (docs/operations.md).
    pub bus_up: Option<bool>,
}

/// Why a presence operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PresenceError {
    /// The backend is unreachable.
    #[error("presence backend unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Stores room presence. Every implementation guarantees:
///
/// 1. One entry per (room, actor), shared by all of the actor's connections (N21).
/// 2. `announce` returns [`PresenceChange::Join`] iff the actor had no entry in the room,
///    else [`PresenceChange::Update`]; the entry's data becomes the announced data and
///    `joined_at` is kept from the first announce.
/// 3. `remove` returns `true` iff it removed the actor's last connection, deleting the entry.
/// 4. `list` returns every entry of the room, in no particular order.
/// 5. `remove_node` removes every connection of a node and returns the (room, actor) entries
///    that disappeared, so a survivor can send their `leave` events.
/// 6. Operations on one (room, actor) are atomic with respect to each other, across nodes.
/// 7. Node liveness: `refresh_node` registers a node as alive for `ttl_s` seconds and returns
///    `true` when the backend held no live registration of it (first call, after the
///    registration lapsed, or after the backend lost its data): the caller then re-announces
///    its local entries. `expired_nodes` lists registered nodes whose registration lapsed.
/// 8. `remove_node` also forgets the node's registration; when several callers remove the same
///    node concurrently, each disappeared entry is returned to exactly one of them (so each
///    `leave` is sent once).
/// 9. `nodes` lists every registered node with whether its registration is live; a live one
///    with when it last refreshed it (the `now_unix_s` it gave), the version it runs and the
///    bus link state it gave.
#[async_trait]
pub trait Presence: Send + Sync + 'static {
    /// Records that `conn` of `actor` is in `room` with `data`.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed; nothing changed.
    async fn announce(
        &self,
        room: &RoomKey,
        actor: &ActorId,
        conn: &ConnRef,
        data: Bytes,
        now_unix_s: u64,
    ) -> Result<PresenceChange, PresenceError>;

    /// Removes `conn` of `actor` from `room`.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn remove(&self, room: &RoomKey, actor: &ActorId, conn: &ConnRef) -> Result<bool, PresenceError>;

    /// Every entry of `room`.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn list(&self, room: &RoomKey) -> Result<Vec<PresenceEntry>, PresenceError>;

    /// Removes every connection of `node`; returns the entries that disappeared.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn remove_node(&self, node: &NodeId) -> Result<Vec<(RoomKey, ActorId)>, PresenceError>;

    /// Marks `node` alive until `now_unix_s + ttl_s`, with whether its bus link is up
    /// (`bus_up`, listed by [`Self::nodes`]); `true` when it had no live registration.
    /// Backends with their own clock (Redis key expiry) may use `ttl_s` alone.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn refresh_node(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        bus_up: bool,
    ) -> Result<bool, PresenceError>;

    /// Registered nodes whose liveness lapsed by `now_unix_s`.
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn expired_nodes(&self, now_unix_s: u64) -> Result<Vec<NodeId>, PresenceError>;

    /// When `node` last refreshed its registration: the `now_unix_s` of that `refresh_node`
    /// (the refreshing node's clock), in unix ms; `None` when the backend does not know (never
    /// registered, or forgotten: a backend may forget it once the node was removed, and forgets
    /// it at the latest a day after the last refresh). Recovery on topics with history uses it
    /// for a node that ended without writing its connections' offsets (docs/recovery.md).
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn node_last_seen(&self, node: &NodeId) -> Result<Option<u64>, PresenceError>;

    /// Every registered node (the admin dashboard's overview), in no particular order
    /// (contract 9).
    ///
    /// # Errors
    /// [`PresenceError`] when the backend failed.
    async fn nodes(&self, now_unix_s: u64) -> Result<Vec<NodeSeen>, PresenceError>;

    /// Whether the backend answered its last operation; `false` fails the node's readiness.
    fn is_available(&self) -> bool {
        true
    }
}
