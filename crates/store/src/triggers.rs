//! The trigger outbox and webhook dead letters in SQL ([`skua_core::TriggerStore`]), shared by
//! [`SqliteStore`](crate::SqliteStore) and [`PostgresStore`](crate::PostgresStore): the tables
//! of `migrations/*/…_webhook_triggers.sql`. Written once like `crate::log`.
//!
//! A claim is one `UPDATE … WHERE lease_until <= now`: Postgres re-checks that condition on a
//! row a concurrent claim just changed (its lease is then in the future), and SQLite runs one
//! writer at a time, so a trigger is taken over by one node only.

use bytes::Bytes;
use skua_core::{DeadLetter, OutboxTrigger};

pub(crate) const CLAIM_OUTBOX: &str = "UPDATE trigger_outbox SET owner = $1, lease_until = $3 \
     WHERE lease_until <= $2 AND seq IN ( \
         SELECT seq FROM trigger_outbox WHERE lease_until <= $2 ORDER BY seq LIMIT $4) \
     RETURNING seq, attempts";
pub(crate) const RENEW_OUTBOX: &str = "UPDATE trigger_outbox SET lease_until = $3, attempts = attempts + 1 \
     WHERE msg_id = $1 AND owner = $2 RETURNING attempts";
pub(crate) const FINISH_OUTBOX: &str = "DELETE FROM trigger_outbox WHERE msg_id = $1";
pub(crate) const EXPIRE_LEASES: &str = "UPDATE trigger_outbox SET lease_until = 0 WHERE owner <> $1";
pub(crate) const UPSERT_DEAD_LETTER: &str = "INSERT INTO webhook_dead_letters \
     (delivery_id, project, kind, topic, target, body, last_error, attempts, failed_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (delivery_id) DO UPDATE SET project = excluded.project, kind = excluded.kind, \
     topic = excluded.topic, target = excluded.target, body = excluded.body, last_error = excluded.last_error, \
     attempts = excluded.attempts, failed_at = excluded.failed_at";
/// A project's dead letters beyond the newest `$2`.
pub(crate) const CAP_DEAD_LETTERS: &str = "DELETE FROM webhook_dead_letters WHERE project = $1 AND id <= ( \
     SELECT id FROM webhook_dead_letters WHERE project = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)";
/// A project's dead letters from the newest whose bodies, summed from the newest, pass `$2`
/// bytes (records only: the newest are kept).
pub(crate) const CAP_DEAD_LETTER_BYTES: &str = "DELETE FROM webhook_dead_letters WHERE id IN ( \
     SELECT id FROM (SELECT id, SUM(LENGTH(body)) OVER (ORDER BY id DESC) AS total \
     FROM webhook_dead_letters WHERE project = $1) AS running WHERE total > $2)";
const DEAD_LETTER_COLUMNS: &str =
    "id, delivery_id, project, kind, topic, target, body, last_error, attempts, failed_at";
pub(crate) const LIST_DEAD_LETTERS: &str = "SELECT id, delivery_id, project, kind, topic, target, body, last_error, \
     attempts, failed_at FROM webhook_dead_letters WHERE (project = $1 OR $1 IS NULL) AND id > $2 \
     ORDER BY id LIMIT $3";
pub(crate) const DELETE_DEAD_LETTERS: &str = "DELETE FROM webhook_dead_letters WHERE (project = $1 OR $1 IS NULL)";

/// One row of a dead-letter select.
pub(crate) type DeadLetterRow = (i64, String, String, String, String, String, Vec<u8>, String, i32, i64);

/// One row of [`outbox_messages`].
pub(crate) type OutboxRow = (i64, String, String, Option<String>, String, i64, Vec<u8>);

/// The messages of claimed outbox seqs. The list is built from integers only, so it cannot carry SQL.
pub(crate) fn outbox_messages(seqs: &[i64]) -> String {
    format!(
        "SELECT seq, msg_id, topic, filter_key, publisher, timestamp_ms, data FROM log_messages WHERE seq IN ({}) \
         ORDER BY seq",
        int_list(seqs)
    )
}

/// Dead letters of `filter`'s delivery ids (`$1`: project or NULL, `$2`: after, `$3`: limit,
/// then one placeholder per id from `$4`).
pub(crate) fn list_by_ids(ids: usize) -> String {
    format!(
        "SELECT {DEAD_LETTER_COLUMNS} FROM webhook_dead_letters WHERE (project = $1 OR $1 IS NULL) AND id > $2 \
         AND delivery_id IN ({}) ORDER BY id LIMIT $3",
        placeholders(4, ids)
    )
}

/// Deletes the dead letters of delivery ids (`$1`: project or NULL, then one placeholder per id from `$2`).
pub(crate) fn delete_by_ids(ids: usize) -> String {
    format!("{DELETE_DEAD_LETTERS} AND delivery_id IN ({})", placeholders(2, ids))
}

fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

fn int_list(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// Joins claimed `(seq, attempts)` with the message rows, in seq order.
pub(crate) fn outbox_triggers(claimed: &[(i64, i32)], rows: Vec<OutboxRow>) -> Vec<OutboxTrigger> {
    rows.into_iter()
        .filter_map(|(seq, msg_id, topic, filter, publisher, timestamp_ms, data)| {
            let attempts = claimed.iter().find(|(s, _)| *s == seq)?.1;
            Some(OutboxTrigger {
                msg_id,
                topic,
                filter,
                publisher,
                timestamp_ms: u64::try_from(timestamp_ms).unwrap_or(0),
                data: Bytes::from(data),
                attempts: u32::try_from(attempts).unwrap_or(0),
            })
        })
        .collect()
}

/// A dead-letter row as a [`DeadLetter`].
pub(crate) fn dead_letter(row: DeadLetterRow) -> DeadLetter {
    let (id, delivery_id, project, kind, topic, target, body, last_error, attempts, failed_at) = row;
    DeadLetter {
        id: u64::try_from(id).unwrap_or(0),
        delivery_id,
        project,
        kind,
        topic,
        target,
        body: Bytes::from(body),
        last_error,
        attempts: u32::try_from(attempts).unwrap_or(0),
        failed_at_ms: u64::try_from(failed_at).unwrap_or(0),
    }
}

/// Implements [`skua_core::TriggerStore`] for a store type with a `pool` field, for one sqlx backend.
macro_rules! sql_trigger_store {
    ($store:ty, $backend:expr) => {
        #[async_trait::async_trait]
        impl skua_core::TriggerStore for $store {
            async fn claim_outbox(
                &self,
                owner: &str,
                now_ms: u64,
                lease_until_ms: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::OutboxTrigger>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::sql::unix_to_sql;
                use crate::triggers::*;
                let claimed: Vec<(i64, i32)> = sqlx::query_as(CLAIM_OUTBOX)
                    .bind(owner)
                    .bind(unix_to_sql(now_ms))
                    .bind(unix_to_sql(lease_until_ms))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "claim_outbox"))?;
                if claimed.is_empty() {
                    return Ok(Vec::new());
                }
                let seqs: Vec<i64> = claimed.iter().map(|(s, _)| *s).collect();
                let rows: Vec<OutboxRow> = sqlx::query_as(sqlx::AssertSqlSafe(outbox_messages(&seqs)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "claim_outbox"))?;
                Ok(outbox_triggers(&claimed, rows))
            }

            async fn renew_outbox(
                &self,
                msg_id: &str,
                owner: &str,
                lease_until_ms: u64,
            ) -> Result<Option<u32>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::sql::unix_to_sql;
                use crate::triggers::*;
                let attempts: Option<i32> = sqlx::query_scalar(RENEW_OUTBOX)
                    .bind(msg_id)
                    .bind(owner)
                    .bind(unix_to_sql(lease_until_ms))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(sql($backend, "renew_outbox"))?;
                Ok(attempts.map(|a| u32::try_from(a).unwrap_or(0)))
            }

            async fn finish_outbox(&self, msg_id: &str) -> Result<bool, skua_core::StoreError> {
                use crate::error::sql;
                use crate::triggers::*;
                let done = sqlx::query(FINISH_OUTBOX)
                    .bind(msg_id)
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "finish_outbox"))?;
                Ok(done.rows_affected() > 0)
            }

            async fn expire_outbox_leases(&self, keep: &str) -> Result<u64, skua_core::StoreError> {
                use crate::error::sql;
                use crate::triggers::*;
                let done = sqlx::query(EXPIRE_LEASES)
                    .bind(keep)
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "expire_outbox_leases"))?;
                Ok(done.rows_affected())
            }

            async fn dead_letter(
                &self,
                letter: &skua_core::NewDeadLetter<'_>,
                cap: skua_core::DeadLetterCap,
            ) -> Result<u64, skua_core::StoreError> {
                // A batch of one: the same transaction (upsert, outbox row finished, cap).
                self.dead_letters(std::slice::from_ref(letter), cap).await
            }

            async fn dead_letters(
                &self,
                letters: &[skua_core::NewDeadLetter<'_>],
                cap: skua_core::DeadLetterCap,
            ) -> Result<u64, skua_core::StoreError> {
                use crate::error::sql;
                use crate::sql::unix_to_sql;
                use crate::triggers::*;
                if letters.is_empty() {
                    return Ok(0);
                }
                // One transaction (one commit) for the whole batch; the statements are
                // prepared once and reused per row.
                let mut tx = self.pool.begin().await.map_err(sql($backend, "dead_letters"))?;
                for l in letters {
                    sqlx::query(UPSERT_DEAD_LETTER)
                        .bind(l.delivery_id)
                        .bind(l.project)
                        .bind(l.kind)
                        .bind(l.topic)
                        .bind(l.target)
                        .bind(l.body)
                        .bind(l.last_error)
                        .bind(i32::try_from(l.attempts).unwrap_or(i32::MAX))
                        .bind(unix_to_sql(l.failed_at_ms))
                        .execute(&mut *tx)
                        .await
                        .map_err(sql($backend, "dead_letters"))?;
                    sqlx::query(FINISH_OUTBOX)
                        .bind(l.delivery_id)
                        .execute(&mut *tx)
                        .await
                        .map_err(sql($backend, "dead_letters"))?;
                }
                let mut projects: Vec<&str> = letters.iter().map(|l| l.project).collect();
                projects.sort_unstable();
                projects.dedup();
                let mut dropped = 0;
                for project in projects {
                    dropped += sqlx::query(CAP_DEAD_LETTERS)
                        .bind(project)
                        .bind(unix_to_sql(cap.count))
                        .execute(&mut *tx)
                        .await
                        .map_err(sql($backend, "dead_letters"))?
                        .rows_affected();
                    if cap.bytes < u64::MAX {
                        dropped += sqlx::query(CAP_DEAD_LETTER_BYTES)
                            .bind(project)
                            .bind(unix_to_sql(cap.bytes))
                            .execute(&mut *tx)
                            .await
                            .map_err(sql($backend, "dead_letters"))?
                            .rows_affected();
                    }
                }
                tx.commit().await.map_err(sql($backend, "dead_letters"))?;
                Ok(dropped)
            }

            async fn list_dead_letters(
                &self,
                filter: skua_core::DeadLetterFilter<'_>,
                after: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::DeadLetter>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::sql::unix_to_sql;
                use crate::triggers::*;
                let rows: Vec<DeadLetterRow> = if filter.delivery_ids.is_empty() {
                    sqlx::query_as(LIST_DEAD_LETTERS)
                        .bind(filter.project)
                        .bind(unix_to_sql(after))
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await
                } else {
                    let text = list_by_ids(filter.delivery_ids.len());
                    let mut q = sqlx::query_as(sqlx::AssertSqlSafe(text))
                        .bind(filter.project)
                        .bind(unix_to_sql(after))
                        .bind(i64::from(limit));
                    for id in filter.delivery_ids {
                        q = q.bind(id.as_str());
                    }
                    q.fetch_all(&self.pool).await
                }
                .map_err(sql($backend, "list_dead_letters"))?;
                Ok(rows.into_iter().map(dead_letter).collect())
            }

            async fn delete_dead_letters(
                &self,
                filter: skua_core::DeadLetterFilter<'_>,
            ) -> Result<u64, skua_core::StoreError> {
                use crate::error::sql;
                use crate::triggers::*;
                let done = if filter.delivery_ids.is_empty() {
                    sqlx::query(DELETE_DEAD_LETTERS).bind(filter.project).execute(&self.pool).await
                } else {
                    let text = delete_by_ids(filter.delivery_ids.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(text)).bind(filter.project);
                    for id in filter.delivery_ids {
                        q = q.bind(id.as_str());
                    }
                    q.execute(&self.pool).await
                }
                .map_err(sql($backend, "delete_dead_letters"))?;
                Ok(done.rows_affected())
            }
        }
    };
}

pub(crate) use sql_trigger_store;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_are_placeholders_only() {
        assert!(list_by_ids(2).contains("delivery_id IN ($4, $5)"));
        assert!(delete_by_ids(3).ends_with("delivery_id IN ($2, $3, $4)"));
        assert!(outbox_messages(&[3, -1]).contains("seq IN (3,-1)"));
    }
}
