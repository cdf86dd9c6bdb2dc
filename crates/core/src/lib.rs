//! Skua's domain: identifiers, addresses, the registry model, and the three backend slots.
//!
//! This crate knows nothing of the wire format, of tokio or of any backend. It owns
//! - [`ids`]: identifier newtypes, each checked once by a `parse` constructor;
//! - [`address`]: topic addresses, room keys and load-balancing group keys;
//! - [`registry`]: projects, apps, rooms, grants, lobbies, actors and access checks;
//! - [`registry_store`]: the registry's stored records and the slot that keeps them;
//! - [`envelope`]: what travels between nodes;
//! - [`error`]: an error with its causes on one line ([`error::error_chain`]);
//! - [`consumer`]: typed keys of durable delivery (consumers, session holders);
//! - [`duration`]: the settings' durations (`500ms`, `5s`, `10m`);
//! - [`settings`]: how a crate declares the settings it owns ([`settings!`]);
//! - [`bus`], [`presence`], [`store`]: the slot traits whose contracts every backend honours;
//! - [`idempotency`]: the slot remembering publish idempotency keys (issue 19);
//! - [`limits`]: fixed-window counters shared by a cluster's nodes (the wake limits, issue 33);
//! - [`member_store`]: the store's persistent presence members (N46, N47);
//! - [`node`]: the control plane's interface to the node it runs in ([`node::NodeAdmin`]);
//! - [`trigger_store`]: the store's trigger outbox and webhook dead letters (N44, N45);
//! - [`refusal`]: why a publish was refused, the one typed refusal every door maps;
//! - [`trace`]: trace-context propagation across the bus;
//! - [`webhook`]: webhook endpoints, kinds, bounds and the address rule (N41), and the one
//!   seam every webhook request goes through ([`webhook::Poster`]).

pub mod address;
pub mod bus;
pub mod consumer;
pub mod duration;
pub mod envelope;
pub mod error;
pub mod history;
pub mod idempotency;
pub mod ids;
pub mod limits;
pub mod member_store;
pub mod node;
pub mod presence;
pub mod refusal;
pub mod registry;
pub mod registry_store;
pub mod settings;
pub mod store;
pub mod trace;
pub mod trigger_store;
pub mod webhook;

pub use address::{GroupKey, RoomKey, TopicAddress};
pub use bus::{Bus, BusDelivery, BusError, BusSubscription, DeliverySink, Route};
pub use consumer::{ConsumerId, ConsumerOf};
pub use envelope::{
    Control, ControlMessage, Envelope, EnvelopeId, Persistence, PresenceChange, PresenceEvent, Publication,
};
pub use idempotency::{Idempotency, IdempotencyError};
pub use ids::{ActorId, ActorType, AppId, ClientId, ConnId, IdError, NodeId, ProjectId, RecordId};
pub use member_store::{MemberStatus, MemberStore, MemberWrite, StoredMember};
pub use presence::{ConnRef, NodeSeen, Presence, PresenceEntry, PresenceError};
pub use registry::{Registry, RegistryDelta, RoomScope, ScopeInfo, SharedRegistry};
pub use registry_store::{RegistryData, RegistrySnapshot, RegistryStore};
pub use store::{
    AppendBatches, AppendCommit, Claim, ClaimedRecord, ConnectionRecord, Consumer, ConsumerBacklog, Holder, LiveClaim,
    MAX_BATCH_IDS, MessageLog, NewMessage, Release, RestoreKey, RestoreRecord, RestoredTopic, Retention, SessionKey,
    Store, StoreError, StoredMessage,
};
pub use trigger_store::{
    DeadLetter, DeadLetterCap, DeadLetterFilter, NewDeadLetter, OutboxLease, OutboxTrigger, TriggerStore,
};
