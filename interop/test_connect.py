"""Connecting: the identity the SDK learns from `auth`, and the failures connect() raises."""

import time

import jwt
import pytest
from nolag import ActorType, ConnectionStatus

from helpers import DEV_JWT_SECRET, Recorder, close, connect, make_client, mint_jwt, subscribe_ok

DEMO_ACTORS = [
    ("dev-token-alice", "alice", ActorType.USER),
    ("dev-token-bob", "bob", ActorType.USER),
    ("dev-token-carol", "carol", ActorType.DEVICE),
    ("dev-token-agent", "agent-1", ActorType.AGENT),
    ("dev-token-orchestrator", "orch-1", ActorType.ORCHESTRATOR),
    ("dev-token-viewer", "viewer", ActorType.OBSERVER),
]


@pytest.mark.parametrize("token,actor_id,actor_type", DEMO_ACTORS, ids=[a for _, a, _ in DEMO_ACTORS])
async def test_connect_reports_actor_and_project(skua, token, actor_id, actor_type):
    client = make_client(skua.url, token)
    connected = Recorder("connect")
    client.on("connect", connected)
    await client.connect()
    assert client.connected and client.status == ConnectionStatus.CONNECTED
    assert client.actor_id == actor_id
    assert client.actor_type == actor_type
    assert client.project_id == "demo-project"
    assert client.protocol_version == 2
    assert len(connected.calls) == 1
    # A fresh connect carries no reconnect flag and restores nothing.
    auth = client.frames("auth")[0]
    assert auth["success"] is True and auth["restoredSubscriptions"] == []
    assert client.sent[0]["type"] == "auth" and "reconnect" not in client.sent[0]


@pytest.mark.parametrize(
    "token",
    [
        "not-a-real-token",
        "dev-token-mallory",
        # N38: a badly signed JWT, an unknown `sub` and a missing `exp` are all access_denied.
        mint_jwt("alice", secret="not-the-dev-secret"),
        mint_jwt("mallory"),
        jwt.encode({"sub": "alice"}, DEV_JWT_SECRET, algorithm="HS256"),
    ],
    ids=["garbage", "unknown-static-token", "jwt-bad-signature", "jwt-unknown-sub", "jwt-without-exp"],
)
async def test_bad_token_is_access_denied(skua, token):
    client = make_client(skua.url, token)
    with pytest.raises(Exception) as exc:
        await client.connect()
    assert str(exc.value) == "access_denied"
    assert not client.connected


async def test_client_token_jwt_for_alice(skua):
    alice = await connect(skua.url, mint_jwt("alice"))
    assert alice.actor_id == "alice"
    assert alice.actor_type == ActorType.USER
    assert alice.project_id == "demo-project"
    # The JWT carries alice's grants: the private room `ops` is hers.
    await subscribe_ok(alice, "demo/ops/messages")


async def test_expired_jwt_is_token_expired(skua):
    # N38: a JWT already expired at auth fails with exactly `token_expired`.
    client = make_client(skua.url, mint_jwt("alice", expires_in=-10))
    with pytest.raises(Exception) as exc:
        await client.connect()
    assert str(exc.value) == "token_expired"
    assert not client.connected


@pytest.mark.timeout(20)
async def test_client_token_expiry_disconnects(skua):
    """N27: at expiry the server sends `disconnect` (token_expired) and closes 4003; the SDK
    surfaces the close as its 'disconnect' event. (The wire doc's "SDKs with a token provider
    reconnect with a fresh token" does not apply: nolag 2.6.0 has no token provider, so this
    client does not reconnect.)"""
    issued = time.time()
    # 4 s: a loaded machine may take a second or two to connect and authenticate (issue 35).
    client = make_client(skua.url, mint_jwt("bob", expires_in=4))
    disconnected = Recorder("disconnect")
    client.on("disconnect", disconnected)
    await client.connect()
    assert client.actor_id == "bob"

    (reason,) = await disconnected.wait_for(lambda reason: True, timeout=12)
    elapsed = time.time() - issued
    assert "4003" in reason and "token_expired" in reason, reason
    assert elapsed >= 3.0, f"disconnected after {elapsed:.2f}s, before the token expired"
    # The SDK does nothing with the `disconnect` frame itself, but it must come first.
    assert client.frames("disconnect") == [{"type": "disconnect", "reason": "token_expired"}]
    assert not client.connected
    await close(client)
