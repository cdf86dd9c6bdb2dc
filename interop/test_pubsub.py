"""Publish/subscribe through the SDK: payload fidelity, metadata, N16, acks and errors."""

import time

import msgpack
import pytest
from nolag import EmitOptions, NoLagServerError

from helpers import Recorder, T, barrier, connect, emit_ack, sentinel, strict_equal, subscribe_ack, subscribe_ok

TOPIC = "demo/general/messages"

PAYLOADS = [
    b"\x00\x01\xfe\xff binary",
    b"",
    "héllo wörld 🦅🌍👋🏽",
    "",
    3.141592653589793,
    -0.0,
    1e300,
    0,
    1,
    -1,
    -33,
    127,
    255,
    65536,
    2**32,
    2**63 - 1,
    2**64 - 1,
    -(2**31),
    -(2**63),
    True,
    False,
    None,
    [],
    {},
    [1, "two", 3.5, None, True, b"\x07", ["deep", ["deeper", {"k": "v"}]]],
    {"text": "hi", "n": -12345678901, "f": 2.5, "nested": {"list": [1, {"a": None}], "bin": b"\xff"}, "emoji": "🐦"},
    {"big": "x" * 100_000},
]


async def test_payloads_arrive_exactly(skua):
    bob = await connect(skua.url, "dev-token-bob")
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice messages")
    alice.on(TOPIC, inbox)
    await subscribe_ok(alice, TOPIC)

    before_ms = time.time() * 1000
    for payload in PAYLOADS:
        await bob.emit(TOPIC, payload)
    await inbox.wait_count(len(PAYLOADS), timeout=T * 2)
    after_ms = time.time() * 1000

    assert len(inbox.calls) == len(PAYLOADS)
    for sent, (got, meta) in zip(PAYLOADS, inbox.calls):
        assert strict_equal(got, sent), f"sent {sent!r:.200}, got {got!r:.200}"
        # N19: `from` and `timestamp` (unix ms, set by the accepting edge).
        assert meta.sender == "bob"
        assert meta.timestamp is not None and before_ms - 5000 <= meta.timestamp <= after_ms + 5000, meta.timestamp
        assert meta.filter is None and meta.is_replay is False
    # N2: the publisher's encoding of `data` is forwarded untouched: the very bytes the SDK packed
    # appear in the frame the subscriber got.
    frames = [raw for raw, f in zip(alice.received_raw, alice.received) if isinstance(f, dict) and f.get("type") == "message"]
    for sent, raw in zip(PAYLOADS, frames):
        assert msgpack.packb(sent) in raw, f"data of {sent!r:.80} was re-encoded"


async def test_publisher_never_receives_own_message(skua):
    """N16: the publishing actor never receives its own message, on any of its connections,
    even with echo=True. The SDK disagrees: EmitOptions.echo defaults to True with the comment
    "you receive your own messages"; the documents win ("An `echo` field is accepted for
    compatibility but does not change that")."""
    alice = await connect(skua.url, "dev-token-alice", "alice-1")
    alice2 = await connect(skua.url, "dev-token-alice", "alice-2")
    bob = await connect(skua.url, "dev-token-bob")
    inboxes = {c: Recorder(f"{c.label} messages") for c in (alice, alice2, bob)}
    for c, inbox in inboxes.items():
        c.on(TOPIC, inbox)
        await subscribe_ok(c, TOPIC)

    own = {"from": "alice", "echo": True}
    assert await emit_ack(alice, TOPIC, own, EmitOptions(echo=True)) is None
    await alice.emit(TOPIC, {"from": "alice", "echo": "default"})
    # bob gets both; only after that does bob publish the sentinel, so anything the server
    # wrongly fanned out to alice's connections was queued before it.
    await inboxes[bob].wait_data({"from": "alice", "echo": "default"})
    mark = sentinel(by="bob")
    await bob.emit(TOPIC, mark)
    for c in (alice, alice2):
        await inboxes[c].wait_data(mark)
        assert inboxes[c].data == [mark], f"{c.label} got {inboxes[c].data!r}"
    assert inboxes[bob].data == [own, {"from": "alice", "echo": "default"}]


async def test_subscribe_callback_none_on_success(skua):
    alice = await connect(skua.url, "dev-token-alice")
    assert await subscribe_ack(alice, TOPIC) is None
    assert await subscribe_ack(alice, "demo/random/events") is None
    # alice holds the only grant of the private room.
    assert await subscribe_ack(alice, "demo/ops/messages") is None


@pytest.mark.parametrize(
    "token,topic",
    [
        ("dev-token-alice", "demo/nope/messages"),
        ("dev-token-bob", "demo/ops/messages"),
        ("dev-token-alice", "demo/general/nope"),
        ("dev-token-alice", "other-app/general/messages"),
    ],
    ids=["unknown-room", "private-room-as-bob", "unknown-topic-name", "unknown-app"],
)
async def test_subscribe_callback_gets_unknown_topic(skua, token, topic):
    client = await connect(skua.url, token)
    errors = Recorder("error events")
    client.on("error", errors)
    err = await subscribe_ack(client, topic)
    assert isinstance(err, NoLagServerError), repr(err)
    assert err.code == 42940
    assert err.error == "unknown_topic"
    assert err.topic == topic  # N11: the topic exactly as sent
    assert err.hint  # v2 errors carry a hint
    assert errors.calls and errors.calls[-1][0] is err  # observers see it too


async def test_emit_callback_resolves_on_published(skua):
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("bob messages")
    bob.on(TOPIC, inbox)
    await subscribe_ok(bob, TOPIC)

    assert await emit_ack(alice, TOPIC, {"n": 1}) is None
    published = alice.frames("published")
    sent_ref = [m for m in alice.sent if m["type"] == "publish"][0]["msgRef"]
    assert published == [{"type": "published", "topic": TOPIC, "msgRef": sent_ref}]
    (_, meta) = await inbox.wait_data({"n": 1})
    assert meta.sender == "alice"


@pytest.mark.parametrize(
    "token,topic",
    [
        ("dev-token-alice", "demo/nope/messages"),
        ("dev-token-alice", "demo/general/nope"),
        ("dev-token-bob", "demo/ops/messages"),
        # N29: an observer may read the room but never publish.
        ("dev-token-viewer", "demo/general/messages"),
    ],
    ids=["unknown-room", "unknown-topic-name", "private-room-as-bob", "observer"],
)
async def test_emit_error_reaches_callback(skua, token, topic):
    client = await connect(skua.url, token)
    err = await emit_ack(client, topic, {"text": "nobody hears this"})
    sent_ref = [m for m in client.sent if m["type"] == "publish"][0]["msgRef"]
    assert isinstance(err, NoLagServerError), repr(err)
    assert (err.code, err.error) == (42940, "unknown_topic")
    assert err.topic == topic
    assert err.msg_ref == sent_ref
    assert client.frames("published") == []


async def test_retained_message_reaches_later_subscriber(skua):
    """N20: the last retained message is delivered right after `subscribed` to a later
    subscriber; N33: never to the publishing actor."""
    alice = await connect(skua.url, "dev-token-alice")
    assert await emit_ack(alice, "demo/random/status", {"v": 1}, EmitOptions(retain=True)) is None
    assert await emit_ack(alice, "demo/random/status", {"v": 2}, EmitOptions(retain=True)) is None

    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("bob status")
    bob.on("demo/random/status", inbox)
    await subscribe_ok(bob, "demo/random/status")
    (data, meta) = await inbox.wait_for(lambda d, m: True)
    assert data == {"v": 2} and meta.sender == "alice"

    own = Recorder("alice status")
    alice.on("demo/random/status", own)
    await subscribe_ok(alice, "demo/random/status")
    mark = sentinel()
    await bob.emit("demo/random/status", mark)
    await own.wait_data(mark)
    assert own.data == [mark]


async def test_unsubscribe_stops_delivery(skua):
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("alice messages")
    alice.on_any(lambda topic, data, meta: inbox(topic, data))
    await subscribe_ok(alice, TOPIC)
    await subscribe_ok(alice, "demo/general/status")
    await bob.emit(TOPIC, {"n": 1})
    await inbox.wait_for(lambda t, d: d == {"n": 1})

    await alice.unsubscribe(TOPIC)
    await barrier(alice)
    assert alice.frames("unsubscribed") == [{"type": "unsubscribed", "topic": TOPIC}]
    mark = sentinel()
    await bob.emit(TOPIC, {"n": 2})
    await bob.emit("demo/general/status", mark)
    await inbox.wait_for(lambda t, d: d == mark)
    assert inbox.calls == [(TOPIC, {"n": 1}), ("demo/general/status", mark)]
