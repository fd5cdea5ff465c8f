"""Several workers on one Redis: one consistent view, and no inconsistency under concurrency."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
import redis
from aiohttp.test_utils import TestClient

from tests.builders import identity, registration
from tests.calls import register, route
from tests.tables import violations
from tests.waits import until


async def test_registration_through_one_worker_is_read_through_another_at_once(make_client) -> None:
    a, b = await make_client(), await make_client()
    await register(a, registration(topics=["T1"]))
    answer = await route(b, "T1")
    assert answer is not None and answer["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}


async def test_a_worker_reads_its_own_change_at_once(make_client) -> None:
    a = await make_client()
    await register(a, registration(topics=["T1"]))
    assert await route(a, "T1") is not None  # cached now
    await a.post("/v1/brokers/unregister", json=identity(registration()))
    assert await route(a, "T1") is None


def route_is_whole(answer: dict) -> bool:
    """Every queue names a broker group that is in the answer with at least one address."""
    groups = {b["brokerName"]: b["brokerAddrs"] for b in answer["brokerDatas"]}
    return all(groups.get(q["brokerName"]) for q in answer["queueDatas"])


@pytest.mark.slow
async def test_concurrent_brokers_workers_and_scanners_leave_consistent_tables(make_client, r: redis.Redis) -> None:
    rng = random.Random(7)
    # a Redis timeout far past any call's time on a loaded machine: this run is about consistency, not outages
    workers: list[TestClient] = [await make_client(scan_interval_ms=100, redis_timeout_ms=10_000) for _ in range(3)]
    clusters = ["c1", "c2", "c3"]
    topics = [f"T{i}" for i in range(300)]
    brokers = []
    for g in range(24):
        group_topics = rng.sample(topics, 40)
        for bid in (0, 1):
            brokers.append(registration(
                addr=f"10.1.{g}.{bid}:10911", name=f"group{g}", broker_id=bid,
                cluster=clusters[g % 3], topics=group_topics, timeout_ms=600,
            ))
    counts = {"register": 0, "heartbeat": 0, "unregister": 0, "silent": 0, "reads": 0, "torn": 0}
    deadline = time.monotonic() + 4

    def going_on() -> bool:
        """For 4 s, and on a loaded machine until there were enough registrations and reads."""
        if time.monotonic() < deadline:
            return True
        return (counts["register"] <= 100 or counts["reads"] <= 100) and time.monotonic() < deadline + 60

    async def broker_life(reg: dict) -> None:
        version = 1
        while going_on():
            worker = rng.choice(workers)
            action = rng.random()
            if action < 0.45:
                version += rng.random() < 0.3
                reg["topicConfigSerializeWrapper"]["dataVersion"]["counter"] = version
                assert (await worker.post("/v1/brokers/register", json=reg)).status == 200
                counts["register"] += 1
            elif action < 0.8:
                assert (await worker.post("/v1/brokers/heartbeat", json=identity(reg))).status in (200, 404)
                counts["heartbeat"] += 1
            elif action < 0.9:
                assert (await worker.post("/v1/brokers/unregister", json=identity(reg))).status == 200
                counts["unregister"] += 1
            else:
                counts["silent"] += 1
                await asyncio.sleep(0.8)  # past its 600 ms timeout: the scanners take it
            await asyncio.sleep(rng.uniform(0.01, 0.08))

    async def reader() -> None:
        while going_on():
            resp = await rng.choice(workers).get(f"/v1/routes/{rng.choice(topics)}")
            if resp.status == 200:
                counts["reads"] += 1
                counts["torn"] += not route_is_whole(await resp.json())
            else:
                assert resp.status == 404

    await asyncio.gather(*(broker_life(b) for b in brokers), *(reader() for _ in range(4)))
    assert counts["register"] > 100 and counts["reads"] > 100, counts
    assert counts["torn"] == 0, counts
    assert violations(r) == []
    # every broker is silent now: all are gone within timeout + one scan interval (+ 0.3 s):
    # held to when the last read that still found one was sent, not to how long reads take
    silent_from = time.monotonic()
    last_found_asked = 0.0

    async def all_gone() -> bool:
        nonlocal last_found_asked
        asked = time.monotonic()
        cluster = await (await workers[0].get("/v1/cluster")).json()
        listed = await (await workers[1].get("/v1/topics")).json()
        if cluster == {"brokerAddrTable": {}, "clusterAddrTable": {}} and listed == {"topicList": []}:
            return True
        last_found_asked = asked - silent_from
        return False

    await until(all_gone, 30, "every silent broker gone from the cluster and the topic list", poll_s=0.05)
    assert violations(r) == []
    assert (await (await workers[0].get("/v1/cluster")).json()) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert (await (await workers[1].get("/v1/topics")).json()) == {"topicList": []}
    assert last_found_asked <= 0.6 + 0.1 + 0.3
