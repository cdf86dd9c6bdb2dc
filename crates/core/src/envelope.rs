//! What travels between nodes on the bus.

use bytes::Bytes;

use crate::address::{RoomKey, TopicAddress};
use crate::consumer::ConsumerId;
use crate::ids::{ActorId, ConnId, NodeId, ProjectId};
use crate::store::SessionKey;

/// Identifies one publication across the cluster: the accepting node's id hash in the high
/// 64 bits and a per-node counter in the low 64. Used to deduplicate retained copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EnvelopeId(pub u128);

/// A message accepted by an edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// Unique id.
    pub id: EnvelopeId,
    /// Where it was published.
    pub topic: TopicAddress,
    /// The normalised filter key, when published with one (N12).
    pub filter: Option<String>,
    /// The publishing actor: it never receives its own message (N16).
    pub publisher: ActorId,
    /// The publishing connection.
    pub publisher_conn: ConnId,
    /// The accepting node.
    pub node: NodeId,
    /// Unix milliseconds when the edge accepted it (N19).
    pub timestamp_ms: u64,
    /// Store id for logged topics (N24).
    pub msg_id: Option<String>,
    /// Keep as the last message of (topic, filter key) for later subscribers (N20).
    pub retain: bool,
    /// 0, 1 or 2 as the client asked. The MQTT hop itself always uses QoS 1: mixing QoS 2
    /// with lower levels reorders messages on Mosquitto (docs/cluster.md).
    pub qos: u8,
    /// The publisher's packed `data`, untouched (N2).
    pub data: Bytes,
    /// Its place in the topic's history, for a topic with history (issue 19): assigned once,
    /// by the accepting node, so every node's subscribers see the same offset.
    pub history: Option<crate::history::HistoryPos>,
}

/// The kind of a presence change (N21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PresenceChange {
    /// The actor's first announce in the room.
    Join,
    /// A later announce (another connection, or new data).
    Update,
    /// The actor's last connection left the room (or a persistent member was removed).
    Leave,
    /// A persistent member is being woken (N47).
    Waking,
}

/// What presence events of a persistent member carry besides its data (N46).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persistence {
    /// Its status after the change.
    pub status: crate::member_store::MemberStatus,
    /// Its advertisement version.
    pub advertisement_version: u64,
}

/// A presence change in one room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceEvent {
    /// The room.
    pub room: RoomKey,
    /// The actor.
    pub actor: ActorId,
    /// What happened.
    pub change: PresenceChange,
    /// Packed presence map (empty for `Leave`).
    pub data: Bytes,
    /// The node that produced the event.
    pub node: NodeId,
    /// Status and advertisement version of a persistent member; `None` for the others.
    pub persistent: Option<Persistence>,
}

/// What one node tells the others about sessions and durable consumers. Travels on the
/// project's control channel ([`crate::BusSubscription::Control`]) and never reaches a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlMessage {
    /// A connection claimed a clientId session (N25): every other connection of it closes
    /// with 4009 `session_taken_over`.
    Takeover {
        /// The claimed session.
        session: SessionKey,
        /// The claiming connection, on the sending node.
        conn: ConnId,
    },
    /// Held messages of a consumer were released: its connected members take them.
    Kick {
        /// The consumer.
        consumer: ConsumerId,
    },
}

impl ControlMessage {
    /// The project whose control channel carries it.
    pub fn project(&self) -> &ProjectId {
        match self {
            Self::Takeover { session, .. } => &session.project,
            Self::Kick { consumer } => consumer.project(),
        }
    }
}

/// A control message between nodes, with its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// Unique id, from the same sequence as publication ids; lets a bus drop copies.
    pub id: EnvelopeId,
    /// The sending node.
    pub node: NodeId,
    /// What it says.
    pub message: ControlMessage,
}

/// Anything the bus carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// A published message.
    Publication(Publication),
    /// A presence change.
    Presence(PresenceEvent),
    /// A node-to-node control message.
    Control(Control),
}
