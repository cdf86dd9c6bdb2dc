//! The causes a durable store puts under [`StoreError::Unavailable`].
//!
//! `StoreError` belongs to `skua-core` and has one variant so far, so the detail travels as its
//! source: the public types here can be found with `downcast_ref` on the source (the server does
//! so to exit with EX_USAGE on a bad `--store` URL, or to say "run `skua migrate`"); a failed
//! SQL operation names its backend and operation and keeps sqlx's error as its own source.

use std::error::Error;

use skua_core::StoreError;

type BoxError = Box<dyn Error + Send + Sync>;

/// The store URL names no backend this crate has. Never holds the URL itself, which may carry a
/// password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported store URL scheme {scheme:?}: expected sqlite://PATH, sqlite::memory: or postgres://…")]
#[non_exhaustive]
pub struct UnsupportedStoreUrl {
    /// What stood before the first `:` (empty when there was none).
    pub scheme: String,
}

impl UnsupportedStoreUrl {
    pub(crate) fn of(url: &str) -> Self {
        Self { scheme: url.split_once(':').map_or("", |(scheme, _)| scheme).to_owned() }
    }
}

/// The Postgres database lacks migrations this build needs: `skua migrate` has not been run
/// since the upgrade.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Postgres schema lacks migrations {missing:?}: run `skua migrate`")]
#[non_exhaustive]
pub struct SchemaNotMigrated {
    /// The versions (file name prefixes in `migrations/postgres/`) not applied, oldest first.
    pub missing: Vec<i64>,
}

/// A SQL store operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("{backend}: {op} failed")]
pub(crate) struct SqlError {
    backend: &'static str,
    op: &'static str,
    #[source]
    source: BoxError,
}

/// Maps a sqlx (or sqlx migrate) error of `backend`'s `op` to a [`StoreError`].
pub(crate) fn sql(backend: &'static str, op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| StoreError::Unavailable(Box::new(SqlError { backend, op, source: Box::new(e) }))
}

/// A failed `op` of `backend` known only by its message (a group commit's shared failure).
pub(crate) fn failed(backend: &'static str, op: &'static str, why: String) -> StoreError {
    StoreError::Unavailable(Box::new(SqlError { backend, op, source: why.into() }))
}

/// Like [`sql`], for the migrator.
pub(crate) fn migrate(backend: &'static str) -> impl FnOnce(sqlx::migrate::MigrateError) -> StoreError {
    move |e| StoreError::Unavailable(Box::new(SqlError { backend, op: "migrate", source: Box::new(e) }))
}

/// Wraps one of this module's public errors.
pub(crate) fn unavailable(e: impl Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_url_names_the_scheme_only() {
        assert_eq!(UnsupportedStoreUrl::of("redis://:secret@host/0").scheme, "redis");
        assert_eq!(UnsupportedStoreUrl::of("/var/lib/skua.db").scheme, "");
        let shown = UnsupportedStoreUrl::of("mysql://root:secret@db").to_string();
        assert!(shown.contains("\"mysql\"") && !shown.contains("secret"), "{shown}");
    }
}
