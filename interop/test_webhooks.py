"""Hydration webhooks (N43) through the real SDK: `skua admin apps update --hydration-webhook`
points the demo app at an HTTP receiver run by this test; the SDK's `hydration(topic, data)`
event carries the receiver's answer, after the subscribe and before a message published after
it, and the request is signed with the app's webhook secret (N42). And trigger webhooks (N44)
configured through the SDK's `NoLagApi`: an app created with `triggerWebhook` and
`topicConfigs` posts a signed trigger for a publish from the SDK."""

import asyncio
import hashlib
import hmac
import http.server
import json
import threading
import uuid

from helpers import Recorder, T, connect, emit_ack, subscribe_ok
from nolag import NoLagApi, NoLagApiOptions
from nolag.api_types import AppCreate, RoomCreate
from test_control_plane import admin, grpc_addresses

TOPIC = "demo/general/messages"


def demo_admin(addr: str, *args: str):
    """`skua admin ARGS --project demo-project`: a cluster run's shared registry holds the
    projects other tests created, so the project must be named."""
    return admin(addr, *args, "--project", "demo-project")

STATE = {"recent": ["a", "b"], "count": 2, "nested": {"ok": True, "none": None}}


class Receiver:
    """A recording HTTP receiver that answers STATE once `release` is set (at most T s)."""

    def __init__(self):
        self.requests: list[tuple[str, dict, bytes]] = []
        self.release = threading.Event()
        self.arrived = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                receiver.arrived.set()
                receiver.release.wait(T)
                answer = json.dumps(STATE).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


async def test_sdk_hydration_event_carries_the_webhook_answer_before_later_messages(skua_factory):
    server = skua_factory("--grpc-listen", "127.0.0.1:0")
    addrs = grpc_addresses(server)
    rx = Receiver()
    try:
        refused = demo_admin(addrs[0], "apps", "update", "demo", "--hydration-webhook", "http://169.254.169.254/latest")
        assert refused.returncode == 1, refused
        assert refused.stderr.startswith(
            "skua admin: InvalidArgument: hydration_webhook.url: 169.254.169.254 is a link-local or cloud metadata address"
        ), refused.stderr
        set_hook = demo_admin(addrs[0], "apps", "update", "demo", "--hydration-webhook", rx.url("/hydrate"))
        assert set_hook.returncode == 0, set_hook.stderr
        assert f"hydration webhook: {rx.url('/hydrate')}" in set_hook.stdout, set_hook.stdout
        rotated = demo_admin(addrs[0], "--json", "apps", "rotate-webhook-secret", "demo")
        assert rotated.returncode == 0, rotated.stderr
        secret = json.loads(rotated.stdout)["webhook_secret"]
        # Every node reads the new registry version now (otherwise within a second).
        for addr in addrs:
            assert demo_admin(addr, "apps", "get", "demo").returncode == 0

        alice = await connect(server.url, "dev-token-alice")
        hydrated = Recorder("alice hydration")
        inbox = Recorder("alice messages")
        alice.on("hydration", hydrated)
        alice.on(TOPIC, inbox)
        await subscribe_ok(alice, TOPIC)
        # Published while the receiver still holds its answer: the SDK sees it after the state.
        bob = await connect(server.url, "dev-token-bob")
        assert await emit_ack(bob, TOPIC, "after") is None
        rx.release.set()

        topic, data = await hydrated.wait_for(lambda *_: True, what="the hydration event")
        assert (topic, data) == ("messages", STATE)
        await inbox.wait_data("after")
        order = [f["type"] for f in alice.received if isinstance(f, dict) and f.get("type") in ("hydration", "message")]
        assert order == ["hydration", "message"], order

        path, headers, body = rx.requests[0]
        assert path == "/hydrate"
        assert headers["content-type"] == "application/json"
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["x-nolag-signature"], expected)
        sent = json.loads(body)
        assert (sent["topicName"], sent["room"], sent["app"], sent["actorId"]) == ("messages", "general", "demo", "alice")
        assert sent["scope"] is None and isinstance(sent["timestamp"], int) and sent["deliveryId"]
    finally:
        # Other tests (and a cluster run's shared registry) must not see the webhook.
        demo_admin(addrs[0], "apps", "update", "demo", "--hydration-webhook", "")
        rx.stop()


async def test_an_app_created_with_nolagapi_posts_signed_triggers_of_sdk_publishes(skua_factory):
    """`NoLagApi.apps.create` passes `triggerWebhook` and `topicConfigs` through (N41 over REST);
    a publish from the SDK reaches the receiver once, signed (N42, N44)."""
    server = skua_factory("--grpc-listen", "127.0.0.1:0")
    addrs = grpc_addresses(server)
    node = getattr(server, "nodes", [server])[0]
    rx = Receiver()
    rx.release.set()
    slug = f"hooks-{uuid.uuid4().hex[:8]}"
    try:
        options = NoLagApiOptions(base_url=f"http://127.0.0.1:{node.port}/v1")
        async with NoLagApi("skua-dev-api-key", options) as api:
            app = await api.apps.create(
                AppCreate(
                    name="Hooks",
                    slug=slug,
                    topics=["events", "quiet"],
                    trigger_webhook={"url": rx.url("/trigger"), "headers": {"X-Env": "interop"}},
                    topic_configs={"quiet": {"webhooks": {"onPublish": {"url": rx.url("/quiet")}}}},
                )
            )
            await api.rooms.create(app.app_id, RoomCreate(name="Room", slug="r"))
        # The SDK's App type keeps no webhookSecret: a backend reads it from the create answer
        # or rotates it, as here.
        rotated = demo_admin(addrs[0], "--json", "apps", "rotate-webhook-secret", slug)
        assert rotated.returncode == 0, rotated.stderr
        secret = json.loads(rotated.stdout)["webhook_secret"]
        shown = demo_admin(addrs[0], "apps", "get", slug)
        assert f"trigger webhook: {rx.url('/trigger')}" in shown.stdout, shown.stdout
        for addr in addrs:
            assert demo_admin(addr, "apps", "get", slug).returncode == 0

        alice = await connect(server.url, "dev-token-alice")
        assert await emit_ack(alice, f"{slug}/r/events", {"n": 1}) is None
        assert await asyncio.to_thread(rx.arrived.wait, T), "no trigger arrived"
        path, headers, body = rx.requests[0]
        assert (path, headers["x-env"]) == ("/trigger", "interop")
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["x-nolag-signature"], expected)
        sent = json.loads(body)
        assert (sent["app"], sent["room"], sent["topicName"], sent["topic"]) == (slug, "r", "events", f"{slug}/r/events")
        assert (sent["actorId"], sent["data"], sent["scope"]) == ("alice", {"n": 1}, None)

        rx.arrived.clear()
        assert await emit_ack(alice, f"{slug}/r/quiet", "own") is None
        assert await asyncio.to_thread(rx.arrived.wait, T), "no trigger for the topic's own onPublish"
        assert [p for p, _, _ in rx.requests] == ["/trigger", "/quiet"]
    finally:
        rx.stop()
