//! The trigger part of the store slot (docs/protocol.md N44, N45; docs/webhooks.md): the outbox of
//! logged topics' triggers, written in the append's transaction ([`NewMessage::trigger`]), and
//! the dead letters of triggers that failed for good.
//!
//! [`NewMessage::trigger`]: crate::NewMessage::trigger

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::error::StoreError;

/// A logged message's trigger as [`MessageLog::append`](crate::MessageLog::append) writes it to
/// the outbox, in the message's transaction: held by `owner` until `lease_until_ms`.
#[derive(Debug, Clone, Copy)]
pub struct OutboxLease<'a> {
    /// The node run that sends it (a node id and a per-run suffix: a restarted node is a new owner).
    pub owner: &'a str,
    /// Unix ms until which no other owner takes it over.
    pub lease_until_ms: u64,
}

/// A trigger taken from the outbox: the stored message it is about, and how often delivery was
/// tried. Its `deliveryId` is the message's `msgId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTrigger {
    /// The message's `msgId` (and the trigger's `deliveryId`).
    pub msg_id: String,
    /// The topic key: `<project>/<app>/<room>/<topic>`.
    pub topic: String,
    /// The publish's filter key.
    pub filter: Option<String>,
    /// The publisher's actor id.
    pub publisher: String,
    /// Publish time, unix milliseconds.
    pub timestamp_ms: u64,
    /// The publish's `data`.
    pub data: Bytes,
    /// Delivery attempts started so far, by any owner ([`TriggerStore::renew_outbox`] counts them).
    pub attempts: u32,
}

/// A webhook delivery that failed for good, as the sender records it.
#[derive(Debug, Clone, Copy)]
pub struct NewDeadLetter<'a> {
    /// The delivery's `deliveryId`, kept across retries; a record with the same id is replaced.
    pub delivery_id: &'a str,
    /// The project it belongs to.
    pub project: &'a str,
    /// What kind of webhook (`trigger`).
    pub kind: &'a str,
    /// The topic key it is about (`<project>/<app>/<room>/<topic>`).
    pub topic: &'a str,
    /// The URL it was posted to.
    pub target: &'a str,
    /// The request body, byte for byte (what a retry posts again).
    pub body: &'a [u8],
    /// Why the last attempt failed.
    pub last_error: &'a str,
    /// Attempts made in all.
    pub attempts: u32,
    /// When it failed for good, unix ms.
    pub failed_at_ms: u64,
}

/// A stored dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Store order (increasing; a replaced record keeps its place).
    pub id: u64,
    /// The delivery's `deliveryId`.
    pub delivery_id: String,
    /// The project.
    pub project: String,
    /// The kind of webhook.
    pub kind: String,
    /// The topic key.
    pub topic: String,
    /// The URL it was posted to.
    pub target: String,
    /// The request body.
    pub body: Bytes,
    /// Why the last attempt failed.
    pub last_error: String,
    /// Attempts made in all.
    pub attempts: u32,
    /// When it failed for good, unix ms.
    pub failed_at_ms: u64,
}

/// How many dead letters a project keeps: after each write the project's oldest records are
/// dropped until both caps hold (`webhook_dead_letters_per_project`,
/// `webhook_dead_letter_bytes_per_project`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterCap {
    /// Records per project.
    pub count: u64,
    /// Bytes of bodies per project (a record whose body alone is larger is dropped too).
    pub bytes: u64,
}

impl DeadLetterCap {
    /// A cap on the number of records only.
    pub fn count(count: u64) -> Self {
        Self { count, bytes: u64::MAX }
    }
}

/// Which dead letters a list or purge applies to.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadLetterFilter<'a> {
    /// Only this project's (`None`: every project's).
    pub project: Option<&'a str>,
    /// Only these deliveries (empty: any).
    pub delivery_ids: &'a [String],
}

/// Outbox and dead letters, part of every [`Store`](crate::Store). Every implementation
/// guarantees (the store conformance suite's `trigger_*` cases):
///
/// 1. A message appended with a [`OutboxLease`] is in the outbox from the moment `append`
///    returns, in the same transaction (both or neither); one appended without is not.
/// 2. `claim_outbox` takes only triggers whose lease ended (`lease_until_ms <= now_ms`), oldest
///    first, and gives each to one caller only, however many claim at once, through any handles.
/// 3. `renew_outbox` extends the lease and counts an attempt only while `owner` holds the trigger.
/// 4. A trigger leaves the outbox by `finish_outbox`, by `dead_letter` of its delivery id, or with
///    its message (retention).
/// 5. `dead_letter` replaces a record of the same delivery id and then keeps at most
///    `cap.count` records and `cap.bytes` bytes of bodies per project, dropping the oldest; it
///    returns how many it dropped.
#[async_trait]
pub trait TriggerStore: Send + Sync {
    /// Takes up to `limit` outbox triggers whose lease has ended at `now_ms`, oldest first, for
    /// `owner` until `lease_until_ms`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then nothing was taken.
    async fn claim_outbox(
        &self,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
        limit: u32,
    ) -> Result<Vec<OutboxTrigger>, StoreError>;

    /// Before an attempt: extends `owner`'s lease on the trigger of `msg_id` to `lease_until_ms`
    /// and counts the attempt. Returns the attempts counted so far, or `None` when `owner` no
    /// longer holds it (another owner took it over, or it left the outbox): then do not send.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn renew_outbox(&self, msg_id: &str, owner: &str, lease_until_ms: u64) -> Result<Option<u32>, StoreError>;

    /// The trigger of `msg_id` was delivered: removes it from the outbox; returns whether it was there.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn finish_outbox(&self, msg_id: &str) -> Result<bool, StoreError>;

    /// Ends the leases of every owner but `keep` (a single node restarting: nobody else sends
    /// them); returns how many.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn expire_outbox_leases(&self, keep: &str) -> Result<u64, StoreError>;

    /// Records a final failure: replaces any record of its delivery id, removes the outbox
    /// trigger of that id if any (one transaction), then drops the project's oldest records
    /// beyond `cap` (records, then body bytes counted from the newest); returns how many were
    /// dropped.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then nothing changed.
    async fn dead_letter(&self, letter: &NewDeadLetter<'_>, cap: DeadLetterCap) -> Result<u64, StoreError>;

    /// [`Self::dead_letter`] of several letters in one transaction (the overflow writer's
    /// batches: one commit for many); returns how many the caps dropped. This default writes
    /// them one by one; the SQL stores override it.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed; then nothing changed (the default: the letters
    /// before the failing one stay written).
    async fn dead_letters(&self, letters: &[NewDeadLetter<'_>], cap: DeadLetterCap) -> Result<u64, StoreError> {
        let mut dropped = 0;
        for l in letters {
            dropped += self.dead_letter(l, cap).await?;
        }
        Ok(dropped)
    }

    /// Up to `limit` dead letters that `filter` selects with `id > after`, in store order.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter<'_>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError>;

    /// Deletes the dead letters `filter` selects; returns how many.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn delete_dead_letters(&self, filter: DeadLetterFilter<'_>) -> Result<u64, StoreError>;
}
