"""Persistent presence and wake (N46–N48, docs/agents.md) through the real SDK: `status` and
`advertisementVersion` in presence events and `fetch_presence`, the last disconnect as an
`update` to offline (not `leave`), `clear_presence` removing the member, the `wake` object never
reaching another client, and the scale-to-zero loop: a publish into the room of a sleeping
worker group wakes a member (signed wake request), a worker process started by the test's
receiver connects with its clientId and gets the group replay; a failing receiver earns the
publisher `42950 wake_failed`.

The room is `random` and every test removes its member at the end: a cluster run shares one
Postgres store between tests, and a sleeping wakeable member would be woken by their publishes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest

import wake_worker
from helpers import T, Recorder, close, connect, emit_ack, make_client, subscribe_ok
from nolag import SubscribeOptions
from test_control_plane import admin, grpc_addresses

ROOM = "random"
TOPIC = f"demo/{ROOM}/tasks"  # logged (CONTRACT.md)
WORKER = Path(__file__).resolve().parent / "wake_worker.py"


def demo_admin(addr: str, *args: str):
    return admin(addr, *args, "--project", "demo-project")


def by_actor(entries):
    return {e["actorTokenId"]: e for e in entries}


def watch(client, *events):
    rec = {ev: Recorder(f"{client.label} presence:{ev}") for ev in events}
    for ev, r in rec.items():
        client.on(f"presence:{ev}", r)
    return rec


def nodes(server):
    return getattr(server, "nodes", [server])


def wake_deliveries(server, outcome: str) -> float:
    """`skua_webhook_deliveries_total{kind="wake",outcome=…}` summed over the nodes' /metrics."""
    total = 0.0
    for node in nodes(server):
        base = node.url.replace("ws://", "http://", 1).rsplit("/", 1)[0]
        with urllib.request.urlopen(base + "/metrics", timeout=T) as r:
            text = r.read().decode()
        m = re.search(r'^skua_webhook_deliveries_total\{kind="wake",outcome="%s"\} (\S+)$' % outcome, text, re.M)
        total += float(m.group(1)) if m else 0.0
    return total


async def agent(url: str, client_id: str) -> wake_worker.WorkerClient:
    """The demo agent with a clientId, connected."""
    client = wake_worker.WorkerClient(url, client_id)
    await asyncio.wait_for(client.connect(), T * 2)
    return client


async def remove_member(url: str, client_id: str) -> None:
    """`clear_presence` from a fresh connection of the member (after a persistent announce
    without wake): it is gone for later tests."""
    client = await agent(url, client_id)
    try:
        await client.set_presence({"persistent": True}, room_id=ROOM)
        await client.clear_presence()
        await client.fetch_presence(room_id=ROOM)  # a round trip: the removal is done
    finally:
        client.disconnect()


async def listed(client, actor: str, status: str, timeout: float = 15.0) -> dict:
    """Polls `fetch_presence` until `actor` is listed with `status` (a snapshot may lag an event
    by a few seconds in a cluster, N40; a lost node is noticed after its node_ttl)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        entry = by_actor(await client.fetch_presence(room_id=ROOM)).get(actor)
        if entry is not None and entry.get("status") == status:
            return entry
        assert loop.time() < deadline, f"{actor} not listed {status}: {entry}"
        await asyncio.sleep(0.1)  # polling a snapshot, not synchronising on an event


async def test_status_and_advertisement_version_offline_not_leave_and_removal(skua):
    wake_url = "http://127.0.0.1:9/never-called"
    alice = await connect(skua.url, "dev-token-alice")
    ev = watch(alice, "join", "update", "leave")
    await alice.set_presence({"who": "alice"}, room_id=ROOM)
    await ev["join"].wait_for(lambda a: a.actor_token_id == "alice")
    # An ordinary member carries no status.
    assert "status" not in by_actor(await alice.fetch_presence(room_id=ROOM))["alice"]

    worker = await agent(skua.url, "w-status")
    try:
        await worker.set_presence(wake_worker.advert(wake_url, 1), room_id=ROOM)
        (joined,) = await ev["join"].wait_for(lambda a: a.actor_token_id == "agent-1", what="the agent's join")
        assert (joined.status, joined.advertisement_version) == ("online", 1)
        assert joined.presence == {
            "persistent": True,
            "capabilities": ["summarise"],
            "advertisement": {"model": "demo", "version": 1},
        }
        frame = [f for f in alice.frames("presence") if f["data"]["actor_token_id"] == "agent-1"][0]
        assert (frame["data"]["status"], frame["data"]["advertisementVersion"]) == ("online", 1)

        # Same advertisement: same version; a new one: the next.
        await worker.set_presence({**wake_worker.advert(wake_url, 1), "load": 0.5}, room_id=ROOM)
        await ev["update"].wait_for(lambda a: a.actor_token_id == "agent-1" and a.presence.get("load") == 0.5)
        await worker.set_presence(wake_worker.advert(wake_url, 2), room_id=ROOM)
        (updated,) = await ev["update"].wait_for(
            lambda a: a.actor_token_id == "agent-1" and a.presence["advertisement"]["version"] == 2
        )
        versions = [f["data"]["advertisementVersion"] for f in alice.frames("presence") if f["data"]["actor_token_id"] == "agent-1"]
        assert versions == [1, 1, 2], versions
        entry = await listed(alice, "agent-1", "online")
        assert entry["advertisementVersion"] == 2 and "wake" not in entry["presence"]

        # The last connection ends: an update to offline, not a leave (N46).
        await close(worker)
        (gone,) = await ev["update"].wait_for(lambda a: a.actor_token_id == "agent-1" and a.status == "offline")
        assert gone.presence["advertisement"] == {"model": "demo", "version": 2}
        assert not [a for (a,) in ev["leave"].calls if a.actor_token_id == "agent-1"]
        entry = await listed(alice, "agent-1", "offline")
        assert (entry["advertisementVersion"], entry["presence"]["capabilities"]) == (2, ["summarise"])

        # clear_presence (data: null) removes it: a leave, and no longer listed.
        await remove_member(skua.url, "w-status")
        await ev["leave"].wait_for(lambda a: a.actor_token_id == "agent-1", what="the agent's leave")
        assert "agent-1" not in by_actor(await alice.fetch_presence(room_id=ROOM))
    finally:
        await remove_member(skua.url, "w-status")
    # The wake URL never reached another client, in any frame.
    assert not [raw for raw in alice.received_raw if b"never-called" in raw or b"wake" in raw]


@pytest.mark.timeout(60)
async def test_offline_member_is_listed_after_a_restart_and_a_kill(skua_factory, tmp_path):
    """fetchPresence after the node restarts (SIGTERM) and after kill -9 of the node holding the
    member's last connection still lists it offline."""
    cluster = os.environ.get("SKUA_INTEROP_CLUSTER") == "1"
    # One node keeps its store in a file here; a cluster's store is the shared Postgres.
    store = [] if cluster else ["--store", f"sqlite://{tmp_path}/skua.db"]
    flags = [*store, "--node-ttl", "2s", "--node-refresh", "500ms"]
    server = skua_factory(*flags)
    worker = await agent(nodes(server)[0].url, "w-restart")
    await worker.set_presence(wake_worker.advert("http://127.0.0.1:9/never", 1), room_id=ROOM)
    await worker.fetch_presence(room_id=ROOM)
    try:
        await close(worker)
        server.stop()
        again = skua_factory(*flags)
        alice = await connect(nodes(again)[-1].url, "dev-token-alice")
        entry = await listed(alice, "agent-1", "offline")
        assert entry["advertisementVersion"] == 1

        # Connected again, then its node is killed: still listed offline (and wakeable).
        worker = await agent(nodes(again)[0].url, "w-restart")
        await worker.set_presence(wake_worker.advert("http://127.0.0.1:9/never", 1), room_id=ROOM)
        await listed(alice, "agent-1", "online")
        nodes(again)[0].proc.kill()
        nodes(again)[0].proc.wait()
        if not cluster:
            again = skua_factory(*flags)
            alice = await connect(nodes(again)[0].url, "dev-token-alice")
        await listed(alice, "agent-1", "offline")
    finally:
        await remove_member(nodes(again)[-1].url, "w-restart")


class WakeReceiver:
    """The operator's side of a wake (docs/agents.md): checks the signature with the project's
    wake secret and starts a worker process for the woken clientId; answers `status`."""

    def __init__(self, secret: str, worker_url: str, group: str, status: int = 200):
        self.requests: list[dict] = []
        self.bad: list[str] = []
        self.workers: list[subprocess.Popen] = []
        self.arrived = threading.Event()
        # Notified at each request, once it is recorded and its worker started.
        self.changed = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(self.headers.get("X-NoLag-Signature", ""), expected):
                    receiver.bad.append(self.headers.get("X-NoLag-Signature", "(none)"))
                    self.send_response(401)
                    self.end_headers()
                    return
                wake = json.loads(body)
                with receiver.changed:
                    receiver.requests.append(wake)
                    if status == 200:
                        cmd = [sys.executable, str(WORKER), worker_url, wake["clientId"], f"demo/{wake['room']}/{wake['topic']}", group, receiver.url]
                        receiver.workers.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                    receiver.changed.notify_all()
                receiver.arrived.set()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/wake"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_requests(self, n: int, timeout: float) -> bool:
        """Blocks until `n` wake requests arrived (and their workers started); false on timeout."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.requests) >= n, timeout)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        for w in self.workers:
            if w.poll() is None:
                w.kill()


def wake_secret(server) -> str:
    addrs = grpc_addresses(server)
    rotated = demo_admin(addrs[0], "--json", "projects", "rotate-wake-secret", "demo-project")
    assert rotated.returncode == 0, rotated.stderr
    secret = json.loads(rotated.stdout)["wake_secret"]
    assert json.loads(rotated.stdout)["has_wake_secret"] is True
    shown = demo_admin(addrs[0], "--json", "projects", "get", "demo-project")
    assert "wake_secret" not in json.loads(shown.stdout), "the secret is shown once"
    for addr in addrs:  # every node reads the new registry version now
        assert demo_admin(addr, "projects", "get", "demo-project").returncode == 0
    return secret


@pytest.mark.timeout(60)
async def test_scale_to_zero_publish_wakes_a_worker_that_collects_the_replay(skua_factory):
    server = skua_factory("--grpc-listen", "127.0.0.1:0")
    secret = wake_secret(server)
    node_a, node_b = nodes(server)[0], nodes(server)[-1]
    group = f"workers-{uuid.uuid4().hex[:8]}"
    rx = WakeReceiver(secret, node_b.url, group)
    client_id = "w-zero"
    try:
        # The worker registers: persistent, wakeable, a member of the group on the logged topic.
        first = await agent(node_b.url, client_id)
        await first.set_presence(wake_worker.advert(rx.url), room_id=ROOM)
        await subscribe_ok(first, TOPIC, SubscribeOptions(load_balance=True, load_balance_group=group))
        alice = await connect(node_a.url, "dev-token-alice")
        ev = watch(alice, "join", "update", "waking")
        await alice.set_presence({"who": "alice"}, room_id=ROOM)
        await ev["join"].wait_for(lambda a: a.actor_token_id == "alice")
        await listed(alice, "agent-1", "online")
        # Scale to zero.
        await close(first)
        await listed(alice, "agent-1", "offline")

        # Work arrives on node A: stored (published), and the member is woken.
        job = {"job": uuid.uuid4().hex}
        assert await emit_ack(alice, TOPIC, job) is None
        await ev["waking"].wait_for(lambda a: a.actor_token_id == "agent-1", what="the waking event")
        assert await asyncio.to_thread(rx.wait_requests, 1, T * 2), "no wake request"
        (wake,) = rx.requests
        assert (wake["projectId"], wake["app"], wake["room"]) == ("demo-project", "demo", ROOM)
        assert (wake["actorTokenId"], wake["clientId"], wake["reason"], wake["topic"]) == ("agent-1", client_id, "dispatch", "tasks")
        assert wake["deliveryId"] and isinstance(wake["timestamp"], int) and not rx.bad

        # The worker process connects to node B with its clientId and collects the replay.
        (proc,) = rx.workers
        out, err = await asyncio.to_thread(proc.communicate, timeout=30)
        assert proc.returncode == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[-1] == {"done": 1}, out
        (got,) = lines[:-1]
        assert got["data"] == job and got["isReplay"] is True and got["msgId"]
        # Done and gone again: offline and wakeable. On the way it connected and announced again:
        # online (a `join`: it had no live entry). (The SDK's ActorPresence objects are updated in
        # place, so the frames tell the sequence.)
        await listed(alice, "agent-1", "offline")
        await ev["update"].wait_for(lambda a: a.actor_token_id == "agent-1" and a.status == "offline")
        seq = [(f["event"], f["data"].get("status")) for f in alice.frames("presence") if f["data"]["actor_token_id"] == "agent-1"]
        assert seq == [("update", "offline"), ("waking", "waking"), ("join", "online"), ("update", "offline")], seq
        # The next job wakes a second worker whose replay holds that job alone: the first one's
        # ack cleared it.
        job2 = {"job": uuid.uuid4().hex}
        assert await emit_ack(alice, TOPIC, job2) is None
        await ev["waking"].wait_count(2, timeout=T * 2)
        assert await asyncio.to_thread(rx.wait_requests, 2, T * 2), "no second wake request"
        out, err = await asyncio.to_thread(rx.workers[1].communicate, timeout=30)
        assert rx.workers[1].returncode == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert [m["data"] for m in lines[:-1]] == [job2] and lines[-1] == {"done": 1}, out
        # Exactly one wake request per publish (issue 35: checking right after the first one
        # arrived could not see a late duplicate). Both deliveries finished, answered 2xx (their
        # last attempt is over, so no retry follows), and the member went offline again after
        # the second worker: no waking period is open, so no node can start another wake.
        await listed(alice, "agent-1", "offline")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + T
        while wake_deliveries(server, "ok") < 2:
            assert loop.time() < deadline, "two wake deliveries counted ok"
            await asyncio.sleep(0.1)  # a counter, written after the receiver's answer: no event
        assert wake_deliveries(server, "ok") == 2
        assert len(rx.requests) == 2 and len(rx.workers) == 2, rx.requests
        assert rx.requests[1]["deliveryId"] != wake["deliveryId"], rx.requests
        assert rx.requests[1]["clientId"] == client_id and not rx.bad
    finally:
        rx.stop()
        await remove_member(node_b.url, client_id)


@pytest.mark.timeout(60)
async def test_a_failing_wake_answers_the_publisher_42950(skua_factory):
    server = skua_factory("--grpc-listen", "127.0.0.1:0")
    secret = wake_secret(server)
    rx = WakeReceiver(secret, nodes(server)[-1].url, "unused", status=500)
    client_id = "w-fail"
    try:
        first = await agent(nodes(server)[-1].url, client_id)
        await first.set_presence({**wake_worker.advert(rx.url), "wake": {"url": rx.url, "timeoutMs": 20000}}, room_id=ROOM)
        await first.fetch_presence(room_id=ROOM)
        await close(first)
        alice = make_client(nodes(server)[0].url, "dev-token-alice")
        await asyncio.wait_for(alice.connect(), T * 2)
        await listed(alice, "agent-1", "offline")
        errors = Recorder("alice errors")
        alice.on("error", errors)
        assert await emit_ack(alice, TOPIC, {"job": 1}) is None  # the publish stands

        await asyncio.to_thread(rx.arrived.wait, T * 2)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while not [f for f in alice.frames("error") if f.get("code") == 42950]:
            assert loop.time() < deadline, f"no 42950: {alice.frames('error')}"
            await asyncio.sleep(0.1)  # waiting for a frame the SDK only logs
        (frame,) = [f for f in alice.frames("error") if f.get("code") == 42950]
        assert frame["error"] == "wake_failed" and frame["topic"] == TOPIC and frame["actorTokenId"] == "agent-1"
        assert frame.get("msgRef"), frame
        assert len(rx.requests) == 3  # three attempts, one wake
        # The engine counts it as a wake, not as a trigger.
        deadline = loop.time() + 5
        while wake_deliveries(server, "status") < 1:
            assert loop.time() < deadline, "no skua_webhook_deliveries_total{kind=\"wake\",outcome=\"status\"}"
            await asyncio.sleep(0.1)  # the counter is written after the frame the SDK only logs
        # Back to offline: wakeable again.
        await listed(alice, "agent-1", "offline")
    finally:
        rx.stop()
        await remove_member(nodes(server)[-1].url, client_id)
