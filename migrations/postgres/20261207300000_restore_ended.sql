-- When a restore record last ended (unix seconds; issue 31, docs/protocol.md "Restore records"):
-- set by every release (by its connection or for its node), kept through claims and saves.
-- Records of one actor that ended within `restore_merge_window` of each other (two tabs that
-- dropped together) give each reconnect the union of their plain subscriptions. NULL: never
-- released (or released by a node of the previous release, which does not set it). Nullable, so
-- nodes of the previous release keep working against the migrated schema. Released once applied:
-- never edit, add a new migration.
ALTER TABLE restore_records ADD COLUMN ended_s BIGINT;
