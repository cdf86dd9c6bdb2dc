-- no-transaction
-- The actors released since the last restore-record prune, found without a scan (issue 36).
-- Built CONCURRENTLY (nodes keep reading and writing restore_records meanwhile), which Postgres
-- refuses inside a transaction: hence no transaction and this one statement. A build that fails
-- leaves an invalid index, which `skua migrate` drops before its next attempt
-- (crates/store/src/postgres_migrate.rs). Released once applied: never edit, add a new
-- migration.
CREATE INDEX CONCURRENTLY IF NOT EXISTS restore_records_released_seq
    ON restore_records (released_seq) WHERE released_seq IS NOT NULL;
