"""Two nodes of one cluster, every exchange crossing between them both ways (issue 32, item 9).

In the ordinary cluster run both nodes run this build. scripts/mixed-versions.sh runs this file
with SKUA_BIN_PEER set to the previous release, built from a pinned commit: node 0 runs this
build, node 1 the previous one, on one broker, one Redis and one Postgres database migrated by
this build (docs/operations.md, "Upgrade order for mixed versions": the compatibility rule).
"""

import asyncio
import os
import re
import urllib.request
import uuid

import pytest
from nolag import SubscribeOptions

import wake_worker
from helpers import T, Recorder, connect, emit_ack, subscribe_ok

pytestmark = pytest.mark.cluster_only

TOPIC = "demo/general/messages"
TASKS = "demo/general/tasks"
ROOM = "general"


def build_info(node) -> str:
    base = node.url.replace("ws://", "http://", 1).rsplit("/", 1)[0]
    with urllib.request.urlopen(base + "/metrics", timeout=T) as r:
        text = r.read().decode()
    m = re.search(r"^skua_build_info\{.*\} 1$", text, re.M)
    assert m, "no skua_build_info on /metrics"
    return m.group(0)


def check_versions(skua) -> tuple:
    """The two nodes' URLs; with SKUA_BIN_PEER, node 1 is checked to run another build."""
    new, old = skua.nodes[0], skua.nodes[1]
    if os.environ.get("SKUA_BIN_PEER"):
        assert build_info(new) != build_info(old), "both nodes run the same build"
    return new.url, old.url


async def test_publications_cross_between_the_nodes_both_ways(skua):
    new_url, old_url = check_versions(skua)
    on_new = await connect(new_url, "dev-token-alice", label="alice@node0")
    on_old = await connect(old_url, "dev-token-bob", label="bob@node1")
    got_new, got_old = Recorder("alice@node0"), Recorder("bob@node1")
    on_new.on(TOPIC, got_new)
    on_old.on(TOPIC, got_old)
    await subscribe_ok(on_new, TOPIC)
    await subscribe_ok(on_old, TOPIC)
    assert await emit_ack(on_old, TOPIC, {"from": "node1", "n": 1}) is None
    await got_new.wait_data({"from": "node1", "n": 1})
    assert await emit_ack(on_new, TOPIC, {"from": "node0", "n": 2}) is None
    await got_old.wait_data({"from": "node0", "n": 2})
    assert got_new.calls[0][1].sender == "bob" and got_old.calls[0][1].sender == "alice"


async def test_presence_is_seen_across_the_nodes_both_ways(skua):
    """Events go to connections that announced presence (N21): bob (node 1) announces after
    alice (node 0), so alice gets bob's join and bob gets alice's update; both snapshots list
    both."""
    new_url, old_url = check_versions(skua)
    on_new = await connect(new_url, "dev-token-alice", label="alice@node0")
    on_old = await connect(old_url, "dev-token-bob", label="bob@node1")
    joins_new, updates_old = Recorder("joins@node0"), Recorder("updates@node1")
    on_new.on("presence:join", joins_new)
    on_old.on("presence:update", updates_old)
    room_new, room_old = on_new.set_app("demo").set_room(ROOM), on_old.set_app("demo").set_room(ROOM)
    await room_new.set_presence({"node": 0})
    await room_old.set_presence({"node": 1})
    await joins_new.wait_for(lambda a: a.actor_token_id == "bob", what="bob's join (node 1) on node 0")
    await room_new.set_presence({"node": 0, "again": True})
    (updated,) = await updates_old.wait_for(lambda a: a.actor_token_id == "alice", what="alice's update (node 0) on node 1")
    assert updated.presence == {"node": 0, "again": True}
    want = {"alice": {"node": 0, "again": True}, "bob": {"node": 1}}
    for client, room in ((on_new, room_new), (on_old, room_old)):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:
            members = {e["actorTokenId"]: e["presence"] for e in await room.fetch_presence()}
            if members == want:
                break
            assert loop.time() < deadline, f"{client.label}: {members}"
            await asyncio.sleep(0.1)  # polling a snapshot (N40: it may lag an event), not an event


async def test_durable_delivery_crosses_the_nodes_both_ways(skua):
    """A logged topic's group: a message published on node 1 reaches the worker on node 0 and is
    acked there; two published on node 0 while the group is away are replayed by node 1."""
    new_url, old_url = check_versions(skua)
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    client_id = f"mixed-{uuid.uuid4().hex[:6]}"
    publisher_old = await connect(old_url, "dev-token-alice", label="alice@node1")
    publisher_new = await connect(new_url, "dev-token-bob", label="bob@node0")
    options = SubscribeOptions(load_balance=True, load_balance_group=group)

    worker = wake_worker.WorkerClient(new_url, client_id)
    await asyncio.wait_for(worker.connect(), T)
    live = Recorder("worker@node0")
    worker.on(TASKS, live)
    await subscribe_ok(worker, TASKS, options)
    assert await emit_ack(publisher_old, TASKS, {"job": 1}) is None
    _, meta = await live.wait_for(lambda d, m: d == {"job": 1}, what="job 1 from node 1")
    assert meta.msg_id and not meta.is_replay
    await worker.ack(meta.msg_id)
    await worker.fetch_presence(room_id=ROOM)  # a round trip: the ack was handled
    worker.disconnect()

    for job in (2, 3):
        assert await emit_ack(publisher_new, TASKS, {"job": job}) is None
    returning = wake_worker.WorkerClient(old_url, client_id)
    replayed = Recorder("worker@node1")
    returning.on(TASKS, replayed)
    await asyncio.wait_for(returning.connect(), T)
    await subscribe_ok(returning, TASKS, options)
    await asyncio.wait_for(returning.replay_end.wait(), T)
    assert [(d, m.is_replay) for d, m in replayed.calls] == [({"job": 2}, True), ({"job": 3}, True)], replayed.calls
    assert returning.replayed == 2
    for _, m in replayed.calls:
        await returning.ack(m.msg_id)
    await returning.fetch_presence(room_id=ROOM)
    returning.disconnect()
