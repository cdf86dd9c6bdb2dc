//! [`MemoryPresence`]: room presence in this process's memory.
//!
//! One map from room to actor to entry, behind one `std::sync::Mutex`: every operation is one
//! short critical section with no `.await`, which makes each operation atomic (contract 6) for
//! every handle in the process. "Across nodes" holds only for nodes sharing this process, which
//! is the single-node deployment this backend is for.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use skua_core::{ActorId, ConnRef, NodeId, Presence, PresenceChange, PresenceEntry, PresenceError, RoomKey};

/// In-memory presence. Cheap to create; share one instance (behind an `Arc`) among all users.
#[derive(Default)]
pub struct MemoryPresence {
    /// `std::sync::Mutex`: every section is a few map operations and never awaits.
    rooms: Mutex<HashMap<RoomKey, HashMap<ActorId, Entry>>>,
    /// Node → (unix second its liveness lapses, unix second of its last refresh). Same locking
    /// rule as `rooms`.
    nodes: Mutex<HashMap<NodeId, (u64, u64, bool)>>,
}

/// One actor's entry in one room.
struct Entry {
    data: Bytes,
    joined_at: u64,
    /// Never empty: the entry goes with its last connection.
    conns: HashSet<ConnRef>,
}

impl MemoryPresence {
    /// An empty presence store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RoomKey, HashMap<ActorId, Entry>>> {
        // No code panics while holding the lock, so a poisoned map is still consistent.
        self.rooms.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for MemoryPresence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPresence").field("rooms", &self.lock().len()).finish()
    }
}

#[async_trait]
impl Presence for MemoryPresence {
    /// # Errors
    /// None.
    async fn announce(
        &self,
        room: &RoomKey,
        actor: &ActorId,
        conn: &ConnRef,
        data: Bytes,
        now_unix_s: u64,
    ) -> Result<PresenceChange, PresenceError> {
        let mut rooms = self.lock();
        let actors = match rooms.get_mut(room) {
            Some(actors) => actors,
            None => rooms.entry(room.clone()).or_default(),
        };
        if let Some(entry) = actors.get_mut(actor) {
            entry.data = data;
            if !entry.conns.contains(conn) {
                entry.conns.insert(conn.clone());
            }
            return Ok(PresenceChange::Update);
        }
        actors.insert(actor.clone(), Entry { data, joined_at: now_unix_s, conns: HashSet::from([conn.clone()]) });
        Ok(PresenceChange::Join)
    }

    /// # Errors
    /// None.
    async fn remove(&self, room: &RoomKey, actor: &ActorId, conn: &ConnRef) -> Result<bool, PresenceError> {
        let mut rooms = self.lock();
        let Some(actors) = rooms.get_mut(room) else {
            return Ok(false);
        };
        let Some(entry) = actors.get_mut(actor) else {
            return Ok(false);
        };
        if !entry.conns.remove(conn) || !entry.conns.is_empty() {
            return Ok(false);
        }
        actors.remove(actor);
        if actors.is_empty() {
            rooms.remove(room);
        }
        Ok(true)
    }

    /// # Errors
    /// None.
    async fn list(&self, room: &RoomKey) -> Result<Vec<PresenceEntry>, PresenceError> {
        let rooms = self.lock();
        let entries = rooms.get(room).into_iter().flatten().map(|(actor, entry)| PresenceEntry {
            actor: actor.clone(),
            data: entry.data.clone(),
            joined_at: entry.joined_at,
        });
        Ok(entries.collect())
    }

    /// Scans every entry: node failure is rare, and a per-node index would cost every
    /// announce and remove.
    ///
    /// # Errors
    /// None.
    async fn remove_node(&self, node: &NodeId) -> Result<Vec<(RoomKey, ActorId)>, PresenceError> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner).remove(node);
        let mut rooms = self.lock();
        let mut gone = Vec::new();
        rooms.retain(|room, actors| {
            actors.retain(|actor, entry| {
                entry.conns.retain(|conn| conn.node != *node);
                let keep = !entry.conns.is_empty();
                if !keep {
                    gone.push((room.clone(), actor.clone()));
                }
                keep
            });
            !actors.is_empty()
        });
        Ok(gone)
    }

    /// # Errors
    /// None.
    async fn refresh_node(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        bus_up: bool,
    ) -> Result<bool, PresenceError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let was_live = nodes.get(node).is_some_and(|(until, _, _)| *until > now_unix_s);
        nodes.insert(node.clone(), (now_unix_s.saturating_add(ttl_s), now_unix_s, bus_up));
        Ok(!was_live)
    }

    /// # Errors
    /// None.
    async fn expired_nodes(&self, now_unix_s: u64) -> Result<Vec<NodeId>, PresenceError> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(nodes.iter().filter(|(_, (until, _, _))| *until <= now_unix_s).map(|(n, _)| n.clone()).collect())
    }

    /// Forgotten once the node is removed.
    ///
    /// # Errors
    /// None.
    async fn node_last_seen(&self, node: &NodeId) -> Result<Option<u64>, PresenceError> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(nodes.get(node).map(|(_, seen, _)| seen.saturating_mul(1000)))
    }

    /// The version is this process's: every node sharing a memory backend runs in it.
    ///
    /// # Errors
    /// None.
    async fn nodes(&self, now_unix_s: u64) -> Result<Vec<skua_core::NodeSeen>, PresenceError> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(nodes
            .iter()
            .map(|(n, (until, seen, bus_up))| {
                let alive = *until > now_unix_s;
                skua_core::NodeSeen {
                    node: n.clone(),
                    alive,
                    last_seen_unix_ms: alive.then(|| seen.saturating_mul(1000)),
                    version: alive.then(|| env!("CARGO_PKG_VERSION").to_owned()),
                    bus_up: alive.then_some(*bus_up),
                }
            })
            .collect())
    }
}
