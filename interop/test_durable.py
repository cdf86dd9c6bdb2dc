"""Logged topics through the SDK (N24): stored messages arrive with msgId and requiresAck.

NoLag 2.6.0 surfaces `msgId` as MessageMeta.msg_id and never sends `ack` itself (it has no ack
code path and sends no clientId), so to the SDK a logged topic looks like any other plus an id:
"a client that never acks sees no difference on the wire" (N24). Acks, clientId sessions and
replay frames are exercised byte for byte by the raw-client tests in crates/server/tests/it/durable.rs.
"""

import uuid

from helpers import Recorder, connect, emit_ack, subscribe_ok

LOGGED = "demo/general/tasks"
PLAIN = "demo/general/messages"


async def test_logged_topic_messages_carry_a_stored_msg_id(skua):
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("bob messages")
    bob.on_any(lambda topic, data, meta: inbox(topic, data, meta))
    await subscribe_ok(bob, LOGGED)
    await subscribe_ok(bob, PLAIN)
    assert await emit_ack(alice, LOGGED, {"job": 1}) is None
    assert await emit_ack(alice, PLAIN, {"chat": 1}) is None
    await inbox.wait_count(2)
    by_topic = {topic: (data, meta) for topic, data, meta in inbox.calls}
    data, meta = by_topic[LOGGED]
    assert data == {"job": 1}
    assert uuid.UUID(meta.msg_id).version == 7, meta.msg_id
    assert meta.is_replay is False and meta.sender == "alice"
    raw = [f for f in bob.received if isinstance(f, dict) and f.get("type") == "message" and f["topic"] == LOGGED][0]
    assert raw["requiresAck"] is True and raw["msgId"] == meta.msg_id
    data, meta = by_topic[PLAIN]
    assert data == {"chat": 1} and meta.msg_id is None
