//! What [`SqliteStore`](crate::SqliteStore) and [`PostgresStore`](crate::PostgresStore) share:
//! how a key and a time become column values, and how a loaded `record` becomes a record.
//!
//! The two stores keep their SQL apart, since placeholders and types differ (`?` and
//! `INTEGER`/`BLOB` against `$1` and `BIGINT`/`BYTEA`); the statements are the same otherwise.

use std::borrow::Cow;

use skua_core::{ActorId, ClaimedRecord, ClientId, ConnectionRecord, ProjectId, RecordId, RestoreKey, RestoreRecord};

use crate::record;

/// What starts the `client_id` column of a connection record, before the record's id; a clientId
/// is a slug, so it never starts with it.
pub(crate) const CONNECTION_PREFIX: &str = "#";

/// `LIKE` pattern of the `client_id` column of connection records.
pub(crate) const CONNECTION_PATTERN: &str = "#%";

/// The primary key columns of `key`: (project, actor, client_id). A session key without
/// clientId stores `''`, a connection record `'#'` + its id; a clientId is a non-empty slug, so
/// neither collides with one.
pub(crate) fn key_columns(key: &RestoreKey) -> (&str, &str, Cow<'_, str>) {
    match key {
        RestoreKey::Session(k) => {
            (k.project.as_str(), k.actor.as_str(), Cow::Borrowed(k.client_id.as_ref().map_or("", ClientId::as_str)))
        }
        RestoreKey::Connection(c) => {
            (c.project.as_str(), c.actor.as_str(), Cow::Owned(format!("{CONNECTION_PREFIX}{}", c.id)))
        }
    }
}

/// A claimed row as a [`ClaimedRecord`]. A `client_id` this store did not write is logged and
/// claims nothing; a `record` that does not decode is logged and restores nothing (the claimer
/// keeps the id and overwrites the record).
pub(crate) fn claimed(
    backend: &'static str,
    project: &ProjectId,
    actor: &ActorId,
    column: &str,
    bytes: &[u8],
    holder_seen_ms: Option<i64>,
) -> Option<ClaimedRecord> {
    let Some(id) = column.strip_prefix(CONNECTION_PREFIX).and_then(|id| RecordId::parse(id).ok()) else {
        tracing::warn!(backend, %project, %actor, client_id = column, "Claimed restore row with a foreign id ignored.");
        return None;
    };
    let key =
        RestoreKey::Connection(ConnectionRecord { project: project.clone(), actor: actor.clone(), id: id.clone() });
    let record = decode_loaded(backend, &key, bytes, holder_seen_ms).unwrap_or_default();
    Some(ClaimedRecord { id, record, together: Vec::new() })
}

/// Runs a backend's `TOGETHER` query (contract 4: the actor's other connection records that ended
/// within `$w` seconds of `$ended`, the claimed row `$column` excluded) on `$pool` and decodes
/// the rows with [`together`]; the same binds in both SQL stores.
macro_rules! claim_together {
    ($backend:expr, $pool:expr, $query:expr, $project:expr, $actor:expr, $column:expr, $ended:expr, $w:expr, $now:expr) => {{
        let w = $crate::sql::unix_to_sql($w);
        let rows: Vec<(Vec<u8>,)> = sqlx::query_as($query)
            .bind($project.as_str())
            .bind($actor.as_str())
            .bind($crate::sql::CONNECTION_PATTERN)
            .bind($column)
            .bind($ended.saturating_sub(w))
            .bind($ended.saturating_add(w))
            .bind($now)
            .bind(i64::try_from(skua_core::store::MAX_ENDED_TOGETHER).unwrap_or(i64::MAX))
            .fetch_all($pool)
            .await
            .map_err($crate::error::sql($backend, "claim_restore"))?;
        $crate::sql::together($backend, $project, $actor, rows)
    }};
}
pub(crate) use claim_together;

/// The records of a claim's `together` query (contract 4); one that does not decode is logged
/// and left out.
pub(crate) fn together(
    backend: &'static str,
    project: &ProjectId,
    actor: &ActorId,
    rows: Vec<(Vec<u8>,)>,
) -> Vec<skua_core::RestoreRecord> {
    rows.into_iter()
        .filter_map(|(bytes,)| match crate::record::decode(&bytes) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(backend, %project, %actor, error = %e, "A restore record ended together with a claimed one does not decode; left out.");
                None
            }
        })
        .collect()
}

/// Unix seconds as a SQL `BIGINT`; past `i64::MAX` (year 292 billion) it saturates.
pub(crate) fn unix_to_sql(unix_s: u64) -> i64 {
    i64::try_from(unix_s).unwrap_or(i64::MAX)
}

/// The record in a loaded `record` column. A column that does not decode was not written by this
/// store (or is damaged): it is logged and treated as no record, so the client reconnects with no
/// restored subscriptions rather than failing to authenticate. `holder_seen_ms` is the row's
/// column of that name ([`RestoreRecord::holder_last_seen_ms`]).
pub(crate) fn decode_loaded(
    backend: &'static str,
    key: &RestoreKey,
    bytes: &[u8],
    holder_seen_ms: Option<i64>,
) -> Option<RestoreRecord> {
    match record::decode(bytes) {
        Ok(record) => {
            Some(RestoreRecord { holder_last_seen_ms: holder_seen_ms.and_then(|ms| u64::try_from(ms).ok()), ..record })
        }
        Err(error) => {
            let (project, actor, client_id) = key_columns(key);
            tracing::warn!(
                backend,
                project,
                actor,
                client_id = &*client_id,
                error = &error as &dyn std::error::Error,
                "Undecodable restore record ignored."
            );
            None
        }
    }
}
