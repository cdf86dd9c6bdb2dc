//! The persistent-presence part of the store slot (docs/protocol.md N46, N47; docs/agents.md): one
//! durable record per (room, actor, clientId) of a member that announced `persistent: true`,
//! kept across its connections, node restarts and node loss, until `data: null` or its TTL.
//!
//! Only persistent members touch it: an ordinary presence entry lives in the presence slot only.

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::error::StoreError;

/// A persistent member's status (N46), as presence events and lists carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberStatus {
    /// At least one of the actor's connections is in the room.
    Online,
    /// No connection; listed, and wakeable when its wake is enabled.
    Offline,
    /// A wake request was sent; back to offline after its timeout unless it connects.
    Waking,
}

impl MemberStatus {
    /// The wire and stored string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Online => "online",
            Self::Offline => "offline",
            Self::Waking => "waking",
        }
    }

    /// The status a stored string names (unknown strings read as offline).
    pub fn parse(s: &str) -> Self {
        match s {
            "online" => Self::Online,
            "waking" => Self::Waking,
            _ => Self::Offline,
        }
    }
}

/// An announce of a persistent member, as [`MemberStore::upsert_member`] writes it.
#[derive(Debug, Clone, Copy)]
pub struct MemberWrite<'a> {
    /// `<project>/<app>/<room>`.
    pub room: &'a str,
    /// The actor.
    pub actor: &'a str,
    /// The connection's clientId, `""` without one.
    pub client_id: &'a str,
    /// The presence map as clients see it (packed MessagePack, without `wake`).
    pub data: &'a [u8],
    /// The packed `advertisement` value (empty without one): a change bumps the version.
    pub advertisement: &'a [u8],
    /// The `wake` object as JSON (`None`: not wakeable).
    pub wake: Option<&'a str>,
    /// The node of the announcing connection.
    pub node: &'a str,
    /// Unix seconds now (`joined_at` of a new record).
    pub now_s: u64,
    /// Unix seconds the record expires if it is never seen again (now + TTL).
    pub expires_at_s: u64,
    /// Most records the room's project may hold (`presence_max_members_per_project`, issue 33;
    /// 0: no limit): a new record beyond it is not written (contract 4).
    pub project_limit: u64,
}

impl MemberWrite<'_> {
    /// The `<project>/` prefix of the room: every record of the project starts with it.
    pub fn project_prefix(&self) -> &str {
        self.room.find('/').map_or(self.room, |i| &self.room[..=i])
    }
}

/// A stored persistent member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    /// `<project>/<app>/<room>`.
    pub room: String,
    /// The actor.
    pub actor: String,
    /// Its clientId, `""` without one.
    pub client_id: String,
    /// The presence map as clients see it.
    pub data: Bytes,
    /// The `wake` object as JSON, if any.
    pub wake: Option<String>,
    /// Its status.
    pub status: MemberStatus,
    /// Starts at 1; +1 whenever the announced `advertisement` differs from the stored one.
    pub advertisement_version: u64,
    /// Unix seconds of its first announce.
    pub joined_at: u64,
}

/// Persistent presence members, part of every [`Store`](crate::Store). Every implementation
/// guarantees (the store conformance suite's `member_*` cases):
///
/// 1. `upsert_member` creates or replaces the record of (room, actor, clientId), sets it
///    `online`, keeps `joined_at`, and bumps `advertisement_version` iff the advertisement changed.
/// 2. `begin_wake` moves a record from `offline` to `waking` for exactly one caller, however many
///    try at once through any handles (the wake arbiter of N47).
/// 3. Records whose `expires_at` passed while not online are removed by `expire_members` and
///    never listed.
/// 4. `upsert_member` of a record that does not exist yet, while the room's project already
///    holds `project_limit` records (of any status, until they are removed), writes nothing
///    and answers `None`; replacing an existing record is never refused. Announces racing on
///    other connections of the store may pass the limit by as many as run at once.
#[async_trait]
pub trait MemberStore: Send + Sync {
    /// Creates or replaces a member's record and sets it online (contract 1); `None` when the
    /// project is at its limit and the record is new (contract 4).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn upsert_member(&self, write: &MemberWrite<'_>) -> Result<Option<StoredMember>, StoreError>;

    /// Sets every `online` or `waking` record of `actor` in `room` offline, expiring at
    /// `expires_at_s`; returns the records changed.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn members_offline(
        &self,
        room: &str,
        actor: &str,
        expires_at_s: u64,
    ) -> Result<Vec<StoredMember>, StoreError>;

    /// Sets offline every `online` record last announced on a node other than `keep` (a single
    /// node's start: nothing of a previous run is connected); returns the records changed.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn other_nodes_members_offline(&self, keep: &str, expires_at_s: u64)
    -> Result<Vec<StoredMember>, StoreError>;

    /// Removes every record of `actor` in `room` (`data: null`); returns how many.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn delete_members(&self, room: &str, actor: &str) -> Result<u64, StoreError>;

    /// Up to `limit` unexpired records of `room`, by actor then clientId.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn list_members(&self, room: &str, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError>;

    /// Up to `limit` unexpired `offline` records of `room` with a wake object.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn wake_candidates(&self, room: &str, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError>;

    /// Moves the record from `offline` to `waking` until `until_ms`; `true` for the one caller
    /// that did (contract 2).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then nothing changed.
    async fn begin_wake(&self, room: &str, actor: &str, client_id: &str, until_ms: u64) -> Result<bool, StoreError>;

    /// Moves the record from `waking` back to `offline` (its wake failed or timed out); `true`
    /// when it was still waking.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn end_wake(&self, room: &str, actor: &str, client_id: &str) -> Result<bool, StoreError>;

    /// Moves up to `limit` records still `waking` after their `until_ms` back to `offline`
    /// (their waker may be gone); returns them.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn expired_wakes(&self, now_ms: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError>;

    /// Removes up to `limit` records not online whose `expires_at` passed; returns them.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn expire_members(&self, now_s: u64, limit: u32) -> Result<Vec<StoredMember>, StoreError>;
}
