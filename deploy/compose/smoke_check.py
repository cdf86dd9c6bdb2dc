"""Checks a running Skua cluster in containers the way a user would, with the real NoLag Python
SDK (run by deploy/compose-smoke.sh and deploy/compose-cluster.sh in interop/'s virtualenv).

  smoke_check.py drain --edges URL,URL[,URL] --stop "COMMAND" [--stable URL] [--heal "COMMAND"]

An SDK subscriber and an SDK publisher connect through a small load balancer (this file's
`Balancer`: new connections go to the first edge whose /readyz answers 200, as a cloud load
balancer's health check would send them), both on the first edge. A stable subscriber sits on
the last edge. The publisher publishes numbered messages on the logged topic
demo/general/tasks, each waited for (`published` ack) and retried after an error, as an
application would. Midway COMMAND runs (`docker compose stop edge-1`, or a `docker network
disconnect`): the first edge goes away, both SDK clients reconnect by themselves through the
balancer to another edge, and the publisher carries on. Checked: every acknowledged message
reached the stable subscriber, the reconnected subscriber's restored subscription delivers
again, and the clients now sit on another edge. Prints one line per fact; exits 1 on failure.

  smoke_check.py presence --edges URL,URL,URL --cut-edge N --cut "COMMAND" --heal "COMMAND"
  (edges are named edge-1, edge-2, … in the order given; N counts from 0)

Presence across a partition: one member per edge in room general; COMMAND cuts edge N off the
network; the others see its member leave (the cut edge's presence entries expire) while its SDK
client reconnects through the balancer to a live edge and is in the room again; after --heal
the cut edge serves a new client whose presence everyone sees (it rejoined the cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "interop"))

from helpers import Recorder, connect, emit_ack, subscribe_ok  # noqa: E402

LOGGED = "demo/general/tasks"
failures: list[str] = []


def fact(ok: bool, text: str) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {text}", flush=True)
    if not ok:
        failures.append(text)


def ready(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=1) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001 - refused, reset, 503: not ready
        return False


class Balancer:
    """A TCP load balancer on 127.0.0.1: each new connection goes to the first backend that is
    ready (GET /readyz → 200) and that accepts it. `routes` records where each one went."""

    def __init__(self, backends: list[tuple[str, int]]):
        self.backends = backends
        self.routes: list[int] = []
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        for i, (host, port) in enumerate(self.backends):
            if not await loop.run_in_executor(None, ready, host, port):
                continue
            try:
                up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
            except (OSError, asyncio.TimeoutError):
                continue
            self.routes.append(i)
            try:
                await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
            except asyncio.CancelledError:
                pass  # the check is over: asyncio.run cancels what is still open
            return
        writer.close()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            try:
                dst.close()
            except OSError:
                pass


def hostport(url: str) -> tuple[str, int]:
    u = urlparse(url)
    return u.hostname or "127.0.0.1", u.port or 80


async def run_command(cmd: str) -> int:
    proc = await asyncio.create_subprocess_shell(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        print(err.decode(errors="replace"), file=sys.stderr)
    return proc.returncode or 0


class Publisher:
    """Publishes 0, 1, 2, … on the logged topic; a number counts once its `published` ack is in.
    After an error or a timeout it waits for the SDK to reconnect and sends the same number again
    (a retry may store a message twice: at least once, never lost)."""

    def __init__(self, client):
        self.client = client
        self.acked: list[int] = []
        self.retries = 0
        self.next = 0

    async def publish(self, count: int, deadline_s: float = 60) -> None:
        end = time.monotonic() + deadline_s
        target = self.next + count
        while self.next < target:
            if time.monotonic() > end:
                raise AssertionError(f"publisher stuck at message {self.next}")
            if not self.client.connected:
                await asyncio.sleep(0.05)  # polling the SDK's state: it has no awaitable for it
                continue
            try:
                err = await emit_ack(self.client, LOGGED, {"n": self.next}, timeout=3)
            except Exception:  # noqa: BLE001 - the socket went away mid-publish: retry
                err = "no ack"
            if err is None:
                self.acked.append(self.next)
                self.next += 1
            else:
                self.retries += 1


async def drain(args) -> None:
    edges = [hostport(u) for u in args.edges.split(",")]
    lb = Balancer(edges)
    await lb.start()
    stable_url = args.stable or args.edges.split(",")[-1]
    stable = await connect(stable_url, "dev-token-carol", "stable")
    moving = await connect(lb.url, "dev-token-alice", "moving", reconnect=True, reconnect_interval=0.5)
    pub_client = await connect(lb.url, "dev-token-bob", "publisher", reconnect=True, reconnect_interval=0.5)
    fact(lb.routes[:2] == [0, 0], f"SDK clients connected through the balancer to the first edge (routes {lb.routes})")
    got_stable, got_moving = Recorder("stable"), Recorder("moving")
    stable.on(LOGGED, got_stable)
    moving.on(LOGGED, got_moving)
    reconnects = Recorder("reconnects")
    moving.on("reconnect", lambda: reconnects("moving"))
    pub_client.on("reconnect", lambda: reconnects("publisher"))
    await subscribe_ok(stable, LOGGED)
    await subscribe_ok(moving, LOGGED)

    pub = Publisher(pub_client)
    await pub.publish(20)
    await got_moving.wait_for_all(lambda c: len(c) >= 20, timeout=10, what="20 messages before the cut")
    started = time.monotonic()
    stopping = asyncio.ensure_future(run_command(args.stop))
    # Keep publishing while the edge goes away, until both clients are back.
    while not (stopping.done() and len({r for (r,) in reconnects.calls}) == 2):
        if time.monotonic() - started > 90:
            break
        await pub.publish(1)
    rc = await stopping
    fact(rc == 0, f"`{args.stop}` exited {rc}")
    back = sorted({r for (r,) in reconnects.calls})
    fact(back == ["moving", "publisher"], f"both SDK clients reconnected by themselves ({back}) "
         f"{time.monotonic() - started:.1f}s after the cut began")
    fact(all(r != 0 for r in lb.routes[2:]) and len(lb.routes) > 2,
         f"their new connections went to another edge (routes {lb.routes})")
    before = len(got_moving.calls)
    await pub.publish(20)
    if args.heal:
        rc = await run_command(args.heal)
        fact(rc == 0, f"`{args.heal}` exited {rc}")
    acked = set(pub.acked)
    try:
        await got_stable.wait_for_all(lambda c: acked <= {d["n"] for d, _ in c}, timeout=15,
                                      what="every acknowledged message")
    except AssertionError:
        pass
    seen = {d["n"] for d, _ in got_stable.calls}
    lost = sorted(acked - seen)
    dup = len(got_stable.calls) - len(seen)
    fact(not lost, f"{len(acked)} messages acknowledged on logged {LOGGED}, {len(seen)} distinct received by the "
         f"stable subscriber, lost {lost[:10]}{'…' if len(lost) > 10 else ''} "
         f"({pub.retries} publish retries, {dup} duplicates)")
    last = pub.acked[-1]
    try:
        await got_moving.wait_for(lambda d, _m: d["n"] == last, timeout=10, what=f"message {last}")
        ok = True
    except AssertionError:
        ok = False
    fact(ok and len(got_moving.calls) > before,
         f"the reconnected subscriber's restored subscription delivers on the new edge "
         f"(message {last} received; {len(got_moving.calls)} in all)")
    for c in (stable, moving, pub_client):
        c.disconnect()


async def members(client) -> set[str]:
    return {m["actorTokenId"] for m in await client.fetch_presence(room_id="general")}


async def await_members(client, pred, what: str, timeout: float) -> float:
    """Polls the room's presence list until `pred(members)` holds (a fetch is a request: there is
    no event for "the list now looks like this"); returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        got = await members(client)
        if pred(got):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; members {sorted(got)}")
        await asyncio.sleep(0.5)


async def presence(args) -> None:
    urls = args.edges.split(",")
    edges = [hostport(u) for u in urls]
    cut = args.cut_edge
    # The balancer prefers the cut edge, so the moving member starts there.
    lb = Balancer([edges[cut]] + [e for i, e in enumerate(edges) if i != cut])
    await lb.start()
    tokens = ["dev-token-alice", "dev-token-bob", "dev-token-carol"]
    actors = ["alice", "bob", "carol"]
    clients = []
    for i, url in enumerate(urls):
        if i == cut:
            c = await connect(lb.url, tokens[i], f"member-{i}", reconnect=True, reconnect_interval=0.5)
        else:
            c = await connect(url, tokens[i], f"member-{i}")
        await c.set_presence({"edge": i}, room_id="general")
        clients.append(c)
    cut_actor = actors[cut]
    observers = [i for i in range(len(urls)) if i != cut]
    for i in observers:
        await await_members(clients[i], lambda m: set(actors) <= m, "every member", 15)
    fact(True, f"{len(urls)} members, one per edge, see each other in room general")

    reconnected = Recorder("cut member reconnects")
    clients[cut].on("reconnect", reconnected)
    started = time.monotonic()
    rc = await run_command(args.cut)
    fact(rc == 0, f"`{args.cut}` exited {rc}")
    # Gone from the room (polled: the SDK reports a leave only for members it saw join).
    for i in observers:
        try:
            await await_members(clients[i], lambda m: cut_actor not in m, f"{cut_actor} gone", args.timeout)
            fact(True, f"edge-{i + 1}: {cut_actor} left the room with the cut edge "
                 f"({time.monotonic() - started:.1f}s after the cut)")
        except AssertionError as e:
            fact(False, f"edge-{i + 1}: {e}")
    # The cut edge's member: its socket dies with the edge's network; the SDK's keepalive
    # notices and it reconnects through the balancer to a live edge, presence re-sent.
    try:
        await reconnected.wait_count(1, timeout=args.timeout)
        fact(lb.routes[-1] != 0, f"the cut edge's SDK client reconnected to a live edge "
             f"{time.monotonic() - started:.1f}s after the cut (routes {lb.routes})")
    except AssertionError as e:
        fact(False, f"the cut edge's SDK client did not reconnect: {e}")
    for i in observers:
        try:
            await await_members(clients[i], lambda m: cut_actor in m, f"{cut_actor} back", args.timeout)
            fact(True, f"edge-{i + 1} has {cut_actor} in the room again ({time.monotonic() - started:.1f}s after the cut)")
        except AssertionError as e:
            fact(False, f"presence did not heal on edge-{i + 1}: {e}")

    rc = await run_command(args.heal)
    fact(rc == 0, f"`{args.heal}` exited {rc}")
    # Rejoined: a new client on the healed edge is seen by the others.
    healed = time.monotonic()
    host, port = edges[cut]
    while not ready(host, port) and time.monotonic() - healed < args.timeout:
        await asyncio.sleep(0.2)  # polling /readyz: an HTTP probe has no event to await
    fact(ready(host, port), f"the healed edge is ready ({time.monotonic() - healed:.1f}s after it was connected)")
    newcomer = await connect(urls[cut], "dev-token-agent", "newcomer")
    await newcomer.set_presence({"edge": cut, "healed": True}, room_id="general")
    for i in observers:
        try:
            took = await await_members(clients[i], lambda m: "agent-1" in m, "agent-1 of the healed edge", args.timeout)
            fact(True, f"edge-{i + 1} sees a client of the healed edge in the room after {took:.1f}s (it rejoined)")
        except AssertionError as e:
            fact(False, f"the healed edge did not rejoin: {e}")
    for c in clients + [newcomer]:
        c.disconnect()


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("drain")
    d.add_argument("--edges", required=True)
    d.add_argument("--stop", required=True)
    d.add_argument("--stable")
    d.add_argument("--heal", help="a command run after the clients came back, before the count")
    s = sub.add_parser("presence")
    s.add_argument("--edges", required=True)
    s.add_argument("--cut-edge", type=int, default=0)
    s.add_argument("--cut", required=True)
    s.add_argument("--heal", required=True)
    s.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    try:
        asyncio.run(drain(args) if args.cmd == "drain" else presence(args))
    except Exception as e:  # noqa: BLE001 - reported as a failed fact
        fact(False, f"{type(e).__name__}: {e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
