-- Restore-record pruning's state, shared by every node of a cluster (issue 36): when restore
-- records were last pruned (unix seconds; nodes skip their turn for half of
-- restore_prune_interval after it) and the last released_seq the per-actor cap looked at (only
-- actors released since are checked next time, so no window scan of the whole table). One row.
-- A new table: takes no lock on a table in use. Released once applied: never edit, add a new
-- migration.
CREATE TABLE restore_prune_state (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_at BIGINT  NOT NULL,
    seen_seq  BIGINT  NOT NULL
);
INSERT INTO restore_prune_state (id, pruned_at, seen_seq) VALUES (1, 0, 0);
