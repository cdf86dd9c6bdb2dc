-- The message log of logged topics (PROTOCOL-NOTES N24-N26, docs/durable.md): stored messages,
-- the consumers they are kept for, and what is pending (delivered but not acked, or not yet
-- delivered) per consumer. Released once applied: never edit, add a new migration.

-- One row per message published to a logged topic, in store order.
CREATE TABLE log_messages (
    seq          BIGSERIAL PRIMARY KEY,
    -- The UUIDv7 clients see as msgId.
    msg_id       TEXT     NOT NULL UNIQUE,
    -- <project>/<app>/<room>/<topic>
    topic        TEXT     NOT NULL,
    filter_key   TEXT,
    publisher    TEXT     NOT NULL,
    timestamp_ms BIGINT   NOT NULL,
    qos          SMALLINT NOT NULL,
    -- The publish's data, byte for byte.
    data         BYTEA    NOT NULL,
    -- Unix seconds; retention by age.
    created_at   BIGINT   NOT NULL
);
CREATE INDEX log_messages_topic_seq ON log_messages (topic, seq);
CREATE INDEX log_messages_created_at ON log_messages (created_at);

-- A persistent session's subscription to a logged topic, or a load-balanced group of them.
CREATE TABLE log_consumers (
    id         TEXT    PRIMARY KEY,
    topic      TEXT    NOT NULL,
    -- The actor whose session (or group member) opened it: its own messages are not kept for
    -- it (N16).
    actor      TEXT    NOT NULL,
    -- No filters: receives every message of the topic.
    wildcard   BOOLEAN NOT NULL,
    -- Unix seconds; refreshed while a member is connected.
    expires_at BIGINT  NOT NULL
);
CREATE INDEX log_consumers_topic ON log_consumers (topic);

-- The filter keys of a filtered consumer.
CREATE TABLE log_consumer_filters (
    consumer_id TEXT NOT NULL REFERENCES log_consumers (id) ON DELETE CASCADE,
    filter_key  TEXT NOT NULL,
    PRIMARY KEY (consumer_id, filter_key)
);

-- A message not yet acked by a consumer. Held while a connection has it in flight.
CREATE TABLE log_pending (
    consumer_id    TEXT    NOT NULL REFERENCES log_consumers (id) ON DELETE CASCADE,
    seq            BIGINT  NOT NULL REFERENCES log_messages (seq) ON DELETE CASCADE,
    msg_id         TEXT    NOT NULL,
    -- How often it was handed to a connection; above 1 it is a redelivery (isReplay).
    deliveries     INTEGER NOT NULL DEFAULT 0,
    holder_session TEXT,
    holder_node    TEXT,
    holder_conn    BIGINT,
    PRIMARY KEY (consumer_id, seq)
);
CREATE UNIQUE INDEX log_pending_msg ON log_pending (consumer_id, msg_id);
CREATE INDEX log_pending_seq ON log_pending (seq);
CREATE INDEX log_pending_holder_session ON log_pending (holder_session) WHERE holder_session IS NOT NULL;
CREATE INDEX log_pending_holder_node ON log_pending (holder_node, holder_conn) WHERE holder_node IS NOT NULL;
