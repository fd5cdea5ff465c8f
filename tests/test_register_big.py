"""Registrations of brokers with many topics: what a worker sends when it holds a copy of
the group's fingerprints (only what differs), when that copy is out of date (refused
whole, sent again in full), and a new group's first registration, staged in slices that
no reader sees until one script publishes them (service/registration.py,
lua/register_stage.lua). Against the test's real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

import pytest
import orjson
import redis

from service.config import Settings
from service.models import RegisterRequest, validated
from service.registration import COPY_MIN_TOPICS, Copies, diff
from service.registry import Registry
from service.store import Store
from tests.builders import registration, topic_config
from tests.tables import snapshot, violations

N = COPY_MIN_TOPICS + 100  # enough topics for a worker to keep a copy


def table(n: int, prefix: str = "T", **changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    topics = {f"{prefix}{i:04d}": topic_config(f"{prefix}{i:04d}") for i in range(n)}
    for topic, fields in changes.items():
        topics[topic] = {**topic_config(topic), **fields}
    return topics


def request(settings: Settings, topics: dict[str, dict[str, Any]], version: int, name: str = "broker-a",
            addr: str = "10.0.0.1:10911") -> RegisterRequest:
    return validated(RegisterRequest, registration(name=name, addr=addr, topics=topics, version=version), settings)


def registry(settings: Settings, **overrides: Any) -> Registry:
    """A registry that registers new groups in one script: the copies' tests (staging has
    its own, ``staged_registry``)."""
    reg = Registry(Store(settings.with_overrides(**overrides)))
    reg.STAGE_MIN = 10**9
    return reg


def tables_of(r: redis.Redis) -> dict[str, Any]:
    """The route tables without what differs between two equal histories: change records,
    counters, the generations of copies."""
    out = snapshot(r)
    for key in ("{rmq}:version", "{rmq}:changelog", "{rmq}:topics-gen"):
        out.pop(key, None)
    for key, value in out.items():
        if isinstance(value, dict):
            value.pop("topicsGen", None)
    return out


# new topic, changed topic (queue count), topic gone; then, with the same dataVersion,
# another change (not written: only a new dataVersion rewrites) and a new topic (written);
HISTORY = [
    (table(N), 1),
    ({**{k: v for k, v in table(N, T0001={"writeQueueNums": 8}).items() if k != "T0002"},
      "New1": topic_config("New1")}, 2),
    ({**{k: v for k, v in table(N, T0003={"perm": 4}).items() if k != "T0002"},
      "New1": topic_config("New1"), "New2": topic_config("New2")}, 2),
    # that change again with a new dataVersion: written now
    ({**table(N, T0003={"perm": 4}), "New1": topic_config("New1"), "New2": topic_config("New2")}, 3),
]


@pytest.mark.parametrize("delete_absent", [False, True], ids=["absent kept", "absent deleted"])
async def test_registrations_sent_as_differences_leave_the_tables_full_ones_leave(
        settings: Settings, r: redis.Redis, delete_absent: bool) -> None:
    full = registry(settings, delete_topic_with_broker_registration=delete_absent)
    full.copies = Copies(max_topics=0)  # holds no copy: every registration goes whole
    for topics, version in HISTORY:
        await full.register(request(settings, topics, version))
    expected = tables_of(r)
    assert full.register_paths == {"full": len(HISTORY)}
    r.flushall()

    diffing = registry(settings, delete_topic_with_broker_registration=delete_absent)
    for topics, version in HISTORY:
        await diffing.register(request(settings, topics, version))
    assert diffing.register_paths == {"full": 1, "diff": len(HISTORY) - 1}
    assert tables_of(r) == expected
    assert violations(r) == []


async def test_a_copy_another_worker_made_out_of_date_is_refused_and_the_table_sent_whole(
        settings: Settings, r: redis.Redis) -> None:
    a, b = registry(settings), registry(settings)
    await a.register(request(settings, table(N), 1))
    await b.register(request(settings, table(N, T0001={"writeQueueNums": 8}), 2))  # a's copy is out of date now
    await a.register(request(settings, table(N, T0005={"readQueueNums": 2}), 3))
    assert a.register_paths == {"full": 2, "stale": 1}
    fingerprints = r.hgetall("{rmq}:broker-topics:broker-a")
    assert fingerprints == {t: "4,4,6,0" for t in table(N)} | {"T0005": "2,4,6,0"}
    assert r.hget("{rmq}:queue:T0001:broker-a", "writeQueueNums") == "4"


async def test_a_group_stored_without_a_generation_registers_in_full(settings: Settings, r: redis.Redis) -> None:
    """Tables an earlier version wrote have no topicsGen: a copy never matches them."""
    reg = registry(settings)
    await reg.register(request(settings, table(N), 1))
    r.hdel("{rmq}:broker:broker-a", "topicsGen")
    await reg.register(request(settings, table(N, T0001={"perm": 2}), 2))
    assert reg.register_paths == {"full": 2, "stale": 1}
    assert r.hget("{rmq}:queue:T0001:broker-a", "perm") == "2"


async def test_an_operators_change_to_a_group_makes_copies_of_it_out_of_date(settings: Settings, r: redis.Redis) -> None:
    reg = registry(settings)
    await reg.register(request(settings, table(N), 1))
    await reg.write_perm("broker-a", "wipe")  # every QueueData of the group changes
    await reg.register(request(settings, table(N), 2))  # a new dataVersion rewrites them
    assert reg.register_paths == {"full": 2, "stale": 1}
    assert set(r.hvals("{rmq}:broker-topics:broker-a")) == {"4,4,6,0"}


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
    assert writer.register_paths == {"staged": 1, "diff": 1}
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
    assert writer.register_paths == {"staged": 1, "diff": 1}
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
    assert reg.register_paths == {"staged": 1, "diff": 1}
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
    assert reg.register_paths == {"full": 1, "staged": 1, "diff": 1}
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


@pytest.mark.parametrize("fps,changed,absent", [
    ({"A": "1,1,6,0", "B": "2,2,6,0"}, {"B": "2,2,6,0"}, []),  # one changed
    ({"A": "1,1,6,0", "B": "1,1,6,0", "C": "1,1,6,0"}, {"C": "1,1,6,0"}, []),  # one added
    ({"A": "1,1,6,0"}, {}, ["B"]),  # one gone
    ({"A": "1,1,6,0", "C": "1,1,6,0"}, {"C": "1,1,6,0"}, ["B"]),  # one gone, one added
], ids=["changed", "added", "gone", "gone and added"])
def test_a_diff_names_what_changed_and_what_is_gone(fps: dict[str, str], changed: dict[str, str],
                                                    absent: list[str]) -> None:
    assert diff({"A": "1,1,6,0", "B": "1,1,6,0"}, fps) == (changed, absent)
