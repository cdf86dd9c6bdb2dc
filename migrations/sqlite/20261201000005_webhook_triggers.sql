-- Trigger webhooks (PROTOCOL-NOTES N44, N45; docs/webhooks.md): the outbox of logged topics'
-- triggers and the dead letters of webhook deliveries that failed for good. Released once
-- applied: never edit, add a new migration.

-- A logged message whose trigger is not delivered yet, written in the message's transaction.
-- Its deliveryId is the message's msgId. It goes with its message (retention).
CREATE TABLE trigger_outbox (
    seq         INTEGER PRIMARY KEY REFERENCES log_messages (seq) ON DELETE CASCADE,
    msg_id      TEXT    NOT NULL UNIQUE,
    -- The node run sending it (node id and a per-run suffix).
    owner       TEXT    NOT NULL,
    -- Unix ms until which the owner has it; after that any node may take it over.
    lease_until INTEGER NOT NULL,
    -- Delivery attempts started so far, by any owner.
    attempts    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX trigger_outbox_lease ON trigger_outbox (lease_until);

-- A webhook delivery that failed after its last retry; operators list, retry and purge them.
-- At most a configured number per project (the oldest are dropped).
CREATE TABLE webhook_dead_letters (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Kept across retries: receivers de-duplicate on it.
    delivery_id TEXT    NOT NULL UNIQUE,
    project     TEXT    NOT NULL,
    -- 'trigger'
    kind        TEXT    NOT NULL,
    -- <project>/<app>/<room>/<topic>
    topic       TEXT    NOT NULL,
    -- The URL posted to.
    target      TEXT    NOT NULL,
    -- The request body, byte for byte.
    body        BLOB    NOT NULL,
    last_error  TEXT    NOT NULL,
    attempts    INTEGER NOT NULL,
    -- Unix ms.
    failed_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_dead_letters_project ON webhook_dead_letters (project, id);
