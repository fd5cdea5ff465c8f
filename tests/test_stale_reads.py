"""?stale: reads answered through a Redis outage from the last known answers, their age
stated, never older than RMQ_STALE_MAX_MS; without it the 1 s bound holds."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.remoting import codes
from service.worker import REMOTING, create_app, install_remoting
from tests.builders import registration
from tests.calls import register, route
from tests.remoting.client import RemotingClient
from tests.remoting.frames import route as route_frame

BOUND_S = 1.0


async def test_a_stale_read_answers_through_an_outage_with_its_age(make_client, redis_server) -> None:
    client: TestClient = await make_client()
    await register(client, registration(topics=["T1"]))
    assert await route(client, "T1") is not None
    redis_server.stop()
    try:
        await asyncio.sleep(BOUND_S + 0.3)  # time must pass: the answer's age past the bound is asserted
        assert (await client.get("/v1/routes/T1")).status == 503
        stale = await client.get("/v1/routes/T1?stale")
        assert stale.status == 200 and (await stale.json())["queueDatas"][0]["brokerName"] == "broker-a"
        assert int(stale.headers["X-Registry-Age-Ms"]) >= BOUND_S * 1000
        cluster = await client.get("/v1/cluster?stale")
        # cluster info was never read: nothing to serve
        assert cluster.status == 503
        metrics = await (await client.get("/metrics")).text()
        assert "rmq_cache_stale_served_total 1.0" in metrics
    finally:
        redis_server.start()


@pytest.mark.slow
async def test_a_stale_answer_is_never_older_than_the_stated_maximum(make_client, redis_server) -> None:
    # a maximum far past what stopping Redis and a first read take on a loaded machine
    client: TestClient = await make_client(stale_max_ms=3000)
    await register(client, registration(topics=["T1"]))
    await route(client, "T1")
    redis_server.stop()
    try:
        await asyncio.sleep(0.2)  # time must pass: an answer aged, within the maximum
        assert (await client.get("/v1/routes/T1?stale")).status == 200
        await asyncio.sleep(3.1)  # and past it
        assert (await client.get("/v1/routes/T1?stale")).status == 503
    finally:
        redis_server.start()


async def test_a_stale_read_while_redis_answers_is_an_ordinary_fresh_read(client: TestClient) -> None:
    await register(client, registration(topics=["T1"]))
    resp = await client.get("/v1/routes/T1?stale")
    assert resp.status == 200 and "X-Registry-Age-Ms" not in resp.headers
    await client.post("/v1/brokers/broker-a/wipe-write-perm")
    assert (await (await client.get("/v1/routes/T1?stale")).json())["queueDatas"][0]["perm"] == 4


async def _remoting_worker(aiohttp_client, settings):
    app = create_app(settings)
    install_remoting(app, "127.0.0.1", 0)
    return app, await aiohttp_client(app)


async def test_tcp_route_reads_answer_through_an_outage_by_default_and_not_with_remoting_stale_reads_off(
        aiohttp_client, settings, redis_server) -> None:
    assert Settings().remoting_stale_reads  # the default, as a NameServer answers from memory
    stale_app, stale_client = await _remoting_worker(aiohttp_client, settings)
    strict_app, strict_client = await _remoting_worker(aiohttp_client, settings.with_overrides(remoting_stale_reads=False))
    await register(stale_client, registration(topics=["T1"]))
    lenient = await RemotingClient.connect(stale_app[REMOTING].bound_port)
    strict = await RemotingClient.connect(strict_app[REMOTING].bound_port)
    assert (await lenient.call(route_frame("T1"))).code == codes.SUCCESS
    assert (await strict.call(route_frame("T1"))).code == codes.SUCCESS
    redis_server.stop()
    try:
        await asyncio.sleep(BOUND_S + 0.3)  # time must pass: past the bound only stale reads answer
        answer = await lenient.call(route_frame("T1"), timeout=10)
        assert answer.code == codes.SUCCESS and b"broker-a" in answer.body
        assert (await strict.call(route_frame("T1"), timeout=10)).code == codes.SYSTEM_ERROR
    finally:
        redis_server.start()
