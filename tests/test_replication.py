"""RMQ_REDIS_MIN_REPLICAS: a change is acknowledged only once that many replicas have it,
and sending a change again (what a caller does after a 503) is always safe."""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, Iterator

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.remoting import codes
from service.worker import REMOTING, create_app, install_remoting
from tests.builders import identity, registration
from tests.calls import register
from tests.redis_server import RedisServer
from tests.remoting.client import RemotingClient
from tests.remoting.frames import register as register_frame
from tests.tables import snapshot
from tests.waits import until_sync

Change = Callable[[TestClient], Awaitable[Any]]

CHANGES: dict[str, Change] = {
    "register a master": lambda c: c.post("/v1/brokers/register", json=registration(topics=["T1", "T2"], version=2)),
    "register a slave": lambda c: c.post("/v1/brokers/register", json=registration(addr="10.0.0.2:10911", broker_id=1)),
    "heartbeat": lambda c: c.post("/v1/brokers/heartbeat", json=identity(registration())),
    "unregister": lambda c: c.post("/v1/brokers/unregister", json=identity(registration())),
    "wipe write permission": lambda c: c.post("/v1/brokers/broker-a/wipe-write-perm"),
    "add write permission": lambda c: c.post("/v1/brokers/broker-a/add-write-perm"),
    "delete a topic": lambda c: c.delete("/v1/topics/TopicTest"),
    "put a KV entry": lambda c: c.put("/v1/kv/ORDER_TOPIC_CONFIG/TopicTest", json={"value": "broker-a:4"}),
    "delete a KV entry": lambda c: c.delete("/v1/kv/NS/k"),
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_a_change_sent_twice_leaves_the_tables_as_sent_once(client: TestClient, r: redis.Redis, change: str) -> None:
    await register(client, registration())
    await client.put("/v1/kv/NS/k", json={"value": "v"})
    assert (await CHANGES[change](client)).status == 200
    once = snapshot(r)
    assert (await CHANGES[change](client)).status == 200
    assert snapshot(r) == once


@pytest.fixture
def primary_and_replica() -> Iterator[tuple[RedisServer, RedisServer]]:
    primary = RedisServer(None)
    primary.start()
    replica = RedisServer(None, "--replicaof", "127.0.0.1", str(primary.port))
    replica.start()
    warm = redis.Redis(port=primary.port)
    until_sync(lambda: warm.info("replication").get("slave0", {}).get("state") == "online", 10,
               "the replica caught up")
    # a replica just online acknowledges its first writes only after a second or two
    until_sync(lambda: warm.set("warm-up", 1) and warm.execute_command("WAIT", 1, 100) >= 1, 10,
               "the replica acknowledging a write", poll_s=0)
    warm.delete("warm-up")
    yield primary, replica
    replica.cleanup()
    primary.cleanup()


async def test_with_min_replicas_an_acknowledged_change_is_on_the_replica(aiohttp_client, primary_and_replica) -> None:
    primary, replica = primary_and_replica
    worker = await aiohttp_client(create_app(Settings(redis_url=primary.url, redis_min_replicas=1,
                                                      scan_interval_ms=3_600_000)))
    on_replica = redis.Redis(port=replica.port)
    for i in range(20):
        await register(worker, registration(topics=[f"T{i}"], version=i + 1))
        assert on_replica.exists(f"{{rmq}}:queue:T{i}:broker-a")  # read right after the answer


async def test_with_min_replicas_and_no_replica_a_change_is_a_503_that_says_a_retry_is_safe(
        aiohttp_client, redis_url: str, r: redis.Redis) -> None:
    worker = await aiohttp_client(create_app(Settings(redis_url=redis_url, redis_min_replicas=1,
                                                      redis_timeout_ms=400, scan_interval_ms=3_600_000)))
    started = time.monotonic()
    resp = await worker.post("/v1/brokers/register", json=registration())
    # the 400 ms Redis timeout (WAIT's), with room for a loaded machine: not a hang
    assert resp.status == 503 and time.monotonic() - started < 10
    message = (await resp.json())["message"]
    assert "0 of 1 replicas" in message and "sending it again is safe" in message
    applied = snapshot(r)  # on the primary, unconfirmed
    assert (await worker.post("/v1/brokers/register", json=registration())).status == 503
    assert snapshot(r) == applied


def _refusal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines at WARNING or above that tell a refusal for too few replicas."""
    return [rec.getMessage() for rec in caplog.records
            if rec.levelno >= logging.WARNING and "too few replicas" in rec.getMessage()]


async def test_with_min_replicas_and_no_replica_a_burst_of_tcp_registrations_is_one_line_and_readyz_says_refused(
        aiohttp_client, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(Settings(redis_url=redis_url, redis_min_replicas=1, redis_timeout_ms=200,
                              scan_interval_ms=3_600_000))
    install_remoting(app, "127.0.0.1", 0)
    worker = await aiohttp_client(app)
    rmq = await RemotingClient.connect(app[REMOTING].bound_port)
    try:
        with caplog.at_level(logging.INFO):
            for i in range(16):
                answer = await rmq.call(register_frame(registration(version=i + 1)), timeout=10)
                assert answer.code == codes.SYSTEM_ERROR and "sending it again is safe" in answer.remark
    finally:
        await rmq.close()
    [line] = _refusal_lines(caplog)
    assert "RMQ_REDIS_MIN_REPLICAS=1" in line and "0 of 1 replicas" in line
    ready = await worker.get("/readyz")
    assert ready.status == 200 and (await ready.json())["writes"] == "refused: too few replicas"
    excluded = await worker.get("/readyz?exclude=redis")
    assert (await excluded.json())["writes"] == "refused: too few replicas"


async def test_with_min_replicas_and_no_replica_a_burst_of_http_registrations_is_one_line(
        aiohttp_client, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    worker = await aiohttp_client(create_app(Settings(redis_url=redis_url, redis_min_replicas=1,
                                                      redis_timeout_ms=200, scan_interval_ms=3_600_000)))
    with caplog.at_level(logging.INFO):
        for i in range(16):
            assert (await worker.post("/v1/brokers/register", json=registration(version=i + 1))).status == 503
    assert len(_refusal_lines(caplog)) == 1
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING and "NotReplicated" in rec.getMessage()]


async def test_redis_refusing_writes_for_want_of_replicas_is_a_503_naming_it_not_a_500(
        aiohttp_client, redis_url: str, r: redis.Redis) -> None:
    worker = await aiohttp_client(create_app(Settings(redis_url=redis_url, scan_interval_ms=3_600_000)))
    r.config_set("min-replicas-to-write", 1)
    try:
        resp = await worker.post("/v1/brokers/register", json=registration())
        assert resp.status == 503 and "too few replicas" in (await resp.json())["message"]
        assert (await (await worker.get("/readyz")).json())["writes"] == "refused: too few replicas"
    finally:
        r.config_set("min-replicas-to-write", 0)
