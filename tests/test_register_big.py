"""Registrations of brokers with many topics: a new group's first registration, staged in
slices that no reader sees until one script publishes them (service/registry.py,
lua/register_stage.lua). Against the test's real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

import pytest
import orjson
import redis

from service.config import Settings
from service.models import RegisterRequest, validated
from service.registry import Registry
from service.store import Store
from tests.builders import registration, topic_config
from tests.tables import violations



def table(n: int, prefix: str = "T", **changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    topics = {f"{prefix}{i:04d}": topic_config(f"{prefix}{i:04d}") for i in range(n)}
    for topic, fields in changes.items():
        topics[topic] = {**topic_config(topic), **fields}
    return topics


def request(settings: Settings, topics: dict[str, dict[str, Any]], version: int, name: str = "broker-a",
            addr: str = "10.0.0.1:10911") -> RegisterRequest:
    return validated(RegisterRequest, registration(name=name, addr=addr, topics=topics, version=version), settings)


def registry(settings: Settings, **overrides: Any) -> Registry:
    """A registry that registers new groups in one script (staging has its own,
    ``staged_registry``)."""
    reg = Registry(Store(settings.with_overrides(**overrides)))
    reg.STAGE_MIN = 10**9
    return reg


def staged_registry(settings: Settings) -> Registry:
    reg = registry(settings)
    reg.STAGE_MIN, reg.STAGE_SLICE = 100, 10  # many slices, so a reader runs between them
    return reg


async def reads_while(registering: Awaitable[Any], reader: Registry, r: redis.Redis, topics: tuple[str, ...],
                      shared: bool = False) -> tuple[int, list[bool]]:
    """Reads while `registering` (broker-a's staged registration of S0000..S0299) runs: the
    routes of `topics`, the topic list and, with `shared`, the route of Shared (broker-old's,
    which broker-a adds to), each asserted whole. How many reads found broker-a staging,
    and for each read in turn whether it saw the registration."""
    done = asyncio.Event()
    staged_reads = 0
    seen: list[bool] = []

    async def read() -> None:
        nonlocal staged_reads
        while not done.is_set():
            staged_reads += r.hexists("{rmq}:broker:broker-a", "staging")
            for topic in topics:
                seen.append((await reader.route(topic)).body is not None)
            listed = [t for t in (await reader.topic_list("all"))[1]["topicList"] if t.startswith("S0")]
            assert len(listed) in (0, 300), f"{len(listed)} of the 300 topics listed"
            seen.append(len(listed) == 300)
            if shared:
                route = (await reader.route("Shared")).data
                assert route is not None
                shape = (len(route["queueDatas"]), len(route["brokerDatas"]))
                assert shape in ((1, 1), (2, 2)), f"a route of Shared with {shape} QueueData and BrokerData"
                seen.append(shape == (2, 2))
            await asyncio.sleep(0)

    reading = asyncio.create_task(read())
    try:
        await registering
    finally:
        done.set()
        await reading
    return staged_reads, seen


async def test_a_new_groups_big_registration_is_seen_whole_or_not_at_all(settings: Settings, r: redis.Redis) -> None:
    reader = registry(settings)
    await reader.register(request(settings, {"Shared": topic_config("Shared")}, 1, name="broker-old",
                                  addr="10.0.0.9:10911"))
    topics = {"Shared": topic_config("Shared", write=16)} | table(300, prefix="S")  # Shared in the first slice
    writer = staged_registry(settings)
    staged_reads, seen = await reads_while(writer.register(request(settings, topics, 1)), reader, r,
                                           ("S0000", "S0150", "S0299"), shared=True)
    assert writer.register_paths == {"staged": 1}
    assert staged_reads > 0, "no read ran while the registration was staged"
    assert seen == sorted(seen), "a read saw the registration, a later one did not"
    assert (await reader.route("S0150")).data is not None and violations(r) == []


async def test_a_masters_big_first_registration_after_its_slaves_is_staged_and_seen_whole_or_not_at_all(
        settings: Settings, r: redis.Redis) -> None:
    # at a cluster's start the slave often registers first: its group is then visible,
    # with no QueueData yet, and the master's 10,000 topics would otherwise be one script
    reader = registry(settings)
    await reader.register(request(settings, {"Shared": topic_config("Shared")}, 1, name="broker-old",
                                  addr="10.0.0.9:10911"))
    slave = registration(name="broker-a", addr="10.0.0.2:10911", broker_id=1, topics={"S0000": topic_config("S0000")})
    await reader.register(validated(RegisterRequest, slave, settings))
    topics = {"Shared": topic_config("Shared", write=16)} | table(300, prefix="S")
    writer = staged_registry(settings)
    staged_reads, seen = await reads_while(writer.register(request(settings, topics, 1)), reader, r,
                                           ("S0000", "S0299"), shared=True)
    assert writer.register_paths == {"staged": 1}
    assert staged_reads > 0, "no read ran while the registration was staged"
    assert seen == sorted(seen), "a read saw the registration, a later one did not"
    route = (await reader.route("S0150")).data
    assert route is not None and sorted(route["brokerDatas"][0]["brokerAddrs"]) == ["0", "1"]
    assert violations(r) == []


async def test_a_staging_that_never_published_is_invisible_and_removed_by_the_next(settings: Settings, r: redis.Redis) -> None:
    reg = staged_registry(settings)
    # a worker stopped after two slices of a staged registration
    reg.STAGE_MIN = 10**9
    stopped = {f"Old{i}": "4,4,6,0" for i in range(20)}
    first = await reg.store.run("register_stage", ["broker-a", "", '["Old0","4,4,6,0","Old1","4,4,6,0"]'])
    await reg.store.run("register_stage", ["broker-a", first[2], '["Old2","4,4,6,0"]'])
    assert (await reg.route("Old0")).body is None
    assert (await reg.topic_list("all"))[1]["topicList"] == []
    assert r.sismember("{rmq}:topic:Old0", "broker-a")  # staged, and skipped by readers

    reg.STAGE_MIN = 100
    await reg.register(request(settings, table(150, prefix="New"), 1))
    assert reg.register_paths == {"staged": 1}
    assert not any(r.exists(f"{{rmq}}:queue:{t}:broker-a") for t in stopped)
    assert (await reg.topic_list("all"))[1]["topicList"] == sorted(table(150, prefix="New"))
    assert violations(r) == []


async def test_publishing_new_topics_keeps_cached_routes_of_other_topics(make_client: Any, settings: Settings) -> None:
    """The topics a staged registration brings that are new to the tables had no route: the
    change drops the TOPIC_NOT_EXIST answers, not every cached route (no flush)."""
    from service.http.app_keys import NODE

    client = await make_client()
    node = client.server.app[NODE]
    node.registry.STAGE_MIN, node.registry.STAGE_SLICE = 100, 400
    await node.registry.register(request(settings, {"Other": topic_config("Other")}, 1, name="broker-x",
                                         addr="10.0.0.8:10911"))
    assert (await client.get("/v1/routes/Other")).status == 200
    assert (await client.get("/v1/routes/S0005")).status == 404
    await node.registry.register(request(settings, table(1200, prefix="S"), 1))  # more than a record lists
    assert node.registry.register_paths["staged"] == 1
    hits, flushes = node.cache.stats.hits, node.cache.stats.flushes
    assert (await client.get("/v1/routes/Other")).status == 200
    assert node.cache.stats.hits == hits + 1 and node.cache.stats.flushes == flushes == 0
    assert (await client.get("/v1/routes/S0005")).status == 200


def last_change(r: redis.Redis) -> list[str]:
    return orjson.loads(r.lindex("{rmq}:changelog", 0))[2:]


async def test_a_big_registration_of_new_topics_alone_in_staging_is_published_whole_at_once(
        settings: Settings, r: redis.Redis) -> None:
    reader, writer = registry(settings), staged_registry(settings)
    staged_reads, seen = await reads_while(writer.register(request(settings, table(300, prefix="S"), 1)), reader, r,
                                           ("S0000", "S0299"))
    assert staged_reads > 0 and seen == sorted(seen)
    assert (await reader.route("S0150")).body is not None
    # published in one step: the staged set dropped whole, new topics' and the group's tags only
    assert not r.exists("{rmq}:staged-topics") and not r.exists("{rmq}:stagings")
    assert sorted(last_change(r)) == ["-", "g:broker-a"]
    assert violations(r) == []


async def test_a_group_published_while_another_stages_leaves_the_others_topics_hidden(
        settings: Settings, r: redis.Redis) -> None:
    reg = staged_registry(settings)
    await reg.register(request(settings, {"Shared": topic_config("Shared")}, 1, name="broker-old", addr="10.0.0.9:10911"))
    # broker-b's staging is under way (its worker between two slices); broker-a then brings
    # as many topics as are staged in all (its 150 new ones and B0), one of them shared
    first = await reg.store.run("register_stage", ["broker-b", "", '["B0","4,4,6,0"]'])
    assert first[1] == b"staged"
    await reg.register(request(settings, {"Shared": topic_config("Shared")} | table(150, prefix="A"), 1))
    assert reg.register_paths == {"full": 1, "staged": 1}
    listed = (await reg.topic_list("all"))[1]["topicList"]
    assert "A0100" in listed and "B0" not in listed
    assert (await reg.route("B0")).body is None
    assert len((await reg.route("Shared")).data["brokerDatas"]) == 2
    assert r.hgetall("{rmq}:stagings") == {"broker-b": "1"} and r.smembers("{rmq}:staged-topics") == {"B0"}


async def test_a_staging_an_older_worker_started_without_counting_stays_hidden_after_another_publishes(
        settings: Settings, r: redis.Redis) -> None:
    # an older release's register_stage.lua: the group's row says 'staging' and its new
    # topic is in staged-topics, but {rmq}:stagings does not name it
    r.hset("{rmq}:broker:broker-old", mapping={"staging": "1", "topicsGen": "1"})
    r.sadd("{rmq}:staged-topics", "OLD0")
    reg = staged_registry(settings)
    await reg.register(request(settings, table(300, prefix="S"), 1))
    assert reg.register_paths["staged"] == 1
    assert r.smembers("{rmq}:staged-topics") == {"OLD0"}
    listed = (await reg.topic_list("all"))[1]["topicList"]
    assert "S0100" in listed and "OLD0" not in listed


@pytest.mark.slow
async def test_a_staged_group_sharing_more_topics_than_a_change_names_is_published_as_a_flush(
        settings: Settings, r: redis.Redis) -> None:
    reg = staged_registry(settings)
    reg.STAGE_MIN = 1_500
    shared = table(1_100, prefix="S")
    await reg.register(request(settings, shared, 1, name="broker-old", addr="10.0.0.9:10911"))
    await reg.register(request(settings, shared | table(500, prefix="N"), 1))
    assert reg.register_paths["staged"] == 1
    assert last_change(r) == ["*"]
    assert not r.exists("{rmq}:staged-topics")
    assert len((await reg.route("S1000")).data["brokerDatas"]) == 2
    assert "N0400" in (await reg.topic_list("all"))[1]["topicList"]
    assert violations(r) == []


async def test_the_publishing_registration_compares_nothing_of_its_own_untouched_staging(
        settings: Settings, r: redis.Redis) -> None:
    reg = staged_registry(settings)
    await reg.register(request(settings, table(300, prefix="S"), 1))
    assert r.hget("{rmq}:broker-topics:broker-a", "S0007") == "4,4,6,0"
    assert r.exists("{rmq}:queue:S0299:broker-a") == 1 and violations(r) == []


async def test_a_staging_another_change_touched_is_compared_in_full_when_published(
        settings: Settings, r: redis.Redis) -> None:
    reg = staged_registry(settings)
    req = request(settings, table(300, prefix="S"), 1)
    fps = req.topicConfigSerializeWrapper.fingerprints
    assert fps is not None
    generation = await reg._stage("broker-a", fps)
    assert generation
    # another script changed one of the staged pairs meanwhile (which removes topicsGen)
    r.hset("{rmq}:broker-topics:broker-a", "S0007", "1,1,6,0")
    r.hset("{rmq}:queue:S0007:broker-a", mapping={"readQueueNums": 1, "writeQueueNums": 1})
    r.hdel("{rmq}:broker:broker-a", "topicsGen")
    await reg.scripts.register(cluster="DefaultCluster", addr="10.0.0.1:10911", name="broker-a", broker_id=0,
                               ha_addr="", timeout_ms=120_000, data_version=req.topicConfigSerializeWrapper.dataVersion
                               .canonical(), keep_filters=True, delete_absent=False,
                               topics=orjson.dumps([x for t, fp in fps.items() for x in (t, fp)]), filters=b"[]",
                               channel="", digest="", acting="", zone="", mappings=b"[]", staging=generation,
                               topic_count=300, state_version=0)
    assert r.hget("{rmq}:broker-topics:broker-a", "S0007") == "4,4,6,0"
    assert r.hget("{rmq}:queue:S0007:broker-a", "writeQueueNums") == "4"


async def test_a_staged_groups_fingerprints_are_a_hash_table_holding_only_its_topics(
        settings: Settings, r: redis.Redis) -> None:
    # register_stage.lua makes the hash a hash table with a field of its own, gone again in
    # the same script: the fingerprints hold every topic, each as sent, and nothing else
    writer = staged_registry(settings)
    await writer.register(request(settings, table(150, q0001={"readQueueNums": 2}), 1))
    fps = r.hgetall("{rmq}:broker-topics:broker-a")
    assert writer.register_paths == {"staged": 1}
    assert r.object("encoding", "{rmq}:broker-topics:broker-a") == "hashtable"
    assert sorted(fps) == sorted(f"T{i:04d}" for i in range(150)) + ["q0001"]
    assert fps["q0001"] == "2,4,6,0" and fps["T0000"] == "4,4,6,0"
    assert violations(r) == []
