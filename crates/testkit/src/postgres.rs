//! A fresh Postgres database per test, for tests that run nodes on Postgres (STYLE.md §8):
//! `skua-conformance`'s [`TestDatabase`](skua_conformance::postgres::TestDatabase), migrated
//! through `skua migrate`'s path.
//!
//! Needs `SKUA_TEST_POSTGRES_URL`, an admin URL whose role may create databases. Unset, the
//! test says `SKIPPED: …` and passes, except under `CI=true`, where it fails.

use std::ops::Deref;

pub use skua_conformance::postgres::with_database;

/// A database of its own, dropped (best effort) with this value; its `name`, `url` and methods
/// are the inner [`skua_conformance::postgres::TestDatabase`]'s.
#[derive(Debug)]
pub struct TestDatabase(skua_conformance::postgres::TestDatabase);

impl TestDatabase {
    /// Creates an empty database, or `None` when skipped.
    ///
    /// # Panics
    /// When the variable is unset under `CI=true`, or Postgres refuses.
    pub async fn create() -> Option<Self> {
        skua_conformance::postgres::TestDatabase::create().await.map(Self)
    }

    /// Creates and migrates (`skua migrate`'s path) a database, or `None` when skipped.
    ///
    /// # Panics
    /// When the variable is unset under `CI=true`, or Postgres refuses.
    pub async fn migrated() -> Option<Self> {
        skua_conformance::postgres::TestDatabase::migrated_by(|url| async move {
            skua_server::node::migrate(&url).await.map(|_| ())
        })
        .await
        .map(Self)
    }
}

impl Deref for TestDatabase {
    type Target = skua_conformance::postgres::TestDatabase;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
