//! The history slot (issue 19): the last messages of each room's topic that has history
//! configured, with a per-topic monotonic `offset` and an `epoch` that changes whenever the
//! history was lost. In memory on one node, in Redis streams in a cluster; the contract is in
//! docs/recovery.md.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::address::TopicAddress;
use crate::ids::ActorId;

/// A topic's history settings, as configured on the app (`history: {size, ttl}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HistoryConfig {
    /// How many of the latest messages each room's topic keeps (at least 1).
    pub size: u32,
    /// How long a message is kept, in milliseconds (at least 1).
    pub ttl_ms: u64,
}

/// Where one message sits in its topic's history.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HistoryPos {
    /// Monotonic per (room, topic), from 1.
    pub offset: u64,
    /// Names the history the offset belongs to; a new epoch means the earlier one was lost.
    pub epoch: Arc<str>,
}

/// What an append did: the message's position, and whether it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Its position (assigned even when it is not kept).
    pub pos: HistoryPos,
    /// `false` when the project's history quota (`history_max_bytes_per_project`) left no
    /// room: the message was not kept, and the topic's older entries were dropped with it, so
    /// that no reader takes the gap for a complete history (a recovery across it reports
    /// `recovered:false`).
    pub kept: bool,
}

/// One kept message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Its offset.
    pub offset: u64,
    /// Unix ms the publication carries.
    pub timestamp_ms: u64,
    /// The publishing actor (never replayed to itself, N16).
    pub publisher: ActorId,
    /// Its filter key, if any.
    pub filter: Option<String>,
    /// Its store id, for a topic that is also logged.
    pub msg_id: Option<String>,
    /// The packed payload.
    pub data: Bytes,
}

/// Which part of a history to read (always returned oldest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// The messages after this offset.
    After(u64),
    /// The latest messages.
    Latest,
    /// The messages stamped at or after this unix ms.
    Since(u64),
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRead {
    /// The topic's current epoch (a fresh one when it has no history yet).
    pub epoch: Arc<str>,
    /// The offset of the latest message ever appended in this epoch (0: none).
    pub head: u64,
    /// The oldest offset still kept (0 when nothing is kept).
    pub first: u64,
    /// Up to `limit` entries, oldest first.
    pub entries: Vec<HistoryEntry>,
}

impl HistoryRead {
    /// Whether every message after `after` (of `epoch`) is still kept, so a reader that saw
    /// `after` misses nothing by reading from here.
    pub fn reaches_back_to(&self, after: u64, epoch: &str) -> bool {
        *self.epoch == *epoch
            && after <= self.head
            && (self.head == after || (self.first != 0 && self.first <= after + 1))
    }
}

/// Why a history operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The backend is unreachable or failed.
    #[error("history backend unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Keeps the history of topics that have one. Every implementation guarantees: offsets of one
/// (room, topic) are assigned once per message, strictly increasing by 1 within an epoch; a
/// read returns entries in offset order, none older than the topic's ttl and at most `size` of
/// them kept; the epoch changes whenever kept entries or the offset counter were lost.
#[async_trait]
pub trait History: std::fmt::Debug + Send + Sync + 'static {
    /// Appends one message and returns its position.
    ///
    /// # Errors
    /// [`HistoryError`] when the backend failed; then nothing was appended.
    async fn append(
        &self,
        topic: &TopicAddress,
        config: &HistoryConfig,
        entry: NewHistoryEntry<'_>,
    ) -> Result<Appended, HistoryError>;

    /// Reads up to `limit` entries of `topic` from `from`, stamped not before `now_ms - ttl`.
    ///
    /// # Errors
    /// [`HistoryError`] when the backend failed.
    async fn read(
        &self,
        topic: &TopicAddress,
        config: &HistoryConfig,
        from: ReadFrom,
        limit: usize,
        now_ms: u64,
    ) -> Result<HistoryRead, HistoryError>;
}

/// A message to append (the offset is assigned by the history).
#[derive(Debug, Clone, Copy)]
pub struct NewHistoryEntry<'a> {
    /// Unix ms the publication carries.
    pub timestamp_ms: u64,
    /// The publishing actor.
    pub publisher: &'a ActorId,
    /// Its filter key.
    pub filter: Option<&'a str>,
    /// Its store id (logged topics).
    pub msg_id: Option<&'a str>,
    /// The packed payload.
    pub data: &'a Bytes,
}

/// The key naming a topic's history: `<project>/<app>/<room>/<topic>`.
pub fn history_key(topic: &TopicAddress) -> String {
    format!("{}/{}/{}/{}", topic.room.project.as_str(), topic.room.app.as_str(), topic.room.room, topic.topic)
}
