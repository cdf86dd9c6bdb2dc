//! The store slot: durable session state. This part of it: restore records (N23).

use async_trait::async_trait;
use bytes::Bytes;

use crate::ids::{ActorId, ClientId, ProjectId};

/// Whose restore record: the actor, or (actor, clientId) when a clientId is given (N23).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The actor's project.
    pub project: ProjectId,
    /// The actor.
    pub actor: ActorId,
    /// The client instance, when given.
    pub client_id: Option<ClientId>,
}

/// One recorded topic subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredTopic {
    /// The client's address (`app/room/topic`).
    pub pattern: String,
    /// Requested QoS.
    pub qos: u8,
    /// Load-balanced.
    pub load_balance: bool,
    /// The group in the client's form.
    pub load_balance_group: Option<String>,
    /// The filter list as the client last sent it (packed msgpack), `None` for wildcard.
    pub raw_filters: Option<Bytes>,
}

/// What `reconnect:true` restores.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreRecord {
    /// Topic subscriptions in subscribe order.
    pub topics: Vec<RestoredTopic>,
    /// Lobby slugs as the client used them.
    pub lobbies: Vec<String>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend is unreachable.
    #[error("store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Durable session state. Every implementation guarantees:
///
/// 1. `save_restore` replaces the key's record; a record being saved has no expiry.
/// 2. `release_restore` starts the key's expiry: the record is kept for `ttl_s` seconds
///    after that call, then `load_restore` returns `None` for it.
/// 3. `load_restore` returns the latest saved record that has not expired.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Replaces the restore record of `key`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn save_restore(&self, key: &SessionKey, record: &RestoreRecord) -> Result<(), StoreError>;

    /// The restore record of `key`, if any and not expired.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn load_restore(&self, key: &SessionKey) -> Result<Option<RestoreRecord>, StoreError>;

    /// The last connection of `key` went away: keep its record for `ttl_s` more seconds.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn release_restore(&self, key: &SessionKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError>;
}
