-- Persistent presence (PROTOCOL-NOTES N46, N47; docs/agents.md): one record per (room, actor,
-- clientId) of a member that announced `persistent: true`, kept across its connections, node
-- restarts and node loss until `data: null` or its TTL. Released once applied: never edit,
-- add a new migration.
CREATE TABLE presence_members (
    -- <project>/<app>/<room>
    room                  TEXT    NOT NULL,
    actor                 TEXT    NOT NULL,
    -- '' without a clientId.
    client_id             TEXT    NOT NULL,
    -- The presence map as clients see it (packed MessagePack, without `wake`).
    data                  BLOB    NOT NULL,
    -- The packed `advertisement` value ('' without one); a change bumps the version.
    advertisement         BLOB    NOT NULL,
    advertisement_version INTEGER NOT NULL,
    -- The `wake` object as JSON; NULL: not wakeable. Never sent to clients.
    wake                  TEXT,
    -- 'online', 'offline' or 'waking'.
    status                TEXT    NOT NULL,
    -- The node of the last announcing connection.
    node                  TEXT    NOT NULL,
    -- Unix seconds of the first announce.
    joined_at             INTEGER NOT NULL,
    -- Unix ms until which a 'waking' record waits for its member to connect.
    waking_until          INTEGER NOT NULL DEFAULT 0,
    -- Unix seconds after which a record that is not online is removed.
    expires_at            INTEGER NOT NULL,
    PRIMARY KEY (room, actor, client_id)
) STRICT;
CREATE INDEX presence_members_expiry ON presence_members (expires_at);
CREATE INDEX presence_members_waking ON presence_members (status, waking_until);
CREATE INDEX presence_members_node ON presence_members (node, status);
