//! Persistent presence members in SQL ([`skua_core::MemberStore`]), shared by
//! [`SqliteStore`](crate::SqliteStore) and [`PostgresStore`](crate::PostgresStore): the table of
//! `migrations/*/…_presence_members.sql`. Written once like `crate::triggers` (`$n` placeholders
//! work in both).
//!
//! `begin_wake` is one `UPDATE … WHERE status = 'offline'`: Postgres re-checks the condition on a
//! row a concurrent update just changed, and SQLite runs one writer at a time, so exactly one
//! caller wakes a member, whichever node it runs on.

use bytes::Bytes;
use skua_core::{MemberStatus, StoredMember};

const COLUMNS: &str = "room, actor, client_id, data, wake, status, advertisement_version, joined_at";

/// `$10` the project's limit (0: none), `$11` its `<project>/` prefix: a new record is written
/// only within the limit (contract 4). The count runs only for a record that does not exist
/// yet, and reads the project's records (a scan of the table: `room` is compared by prefix,
/// which no collation-dependent index range can answer portably).
pub(crate) const UPSERT: &str = "INSERT INTO presence_members (room, actor, client_id, data, advertisement, \
     advertisement_version, wake, status, node, joined_at, waking_until, expires_at) \
     SELECT $1, $2, $3, $4, $5, 1, $6, 'online', $7, $8, 0, $9 \
     WHERE CASE WHEN $10 = 0 THEN 1 \
         WHEN EXISTS (SELECT 1 FROM presence_members WHERE room = $1 AND actor = $2 AND client_id = $3) THEN 1 \
         WHEN (SELECT COUNT(*) FROM presence_members WHERE substr(room, 1, length($11)) = $11) < $10 THEN 1 \
         ELSE 0 END = 1 \
     ON CONFLICT (room, actor, client_id) DO UPDATE SET data = excluded.data, \
     advertisement_version = CASE WHEN presence_members.advertisement = excluded.advertisement \
         THEN presence_members.advertisement_version ELSE presence_members.advertisement_version + 1 END, \
     advertisement = excluded.advertisement, wake = excluded.wake, status = 'online', node = excluded.node, \
     waking_until = 0, expires_at = excluded.expires_at, \
     joined_at = CASE WHEN presence_members.status <> 'online' AND presence_members.expires_at <= $8 \
         THEN excluded.joined_at ELSE presence_members.joined_at END \
     RETURNING room, actor, client_id, data, wake, status, advertisement_version, joined_at";
pub(crate) const OFFLINE: &str = "UPDATE presence_members SET status = 'offline', waking_until = 0, \
     expires_at = $3 WHERE room = $1 AND actor = $2 AND status = 'online' \
     RETURNING room, actor, client_id, data, wake, status, advertisement_version, joined_at";
pub(crate) const OTHER_NODES_OFFLINE: &str = "UPDATE presence_members SET status = 'offline', waking_until = 0, \
     expires_at = $2 WHERE status = 'online' AND node <> $1 \
     RETURNING room, actor, client_id, data, wake, status, advertisement_version, joined_at";
pub(crate) const DELETE: &str = "DELETE FROM presence_members WHERE room = $1 AND actor = $2";
pub(crate) const BEGIN_WAKE: &str = "UPDATE presence_members SET status = 'waking', waking_until = $4 \
     WHERE room = $1 AND actor = $2 AND client_id = $3 AND status = 'offline'";
pub(crate) const END_WAKE: &str = "UPDATE presence_members SET status = 'offline', waking_until = 0 \
     WHERE room = $1 AND actor = $2 AND client_id = $3 AND status = 'waking'";
pub(crate) const EXPIRED_WAKES: &str = "UPDATE presence_members SET status = 'offline', waking_until = 0 \
     WHERE status = 'waking' AND waking_until <= $1 AND (room, actor, client_id) IN ( \
         SELECT room, actor, client_id FROM presence_members \
         WHERE status = 'waking' AND waking_until <= $1 LIMIT $2) \
     RETURNING room, actor, client_id, data, wake, status, advertisement_version, joined_at";
pub(crate) const EXPIRE: &str = "DELETE FROM presence_members \
     WHERE status <> 'online' AND expires_at <= $1 AND (room, actor, client_id) IN ( \
         SELECT room, actor, client_id FROM presence_members \
         WHERE status <> 'online' AND expires_at <= $1 LIMIT $2) \
     RETURNING room, actor, client_id, data, wake, status, advertisement_version, joined_at";

/// `list_members`: `$1` room, `$2` now, `$3` limit.
pub(crate) fn list() -> String {
    format!(
        "SELECT {COLUMNS} FROM presence_members WHERE room = $1 AND (status = 'online' OR expires_at > $2) \
         ORDER BY actor, client_id LIMIT $3"
    )
}

/// `wake_candidates`: `$1` room, `$2` now, `$3` limit.
pub(crate) fn candidates() -> String {
    format!(
        "SELECT {COLUMNS} FROM presence_members WHERE room = $1 AND status = 'offline' AND wake IS NOT NULL \
         AND expires_at > $2 ORDER BY actor, client_id LIMIT $3"
    )
}

/// One selected or returned row, in [`COLUMNS`] order.
pub(crate) type MemberRow = (String, String, String, Vec<u8>, Option<String>, String, i64, i64);

/// A row as a [`StoredMember`].
pub(crate) fn member(row: MemberRow) -> StoredMember {
    let (room, actor, client_id, data, wake, status, version, joined_at) = row;
    StoredMember {
        room,
        actor,
        client_id,
        data: Bytes::from(data),
        wake,
        status: MemberStatus::parse(&status),
        advertisement_version: u64::try_from(version).unwrap_or(0),
        joined_at: u64::try_from(joined_at).unwrap_or(0),
    }
}

/// Implements [`skua_core::MemberStore`] for a store type with a `pool` field, for one sqlx backend.
macro_rules! sql_member_store {
    ($store:ty, $backend:expr) => {
        #[async_trait::async_trait]
        impl skua_core::MemberStore for $store {
            async fn upsert_member(
                &self,
                w: &skua_core::MemberWrite<'_>,
            ) -> Result<Option<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let row: Option<MemberRow> = sqlx::query_as(UPSERT)
                    .bind(w.room)
                    .bind(w.actor)
                    .bind(w.client_id)
                    .bind(w.data)
                    .bind(w.advertisement)
                    .bind(w.wake)
                    .bind(w.node)
                    .bind(unix_to_sql(w.now_s))
                    .bind(unix_to_sql(w.expires_at_s))
                    .bind(i64::try_from(w.project_limit).unwrap_or(i64::MAX))
                    .bind(w.project_prefix())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(sql($backend, "upsert_member"))?;
                Ok(row.map(member))
            }

            async fn members_offline(
                &self,
                room: &str,
                actor: &str,
                expires_at_s: u64,
            ) -> Result<Vec<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let rows: Vec<MemberRow> = sqlx::query_as(OFFLINE)
                    .bind(room)
                    .bind(actor)
                    .bind(unix_to_sql(expires_at_s))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "members_offline"))?;
                Ok(rows.into_iter().map(member).collect())
            }

            async fn other_nodes_members_offline(
                &self,
                keep: &str,
                expires_at_s: u64,
            ) -> Result<Vec<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let rows: Vec<MemberRow> = sqlx::query_as(OTHER_NODES_OFFLINE)
                    .bind(keep)
                    .bind(unix_to_sql(expires_at_s))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "other_nodes_members_offline"))?;
                Ok(rows.into_iter().map(member).collect())
            }

            async fn delete_members(&self, room: &str, actor: &str) -> Result<u64, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                let done = sqlx::query(DELETE)
                    .bind(room)
                    .bind(actor)
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "delete_members"))?;
                Ok(done.rows_affected())
            }

            async fn list_members(
                &self,
                room: &str,
                now_s: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let rows: Vec<MemberRow> = sqlx::query_as(sqlx::AssertSqlSafe(list()))
                    .bind(room)
                    .bind(unix_to_sql(now_s))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "list_members"))?;
                Ok(rows.into_iter().map(member).collect())
            }

            async fn wake_candidates(
                &self,
                room: &str,
                now_s: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let rows: Vec<MemberRow> = sqlx::query_as(sqlx::AssertSqlSafe(candidates()))
                    .bind(room)
                    .bind(unix_to_sql(now_s))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "wake_candidates"))?;
                Ok(rows.into_iter().map(member).collect())
            }

            async fn begin_wake(
                &self,
                room: &str,
                actor: &str,
                client_id: &str,
                until_ms: u64,
            ) -> Result<bool, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let done = sqlx::query(BEGIN_WAKE)
                    .bind(room)
                    .bind(actor)
                    .bind(client_id)
                    .bind(unix_to_sql(until_ms))
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "begin_wake"))?;
                Ok(done.rows_affected() > 0)
            }

            async fn end_wake(&self, room: &str, actor: &str, client_id: &str) -> Result<bool, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                let done = sqlx::query(END_WAKE)
                    .bind(room)
                    .bind(actor)
                    .bind(client_id)
                    .execute(&self.pool)
                    .await
                    .map_err(sql($backend, "end_wake"))?;
                Ok(done.rows_affected() > 0)
            }

            async fn expired_wakes(
                &self,
                now_ms: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let rows: Vec<MemberRow> = sqlx::query_as(EXPIRED_WAKES)
                    .bind(unix_to_sql(now_ms))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "expired_wakes"))?;
                Ok(rows.into_iter().map(member).collect())
            }

            async fn expire_members(
                &self,
                now_s: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::StoredMember>, skua_core::StoreError> {
                use crate::error::sql;
                use crate::members::*;
                use crate::sql::unix_to_sql;
                let rows: Vec<MemberRow> = sqlx::query_as(EXPIRE)
                    .bind(unix_to_sql(now_s))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(sql($backend, "expire_members"))?;
                Ok(rows.into_iter().map(member).collect())
            }
        }
    };
}

pub(crate) use sql_member_store;
