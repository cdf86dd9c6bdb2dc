"""Filters (N12, N13, N14): OR filters, AND groups, wildcard subscribers and changing the
filter set of a live subscription with set_filters/add_filters/remove_filters."""

from nolag import EmitOptions, SubscribeOptions

from helpers import Recorder, barrier, connect, sentinel, subscribe_ok

TOPIC = "demo/general/messages"


async def test_filtered_and_wildcard_subscribers(skua):
    alice = await connect(skua.url, "dev-token-alice")  # filtered
    carol = await connect(skua.url, "dev-token-carol")  # wildcard
    bob = await connect(skua.url, "dev-token-bob")  # publisher
    filtered, wildcard = Recorder("alice (region:eu)"), Recorder("carol (wildcard)")
    alice.on(TOPIC, filtered)
    carol.on(TOPIC, wildcard)
    await subscribe_ok(alice, TOPIC, SubscribeOptions(filters=["region:eu", "priority:high"]))
    await subscribe_ok(carol, TOPIC)

    us, eu, high, plain = {"m": "us"}, {"m": "eu"}, {"m": "high"}, {"m": "plain"}
    mark = sentinel()
    await bob.emit(TOPIC, us, EmitOptions(filter="region:us"))
    await bob.emit(TOPIC, eu, EmitOptions(filter="region:eu"))
    await bob.emit(TOPIC, plain)
    await bob.emit(TOPIC, high, EmitOptions(filter="priority:high"))
    await bob.emit(TOPIC, mark, EmitOptions(filter="region:eu"))

    await filtered.wait_data(mark)
    # N13: a filtered subscription never receives unfiltered publishes, nor other values.
    assert filtered.data == [eu, high, mark]
    assert [m.filter for _, m in filtered.calls] == ["region:eu", "priority:high", "region:eu"]

    await wildcard.wait_data(mark)
    # N13: a wildcard subscriber receives everything, with `filter` set on filtered ones.
    assert wildcard.data == [us, eu, plain, high, mark]
    assert [m.filter for _, m in wildcard.calls] == ["region:us", "region:eu", None, "priority:high", "region:eu"]


async def test_and_group_matches_composite_publish(skua):
    alice = await connect(skua.url, "dev-token-alice")  # AND group
    carol = await connect(skua.url, "dev-token-carol")  # wildcard
    bob = await connect(skua.url, "dev-token-bob")
    group, wildcard = Recorder("alice (region:eu AND tier:gold)"), Recorder("carol (wildcard)")
    alice.on(TOPIC, group)
    carol.on(TOPIC, wildcard)
    await subscribe_ok(alice, TOPIC, SubscribeOptions(filters=[["region:eu", "tier:gold"]]))
    await subscribe_ok(carol, TOPIC)

    gold_eu = {"m": "gold+eu"}
    only_gold = {"m": "gold"}
    only_eu = {"m": "eu"}
    shouting = {"m": "GOLD+EU"}
    await bob.emit(TOPIC, only_gold, EmitOptions(filters=["tier:gold"]))
    await bob.emit(TOPIC, only_eu, EmitOptions(filter="region:eu"))
    await bob.emit(TOPIC, gold_eu, EmitOptions(filters=["tier:gold", "region:eu"]))
    # N12: AND members are lowercased and sorted, so this is the same key.
    await bob.emit(TOPIC, shouting, EmitOptions(filters=["Tier:GOLD", "REGION:eu"]))

    await group.wait_data(shouting)
    assert group.data == [gold_eu, shouting]
    key = "region:eu|tier:gold"
    assert [m.filter for _, m in group.calls] == [key, key]

    await wildcard.wait_data(shouting)
    assert wildcard.data == [only_gold, only_eu, gold_eu, shouting]
    assert [m.filter for _, m in wildcard.calls] == ["tier:gold", "region:eu", key, key]


async def test_changing_filters_on_a_live_subscription(skua):
    """set_filters/add_filters/remove_filters send `setFilters`; the server answers
    `filtersUpdated`, which the SDK ignores (its callback fires as soon as the frame is sent).
    So after each change alice makes a round trip on her own connection (`barrier`, answered
    after the setFilters) and only then does bob publish; a sentinel proves absences."""
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    inbox = Recorder("alice messages")
    alice.on(TOPIC, inbox)
    room = alice.set_app("demo").set_room("general")
    await room.subscribe("messages", SubscribeOptions(filters=["a"]))
    await barrier(alice)

    async def publish(*items):
        """bob publishes (payload, filter) pairs; returns the payloads."""
        for payload, f in items:
            await bob.emit(TOPIC, payload, EmitOptions(filter=f) if f else None)

    async def expect(received, not_received, mark):
        await inbox.wait_data(mark)
        got = inbox.data
        inbox.calls.clear()
        assert got == received + [mark], f"expected {received + [mark]!r}, got {got!r} (must not: {not_received!r})"

    # filters ["a"]
    m = sentinel(step="a")
    await publish(({"b": 1}, "b"), ({"a": 1}, "a"), (m, "a"))
    await expect([{"a": 1}], [{"b": 1}], m)

    # add_filters → ["a", "b"]
    await room.add_filters("messages", ["b"])
    await barrier(alice)
    m = sentinel(step="a+b")
    await publish(({"b": 2}, "b"), ({"c": 2}, "c"), ({"a": 2}, "a"), (m, "a"))
    await expect([{"b": 2}, {"a": 2}], [{"c": 2}], m)
    assert alice.frames("filtersUpdated")[-1]["topic"] == TOPIC

    # remove_filters → ["b"]
    await room.remove_filters("messages", ["a"])
    await barrier(alice)
    m = sentinel(step="b")
    await publish(({"a": 3}, "a"), ({"b": 3}, "b"), (m, "b"))
    await expect([{"b": 3}], [{"a": 3}], m)

    # set_filters → ["c"]
    await room.set_filters("messages", ["c"])
    await barrier(alice)
    m = sentinel(step="c")
    await publish(({"b": 4}, "b"), ({"c": 4}, "c"), (None, None), (m, "c"))
    await expect([{"c": 4}], [{"b": 4}, None], m)
    # N14: filtersUpdated echoes the list as sent.
    assert alice.frames("filtersUpdated")[-1] == {"type": "filtersUpdated", "topic": TOPIC, "filters": ["c"]}

    # set_filters([]) → wildcard: everything, filtered or not.
    await room.set_filters("messages", [])
    await barrier(alice)
    m = sentinel(step="wildcard")
    await publish(({"z": 5}, "zzz"), ({"plain": 5}, None), (m, None))
    await expect([{"z": 5}, {"plain": 5}], [], m)
