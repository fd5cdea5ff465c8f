"""A group's state (docs/design.md, "A group's state"): each transition of the flags on its
row (`staging`, `topicsGen`, `queuesIntact`, `leaving`) and of its members' `bodyDigest`, one test
each, by the scripts that make it, on the test redis-server."""

from __future__ import annotations

from typing import AsyncIterator

import orjson
import pytest
import redis

from service.config import Settings
from service.scripts import Registered, Scripts
from service.store import Store
from tests.tables import violations

GROUP = "{rmq}:broker:broker-a"
MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"


@pytest.fixture
async def scripts(settings: Settings) -> AsyncIterator[Scripts]:
    store = Store(settings)
    yield Scripts(store)
    await store.close()


def table(*topics: str, fp: str = "4,4,6,0") -> bytes:
    return orjson.dumps([x for t in topics for x in (t, fp)])


async def register(scripts: Scripts, *topics: str, addr: str = MASTER, broker_id: int = 0, digest: str = "",
                   staging: str = "", version: int = 1, delete_absent: bool = True, acting: str = "") -> Registered:
    return await scripts.register(
        cluster="DefaultCluster", addr=addr, name="broker-a", broker_id=broker_id, ha_addr="10.0.0.1:10912",
        timeout_ms=120_000, data_version=f'{{"counter":{version}}}', keep_filters=True, delete_absent=delete_absent,
        topics=table(*topics), filters=b"[]", channel="", digest=digest, acting=acting, zone="", mappings=b"[]",
        topic_count=len(topics), state_version=0, staging=staging)


def flags(r: redis.Redis) -> dict[str, str]:
    row = r.hgetall(GROUP)
    return {f: row[f] for f in ("staging", "topicsGen", "queuesIntact", "leaving") if f in row}


async def staged(scripts: Scripts, r: redis.Redis) -> str:
    """A staging under way: its first slice written."""
    first = await scripts.register_stage("broker-a", "", table("S1", "S2"))
    assert first.status == "staged"
    return first.detail


# ---------------------------------------------------------------------- staging, topicsGen
async def test_a_first_slice_sets_staging_and_topics_gen_to_a_new_generation(scripts: Scripts, r: redis.Redis) -> None:
    generation = await staged(scripts, r)
    assert flags(r) == {"staging": generation, "topicsGen": generation}
    assert r.hget("{rmq}:stagings", "broker-a") == "2"


async def test_a_later_slice_of_the_same_generation_leaves_both(scripts: Scripts, r: redis.Redis) -> None:
    generation = await staged(scripts, r)
    later = await scripts.register_stage("broker-a", generation, table("S3"))
    assert (later.status, flags(r)) == ("staged", {"staging": generation, "topicsGen": generation})


async def test_a_queue_change_during_a_staging_clears_topics_gen_and_its_next_slice_is_stale(
        scripts: Scripts, r: redis.Redis) -> None:
    generation = await staged(scripts, r)
    await scripts.delete_topic("S1", "")  # drop_queues, not the stager's
    assert flags(r) == {"staging": generation}
    assert (await scripts.register_stage("broker-a", generation, table("S3"))).status == "stale"


async def test_the_masters_registration_publishes_its_staging_clears_staging_and_marks_queues_intact(
        scripts: Scripts, r: redis.Redis) -> None:
    generation = await staged(scripts, r)
    await register(scripts, "S1", "S2", staging=generation)
    # topicsGen stays until the group's QueueData next change: it means nothing without staging
    assert flags(r) == {"topicsGen": generation, "queuesIntact": "1"}
    assert not r.hexists("{rmq}:stagings", "broker-a")


async def test_a_prime_slaves_registration_publishes_a_staging_it_finds(scripts: Scripts, r: redis.Redis) -> None:
    await staged(scripts, r)  # the master's first slice; the master then dies
    # a 5.x slave, the group's smallest id: its table is written as a master's would be
    # (RocketMQ 5's default keeps topics a registration leaves out)
    await register(scripts, "S1", "T1", addr=SLAVE, broker_id=1, acting="0", delete_absent=False)
    # its own table is in place: marked with its address (a master's is '1')
    assert flags(r) == {"queuesIntact": SLAVE} and not r.hexists("{rmq}:stagings", "broker-a")
    for topic in ("S1", "T1", "S2"):  # S2: the master's staged pair, published with the rest
        assert (await scripts.route(topic, False, False)).body is not None, topic
    assert violations(r) == []


async def test_a_first_slice_after_an_abandoned_staging_removes_its_pairs_first(scripts: Scripts, r: redis.Redis) -> None:
    await staged(scripts, r)  # its worker stopped: never published
    cleaning = await scripts.register_stage("broker-a", "", table("N1"))
    assert (cleaning.status, cleaning.detail) == ("cleaning", "0")
    assert "topicsGen" not in flags(r)
    again = await scripts.register_stage("broker-a", "", table("N1"))
    assert flags(r) == {"staging": again.detail, "topicsGen": again.detail}


async def test_a_visible_group_with_queues_is_not_staged(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1")
    assert (await scripts.register_stage("broker-a", "", table("T2"))).status == "published"
    assert flags(r) == {"queuesIntact": "1"}


# ---------------------------------------------------------------------- queuesIntact
async def test_a_masters_registration_marks_queues_intact(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1")
    assert flags(r) == {"queuesIntact": "1"}


async def test_a_slaves_registration_does_not_mark_queues_intact(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", addr=SLAVE, broker_id=1)
    assert flags(r) == {}


async def test_a_prime_slaves_registration_marks_queues_intact_with_its_address(scripts: Scripts, r: redis.Redis) -> None:
    # two topics each: a 5.x broker's one-topic registration from a new id is refused
    await register(scripts, "T1", "T2")
    await register(scripts, "T1", "T2", addr=SLAVE, broker_id=1, acting="0")
    assert flags(r) == {"queuesIntact": "1"}  # not prime: the master's table stays marked
    await scripts.unregister("DefaultCluster", MASTER, "broker-a", 0)
    await register(scripts, "T1", "T2", addr=SLAVE, broker_id=1, acting="0", digest="s1")
    assert flags(r) == {"queuesIntact": SLAVE}
    assert (await scripts.register_unchanged("s1", "")).answer is not None


async def test_a_queue_written_by_another_script_clears_queues_intact(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    assert (await scripts.register_topic("T2", [("broker-a", 8, 8, 6, 0)])).count == 1  # put_queues
    assert flags(r) == {}
    assert (await scripts.register_unchanged("d1", "")).answer is None  # the master must register in full


async def test_a_dropped_queue_clears_queues_intact(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", "T2", digest="d1")
    await scripts.delete_topic("T2", "")  # drop_queues
    assert flags(r) == {}
    assert (await scripts.register_unchanged("d1", "")).answer is None


async def test_the_groups_last_member_leaving_deletes_its_row_and_flags(scripts: Scripts, r: redis.Redis) -> None:
    generation = await staged(scripts, r)
    await register(scripts, "S1", "S2", staging=generation)
    await scripts.unregister("DefaultCluster", MASTER, "broker-a", 0)
    assert not r.exists(GROUP) and not r.hexists("{rmq}:stagings", "broker-a")


# ---------------------------------------------------------------------- leaving
BIG = [f"T{i}" for i in range(300)]  # more QueueData than a removal drops at once (LEAVE_NOW_MAX, 256)


async def left_big(scripts: Scripts) -> None:
    """A group of 300 topics whose one member left."""
    await register(scripts, *BIG)
    await scripts.unregister("DefaultCluster", MASTER, "broker-a", 0)


async def test_a_big_groups_last_member_leaving_hides_its_queues_at_once(scripts: Scripts, r: redis.Redis) -> None:
    await left_big(scripts)
    assert r.hgetall(GROUP) == {"leaving": "1"} and r.smembers("{rmq}:leaving") == {"broker-a"}
    assert r.exists("{rmq}:queue:T0:broker-a")  # still there, collected later
    assert (await scripts.route("T0", False, False)).body is None
    assert violations(r) == []


async def test_collecting_removes_a_leaving_groups_queues_and_its_row(scripts: Scripts, r: redis.Redis) -> None:
    await left_big(scripts)
    assert (await scripts.collect_leaving(100)).count == 1
    assert r.hlen("{rmq}:broker-topics:broker-a") == 200 and violations(r) == []
    assert (await scripts.collect_leaving(1_000)).count == 0
    assert not r.exists(GROUP) and not r.exists("{rmq}:leaving") and not r.exists("{rmq}:queue:T0:broker-a")
    assert r.scard("{rmq}:topics") == 0 and violations(r) == []


async def test_a_master_back_while_leaving_replaces_its_queues_whole(scripts: Scripts, r: redis.Redis) -> None:
    await left_big(scripts)
    await scripts.collect_leaving(100)
    # a split registration's first part: the rest of the table was the broker's before it left
    await register(scripts, "T1", "T299", "New", delete_absent=False, version=2)
    assert flags(r) == {"queuesIntact": "1"} and not r.exists("{rmq}:leaving")
    assert set(r.hkeys("{rmq}:broker-topics:broker-a")) == {"T1", "T299", "New"}
    assert (await scripts.route("T299", False, False)).body is not None
    assert (await scripts.route("T2", False, False)).body is None
    assert violations(r) == []


async def test_a_slave_back_while_leaving_keeps_the_queues_hidden(scripts: Scripts, r: redis.Redis) -> None:
    await left_big(scripts)
    await register(scripts, *BIG, addr=SLAVE, broker_id=1)
    assert flags(r) == {"leaving": "1"} and r.hget(GROUP, "cluster") == "DefaultCluster"
    assert (await scripts.route("T0", False, False)).body is None
    while (await scripts.collect_leaving(1_000)).count:
        pass
    assert flags(r) == {} and r.hget(GROUP, "cluster") == "DefaultCluster"
    assert r.hlen("{rmq}:broker-topics:broker-a") == 0 and violations(r) == []


# ---------------------------------------------------------------------- bodyDigest
def digests(r: redis.Redis, addr: str = MASTER) -> list[str]:
    return (r.hget(f"{{rmq}}:member:{addr}", "bodyDigest") or "").split()


async def test_a_registration_records_its_body_digest_for_its_address(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    assert digests(r) == ["d1"] and r.hget("{rmq}:body-digests", "d1") == MASTER
    assert (await scripts.register_unchanged("d1", "")).answer is not None


async def test_a_registration_that_changes_nothing_visible_keeps_the_addresses_earlier_digests(
        scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    await register(scripts, "T1", digest="d2")  # a split registration's other part, say
    assert digests(r) == ["d1", "d2"] and r.hget("{rmq}:body-digests", "d1") == MASTER


async def test_a_registration_that_changes_the_tables_forgets_the_addresses_earlier_digests(
        scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    await register(scripts, "T1", "T2", digest="d2", version=2)
    assert digests(r) == ["d2"] and not r.hexists("{rmq}:body-digests", "d1")
    assert (await scripts.register_unchanged("d1", "")).answer is None


async def test_the_address_leaving_forgets_its_digests(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    await register(scripts, "T1", addr=SLAVE, broker_id=1, digest="s1")
    await scripts.unregister("DefaultCluster", SLAVE, "broker-a", 1)
    assert not r.exists(f"{{rmq}}:member:{SLAVE}") and not r.hexists("{rmq}:body-digests", "s1")
    assert digests(r) == ["d1"]


async def test_a_master_back_through_an_older_worker_is_unmarked_not_collected(scripts: Scripts, r: redis.Redis) -> None:
    await left_big(scripts)
    # an older release's register.lua: the group's rows as it writes them, the mark left
    r.hset(GROUP, mapping={"cluster": "DefaultCluster", "brokerName": "broker-a"})
    r.hset("{rmq}:addrs:broker-a", "0", MASTER)
    assert (await scripts.collect_leaving(100)).count == 0
    assert flags(r) == {} and r.hlen("{rmq}:broker-topics:broker-a") == 300
    assert (await scripts.route("T0", False, False)).body is not None
