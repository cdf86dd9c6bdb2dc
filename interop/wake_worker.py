"""A scale-to-zero worker (docs/agents.md, N48) on the real NoLag Python SDK.

`python wake_worker.py URL CLIENT_ID TOPIC GROUP WAKE_URL` connects as the demo agent
(`dev-token-agent`) with its stable clientId, announces itself in TOPIC's room as a persistent
member woken at WAKE_URL, subscribes to the logged TOPIC in load-balancing group GROUP (a
persistent member: the group replay hands it what was published while the group was away),
prints each message as a JSON line `{"data": ..., "msgId": ..., "isReplay": ...}`, acks it, and
exits once the replay ended and every replayed message was acked: the group is back to zero.

NoLag 2.6.0 sends no clientId and never acks, so `WorkerClient` adds `clientId` to its `auth`
frame and sends `ack` frames itself; everything else is the SDK as shipped.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Optional

import msgpack
from nolag import NoLag, NoLagOptions
from nolag import SubscribeOptions

AGENT_TOKEN = "dev-token-agent"


class WorkerClient(NoLag):
    """The SDK, plus a clientId on `auth` and the replay frames recorded."""

    def __init__(self, url: str, client_id: str):
        super().__init__(AGENT_TOKEN, NoLagOptions(url=url, reconnect=False))
        self.client_id = client_id
        self.replay_end = asyncio.Event()
        self.replayed: Optional[int] = None

    async def _send(self, message: dict, op: str = "send", topic: Optional[str] = None) -> None:
        if message.get("type") == "auth":
            message = {**message, "clientId": self.client_id}
        await super()._send(message, op, topic)

    async def _handle_message(self, data: bytes) -> None:
        try:
            frame = msgpack.unpackb(data) if data else None
        except Exception:  # noqa: BLE001 - the SDK reports undecodable frames itself
            frame = None
        if isinstance(frame, dict) and frame.get("type") == "replayEnd":
            self.replayed = frame.get("replayed")
            self.replay_end.set()
        await super()._handle_message(data)

    async def ack(self, msg_id: str) -> None:
        await self._send({"type": "ack", "msgId": msg_id}, "ack")


def advert(wake_url: str, version: int = 1) -> dict[str, Any]:
    """The worker's persistent presence (N46): its `wake` never reaches other clients."""
    return {
        "persistent": True,
        "capabilities": ["summarise"],
        "advertisement": {"model": "demo", "version": version},
        "wake": {"url": wake_url, "timeoutMs": 10000},
    }


async def run(
    url: str, client_id: str, topic: str, group: str, wake_url: str, timeout: float = 20.0
) -> list[dict[str, Any]]:
    """Connects, announces, collects the replay (acking each message), disconnects; the messages."""
    client = WorkerClient(url, client_id)
    got: list[dict[str, Any]] = []
    acks: list[asyncio.Task] = []

    def on_message(data: Any, meta: Any) -> None:
        got.append({"data": data, "msgId": meta.msg_id, "isReplay": meta.is_replay})
        print(json.dumps(got[-1]), flush=True)
        if meta.msg_id:
            acks.append(asyncio.ensure_future(client.ack(meta.msg_id)))

    client.on(topic, on_message)
    await asyncio.wait_for(client.connect(), timeout)
    _app, room, _topic = topic.split("/", 2)
    await client.set_presence(advert(wake_url), room_id=room)
    await client.subscribe(topic, SubscribeOptions(load_balance=True, load_balance_group=group))
    await asyncio.wait_for(client.replay_end.wait(), timeout)
    await asyncio.gather(*acks)
    # A round trip: the server has handled the acks (frames of one connection are in order).
    await client.fetch_presence(room_id=room)
    client.disconnect()
    return got


if __name__ == "__main__":
    url_, client_id_, topic_, group_, wake_url_ = sys.argv[1:6]
    messages = asyncio.run(run(url_, client_id_, topic_, group_, wake_url_))
    print(json.dumps({"done": len(messages)}), flush=True)
