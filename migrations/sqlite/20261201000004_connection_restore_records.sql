-- Restore records per connection (issue 13, item 6). A connection of an actor without clientId
-- keeps its own row: client_id holds '#' followed by the record's id ('#' is never part of a
-- clientId, so these rows cannot collide with a session's). `auth` with `reconnect: true`
-- claims the actor's row released last; released_seq is that order: set by each release, NULL
-- while a connection holds the row. node: the node whose connection saved or claimed the row
-- last, so that the rows a lapsed node held are released for it (NULL in rows of earlier
-- releases). Released once applied: never edit, add a new migration.
ALTER TABLE restore_records ADD COLUMN released_seq INTEGER;
ALTER TABLE restore_records ADD COLUMN node TEXT;
-- Releasing a lapsed node's rows finds the rows in use without a scan.
CREATE INDEX restore_records_node ON restore_records (node) WHERE expires_at IS NULL;
