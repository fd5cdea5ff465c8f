"""A long poll is woken only by a change that may alter its answer."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient

from service.http.app_keys import CACHE
from tests.builders import registration, topic_config
from tests.calls import register
from tests.waits import until

TOPICS_A = [f"A{i}" for i in range(10)]
TOPICS_B = [f"B{i}" for i in range(10)]


async def start_watches(client: TestClient, topics: list[str]) -> dict[str, asyncio.Task]:
    watches = {}
    for topic in topics:
        etag = (await client.get(f"/v1/routes/{topic}")).headers["ETag"].strip('"')
        watches[topic] = asyncio.create_task(client.get(f"/v1/routes/{topic}?watch={etag}&timeout=20s"))
    # every watch has arrived and waits (room for a loaded machine)
    await until(lambda: client.app[CACHE].watchers >= len(topics), 10, "every watch waiting")
    assert client.app[CACHE].watchers == len(topics)
    return watches


async def seed(client: TestClient) -> None:
    await register(client, registration(name="broker-a", topics=TOPICS_A))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-b", topics=TOPICS_B))
    await client.app[CACHE].poll_once()


async def finish(watches: dict[str, asyncio.Task]) -> None:
    for task in watches.values():
        task.cancel()
    await asyncio.gather(*watches.values(), return_exceptions=True)


async def test_a_change_to_one_topic_wakes_only_its_watchers_and_the_rest_read_nothing(client: TestClient) -> None:
    await seed(client)
    watches = await start_watches(client, TOPICS_A + TOPICS_B)
    misses = client.app[CACHE].stats.misses
    await register(client, registration(name="broker-a", topics={"A3": topic_config("A3", write=8)} | {
        t: topic_config(t) for t in TOPICS_A if t != "A3"}, version=2))
    resp = await asyncio.wait_for(watches.pop("A3"), 30)
    assert resp.status == 200 and (await resp.json())["queueDatas"][0]["writeQueueNums"] == 8
    await asyncio.sleep(0.3)  # time must pass: a wrong wake-up of another watch would have answered by now
    assert client.app[CACHE].stats.watchers_woken == 1
    assert not any(task.done() for task in watches.values())
    # one route read, the woken watch's; the waiting ones read nothing
    assert client.app[CACHE].stats.misses - misses == 1
    await finish(watches)


async def test_a_group_change_wakes_only_the_watchers_of_that_groups_topics(client: TestClient) -> None:
    await seed(client)
    watches = await start_watches(client, TOPICS_A + TOPICS_B)
    await client.post("/v1/brokers/broker-b/wipe-write-perm")
    done = await asyncio.wait_for(asyncio.gather(*(watches.pop(t) for t in TOPICS_B)), 30)
    assert all(resp.status == 200 for resp in done)
    await asyncio.sleep(0.3)  # time must pass: a wrong wake-up of broker-a's watches would have answered by now
    assert not any(task.done() for task in watches.values())
    await register(client, registration(addr="10.0.0.9:10911", name="broker-a", broker_id=1, topics=[]))
    done = await asyncio.wait_for(asyncio.gather(*watches.values()), 30)
    assert all(resp.status == 200 for resp in done)
