//! The node interface of the control plane (docs/control-plane.md): what the propagation
//! loop, the gRPC service, the REST API and the admin dashboard need from the node they run
//! in. The engine implements [`NodeAdmin`]; `skua-control` uses it, so neither depends on the
//! other.

use std::sync::Arc;

use crate::refusal::Refused;
use crate::webhook::RecentWebhook;
use crate::{ActorId, ProjectId, Registry};

/// One authenticated connection, as `ListConnections` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// Connection id on its node.
    pub connection_id: String,
    /// Actor.
    pub actor: ActorId,
    /// `clientId`, if given.
    pub client_id: Option<String>,
    /// When it authenticated, unix ms.
    pub connected_at_ms: u64,
    /// Topic subscriptions held.
    pub subscriptions: u32,
    /// How it reached the node (`ws`, `mqtt`, `mqtt-ws`).
    pub protocol: &'static str,
}

/// A server-side publish as a door (gRPC, REST, the dashboard) hands it to the node, which
/// resolves and checks it in its publish pipeline (one resolution, one set of checks).
#[derive(Debug, Clone)]
pub struct ServerPublish {
    /// The project it is published in.
    pub project: ProjectId,
    /// `app/room/topic` as sent.
    pub topic: String,
    /// The actor subscribers see as `from`; `None`: `server`.
    pub from: Option<String>,
    /// Filter key; empty: none.
    pub filter: String,
    /// Packed MessagePack payload (checked to be exactly one value).
    pub data: bytes::Bytes,
    /// Retain.
    pub retain: bool,
    /// A repeat of this key (per project) within the idempotency window is not published again
    /// (issue 19).
    pub idempotency_key: Option<String>,
}

/// A server-side publish the node accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerPublished {
    /// The stored message's `msgId` (logged topics only).
    pub msg_id: Option<String>,
    /// Unix ms the message carries (a duplicate's: the first publish's).
    pub timestamp_ms: u64,
    /// A repeated idempotency key: nothing was published now (issue 19).
    pub duplicate: bool,
}

/// What the control plane needs from the node it runs in; the engine (`skua-engine`)
/// implements it, so the control plane depends on neither the engine nor a door.
#[async_trait::async_trait]
pub trait NodeAdmin: Send + Sync + 'static {
    /// This node's id.
    fn node_id(&self) -> String;
    /// The registry the node serves now.
    fn registry(&self) -> Arc<Registry>;
    /// Replaces the node's registry and applies its effects to open connections.
    fn install_registry(&self, registry: Registry);
    /// Open authenticated connections of `project` (of `actor` only, when given).
    fn connections(&self, project: &ProjectId, actor: Option<&ActorId>) -> Vec<ConnectionInfo>;
    /// Every open authenticated connection, with its project.
    fn all_connections(&self) -> Vec<(ProjectId, ConnectionInfo)>;
    /// Closes this node's connections of `actor` now; returns how many.
    fn disconnect(&self, actor: &ActorId) -> u32;
    /// Publishes through the node's publish pipeline (the WebSocket's: resolution against the
    /// registry it serves, limits, logged topics, observers, wake), as the application backend.
    ///
    /// # Errors
    /// [`Refused`] naming why the pipeline refused it.
    async fn publish(&self, publish: ServerPublish) -> Result<ServerPublished, Refused>;
    /// Takes the publishes counted per project since the last call.
    fn take_usage(&self) -> Vec<(ProjectId, u64)>;
    /// Gives back counts that could not be flushed.
    fn return_usage(&self, counts: Vec<(ProjectId, u64)>);
    /// Records the cluster-wide total of `project` for `period` (`YYYY-MM`).
    fn set_usage(&self, project: &ProjectId, period: &str, total: u64);
    /// Webhook dead letters `filter` selects with `id > after`, at most `limit`, oldest first
    /// (the store's: every node sees the same).
    ///
    /// # Errors
    /// A message when the store failed.
    async fn webhook_failures(
        &self,
        filter: crate::DeadLetterFilter<'_>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<crate::DeadLetter>, String>;
    /// Posts the dead letters `filter` selects (at most `limit`) again from this node, one
    /// attempt each: `(deliveryId, None)` when delivered (and deleted), `(deliveryId, Some(why))`
    /// when it failed again.
    ///
    /// # Errors
    /// A message when the store failed or this node posts no webhooks.
    async fn retry_webhook_failures(
        &self,
        filter: crate::DeadLetterFilter<'_>,
        limit: u32,
    ) -> Result<Vec<(String, Option<String>)>, String>;
    /// Deletes the dead letters `filter` selects; returns how many.
    ///
    /// # Errors
    /// A message when the store failed.
    async fn purge_webhook_failures(&self, filter: crate::DeadLetterFilter<'_>) -> Result<u64, String>;
    /// The node's own counters, for the admin dashboard's overview.
    fn stats(&self) -> NodeStats {
        NodeStats::default()
    }
    /// Who is in `room` now (the presence store's: every node sees the same).
    ///
    /// # Errors
    /// A message when the presence backend failed or the node has none.
    async fn room_presence(&self, room: &crate::RoomKey) -> Result<Vec<crate::PresenceEntry>, String> {
        let _ = room;
        Err("this node cannot list presence".into())
    }
    /// The last webhook deliveries this node made (every kind), newest first.
    fn recent_webhooks(&self) -> Vec<RecentWebhook> {
        Vec::new()
    }
    /// The nodes registered in the presence backend (the cluster's liveness), this one
    /// included.
    ///
    /// # Errors
    /// A message when the presence backend failed or the node has none.
    async fn cluster_nodes(&self) -> Result<Vec<crate::NodeSeen>, String> {
        Err("this node cannot list the cluster's nodes".into())
    }
    /// The durable consumers of `project`'s load-balanced groups (N26) whose id sorts after
    /// `after`, at most `limit`, in id order, each with its backlog (the store's: every node
    /// sees the same).
    ///
    /// # Errors
    /// A message when the store failed or the node keeps no message log.
    async fn durable_groups(
        &self,
        project: &ProjectId,
        after: &str,
        limit: u32,
    ) -> Result<Vec<crate::ConsumerBacklog>, String> {
        let _ = (project, after, limit);
        Err("this node cannot list durable groups".into())
    }
    /// The members of `group` connected to this node: `(actor, clientId)` of each
    /// subscription (other nodes' members are not known here).
    fn local_group_members(&self, group: &crate::GroupKey) -> Vec<(ActorId, Option<String>)> {
        let _ = group;
        Vec::new()
    }
    /// Watches `topic` through the node's own bus subscription (the admin dashboard's live
    /// view): at most `capacity` publications wait in the returned watch (later ones are
    /// dropped for this watcher); dropping it ends the watch.
    ///
    /// # Errors
    /// A message when the bus refused the subscription or the node cannot watch topics.
    async fn watch_topic(&self, topic: &crate::TopicAddress, capacity: usize) -> Result<Box<dyn TopicWatch>, String> {
        let _ = (topic, capacity);
        Err("this node cannot watch topics".into())
    }
}

/// A node's counters as the admin dashboard shows them (totals since the node started).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Open WebSocket connections.
    pub connections: u64,
    /// Publishes the node accepted (from its clients and the server).
    pub messages_in: u64,
    /// Messages the node queued to its subscribers.
    pub messages_out: u64,
    /// Publishes the node refused.
    pub refused: u64,
    /// Bytes of retained messages the node keeps.
    pub retained_bytes: u64,
    /// Backends reachable now, by slot (`bus`, `presence`, `store`).
    pub backends: Vec<(&'static str, bool)>,
    /// Frames waiting in the authenticated connections' outbound queues.
    pub outbound_frames: u64,
    /// Bytes waiting in the authenticated connections' outbound queues.
    pub outbound_bytes: u64,
    /// Bus deliveries waiting for a dispatch shard.
    pub bus_queued: u64,
    /// Triggers waiting for delivery, and in the overflow queue (to become dead letters);
    /// `None` when the node posts no triggers.
    pub triggers_queued: Option<(u64, u64)>,
}

/// The publications of a watched topic ([`NodeAdmin::watch_topic`]), in order; dropping it
/// ends the watch.
#[async_trait::async_trait]
pub trait TopicWatch: Send {
    /// The next publication; `None` once the watch ended (the node stops).
    ///
    /// # Cancel safety
    /// Cancel safe: a publication is taken only when this returns it.
    async fn next(&mut self) -> Option<Arc<crate::Envelope>>;
}
