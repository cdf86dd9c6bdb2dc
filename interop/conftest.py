"""Fixtures: a fresh `skua serve --dev` per test on an ephemeral port, and a runner for
`async def` tests (asyncio.run with a time limit, then every SDK client is closed)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import atexit
import os
import shutil
import re
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

import helpers

REPO_ROOT = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"^skua listening on (?P<host>\S+):(?P<port>\d+)\s*$")
MQTT_LISTENING = re.compile(r"^skua mqtt listening on (?P<host>\S+):(?P<port>\d+)\s*$")
MQTTS_LISTENING = re.compile(r"^skua mqtts listening on (?P<host>\S+):(?P<port>\d+)\s*$")
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0
DEFAULT_TEST_TIMEOUT_S = 30.0

logging.getLogger("interop").setLevel(logging.DEBUG)


def skua_bin() -> Path:
    """SKUA_BIN (relative paths are taken from the repo root), default target/debug/skua."""
    path = Path(os.environ.get("SKUA_BIN", "target/debug/skua"))
    return path if path.is_absolute() else REPO_ROOT / path


class SkuaServer:
    """One `skua serve --dev --listen 127.0.0.1:0 [flags]` subprocess."""

    def __init__(self, binary: Path, flags: list[str]):
        if "--store" not in flags:
            flags = ["--store", "sqlite::memory:", *flags]
        # `--dev` would bind the gRPC listener on the fixed 127.0.0.1:50051, which every server of
        # the run (and of any other run on the machine) races for: each gets a port of its own
        # (issue 35); tests that use gRPC read it from "skua grpc listening on".
        if "--grpc-listen" not in flags:
            flags = ["--grpc-listen", "127.0.0.1:0", *flags]
        self.cmd = [str(binary), "serve", "--dev", "--listen", "127.0.0.1:0", *flags]
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.port: int | None = None
        self._listening = threading.Event()
        # With --mqtt-listen: the MQTT listener's port ("skua mqtt listening on", test_mqtt.py).
        self.mqtt_port: int | None = None
        self.mqtt_listening = threading.Event()
        # With --mqtt-tls-listen: the MQTT-over-TLS port ("skua mqtts listening on"); printed
        # before the MQTT line, so it is known once `mqtt_listening` is set.
        self.mqtts_port: int | None = None
        env = {**os.environ, "NO_COLOR": "1"}
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
            cwd=REPO_ROOT,
        )
        # Both pipes are drained for the server's whole life (its log shares stdout).
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr, False), daemon=True),
        ]
        for t in self._readers:
            t.start()
        self._wait_listening()

    def _read(self, pipe, sink: list[str], is_stdout: bool) -> None:
        for line in pipe:
            sink.append(line.rstrip("\n"))
            if is_stdout and self.port is None:
                m = LISTENING.match(line)
                if m:
                    self.host = m["host"]
                    self.port = int(m["port"])
                    self._listening.set()
            if is_stdout and self.mqtts_port is None:
                m = MQTTS_LISTENING.match(line)
                if m:
                    self.mqtts_port = int(m["port"])
            if is_stdout and self.mqtt_port is None:
                m = MQTT_LISTENING.match(line)
                if m:
                    self.mqtt_port = int(m["port"])
                    self.mqtt_listening.set()
        if is_stdout:
            self._listening.set()  # EOF: the process is gone, stop waiting
            self.mqtt_listening.set()

    def _wait_listening(self) -> None:
        self._listening.wait(START_TIMEOUT_S)
        if self.port is None:
            self.stop()
            pytest.fail(
                f"skua did not print 'skua listening on HOST:PORT' within {START_TIMEOUT_S}s "
                f"(exit status {self.proc.returncode})\ncommand: {' '.join(self.cmd)}\n"
                f"--- stderr ---\n{self.text(self.stderr)}\n--- stdout ---\n{self.text(self.stdout)}",
                pytrace=False,
            )

    @staticmethod
    def text(lines: list[str]) -> str:
        return "\n".join(lines) or "(empty)"

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for t in self._readers:
            t.join(2)
        return self.proc.returncode


class ClusterState:
    """What the cluster server sets one test starts share, and what its teardown removes: one
    Postgres database of its own (made at the first start, so a restart within the test finds
    its data; dropped at teardown, so no registry, restore records, members or log carry into
    the next test) and the bus namespaces used (their retained messages cleared at teardown, so
    none accumulate on the machine's Mosquitto) (issue 35)."""

    def __init__(self) -> None:
        self.admin_url: str | None = None
        self.database: str | None = None
        self.database_url: str | None = None
        self.namespaces: list[str] = []

    def teardown(self) -> None:
        """Drops the database and clears the retained messages; call once the servers stopped."""
        if self.database is not None:
            drop_database(self.admin_url, self.database)
        mqtt = os.environ.get("SKUA_TEST_MQTT_URL")
        if mqtt and self.namespaces:
            clear_retained(mqtt, self.namespaces)


def cluster_backends(state: ClusterState) -> list[str] | None:
    """With SKUA_INTEROP_CLUSTER=1 every test runs against a 2-node cluster over the MQTT broker
    and Redis named by SKUA_TEST_MQTT_URL / SKUA_TEST_REDIS_URL (and the Postgres store named
    by SKUA_TEST_POSTGRES_URL when set), in a fresh namespace per server set and a database of
    the test's own (`state`)."""
    if os.environ.get("SKUA_INTEROP_CLUSTER") != "1":
        return None
    mqtt, redis = os.environ.get("SKUA_TEST_MQTT_URL"), os.environ.get("SKUA_TEST_REDIS_URL")
    if not mqtt or not redis:
        pytest.exit("SKUA_INTEROP_CLUSTER=1 needs SKUA_TEST_MQTT_URL and SKUA_TEST_REDIS_URL", returncode=3)
    namespace = "interop" + uuid.uuid4().hex[:12]
    state.namespaces.append(namespace)
    flags = ["--bus", mqtt, "--presence", redis, "--namespace", namespace]
    postgres = os.environ.get("SKUA_TEST_POSTGRES_URL")
    if postgres:
        if state.database is None:
            state.admin_url = postgres
            state.database, state.database_url = fresh_database(postgres)
        flags += ["--store", state.database_url]
    return flags


def psql(admin_url: str, sql: str) -> None:
    if shutil.which("psql") is None:
        pytest.exit("SKUA_TEST_POSTGRES_URL is set but psql (to create a fresh database) is missing", returncode=3)
    subprocess.run(["psql", admin_url, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, timeout=30)


def database_url(admin_url: str, name: str) -> str:
    head, _, query = admin_url.partition("?")
    base, _, _ = head.rpartition("/")
    return f"{base}/{name}" + (f"?{query}" if query else "")


# Databases made and not yet dropped: dropped at exit, should a teardown not run.
_LIVE_DATABASES: set[tuple[str, str]] = set()


def drop_database(admin_url: str, name: str) -> None:
    psql(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _LIVE_DATABASES.discard((admin_url, name))


def create_database(admin_url: str, name: str, template: str | None = None) -> None:
    psql(admin_url, f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    _LIVE_DATABASES.add((admin_url, name))


@atexit.register
def _drop_live_databases() -> None:
    for admin_url, name in list(_LIVE_DATABASES):
        drop_database(admin_url, name)


_TEMPLATES: dict[str, str] = {}


def migrated_template(admin_url: str) -> str:
    """A database migrated by this build's `skua migrate`, once per test session, dropped at
    exit: each test's database is a copy of it (a file copy, much faster than migrating)."""
    if admin_url in _TEMPLATES:
        return _TEMPLATES[admin_url]
    name = "skua_interop_" + uuid.uuid4().hex[:12]
    create_database(admin_url, name)
    result = subprocess.run([str(skua_bin()), "migrate", "--store", database_url(admin_url, name)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        pytest.exit(f"skua migrate failed: {result.stderr}", returncode=3)
    _TEMPLATES[admin_url] = name
    return name


def fresh_database(admin_url: str) -> tuple[str, str]:
    """A new migrated database on the server of `admin_url`: its name and URL. Dropped by the
    test's teardown, or at exit should the teardown not run."""
    template = migrated_template(admin_url)
    name = "skua_interop_" + uuid.uuid4().hex[:12]
    create_database(admin_url, name, template)
    return name, database_url(admin_url, name)


def clear_retained(url: str, namespaces: list[str], within: float = 10.0) -> int:
    """Clears every retained message under `<namespace>/#` for each of `namespaces` on the MQTT
    broker at `url`; returns how many. The retained messages arrive when the subscriptions are
    made; a marker published after the last SUBACK comes back behind them (one connection, in
    order), so no quiet window decides when all were seen."""
    import paho.mqtt.client as paho
    from urllib.parse import urlparse

    u = urlparse(url)
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="", protocol=paho.MQTTv311)
    if u.username:
        client.username_pw_set(u.username, u.password)
    if u.scheme == "mqtts":
        client.tls_set()
    marker = f"{namespaces[-1]}/interop-clear/{uuid.uuid4().hex}"
    topics: set[str] = set()
    subscribed = threading.Semaphore(0)
    seen_marker = threading.Event()

    def on_message(_c, _u, msg):
        if msg.topic == marker:
            seen_marker.set()
        elif msg.retain and msg.payload:
            topics.add(msg.topic)

    client.on_message = on_message
    client.on_subscribe = lambda *_: subscribed.release()
    client.connect(u.hostname or "127.0.0.1", u.port or (8883 if u.scheme == "mqtts" else 1883))
    client.loop_start()
    try:
        for ns in namespaces:
            client.subscribe(f"{ns}/#", qos=1)
        for ns in namespaces:
            if not subscribed.acquire(timeout=within):
                raise AssertionError(f"clearing retained messages: no SUBACK from {url} within {within}s")
        client.publish(marker, b"marker", qos=1)
        if not seen_marker.wait(within):
            raise AssertionError(f"clearing retained messages: the marker did not come back within {within}s")
        for topic in sorted(topics):
            client.publish(topic, b"", qos=1, retain=True).wait_for_publish(within)
    finally:
        client.loop_stop()
        client.disconnect()
    return len(topics)


class SkuaCluster:
    """Two nodes of one cluster. Each read of `url` names the next node, so the clients a test
    creates are split across the nodes."""

    def __init__(self, binary: Path, flags: list[str], backends: list[str], nodes: int = 2):
        # SKUA_BIN_PEER: every odd node runs that binary (the previous release, in
        # scripts/mixed-versions.sh), so one cluster mixes two versions.
        peer = os.environ.get("SKUA_BIN_PEER")
        binaries = [binary, Path(peer) if peer else binary]
        self.nodes = [SkuaServer(binaries[i % 2], [*flags, *backends, "--node-id", f"interop-{i}"]) for i in range(nodes)]
        self.cmd = self.nodes[0].cmd
        self._turn = 0

    @property
    def url(self) -> str:
        node = self.nodes[self._turn % len(self.nodes)]
        self._turn += 1
        return node.url

    @property
    def stdout(self) -> list[str]:
        return [line for n in self.nodes for line in n.stdout]

    @property
    def stderr(self) -> list[str]:
        return [line for n in self.nodes for line in n.stderr]

    text = staticmethod(SkuaServer.text)

    def stop(self) -> int:
        codes = [n.stop() for n in self.nodes]
        return next((c for c in codes if c != 0), 0)


@pytest.fixture(scope="session")
def skua_binary() -> Path:
    path = skua_bin()
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.exit(
            f"Skua binary not found at {path}: build it with `cargo build -p skua-server` "
            f"or point SKUA_BIN at it.",
            returncode=3,
        )
    return path


@pytest.fixture
def skua_factory(skua_binary):
    """`start(*flags)` starts a dev server with extra flags (e.g. "--idle-timeout", "1s");
    every server it started is stopped (SIGTERM) after the test. Their output is printed at
    teardown, so pytest shows it for a failed test."""
    servers: list[SkuaServer | SkuaCluster] = []
    cluster = ClusterState()

    def start(*flags: str) -> SkuaServer | SkuaCluster:
        backends = cluster_backends(cluster)
        server = SkuaServer(skua_binary, list(flags)) if backends is None else SkuaCluster(skua_binary, list(flags), backends)
        servers.append(server)
        return server

    yield start
    for server in servers:
        rc = server.stop()
        print(f"=== {' '.join(server.cmd)} (exit {rc})\n--- stdout ---\n{server.text(server.stdout)}"
              f"\n--- stderr ---\n{server.text(server.stderr)}")
    cluster.teardown()


@pytest.fixture
def skua(skua_factory) -> SkuaServer:
    """A fresh dev server with the default flags."""
    return skua_factory()


def pytest_collection_modifyitems(config, items):
    """Tests marked `cluster_only` run only in the cluster run (SKUA_INTEROP_CLUSTER=1) and
    `one_node_only` ones only in the one-node run: in the other run they are deselected, not
    skipped, so each runs in exactly one of the two runs scripts/test.sh makes (issue 35)."""
    cluster = os.environ.get("SKUA_INTEROP_CLUSTER") == "1"
    other = "one_node_only" if cluster else "cluster_only"
    drop = [item for item in items if item.get_closest_marker(other)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not item.get_closest_marker(other)]


_SKIPPED: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped:
        _SKIPPED.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """Under CI=true a skipped test fails the run: a skip exits 0 and would pass unseen."""
    if _SKIPPED and os.environ.get("CI") == "true":
        print(f"\ninterop: {len(_SKIPPED)} skipped under CI=true: {', '.join(_SKIPPED)}")
        session.exitstatus = 1


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs `async def` tests in a fresh event loop with a time limit (`@pytest.mark.timeout`,
    default 30 s), then closes every SDK client the test opened, in the same loop."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    marker = pyfuncitem.get_closest_marker("timeout")
    limit = marker.args[0] if marker else DEFAULT_TEST_TIMEOUT_S
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

    async def main():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        try:
            await asyncio.wait_for(pyfuncitem.obj(**kwargs), limit)
        except asyncio.TimeoutError as e:
            if loop.time() >= deadline:
                raise AssertionError(f"the test did not finish within {limit}s") from e
            raise
        finally:
            await helpers.close_all()

    asyncio.run(main())
    return True
