"""A group back after its last member left is read again on every worker within the cache's
bound, over both fronts, though clients asked for its topics while it was away (each worker
then cached TOPIC_NOT_EXIST, or a route without the group).

Two workers (HTTP and RocketMQ's protocol each) on the test redis-server. A group of more
than 256 QueueData that leaves is only hidden ('leaving', lua/_groups.lua remove_group) and
its QueueData collected afterwards; one back before that registers a table whose QueueData
are all there already, so its registration writes none of them (lua/register.lua,
`returning`): the change must still name every topic the group serves again."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest

from service.config import Settings
from service.remoting import codec, codes
from service.scripts import Scripts
from service.store import Store
from tests.builders import registration
from tests.remoting.client import request
from tests.two_workers import Worker

pytestmark = pytest.mark.usefixtures("consistent")

MASTER, OTHER = "10.0.0.1:10911", "10.0.0.9:10911"
BOUND_MS = Settings.model_fields["max_staleness_ms"].default  # RMQ_MAX_STALENESS_MS: no answer is older


async def found(w: Worker, topic: str) -> tuple[bool, bool]:
    """Whether each front (HTTP, TCP) answers the topic's route; a route must name broker-a."""
    resp = await w.http.get(f"/v1/routes/{topic}")
    assert resp.status in (200, 404), await resp.text()
    http = resp.status == 200 and "broker-a" in {q["brokerName"] for q in (await resp.json())["queueDatas"]}
    answer = await w.rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    assert answer.code in (codes.SUCCESS, codes.TOPIC_NOT_EXIST), answer.remark
    tcp = answer.code == codes.SUCCESS and "broker-a" in {q["brokerName"] for q in codec.loads(answer.body)["queueDatas"]}
    return http, tcp


@pytest.fixture
async def scripts(settings: Settings) -> AsyncIterator[Scripts]:
    """The scripts on a store of the test's own: a departure sent this way is no worker's, so
    none of them starts collecting the group's QueueData (service/removals.py)."""
    store = Store(settings)
    yield Scripts(store)
    await store.close()


async def register(w: Worker, reg: dict[str, Any]) -> None:
    resp = await w.http.post("/v1/brokers/register", json=reg)
    assert resp.status == 200, await resp.text()


async def answers(workers: list[Worker], topics: list[str]) -> dict[str, int]:
    """Per topic, how many of the four reads (two workers, two fronts) answered its route."""
    out = {}
    for topic in topics:
        out[topic] = 0
        for w in workers:
            out[topic] += sum(await found(w, topic))
    return out


async def away_and_back(workers: list[Worker], scripts: Scripts, reg: dict[str, Any], sample: list[str]) -> dict[str, int]:
    """The group leaves (its one member unregistered), every sampled topic is read on both
    workers over both fronts while it is away, the same registration comes back; the reads
    of the sample a bound later."""
    removed = await scripts.unregister(reg["clusterName"], reg["brokerAddr"], reg["brokerName"], reg["brokerId"])
    assert removed.removed
    for w in workers:  # a worker's own write is applied at once; the other's within the bound
        await w.cache.poll_once()
    assert await answers(workers, sample) == {t: 0 for t in sample}
    await register(workers[1], reg)
    await asyncio.sleep(BOUND_MS / 1000)  # from now on no worker may answer what it knew before
    return await answers(workers, sample)


async def test_a_small_group_back_is_read_on_both_workers_within_the_bound(
        workers: list[Worker], scripts: Scripts) -> None:
    reg = registration(MASTER, topics=[f"T{i}" for i in range(10)])
    await register(workers[0], reg)
    sample = ["T0", "T5", "T9"]
    assert await away_and_back(workers, scripts, reg, sample) == {t: 4 for t in sample}


async def test_a_leaving_group_back_before_collection_is_read_on_both_workers_within_the_bound(
        workers: list[Worker], scripts: Scripts, r: Any) -> None:
    topics = [f"T{i}" for i in range(300)]  # more than LEAVE_NOW_MAX (256): hidden, collected later
    reg = registration(MASTER, topics=topics)
    await register(workers[0], reg)
    sample = topics[::30]
    after = await away_and_back(workers, scripts, reg, sample)
    assert r.hlen("{rmq}:broker-topics:broker-a") == 300  # none was collected: all were kept
    assert after == {t: 4 for t in sample}


async def test_a_leaving_group_back_is_named_again_in_the_routes_of_topics_it_shares(
        workers: list[Worker], scripts: Scripts) -> None:
    topics = [f"T{i}" for i in range(300)]
    await register(workers[0], registration(OTHER, name="broker-b", topics=["T7", "T8"]))
    reg = registration(MASTER, topics=topics)
    await register(workers[0], reg)
    # T7 and T8 have a route all along, without broker-a while it is away
    assert await away_and_back(workers, scripts, reg, ["T7", "T8"]) == {"T7": 4, "T8": 4}


async def test_a_leaving_group_back_past_the_tag_cap_is_read_again_without_a_flush(
        workers: list[Worker], scripts: Scripts) -> None:
    # one topic past TAG_CAP (lua/_changes.lua, 1,000): its own topics go by one '-' tag
    topics = [f"T{i}" for i in range(1_001)]
    await register(workers[0], registration(OTHER, name="broker-b", topics=["T7"]))
    reg = registration(MASTER, topics=topics)
    await register(workers[0], reg)
    flushes = [w.cache.stats.flushes for w in workers]
    sample = ["T0", "T7", "T500", "T1000"]
    assert await away_and_back(workers, scripts, reg, sample) == {t: 4 for t in sample}
    assert [w.cache.stats.flushes for w in workers] == flushes


async def test_a_leaving_group_back_through_an_older_worker_is_read_again_once_a_collection_unmarks_it(
        workers: list[Worker], scripts: Scripts, r: Any) -> None:
    # an older release's registration leaves the mark (docs/upgrade.md): the next collection
    # of this release finds the group back and unmarks it instead of collecting it
    topics = [f"T{i}" for i in range(300)]
    reg = registration(MASTER, topics=topics)
    await register(workers[0], reg)
    assert (await scripts.unregister("DefaultCluster", MASTER, "broker-a", 0)).removed
    sample = topics[::30]
    for w in workers:
        await w.cache.poll_once()
    assert await answers(workers, sample) == {t: 0 for t in sample}
    # the older release's register.lua: the group's rows as it writes them, the mark left
    r.hset("{rmq}:broker:broker-a", mapping={"cluster": "DefaultCluster", "brokerName": "broker-a"})
    r.hset("{rmq}:addrs:broker-a", "0", MASTER)
    r.sadd("{rmq}:cluster:DefaultCluster", "broker-a")
    r.sadd("{rmq}:clusters", "DefaultCluster")
    identity = {"brokerAddr": MASTER, "cluster": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0"}
    r.hset(f"{{rmq}}:member:{MASTER}", mapping=identity)
    r.hset(f"{{rmq}}:live:{MASTER}", mapping=identity | {"lastUpdateTimestamp": "1", "heartbeatTimeoutMillis": "120000"})
    r.zadd("{rmq}:expiry", {MASTER: 9e12})
    assert (await scripts.collect_leaving(100)).count == 0
    await asyncio.sleep(BOUND_MS / 1000)
    assert await answers(workers, sample) == {t: 4 for t in sample}


async def test_a_leaving_group_back_sharing_more_topics_than_the_tag_cap_is_read_again_after_a_flush(
        workers: list[Worker], scripts: Scripts) -> None:
    # 1,001 shared topics: one past what a record names one by one, so the record is a flush
    topics = [f"T{i}" for i in range(1_001)]
    await register(workers[0], registration(OTHER, name="broker-b", topics=topics))
    reg = registration(MASTER, topics=topics)
    await register(workers[0], reg)
    flushes = [w.cache.stats.flushes for w in workers]
    sample = ["T0", "T500", "T1000"]
    assert await away_and_back(workers, scripts, reg, sample) == {t: 4 for t in sample}
    assert all(w.cache.stats.flushes > before for w, before in zip(workers, flushes))
