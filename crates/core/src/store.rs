//! The store slot: durable session state. Restore records (N23) and the message log of logged
//! topics with its consumers (N24–N26); the data model is in docs/durable.md.

use async_trait::async_trait;
use bytes::Bytes;

pub mod error;

pub use error::StoreError;

use crate::ids::{ActorId, ClientId, NodeId, ProjectId, RecordId};

/// A session: the actor, or (actor, clientId) when a clientId is given (N23, N25). With a
/// clientId it also names the session's restore record ([`RestoreKey::Session`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The actor's project.
    pub project: ProjectId,
    /// The actor.
    pub actor: ActorId,
    /// The client instance, when given.
    pub client_id: Option<ClientId>,
}

/// One connection's restore record, for an actor without clientId (N23): each connection keeps
/// its own, so two tabs of one actor never overwrite each other's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectionRecord {
    /// The actor's project.
    pub project: ProjectId,
    /// The actor.
    pub actor: ActorId,
    /// The record.
    pub id: RecordId,
}

/// Which restore record (N23).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RestoreKey {
    /// A session's record. With a clientId, the persistent session's (N25), which its
    /// connections take over in turn; without one, the actor-wide record that releases before
    /// per-connection records kept (still loadable, no longer written by the edge).
    Session(SessionKey),
    /// One connection's record.
    Connection(ConnectionRecord),
}

impl From<SessionKey> for RestoreKey {
    fn from(key: SessionKey) -> Self {
        Self::Session(key)
    }
}

impl From<ConnectionRecord> for RestoreKey {
    fn from(key: ConnectionRecord) -> Self {
        Self::Connection(key)
    }
}

/// What [`Store::claim_restore`] took over: a connection record and its id, which the claiming
/// connection keeps using.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRecord {
    /// The record's id.
    pub id: RecordId,
    /// The record.
    pub record: RestoreRecord,
    /// The actor's other connection records that ended together with this one (contract 4:
    /// asked for with a window), newest release first, at most [`MAX_ENDED_TOGETHER`]. Two tabs
    /// of one actor that drop at the same moment cannot be told apart on reconnect; the edge
    /// gives each the union of their plain subscriptions (docs/protocol.md).
    pub together: Vec<RestoreRecord>,
}

/// At most this many records come back in [`ClaimedRecord::together`].
pub const MAX_ENDED_TOGETHER: usize = 16;

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
    /// For a topic with history: the last `(offset, epoch)` delivered (issue 19).
    pub history: Option<(u64, String)>,
}

/// What `reconnect:true` restores.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreRecord {
    /// Topic subscriptions in subscribe order.
    pub topics: Vec<RestoredTopic>,
    /// Lobby slugs as the client used them.
    pub lobbies: Vec<String>,
    /// Set when the record was released for its node rather than by its connection (the node
    /// lapsed, or restarted under the same id): when that node was last seen alive (unix ms),
    /// if known. Its `history` offsets are then those of the last subscription change, older
    /// than what was delivered; recovery also skips what history stamped before this time minus
    /// the node's `history_recovery_margin` (docs/recovery.md). Not part of the record's byte
    /// form: the stores keep it in a column of its own, and a save or a release clears it.
    pub holder_last_seen_ms: Option<u64>,
    /// Subscriptions of another door as its client made them, `(filter, qos)` (an MQTT
    /// device's topic filters, `app/room/+` included: docs/mqtt.md), restored with the session
    /// so the door knows which filter each of `topics` belongs to. Empty for SDK clients.
    pub door_filters: Vec<(String, u8)>,
}

/// A consumer of a logged topic: who stored messages are kept for until acked. A persistent
/// session's subscription, or a load-balanced group with persistent members (N25, N26).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Stable id, derived from the session or group and the topic (never reused for another).
    pub id: String,
    /// The topic key: `<project>/<app>/<room>/<topic>`.
    pub topic: String,
    /// The actor it is kept for (a group's: the member that opened it last); messages this
    /// actor publishes are not kept for it (N16).
    pub actor: String,
    /// Filter keys it receives; empty means every message of the topic (N13).
    pub filters: Vec<String>,
}

/// A consumer's backlog as the admin dashboard lists it ([`MessageLog::list_consumers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerBacklog {
    /// The consumer's id (its stored form, see [`crate::ConsumerId`]).
    pub id: String,
    /// Messages pending for it: not acked, whether held by a connection or not.
    pub pending: u64,
    /// Of those, how many a connection holds now (delivered, awaiting the ack).
    pub held: u64,
    /// The `timestamp_ms` of its oldest pending message, if any.
    pub oldest_timestamp_ms: Option<u64>,
    /// Unix seconds until which it is kept (refreshed while a member is connected).
    pub expires_at_unix_s: u64,
}

/// A message on a logged topic, as the publishing edge hands it to the store.
#[derive(Debug, Clone, Copy)]
pub struct NewMessage<'a> {
    /// The UUIDv7 clients see as `msgId`.
    pub msg_id: &'a str,
    /// The topic key.
    pub topic: &'a str,
    /// The publish's filter key.
    pub filter: Option<&'a str>,
    /// The publisher's actor id (`from`).
    pub publisher: &'a str,
    /// The publisher's stream whose order the log keeps: the publishing connection's id (0 for
    /// a server's publish). Appends of one publisher and stream commit, and take their `seq`s,
    /// in the order they were queued; different streams may commit side by side.
    pub stream: u64,
    /// Publish time, unix milliseconds (`timestamp`).
    pub timestamp_ms: u64,
    /// Requested QoS.
    pub qos: u8,
    /// The publish's `data`, byte for byte.
    pub data: &'a [u8],
    /// Its topic has a trigger webhook: the trigger goes to the outbox in the same transaction
    /// (N45, [`TriggerStore`](crate::TriggerStore)), held by this lease.
    pub trigger: Option<crate::trigger_store::OutboxLease<'a>>,
}

/// The commit of a queued append ([`MessageLog::append_queued`]): resolves to the message's
/// `seq` once its transaction committed, or to the error that rolled it back.
pub type AppendCommit = std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, StoreError>> + Send + 'static>>;

/// Messages per group commit of a store's appends (its append writers' transactions), as a
/// cumulative histogram: what `/metrics` shows as `skua_store_append_batch_messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendBatches {
    /// (upper bound in messages, transactions with at most that many), ascending; `+Inf` excluded.
    pub buckets: Vec<(u64, u64)>,
    /// Transactions (batches) written, failed ones included.
    pub count: u64,
    /// Messages in them.
    pub sum: u64,
}

/// A stored message handed out by [`Store::claim_page`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Store order.
    pub seq: u64,
    /// `msgId`.
    pub msg_id: String,
    /// Filter key.
    pub filter: Option<String>,
    /// Publisher's actor id.
    pub publisher: String,
    /// Publish time, unix milliseconds.
    pub timestamp_ms: u64,
    /// The publish's `data`.
    pub data: Bytes,
    /// It had been handed to a connection before (and not acked): a redelivery.
    pub redelivered: bool,
}

/// The connection a pending message is handed to.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    /// The session key, as a string.
    pub session: &'a str,
    /// The node holding the connection.
    pub node: &'a str,
    /// The connection on that node.
    pub conn: u64,
}

/// What [`Store::claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The message is now held by the caller; `redelivered` if it had been handed out before.
    Claimed {
        /// Handed out (and not acked) before.
        redelivered: bool,
        /// Its store order (`seq`).
        seq: u64,
    },
    /// Another connection holds it (or the caller already does): do not deliver it.
    Held,
    /// Nothing is pending for this consumer and message (no consumer existed when it was
    /// published, or it was acked or pruned): deliver it untracked.
    Absent,
}

/// One live message to hand to a connection ([`MessageLog::claim_many`]).
#[derive(Debug, Clone, Copy)]
pub struct LiveClaim<'a> {
    /// The consumer it is pending for.
    pub consumer: &'a str,
    /// Its `msgId`.
    pub msg_id: &'a str,
    /// The connection to hand it to.
    pub holder: Holder<'a>,
}

/// Most message ids one statement of [`MessageLog::claim_many`] or [`MessageLog::ack_many`]
/// carries; longer lists take several statements.
pub const MAX_BATCH_IDS: usize = 256;

/// Which held messages [`Store::release`] hands back.
#[derive(Debug, Clone, Copy)]
pub enum Release<'a> {
    /// Those held by one connection (it closed or unsubscribed).
    Conn {
        /// Node.
        node: &'a str,
        /// Connection.
        conn: u64,
    },
    /// Those held for a session by any connection but this one (the session reconnected).
    SessionExcept(Holder<'a>),
    /// Those held by any connection of a node (it died).
    Node(&'a str),
    /// Those of one consumer held by one connection (it unsubscribed).
    ConnConsumer {
        /// Node.
        node: &'a str,
        /// Connection.
        conn: u64,
        /// Consumer id.
        consumer: &'a str,
    },
}

/// How long logged messages are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Messages older than this many seconds are deleted.
    pub max_age_s: u64,
    /// At most this many messages are kept per topic; the oldest go first.
    pub max_per_topic: u64,
    /// A store shared by several nodes prunes at most once per this many seconds for all of
    /// them (half of it, in fact, so that one node's late tick is not skipped): a call sooner
    /// after the last run (by any node) deletes nothing. 0: every call prunes.
    pub min_interval_s: u64,
    /// Rows deleted per statement; a prune repeats statements until nothing is left (at least 1).
    pub batch: u64,
}
/// Most ended (claimable) connection records kept per actor (contract 6). Connection records
/// are one per connection, so without it a high connection churn would keep every ended
/// connection's record for `restore_ttl`; an actor reconnecting needs only its latest few.
pub const MAX_ENDED_RECORDS_PER_ACTOR: usize = 64;

/// Durable session state. Every implementation guarantees:
///
/// 1. `save_restore` replaces the key's record; a record being saved has no expiry and is in
///    use (not claimable), held by the saving node.
/// 2. `release_restore` starts the key's expiry: the record is kept for `ttl_s` seconds
///    after that call, then `load_restore` returns `None` for it. A released connection record
///    is claimable until it expires or is claimed.
/// 3. `load_restore` returns the latest saved record that has not expired.
/// 4. `claim_restore` takes the actor's claimable connection record released last (a release
///    that returned before another began is the earlier one) and makes it in use again, as a
///    save would; it never takes a record in use, a session record, or another actor's. Each
///    release makes a record claimable once: concurrent claims, through any handles, never
///    return the same record. The claiming node holds it. With a window of `w` seconds, the
///    claim also returns (in `together`) the actor's other connection records, in use or
///    claimable but not expired, whose last release happened within `w` seconds of the claimed
///    record's last release (by the `now_unix_s` the releases were given; the claim does not
///    change them, and neither does a save); it never returns a session record, another actor's,
///    or a record that was never released.
/// 5. `release_node_restores` releases every record in use that a node holds, as if each of its
///    connections had closed then; records other nodes hold, and records already released, are
///    left as they are. `release_other_nodes_restores` does the same for every node but one.
///    Records they release load and claim with `holder_last_seen_ms` set to the `last_seen_ms`
///    given (`None`: unknown); `save_restore` and `release_restore` clear it, a claim keeps it.
/// 6. An actor keeps at most [`MAX_ENDED_RECORDS_PER_ACTOR`] ended connection records: the older
///    ones are deleted (by the durable stores in `prune_restores`; by the memory store at once).
/// 7. `prune_restores` deletes the records expired at its `now_unix_s` and the ended connection
///    records beyond contract 6's cap. The durable stores let one caller at a time prune (for
///    Postgres, one node of the cluster) and not again within half of `min_interval_s` of the
///    last prune by any handle on the same database (those calls return 0); the memory store
///    sweeps at every call. `release_restore` never prunes.
#[async_trait]
pub trait Store:
    MessageLog + crate::trigger_store::TriggerStore + crate::member_store::MemberStore + Send + Sync + 'static
{
    /// Replaces the restore record of `key`, held by a connection on `node`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn save_restore(&self, key: &RestoreKey, node: &NodeId, record: &RestoreRecord) -> Result<(), StoreError>;

    /// The restore record of `key`, if any and not expired.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn load_restore(&self, key: &RestoreKey) -> Result<Option<RestoreRecord>, StoreError>;

    /// The connection holding `key`'s record went away: keep the record for `ttl_s` more
    /// seconds (and, for a connection record, let a reconnect claim it).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn release_restore(&self, key: &RestoreKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError>;

    /// Takes over, for a connection on `node`, the connection record of `project`/`actor`
    /// released last and not expired or claimed since (contract 4), or `None` when there is none;
    /// with `together_s`, also the records that ended within that many seconds of it.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then nothing was claimed.
    async fn claim_restore(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        node: &NodeId,
        together_s: Option<u64>,
    ) -> Result<Option<ClaimedRecord>, StoreError>;

    /// The nodes, other than `except`, holding connection records of `project`/`actor` in use:
    /// distinct, at most `limit` of them, in no particular order. A reconnect that found nothing
    /// to claim waits for a dead holder's release (issue 19, `restore_wait`).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn restore_holders(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        except: &NodeId,
        limit: usize,
    ) -> Result<Vec<NodeId>, StoreError>;

    /// `node` is gone (it stopped renewing its liveness): releases the records its connections
    /// held (contract 5), keeping each for `ttl_s` seconds from `now_unix_s`, and notes when the
    /// node was last seen alive (`last_seen_ms`, unix ms, if known); returns how many.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn release_node_restores(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        last_seen_ms: Option<u64>,
    ) -> Result<u64, StoreError>;

    /// Every node but `keep` is gone (a single node starting on a store that only it uses, after
    /// a crash under another node id): releases the records they held (contract 5); returns how
    /// many.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn release_other_nodes_restores(&self, keep: &NodeId, now_unix_s: u64, ttl_s: u64)
    -> Result<u64, StoreError>;

    /// Deletes expired restore records and ended connection records beyond
    /// [`MAX_ENDED_RECORDS_PER_ACTOR`] per actor (contract 7), `batch` rows per statement;
    /// returns how many. Each node calls it every `min_interval_s` (`restore_prune_interval`);
    /// on a shared store one of them prunes per interval and the others get 0.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn prune_restores(&self, now_unix_s: u64, min_interval_s: u64, batch: u64) -> Result<u64, StoreError>;

    /// Whether the backend is reachable, as far as it can tell; `false` fails the node's readiness.
    fn is_available(&self) -> bool {
        true
    }
}

/// The message log of logged topics (N24–N26), part of every [`Store`]: stored messages, the
/// consumers they are kept for, claims, acks and retention. The model is in docs/durable.md; the
/// store conformance suite's `log_*` cases are its contract.
#[async_trait]
pub trait MessageLog: Send + Sync {
    /// Stores a message of a logged topic and makes it pending, unheld, for every live consumer
    /// of its topic whose filters match (N13); returns its store order (`seq`, increasing).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then nothing was stored.
    async fn append(&self, message: &NewMessage<'_>, now_unix_s: u64) -> Result<u64, StoreError>;

    /// [`append`](Self::append) in two halves, for a publisher that keeps going while its
    /// messages commit (pipelining): returns once `message` has its place in the store's append
    /// order (waiting only for room in the store's queue), and the returned [`AppendCommit`]
    /// resolves to its `seq` once it is committed, or to the error that failed it (then nothing
    /// of it was stored). Messages of one publisher queued one after another are committed in
    /// that order, so they get increasing `seq`s. The default appends at once and returns the
    /// result, already resolved.
    ///
    /// # Errors
    /// [`StoreError`] when the message cannot be queued at all (the store is closing).
    async fn append_queued(&self, message: &NewMessage<'_>, now_unix_s: u64) -> Result<AppendCommit, StoreError> {
        let r = self.append(message, now_unix_s).await;
        Ok(Box::pin(std::future::ready(r)))
    }

    /// The sizes of the store's group commits of appends so far, when it batches them
    /// (`None`: each append is its own write).
    fn append_batches(&self) -> Option<AppendBatches> {
        None
    }

    /// Creates or updates a consumer (its filters are replaced) and keeps it for `ttl_s`
    /// seconds from `now_unix_s`. Messages appended afterwards become pending for it.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn open_consumer(&self, consumer: &Consumer, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError>;

    /// Keeps the consumers `ids` for `ttl_s` more seconds; unknown ids are ignored.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn touch_consumers(&self, ids: &[&str], now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError>;

    /// Deletes a consumer and everything pending for it.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn drop_consumer(&self, id: &str) -> Result<(), StoreError>;

    /// Hands one pending message of `consumer` to `holder`, if no connection holds it.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn claim(&self, consumer: &str, msg_id: &str, holder: Holder<'_>) -> Result<Claim, StoreError>;

    /// [`claim`](Self::claim) for several messages at once, of any consumers and for any
    /// holders (the live messages a node's durable tasks found waiting together): one [`Claim`]
    /// per entry of `claims`, in their order. Each message is handed to one holder only,
    /// however many claim at once; a message given twice is claimed once (by the first entry
    /// naming its holder; every other entry gets [`Claim::Held`]). One statement per
    /// [`MAX_BATCH_IDS`] entries when all are claimed, one more when some are not.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then the claims of earlier statements of the
    /// same call may have been made (they are released with their connections' holds).
    async fn claim_many(&self, claims: &[LiveClaim<'_>]) -> Result<Vec<Claim>, StoreError>;

    /// How many messages are pending and unheld for `consumer`, and the highest `seq` among
    /// them (0 when none).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn backlog(&self, consumer: &str) -> Result<(u64, u64), StoreError>;

    /// Hands up to `limit` of the oldest unheld pending messages of `consumer` with `seq` in
    /// `seqs` to `holder` and returns them in `seq` order. Each message is handed to one caller
    /// only, however many claim at once.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn claim_page(
        &self,
        consumer: &str,
        holder: Holder<'_>,
        seqs: std::ops::RangeInclusive<u64>,
        limit: u32,
    ) -> Result<Vec<StoredMessage>, StoreError>;

    /// The consumers whose id starts with `prefix` and sorts after `after` (empty: from the
    /// first), at most `limit`, in id order, each with its backlog. Paged by passing the last id
    /// returned as `after`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn list_consumers(&self, prefix: &str, after: &str, limit: u32) -> Result<Vec<ConsumerBacklog>, StoreError>;

    /// Marks a message delivered for `consumer` (it is no longer pending); returns whether it
    /// was pending.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn ack(&self, consumer: &str, msg_id: &str) -> Result<bool, StoreError>;

    /// [`ack`](Self::ack) for several `(consumer, msg_id)` pairs at once (acks that arrived
    /// together, on any connections): whether each was pending, in their order (a pair given
    /// twice: its second place is `false`). One statement per [`MAX_BATCH_IDS`] pairs.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then acks of earlier statements of the same call
    /// may have been stored.
    async fn ack_many(&self, acks: &[(&str, &str)]) -> Result<Vec<bool>, StoreError>;

    /// Makes the held messages `scope` names unheld again (they stay pending and count as
    /// redeliveries from then on); returns the ids of the consumers that had any.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn release(&self, scope: Release<'_>) -> Result<Vec<String>, StoreError>;

    /// Deletes messages past `retention` and consumers whose time ran out; returns how many
    /// messages were deleted. A store several nodes share prunes for all of them: one at a
    /// time, at most once per `retention.min_interval_s` (the others' calls return 0).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn prune_log(&self, now_unix_s: u64, retention: Retention) -> Result<u64, StoreError>;
}
