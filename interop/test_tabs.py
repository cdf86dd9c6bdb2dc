"""Two tabs of one actor that drop together (issue 31, defect 5; docs/protocol.md "Restore
records"). The SDK sends no connection identity with `reconnect: true`, so the server cannot tell
the tabs apart: each reconnect claims one of the actor's ended records, and before the fix a tab
could get the other tab's subscriptions back, its handlers then listening on a topic its socket no
longer had. Now every reconnect also gets the plain subscriptions of the records that ended
together with the one it claimed (`restore_merge_window`): each tab gets the union, so no tab
misses a message on a topic it subscribed to.

The order is forced so that the swap would happen every time: tab 1's socket is cut first and its
end is seen by the server (`skua_connections_closed_total`) before tab 2's is cut, so tab 2's
record ended last, and the proxies hold both reconnects until tab 1's is let through alone, so
it claims that record."""

import asyncio

import pytest

import conftest
from helpers import Recorder, TcpProxy, connect, sentinel, subscribe_ok, until_metric

TAB1_TOPIC = "demo/general/messages"
TAB2_TOPIC = "demo/random/messages"
CLOSED = "skua_connections_closed_total"


async def _two_tabs(node_url: str):
    """alice in two tabs, each behind its own proxy to `node_url`: tab 1 listens on TAB1_TOPIC,
    tab 2 on TAB2_TOPIC."""
    proxies = [TcpProxy(node_url), TcpProxy(node_url)]
    urls = [await p.start() for p in proxies]
    # Enough attempts to outlast a node restart.
    tab1 = await connect(
        urls[0], "dev-token-alice", "tab1", reconnect=True, reconnect_interval=0.1, max_reconnect_attempts=300
    )
    tab2 = await connect(
        urls[1], "dev-token-alice", "tab2", reconnect=True, reconnect_interval=0.1, max_reconnect_attempts=300
    )
    inbox1, inbox2 = Recorder("tab1 messages"), Recorder("tab2 messages")
    tab1.on(TAB1_TOPIC, inbox1)
    tab2.on(TAB2_TOPIC, inbox2)
    await subscribe_ok(tab1, TAB1_TOPIC)
    await subscribe_ok(tab2, TAB2_TOPIC)
    return proxies, (tab1, inbox1), (tab2, inbox2)


async def _each_tab_gets_its_topic(bob, tab1, inbox1, tab2, inbox2) -> None:
    """After both reconnected: a message on each tab's topic reaches that tab."""
    for tab, inbox, topic in ((tab1, inbox1, TAB1_TOPIC), (tab2, inbox2, TAB2_TOPIC)):
        restored = {r["pattern"] for r in tab.frames("auth")[-1]["restoredSubscriptions"]}
        assert topic in restored, f"{tab} reconnected without {topic}: {restored}"
        mark = sentinel(topic=topic)
        await bob.emit(topic, mark)
        await inbox.wait_data(mark)


async def _reconnected(tab, reconnects: Recorder) -> None:
    await reconnects.wait_count(1, timeout=10)
    assert tab.connected


@pytest.mark.timeout(40)
async def test_two_tabs_cut_together_each_keep_their_subscriptions(skua):
    node = skua.url
    bob = await connect(node, "dev-token-bob")
    proxies, (tab1, inbox1), (tab2, inbox2) = await _two_tabs(node)
    again1, again2 = Recorder("tab1 reconnect"), Recorder("tab2 reconnect")
    tab1.on("reconnect", again1)
    tab2.on("reconnect", again2)
    closed = await until_metric(node, CLOSED, lambda v: v >= 0)

    for p in proxies:
        p.hold()
    proxies[0].cut()
    await until_metric(node, CLOSED, lambda v: v >= closed + 1)
    proxies[1].cut()
    await until_metric(node, CLOSED, lambda v: v >= closed + 2)
    proxies[0].release()
    await _reconnected(tab1, again1)
    proxies[1].release()
    await _reconnected(tab2, again2)
    await _each_tab_gets_its_topic(bob, tab1, inbox1, tab2, inbox2)
    for p in proxies:
        await p.stop()


@pytest.mark.timeout(60)
async def test_two_tabs_keep_their_subscriptions_over_a_node_restart(skua_binary, tmp_path):
    """The node drains (1012 to both tabs at once) and a new one starts on the same store; both
    tabs reconnect to it through their proxies. One node on an SQLite file in both runs (the
    cluster run's restart is the chaos suite's)."""
    store = f"sqlite://{tmp_path}/store.db"
    first = conftest.SkuaServer(skua_binary, ["--store", store])
    second = None
    try:
        proxies, (tab1, inbox1), (tab2, inbox2) = await _two_tabs(first.url)
        again1, again2 = Recorder("tab1 reconnect"), Recorder("tab2 reconnect")
        tab1.on("reconnect", again1)
        tab2.on("reconnect", again2)
        for p in proxies:
            p.hold()
        assert await asyncio.get_running_loop().run_in_executor(None, first.stop) == 0
        second = conftest.SkuaServer(skua_binary, ["--store", store])
        bob = await connect(second.url, "dev-token-bob")
        for p in proxies:
            p.retarget(second.url)
        proxies[0].release()
        await _reconnected(tab1, again1)
        proxies[1].release()
        await _reconnected(tab2, again2)
        await _each_tab_gets_its_topic(bob, tab1, inbox1, tab2, inbox2)
        for p in proxies:
            await p.stop()
    finally:
        for server in (first, second):
            if server is not None:
                rc = server.stop()
                print(f"=== {' '.join(server.cmd)} (exit {rc})\n{server.text(server.stdout)}\n{server.text(server.stderr)}")
