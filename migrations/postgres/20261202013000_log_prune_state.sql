-- Retention pruning's state, shared by every node of a cluster (issue 23, item 8): when logged
-- messages were last pruned (unix seconds; nodes skip their turn for half of log_prune_interval
-- after it) and the last log_messages.seq the per-topic caps looked at (only topics with newer
-- messages are checked next time). One row.
CREATE TABLE log_prune_state (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_at BIGINT  NOT NULL,
    seen_seq  BIGINT  NOT NULL
);
INSERT INTO log_prune_state (id, pruned_at, seen_seq) VALUES (1, 0, 0);
