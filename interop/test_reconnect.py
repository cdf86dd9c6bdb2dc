"""Reconnect (N23, N28): when the server drops the socket the SDK reconnects by itself with
`reconnect: true`, and the server restores its subscriptions; the SDK never resubscribes."""

import asyncio

import pytest
from nolag import ConnectionStatus, EmitOptions, SubscribeOptions

from helpers import Recorder, connect, sentinel, subscribe_ok

TOPIC = "demo/general/messages"
FILTERED = "demo/random/events"


@pytest.mark.timeout(30)
async def test_sdk_reconnects_and_keeps_its_subscriptions(skua_factory):
    skua = skua_factory("--idle-timeout", "1s")
    # alice stays silent (no heartbeats), so the server closes her socket 4000 after 1 s.
    alice = await connect(skua.url, "dev-token-alice", heartbeat_interval=0, reconnect=True, reconnect_interval=0.2)
    # bob heartbeats well within the idle timeout and stays connected throughout.
    bob = await connect(skua.url, "dev-token-bob", heartbeat_interval=0.3)
    inbox, filtered = Recorder("alice messages"), Recorder("alice filtered events")
    disconnects, reconnects = Recorder("alice disconnect"), Recorder("alice reconnect")
    alice.on(TOPIC, inbox)
    alice.on(FILTERED, filtered)
    alice.on("disconnect", disconnects)
    alice.on("reconnect", reconnects)
    await subscribe_ok(alice, TOPIC)
    await subscribe_ok(alice, FILTERED, SubscribeOptions(filters=["vip"]))
    await bob.emit(TOPIC, {"n": "before"})
    await inbox.wait_data({"n": "before"})

    (reason,) = await disconnects.wait_for(lambda r: True, timeout=5, what="the idle close")
    assert "4000" in reason, reason
    await reconnects.wait_count(1, timeout=5)
    assert alice.connected

    # Published after the reconnect, on the subscriptions alice made before it. Alice stays
    # silent, so 1 s after each reconnect the server closes her again (and she reconnects); on a
    # loaded machine that can fall between bob's publish and its delivery, and a plain topic
    # keeps nothing for a closed socket (N28). So bob publishes again until one copy arrives:
    # every attempt proves the same thing (the subscriptions came back without a resubscribe).
    await _until_delivered(lambda n: bob.emit(TOPIC, {"n": f"after-{n}"}), inbox, lambda d, *_: str(d.get("n", "")).startswith("after-"))
    marks: list = []

    async def filtered_round(n: int) -> None:
        marks.append(sentinel(n=n))
        await bob.emit(FILTERED, {"plain": True})
        await bob.emit(FILTERED, marks[-1], EmitOptions(filter="vip"))

    await _until_delivered(filtered_round, filtered, lambda d, *_: d in marks)
    # The restored subscription kept its filters: only the "vip" copies arrived, never a plain one.
    assert filtered.data and all(d in marks for d in filtered.data), filtered.data

    # The SDK subscribed once per topic and re-authenticated with reconnect: true.
    subscribes = [m["topic"] for m in alice.sent if m["type"] == "subscribe"]
    assert sorted(subscribes) == sorted([TOPIC, FILTERED])
    auths = [m for m in alice.sent if m["type"] == "auth"]
    assert len(auths) >= 2 and auths[1].get("reconnect") is True
    # N23/N36: restoredSubscriptions lists both, each entry with all five keys.
    restored = alice.frames("auth")[1]["restoredSubscriptions"]
    assert {r["pattern"] for r in restored} == {TOPIC, FILTERED}, restored
    for r in restored:
        assert set(r) == {"pattern", "topic", "load_balance", "load_balance_group", "filters"}, r
        assert r["load_balance"] is False and r["load_balance_group"] is None
    assert {r["pattern"]: r["filters"] for r in restored} == {TOPIC: [], FILTERED: ["vip"]}


async def _until_delivered(send, recorder: Recorder, match, timeout: float = 20, every: float = 2) -> None:
    """Calls `send(attempt)` until `recorder` saw a call matching `match` (see the caller)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempt = 0
    while True:
        await send(attempt)
        try:
            await recorder.wait_for(match, timeout=min(every, max(0.1, deadline - loop.time())), what="a delivery")
            return
        except AssertionError:
            attempt += 1
            if loop.time() >= deadline:
                raise


@pytest.mark.timeout(30)
async def test_presence_comes_back_after_reconnect(skua_factory):
    """The SDK re-sends its presence after reconnecting; the room sees alice leave with the
    dropped socket (N21) and join again."""
    skua = skua_factory("--idle-timeout", "1s")
    alice = await connect(skua.url, "dev-token-alice", heartbeat_interval=0, reconnect=True, reconnect_interval=0.2)
    bob = await connect(skua.url, "dev-token-bob", heartbeat_interval=0.3)
    joins, leaves, reconnects = Recorder("bob join"), Recorder("bob leave"), Recorder("alice reconnect")
    bob.on("presence:join", joins)
    bob.on("presence:leave", leaves)
    alice.on("reconnect", reconnects)
    await bob.set_presence({"who": "bob"}, room_id="general")
    # Bob's own join proves his node listens to the room before alice (maybe on another node
    # of a cluster) announces herself.
    await joins.wait_for(lambda a: a.actor_token_id == "bob")
    await alice.set_presence({"who": "alice"}, room_id="general")
    await joins.wait_for(lambda a: a.actor_token_id == "alice")

    await leaves.wait_for(lambda a: a.actor_token_id == "alice", what="alice's leave on the idle close")
    await reconnects.wait_count(1, timeout=5)
    await joins.wait_for_all(
        lambda calls: [a.actor_token_id for (a,) in calls].count("alice") == 2, what="alice's second join"
    )
    assert joins.calls[-1][0].presence == {"who": "alice"}


async def test_server_restart_close_lets_the_sdk_reconnect(skua):
    """N28: a draining node closes with 1012, not 1000/1001, so the SDK treats it as a drop
    (its 'disconnect' event fires and it schedules a reconnect)."""
    alice = await connect(skua.url, "dev-token-alice", reconnect=True, reconnect_interval=30)
    disconnects = Recorder("alice disconnect")
    alice.on("disconnect", disconnects)
    stopping = asyncio.get_running_loop().run_in_executor(None, skua.stop)
    (reason,) = await disconnects.wait_for(lambda r: True, timeout=10)
    assert "1012" in reason, reason
    assert alice.status == ConnectionStatus.RECONNECTING
    assert await asyncio.wait_for(stopping, 15) == 0  # and the server exits cleanly
