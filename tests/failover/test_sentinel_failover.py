"""Redis fails over under load: a primary, two replicas and three Sentinels (real
processes), three workers reaching Redis through the Sentinels, brokers registering and
heartbeating, an admin writing KV, producers reading routes with ?stale. The primary is
SIGKILLed mid-run and a Sentinel promotes a replica.

With RMQ_REDIS_MIN_REPLICAS=1 nothing acknowledged may be lost; with 0 the losses are
reported (run with -s to see the figures), not asserted."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.worker import create_app
from tests.builders import identity, registration
from tests.failover.load import assert_nothing_acknowledged_lost, outcome, run_load, workers_settings
from tests.failover.sentinels import ReplicatedRedis
from tests.tables import violations
from tests.waits import until

# writes resume once the workers reach the promoted replica through the Sentinels: a bound
# from the promotion (the Sentinels' own failover time grows with the machine's load)
RESUME_WITHIN_S = 10.0
# the silent broker's timeout: longer than any failover, so that the broker is seen still
# registered on the promoted primary before its deadline (failovers took 1.6-1.8 s on an
# idle machine, 5.5 s at load average 6-14; failed_over() gives up after 20 s)
SILENT_TIMEOUT_MS = 25_000
# a Sentinel turns a returning old primary into a replica only after it has reported itself a
# primary for 8 s (4 x SENTINEL_PUBLISH_PERIOD) as seen by INFO, which a Sentinel asks a
# replica every 10 s (SENTINEL_INFO_PERIOD): up to 10 + 8 + 10 s before REPLICAOF is even
# sent, then a full sync. 30 s was exceeded once in CI (a loaded run); the bound is Redis's
# own periods with room for a loaded machine, not a guess at how fast this one is
REJOIN_WITHIN_S = 60.0


@pytest.fixture
def replicated() -> Iterator[ReplicatedRedis]:
    rr = ReplicatedRedis(replicas=2)
    yield rr
    rr.stop()


async def workers(aiohttp_client: Any, rr: ReplicatedRedis, min_replicas: int) -> list[TestClient]:
    settings = Settings(redis_url=rr.url, **workers_settings(redis_min_replicas=min_replicas))
    return [await aiohttp_client(create_app(settings)) for _ in range(3)]


async def test_a_failover_with_one_replica_required_loses_no_acknowledged_write(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=1)
    rec, killed_at, new_port = await run_load(clients, replicated)
    r = redis.Redis(port=new_port, decode_responses=True)
    out = outcome(rec, killed_at, r)
    failovers = int(redis.Redis(port=replicated.sentinels[0].port).sentinel_master("rmq")["config-epoch"])
    print(f"\nSentinel, min replicas 1: {out}; {failovers} failovers")
    assert_nothing_acknowledged_lost(rec, out, r, RESUME_WITHIN_S)


async def test_the_old_primary_back_as_a_replica_does_not_bring_back_removed_data(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=1)
    await clients[0].post("/v1/brokers/register", json=registration(name="gone", addr="10.9.9.9:10911", topics=["G"]))
    old_port = replicated.current_primary()
    old = replicated.node_on(old_port)
    old.stop()
    new_port = await asyncio.to_thread(replicated.failed_over, old_port)
    replicated.wait_replicated(new_port, 1)
    async def unregistered() -> bool:
        gone = identity(registration(name="gone", addr="10.9.9.9:10911"))
        return (await clients[1].post("/v1/brokers/unregister", json=gone)).status == 200

    await until(unregistered, 10, "the unregister taken by the new primary", poll_s=0.2)
    old.start()  # its AOF still holds "gone"
    back = redis.Redis(port=old.port, decode_responses=True)
    await until(lambda: back.info("replication")["role"] == "slave"
                and back.info("replication").get("master_link_status") == "up",
                REJOIN_WITHIN_S, "the old primary back as a replica", poll_s=0.2)
    await asyncio.sleep(0.5)
    for node in (back, redis.Redis(port=new_port, decode_responses=True)):
        assert not node.exists("{rmq}:broker:gone") and not node.exists("{rmq}:queue:G:gone")
        assert violations(node) == []


async def test_a_failover_without_replicas_required_reports_what_was_lost(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=0)
    rec, killed_at, new_port = await run_load(clients, replicated)
    r = redis.Redis(port=new_port, decode_responses=True)
    out = outcome(rec, killed_at, r)
    window = [round(rec.kv_at[k] - killed_at, 2) for k in out.lost_kv]
    failovers = int(redis.Redis(port=replicated.sentinels[0].port).sentinel_master("rmq")["config-epoch"])
    print(f"\nSentinel, min replicas 0: {out} (KV lost acknowledged {min(window, default=0)}..{max(window, default=0)} s "
          f"from the kill); {failovers} failovers")
    assert rec.kv and out.resumed_s is not None
    assert violations(r) == []


async def test_expiry_goes_on_across_a_failover_neither_early_nor_forgotten(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=1)
    silent = registration(name="silent", addr="10.8.0.1:10911", topics=["S"], timeout_ms=SILENT_TIMEOUT_MS)
    kept = registration(name="kept", addr="10.8.0.2:10911", topics=["K"], timeout_ms=SILENT_TIMEOUT_MS)
    # the registry sets the deadline after the request was sent: no earlier than this
    deadline = time.monotonic() + SILENT_TIMEOUT_MS / 1000
    for body in (silent, kept):
        assert (await clients[0].post("/v1/brokers/register", json=body)).status == 200
    old = replicated.current_primary()
    replicated.node_on(old).stop()
    new_port = await asyncio.to_thread(replicated.failed_over, old)
    r = redis.Redis(port=new_port, decode_responses=True)
    registered, seen_at = r.exists("{rmq}:broker:silent"), time.monotonic()
    assert seen_at < deadline, "the failover outlasted the broker's timeout: nothing to say about an early expiry"
    assert registered, "a broker expired before its deadline"
    # "kept" heartbeats through the failover; "silent" never does again. Right after a
    # failover the remaining replica resyncs and acknowledges nothing for a few seconds, so
    # with RMQ_REDIS_MIN_REPLICAS=1 every write (a removal too) waits for it: a bound of
    # 12 s past the deadline, not one scan interval.
    async def expired() -> bool:
        registered, seen_at = r.exists("{rmq}:broker:silent"), time.monotonic()
        assert registered or seen_at >= deadline, "a broker expired before its deadline"
        if registered:
            await clients[1].post("/v1/brokers/heartbeat", json=identity(kept))
        return not registered

    await until(expired, deadline + 12.0 - time.monotonic(), "the silent broker expiring after its deadline "
                "(an expired broker forgotten across the failover)", poll_s=0.3)
    assert r.hget("{rmq}:addrs:kept", "0") == "10.8.0.2:10911"
    assert violations(r) == []
