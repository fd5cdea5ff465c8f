"""Redis fails over under load: a primary, two replicas and three Sentinels (real
processes), three workers reaching Redis through the Sentinels, brokers registering and
heartbeating, an admin writing KV, producers reading routes with ?stale. The primary is
SIGKILLed mid-run and a Sentinel promotes a replica.

With RMQ_REDIS_MIN_REPLICAS=1 nothing acknowledged may be lost; with 0 the losses are
reported (run with -s to see the figures), not asserted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.worker import create_app
from tests.builders import identity, registration
from tests.failover.sentinels import ReplicatedRedis
from tests.tables import violations

BROKERS = 6
TIMEOUT_MS = 60_000  # no broker may expire in this test: a removal would be an early expiry
KILL_AT_S = 2.5
RUN_S = 11.0


@dataclass
class Record:
    kv: dict[str, str] = field(default_factory=dict)  # acknowledged KV writes
    kv_at: dict[str, float] = field(default_factory=dict)  # when each was acknowledged
    pairs: set[tuple[str, str]] = field(default_factory=set)  # acknowledged (brokerName, topic)
    writes: list[tuple[float, int]] = field(default_factory=list)  # (time, status) of every write
    reads: list[tuple[float, int, int | None]] = field(default_factory=list)  # (time, status, age ms)
    refused: int = 0

    def write(self, status: int) -> None:
        self.writes.append((time.monotonic(), status))


@pytest.fixture
def replicated() -> Iterator[ReplicatedRedis]:
    rr = ReplicatedRedis(replicas=2)
    yield rr
    rr.stop()


async def workers(aiohttp_client: Any, rr: ReplicatedRedis, min_replicas: int) -> list[TestClient]:
    settings = Settings(redis_url=rr.url, redis_min_replicas=min_replicas, scan_interval_ms=500,
                        broker_timeout_ms=TIMEOUT_MS, redis_timeout_ms=500, version_poll_ms=200)
    return [await aiohttp_client(create_app(settings)) for _ in range(3)]


async def broker(i: int, clients: list[TestClient], rec: Record, stop: asyncio.Event) -> None:
    name, n = f"broker-{i}", 0
    topics = [f"T{i}"]
    while not stop.is_set():
        n += 1
        client = clients[n % len(clients)]
        body = registration(addr=f"10.0.0.{i + 1}:10911", name=name, topics=topics + [f"T{i}_{n}"], version=n,
                            timeout_ms=TIMEOUT_MS)
        try:
            resp = await client.post("/v1/brokers/register", json=body)
            rec.write(resp.status)
            if resp.status == 200:
                rec.pairs |= {(name, t) for t in topics + [f"T{i}_{n}"]}
                topics.append(f"T{i}_{n}")
            heartbeat = await client.post("/v1/brokers/heartbeat", json=identity(body))
            rec.write(heartbeat.status)
        except (OSError, asyncio.TimeoutError):
            rec.write(0)
        await asyncio.sleep(0.25)


async def admin(clients: list[TestClient], rec: Record, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        try:
            resp = await clients[n % len(clients)].put(f"/v1/kv/FAILOVER/k{n}", json={"value": f"v{n}"})
            rec.write(resp.status)
            if resp.status == 200:
                rec.kv[f"k{n}"] = f"v{n}"
                rec.kv_at[f"k{n}"] = time.monotonic()
        except (OSError, asyncio.TimeoutError):
            rec.write(0)
        await asyncio.sleep(0.04)


async def producer(clients: list[TestClient], rec: Record, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        resp = await clients[n % len(clients)].get("/v1/routes/T0?stale")
        age = resp.headers.get("X-Registry-Age-Ms")
        rec.reads.append((time.monotonic(), resp.status, int(age) if age else None))
        await resp.read()
        await asyncio.sleep(0.05)


async def run_load(clients: list[TestClient], rr: ReplicatedRedis) -> tuple[Record, float, int]:
    rec, stop = Record(), asyncio.Event()
    for c in clients:  # every worker holds T0's route before the load starts
        await c.post("/v1/brokers/register", json=registration(addr="10.0.0.1:10911", name="broker-0", topics=["T0"],
                                                               timeout_ms=TIMEOUT_MS))
        assert (await c.get("/v1/routes/T0")).status == 200
    tasks = [asyncio.create_task(broker(i, clients, rec, stop)) for i in range(BROKERS)]
    tasks += [asyncio.create_task(admin(clients, rec, stop)), asyncio.create_task(producer(clients, rec, stop))]
    await asyncio.sleep(KILL_AT_S)
    old = rr.current_primary()
    rr.node_on(old).stop()  # SIGKILL
    killed_at = time.monotonic()
    new = await asyncio.to_thread(rr.failed_over, old)
    await asyncio.sleep(RUN_S - KILL_AT_S - (time.monotonic() - killed_at))
    stop.set()
    await asyncio.gather(*tasks)
    # on two shared cores a Sentinel may fail over once more: the tables are the last primary's
    return rec, killed_at, rr.current_primary()


def first_success_after(rec: Record, t: float) -> float | None:
    return next((w for w, status in rec.writes if w >= t and status == 200), None)


def lost(rec: Record, r: redis.Redis) -> tuple[list[str], list[tuple[str, str]]]:
    kv = r.hgetall("{rmq}:kv:FAILOVER")
    lost_kv = [k for k, v in rec.kv.items() if kv.get(k) != v]
    lost_pairs = [(n, t) for n, t in rec.pairs if not r.exists(f"{{rmq}}:queue:{t}:{n}")]
    return lost_kv, lost_pairs


async def test_a_failover_with_one_replica_required_loses_no_acknowledged_write(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=1)
    rec, killed_at, new_port = await run_load(clients, replicated)
    r = redis.Redis(port=new_port, decode_responses=True)
    lost_kv, lost_pairs = lost(rec, r)
    resumed = first_success_after(rec, killed_at)
    stale = [age for t, status, age in rec.reads if t >= killed_at and age is not None]
    failovers = int(redis.Redis(port=replicated.sentinels[0].port).sentinel_master("rmq")["config-epoch"])
    print(f"\nmin replicas 1: {len(rec.kv)} KV writes and {len(rec.pairs)} (broker, topic) pairs acknowledged, "
          f"lost {len(lost_kv)} and {len(lost_pairs)}; {failovers} failovers; writes resumed {resumed - killed_at if resumed else None:.2f} s "
          f"after the kill; {len(stale)} stale reads, oldest {max(stale, default=0)} ms")
    assert rec.kv and rec.pairs
    assert lost_kv == [] and lost_pairs == []
    assert resumed is not None, "writes never resumed after the failover"
    # producers were answered throughout, with the age stated whenever it was past the bound
    assert all(status == 200 for _, status, _ in rec.reads), [x for x in rec.reads if x[1] != 200][:5]
    assert violations(r) == []
    # no broker expired: each still has its address (its timeout is 60 s)
    assert all(r.hget(f"{{rmq}}:addrs:broker-{i}", "0") == f"10.0.0.{i + 1}:10911" for i in range(BROKERS))


async def test_the_old_primary_back_as_a_replica_does_not_bring_back_removed_data(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=1)
    await clients[0].post("/v1/brokers/register", json=registration(name="gone", addr="10.9.9.9:10911", topics=["G"]))
    old_port = replicated.current_primary()
    old = replicated.node_on(old_port)
    old.stop()
    new_port = await asyncio.to_thread(replicated.failed_over, old_port)
    replicated.wait_replicated(new_port, 1)
    deadline = time.monotonic() + 10
    while (resp := await clients[1].post("/v1/brokers/unregister", json=identity(
            registration(name="gone", addr="10.9.9.9:10911")))).status != 200:
        assert time.monotonic() < deadline, await resp.text()
        await asyncio.sleep(0.2)
    old.start()  # its AOF still holds "gone"
    back = redis.Redis(port=old.port, decode_responses=True)
    deadline = time.monotonic() + 30
    while back.info("replication")["role"] != "slave" or back.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the old primary never came back as a replica"
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)
    for node in (back, redis.Redis(port=new_port, decode_responses=True)):
        assert not node.exists("{rmq}:broker:gone") and not node.exists("{rmq}:queue:G:gone")
        assert violations(node) == []


async def test_a_failover_without_replicas_required_reports_what_was_lost(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=0)
    rec, killed_at, new_port = await run_load(clients, replicated)
    r = redis.Redis(port=new_port, decode_responses=True)
    lost_kv, lost_pairs = lost(rec, r)
    resumed = first_success_after(rec, killed_at)
    window = [round(rec.kv_at[k] - killed_at, 2) for k in lost_kv]
    failovers = int(redis.Redis(port=replicated.sentinels[0].port).sentinel_master("rmq")["config-epoch"])
    print(f"\nmin replicas 0: {len(rec.kv)} KV writes and {len(rec.pairs)} pairs acknowledged, lost "
          f"{len(lost_kv)} and {len(lost_pairs)} (KV acknowledged {min(window, default=0)}..{max(window, default=0)} s "
          f"from the kill); {failovers} failovers; writes resumed {resumed - killed_at if resumed else None:.2f} s after the kill")
    assert rec.kv and resumed is not None
    assert violations(r) == []


async def test_expiry_goes_on_across_a_failover_neither_early_nor_forgotten(aiohttp_client, replicated) -> None:
    clients = await workers(aiohttp_client, replicated, min_replicas=1)
    silent = registration(name="silent", addr="10.8.0.1:10911", topics=["S"], timeout_ms=6000)
    kept = registration(name="kept", addr="10.8.0.2:10911", topics=["K"], timeout_ms=6000)
    for body in (silent, kept):
        assert (await clients[0].post("/v1/brokers/register", json=body)).status == 200
    registered_at = time.monotonic()
    old = replicated.current_primary()
    replicated.node_on(old).stop()
    new_port = await asyncio.to_thread(replicated.failed_over, old)
    r = redis.Redis(port=new_port, decode_responses=True)
    assert time.monotonic() - registered_at < 5.0, "the failover took too long for this test to say anything"
    assert r.exists("{rmq}:broker:silent"), "a broker expired before its deadline"
    # "kept" heartbeats through the failover; "silent" never does again. Right after a
    # failover the remaining replica resyncs and acknowledges nothing for a few seconds, so
    # with RMQ_REDIS_MIN_REPLICAS=1 every write (a removal too) waits for it: a bound of
    # 12 s past the deadline, not one scan interval.
    while time.monotonic() - registered_at < 6.0 + 12.0 and (
            time.monotonic() - registered_at < 6.0 or r.exists("{rmq}:broker:silent")):
        await clients[1].post("/v1/brokers/heartbeat", json=identity(kept))
        await asyncio.sleep(0.3)
    assert not r.exists("{rmq}:broker:silent"), "an expired broker was forgotten across the failover"
    assert r.hget("{rmq}:addrs:kept", "0") == "10.8.0.2:10911"
    assert violations(r) == []
