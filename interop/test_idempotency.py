"""Idempotent publish (issue 19, item 4; docs/protocol.md "Idempotent publish") with the real SDK.

The NoLag Python SDK 2.6.0 has no way to add a key to `emit` (it builds the publish frame from
fixed fields), so these tests send the `publish` frame through the SDK's own raw send
(`NoLag._send`, which `emit` uses too) with an `idempotencyKey` and a `msgRef`, and read the
`published` / `error` reply from the frames the traced client received (TracedNoLag). The
subscriber side is the unmodified SDK. The REST publish has no method on the SDK's `NoLagApi`,
so it is called through `NoLagApi._request` (the client's authenticated request path) and
aiohttp for the `Idempotency-Key` header.

Under SKUA_INTEROP_CLUSTER=1 the two publishers of a key sit on different nodes: the keys are
shared through Redis.
"""

import asyncio
import itertools
import time
import uuid

import aiohttp
from nolag import NoLagApi, NoLagApiOptions

from helpers import T, Recorder, connect, sentinel, subscribe_ok

TOPIC = "demo/general/messages"
LOGGED = "demo/general/tasks"
DEV_API_KEY = "skua-dev-api-key"
_refs = itertools.count(1)


def node_urls(server) -> list[str]:
    """Every node's WebSocket URL (one for a single server)."""
    return [n.url for n in getattr(server, "nodes", [server])]


def http_base(server) -> str:
    return f"http://127.0.0.1:{getattr(server, 'nodes', [server])[-1].port}/v1"


def key() -> str:
    return f"order-{uuid.uuid4().hex}"


async def publish_keyed(client, topic: str, data, idempotency_key: str | None) -> dict:
    """Sends one v2 publish with a msgRef (and the key) through the SDK's raw send and returns
    the reply frame to it: `published` or `error`."""
    msg_ref = f"idem-{next(_refs)}"
    frame = {"type": "publish", "topic": topic, "data": data, "qos": 1, "msgRef": msg_ref}
    if idempotency_key is not None:
        frame["idempotencyKey"] = idempotency_key
    await client._send(frame, "publish", topic)
    return await client.wait_frame(
        lambda f: f.get("msgRef") == msg_ref and f.get("type") in ("published", "error"),
        what=f"the reply to {msg_ref}",
    )


async def subscriber(server, topic: str = TOPIC):
    sub = await connect(node_urls(server)[0], "dev-token-alice")
    inbox = Recorder("alice")
    sub.on(topic, inbox)
    await subscribe_ok(sub, topic)
    return sub, inbox


def copies(inbox: Recorder, data) -> int:
    return sum(1 for d in inbox.data if d == data)


async def test_the_same_key_twice_is_delivered_once_and_acked_as_a_duplicate(skua):
    _, inbox = await subscriber(skua)
    urls = node_urls(skua)
    first = await connect(urls[-1], "dev-token-bob")
    retry = await connect(urls[0], "dev-token-bob")  # the other node of a cluster
    k, payload = key(), {"order": 1}

    ack1 = await publish_keyed(first, TOPIC, payload, k)
    assert ack1["type"] == "published" and "duplicate" not in ack1, ack1
    ack2 = await publish_keyed(retry, TOPIC, payload, k)
    assert ack2 == {"type": "published", "topic": TOPIC, "msgRef": ack2["msgRef"], "duplicate": True}, ack2

    # The retry's connection publishes a sentinel after it: had the duplicate been delivered,
    # it would have arrived before the sentinel (one publisher's messages keep their order).
    end = sentinel()
    await retry.emit(TOPIC, end)
    await inbox.wait_data(end)
    await inbox.wait_data(payload)
    assert copies(inbox, payload) == 1, inbox.data
    # A third try on the first connection is a duplicate too.
    ack3 = await publish_keyed(first, TOPIC, payload, k)
    assert ack3.get("duplicate") is True, ack3


async def test_different_keys_and_no_key_are_each_delivered(skua):
    _, inbox = await subscriber(skua)
    bob = await connect(node_urls(skua)[-1], "dev-token-bob")
    payload = {"same": "payload"}
    for k in (key(), key(), None, None):
        ack = await publish_keyed(bob, TOPIC, payload, k)
        assert ack["type"] == "published" and "duplicate" not in ack, ack
    await inbox.wait_for_all(lambda calls: copies(inbox, payload) == 4, what="four copies")


async def test_a_key_is_delivered_again_after_its_window(skua_factory):
    window_s = 1.0
    server = skua_factory("--idempotency-window", "1s")
    _, inbox = await subscriber(server)
    bob = await connect(node_urls(server)[-1], "dev-token-bob")
    k, payload = key(), {"windowed": 1}
    started = time.monotonic()
    assert "duplicate" not in await publish_keyed(bob, TOPIC, payload, k)
    assert (await publish_keyed(bob, TOPIC, payload, k)).get("duplicate") is True
    # Time has to pass (no event marks a window's end): repeat until the key is free again.
    while (await publish_keyed(bob, TOPIC, payload, k)).get("duplicate"):
        assert time.monotonic() - started < window_s + T, "the key was never freed"
        await asyncio.sleep(0.1)
    assert time.monotonic() - started >= window_s * 0.9, "freed before its window ended"
    await inbox.wait_for_all(lambda calls: copies(inbox, payload) == 2, what="two copies")


async def test_a_refused_publish_does_not_take_its_key(skua):
    _, inbox = await subscriber(skua)
    urls = node_urls(skua)
    viewer = await connect(urls[-1], "dev-token-viewer")  # observers may not publish
    bob = await connect(urls[0], "dev-token-bob")
    k, payload = key(), {"retried": True}
    refused = await publish_keyed(viewer, TOPIC, payload, k)
    assert refused["type"] == "error", refused
    ack = await publish_keyed(bob, TOPIC, payload, k)
    assert ack["type"] == "published" and "duplicate" not in ack, ack
    await inbox.wait_data(payload)


async def test_a_key_too_long_or_not_a_string_gets_an_error_frame_and_is_not_published(skua):
    _, inbox = await subscriber(skua)
    bob = await connect(node_urls(skua)[-1], "dev-token-bob")
    too_long = await publish_keyed(bob, TOPIC, {"bad": 1}, "k" * 129)
    assert too_long["error"] == "invalid_idempotency_key" and "128" in too_long["hint"], too_long
    empty = await publish_keyed(bob, TOPIC, {"bad": 2}, "")
    assert empty["error"] == "invalid_idempotency_key", empty
    not_string = await publish_keyed(bob, TOPIC, {"bad": 3}, 17)
    assert not_string["error"] == "invalid_frame" and not_string["hint"] == "idempotencyKey must be a string", not_string
    end = sentinel()
    await bob.emit(TOPIC, end)
    await inbox.wait_data(end)
    assert not any(isinstance(d, dict) and "bad" in d for d in inbox.data), inbox.data


async def test_rest_publish_with_the_same_key_is_a_duplicate_and_delivered_once(skua):
    _, inbox = await subscriber(skua, LOGGED)
    k, payload = key(), {"rest": 1}
    async with NoLagApi(DEV_API_KEY, NoLagApiOptions(base_url=http_base(skua))) as api:
        body = {"topic": LOGGED, "data": payload, "idempotencyKey": k}
        first = await api._request("POST", "/publish", json=body)
        assert "duplicate" not in first and first["msgId"], first
        again = await api._request("POST", "/publish", json=body)
        assert again == {**first, "duplicate": True}, (first, again)
    # The header works the same, and a WebSocket publish with the key is a duplicate too.
    headers = {"Authorization": f"Bearer {DEV_API_KEY}", "Idempotency-Key": k}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{http_base(skua)}/publish", json={"topic": LOGGED, "data": payload}, headers=headers) as r:
            assert r.status == 200, await r.text()
            assert await r.json() == {**first, "duplicate": True}
        clash = {**headers, "Idempotency-Key": "other"}
        async with http.post(f"{http_base(skua)}/publish", json=body, headers=clash) as r:
            assert r.status == 400, await r.text()
    bob = await connect(node_urls(skua)[0], "dev-token-bob")
    assert (await publish_keyed(bob, LOGGED, payload, k)).get("duplicate") is True
    end = sentinel()
    await bob.emit(LOGGED, end)
    await inbox.wait_data(end)
    await inbox.wait_data(payload)
    assert copies(inbox, payload) == 1, inbox.data
