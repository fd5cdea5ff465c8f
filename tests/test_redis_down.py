"""Redis unavailable: 503 STORE_UNAVAILABLE quickly, and recovery by itself when it returns."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.store import OutcomeUnknown, Store, StoreUnavailable
from tests.builders import registration
from tests.calls import register, route
from tests.redis_server import RedisServer
from tests.waits import until

# What "fast" and "recovers" are held to: far below a hang (aiohttp's client waits 5 min) and
# far above what a loaded machine adds to a Redis timeout of a few hundred milliseconds.
FAST_S = 3.0
RECOVERS_WITHIN_S = 10.0


async def worker_on(aiohttp_client, server: RedisServer, **overrides) -> TestClient:
    from service.worker import create_app

    settings = Settings(redis_url=server.url, scan_interval_ms=200, redis_timeout_ms=500).with_overrides(**overrides)
    return await aiohttp_client(create_app(settings))


async def timed(coro) -> tuple[float, object]:
    started = time.monotonic()
    result = await coro
    return time.monotonic() - started, result


async def test_redis_stopped_answers_503_fast_then_recovers(aiohttp_client, own_redis: RedisServer) -> None:
    client = await worker_on(aiohttp_client, own_redis)
    await register(client, registration())
    own_redis.stop()
    for request in (client.get("/v1/routes/TopicTest"), client.post("/v1/brokers/register", json=registration()),
                    client.get("/readyz"), client.get("/v1/cluster")):
        elapsed, resp = await timed(request)
        assert resp.status == 503
        assert (await resp.json())["error"] == "STORE_UNAVAILABLE"
        assert elapsed < FAST_S
    assert (await client.get("/healthz")).status == 200  # the process itself is fine
    own_redis.start()  # same port, empty: a Redis that lost everything
    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await until(ready, RECOVERS_WITHIN_S, "the worker ready again with Redis back", poll_s=0.05)
    await register(client, registration())  # scripts are loaded again on NOSCRIPT
    assert await route(client, "TopicTest") is not None


async def test_with_redis_stopped_a_reads_503_says_retry_and_a_changes_says_nothing_was_changed(
        aiohttp_client, own_redis: RedisServer) -> None:
    client = await worker_on(aiohttp_client, own_redis, max_staleness_ms=0)
    await register(client, registration())
    own_redis.stop()
    for path in ("/v1/routes/TopicTest", "/v1/cluster", "/v1/kv/NS/k"):
        resp = await client.get(path)
        assert resp.status == 503
        message = (await resp.json())["message"]
        assert message == "the route store is unavailable; retry", path
    resp = await client.put("/v1/kv/NS/k", json={"value": "v"})
    assert resp.status == 503 and "nothing was changed" in (await resp.json())["message"]


async def test_readyz_and_its_exclude_redis_form_answer_one_shape_with_redis_stopped(
        aiohttp_client, own_redis: RedisServer) -> None:
    client = await worker_on(aiohttp_client, own_redis)
    own_redis.stop()
    full = await client.get("/readyz")
    body = await full.json()
    assert full.status == 503 and body["status"] == "not ready" and body["redis"] == "unreachable"
    assert body["error"] == "STORE_UNAVAILABLE" and body["message"].startswith("Redis unreachable")
    probe = await client.get("/readyz?exclude=redis")
    assert probe.status == 200
    assert set(await probe.json()) == set(body) - {"error", "message"}


@pytest.mark.slow
async def test_redis_paused_longer_than_the_timeout_answers_503_within_it(aiohttp_client, own_redis: RedisServer) -> None:
    client = await worker_on(aiohttp_client, own_redis, redis_timeout_ms=300)
    await register(client, registration())
    admin = redis.Redis.from_url(own_redis.url)
    # every client waits: a pause past FAST_S, so that an answer within FAST_S came from the timeout
    pause_s = FAST_S + 1
    admin.execute_command("CLIENT", "PAUSE", int(pause_s * 1000), "ALL")
    admin.close()
    paused_at = time.monotonic()
    elapsed, resp = await timed(client.get("/v1/routes/TopicTest"))
    assert resp.status == 503
    assert elapsed < FAST_S
    async def served() -> bool:
        return (await client.get("/v1/routes/TopicTest")).status == 200

    await until(served, paused_at + pause_s + RECOVERS_WITHIN_S - time.monotonic(),
                "the route served again after the pause", poll_s=0.05)


async def test_a_worker_starting_while_redis_is_down_waits_for_it_and_serves_when_it_comes(
        aiohttp_client, own_redis: RedisServer) -> None:
    # (one that never comes stops the worker: tests/test_startup_failures.py)
    own_redis.stop()
    starting = asyncio.ensure_future(worker_on(aiohttp_client, own_redis, redis_start_timeout_ms=20_000))
    await asyncio.sleep(1.0)  # time must pass: it keeps waiting (nothing to await for what must not happen)
    assert not starting.done()
    own_redis.start()
    client = await asyncio.wait_for(starting, RECOVERS_WITHIN_S)
    assert (await client.get("/readyz")).status == 200
    await register(client, registration())


async def test_flushed_script_cache_is_reloaded_on_demand(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(topics=["T1"]))
    r.script_flush()
    await register(client, registration(topics=["T2"]))
    assert await route(client, "T2") is not None


async def _raises(exc: BaseException) -> None:
    raise exc


CLOSED = "unable to perform operation on <TCPTransport closed=True reading=False 0x0>; the handler is closed"


async def test_a_write_on_a_connection_redis_closed_is_an_outage_not_a_bug(settings) -> None:
    # uvloop's words when a connection Redis closed (a restart) is written to: redis-py
    # lets them through; a change sent that way may have gone out on an earlier try
    store = Store(settings)
    with pytest.raises(OutcomeUnknown):
        await store.call(_raises(RuntimeError(CLOSED)), writes=True)
    with pytest.raises(StoreUnavailable):
        await store.call(_raises(RuntimeError(CLOSED)))
    with pytest.raises(RuntimeError, match="no running event loop"):  # any other RuntimeError is a bug: a 500
        await store.call(_raises(RuntimeError("no running event loop")))
    await store.close()
