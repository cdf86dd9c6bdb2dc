//! The bus slot: moves publications, presence events and control messages between nodes.

use std::sync::{Arc, Weak};

use async_trait::async_trait;

use crate::address::{GroupKey, RoomKey, TopicAddress};
use crate::envelope::Envelope;
use crate::ids::ProjectId;

/// What a node subscribes to on the bus. Subscriptions are per node, never per client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BusSubscription {
    /// Every publication on a topic: unfiltered ones and those of every filter key.
    Topic(TopicAddress),
    /// Publications on one filter key of a topic.
    TopicKey(TopicAddress, String),
    /// A load-balanced group: each publication on the topic goes to exactly one node that
    /// subscribed the same group.
    Group(GroupKey),
    /// Presence events of a room.
    Presence(RoomKey),
    /// Control envelopes ([`Envelope::Control`]) of a project's nodes.
    Control(ProjectId),
}

/// How a delivery reached this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Through this node's `Topic`, `TopicKey`, `Presence` or `Control` subscriptions.
    Plain,
    /// Through this node's subscription of the group: hand it to one local member.
    Group(GroupKey),
}

/// One envelope arriving at a node.
#[derive(Debug, Clone)]
pub struct BusDelivery {
    /// The envelope, shared by every local recipient.
    pub envelope: Arc<Envelope>,
    /// Which of the node's subscriptions it came through.
    pub route: Route,
    /// A retained publication replayed because this node just subscribed (N20), rather than
    /// a live one.
    pub retained_replay: bool,
    /// The publisher's trace context (`traceparent`), when traces are exported ([`crate::trace`]).
    pub trace_parent: Option<Arc<str>>,
}

/// Lets a node take some deliveries in place, on the publisher's task, instead of through its
/// delivery receiver (see [`Bus::set_sink`]).
pub trait DeliverySink: Send + Sync + 'static {
    /// Handles `delivery` now, returning `None`, or hands it back to go through the receiver.
    /// It must never block or wait: a bus calls it while it holds the channel's order.
    fn try_deliver(&self, delivery: BusDelivery) -> Option<BusDelivery>;
}

/// Why a bus operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// The bus is unreachable or its outbound buffer is full; the caller reports
    /// `broker_unavailable` and must not acknowledge the publish.
    #[error("message bus unavailable")]
    Unavailable,
    /// The bus was shut down.
    #[error("message bus closed")]
    Closed,
    /// Any other backend failure.
    #[error("message bus backend error")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Moves envelopes between nodes. Every implementation guarantees:
///
/// 1. **Delivery.** Once `subscribe` has returned `Ok`, every envelope published afterwards
///    (from any node) that the subscription matches reaches this node's delivery receiver.
/// 2. **One plain copy.** Per envelope, a node receives at most one [`Route::Plain`] delivery,
///    however many of its subscriptions match (a `Topic` and a `TopicKey` overlapping).
/// 3. **Groups.** Per envelope and per group subscribed anywhere, exactly one subscribing node
///    receives a [`Route::Group`] delivery.
/// 4. **Order.** Envelopes from one publishing node on one topic arrive in publish order.
/// 5. **Retain.** The last publication with `retain` per (topic, filter key) is kept and
///    replayed, flagged `retained_replay`, to a node when its subscription that matches it is
///    created; it is also delivered live like any other.
/// 6. **Idempotence.** Subscribing twice is one subscription; unsubscribing an absent one is `Ok`.
/// 7. **Backpressure.** A node's delivery receiver is bounded; when it is full, `publish`
///    waits (in-process) or the implementation documents its policy.
/// 8. **Control.** An [`Envelope::Control`] reaches, as one [`Route::Plain`] delivery each,
///    every node holding the `Control` subscription of its message's project (the sender
///    included), in publish order per sender, and no other subscription: never a `Topic`,
///    `TopicKey`, `Group` or `Presence` subscriber. It is never retained or replayed.
#[async_trait]
pub trait Bus: Send + Sync + 'static {
    /// Publishes an envelope.
    ///
    /// # Errors
    /// [`BusError::Unavailable`] when it could not be accepted; nothing was sent.
    async fn publish(&self, envelope: Arc<Envelope>) -> Result<(), BusError>;

    /// Adds a subscription of this node.
    ///
    /// # Errors
    /// [`BusError`] when the bus could not record it.
    async fn subscribe(&self, sub: &BusSubscription) -> Result<(), BusError>;

    /// Removes a subscription of this node.
    ///
    /// # Errors
    /// [`BusError`] when the bus could not be reached.
    async fn unsubscribe(&self, sub: &BusSubscription) -> Result<(), BusError>;

    /// Whether the bus is connected and accepting publishes right now. While it is `false`,
    /// edges refuse new authentications with `broker_unavailable` and export
    /// `skua_backend_up{backend="bus"} 0`; readiness follows it only while a live peer's link
    /// is up (the outage is then this node's own; a broker outage is every node's:
    /// docs/operations.md, "Health and readiness").
    fn is_available(&self) -> bool {
        true
    }

    /// Offers every delivery to this node to `sink` first, in the bus's delivery order, before
    /// queueing it on the receiver; returns false when the bus cannot (the default), and then
    /// everything goes through the receiver. The bus holds the sink weakly.
    fn set_sink(&self, sink: Weak<dyn DeliverySink>) -> bool {
        let _ = sink;
        false
    }

    /// Drops the retained publications kept for `topics`, whose room, app or project was
    /// deleted, so they are neither held nor replayed (to a room made again with the same
    /// name). The default keeps them: an external broker's retained store is bounded by its
    /// own settings.
    fn forget_retained(&self, topics: &[TopicAddress]) {
        let _ = topics;
    }

    /// Sends what is still buffered (waiting at most `grace`) and disconnects; called once when
    /// the node stops, after its connections drained, so an acknowledged publish is not lost to
    /// a graceful shutdown.
    async fn close(&self, grace: std::time::Duration) {
        let _ = grace;
    }
}
