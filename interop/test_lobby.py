"""Lobbies (N22, N35): the `online` lobby covers rooms general and random."""

import time

from helpers import Recorder, close, connect


async def test_lobby_snapshot_and_events(skua):
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    carol = await connect(skua.url, "dev-token-carol")

    # carol is already in `random` when alice subscribes.
    await carol.set_app("demo").set_room("random").set_presence({"status": "there"})
    assert {e["actorTokenId"] for e in await carol.fetch_presence(room_id="random")} == {"carol"}

    lobby = alice.set_app("demo").set_lobby("online")
    joins, leaves = Recorder("lobby join"), Recorder("lobby leave")
    lobby.on("presence:join", joins)
    lobby.on("presence:leave", leaves)
    t0 = int(time.time())
    snapshot = await lobby.subscribe()

    # Keyed by room slug; every covered room appears, an empty one as {} (N22).
    assert set(snapshot) == {"general", "random"}, snapshot
    assert snapshot["general"] == {}
    # N22 settles the entry shape as the full presence entry; the wire doc's example shows
    # the bare presence map under the actor id instead.
    entry = snapshot["random"]["carol"]
    assert entry["actorTokenId"] == "carol" and entry["presence"] == {"status": "there"}
    assert isinstance(entry["joinedAt"], int) and abs(entry["joinedAt"] - t0) <= 60

    await bob.set_app("demo").set_room("general").set_presence({"status": "here", "n": 1})
    (ev,) = await joins.wait_for(lambda e: e.actor_id == "bob")
    assert (ev.lobby_id, ev.room_id, ev.actor_id) == ("online", "general", "bob")
    assert ev.data == {"status": "here", "n": 1}

    latest = await lobby.fetch_presence()
    assert set(latest) == {"general", "random"}
    assert latest["general"]["bob"]["presence"] == {"status": "here", "n": 1}
    assert set(latest["random"]) == {"carol"}

    await close(bob)
    (ev,) = await leaves.wait_for(lambda e: e.actor_id == "bob")
    assert (ev.lobby_id, ev.room_id, ev.actor_id) == ("online", "general", "bob")
    assert ev.data == {}  # N35
    assert [e.actor_id for (e,) in joins.calls] == ["bob"]
