"""The REST API under /v1 driven by the real SDK's NoLagApi (nolag 2.6.0), unchanged but for its
base URL and key: apps (both pagination forms), rooms with `ensure`, grants with their effect on
WebSocket clients, actors whose token connects and whose deletion closes 4001, access scopes
(two scopes on the same room slug isolated, deactivation closing 4001 scope_inactive), errors
(bad key, another project's ids, validation), free-form fields and rooms refusing what they
cannot be (issue 31), and the README's REST example."""

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import pytest
from nolag import NoLagApi, NoLagApiError, NoLagApiOptions
from nolag.api_types import (
    ActorCreate,
    ActorUpdate,
    AppCreate,
    AppUpdate,
    ListOptions,
    RoomActorAccessCreate,
    RoomCreate,
    RoomUpdate,
    ScopeCreate,
    ScopeUpdate,
)

import helpers
from test_control_plane import admin, grpc_addresses

DEV_API_KEY = "skua-dev-api-key"
EXAMPLE = Path(__file__).resolve().parent / "rest_example.py"


def node(server):
    """One node (the first of a cluster): REST and WebSocket on the same port."""
    return getattr(server, "nodes", [server])[0]


def api_for(server, key: str = DEV_API_KEY) -> NoLagApi:
    return NoLagApi(key, NoLagApiOptions(base_url=f"http://127.0.0.1:{node(server).port}/v1"))


def ws_url(server) -> str:
    return f"ws://127.0.0.1:{node(server).port}/ws"


def unique(prefix: str) -> str:
    """A name no other test (or cluster run sharing a Postgres registry) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def fails(coro, *statuses: int) -> NoLagApiError:
    with pytest.raises(NoLagApiError) as e:
        await coro
    assert e.value.status_code in statuses, f"{e.value.status_code}: {e.value}"
    return e.value


async def closed_with(ws) -> tuple[int, str]:
    """The close code and reason the server sent on `ws` (the SDK's socket)."""
    await asyncio.wait_for(ws.wait_closed(), helpers.T)
    return ws.close_code, ws.close_reason


async def test_apps_rooms_grants_and_actors_lifecycle(skua):
    async with api_for(skua) as api:
        slug = unique("chat")
        app = await api.apps.create(AppCreate(name="Chat", slug=slug, topics=["msgs"]))
        assert (app.slug, app.project_id, app.config["autoProvisionRooms"]) == (slug, "demo-project", False)
        assert (await api.apps.get(app.app_id)).name == "Chat"
        page = await api.apps.list(ListOptions(limit=1, page=1, search=slug))
        assert [a.app_id for a in page.data] == [app.app_id]
        assert (page.pagination.total, page.pagination.page, page.pagination.page_count) == (1, 1, 1)

        # ensure needs autoProvisionRooms: 403 until the app allows it, then get-or-create.
        await fails(api.rooms.ensure(app.app_id, RoomCreate(name="Hall")), 403)
        app = await api.apps.update(app.app_id, AppUpdate(name="Chat!", config={"autoProvisionRooms": True}))
        assert (app.name, app.config["autoProvisionRooms"]) == ("Chat!", True)
        hall = await api.rooms.ensure(app.app_id, RoomCreate(name="Hall"))
        assert (hall.room_id, hall.room_type, hall.is_enabled) == ("hall", "dynamic", True)
        again = await api.rooms.ensure(app.app_id, RoomCreate(name="Hall"))
        assert again.created_at == hall.created_at
        side = await api.rooms.create(app.app_id, RoomCreate(name="Side Room"))
        assert side.slug == "side-room"
        assert (await api.rooms.update(app.app_id, side.room_id, RoomUpdate(name="Side"))).name == "Side"
        assert sorted(r.room_id for r in await api.rooms.list(app.app_id)) == ["hall", "side-room"]
        assert (await api.rooms.get(app.app_id, "hall")).topics == ["msgs"]

        # Actors: the token connects over WebSocket; grants make the room private.
        device = await api.actors.create(ActorCreate(name="Sensor", actor_type="device"))
        assert device.access_token.startswith("at_")
        got = await api.actors.get(device.actor_token_id)
        assert (got.name, got.actor_type, got.is_active) == ("Sensor", "device", True)
        assert device.actor_token_id in [a.actor_token_id for a in await api.actors.list()]
        topic = f"{slug}/hall/msgs"
        sensor = await helpers.connect(ws_url(skua), device.access_token)
        sensor_ws = sensor._ws
        await helpers.subscribe_ok(sensor, topic)
        bob = await helpers.connect(ws_url(skua), "dev-token-bob")
        await helpers.subscribe_ok(bob, topic)
        left = asyncio.get_running_loop().create_future()
        await bob.unsubscribe(topic, callback=lambda e: left.done() or left.set_result(e))
        assert await asyncio.wait_for(left, helpers.T) is None

        grant = await api.rooms.grant_actor(
            app.app_id, "hall", RoomActorAccessCreate(permission="pubSub", actor_token_id=device.actor_token_id)
        )
        assert (grant.permission, grant.actor_token_id, grant.is_active) == ("pubSub", device.actor_token_id, True)
        assert [g.room_actor_access_id for g in await api.rooms.list_actors(app.app_id, "hall")] == [
            grant.room_actor_access_id
        ]
        err = await helpers.subscribe_ack(bob, topic)
        assert err is not None, "bob has no grant on the now private room"
        await api.rooms.revoke_actor(app.app_id, "hall", grant.room_actor_access_id)
        assert await api.rooms.list_actors(app.app_id, "hall") == []
        await helpers.subscribe_ok(bob, topic)

        # Deleting the actor closes its open connection 4001 token_not_found.
        renamed = await api.actors.update(device.actor_token_id, ActorUpdate(name="Sensor 2"))
        assert renamed.name == "Sensor 2"
        await api.actors.delete(device.actor_token_id)
        assert await closed_with(sensor_ws) == (4001, "token_not_found")
        await fails(api.actors.get(device.actor_token_id), 404)

        await api.rooms.delete(app.app_id, side.room_id)
        await fails(api.rooms.delete(app.app_id, "nope"), 404)
        assert (await api.apps.delete(app.app_id))["success"] is True
        await fails(api.apps.get(app.app_id), 404)


async def test_free_form_fields_are_kept_and_rooms_refuse_what_they_cannot_be(skua):
    """Issue 31: description, externalId, metadata and a grant's role round-trip through the
    SDK's own types; a room asked for fewer topics than its app serves, or to be private before
    any grant, is refused 400 naming the field rather than created as something else."""
    async with api_for(skua) as api:
        slug = unique("noted")
        app = await api.apps.create(AppCreate(name="Noted", slug=slug, topics=["a", "b"], description="an app"))
        assert (await api.apps.get(app.app_id)).description == "an app"
        err = await fails(api.rooms.create(app.app_id, RoomCreate(name="Narrow", topics=["a"])), 400)
        assert "topics" in str(err), err
        err = await fails(api.rooms.create(app.app_id, RoomCreate(name="Secret", config={"isPrivate": True})), 400)
        assert "config.isPrivate" in str(err), err
        await fails(api.rooms.get(app.app_id, "narrow"), 404)
        room = await api.rooms.create(app.app_id, RoomCreate(name="Hall", description="the hall"))
        assert (await api.rooms.get(app.app_id, room.room_id)).description == "the hall"

        made = await api.actors.create(
            ActorCreate(name="S", actor_type="device", description="sensor", external_id="u-1", metadata={"k": [1]})
        )
        got = await api.actors.get(made.actor_token_id)
        assert (got.description, got.external_id, got.metadata) == ("sensor", "u-1", {"k": [1]})
        got = await api.actors.update(made.actor_token_id, ActorUpdate(external_id="u-2"))
        assert (got.description, got.external_id) == ("sensor", "u-2")
        grant = await api.rooms.grant_actor(
            app.app_id,
            room.room_id,
            RoomActorAccessCreate(
                permission="subscribe", actor_token_id=made.actor_token_id, role="viewer", metadata={"seat": 1}
            ),
        )
        assert (grant.role, grant.metadata) == ("viewer", {"seat": 1})
        err = await fails(api.actors.create(ActorCreate(name="x", actor_type="")), 400)
        assert "actorType is required" in str(err), err
        await api.actors.delete(made.actor_token_id)
        await api.apps.delete(app.app_id)


async def test_errors_bad_key_other_projects_and_validation(skua_factory):
    server = skua_factory("--grpc-listen", "127.0.0.1:0")
    addr = grpc_addresses(server)[0]
    other = unique("other")
    assert admin(addr, "projects", "create", other).returncode == 0
    secret = admin(addr, "--project", other, "apps", "create", "secret", "--topic", "t")
    assert secret.returncode == 0, secret.stderr
    key = admin(addr, "--project", other, "--json", "api-keys", "create", "--name", "ci")
    assert key.returncode == 0, key.stderr
    other_key = json.loads(key.stdout)["key"]
    assert other_key.startswith("nlg_live_")
    listed = admin(addr, "--project", other, "api-keys", "list")
    assert json.loads(key.stdout)["api_key"]["key_id"] in listed.stdout and other_key not in listed.stdout

    async with api_for(server, "nlg_live_nope.nope") as bad:
        e = await fails(bad.apps.list(), 401)
        assert e.details.error == "Unauthorized"
    async with api_for(server, other_key) as theirs, api_for(server) as ours:
        their_apps = (await theirs.apps.list()).data
        assert [a.slug for a in their_apps] == ["secret"]
        their_actor = await theirs.actors.create(ActorCreate(name="x", actor_type="user"))
        # Another project's ids answer like missing ones.
        await fails(ours.apps.get(their_apps[0].app_id), 404)
        await fails(ours.actors.get(their_actor.actor_token_id), 404)
        await fails(ours.actors.delete(their_actor.actor_token_id), 404)
        await fails(ours.rooms.list(their_apps[0].app_id), 404)
        # Validation.
        await fails(ours.actors.create(ActorCreate(name="x", actor_type="robot")), 400)
        await fails(ours.apps.create(AppCreate(name="Demo", slug="demo")), 409)
        await fails(ours.rooms.delete("demo", "general"), 403)
        await fails(ours.rooms.grant_actor("demo", "general", RoomActorAccessCreate(permission="everything", actor_type="user")), 400)
        # Revoking the key locks it out.
        key_id = json.loads(key.stdout)["api_key"]["key_id"]
        assert admin(addr, "--project", other, "api-keys", "revoke", key_id).returncode == 0
        await fails(theirs.apps.list(), 401)


async def test_server_side_publish_over_http(skua):
    bob = await helpers.connect(ws_url(skua), "dev-token-bob")
    inbox = helpers.Recorder("bob")
    bob.set_app("demo").set_room("general").on("messages", inbox)
    await helpers.subscribe_ok(bob, "demo/general/messages")
    body = {"topic": "demo/general/messages", "data": {"from": "backend"}}
    headers = {"Authorization": f"Bearer {DEV_API_KEY}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{node(skua).port}/v1/publish", json=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            assert "timestamp" in await r.json()
    await inbox.wait_data({"from": "backend"})


def test_readme_rest_example_runs(skua):
    assert len(EXAMPLE.read_text().splitlines()) <= 35, "keep the README example short"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env={**os.environ, "SKUA_URL": ws_url(skua), "SKUA_API": f"http://127.0.0.1:{node(skua).port}/v1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert "Thermometer (actor-" in result.stdout and "subscribed to sensors/hall/readings" in result.stdout, result.stdout


async def test_scopes_isolate_the_same_room_and_deactivation_closes_4001(skua):
    async with api_for(skua) as api:
        red = await api.scopes.create(ScopeCreate(name="Red", slug=unique("red")))
        blue = await api.scopes.create(ScopeCreate(name="Blue", slug=unique("blue")))
        assert (red.is_active, red.project_id) == (True, "demo-project")
        page = await api.scopes.list(ListOptions(search=red.slug))
        assert [s.access_scope_id for s in page.data] == [red.access_scope_id]
        assert page.pagination.total == 1

        async def member(scope) -> str:
            made = await api.actors.create(ActorCreate(name="m", actor_type="user"))
            moved = await api.scopes.add_actor(scope.access_scope_id, made.actor_token_id)
            assert moved.actor_token_id == made.actor_token_id
            return made.access_token

        red1, red2, blue1 = await member(red), await member(red), await member(blue)
        assert len(await api.scopes.list_actors(red.access_scope_id)) == 2

        topic = "demo/general/messages"
        r1 = await helpers.connect(ws_url(skua), red1)
        r2 = await helpers.connect(ws_url(skua), red2)
        b1 = await helpers.connect(ws_url(skua), blue1)
        r2_inbox, b1_inbox = helpers.Recorder("red2"), helpers.Recorder("blue1")
        r2.set_app("demo").set_room("general").on("messages", r2_inbox)
        b1.set_app("demo").set_room("general").on("messages", b1_inbox)
        await helpers.subscribe_ok(r2, topic)
        await helpers.subscribe_ok(b1, topic)
        assert await helpers.emit_ack(r1, topic, {"team": "red"}) is None
        await r2_inbox.wait_data({"team": "red"})
        # blue1 gets blue's message only: red's never reached it (same publisher order not needed:
        # a blue member's own message proves the subscription works and nothing else arrived).
        blue2 = await helpers.connect(ws_url(skua), await member(blue))
        assert await helpers.emit_ack(blue2, topic, {"team": "blue"}) is None
        await b1_inbox.wait_data({"team": "blue"})
        assert b1_inbox.data == [{"team": "blue"}], b1_inbox.data

        r1_ws, r2_ws = r1._ws, r2._ws
        updated = await api.scopes.update(red.access_scope_id, ScopeUpdate(is_active=False))
        assert updated.is_active is False
        assert await closed_with(r1_ws) == (4001, "scope_inactive")
        assert await closed_with(r2_ws) == (4001, "scope_inactive")
        await api.scopes.delete(blue.access_scope_id)
        await fails(api.scopes.get(blue.access_scope_id), 404)
