"""A cached worker agrees with an uncached read within the bound, whatever changed and
however the change records reached it."""

from __future__ import annotations

import random

import pytest
import redis
from aiohttp.test_utils import TestClient

from service import changes
from service.http.app_keys import CACHE, NODE
from service.keys import ORDER_TOPIC_CONFIG, Keys
from service.removals import EXPIRED, Removal
from service.store import load_sources
from tests.builders import registration, topic_config
from tests import waits
from tests.lua_source import constant

K = Keys()
BOUND_S = 1.0
POOL = [f"T{i}" for i in range(8)]
GROUPS = ["g0", "g1", "g2"]


async def body(client: TestClient, topic: str) -> tuple[int, bytes]:
    resp = await client.get(f"/v1/routes/{topic}")
    return resp.status, await resp.read()

CHANGELOG_RETAIN = constant("CHANGELOG_RETAIN", "_changes")


async def agree_within_bound(cached: TestClient, oracle: TestClient, after: str = "the change") -> None:
    """Until every cached answer is the uncached one, in a round of reads begun past the
    bound at the latest (a round begun before may take past it on a loaded machine, and its
    early reads may be stale); fails naming the topics that still differed."""
    differing: list[str] = []

    async def agree() -> bool:
        differing[:] = [t for t in POOL if await body(cached, t) != await body(oracle, t)]
        return not differing

    await waits.until(agree, BOUND_S, lambda: f"cached answers as uncached ones after {after} (differing: {differing})")


class RandomOperations:
    """Random registrations, removals and admin changes, applied through one worker."""

    def __init__(self, client: TestClient, r: redis.Redis, seed: int) -> None:
        self.client, self.r, self.rng = client, r, random.Random(seed)
        self.counter = 0

    def addr(self, group: str, broker_id: int) -> str:
        return f"10.0.{GROUPS.index(group)}.{broker_id + 1}:10911"

    async def step(self) -> str:
        rng, c = self.rng, self.client
        group = rng.choice(GROUPS)
        kind = rng.choice(["register", "register", "slave", "move", "unregister", "expire", "wipe", "add",
                           "delete", "order", "unorder", "filters", "kv"])
        self.counter += 1
        if kind in ("register", "move", "filters"):
            topics = {t: topic_config(t, write=rng.choice([4, 8])) for t in rng.sample(POOL, rng.randint(1, 4))}
            addr = self.addr(group, 0) if kind != "move" else f"10.9.{GROUPS.index(group)}.{rng.randint(1, 3)}:10911"
            filters = [f"10.8.0.{rng.randint(1, 3)}:1"] if kind == "filters" else None
            resp = await c.post("/v1/brokers/register", json=registration(
                addr=addr, name=group, topics=topics, version=self.counter, filters=filters))
        elif kind == "slave":
            resp = await c.post("/v1/brokers/register", json=registration(
                addr=self.addr(group, 1), name=group, broker_id=1, topics=[]))
        elif kind == "unregister":
            resp = await c.post("/v1/brokers/unregister", json={
                "clusterName": "DefaultCluster", "brokerAddr": self.addr(group, rng.randint(0, 1)),
                "brokerName": group, "brokerId": 0})
        elif kind == "expire":
            addr = self.addr(group, rng.randint(0, 1))
            if self.r.zscore(K.expiry, addr) is not None:
                self.r.zadd(K.expiry, {addr: 0})
                await c.app[NODE].removals.settle([Removal(addr, "", EXPIRED)])
            return kind
        elif kind in ("wipe", "add"):
            resp = await c.post(f"/v1/brokers/{group}/{kind}-write-perm")
        elif kind == "delete":
            resp = await c.delete(f"/v1/topics/{rng.choice(POOL)}")
        elif kind == "order":
            resp = await c.put(f"/v1/kv/{ORDER_TOPIC_CONFIG}/{rng.choice(POOL)}", json={"value": f"{group}:{self.counter}"})
        elif kind == "unorder":
            resp = await c.delete(f"/v1/kv/{ORDER_TOPIC_CONFIG}/{rng.choice(POOL)}")
        else:
            resp = await c.put(f"/v1/kv/OTHER/{rng.choice(POOL)}", json={"value": str(self.counter)})
        assert resp.status == 200, await resp.text()
        return kind


@pytest.mark.slow
async def test_random_changes_through_one_worker_are_read_alike_through_another_within_the_bound(make_client, r) -> None:
    writer = await make_client(order_message_enable=True)
    reader = await make_client(order_message_enable=True)
    oracle = await make_client(order_message_enable=True, max_staleness_ms=0)
    ops = RandomOperations(writer, r, seed=20261122)
    for _ in range(120):
        kind = await ops.step()
        await agree_within_bound(reader, oracle, f"{kind} (step {ops.counter})")
    stats = reader.app[CACHE].stats
    # the reader answered from its cache most of the time, and never needed to drop it whole
    assert stats.hits > stats.misses and stats.flushes <= 1


@pytest.mark.slow
async def test_records_lost_on_the_channel_are_replayed_from_the_changelog(make_client, r: redis.Redis) -> None:
    writer = await make_client(order_message_enable=True)
    reader = await make_client(order_message_enable=True)
    oracle = await make_client(order_message_enable=True, max_staleness_ms=0)
    cache = reader.app[CACHE]
    cache._message = lambda data: None  # every message lost
    assert r.execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
    ops = RandomOperations(writer, r, seed=7)
    for _ in range(30):
        kind = await ops.step()
        await agree_within_bound(reader, oracle, kind)
    assert cache.stats.hits > 0
    assert cache.stats.flushes <= 1  # the first poll may find the worker's start unconfirmed


async def test_a_gap_older_than_the_changelog_flushes_the_cache_and_stays_fresh(make_client, r: redis.Redis) -> None:
    writer, reader, oracle = await make_client(), await make_client(), await make_client(max_staleness_ms=0)
    cache = reader.app[CACHE]
    cache._message = lambda data: None
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics=POOL[:3]))
    await agree_within_bound(reader, oracle)
    flushes = cache.stats.flushes
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics={"T0": topic_config("T0", write=8)}, version=2))
    # trimmed to the newest record, as retention would: every poll from here on, however many a
    # loaded machine fits in, finds the reader's last record gone once and flushes once
    r.ltrim(K.changelog, 0, 0)
    await agree_within_bound(reader, oracle)
    assert cache.stats.flushes == flushes + 1


async def test_a_rewritten_history_is_noticed_and_flushes_the_cache(make_client, r: redis.Redis) -> None:
    """A Redis restored from an older state (or a promoted replica that lacked the last
    writes) counts the same sequence numbers again for other changes."""
    writer, reader, oracle = await make_client(), await make_client(), await make_client(max_staleness_ms=0)
    reader.app[CACHE]._message = lambda data: None
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics=["T0"]))
    saved = {k: (r.dump(k), r.pttl(k)) for k in r.keys(K.tag + ":*")}
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics={"T0": topic_config("T0", write=8)}, version=2))
    await agree_within_bound(reader, oracle)
    await reader.app[CACHE].poll_once()  # the reader has followed the history up to 2 ...
    await body(reader, "T0")  # ... and holds the route as of then
    assert reader.app[CACHE].seq == 2 and reader.app[CACHE].lookup_route("http", "T0") is not None
    for key in r.keys(K.tag + ":*"):
        r.delete(key)
    for key, (dump, ttl) in saved.items():
        r.restore(key, max(ttl, 0), dump, replace=True)
    # the same sequence number again, for another change
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics={"T0": topic_config("T0", write=2)}, version=3))
    await agree_within_bound(reader, oracle)


async def test_a_record_arriving_while_a_poll_is_under_way_does_not_flush_the_cache(make_client, r: redis.Redis) -> None:
    writer, reader = await make_client(), await make_client()
    cache = reader.app[CACHE]
    cache._message = lambda data: None  # records reach the reader only as this test says
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics=["T0"]))
    await cache.poll_once()
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics={"T0": topic_config("T0", write=8)}, version=2))
    store_run = cache.store.run

    async def run_and_deliver(name: str, args: list) -> object:
        result = await store_run(name, args)
        if name == "changes_since":  # the channel brings record 2 while the poll's answer is on its way
            cache.apply(changes.parse(r.lindex(K.changelog, 0)))
        return result

    cache.store.run = run_and_deliver  # type: ignore[method-assign]
    flushes = cache.stats.flushes
    await cache.poll_once()
    assert cache.seq == 2 and cache.stats.flushes == flushes


@pytest.mark.parametrize("gap", [CHANGELOG_RETAIN - 1, CHANGELOG_RETAIN, CHANGELOG_RETAIN + 1])
async def test_a_gap_of_records_around_the_changelogs_retention_is_replayed_or_flushed(
        make_client, r: redis.Redis, gap: int) -> None:
    """A reader that lost `gap` records on the channel catches up from the changelog (kept
    CHANGELOG_RETAIN long, lua/_changes.lua) or, past it, flushes: either way it agrees."""
    writer, reader, oracle = await make_client(), await make_client(), await make_client(max_staleness_ms=0)
    cache = reader.app[CACHE]
    cache._message = lambda data: None  # every message lost
    await writer.post("/v1/brokers/register", json=registration(name="g0", topics=POOL[:3]))
    await agree_within_bound(reader, oracle)
    await waits.until(lambda: cache.seq == int(r.get(K.version)), waits.BOUND_S, "the reader's poll applied the registration")
    flushes = cache.stats.flushes
    await writer.post("/v1/brokers/register",
                      json=registration(name="g0", topics={"T0": topic_config("T0", write=8)}, version=2))
    # the rest of the gap in one blocking burst, so the reader's loop polls only after it
    # (its poll may have applied the registration meanwhile: the gap counts from its record)
    put = r.register_script(load_sources()["kv_put"])
    for i in range(gap - (int(r.get(K.version)) - cache.seq)):
        put(keys=[K.version], args=["ns", f"k{i}", "v"])
    await cache.poll_once()  # the reader's next poll, whenever it comes: the gap in one step
    assert cache.stats.flushes == flushes + (gap >= CHANGELOG_RETAIN)
    assert cache.seq == int(r.get(K.version))
    await agree_within_bound(reader, oracle)
