//! What [`SqliteStore`](crate::SqliteStore) and [`PostgresStore`](crate::PostgresStore) share:
//! how a key and a time become column values, and how a loaded `record` becomes a record.
//!
//! The two stores keep their SQL apart, since placeholders and types differ (`?` and
//! `INTEGER`/`BLOB` against `$1` and `BIGINT`/`BYTEA`); the statements are the same otherwise.

use skua_core::{ClientId, RestoreRecord, SessionKey};

use crate::record;

/// The primary key columns of `key`: (project, actor, client_id), with `''` for no clientId (a
/// clientId is a non-empty slug, so `''` never collides with one).
pub(crate) fn key_columns(key: &SessionKey) -> (&str, &str, &str) {
    (key.project.as_str(), key.actor.as_str(), key.client_id.as_ref().map_or("", ClientId::as_str))
}

/// Unix seconds as a SQL `BIGINT`; past `i64::MAX` (year 292 billion) it saturates.
pub(crate) fn unix_to_sql(unix_s: u64) -> i64 {
    i64::try_from(unix_s).unwrap_or(i64::MAX)
}

/// The record in a loaded `record` column. A column that does not decode was not written by this
/// store (or is damaged): it is logged and treated as no record, so the client reconnects with no
/// restored subscriptions rather than failing to authenticate.
pub(crate) fn decode_loaded(backend: &'static str, key: &SessionKey, bytes: &[u8]) -> Option<RestoreRecord> {
    match record::decode(bytes) {
        Ok(record) => Some(record),
        Err(error) => {
            tracing::warn!(
                backend,
                project = %key.project,
                actor = %key.actor,
                client_id = key.client_id.as_ref().map(ClientId::as_str),
                error = &error as &dyn std::error::Error,
                "Undecodable restore record ignored."
            );
            None
        }
    }
}
