-- The actors released since the last restore-record prune, found without a scan (issue 36).
-- (Postgres builds it concurrently; SQLite has one writer, and builds it in the migration's
-- transaction.) Released once applied: never edit, add a new migration.
CREATE INDEX IF NOT EXISTS restore_records_released_seq
    ON restore_records (released_seq) WHERE released_seq IS NOT NULL;
