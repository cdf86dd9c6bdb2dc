"""MQTT devices (issue 37, PROTOCOL-NOTES N49–N54): paho-mqtt (3.1.1 and 5.0) on the MQTT
listener, the NoLag Python SDK on the WebSocket side of the same rooms. Exact packets the
protocol defines (CONNACK codes, keep-alive, QoS 2 duplicates, wills) are checked on a raw
socket, where paho would hide them."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request

import msgpack
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
import pytest
from nolag import EmitOptions

from conftest import skua_bin
from helpers import T, Recorder, connect, emit_ack, mint_jwt, sentinel, strict_equal, subscribe_ok

# One node: `start` reads the node's MQTT port; the cluster run has its own test below.

MESSAGES = "demo/general/messages"
STATUS = "demo/general/status"


def start(skua_factory, *flags: str):
    server = skua_factory("--mqtt-listen", "127.0.0.1:0", *flags)
    assert server.mqtt_listening.wait(T) and server.mqtt_port, "no 'skua mqtt listening on' line"
    return server


class Device:
    """A paho client run on its own network thread; every callback lands in a queue the test
    reads with a timeout."""

    def __init__(self, port: int, token: str | None, v5: bool = True, client_id: str = "", keepalive: int = 30,
                 websocket: bool = False, ca: str | None = None, clean: bool = True, expiry: int = 0):
        """`websocket`: MQTT over WebSocket at `/mqtt` on `port` (the client listener); `ca`:
        over TLS, trusting that certificate file (mqtts, or wss with `websocket`). `clean`: clean
        session (3.1.1) or clean start (5.0); `expiry`: the 5.0 session expiry interval (a
        persistent session when above 0, N54)."""
        self.v5 = v5
        proto = paho.MQTTv5 if v5 else paho.MQTTv311
        transport = "websockets" if websocket else "tcp"
        extra = {} if v5 else {"clean_session": clean}
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=proto,
                                  transport=transport, **extra)
        if websocket:
            self.client.ws_set_options(path="/mqtt")
        if ca is not None:
            self.client.tls_set(ca_certs=ca)
        if token is not None:
            self.client.username_pw_set("device", token)
        self.connacks: queue.Queue = queue.Queue()
        self.messages: queue.Queue = queue.Queue()
        self.subacks: queue.Queue = queue.Queue()
        self.pubacks: dict[int, object] = {}
        self.puback_event = threading.Condition()
        self.disconnects: queue.Queue = queue.Queue()
        self.session_present: queue.Queue = queue.Queue()

        def on_connect(c, u, flags, rc, props):
            self.session_present.put(flags.session_present)
            self.connacks.put(rc)

        self.client.on_connect = on_connect
        self.client.on_message = lambda c, u, msg: self.messages.put(msg)
        self.client.on_subscribe = lambda c, u, mid, rcs, props: self.subacks.put((mid, rcs))
        self.client.on_publish = self._on_publish
        self.client.on_disconnect = lambda c, u, flags, rc, props: self.disconnects.put(rc)
        if v5:
            props = Properties(PacketTypes.CONNECT)
            if expiry:
                props.SessionExpiryInterval = expiry
            self.client.connect("127.0.0.1", port, keepalive, clean_start=clean, properties=props)
        else:
            self.client.connect("127.0.0.1", port, keepalive)
        self.client.loop_start()

    def _on_publish(self, c, u, mid, rc, props) -> None:
        with self.puback_event:
            self.pubacks[mid] = rc
            self.puback_event.notify_all()

    async def connack(self):
        return await asyncio.to_thread(self.connacks.get, True, T)

    async def subscribe(self, topic: str, qos: int = 1) -> list[int]:
        _, mid = self.client.subscribe(topic, qos)
        got_mid, rcs = await asyncio.to_thread(self.subacks.get, True, T)
        assert got_mid == mid
        return [rc.value for rc in rcs]

    async def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False):
        """Publishes; for QoS 1 and 2 returns the ack's reason code (once acked)."""
        info = self.client.publish(topic, payload, qos, retain)
        if qos == 0:
            await asyncio.to_thread(info.wait_for_publish, T)
            return None

        def acked():
            with self.puback_event:
                assert self.puback_event.wait_for(lambda: info.mid in self.pubacks, T), "no PUBACK/PUBCOMP"
                return self.pubacks[info.mid]

        return await asyncio.to_thread(acked)

    async def message(self, timeout: float = T):
        return await asyncio.to_thread(self.messages.get, True, timeout)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# ---- raw packets, for what paho would hide ----


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def connect_packet(level: int, password: str | None, keepalive: int = 30, will: tuple[str, bytes] | None = None,
                   client_id: str = "", clean: bool = True) -> bytes:
    flags = 0x02 if clean else 0
    payload = string(client_id)
    if will:
        flags |= 0x04
        payload += (b"\x00" if level == 5 else b"") + string(will[0]) + string(will[1])
    if password is not None:
        flags |= 0xC0
        payload += string("device") + string(password)
    body = string("MQTT") + bytes([level, flags]) + struct.pack(">H", keepalive)
    if level == 5:
        body += b"\x00"
    body += payload
    return b"\x10" + varint(len(body)) + body


def publish_packet(level: int, topic: str, payload: bytes, qos: int, pkid: int, dup: bool = False) -> bytes:
    body = string(topic) + (struct.pack(">H", pkid) if qos else b"") + (b"\x00" if level == 5 else b"") + payload
    return bytes([0x30 | (0x08 if dup else 0) | (qos << 1)]) + varint(len(body)) + body


class Raw:
    """A plain TCP socket speaking packets."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=T)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def packet(self) -> bytes | None:
        """The next whole packet, or None at EOF."""
        if not self._fill(2):
            return None
        length, shift, i = 0, 0, 1
        while True:
            if not self._fill(i + 1):
                return None
            b = self.buf[i]
            length |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                break
            shift += 7
        if not self._fill(i + length):
            return None
        p, self.buf = self.buf[: i + length], self.buf[i + length:]
        return p

    def eof(self) -> bool:
        """Waits (up to the socket timeout) for the server to close; True when it did."""
        try:
            return self.packet() is None
        except (ConnectionResetError, socket.timeout):
            return False

    def close(self) -> None:
        self.sock.close()


async def raw(port: int) -> Raw:
    return await asyncio.to_thread(Raw, port)


def refused_total(server, reason: str) -> float:
    base = server.url.replace("ws://", "http://", 1).rsplit("/", 1)[0]
    with urllib.request.urlopen(base + "/metrics", timeout=T) as r:
        text = r.read().decode()
    m = re.search(r'^skua_mqtt_publishes_refused_total\{reason="%s"\} (\S+)$' % re.escape(reason), text, re.M)
    return float(m.group(1)) if m else 0.0


# ---- tests ----


@pytest.mark.one_node_only
@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
async def test_devices_and_sdk_clients_see_each_other(skua_factory, v5):
    """N50/N51: a device's MessagePack payload arrives as that value, anything else as binary;
    SDK `data` reaches devices packed, binary data raw. N16 across doors: the device never
    receives its own publish."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice messages")
    alice.on(MESSAGES, inbox)
    await subscribe_ok(alice, MESSAGES)
    device = Device(skua.mqtt_port, "dev-token-carol", v5=v5)
    assert (await device.connack()).value == 0
    assert await device.subscribe(MESSAGES, 1) == [1]

    value = {"temp": 21.5, "unit": "C", "ok": True}
    await device.publish(MESSAGES, msgpack.packb(value), qos=1)
    await device.publish(MESSAGES, b"plain text", qos=1)
    await inbox.wait_count(2)
    (got, meta), (text, _) = inbox.calls[:2]
    assert strict_equal(got, value) and meta.sender == "carol"
    assert strict_equal(text, b"plain text")

    await alice.emit(MESSAGES, {"cmd": "reboot", "n": 3})
    await alice.emit(MESSAGES, b"\x00\x01raw")
    first, second = await device.message(), await device.message()
    assert (first.topic, msgpack.unpackb(first.payload)) == (MESSAGES, {"cmd": "reboot", "n": 3})
    assert second.payload == b"\x00\x01raw"
    # Its own publishes never came back: the next delivery is the sentinel.
    await device.publish(MESSAGES, b"mine", qos=1)
    mark = sentinel()
    await alice.emit(MESSAGES, mark)
    assert msgpack.unpackb((await device.message()).payload) == mark
    device.close()


@pytest.mark.one_node_only
async def test_connect_refusals_have_the_documented_codes(skua_factory):
    """N49: a bad token is refused with 3.1.1 return code 5 / 5.0 0x87; no credential at all is
    a malformed credential, 4 / 0x86. A client JWT works as the password."""
    skua = start(skua_factory)
    cases = [(4, "wrong-token", bytes([0x20, 2, 0, 5])), (4, None, bytes([0x20, 2, 0, 4]))]
    for level, password, expected in cases:
        r = await raw(skua.mqtt_port)
        r.send(connect_packet(level, password))
        assert await asyncio.to_thread(r.packet) == expected
        assert await asyncio.to_thread(r.eof)
        r.close()
    for password, reason in [("wrong-token", 0x87), (None, 0x86)]:
        r = await raw(skua.mqtt_port)
        r.send(connect_packet(5, password))
        ack = await asyncio.to_thread(r.packet)
        assert ack[0] == 0x20 and ack[3] == reason, ack
        r.close()
    device = Device(skua.mqtt_port, mint_jwt("carol"))
    assert (await device.connack()).value == 0
    device.close()


@pytest.mark.one_node_only
@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
async def test_wildcards_only_below_the_room(skua_factory, v5):
    """N50: `app/room/+` and `app/room/#` receive every topic of the room; a wildcard in the app
    or room level and a room the actor cannot read are SUBACK failures."""
    skua = start(skua_factory)
    device = Device(skua.mqtt_port, "dev-token-carol", v5=v5)
    assert (await device.connack()).value == 0
    assert await device.subscribe("demo/general/+", 1) == [1]
    bad_filter, not_allowed = (0x8F, 0x87) if v5 else (0x80, 0x80)
    assert await device.subscribe("demo/+/messages", 1) == [bad_filter]
    assert await device.subscribe("demo/#", 1) == [bad_filter]
    assert await device.subscribe("demo/ops/messages", 0) == [not_allowed]
    assert await device.subscribe("demo/general/nonexistent", 0) == [not_allowed]
    bob = await connect(skua.url, "dev-token-bob")
    await bob.emit(STATUS, {"s": 1})
    await bob.emit(MESSAGES, {"m": 2})
    got = {(await device.message()).topic for _ in range(2)}
    assert got == {STATUS, MESSAGES}
    device.close()


@pytest.mark.one_node_only
async def test_qos_0_1_2_each_arrive_once(skua_factory):
    """N52: every QoS is accepted and acked; a QoS 2 publish repeated with its packet id before
    PUBREL is published once."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice messages")
    alice.on(MESSAGES, inbox)
    await subscribe_ok(alice, MESSAGES)
    device = Device(skua.mqtt_port, "dev-token-carol")
    assert (await device.connack()).value == 0
    for qos in (0, 1, 2):
        rc = await device.publish(MESSAGES, msgpack.packb({"qos": qos}), qos=qos)
        assert qos == 0 or rc.value == 0
    await inbox.wait_count(3)
    device.close()

    r = await raw(skua.mqtt_port)
    r.send(connect_packet(4, "dev-token-carol"))
    assert await asyncio.to_thread(r.packet) == bytes([0x20, 2, 0, 0])
    once = msgpack.packb({"exactly": "once"})
    r.send(publish_packet(4, MESSAGES, once, 2, 7))
    assert await asyncio.to_thread(r.packet) == bytes([0x50, 2, 0, 7])  # PUBREC
    r.send(publish_packet(4, MESSAGES, once, 2, 7, dup=True))
    assert await asyncio.to_thread(r.packet) == bytes([0x50, 2, 0, 7])  # PUBREC again, not republished
    r.send(bytes([0x62, 2, 0, 7]))  # PUBREL
    assert await asyncio.to_thread(r.packet) == bytes([0x70, 2, 0, 7])  # PUBCOMP
    mark = sentinel()
    bob = await connect(skua.url, "dev-token-bob")
    await bob.emit(MESSAGES, mark)
    await inbox.wait_data(mark)
    assert sum(1 for d in inbox.data if strict_equal(d, {"exactly": "once"})) == 1
    r.close()


@pytest.mark.one_node_only
async def test_retain_flag_maps_to_retained_messages(skua_factory):
    """N53: a device's retained publish reaches a later SDK subscriber; an SDK client's retained
    message reaches a device that subscribes later."""
    skua = start(skua_factory)
    device = Device(skua.mqtt_port, "dev-token-carol")
    assert (await device.connack()).value == 0
    assert (await device.publish(STATUS, msgpack.packb({"online": True}), qos=1, retain=True)).value == 0
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice status")
    alice.on(STATUS, inbox)
    await subscribe_ok(alice, STATUS)
    await inbox.wait_data({"online": True})

    assert await emit_ack(alice, "demo/random/status", {"config": 7}, EmitOptions(retain=True)) is None
    assert await device.subscribe("demo/random/status", 1) == [1]
    msg = await device.message()
    assert (msg.topic, msgpack.unpackb(msg.payload)) == ("demo/random/status", {"config": 7})
    device.close()


@pytest.mark.one_node_only
async def test_a_denied_publish_is_refused_on_5_and_acked_and_dropped_on_3_1_1(skua_factory):
    """N52: the observer may subscribe and never publish: 5.0 PUBACK 0x87; 3.1.1 cannot refuse,
    so it is acked, dropped and counted with its reason."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice messages")
    alice.on(MESSAGES, inbox)
    await subscribe_ok(alice, MESSAGES)
    viewer5 = Device(skua.mqtt_port, "dev-token-viewer", v5=True)
    assert (await viewer5.connack()).value == 0
    assert await viewer5.subscribe(MESSAGES, 1) == [1]
    assert (await viewer5.publish(MESSAGES, b"nope", qos=1)).value == 0x87
    # QoS 2 on a raw socket: paho sends PUBREL even after a refusing PUBREC (which ends the
    # exchange, MQTT 5.0 §4.3.3) and reports the PUBCOMP's 0x92 instead.
    r5 = await raw(skua.mqtt_port)
    r5.send(connect_packet(5, "dev-token-viewer"))
    assert (await asyncio.to_thread(r5.packet))[3] == 0
    r5.send(publish_packet(5, MESSAGES, b"nope", 2, 9))
    assert await asyncio.to_thread(r5.packet) == bytes([0x50, 3, 0, 9, 0x87])
    r5.close()
    before = refused_total(skua, "not_authorized")
    r = await raw(skua.mqtt_port)
    r.send(connect_packet(4, "dev-token-viewer"))
    assert await asyncio.to_thread(r.packet) == bytes([0x20, 2, 0, 0])
    r.send(publish_packet(4, MESSAGES, b"nope", 1, 3))
    assert await asyncio.to_thread(r.packet) == bytes([0x40, 2, 0, 3])
    assert refused_total(skua, "not_authorized") == before + 1
    mark = sentinel()
    bob = await connect(skua.url, "dev-token-bob")
    await bob.emit(MESSAGES, mark)
    await inbox.wait_data(mark)
    assert not any(d == b"nope" for d in inbox.data), inbox.data
    viewer5.close()
    r.close()


@pytest.mark.one_node_only
@pytest.mark.parametrize("level", [4, 5])
async def test_keep_alive_closes_a_silent_device(skua_factory, level):
    """N54: no packet for 1.5 x keep-alive closes the connection (5.0: DISCONNECT 0x8D)."""
    skua = start(skua_factory)
    r = await raw(skua.mqtt_port)
    r.send(connect_packet(level, "dev-token-carol", keepalive=1))
    ack = await asyncio.to_thread(r.packet)
    assert ack[0] == 0x20 and ack[3] == 0, ack
    started = time.monotonic()
    if level == 5:
        assert await asyncio.to_thread(r.packet) == bytes([0xE0, 1, 0x8D])
    assert await asyncio.to_thread(r.eof)
    assert 1.4 <= time.monotonic() - started < 5, time.monotonic() - started
    r.close()
    # A device that pings stays.
    device = Device(skua.mqtt_port, "dev-token-carol", keepalive=1)
    assert (await device.connack()).value == 0
    with pytest.raises(queue.Empty):
        await asyncio.to_thread(device.disconnects.get, True, 3)
    device.close()


@pytest.mark.one_node_only
async def test_will_is_published_on_an_abnormal_close_only(skua_factory):
    """N53: the will goes out when the device vanishes, not after its DISCONNECT."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice status")
    alice.on(STATUS, inbox)
    await subscribe_ok(alice, STATUS)
    polite = await raw(skua.mqtt_port)
    polite.send(connect_packet(4, "dev-token-carol", will=(STATUS, msgpack.packb("polite-will"))))
    assert await asyncio.to_thread(polite.packet) == bytes([0x20, 2, 0, 0])
    polite.send(bytes([0xE0, 0]))
    assert await asyncio.to_thread(polite.eof)
    polite.close()
    rude = await raw(skua.mqtt_port)
    rude.send(connect_packet(5, "dev-token-carol", will=(STATUS, msgpack.packb({"state": "gone"}))))
    assert (await asyncio.to_thread(rude.packet))[3] == 0
    rude.close()
    await inbox.wait_data({"state": "gone"})
    assert "polite-will" not in inbox.data


@pytest.mark.one_node_only
async def test_an_expiring_client_token_disconnects_the_device(skua_factory):
    """N49: a client JWT's expiry closes the device's connection as it closes a WebSocket's;
    5.0 gets DISCONNECT 0x87 first."""
    skua = start(skua_factory)
    r = await raw(skua.mqtt_port)
    r.send(connect_packet(5, mint_jwt("carol", expires_in=2)))
    assert (await asyncio.to_thread(r.packet))[3] == 0
    assert await asyncio.to_thread(r.packet) == bytes([0xE0, 1, 0x87])
    assert await asyncio.to_thread(r.eof)
    r.close()


@pytest.mark.cluster_only
async def test_a_device_on_one_node_and_sdk_clients_on_another_see_each_other(skua_factory):
    """Issue 37: the MQTT door publishes and subscribes through the node's bus like any
    session, so a device on node A and an SDK client on node B see each other's messages."""
    cluster = skua_factory("--mqtt-listen", "127.0.0.1:0")
    a, b = cluster.nodes[0], cluster.nodes[1]
    assert a.mqtt_listening.wait(T) and a.mqtt_port
    alice = await connect(b.url, "dev-token-alice")
    inbox = Recorder("alice messages")
    alice.on(MESSAGES, inbox)
    await subscribe_ok(alice, MESSAGES)
    device = Device(a.mqtt_port, "dev-token-carol")
    assert (await device.connack()).value == 0
    assert await device.subscribe(MESSAGES, 1) == [1]
    assert (await device.publish(MESSAGES, msgpack.packb({"from": "device"}), qos=1)).value == 0
    await inbox.wait_data({"from": "device"})
    # SUBACK follows the node's bus subscription, as `subscribed` does.
    await alice.emit(MESSAGES, {"from": "sdk"})
    msg = await device.message()
    assert msgpack.unpackb(msg.payload) == {"from": "sdk"}
    device.close()


@pytest.mark.one_node_only
async def test_logged_topics_too_large_payloads_and_unsubscribe(skua_factory):
    """N52: a logged topic's PUBACK comes once stored (the SDK subscriber then gets it with a
    msgId); a payload over the actor's message size is refused 0x97 (0x95 is no PUBACK reason
    in MQTT 5.0, and paho drops the connection on it); after UNSUBSCRIBE nothing
    more arrives (UNSUBACK 0x11 for a filter never subscribed)."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    tasks = Recorder("alice tasks")
    alice.on("demo/general/tasks", tasks)
    await subscribe_ok(alice, "demo/general/tasks")
    device = Device(skua.mqtt_port, "dev-token-carol")
    assert (await device.connack()).value == 0
    assert (await device.publish("demo/general/tasks", msgpack.packb({"job": 1}), qos=1)).value == 0
    _, meta = await tasks.wait_data({"job": 1})
    assert meta.msg_id, "a logged topic's message carries its msgId"
    assert (await device.publish(MESSAGES, b"x" * 950_000, qos=1)).value == 0x97

    r = await raw(skua.mqtt_port)
    r.send(connect_packet(5, "dev-token-bob"))
    assert (await asyncio.to_thread(r.packet))[3] == 0
    r.send(b"\x82" + varint(2 + 1 + 2 + len(MESSAGES) + 1) + b"\x00\x01\x00" + string(MESSAGES) + b"\x00")
    assert await asyncio.to_thread(r.packet) == bytes([0x90, 4, 0, 1, 0, 0])
    body = b"\x00\x02\x00" + string(MESSAGES) + string(STATUS)
    r.send(b"\xa2" + varint(len(body)) + body)
    assert await asyncio.to_thread(r.packet) == bytes([0xB0, 5, 0, 2, 0, 0, 0x11])
    await device.publish(MESSAGES, b"after unsubscribe", qos=1)
    r.send(b"\xc0\x00")  # PINGREQ: its PINGRESP is the next packet, no PUBLISH before it
    assert await asyncio.to_thread(r.packet) == bytes([0xD0, 0])
    r.close()
    device.close()


@pytest.mark.one_node_only
async def test_a_second_connect_with_the_client_id_takes_over(skua_factory):
    """MQTT-3.1.4-2 (N54's takeover, on one node): a CONNECT with the client identifier of an
    open connection closes that one (5.0: DISCONNECT 0x8E); other identifiers are untouched."""
    skua = start(skua_factory)
    first, other = await raw(skua.mqtt_port), await raw(skua.mqtt_port)
    first.send(connect_packet(5, "dev-token-carol", client_id="sensor-7"))
    other.send(connect_packet(5, "dev-token-carol", client_id="sensor-8"))
    assert (await asyncio.to_thread(first.packet))[3] == 0
    assert (await asyncio.to_thread(other.packet))[3] == 0
    second = await raw(skua.mqtt_port)
    second.send(connect_packet(5, "dev-token-carol", client_id="sensor-7"))
    assert (await asyncio.to_thread(second.packet))[3] == 0
    assert await asyncio.to_thread(first.packet) == bytes([0xE0, 1, 0x8E])
    assert await asyncio.to_thread(first.eof)
    for c in (second, other):
        c.send(b"\xc0\x00")
        assert await asyncio.to_thread(c.packet) == bytes([0xD0, 0])
    for c in (first, second, other):
        c.close()


# ---- transports: mqtts, MQTT over WebSocket (ws and wss) ----


def connections_by_protocol(skua) -> dict[str, int]:
    """`skua admin --json connections list` (gRPC ListConnections), counted by protocol."""
    line = "skua grpc listening on "
    deadline = time.monotonic() + T
    while not (addr := next((l[len(line):].strip() for l in skua.stdout if l.startswith(line)), None)):
        assert time.monotonic() < deadline, "no 'skua grpc listening on' line"
        time.sleep(0.05)
    out = subprocess.run(
        [str(skua_bin()), "admin", "--server", f"http://{addr}", "--json", "connections", "list"],
        env={**os.environ, "SKUA_ADMIN_KEY": "skua-dev-admin-key"},
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    counts: dict[str, int] = {}
    for c in json.loads(out):
        counts[c["protocol"]] = counts.get(c["protocol"], 0) + 1
    return counts


@pytest.mark.one_node_only
@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
async def test_paho_over_websocket_at_mqtt_and_sdk_clients_see_each_other(skua_factory, v5):
    """Issue 37: paho's websockets transport at `/mqtt` (subprotocol `mqtt`) on the client
    listener, enabled with the MQTT door; both directions with the NoLag SDK, and the
    connection list says how each connection came (ws, mqtt, mqtt-ws)."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    inbox = Recorder("alice messages")
    alice.on(MESSAGES, inbox)
    await subscribe_ok(alice, MESSAGES)
    device = Device(skua.port, "dev-token-carol", v5=v5, websocket=True)
    assert (await device.connack()).value == 0
    assert await device.subscribe(MESSAGES, 1) == [1]
    assert (await device.publish(MESSAGES, msgpack.packb({"via": "ws"}), qos=1)).value == 0
    await inbox.wait_data({"via": "ws"})
    await alice.emit(MESSAGES, {"to": "browser"})
    msg = await device.message()
    assert (msg.topic, msgpack.unpackb(msg.payload)) == (MESSAGES, {"to": "browser"})
    tcp = Device(skua.mqtt_port, "dev-token-bob", v5=v5)
    assert (await tcp.connack()).value == 0
    assert await asyncio.to_thread(connections_by_protocol, skua) == {"ws": 1, "mqtt-ws": 1, "mqtt": 1}
    device.close()
    tcp.close()


@pytest.mark.one_node_only
async def test_mqtt_websocket_route_needs_the_mqtt_door(skua_factory):
    """`/mqtt` is served only with the MQTT door (mqtt_listen or mqtt_tls_listen)."""
    skua = skua_factory()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{skua.port}/mqtt", timeout=T)
    assert e.value.code == 404


@pytest.mark.one_node_only
async def test_mqtts_and_mqtt_over_wss_with_the_dev_certificate(skua_factory, tmp_path):
    """mqtts on its own port and MQTT over wss at `/mqtt`, both with the client listener's
    certificate (`--tls-self-signed`): a device on each exchanges messages with one on the
    plain listener, and a plaintext CONNECT on the mqtts port gets no CONNACK."""
    skua = skua_factory("--store", f"sqlite://{tmp_path}/skua.db", "--tls-self-signed",
                        "--mqtt-listen", "127.0.0.1:0", "--mqtt-tls-listen", "127.0.0.1:0")
    assert skua.mqtt_listening.wait(T) and skua.mqtt_port and skua.mqtts_port
    ca = str(tmp_path / "dev-cert.pem")
    secure = Device(skua.mqtts_port, "dev-token-carol", ca=ca, client_id="secure")
    browser = Device(skua.port, "dev-token-viewer", ca=ca, websocket=True, client_id="browser")
    plain = Device(skua.mqtt_port, "dev-token-alice", client_id="plain")
    for d in (secure, browser, plain):
        assert (await d.connack()).value == 0
    assert await secure.subscribe(MESSAGES, 1) == [1]
    assert await browser.subscribe(MESSAGES, 1) == [1]
    assert (await plain.publish(MESSAGES, b"to tls devices", qos=1)).value == 0
    assert (await secure.message()).payload == b"to tls devices"
    assert (await browser.message()).payload == b"to tls devices"
    assert (await secure.publish(MESSAGES, b"from mqtts", qos=1)).value == 0
    assert (await browser.message()).payload == b"from mqtts"

    r = await raw(skua.mqtts_port)
    r.send(connect_packet(4, "dev-token-carol"))
    try:
        first = await asyncio.to_thread(r.packet)
    except (ConnectionResetError, socket.timeout):
        first = None
    assert first is None or first[0] != 0x20, "no CONNACK in plaintext on the mqtts port"
    r.close()
    for d in (secure, browser, plain):
        d.close()


@pytest.mark.one_node_only
async def test_per_address_limits_count_every_door_together(skua_factory):
    """max_connections_per_ip is one budget per address for WebSockets and devices: with 2, a
    WebSocket and a device leave no room for a device over TCP nor one over `/mqtt`."""
    skua = start(skua_factory, "--max-connections-per-ip", "2")
    alice = await connect(skua.url, "dev-token-alice")
    device = Device(skua.mqtt_port, "dev-token-carol")
    assert (await device.connack()).value == 0
    r = await raw(skua.mqtt_port)
    try:
        r.send(connect_packet(4, "dev-token-bob"))
        first = await asyncio.to_thread(r.packet)
    except ConnectionResetError:  # closed at accept, before the CONNECT was read
        first = None
    assert first is None, f"closed at accept, without a CONNACK: {first!r}"
    r.close()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{skua.port}/mqtt", timeout=T)
    assert e.value.code == 429
    device.close()
    assert alice.connected, "the WebSocket kept its place"


TASKS = "demo/general/tasks"


async def acked_then_closed(device: Device) -> None:
    """Closes after a round trip: paho sends a delivery's PUBACK once `on_message` returned, so
    a DISCONNECT right after the message was read could overtake it (the delivery would then
    rightly come again). The PUBACK of a publish made now follows it on the socket."""
    assert (await device.publish(MESSAGES, b"sync", qos=1)).value == 0
    device.close()


@pytest.mark.one_node_only
@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
async def test_a_persistent_session_gets_what_a_logged_topic_kept_while_it_was_away(skua_factory, v5):
    """N54: a client id with clean session off (3.1.1) or a session expiry (5.0) is a persistent
    session: its QoS 1 subscription to a logged topic collects what the NoLag SDK publishes while
    the device is away, delivered when it returns (CONNACK session present); paho's PUBACK acks
    each, so nothing comes again on the next return."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    opts = {"v5": v5, "client_id": f"sensor-p{int(v5)}", "clean": False, "expiry": 3600 if v5 else 0}
    device = Device(skua.mqtt_port, "dev-token-carol", **opts)
    assert (await device.connack()).value == 0
    assert device.session_present.get(True, T) is False
    assert await device.subscribe(TASKS, 1) == [1]
    assert await emit_ack(alice, TASKS, {"n": 1}) is None
    assert msgpack.unpackb((await device.message()).payload) == {"n": 1}
    await acked_then_closed(device)

    for n in (2, 3):
        assert await emit_ack(alice, TASKS, {"n": n}) is None
    device = Device(skua.mqtt_port, "dev-token-carol", **opts)
    assert (await device.connack()).value == 0
    assert device.session_present.get(True, T) is True
    got = [msgpack.unpackb((await device.message()).payload) for _ in range(2)]
    assert got == [{"n": 2}, {"n": 3}], "the acked one is not among them"
    await acked_then_closed(device)

    device = Device(skua.mqtt_port, "dev-token-carol", **opts)
    assert (await device.connack()).value == 0
    assert device.session_present.get(True, T) is True
    mark = sentinel()
    assert await emit_ack(alice, TASKS, mark) is None
    assert msgpack.unpackb((await device.message()).payload) == mark, "nothing acked came again"
    device.close()


@pytest.mark.one_node_only
async def test_an_unacked_delivery_comes_again_with_dup(skua_factory):
    """N54: a QoS 1 delivery of a persistent session that was not PUBACKed when the connection
    ended is delivered again, with DUP, when the session returns."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    r = await raw(skua.mqtt_port)
    r.send(connect_packet(4, "dev-token-carol", client_id="sensor-dup", clean=False))
    assert await asyncio.to_thread(r.packet) == bytes([0x20, 2, 0, 0])
    r.send(b"\x82" + varint(2 + 2 + len(TASKS) + 1) + b"\x00\x01" + string(TASKS) + b"\x01")
    assert await asyncio.to_thread(r.packet) == bytes([0x90, 3, 0, 1, 1])
    assert await emit_ack(alice, TASKS, {"unacked": True}) is None
    first = await asyncio.to_thread(r.packet)
    assert first[0] == 0x32, first  # QoS 1, not DUP
    r.close()  # gone without PUBACK

    r = await raw(skua.mqtt_port)
    r.send(connect_packet(4, "dev-token-carol", client_id="sensor-dup", clean=False))
    assert await asyncio.to_thread(r.packet) == bytes([0x20, 2, 1, 0]), "session present"
    again = await asyncio.to_thread(r.packet)
    assert again[0] == 0x3A, again  # QoS 1 with DUP
    assert again.endswith(msgpack.packb({"unacked": True}))
    r.send(b"\x40\x02" + again[4 + len(TASKS):6 + len(TASKS)])  # PUBACK its packet id
    r.send(b"\xc0\x00")
    assert await asyncio.to_thread(r.packet) == bytes([0xD0, 0])
    r.close()


@pytest.mark.cluster_only
async def test_a_client_id_takes_its_session_over_from_another_node(skua_factory):
    """N54: a second CONNECT with the client id on another node of the cluster closes the first
    connection (5.0 DISCONNECT 0x8E), through the session's clientId takeover."""
    cluster = skua_factory("--mqtt-listen", "127.0.0.1:0")
    a, b = cluster.nodes[0], cluster.nodes[1]
    assert a.mqtt_listening.wait(T) and a.mqtt_port and b.mqtt_listening.wait(T) and b.mqtt_port
    first = await raw(a.mqtt_port)
    first.send(connect_packet(5, "dev-token-carol", client_id="gw-across"))
    assert (await asyncio.to_thread(first.packet))[3] == 0
    second = await raw(b.mqtt_port)
    second.send(connect_packet(5, "dev-token-carol", client_id="gw-across"))
    assert (await asyncio.to_thread(second.packet))[3] == 0
    assert await asyncio.to_thread(first.packet) == bytes([0xE0, 1, 0x8E])
    assert await asyncio.to_thread(first.eof)
    second.send(b"\xc0\x00")
    assert await asyncio.to_thread(second.packet) == bytes([0xD0, 0])
    first.close()
    second.close()


@pytest.mark.one_node_only
@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
async def test_a_qos_2_subscription_gets_qos_2_deliveries(skua_factory, v5):
    """N52: a QoS 2 subscription is granted 2 and its deliveries go out at QoS 2 (paho completes
    PUBREC/PUBREL/PUBCOMP), each once, in order."""
    skua = start(skua_factory)
    alice = await connect(skua.url, "dev-token-alice")
    device = Device(skua.mqtt_port, "dev-token-carol", v5=v5)
    assert (await device.connack()).value == 0
    assert await device.subscribe(MESSAGES, 2) == [2]
    for n in range(5):
        await alice.emit(MESSAGES, {"n": n})
    got = [await device.message() for _ in range(5)]
    assert [m.qos for m in got] == [2] * 5
    assert [msgpack.unpackb(m.payload) for m in got] == [{"n": n} for n in range(5)]
    mark = sentinel()
    await alice.emit(MESSAGES, mark)
    assert msgpack.unpackb((await device.message()).payload) == mark, "no duplicate before it"
    device.close()
