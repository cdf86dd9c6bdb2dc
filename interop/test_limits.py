"""Publish limits as the SDK sees them (N17, N18, N4): rate limit, payload size."""

from nolag import NoLagServerError

from helpers import Recorder, connect, emit_ack, subscribe_ok

TOPIC = "demo/general/messages"


async def test_rate_limit_rejects_past_the_burst(skua_factory):
    # N18: a token bucket with a burst of N; the window is long so nothing refills mid-test.
    skua = skua_factory("--rate-limit", "5", "--rate-limit-window", "1h")
    alice = await connect(skua.url, "dev-token-alice")
    results = [await emit_ack(alice, TOPIC, {"n": i}) for i in range(8)]
    assert results[:5] == [None] * 5, results
    refs = [m["msgRef"] for m in alice.sent if m["type"] == "publish"]
    for err, ref in zip(results[5:], refs[5:]):
        assert isinstance(err, NoLagServerError), repr(err)
        assert (err.code, err.error, err.topic, err.msg_ref) == (42910, "rate_limit_exceeded", TOPIC, ref)


async def test_payload_size_limit(skua_factory):
    skua = skua_factory("--max-message-size", "1000")
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("bob messages")
    bob.on(TOPIC, inbox)
    await subscribe_ok(bob, TOPIC)

    err = await emit_ack(alice, TOPIC, b"x" * 2000)
    assert isinstance(err, NoLagServerError), repr(err)
    assert (err.code, err.error, err.topic) == (42930, "message_too_large", TOPIC)
    assert [f["maxSizeBytes"] for f in alice.frames("error")] == [1000]
    # 995 bytes of bin pack to 998 bytes: within the limit.
    assert await emit_ack(alice, TOPIC, b"y" * 995) is None
    (data, _) = await inbox.wait_for(lambda d, m: True)
    assert data == b"y" * 995 and len(inbox.calls) == 1


async def test_largest_default_payload_reaches_the_sdk(skua):
    """N4: the default limit is 921 600 bytes of packed `data`; a message that size still fits
    in one frame the SDK accepts (websockets' 1 MiB default)."""
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("bob messages")
    bob.on(TOPIC, inbox)
    await subscribe_ok(bob, TOPIC)
    big = bytes(range(256)) * 3600  # 921 600 bytes; packed with its 5-byte bin32 header: too big
    err = await emit_ack(alice, TOPIC, big)
    assert isinstance(err, NoLagServerError) and err.code == 42930, repr(err)
    fits = big[:921_600 - 5]
    assert await emit_ack(alice, TOPIC, fits) is None
    (data, meta) = await inbox.wait_for(lambda d, m: True, timeout=10)
    assert data == fits and meta.sender == "alice"
    assert bob.connected
