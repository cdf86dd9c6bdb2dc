-- The control plane's registry (issue 5): projects, apps, rooms, grants, lobbies, actors and
-- access tokens, one row per object. Edges load the whole registry when `registry_version`
-- moves (docs/control-plane.md), so no column but the keys is ever queried: the attributes
-- are one JSON document per row (crates/core/src/registry_store.rs), which lets them grow
-- without schema changes. Released once applied: never edit, add a new migration.
CREATE TABLE registry_objects (
    -- project, app, room, grant, lobby, actor or token.
    kind    TEXT NOT NULL,
    -- Unique per kind: the id, `app/slug` for rooms, `project/slug` for lobbies.
    key     TEXT NOT NULL,
    -- The owning project (the owning actor for tokens).
    project TEXT NOT NULL,
    -- The record as JSON. Tokens hold only the SHA-256 of the token, never the token.
    spec    TEXT NOT NULL,
    PRIMARY KEY (kind, key)
);

-- One row: incremented by every change set, in the same transaction. Edges poll it; writers
-- compare-and-set it, which serialises concurrent control-plane replicas.
CREATE TABLE registry_version (
    id      SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO registry_version (id, version) VALUES (1, 0);

-- Publishes per project per calendar month (UTC, `YYYY-MM`), for the monthly quota (42920).
CREATE TABLE registry_usage (
    project  TEXT    NOT NULL,
    period   TEXT    NOT NULL,
    messages BIGINT NOT NULL,
    PRIMARY KEY (project, period)
);

-- Authenticated connections of every node, for the control plane's ListConnections in a
-- cluster: each node replaces what changed on each propagator tick (docs/control-plane.md).
CREATE TABLE registry_connections (
    node            TEXT    NOT NULL,
    conn            TEXT    NOT NULL,
    project         TEXT    NOT NULL,
    actor           TEXT    NOT NULL,
    client_id       TEXT    NOT NULL,
    connected_at_ms BIGINT  NOT NULL,
    subscriptions   BIGINT  NOT NULL,
    PRIMARY KEY (node, conn)
);
CREATE INDEX registry_connections_project ON registry_connections (project, actor);

-- When each node last wrote its connections: rows of nodes silent for long are ignored.
CREATE TABLE registry_nodes (
    node       TEXT    NOT NULL PRIMARY KEY,
    seen_at_ms BIGINT  NOT NULL
);
