//! The message log of logged topics in SQL, shared by [`SqliteStore`](crate::SqliteStore) and
//! [`PostgresStore`](crate::PostgresStore): the tables of `migrations/*/…_message_log.sql`
//! (described in docs/durable.md).
//!
//! The statements are written once: both backends take `$N` placeholders and `RETURNING`, and
//! the column types map to the same Rust types (`i64`, `bool`, `Vec<u8>`, `String`).
//! [`sql_message_log!`] expands the same method bodies for each pool type, which keeps the two
//! stores from drifting apart. A claim is one `UPDATE … WHERE holder_session IS NULL`:
//! Postgres re-checks that condition on a row a concurrent claim just changed, and SQLite runs
//! one writer at a time, so a pending message is handed to one connection only.

use bytes::Bytes;
use skua_core::{Retention, StoredMessage};

use crate::sql::unix_to_sql;

/// The message's trigger into the outbox (N45), in the append's transaction.
pub(crate) const INSERT_OUTBOX: &str = "INSERT INTO trigger_outbox (seq, msg_id, owner, lease_until) \
     VALUES ($1, $2, $3, $4)";
pub(crate) const UPSERT_CONSUMER: &str = "INSERT INTO log_consumers (id, topic, actor, wildcard, expires_at) \
     VALUES ($1, $2, $5, $3, $4) \
     ON CONFLICT (id) DO UPDATE SET topic = excluded.topic, actor = excluded.actor, wildcard = excluded.wildcard, \
     expires_at = excluded.expires_at";
pub(crate) const DELETE_FILTERS: &str = "DELETE FROM log_consumer_filters WHERE consumer_id = $1";
pub(crate) const INSERT_FILTER: &str = "INSERT INTO log_consumer_filters (consumer_id, filter_key) VALUES ($1, $2) \
     ON CONFLICT DO NOTHING";
pub(crate) const TOUCH_CONSUMER: &str = "UPDATE log_consumers SET expires_at = $2 WHERE id = $1";
pub(crate) const DROP_CONSUMER: &str = "DELETE FROM log_consumers WHERE id = $1";
pub(crate) const CLAIM: &str = "UPDATE log_pending \
     SET holder_session = $3, holder_node = $4, holder_conn = $5, deliveries = deliveries + 1 \
     WHERE consumer_id = $1 AND msg_id = $2 AND holder_session IS NULL RETURNING deliveries, seq";
pub(crate) const IS_PENDING: &str = "SELECT COUNT(*) FROM log_pending WHERE consumer_id = $1 AND msg_id = $2";
pub(crate) const BACKLOG: &str = "SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM log_pending \
     WHERE consumer_id = $1 AND holder_session IS NULL";
/// A page of consumers by id prefix, each with its pending and held counts and its oldest
/// pending message's timestamp (the admin dashboard's durable page). Primary-key order; the
/// counts use `log_pending`'s primary key, the oldest message `log_messages`' (`seq`).
pub(crate) const LIST_CONSUMERS: &str = "SELECT c.id, c.expires_at, \
     (SELECT COUNT(*) FROM log_pending p WHERE p.consumer_id = c.id), \
     (SELECT COUNT(*) FROM log_pending p WHERE p.consumer_id = c.id AND p.holder_session IS NOT NULL), \
     (SELECT m.timestamp_ms FROM log_pending p JOIN log_messages m ON m.seq = p.seq \
      WHERE p.consumer_id = c.id ORDER BY p.seq LIMIT 1) \
     FROM log_consumers c WHERE substr(c.id, 1, length($1)) = $1 AND c.id > $2 ORDER BY c.id LIMIT $3";
pub(crate) const CLAIM_PAGE: &str = "UPDATE log_pending \
     SET holder_session = $2, holder_node = $3, holder_conn = $4, deliveries = deliveries + 1 \
     WHERE consumer_id = $1 AND holder_session IS NULL AND seq IN ( \
         SELECT seq FROM log_pending WHERE consumer_id = $1 AND holder_session IS NULL \
         AND seq >= $5 AND seq <= $6 ORDER BY seq LIMIT $7) \
     RETURNING seq, deliveries";
pub(crate) const ACK: &str = "DELETE FROM log_pending WHERE consumer_id = $1 AND msg_id = $2";
pub(crate) const RELEASE_CONN: &str = "UPDATE log_pending \
     SET holder_session = NULL, holder_node = NULL, holder_conn = NULL \
     WHERE holder_node = $1 AND holder_conn = $2 RETURNING consumer_id";
pub(crate) const RELEASE_SESSION_EXCEPT: &str = "UPDATE log_pending \
     SET holder_session = NULL, holder_node = NULL, holder_conn = NULL \
     WHERE holder_session = $1 AND NOT (holder_node = $2 AND holder_conn = $3) RETURNING consumer_id";
pub(crate) const RELEASE_NODE: &str = "UPDATE log_pending \
     SET holder_session = NULL, holder_node = NULL, holder_conn = NULL \
     WHERE holder_node = $1 RETURNING consumer_id";
pub(crate) const RELEASE_CONN_CONSUMER: &str = "UPDATE log_pending \
     SET holder_session = NULL, holder_node = NULL, holder_conn = NULL \
     WHERE holder_node = $1 AND holder_conn = $2 AND consumer_id = $3 RETURNING consumer_id";
/// One batch of messages past the age (`log_messages_created_at`).
pub(crate) const PRUNE_AGE: &str = "DELETE FROM log_messages WHERE seq IN ( \
     SELECT seq FROM log_messages WHERE created_at < $1 LIMIT $2)";
/// The cluster-wide pruning state: when it last ran, and the last seq its caps looked at.
pub(crate) const PRUNE_STATE: &str = "SELECT pruned_at, seen_seq FROM log_prune_state WHERE id = 1";
pub(crate) const PRUNE_STATE_SET: &str = "UPDATE log_prune_state SET pruned_at = $1, seen_seq = $2 WHERE id = 1";
pub(crate) const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) FROM log_messages";
/// Topics that received messages after `$1` (a primary-key range): only they can have gone over
/// the cap since the last prune, so no scan of the whole table is needed.
pub(crate) const TOPICS_SINCE: &str = "SELECT DISTINCT topic FROM log_messages WHERE seq > $1";
/// The newest seq of a topic beyond its cap (`log_messages_topic_seq`), if it is over it.
pub(crate) const CAP_EDGE: &str = "SELECT seq FROM log_messages WHERE topic = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2";
/// One batch of a topic's messages up to its cap edge.
pub(crate) const PRUNE_CAP: &str = "DELETE FROM log_messages WHERE seq IN ( \
     SELECT seq FROM log_messages WHERE topic = $1 AND seq <= $2 ORDER BY seq LIMIT $3)";
pub(crate) const PRUNE_CONSUMERS: &str = "DELETE FROM log_consumers WHERE expires_at <= $1";

/// Rows a batched statement over `n` entries carries: `n` padded to the next power of two (at
/// least 8), so the statement comes in a few shapes only (the prepared-statement cache stays
/// small); the padding repeats the last entry, which changes nothing.
pub(crate) fn slots(n: usize) -> usize {
    n.max(8).next_power_of_two()
}

/// The `VALUES` rows of a batched statement over `n` entries of `width` parameters each
/// (`$1` first), padded as [`slots`] counts; with `conn_last`, each row's last parameter is
/// cast to `BIGINT` (a holder's connection; Postgres types bare parameters in `VALUES` as text).
pub(crate) fn values_rows(n: usize, width: usize, conn_last: bool) -> String {
    use std::fmt::Write as _;
    let mut rows = String::with_capacity(slots(n) * width * 6);
    for r in 0..slots(n) {
        rows.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..width {
            let p = r * width + c + 1;
            if c > 0 {
                rows.push_str(", ");
            }
            if conn_last && c + 1 == width {
                let _ = write!(rows, "CAST(${p} AS BIGINT)");
            } else {
                let _ = write!(rows, "${p}");
            }
        }
        rows.push(')');
    }
    rows
}

/// `entries` padded as [`slots`] counts, by repeating the last one.
pub(crate) fn padded<T: Copy>(entries: &[T]) -> impl Iterator<Item = T> + '_ {
    let n = if entries.is_empty() { 0 } else { slots(entries.len()) };
    let last = entries.last().copied();
    entries.iter().copied().chain(std::iter::from_fn(move || last)).take(n)
}

/// Claims the unheld ones of up to [`skua_core::MAX_BATCH_IDS`] `(consumer, msg_id, session,
/// node, conn)` rows, each for its holder; returns what it claimed and for whom.
pub(crate) fn claim_many_sql(n: usize) -> String {
    format!(
        "UPDATE log_pending \
         SET holder_session = v.column3, holder_node = v.column4, holder_conn = v.column5, \
         deliveries = deliveries + 1 \
         FROM (VALUES {}) AS v \
         WHERE log_pending.consumer_id = v.column1 AND log_pending.msg_id = v.column2 \
         AND log_pending.holder_session IS NULL \
         RETURNING log_pending.consumer_id, log_pending.msg_id, log_pending.deliveries, log_pending.seq, \
         log_pending.holder_node, log_pending.holder_conn",
        values_rows(n, 5, true)
    )
}

/// Which of up to [`skua_core::MAX_BATCH_IDS`] `(consumer, msg_id)` pairs are pending. The
/// pairs are a `SELECT` from `VALUES`, not a bare `IN (VALUES …)`: SQLite plans the bare form
/// as a scan of the whole table with a list lookup per row (a backlog of 100 000 pending rows
/// was read once per batch), the `SELECT` form as one `log_pending_msg` index search per pair
/// (test `batched_pending_statements_search_the_index`); Postgres plans both as index
/// searches.
pub(crate) fn pending_of_sql(n: usize) -> String {
    format!(
        "SELECT consumer_id, msg_id FROM log_pending \
         WHERE (consumer_id, msg_id) IN (SELECT column1, column2 FROM (VALUES {}) AS v)",
        values_rows(n, 2, false)
    )
}

/// Deletes the pending rows of up to [`skua_core::MAX_BATCH_IDS`] `(consumer, msg_id)` pairs
/// (an index search per pair, as [`pending_of_sql`]).
pub(crate) fn ack_many_sql(n: usize) -> String {
    format!(
        "DELETE FROM log_pending \
         WHERE (consumer_id, msg_id) IN (SELECT column1, column2 FROM (VALUES {}) AS v) \
         RETURNING consumer_id, msg_id",
        values_rows(n, 2, false)
    )
}

/// What a batched claim returned for one message: deliveries, seq, holder node, holder conn.
pub(crate) type ClaimedRow = (i32, i64, String, i64);

/// The outcome of [`skua_core::MessageLog::claim_many`] for `claims`, from what the claims
/// returned (`claimed`: (consumer, msg_id) → row) and which of the others are pending.
pub(crate) fn claim_outcomes(
    claims: &[skua_core::LiveClaim<'_>],
    claimed: &std::collections::HashMap<(String, String), ClaimedRow>,
    pending: &std::collections::HashSet<(String, String)>,
) -> Vec<skua_core::Claim> {
    let mut given = std::collections::HashSet::new();
    claims
        .iter()
        .map(|c| {
            let key = (c.consumer.to_owned(), c.msg_id.to_owned());
            match claimed.get(&key) {
                Some((d, seq, node, conn))
                    if *node == c.holder.node
                        && u64::try_from(*conn).ok() == Some(c.holder.conn)
                        && given.insert(key.clone()) =>
                {
                    skua_core::Claim::Claimed { redelivered: *d > 1, seq: u64::try_from(*seq).unwrap_or(0) }
                }
                Some(_) => skua_core::Claim::Held,
                None if pending.contains(&key) => skua_core::Claim::Held,
                None => skua_core::Claim::Absent,
            }
        })
        .collect()
}

/// Whether each of `acks` was deleted, by the `(consumer, msg_id)` pairs a batched ack returned
/// (a pair given twice: its second place is `false`).
pub(crate) fn ack_outcomes(acks: &[(&str, &str)], deleted: Vec<(String, String)>) -> Vec<bool> {
    let mut deleted: std::collections::HashSet<(String, String)> = deleted.into_iter().collect();
    acks.iter().map(|(c, m)| deleted.remove(&((*c).to_owned(), (*m).to_owned()))).collect()
}

/// One row of `SELECT_MESSAGES`.
pub(crate) type MessageRow = (i64, String, Option<String>, String, i64, Vec<u8>);

/// The messages with these seqs. The list is built from integers only, so it cannot carry SQL.
pub(crate) fn select_messages(seqs: &[i64]) -> String {
    use std::fmt::Write as _;
    let mut list = String::with_capacity(seqs.len() * 8);
    for (i, s) in seqs.iter().enumerate() {
        if i > 0 {
            list.push(',');
        }
        let _ = write!(list, "{s}");
    }
    format!(
        "SELECT seq, msg_id, filter_key, publisher, timestamp_ms, data FROM log_messages WHERE seq IN ({list}) \
         ORDER BY seq"
    )
}

/// Joins claimed `(seq, deliveries)` with the message rows; a message pruned in between is
/// left out (its pending row went with it).
pub(crate) fn stored_messages(claimed: &[(i64, i32)], rows: Vec<MessageRow>) -> Vec<StoredMessage> {
    rows.into_iter()
        .filter_map(|(seq, msg_id, filter, publisher, timestamp_ms, data)| {
            let deliveries = claimed.iter().find(|(s, _)| *s == seq)?.1;
            Some(StoredMessage {
                seq: u64::try_from(seq).unwrap_or(0),
                msg_id,
                filter,
                publisher,
                timestamp_ms: u64::try_from(timestamp_ms).unwrap_or(0),
                data: Bytes::from(data),
                redelivered: deliveries > 1,
            })
        })
        .collect()
}

/// Seconds before which messages are too old to keep.
pub(crate) fn age_cutoff(now_unix_s: u64, retention: Retention) -> i64 {
    unix_to_sql(now_unix_s.saturating_sub(retention.max_age_s))
}

/// Distinct consumer ids, in first-seen order.
pub(crate) fn distinct(ids: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// Runs the batched delete `$query` (a fresh query each round; its last bind is the batch size)
/// on `$conn` until a round deletes fewer than `$batch` rows; the rows deleted in all.
macro_rules! delete_in_batches {
    ($conn:ident, $batch:expr, $err:expr, $query:expr) => {{
        let mut deleted = 0;
        loop {
            let n = $query.execute(&mut *$conn).await.map_err($err)?.rows_affected();
            deleted += n;
            if n < $batch {
                break deleted;
            }
        }
    }};
}

/// Implements [`skua_core::MessageLog`] for a store type with a `pool` field and an `appends`
/// field (its group-commit writer, `crate::append_batch`), for one sqlx backend.
macro_rules! sql_message_log {
    ($store:ty, $backend:expr) => {
        #[async_trait::async_trait]
        impl skua_core::MessageLog for $store {
            async fn append(
                &self,
                message: &skua_core::NewMessage<'_>,
                now_unix_s: u64,
            ) -> Result<u64, skua_core::StoreError> {
                self.appends.append(message, now_unix_s).await
            }

            async fn append_queued(
                &self,
                message: &skua_core::NewMessage<'_>,
                now_unix_s: u64,
            ) -> Result<skua_core::AppendCommit, skua_core::StoreError> {
                self.appends.enqueue(message, now_unix_s).await
            }

            fn append_batches(&self) -> Option<skua_core::AppendBatches> {
                Some(self.appends.batches())
            }

            async fn open_consumer(
                &self,
                consumer: &skua_core::Consumer,
                now_unix_s: u64,
                ttl_s: u64,
            ) -> Result<(), skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                use crate::sql::unix_to_sql;
                let c = consumer;
                let mut tx = self.pool.begin().await.map_err(sql($backend, "open_consumer"))?;
                sqlx::query(UPSERT_CONSUMER)
                    .bind(&c.id)
                    .bind(&c.topic)
                    .bind(c.filters.is_empty())
                    .bind(unix_to_sql(now_unix_s.saturating_add(ttl_s)))
                    .bind(&c.actor)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql($backend, "open_consumer"))?;
                sqlx::query(DELETE_FILTERS)
                    .bind(&c.id)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql($backend, "open_consumer"))?;
                for f in &c.filters {
                    sqlx::query(INSERT_FILTER)
                        .bind(&c.id)
                        .bind(f)
                        .execute(&mut *tx)
                        .await
                        .map_err(sql($backend, "open_consumer"))?;
                }
                tx.commit().await.map_err(sql($backend, "open_consumer"))?;
                Ok(())
            }

            async fn touch_consumers(
                &self,
                ids: &[&str],
                now_unix_s: u64,
                ttl_s: u64,
            ) -> Result<(), skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                use crate::sql::unix_to_sql;
                let at = unix_to_sql(now_unix_s.saturating_add(ttl_s));
                for id in ids {
                    sqlx::query(TOUCH_CONSUMER)
                        .bind(*id)
                        .bind(at)
                        .execute(&self.pool)
                        .await
                        .map_err(sql($backend, "touch_consumers"))?;
                }
                Ok(())
            }

            async fn drop_consumer(&self, id: &str) -> Result<(), skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                sqlx::query(DROP_CONSUMER)
                    .bind(id)
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "drop_consumer"))?;
                Ok(())
            }

            async fn claim(
                &self,
                consumer: &str,
                msg_id: &str,
                holder: skua_core::Holder<'_>,
            ) -> Result<skua_core::Claim, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let h = holder;
                let claimed: Option<(i32, i64)> = sqlx::query_as(CLAIM)
                    .bind(consumer)
                    .bind(msg_id)
                    .bind(h.session)
                    .bind(h.node)
                    .bind(i64::try_from(h.conn).unwrap_or(i64::MAX))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(sql($backend, "claim"))?;
                if let Some((d, seq)) = claimed {
                    let seq = u64::try_from(seq).unwrap_or(0);
                    return Ok(skua_core::Claim::Claimed { redelivered: d > 1, seq });
                }
                let n: i64 = sqlx::query_scalar(IS_PENDING)
                    .bind(consumer)
                    .bind(msg_id)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(sql($backend, "claim"))?;
                Ok(if n > 0 { skua_core::Claim::Held } else { skua_core::Claim::Absent })
            }

            async fn claim_many(
                &self,
                claims: &[skua_core::LiveClaim<'_>],
            ) -> Result<Vec<skua_core::Claim>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let conn = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
                let mut claimed = std::collections::HashMap::new();
                // A message given twice goes to its first entry's holder: only that one is sent.
                let mut seen = std::collections::HashSet::new();
                let mut unique: Vec<skua_core::LiveClaim<'_>> =
                    claims.iter().copied().filter(|c| seen.insert((c.consumer, c.msg_id))).collect();
                // Rows in one global order, so two batches (two writers, two nodes) that share
                // rows lock them in the same order and never deadlock each other.
                unique.sort_unstable_by(|a, b| (a.consumer, a.msg_id).cmp(&(b.consumer, b.msg_id)));
                for chunk in unique.chunks(skua_core::MAX_BATCH_IDS) {
                    let text = claim_many_sql(chunk.len());
                    let mut q = sqlx::query_as::<_, (String, String, i32, i64, String, i64)>(sqlx::AssertSqlSafe(text));
                    for c in padded(chunk) {
                        q = q.bind(c.consumer).bind(c.msg_id).bind(c.holder.session).bind(c.holder.node);
                        q = q.bind(conn(c.holder.conn));
                    }
                    let rows = q.fetch_all(&self.pool).await.map_err(sql($backend, "claim_many"))?;
                    claimed.extend(rows.into_iter().map(|(c, m, d, seq, node, hc)| ((c, m), (d, seq, node, hc))));
                }
                // Those not claimed: held by a connection (skip) or not pending (absent).
                let rest: Vec<(&str, &str)> = claims
                    .iter()
                    .filter(|c| !claimed.contains_key(&(c.consumer.to_owned(), c.msg_id.to_owned())))
                    .map(|c| (c.consumer, c.msg_id))
                    .collect();
                let mut pending = std::collections::HashSet::new();
                for chunk in rest.chunks(skua_core::MAX_BATCH_IDS) {
                    let mut q = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(pending_of_sql(chunk.len())));
                    for (c, m) in padded(chunk) {
                        q = q.bind(c).bind(m);
                    }
                    pending.extend(q.fetch_all(&self.pool).await.map_err(sql($backend, "claim_many"))?);
                }
                Ok(claim_outcomes(claims, &claimed, &pending))
            }

            async fn ack_many(&self, acks: &[(&str, &str)]) -> Result<Vec<bool>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let mut deleted = Vec::new();
                // In one global order, as the claims (no deadlock between overlapping batches).
                let mut sorted = acks.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                for chunk in sorted.chunks(skua_core::MAX_BATCH_IDS) {
                    let mut q = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(ack_many_sql(chunk.len())));
                    for (c, m) in padded(chunk) {
                        q = q.bind(c).bind(m);
                    }
                    deleted.extend(q.fetch_all(&self.pool).await.map_err(sql($backend, "ack_many"))?);
                }
                Ok(ack_outcomes(acks, deleted))
            }

            async fn backlog(&self, consumer: &str) -> Result<(u64, u64), skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let (n, max): (i64, i64) = sqlx::query_as(BACKLOG)
                    .bind(consumer)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(sql($backend, "backlog"))?;
                Ok((u64::try_from(n).unwrap_or(0), u64::try_from(max).unwrap_or(0)))
            }

            async fn list_consumers(
                &self,
                prefix: &str,
                after: &str,
                limit: u32,
            ) -> Result<Vec<skua_core::ConsumerBacklog>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let rows: Vec<(String, i64, i64, i64, Option<i64>)> = sqlx::query_as(LIST_CONSUMERS)
                    .bind(prefix)
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "list_consumers"))?;
                let n = |v: i64| u64::try_from(v).unwrap_or(0);
                Ok(rows
                    .into_iter()
                    .map(|(id, expires, pending, held, oldest)| skua_core::ConsumerBacklog {
                        id,
                        pending: n(pending),
                        held: n(held),
                        oldest_timestamp_ms: oldest.map(n),
                        expires_at_unix_s: n(expires),
                    })
                    .collect())
            }

            async fn claim_page(
                &self,
                consumer: &str,
                holder: skua_core::Holder<'_>,
                seqs: std::ops::RangeInclusive<u64>,
                limit: u32,
            ) -> Result<Vec<skua_core::StoredMessage>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                use crate::sql::unix_to_sql;
                let h = holder;
                let claimed: Vec<(i64, i32)> = sqlx::query_as(CLAIM_PAGE)
                    .bind(consumer)
                    .bind(h.session)
                    .bind(h.node)
                    .bind(i64::try_from(h.conn).unwrap_or(i64::MAX))
                    .bind(unix_to_sql(*seqs.start()))
                    .bind(unix_to_sql(*seqs.end()))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "claim_page"))?;
                if claimed.is_empty() {
                    return Ok(Vec::new());
                }
                let seqs: Vec<i64> = claimed.iter().map(|(s, _)| *s).collect();
                let rows: Vec<MessageRow> = sqlx::query_as(sqlx::AssertSqlSafe(select_messages(&seqs)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "claim_page"))?;
                Ok(stored_messages(&claimed, rows))
            }

            async fn ack(&self, consumer: &str, msg_id: &str) -> Result<bool, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let done = sqlx::query(ACK)
                    .bind(consumer)
                    .bind(msg_id)
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "ack"))?;
                Ok(done.rows_affected() > 0)
            }

            async fn release(&self, scope: skua_core::Release<'_>) -> Result<Vec<String>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::log::*;
                let conn = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
                let ids: Vec<String> = match scope {
                    skua_core::Release::Conn { node, conn: c } => {
                        sqlx::query_scalar(RELEASE_CONN).bind(node).bind(conn(c)).fetch_all(&self.pool).await
                    }
                    skua_core::Release::SessionExcept(h) => {
                        sqlx::query_scalar(RELEASE_SESSION_EXCEPT)
                            .bind(h.session)
                            .bind(h.node)
                            .bind(conn(h.conn))
                            .fetch_all(&self.pool)
                            .await
                    }
                    skua_core::Release::ConnConsumer { node, conn: c, consumer } => {
                        sqlx::query_scalar(RELEASE_CONN_CONSUMER)
                            .bind(node)
                            .bind(conn(c))
                            .bind(consumer)
                            .fetch_all(&self.pool)
                            .await
                    }
                    skua_core::Release::Node(node) => {
                        sqlx::query_scalar(RELEASE_NODE).bind(node).fetch_all(&self.pool).await
                    }
                }
                .map_err(sql($backend, "release"))?;
                Ok(distinct(ids))
            }

            async fn prune_log(
                &self,
                now_unix_s: u64,
                retention: skua_core::Retention,
            ) -> Result<u64, skua_core::StoreError> {
                // One pruner at a time across the nodes sharing the database (Postgres: an
                // advisory lock on this connection); the others skip their turn.
                let Some(mut conn) = self.prune_begin().await? else { return Ok(0) };
                let result = async {
                    use crate::error::sql;
                    use crate::log::*;
                    use crate::sql::unix_to_sql;
                    let err = |e| sql($backend, "prune_log")(e);
                    let now = unix_to_sql(now_unix_s);
                    let state: Option<(i64, i64)> =
                        sqlx::query_as(PRUNE_STATE).fetch_optional(&mut *conn).await.map_err(err)?;
                    let (pruned_at, seen_seq) = state.unwrap_or((0, 0));
                    if too_soon(now, pruned_at, retention) {
                        return Ok(0);
                    }
                    let batch = retention.batch.max(1);
                    let cutoff = age_cutoff(now_unix_s, retention);
                    let mut deleted = crate::log::delete_in_batches!(
                        conn,
                        batch,
                        err,
                        sqlx::query(PRUNE_AGE).bind(cutoff).bind(unix_to_sql(batch))
                    );
                    let last: i64 = sqlx::query_scalar(LAST_SEQ).fetch_one(&mut *conn).await.map_err(err)?;
                    // A restored (older) database has lower seqs than the watermark: look at all.
                    let since = if seen_seq > last { 0 } else { seen_seq };
                    let topics: Vec<String> =
                        sqlx::query_scalar(TOPICS_SINCE).bind(since).fetch_all(&mut *conn).await.map_err(err)?;
                    let cap = unix_to_sql(retention.max_per_topic);
                    for topic in topics {
                        let edge: Option<i64> = sqlx::query_scalar(CAP_EDGE)
                            .bind(&topic)
                            .bind(cap)
                            .fetch_optional(&mut *conn)
                            .await
                            .map_err(err)?;
                        let Some(edge) = edge else { continue };
                        deleted += crate::log::delete_in_batches!(
                            conn,
                            batch,
                            err,
                            sqlx::query(PRUNE_CAP).bind(&topic).bind(edge).bind(unix_to_sql(batch))
                        );
                    }
                    sqlx::query(PRUNE_CONSUMERS).bind(now).execute(&mut *conn).await.map_err(err)?;
                    sqlx::query(PRUNE_STATE_SET).bind(now).bind(last).execute(&mut *conn).await.map_err(err)?;
                    Ok(deleted)
                }
                .await;
                self.prune_end(conn).await;
                result
            }
        }
    };
}

/// Whether the last prune (by any node, at `pruned_at`) is less than half of
/// `min_interval_s` before `now`: then this turn is skipped. Half, so that with every node
/// ticking once per interval at its own phase the cluster prunes once or twice per interval,
/// never skipping one. A `pruned_at` in the future (a clock step back) does not skip.
pub(crate) fn too_soon(now: i64, pruned_at: i64, retention: Retention) -> bool {
    let half = unix_to_sql(retention.min_interval_s / 2);
    half > 0 && pruned_at <= now && now - pruned_at < half
}

pub(crate) use {delete_in_batches, sql_message_log};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_lists_are_integers_only() {
        assert_eq!(
            select_messages(&[3, -1, 42]),
            "SELECT seq, msg_id, filter_key, publisher, timestamp_ms, data FROM log_messages WHERE seq IN (3,-1,42) \
             ORDER BY seq"
        );
    }

    #[test]
    fn batched_rows_come_in_powers_of_two_and_padding_repeats_the_last_entry() {
        assert_eq!(values_rows(1, 2, false).matches('(').count(), 8);
        assert!(values_rows(1, 2, false).starts_with("($1, $2), ($3, $4)"));
        assert!(values_rows(9, 5, true).starts_with("($1, $2, $3, $4, CAST($5 AS BIGINT)), ($6,"));
        assert_eq!(values_rows(9, 5, true).matches("CAST").count(), 16);
        assert_eq!(padded(&["a", "b"]).collect::<Vec<_>>(), ["a", "b", "b", "b", "b", "b", "b", "b"]);
        let p: Vec<u32> = padded(&(0..9).collect::<Vec<u32>>()).collect();
        assert_eq!((p.len(), p[8], p[15]), (16, 8, 8));
        assert_eq!(padded::<u32>(&[]).count(), 0, "nothing to pad");
    }

    #[test]
    fn a_pair_acked_twice_counts_once() {
        let got = ack_outcomes(&[("c", "m1"), ("c", "m2"), ("c", "m1")], vec![("c".into(), "m1".into())]);
        assert_eq!(got, [true, false, false]);
    }

    /// SQLite's plan of each batched pending-row statement: one `log_pending_msg` search per
    /// pair, never a scan of `log_pending` (which costs the whole backlog per batch).
    #[tokio::test]
    async fn batched_pending_statements_search_the_index() {
        let pool = crate::sqlite::open_pool("sqlite::memory:", 1, "sqlite").await.expect("open");
        for (name, text) in [("ack_many", ack_many_sql(3)), ("pending_of", pending_of_sql(3))] {
            let mut q =
                sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {text}")));
            for i in 0..slots(3) {
                q = q.bind(format!("c{i}")).bind(format!("m{i}"));
            }
            let plan: Vec<String> = q.fetch_all(&pool).await.expect(name).into_iter().map(|r| r.3).collect();
            assert!(plan.iter().any(|l| l.contains("log_pending_msg")), "{name}: {plan:?}");
            assert!(!plan.iter().any(|l| l.starts_with("SCAN log_pending")), "{name}: {plan:?}");
        }
    }

    #[test]
    fn distinct_keeps_first_seen_order() {
        assert_eq!(distinct(vec!["b".into(), "a".into(), "b".into()]), vec!["b".to_owned(), "a".to_owned()]);
    }
}
