-- When the node that held a restore record was last seen alive (issue 19, docs/recovery.md):
-- set (unix ms) when the record is released for a lapsed node, or for an earlier run of a node
-- that restarted under the same id, rather than by its connection; NULL when unknown, and
-- cleared by every save and release of the record. The record's history offsets are then those
-- of the last subscription change, and recovery also skips what history stamped before this
-- time minus history_recovery_margin. Nullable, so nodes of the previous release keep working
-- against the migrated schema. Released once applied: never edit, add a new migration.
ALTER TABLE restore_records ADD COLUMN holder_seen_ms INTEGER;
