"""Redis refusing writes is an outage, not a bug: 503 naming the cause, counted, reported
by /readyz, logged once per burst; nothing half-applied; service resumes by itself."""

from __future__ import annotations

import logging
from typing import AsyncIterator, Iterator

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.worker import create_app
from tests.builders import identity, registration
from tests.calls import register
from tests.redis_server import RedisServer
from tests.tables import violations
from tests.waits import BOUND_S, until


@pytest.fixture
def small_redis() -> Iterator[RedisServer]:
    server = RedisServer(None, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
async def worker(aiohttp_client, small_redis: RedisServer) -> AsyncIterator[TestClient]:
    yield await aiohttp_client(create_app(Settings(redis_url=small_redis.url, scan_interval_ms=3_600_000)))


def fill(r: redis.Redis) -> None:
    """Junk outside the registry's keys until Redis refuses even a small write (a large one
    is refused while its own bytes would still fit)."""
    n = 0
    for size in (100_000, 10_000, 1_000, 100):
        while n < 100_000:
            n += 1
            try:
                r.set(f"junk:{n}", b"x" * size)
            except redis.exceptions.OutOfMemoryError:
                break
    used = int(r.info("memory")["used_memory"])
    assert used >= int(r.config_get("maxmemory")["maxmemory"])
    # a refused request frees its own buffers again, which may take Redis back under the
    # limit by a few bytes: keep it well over, so every write of the test is refused
    r.config_set("maxmemory", used - 512 * 1024)


async def test_registrations_and_heartbeats_at_maxmemory_answer_503_naming_the_cause(
        worker: TestClient, small_redis: RedisServer) -> None:
    r = redis.Redis.from_url(small_redis.url, decode_responses=True)
    await register(worker, registration(topics=["T1"]))
    fill(r)
    resp = await worker.post("/v1/brokers/register", json=registration(topics=["T1", "T2"], version=2))
    assert resp.status == 503
    body = await resp.json()
    assert body["error"] == "STORE_UNAVAILABLE" and "out of memory" in body["message"]
    heartbeat = await worker.post("/v1/brokers/heartbeat", json=identity(registration()))
    assert heartbeat.status == 503 and "out of memory" in (await heartbeat.json())["message"]
    assert violations(r) == []
    assert not r.exists("{rmq}:queue:T2:broker-a")  # nothing of the refused registration


async def test_a_refusal_is_counted_and_reported_by_readyz(worker: TestClient, small_redis: RedisServer) -> None:
    r = redis.Redis.from_url(small_redis.url)
    fill(r)
    assert (await worker.post("/v1/brokers/register", json=registration())).status == 503
    ready = await worker.get("/readyz")
    assert ready.status == 200 and (await ready.json())["writes"] == "refused: out of memory"
    metrics = await (await worker.get("/metrics")).text()
    assert 'rmq_redis_refusals_total{cause="out of memory"} 1.0' in metrics


async def test_a_burst_of_refusals_is_logged_once(worker: TestClient, small_redis: RedisServer, caplog) -> None:
    fill(redis.Redis.from_url(small_redis.url))
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert (await worker.post("/v1/brokers/register", json=registration())).status == 503
    assert len([rec for rec in caplog.records if "refuses writes" in rec.getMessage()]) == 1


async def test_service_resumes_by_itself_when_memory_is_freed(worker: TestClient, small_redis: RedisServer) -> None:
    r = redis.Redis.from_url(small_redis.url, decode_responses=True)
    fill(r)
    assert (await worker.post("/v1/brokers/register", json=registration())).status == 503
    r.delete(*r.keys("junk:*"))
    await register(worker, registration())
    assert violations(r) == []


async def test_a_read_only_replica_refuses_with_its_cause_and_resumes_when_promoted(
        worker: TestClient, small_redis: RedisServer) -> None:
    r = redis.Redis.from_url(small_redis.url, decode_responses=True)
    other = RedisServer(None)
    other.start()
    try:
        r.replicaof("127.0.0.1", other.port)
        resp = await worker.post("/v1/brokers/register", json=registration())
        assert resp.status == 503 and "read-only replica" in (await resp.json())["message"]
        r.replicaof("NO", "ONE")
        await register(worker, registration())
    finally:
        other.cleanup()


async def test_a_failing_snapshot_refuses_writes_with_its_cause(aiohttp_client) -> None:
    server = RedisServer(None, "--enable-protected-configs", "yes")
    server.start()
    try:
        worker = await aiohttp_client(create_app(Settings(redis_url=server.url, scan_interval_ms=3_600_000)))
        r = redis.Redis.from_url(server.url, decode_responses=True)
        await register(worker, registration())
        # an RDB that cannot be written: Redis then refuses writes (stop-writes-on-bgsave-error)
        r.config_set("save", "3600 1")
        r.config_set("stop-writes-on-bgsave-error", "yes")
        r.config_set("dir", "/proc")
        r.bgsave()
        await until(lambda: r.info("persistence")["rdb_last_bgsave_status"] == "err", BOUND_S,
                    "the snapshot failing", poll_s=0.05)
        resp = await worker.post("/v1/brokers/register", json=registration(version=2, topics=["T9"]))
        assert resp.status == 503 and "snapshot failing" in (await resp.json())["message"]
        assert violations(r) == []
    finally:
        server.cleanup()
