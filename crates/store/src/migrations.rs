//! The schema migrations of `migrations/{sqlite,postgres}/`, compiled into the binary.
//!
//! Embedded with `include_str!` and handed to [`Migrator::with_migrations`], which is what
//! `sqlx::migrate!` expands to, minus sqlx's `macros` feature: that feature builds a proc-macro
//! crate and a second (host) copy of the bundled SQLite (shared/CRATES.md). A deployment needs
//! no copy of the folder. Versions, descriptions and checksums are computed exactly as sqlx's
//! folder resolver does, so `sqlx migrate run` against the same database agrees with us; a unit
//! test checks this, and that every file of each folder is listed here.

use std::borrow::Cow;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// One migration file: its name in its folder and its SQL.
pub(crate) struct Embedded {
    file: &'static str,
    sql: &'static str,
}

macro_rules! embedded {
    ($dir:literal: $($file:literal),+ $(,)?) => {
        &[$(Embedded {
            file: $file,
            sql: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/", $dir, "/", $file)),
        }),+]
    };
}

/// `migrations/sqlite/`, oldest first. Append only (migrations/README.md).
pub(crate) const SQLITE: &[Embedded] = embedded!("sqlite":
    "20261201000001_restore_records.sql",
    "20261201000002_message_log.sql",
    "20261201000003_registry.sql",
    "20261201000004_connection_restore_records.sql",
    "20261201000005_webhook_triggers.sql",
    "20261202000001_presence_members.sql",
    "20261202013000_log_prune_state.sql",
    "20261202091500_restore_holder_seen.sql",
    "20261207200000_restore_prune_state.sql",
    "20261207200001_restore_records_released_seq.sql",
    "20261207300000_restore_ended.sql",
    "20261207401337_connection_protocol.sql",
);

/// `migrations/postgres/`, oldest first. Append only (migrations/README.md).
pub(crate) const POSTGRES: &[Embedded] = embedded!("postgres":
    "20261201000001_restore_records.sql",
    "20261201000002_message_log.sql",
    "20261201000003_registry.sql",
    "20261201000004_connection_restore_records.sql",
    "20261201000005_webhook_triggers.sql",
    "20261202000001_presence_members.sql",
    "20261202013000_log_prune_state.sql",
    "20261202091500_restore_holder_seen.sql",
    "20261207200000_restore_prune_state.sql",
    "20261207200001_restore_records_released_seq.sql",
    "20261207300000_restore_ended.sql",
    "20261207401337_connection_protocol.sql",
);

/// A migrator over `files`. It ignores applied migrations it does not know (`ignore_missing`):
/// after a rollback the database holds the newer release's migrations, which only add
/// (migrations/README.md), so the older binary's `skua migrate` applies what it lacks, if
/// anything, and succeeds instead of failing on them ([`unknown`] names them for the logs).
pub(crate) fn migrator(files: &'static [Embedded]) -> Migrator {
    let mut m = Migrator::with_migrations(files.iter().map(Embedded::migration).collect());
    m.set_ignore_missing(true);
    m
}

/// The versions in `applied` (the database's `_sqlx_migrations`) that `files` does not hold:
/// migrations of a newer release.
pub(crate) fn unknown(files: &'static [Embedded], applied: &[i64]) -> Vec<i64> {
    let ours = versions(files);
    applied.iter().copied().filter(|v| !ours.contains(v)).collect()
}

/// Logs the migrations of a newer release found in a database (a rollback), once per run.
pub(crate) fn warn_unknown(backend: &str, unknown: &[i64]) {
    if !unknown.is_empty() {
        tracing::warn!(
            backend,
            versions = ?unknown,
            "The database holds migrations this build does not know (a newer release applied them; this is a \
             rollback). They only add, so this build runs on the schema; they stay applied."
        );
    }
}

/// `SELECT` of the applied migrations' versions (both backends).
pub(crate) const APPLIED: &str = "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version";

/// The versions of `files`, oldest first.
pub(crate) fn versions(files: &'static [Embedded]) -> Vec<i64> {
    files.iter().map(|f| f.parse().0).collect()
}

impl Embedded {
    fn migration(&self) -> Migration {
        let (version, description) = self.parse();
        // sqlx's resolver: a file starting with this comment runs outside a transaction.
        let no_tx = self.sql.starts_with("-- no-transaction");
        Migration::new(version, Cow::Owned(description), MigrationType::Simple, self.sql.into_sql_str(), no_tx)
    }

    /// `<version>_<description>.sql` as sqlx's folder resolver reads it.
    fn parse(&self) -> (i64, String) {
        let (version, rest) = self.file.split_once('_').unwrap_or((self.file, ""));
        // Invariant: the names listed above are fixed at compile time and each one is checked
        // by `listed_files_parse_like_sqlx_reads_the_folder`.
        let version = version.parse().unwrap_or_else(|_| panic!("migration {:?} has no version", self.file));
        (version, rest.trim_end_matches(".sql").replace('_', " "))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn folder(dir: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../migrations").join(dir)
    }

    async fn listed_files_match_the_folder(dir: &str, files: &'static [Embedded]) {
        let ours = migrator(files);
        let theirs = Migrator::new(folder(dir).as_path()).await.unwrap();
        let view = |m: &Migrator| {
            m.iter().map(|m| (m.version, m.description.to_string(), m.checksum.to_vec(), m.no_tx)).collect::<Vec<_>>()
        };
        assert_eq!(view(&ours), view(&theirs), "migrations/{dir} and the list in migrations.rs differ");
        let mut sorted = versions(files);
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, versions(files), "listed oldest first, each version once");
    }

    #[tokio::test]
    async fn listed_files_parse_like_sqlx_reads_the_folder() {
        listed_files_match_the_folder("sqlite", SQLITE).await;
        listed_files_match_the_folder("postgres", POSTGRES).await;
    }

    #[test]
    fn versions_of_a_newer_release_are_unknown() {
        let mut applied = versions(POSTGRES);
        assert!(unknown(POSTGRES, &applied).is_empty());
        applied.push(29_991_231_000_001);
        assert_eq!(unknown(POSTGRES, &applied), vec![29_991_231_000_001]);
        assert!(migrator(POSTGRES).ignore_missing, "a rollback's migrate must not fail on them");
    }

    #[test]
    fn both_backends_have_the_same_versions() {
        assert_eq!(versions(SQLITE), versions(POSTGRES), "migrations/README.md: the folders grow together");
    }
}
