"""A group's state (docs/design.md, "A group's state"): each transition of the flags on its
row (`staging`, `topicsGen`, `queuesIntact`) and of its members' `bodyDigest`, one test
each, by the scripts that make it, on the test redis-server."""

from __future__ import annotations

from typing import AsyncIterator

import orjson
import pytest
import redis

from service.config import Settings
from service.scripts import Registered, Scripts
from service.store import Store

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
                   staging: str = "", version: int = 1) -> Registered:
    return await scripts.register(
        cluster="DefaultCluster", addr=addr, name="broker-a", broker_id=broker_id, ha_addr="10.0.0.1:10912",
        timeout_ms=120_000, data_version=f'{{"counter":{version}}}', keep_filters=True, delete_absent=True,
        topics=table(*topics), filters=b"[]", channel="", digest=digest, acting="", zone="", mappings=b"[]",
        topic_count=len(topics), state_version=0, staging=staging)


def flags(r: redis.Redis) -> dict[str, str]:
    row = r.hgetall(GROUP)
    return {f: row[f] for f in ("staging", "topicsGen", "queuesIntact") if f in row}


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


async def test_a_queue_written_by_another_script_clears_queues_intact(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    assert (await scripts.register_topic("T2", [("broker-a", 8, 8, 6, 0)])).count == 1  # put_queues
    assert flags(r) == {}
    assert await scripts.register_unchanged("d1", "") is None  # the master must register in full


async def test_a_dropped_queue_clears_queues_intact(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", "T2", digest="d1")
    await scripts.delete_topic("T2", "")  # drop_queues
    assert flags(r) == {}
    assert await scripts.register_unchanged("d1", "") is None


async def test_the_groups_last_member_leaving_deletes_its_row_and_flags(scripts: Scripts, r: redis.Redis) -> None:
    generation = await staged(scripts, r)
    await register(scripts, "S1", "S2", staging=generation)
    await scripts.unregister("DefaultCluster", MASTER, "broker-a", 0)
    assert not r.exists(GROUP) and not r.hexists("{rmq}:stagings", "broker-a")


# ---------------------------------------------------------------------- bodyDigest
def digests(r: redis.Redis, addr: str = MASTER) -> list[str]:
    return (r.hget(f"{{rmq}}:member:{addr}", "bodyDigest") or "").split()


async def test_a_registration_records_its_body_digest_for_its_address(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    assert digests(r) == ["d1"] and r.hget("{rmq}:body-digests", "d1") == MASTER
    assert (await scripts.register_unchanged("d1", "")) is not None


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
    assert await scripts.register_unchanged("d1", "") is None


async def test_the_address_leaving_forgets_its_digests(scripts: Scripts, r: redis.Redis) -> None:
    await register(scripts, "T1", digest="d1")
    await register(scripts, "T1", addr=SLAVE, broker_id=1, digest="s1")
    await scripts.unregister("DefaultCluster", SLAVE, "broker-a", 1)
    assert not r.exists(f"{{rmq}}:member:{SLAVE}") and not r.hexists("{rmq}:body-digests", "s1")
    assert digests(r) == ["d1"]
