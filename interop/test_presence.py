"""Room presence (N21, N39): join/update/leave events and fetch_presence snapshots."""

import time

from helpers import Recorder, close, connect

ROOM = "general"


def presence_recorders(client):
    rec = {ev: Recorder(f"{client.label} presence:{ev}") for ev in ("join", "update", "leave")}
    for ev, r in rec.items():
        client.on(f"presence:{ev}", r)
    return rec


def by_actor(entries):
    return {e["actorTokenId"]: e for e in entries}


async def test_presence_join_update_leave(skua):
    alice = await connect(skua.url, "dev-token-alice")
    bob = await connect(skua.url, "dev-token-bob")
    a_events = presence_recorders(alice)
    a_room = alice.set_app("demo").set_room(ROOM)
    b_room = bob.set_app("demo").set_room(ROOM)

    await a_room.set_presence({"name": "Alice", "status": "online"})
    # N21: events go to every connection that announced presence, the announcer included.
    await a_events["join"].wait_for(lambda a: a.actor_token_id == "alice", what="alice's own join")

    t0 = int(time.time())
    await b_room.set_presence({"name": "Bob", "status": "online", "tags": ["x", 1]})
    (joined,) = await a_events["join"].wait_for(lambda a: a.actor_token_id == "bob", what="bob's join")
    assert joined.presence == {"name": "Bob", "status": "online", "tags": ["x", 1]}
    # N21: event data never carries actor_type; the wire doc's event has exactly these keys.
    join_frame = [f for f in alice.frames("presence") if f["event"] == "join" and f["data"]["actor_token_id"] == "bob"][0]
    assert join_frame["data"] == {"actor_token_id": "bob", "presence": joined.presence}
    # The SDK reads `joined_at` from events, but per the wire doc `joinedAt` appears only in
    # snapshots, so ActorPresence.joined_at stays None; fetch_presence has it.
    assert joined.joined_at is None

    members = by_actor(await a_room.fetch_presence())
    assert set(members) == {"alice", "bob"}
    assert members["bob"]["presence"] == {"name": "Bob", "status": "online", "tags": ["x", 1]}
    assert members["alice"]["presence"] == {"name": "Alice", "status": "online"}
    for entry in members.values():
        assert isinstance(entry["joinedAt"], int) and abs(entry["joinedAt"] - t0) <= 60, entry
    bob_joined_at = members["bob"]["joinedAt"]
    assert by_actor(await b_room.fetch_presence()).keys() == {"alice", "bob"}

    await b_room.set_presence({"name": "Bob", "status": "away"})
    (updated,) = await a_events["update"].wait_for(lambda a: a.actor_token_id == "bob", what="bob's update")
    assert updated.presence == {"name": "Bob", "status": "away"}
    members = by_actor(await a_room.fetch_presence())
    assert members["bob"]["presence"] == {"name": "Bob", "status": "away"}
    assert members["bob"]["joinedAt"] == bob_joined_at  # N21: kept across updates
    assert len(a_events["join"].calls) == 2  # an update is not a second join

    # clear_presence sends data: null, which means leave (N21).
    await bob.clear_presence()
    (left,) = await a_events["leave"].wait_for(lambda a: a.actor_token_id == "bob", what="bob's leave")
    assert left.actor_token_id == "bob"
    assert set(by_actor(await a_room.fetch_presence())) == {"alice"}

    # Back in, then gone with the connection: leave again.
    await b_room.set_presence({"name": "Bob", "status": "back"})
    await a_events["join"].wait_for(lambda a: a.actor_token_id == "bob" and a.presence["status"] == "back")
    await close(bob)
    await a_events["leave"].wait_count(2)
    assert [a.actor_token_id for (a,) in a_events["leave"].calls] == ["bob", "bob"]
    assert set(by_actor(await a_room.fetch_presence())) == {"alice"}


async def test_second_connection_of_an_actor_is_an_update(skua):
    """N39: a second connection of an actor already in the room produces `update`, and the
    actor leaves only with its last connection (N21)."""
    alice = await connect(skua.url, "dev-token-alice")
    bob1 = await connect(skua.url, "dev-token-bob", "bob-1")
    bob2 = await connect(skua.url, "dev-token-bob", "bob-2")
    events = presence_recorders(alice)
    await alice.set_presence({"me": "alice"}, room_id=ROOM)
    # `set_presence` returns once the frame is sent. Alice's own join comes after her node
    # holds the room's presence subscription; in a cluster bob's node may be another one, so
    # before that his join could pass the broker before alice's node listens.
    await events["join"].wait_for(lambda a: a.actor_token_id == "alice")
    await bob1.set_presence({"conn": 1}, room_id=ROOM)
    await events["join"].wait_for(lambda a: a.actor_token_id == "bob")
    await bob2.set_presence({"conn": 2}, room_id=ROOM)
    (upd,) = await events["update"].wait_for(lambda a: a.actor_token_id == "bob")
    assert upd.presence == {"conn": 2}

    # bob-1 goes; the server has run its cleanup by the time its close frame arrives, so a
    # wrong `leave` would be on its way before bob-2's next update.
    await close(bob1)
    await bob2.set_presence({"conn": 3}, room_id=ROOM)
    await events["update"].wait_for(lambda a: a.actor_token_id == "bob" and a.presence == {"conn": 3})
    assert events["leave"].calls == []
    assert "bob" in by_actor(await alice.fetch_presence(room_id=ROOM))
    await close(bob2)
    await events["leave"].wait_for(lambda a: a.actor_token_id == "bob")
    assert [a.actor_token_id for (a,) in events["join"].calls].count("bob") == 1
