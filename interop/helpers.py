"""Helpers for driving Skua with the real NoLag Python SDK.

Everything here waits on events set by SDK callbacks (asyncio futures and events with a
timeout); nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import sys
import time
import urllib.request
from typing import Any, Callable, Optional
from urllib.parse import urlparse

import jwt
import msgpack
from nolag import NoLag, NoLagOptions

#: How long to wait for something that should happen promptly.
T = 5.0

#: The dev JWT secret of the demo project (shared/CONTRACT.md).
DEV_JWT_SECRET = "skua-dev-secret"

log = logging.getLogger("interop.sdk")

# Every client created by `make_client` in the running test; conftest closes them after it.
_live: list["TracedNoLag"] = []
_labels = itertools.count(1)


class TracedNoLag(NoLag):
    """The real SDK client, unchanged in behaviour, that also keeps a record of the frames it
    sent and received (for assertions on the wire and for failure reports) and labels its
    debug log with the client's name."""

    def __init__(self, token: str, options: NoLagOptions, label: str):
        super().__init__(token, options)
        self.label = label
        self.sent: list[dict] = []
        self.received: list[Any] = []  # decoded frames, b"" for heartbeat echoes
        self.received_raw: list[bytes] = []
        self._frame_seen = asyncio.Event()

    async def _send(self, message: dict, op: str = "send", topic: Optional[str] = None) -> None:
        self.sent.append(message)
        await super()._send(message, op, topic)

    async def _handle_message(self, data: bytes) -> None:
        raw = data if isinstance(data, bytes) else str(data).encode()
        self.received_raw.append(raw)
        try:
            self.received.append(msgpack.unpackb(raw) if raw else b"")
        except Exception as e:  # noqa: BLE001 - recorded, the SDK decides what to do with it
            self.received.append(f"<undecodable {e!r}: {raw[:64]!r}>")
        self._frame_seen.set()
        await super()._handle_message(data)

    def _log(self, *args) -> None:
        log.debug("[%s] %s", self.label, " ".join(str(a) for a in args))

    def frames(self, type_: str) -> list[dict]:
        """Received frames of one `type`."""
        return [f for f in self.received if isinstance(f, dict) and f.get("type") == type_]

    async def wait_frame(self, pred: Callable[[dict], bool], timeout: float = T, what: str = "a frame") -> dict:
        """The first received frame (a map) matching `pred`, awaiting it if need be."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for f in self.received:
                if isinstance(f, dict) and pred(f):
                    return f
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"{self.label}: timed out after {timeout}s waiting for {what}; got {self.received!r}")
            self._frame_seen.clear()
            try:
                await asyncio.wait_for(self._frame_seen.wait(), remaining)
            except asyncio.TimeoutError:
                pass


def make_client(url: str, token: str, label: Optional[str] = None, **options: Any) -> TracedNoLag:
    """A client that is not connected yet. Options default to no auto-reconnect (tests that
    need it turn it on) and the SDK's debug logging on (pytest shows it for failed tests)."""
    opts = NoLagOptions(**{"url": url, "debug": True, "reconnect": False, **options})
    name = token if len(token) <= 24 else f"{token[:10]}…"
    client = TracedNoLag(token, opts, label or f"{name}#{next(_labels)}")
    _live.append(client)
    return client


async def connect(url: str, token: str, label: Optional[str] = None, **options: Any) -> TracedNoLag:
    """A connected client."""
    client = make_client(url, token, label, **options)
    await asyncio.wait_for(client.connect(), T * 2)
    return client


async def close(client: NoLag) -> None:
    """`client.disconnect()` (synchronous in the SDK), then wait for the socket to close."""
    ws = client._ws
    client.disconnect()
    if ws is not None:
        try:
            await asyncio.wait_for(ws.wait_closed(), T)
        except Exception:  # noqa: BLE001 - best effort: a timeout or an already-dead socket
            pass


async def close_all() -> None:
    clients, _live[:] = list(_live), []
    await asyncio.gather(*(close(c) for c in clients), return_exceptions=True)


class Recorder:
    """A callback that records the arguments of every call and lets a test await a call
    matching a predicate. For message handlers each entry is `(data, meta)`."""

    def __init__(self, name: str = "events"):
        self.name = name
        self.calls: list[tuple] = []
        self._changed = asyncio.Event()

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)
        self._changed.set()

    @property
    def data(self) -> list[Any]:
        """First arguments of every call (the payloads, for a message handler)."""
        return [c[0] if c else None for c in self.calls]

    async def wait_for(self, pred: Callable[..., bool], timeout: float = T, what: str = "a matching call") -> tuple:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for call in self.calls:
                if pred(*call):
                    return call
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}; got {self.calls!r}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def wait_data(self, data: Any, timeout: float = T) -> tuple:
        """Waits for a call whose first argument equals `data` exactly (types included)."""
        return await self.wait_for(lambda d, *_: strict_equal(d, data), timeout, what=f"data {data!r}")

    async def wait_count(self, n: int, timeout: float = T) -> None:
        await self.wait_for_all(lambda calls: len(calls) >= n, timeout, what=f"{n} calls")

    async def wait_for_all(self, pred: Callable[[list], bool], timeout: float = T, what: str = "condition") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not pred(self.calls):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}; got {self.calls!r}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass


def strict_equal(a: Any, b: Any) -> bool:
    """Equality that also compares types (so 1, 1.0 and True differ, and bytes != str)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return a == b


async def subscribe_ack(client: NoLag, topic: str, options: Any = None, timeout: float = T) -> Optional[Exception]:
    """Subscribes with an ack callback; returns what the callback got (None on `subscribed`)."""
    fut: asyncio.Future = asyncio.get_running_loop().create_future()
    await client.subscribe(topic, options, callback=lambda err: fut.done() or fut.set_result(err))
    return await asyncio.wait_for(fut, timeout)


async def subscribe_ok(client: NoLag, topic: str, options: Any = None) -> None:
    err = await subscribe_ack(client, topic, options)
    assert err is None, f"subscribe {topic!r} failed: {err!r}"


async def emit_ack(client: NoLag, topic: str, data: Any, options: Any = None, timeout: float = T) -> Optional[Exception]:
    """Publishes with an ack callback; returns what the callback got (None on `published`)."""
    fut: asyncio.Future = asyncio.get_running_loop().create_future()
    await client.emit(topic, data, options, callback=lambda err: fut.done() or fut.set_result(err))
    return await asyncio.wait_for(fut, timeout)


async def barrier(client: NoLag) -> None:
    """A round trip on `client`'s own connection. The server handles one connection's frames
    in order, so once the reply is in, every frame this client sent before (a setFilters, a
    presence) has been applied. (The SDK gives no ack for those: it ignores `filtersUpdated`.)"""
    await client.fetch_presence(room_id="random")


_sentinels = itertools.count(1)


def sentinel(**extra: Any) -> dict:
    """A unique payload, published last to prove that earlier ones did not arrive (each
    publisher's messages keep their order)."""
    return {"sentinel": next(_sentinels), **extra}


def mint_jwt(sub: str, expires_in: float = 3600, secret: str = DEV_JWT_SECRET, **claims: Any) -> str:
    payload: dict[str, Any] = {"sub": sub, "exp": int(time.time() + expires_in), **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


class TcpProxy:
    """Pipes TCP connections to `target` (a ws URL, changeable with `retarget`); `cut()` closes
    every piped connection at once, as a network change does to a browser's tabs. While
    `hold()` is on, new connections are accepted but not piped until `release()`, so a test
    decides when a reconnect reaches the server."""

    def __init__(self, target: str):
        self.retarget(target)
        self.pipes: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self.server: Optional[asyncio.base_events.Server] = None
        self.open = asyncio.Event()
        self.open.set()

    def hold(self) -> None:
        self.open.clear()

    def release(self) -> None:
        self.open.set()

    def retarget(self, target: str) -> None:
        url = urlparse(target)
        self.target = (url.hostname, url.port)

    async def start(self) -> str:
        """Listens on an ephemeral port; returns the ws URL clients use."""
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return f"ws://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/ws"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.open.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.pipes.append((writer, up_writer))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        """Closes both sides of every piped connection (the listener stays open)."""
        pipes, self.pipes = self.pipes, []
        for down, up in pipes:
            down.transport.abort()
            up.transport.abort()

    async def stop(self) -> None:
        self.release()
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def skip_loudly(why: str) -> None:
    """Skips the calling test for a missing tool or service, saying so on stderr and in the run's
    skip report ($SKUA_TEST_SKIP_LOG, listed by scripts/test.sh); under CI=true it fails instead."""
    import pytest

    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    print(f"\n!!! SKIPPED: {why}", file=sys.stderr)
    log = os.environ.get("SKUA_TEST_SKIP_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{why}\n")
    pytest.skip(why)


def metric(ws_url: str, name: str) -> float:
    """The value of the unlabelled sample `name` on the /metrics of the node at `ws_url`;
    an error when it is missing (a renamed metric must not read as 0)."""
    base = ws_url.replace("ws://", "http://", 1).rsplit("/", 1)[0]
    with urllib.request.urlopen(base + "/metrics", timeout=T) as r:
        text = r.read().decode()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    assert m, f"metric {name} missing from {base}/metrics"
    return float(m.group(1))


async def until_metric(ws_url: str, name: str, pred: Callable[[float], bool], timeout: float = T) -> float:
    """Polls `name` on the node at `ws_url` until `pred` holds (an event the node exposes only
    through /metrics), failing after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await loop.run_in_executor(None, metric, ws_url, name)
        if pred(value):
            return value
        assert loop.time() < deadline, f"{name} = {value} after {timeout}s"
        await asyncio.sleep(0.05)
