"""Expiry: gone no later than timeout + one scan interval, never before the timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.http.app_keys import NODE, REGISTRY, SCANNER
from service.keys import Keys
from service.removals import EXPIRED, Removal
from service.scanner import Hearing
from tests.builders import identity, registration
from tests.calls import register, route
from tests.redis_server import RedisServer
from tests.tables import violations
from tests.waits import BOUND_S, until

K = Keys()
TIMEOUT_MS = 1_500
SCAN_MS = 200


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


async def ran_out(r: redis.Redis, *addrs: str) -> None:
    """Until the deadlines of `addrs` passed, in Redis time (what the scanner reads)."""
    def passed() -> bool:
        deadlines = [r.zscore(K.expiry, a) for a in addrs]
        return all(d is not None for d in deadlines) and max(deadlines) < redis_ms(r)

    await until(passed, BOUND_S, f"the deadlines of {len(addrs)} brokers passing")


async def test_silent_broker_is_present_before_its_timeout_and_gone_after(make_client, r: redis.Redis) -> None:
    # Held to when each read was sent and answered, not to how long it took on a loaded
    # machine: the deadline is set after `sent` and before `registered`; a read answered
    # before sent + timeout must find the broker, one sent after registered + timeout + a
    # scan interval must not.
    client = await make_client(scan_interval_ms=SCAN_MS)
    sent = time.monotonic()
    await register(client, registration(timeout_ms=TIMEOUT_MS))
    registered = time.monotonic()
    last_found_asked: float | None = None

    async def gone() -> bool:
        nonlocal last_found_asked
        asked = time.monotonic()
        if await route(client, "TopicTest") is None:
            return True
        last_found_asked = asked
        return False

    await until(gone, 30, "the silent broker's route gone after its timeout", poll_s=0.05)
    assert last_found_asked is not None, "gone at the first read after its registration"
    assert TIMEOUT_MS / 1000 <= time.monotonic() - sent  # gone after its timeout, not before
    # timeout + one scan interval, plus slack for the scanner's timer on a loaded machine
    assert last_found_asked - registered <= (TIMEOUT_MS + SCAN_MS) / 1000 + 0.5
    assert (await (await client.get("/v1/cluster")).json()) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert violations(r) == []
    assert r.keys(f"{K.tag}:member:*") == [] and r.zcard(K.expiry) == 0


@pytest.mark.slow
async def test_heartbeats_keep_a_broker_alive_past_its_timeout(make_client) -> None:
    client = await make_client(scan_interval_ms=SCAN_MS)
    reg = registration(timeout_ms=2_000)
    await register(client, reg)
    began = time.monotonic()
    # one heartbeat every 0.3 s (far inside the timeout, also on a loaded machine) for 5 s:
    # well past the 2 s timeout
    while time.monotonic() - began < 5:
        await asyncio.sleep(0.3)
        assert (await client.post("/v1/brokers/heartbeat", json=identity(reg))).status == 200
    assert await route(client, "TopicTest") is not None


async def test_a_live_row_outlives_its_deadline_until_a_scan_removes_it(client: TestClient, r: redis.Redis) -> None:
    # the scanner is quiet here: as RocketMQ's, an expiry is a scan's finding, not the deadline's
    await register(client, registration(timeout_ms=300))
    await ran_out(r, "10.0.0.1:10911")
    assert r.exists(K.live("10.0.0.1:10911")) and r.pttl(K.live("10.0.0.1:10911")) > 30_000
    assert await route(client, "TopicTest") is not None


async def test_a_heartbeat_past_the_deadline_before_any_scan_keeps_the_broker(client: TestClient,
                                                                             r: redis.Redis) -> None:
    reg = registration(timeout_ms=300)
    await register(client, reg)
    await ran_out(r, "10.0.0.1:10911")
    # late, as after a stall: RocketMQ's updateBrokerInfoUpdateTimestamp finds it all the same
    assert (await client.post("/v1/brokers/heartbeat", json=identity(reg))).status == 200
    assert r.zscore(K.expiry, "10.0.0.1:10911") > redis_ms(r)
    assert await client.app[SCANNER].scan_once() == 0
    assert await route(client, "TopicTest") is not None


async def test_scanner_removes_a_broker_whose_live_row_already_expired(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(timeout_ms=200))
    await ran_out(r, "10.0.0.1:10911")
    r.delete(K.live("10.0.0.1:10911"))  # what its key TTL does when no worker scanned for a minute
    assert await client.app[SCANNER].scan_once() == 1
    assert await route(client, "TopicTest") is None
    assert violations(r) == []


async def expire(client: TestClient, addr: str) -> str:
    """An expiry of `addr` through the worker's removal path: how it was settled."""
    [settled] = await client.app[NODE].removals.settle([Removal(addr, "", EXPIRED)])
    return settled.status


async def test_an_expiry_before_the_deadline_changes_nothing(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(timeout_ms=60_000))
    # what a scanner that read a stale deadline would try: the script checks again
    assert await expire(client, "10.0.0.1:10911") == "not due"
    assert await route(client, "TopicTest") is not None


async def test_heartbeat_that_lands_after_the_scan_read_wins(client: TestClient, r: redis.Redis) -> None:
    reg = registration(timeout_ms=300)
    await register(client, reg)
    scanner = client.app[SCANNER]
    due = await until(scanner.due, BOUND_S, "the broker due")
    assert due == ["10.0.0.1:10911"]
    # the broker re-registers between the scanner's read and its removal
    await register(client, reg)
    assert await expire(client, due[0]) == "not due"
    assert await route(client, "TopicTest") is not None


async def test_two_scanners_at_once_remove_each_broker_once(make_client, r: redis.Redis) -> None:
    a, b = await make_client(), await make_client()
    for i in range(20):
        await register(a, registration(addr=f"10.0.1.{i}:10911", name=f"b{i}", timeout_ms=200, topics=[f"T{i}"]))
    await ran_out(r, *(f"10.0.1.{i}:10911" for i in range(20)))
    removed = await asyncio.gather(a.app[SCANNER].scan_once(), b.app[SCANNER].scan_once())
    assert sum(removed) == 20
    assert (await (await a.get("/v1/topics")).json())["topicList"] == []
    assert violations(r) == []


async def test_a_scan_visits_only_the_due_brokers(client: TestClient, r: redis.Redis, monkeypatch) -> None:
    for i in range(50):
        await register(client, registration(addr=f"10.0.2.{i}:10911", name=f"long{i}", timeout_ms=60_000))
    for i in range(3):
        await register(client, registration(addr=f"10.0.3.{i}:10911", name=f"short{i}", timeout_ms=100))
    await ran_out(r, *(f"10.0.3.{i}:10911" for i in range(3)))
    registry = client.app[REGISTRY]
    visited: list[str] = []
    original = registry.remove_batch

    async def counting(budget: int, entries):
        visited.extend(addr for addr, _, _ in entries)
        return await original(budget, entries)

    monkeypatch.setattr(registry, "remove_batch", counting)
    assert await client.app[SCANNER].scan_once() == 3
    assert sorted(visited) == [f"10.0.3.{i}:10911" for i in range(3)]


async def test_scanner_works_through_more_due_brokers_than_one_batch(make_client, r: redis.Redis) -> None:
    client = await make_client(scan_batch=4)
    for i in range(10):
        await register(client, registration(addr=f"10.0.4.{i}:10911", name=f"x{i}", timeout_ms=100))
    await ran_out(r, *(f"10.0.4.{i}:10911" for i in range(10)))
    assert await client.app[SCANNER].scan_once() == 10
    assert r.zcard(K.expiry) == 0


@pytest.mark.slow
async def test_a_scan_right_after_the_workers_loop_stalled_expires_nothing_until_its_grace_is_over(
        client: TestClient, r: redis.Redis) -> None:
    scanner = client.app[SCANNER]
    await register(client, registration(timeout_ms=300))
    await ran_out(r, "10.0.0.1:10911")
    time.sleep(Hearing.STALL_S + 0.3)  # the worker's loop does not run (its process or machine stopped)
    await until(lambda: scanner.hearing.stalls == 1, BOUND_S, "the stall noted")
    assert await scanner.scan_once() == 0
    assert await route(client, "TopicTest") is not None
    await until(scanner.hearing.expiring, Hearing.GRACE_S + BOUND_S, "the grace over")
    assert await scanner.scan_once() == 1


@pytest.mark.slow
async def test_the_first_scans_after_redis_returns_expire_nothing_until_the_grace_is_over(
        aiohttp_client, own_redis: RedisServer) -> None:
    from service.worker import create_app

    client = await aiohttp_client(create_app(Settings(redis_url=own_redis.url, scan_interval_ms=SCAN_MS,
                                                      redis_timeout_ms=300)))
    scanner = client.app[SCANNER]
    await register(client, registration(timeout_ms=TIMEOUT_MS))
    assert own_redis.proc is not None
    os.kill(own_redis.proc.pid, signal.SIGSTOP)  # frozen past the broker's deadline: no heartbeat could land
    try:
        await until(lambda: scanner.stats.failures >= 2, BOUND_S, "scans failing")
        await asyncio.sleep(TIMEOUT_MS / 1000)
    finally:
        os.kill(own_redis.proc.pid, signal.SIGCONT)
    await until(lambda: not scanner.stats.failing, BOUND_S, "a scan reaching Redis again")
    assert await route(client, "TopicTest") is not None  # heard out first
    assert scanner.stats.expired == 0
    await until(lambda: scanner.stats.expired == 1, Hearing.GRACE_S + BOUND_S, "expired after the grace")
