"""Skua's REST API with the SDK's NoLagApi: provision an app, a room and a device, then connect."""
import asyncio
import os
from nolag import NoLag, NoLagOptions, NoLagApi, NoLagApiOptions
from nolag.api_types import AppCreate, RoomCreate, ActorCreate

BASE = os.environ.get("SKUA_API", "http://localhost:8080/v1")  # same port as /ws
URL = os.environ.get("SKUA_URL", "ws://localhost:8080/ws")


async def main():
    async with NoLagApi("skua-dev-api-key", NoLagApiOptions(base_url=BASE)) as api:
        app = await api.apps.create(AppCreate(name="Sensors", topics=["readings"],
                                              config={"autoProvisionRooms": True}))
        room = await api.rooms.ensure(app.app_id, RoomCreate(name="Hall"))
        device = await api.actors.create(ActorCreate(name="Thermometer", actor_type="device"))

        client = NoLag(device.access_token, NoLagOptions(url=URL))
        await client.connect()
        subscribed = asyncio.get_running_loop().create_future()
        await client.subscribe(f"{app.slug}/{room.slug}/readings", callback=subscribed.set_result)
        if error := await subscribed:
            raise error
        print(f"{device.name} ({device.actor_token_id}) subscribed to {app.slug}/{room.slug}/readings")
        client.disconnect()
        await api.actors.delete(device.actor_token_id)
        await api.apps.delete(app.app_id)


asyncio.run(main())
