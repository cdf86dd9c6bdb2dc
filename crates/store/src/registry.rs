//! Registry stores: implementations of [`skua_core::RegistryStore`], the control plane's
//! projects, apps, rooms, grants, lobbies, actors and tokens, in the same database as the
//! session store (`--store`). Modules:
//! - [`sqlite`]: [`SqliteRegistryStore`], for a single node (and, on `sqlite::memory:`, for
//!   tests and the `memory` store);
//! - [`postgres`]: [`PostgresRegistryStore`], shared by a cluster's nodes.
//!
//! Both keep one row per object in `registry_objects` and a version counter in
//! `registry_version` (migrations `20261201000003_registry.sql`). The SQL is the same for both
//! backends (`$n` placeholders work in SQLite too), so it is written once, in
//! `registry_store_impl!`. Every implementation passes `skua_conformance::registry_store_conformance!`.

pub mod postgres;
pub mod sqlite;

use std::sync::Arc;

use skua_core::{RegistryStore, StoreError};

pub use postgres::PostgresRegistryStore;
pub use sqlite::SqliteRegistryStore;

use crate::error::{UnsupportedStoreUrl, unavailable};

pub(crate) const VERSION: &str = "SELECT version FROM registry_version WHERE id = 1";
pub(crate) const OBJECTS: &str = "SELECT kind, spec FROM registry_objects";
pub(crate) const BUMP: &str = "UPDATE registry_version SET version = version + 1 WHERE id = 1 AND version = $1";
pub(crate) const PUT: &str = "INSERT INTO registry_objects (kind, key, project, spec) VALUES ($1, $2, $3, $4) \
                              ON CONFLICT (kind, key) DO UPDATE SET project = excluded.project, spec = excluded.spec";
pub(crate) const DELETE: &str = "DELETE FROM registry_objects WHERE kind = $1 AND key = $2";
pub(crate) const ADD_USAGE: &str = "INSERT INTO registry_usage (project, period, messages) VALUES ($1, $2, $3) \
                                    ON CONFLICT (project, period) \
                                    DO UPDATE SET messages = registry_usage.messages + excluded.messages \
                                    RETURNING messages";
pub(crate) const USAGE: &str = "SELECT messages FROM registry_usage WHERE project = $1 AND period = $2";
pub(crate) const NODE_SEEN: &str = "INSERT INTO registry_nodes (node, seen_at_ms) VALUES ($1, $2) \
                                    ON CONFLICT (node) DO UPDATE SET seen_at_ms = excluded.seen_at_ms";
pub(crate) const CONNS_CLEAR: &str = "DELETE FROM registry_connections WHERE node = $1";
pub(crate) const CONN_PUT: &str = "INSERT INTO registry_connections \
                                   (node, conn, project, actor, client_id, connected_at_ms, subscriptions, protocol) \
                                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (node, conn) DO UPDATE SET \
                                   project = excluded.project, actor = excluded.actor, client_id = excluded.client_id, \
                                   connected_at_ms = excluded.connected_at_ms, subscriptions = excluded.subscriptions, \
                                   protocol = excluded.protocol";
pub(crate) const CONN_DELETE: &str = "DELETE FROM registry_connections WHERE node = $1 AND conn = $2";
pub(crate) const CONNS_LIST: &str = "SELECT c.node, c.conn, c.project, c.actor, c.client_id, c.connected_at_ms, \
                                     c.subscriptions, c.protocol FROM registry_connections c \
                                     JOIN registry_nodes n ON n.node = c.node \
                                     WHERE c.project = $1 AND ($2 = '' OR c.actor = $2) AND n.seen_at_ms >= $3 \
                                     ORDER BY c.connected_at_ms, c.node, c.conn LIMIT $4";
pub(crate) const NODE_DELETE: &str = "DELETE FROM registry_nodes WHERE node = $1";
pub(crate) const DEAD_CONNS_DELETE: &str = "DELETE FROM registry_connections WHERE node IN \
                                            (SELECT node FROM registry_nodes WHERE seen_at_ms < $1)";
pub(crate) const DEAD_NODES_DELETE: &str = "DELETE FROM registry_nodes WHERE seen_at_ms < $1";

/// Nodes silent for this long are deleted (with their connections) by the next node that
/// writes its connections in full (at start).
pub const DEAD_NODE_MS: u64 = 3_600_000;

type ConnRow = (String, String, String, String, String, i64, i64, String);

/// Stored counters and versions are `BIGINT`: non-negative by construction.
pub(crate) fn from_sql(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Our counters, saturated into `BIGINT`.
pub(crate) fn to_sql(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored object that does not decode: the registry cannot be built without it.
#[derive(Debug, thiserror::Error)]
#[error("registry object of kind {kind:?} does not decode")]
pub(crate) struct BadObject {
    pub(crate) kind: String,
    #[source]
    pub(crate) source: Option<serde_json::Error>,
}

/// The `RegistryStore` impl over a sqlx pool; `$begin` starts a consistent read transaction.
macro_rules! registry_store_impl {
    ($ty:ty, $backend:expr, $read_tx:expr) => {
        #[async_trait::async_trait]
        impl skua_core::RegistryStore for $ty {
            async fn version(&self) -> Result<u64, skua_core::StoreError> {
                let v: i64 = sqlx::query_scalar($crate::registry::VERSION)
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::error::sql($backend, "read the registry version"))?;
                Ok($crate::registry::from_sql(v))
            }

            async fn load(&self) -> Result<skua_core::RegistrySnapshot, skua_core::StoreError> {
                let mut tx = self.pool.begin().await.map_err($crate::error::sql($backend, "begin"))?;
                if let Some(stmt) = $read_tx {
                    sqlx::query(stmt).execute(&mut *tx).await.map_err($crate::error::sql($backend, "begin"))?;
                }
                let version: i64 = sqlx::query_scalar($crate::registry::VERSION)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err($crate::error::sql($backend, "read the registry version"))?;
                let rows: Vec<(String, String)> = sqlx::query_as($crate::registry::OBJECTS)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($crate::error::sql($backend, "load the registry"))?;
                tx.commit().await.map_err($crate::error::sql($backend, "commit"))?;
                let mut data = skua_core::RegistryData::default();
                for (kind, spec) in rows {
                    let bad =
                        |source| $crate::error::unavailable($crate::registry::BadObject { kind: kind.clone(), source });
                    let k = skua_core::registry_store::ObjectKind::parse(&kind).ok_or_else(|| bad(None))?;
                    let object = skua_core::registry_store::Object::from_spec(k, &spec).map_err(|e| bad(Some(e)))?;
                    data.insert(object);
                }
                Ok(skua_core::RegistrySnapshot { version: $crate::registry::from_sql(version), data })
            }

            async fn apply(
                &self,
                expected_version: u64,
                changes: &[skua_core::registry_store::Change],
            ) -> Result<u64, skua_core::registry_store::ApplyError> {
                use skua_core::registry_store::{ApplyError, Change};
                let mut tx = self.pool.begin().await.map_err($crate::error::sql($backend, "begin"))?;
                let bumped = sqlx::query($crate::registry::BUMP)
                    .bind($crate::registry::to_sql(expected_version))
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::error::sql($backend, "bump the registry version"))?;
                if bumped.rows_affected() == 0 {
                    drop(tx);
                    return Err(ApplyError::Conflict { current: self.version().await? });
                }
                for c in changes {
                    match c {
                        Change::Put(o) => {
                            let key = o.key();
                            let spec = o.spec_json().map_err(|e| {
                                $crate::error::unavailable($crate::registry::BadObject {
                                    kind: key.kind.as_str().to_owned(),
                                    source: Some(e),
                                })
                            })?;
                            sqlx::query($crate::registry::PUT)
                                .bind(key.kind.as_str())
                                .bind(&key.key)
                                .bind(o.project())
                                .bind(spec)
                                .execute(&mut *tx)
                                .await
                                .map_err($crate::error::sql($backend, "write a registry object"))?;
                        }
                        Change::Delete(key) => {
                            sqlx::query($crate::registry::DELETE)
                                .bind(key.kind.as_str())
                                .bind(&key.key)
                                .execute(&mut *tx)
                                .await
                                .map_err($crate::error::sql($backend, "delete a registry object"))?;
                        }
                    }
                }
                tx.commit().await.map_err($crate::error::sql($backend, "commit"))?;
                Ok(expected_version + 1)
            }

            async fn add_usage(
                &self,
                project: &str,
                period: &str,
                messages: u64,
            ) -> Result<u64, skua_core::StoreError> {
                let total: i64 = sqlx::query_scalar($crate::registry::ADD_USAGE)
                    .bind(project)
                    .bind(period)
                    .bind($crate::registry::to_sql(messages))
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::error::sql($backend, "add usage"))?;
                Ok($crate::registry::from_sql(total))
            }

            async fn write_connections(
                &self,
                node: &str,
                now_ms: u64,
                full: bool,
                upserts: &[skua_core::registry_store::ConnectionRecord],
                removed: &[String],
            ) -> Result<(), skua_core::StoreError> {
                use $crate::registry::to_sql;
                let op = $crate::error::sql($backend, "write connections");
                let mut tx = self.pool.begin().await.map_err($crate::error::sql($backend, "begin"))?;
                sqlx::query($crate::registry::NODE_SEEN)
                    .bind(node)
                    .bind(to_sql(now_ms))
                    .execute(&mut *tx)
                    .await
                    .map_err(op)?;
                if full {
                    let op = $crate::error::sql($backend, "write connections");
                    sqlx::query($crate::registry::CONNS_CLEAR).bind(node).execute(&mut *tx).await.map_err(op)?;
                    let cutoff = to_sql(now_ms.saturating_sub($crate::registry::DEAD_NODE_MS));
                    let op = $crate::error::sql($backend, "delete dead nodes");
                    sqlx::query($crate::registry::DEAD_CONNS_DELETE)
                        .bind(cutoff)
                        .execute(&mut *tx)
                        .await
                        .map_err(op)?;
                    let op = $crate::error::sql($backend, "delete dead nodes");
                    sqlx::query($crate::registry::DEAD_NODES_DELETE)
                        .bind(cutoff)
                        .execute(&mut *tx)
                        .await
                        .map_err(op)?;
                }
                for c in upserts {
                    sqlx::query($crate::registry::CONN_PUT)
                        .bind(node)
                        .bind(&c.conn)
                        .bind(&c.project)
                        .bind(&c.actor)
                        .bind(&c.client_id)
                        .bind(to_sql(c.connected_at_ms))
                        .bind(i64::from(c.subscriptions))
                        .bind(&c.protocol)
                        .execute(&mut *tx)
                        .await
                        .map_err($crate::error::sql($backend, "write a connection"))?;
                }
                for conn in removed {
                    sqlx::query($crate::registry::CONN_DELETE)
                        .bind(node)
                        .bind(conn)
                        .execute(&mut *tx)
                        .await
                        .map_err($crate::error::sql($backend, "delete a connection"))?;
                }
                tx.commit().await.map_err($crate::error::sql($backend, "commit"))?;
                Ok(())
            }

            async fn list_connections(
                &self,
                project: &str,
                actor: Option<&str>,
                seen_since_ms: u64,
                limit: u32,
            ) -> Result<Vec<skua_core::registry_store::ConnectionRecord>, skua_core::StoreError> {
                let rows: Vec<$crate::registry::ConnRow> = sqlx::query_as($crate::registry::CONNS_LIST)
                    .bind(project)
                    .bind(actor.unwrap_or(""))
                    .bind($crate::registry::to_sql(seen_since_ms))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::error::sql($backend, "list connections"))?;
                Ok(rows
                    .into_iter()
                    .map(|(node, conn, project, actor, client_id, at, subs, protocol)| {
                        skua_core::registry_store::ConnectionRecord {
                            node,
                            conn,
                            project,
                            actor,
                            client_id,
                            connected_at_ms: $crate::registry::from_sql(at),
                            subscriptions: u32::try_from(subs).unwrap_or(0),
                            protocol,
                        }
                    })
                    .collect())
            }

            async fn forget_node(&self, node: &str) -> Result<(), skua_core::StoreError> {
                let mut tx = self.pool.begin().await.map_err($crate::error::sql($backend, "begin"))?;
                sqlx::query($crate::registry::CONNS_CLEAR)
                    .bind(node)
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::error::sql($backend, "forget a node"))?;
                sqlx::query($crate::registry::NODE_DELETE)
                    .bind(node)
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::error::sql($backend, "forget a node"))?;
                tx.commit().await.map_err($crate::error::sql($backend, "commit"))?;
                Ok(())
            }

            async fn usage(&self, project: &str, period: &str) -> Result<u64, skua_core::StoreError> {
                let total: Option<i64> = sqlx::query_scalar($crate::registry::USAGE)
                    .bind(project)
                    .bind(period)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::error::sql($backend, "read usage"))?;
                Ok(total.map_or(0, $crate::registry::from_sql))
            }
        }
    };
}
pub(crate) use registry_store_impl;

/// Opens the registry store in the database `url` names (the `--store` URL): SQLite (migrated
/// on open) or Postgres (migrated by `skua migrate`, checked here).
///
/// # Errors
/// [`StoreError::Unavailable`] for an unknown URL, an unreachable or unmigrated database.
pub async fn open_registry(url: &str) -> Result<Arc<dyn RegistryStore>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteRegistryStore::connect(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresRegistryStore::connect(url).await?))
    } else {
        Err(unavailable(UnsupportedStoreUrl::of(url)))
    }
}
