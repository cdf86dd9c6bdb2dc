"""Skua quick start: alice listens in the demo room `general`, bob says hello."""
import asyncio
import os
from nolag import NoLag, NoLagOptions

URL = os.environ.get("SKUA_URL", "ws://localhost:8080/ws")


async def main():
    alice = NoLag("dev-token-alice", NoLagOptions(url=URL))
    bob = NoLag("dev-token-bob", NoLagOptions(url=URL))
    await alice.connect()
    await bob.connect()

    # alice listens on demo/general/messages and says she is online.
    loop = asyncio.get_running_loop()
    room = alice.set_app("demo").set_room("general")
    inbox, subscribed = loop.create_future(), loop.create_future()
    room.on("messages", lambda data, meta: inbox.done() or inbox.set_result((data, meta)))
    await room.subscribe("messages", callback=subscribed.set_result)  # None once subscribed
    if error := await subscribed:
        raise error
    await room.set_presence({"name": "Alice", "status": "online"})

    # bob publishes to the same topic (a publisher never gets its own messages back).
    await bob.emit("demo/general/messages", {"text": "Hello, Alice!"})
    data, meta = await asyncio.wait_for(inbox, timeout=5)
    print(f"alice received {data} from {meta.sender}")
    for member in await room.fetch_presence():
        print(f"in the room: {member['actorTokenId']} {member['presence']}")
    alice.disconnect()
    bob.disconnect()


asyncio.run(main())
