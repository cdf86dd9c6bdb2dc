"""Load-balanced groups (N26): each message reaches exactly one connected member."""

from collections import Counter

import pytest
from nolag import SubscribeOptions

from helpers import Recorder, connect, sentinel, subscribe_ok

TOPIC = "demo/general/messages"
SENTINEL_TOPIC = "demo/general/status"
N = 30


@pytest.mark.parametrize(
    "members,publisher,group",
    [
        (["dev-token-alice", "dev-token-bob", "dev-token-carol"], "dev-token-agent", "workers"),
        (["dev-token-bob"] * 3, "dev-token-alice", "workers"),
        # No group name: the group defaults to the actor id, so one actor's connections share it.
        (["dev-token-bob"] * 3, "dev-token-alice", None),
    ],
    ids=["distinct-actors", "same-actor", "same-actor-default-group"],
)
async def test_each_message_reaches_exactly_one_member(skua, members, publisher, group):
    work = Recorder("work (worker, data, meta)")  # shared, to await the total
    workers = []
    for i, token in enumerate(members):
        c = await connect(skua.url, token, f"worker-{i}")
        done = Recorder(f"worker-{i} sentinel")
        c.on(TOPIC, lambda data, meta, i=i: work(i, data, meta))
        c.on(SENTINEL_TOPIC, done)
        await subscribe_ok(c, TOPIC, SubscribeOptions(load_balance=True, load_balance_group=group))
        # A plain subscription, to learn when the publisher's earlier messages are all out.
        await subscribe_ok(c, SENTINEL_TOPIC)
        workers.append((c, done))
    pub = await connect(skua.url, publisher, "publisher")

    for i in range(N):
        await pub.emit(TOPIC, {"job": i})
    await work.wait_count(N)
    # Then a sentinel on a plain subscription every member has: once each member has it,
    # nothing the publisher sent before is still on its way (no late duplicates).
    mark = sentinel()
    await pub.emit(SENTINEL_TOPIC, mark)
    for _, done in workers:
        await done.wait_data(mark)

    counts = Counter(data["job"] for _, data, _ in work.calls)
    per_worker = [sum(1 for w, _, _ in work.calls if w == i) for i in range(len(workers))]
    assert sum(per_worker) == N, f"{sum(per_worker)} deliveries for {N} messages: {per_worker}"
    assert sorted(counts) == list(range(N)), f"missing: {set(range(N)) - set(counts)}"
    assert max(counts.values()) == 1, f"duplicates: {[j for j, n in counts.items() if n > 1]}"
    # "Load balancing distributes messages across clients in the same group."
    assert all(n > 0 for n in per_worker), f"a member got nothing: {per_worker}"
    assert all(meta.sender == pub.actor_id for _, _, meta in work.calls)
