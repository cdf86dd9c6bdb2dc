"""Skua control plane: worker-3, provisioned with `skua admin`, gets a message in room lobby-7."""
import asyncio
import os
from nolag import NoLag, NoLagOptions

URL = os.environ.get("SKUA_URL", "ws://localhost:8080/ws")
TOKEN = os.environ["WORKER_TOKEN"]  # the at_live_… token `skua admin actors create` printed


async def main():
    worker = NoLag(TOKEN, NoLagOptions(url=URL))
    bob = NoLag("dev-token-bob", NoLagOptions(url=URL))
    await worker.connect()
    await bob.connect()

    # The room did not exist when the server started: it was provisioned through the API.
    loop = asyncio.get_running_loop()
    room = worker.set_app("demo").set_room("lobby-7")
    inbox, subscribed = loop.create_future(), loop.create_future()
    room.on("messages", lambda data, meta: inbox.done() or inbox.set_result((data, meta)))
    await room.subscribe("messages", callback=subscribed.set_result)  # None once subscribed
    if error := await subscribed:
        raise error

    await bob.emit("demo/lobby-7/messages", {"job": 42})
    data, meta = await asyncio.wait_for(inbox, timeout=5)
    print(f"worker-3 received {data} from {meta.sender}")
    worker.disconnect()
    bob.disconnect()


asyncio.run(main())
