-- Restore records (PROTOCOL-NOTES N23): the subscriptions that `auth` with `reconnect: true`
-- restores, one row per session key. Released once applied: never edit, add a new migration.
CREATE TABLE restore_records (
    -- The session key. A key without a clientId stores '' here: a clientId is never empty, so
    -- '' cannot collide, and the primary key stays three NOT NULL columns.
    project    TEXT    NOT NULL,
    actor      TEXT    NOT NULL,
    client_id  TEXT    NOT NULL DEFAULT '',
    -- The record in the store's own MessagePack encoding (crates/store/src/record.rs).
    record     BLOB    NOT NULL,
    -- Unix seconds from which the record is gone; NULL while a connection holds the session.
    expires_at INTEGER,
    PRIMARY KEY (project, actor, client_id)
) STRICT;

-- Pruning finds expired rows without a scan; rows in use (NULL) stay out of the index.
CREATE INDEX restore_records_expires_at ON restore_records (expires_at) WHERE expires_at IS NOT NULL;
