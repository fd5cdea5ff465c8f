"""Connection closes go through the worker's one removal path (service/removals.py): a storm
of them is removed in a few bounded scripts, none left to the expiry; a close or an
unregistration that cannot reach Redis is done when Redis returns; live route reads go on
answering meanwhile; a burst of registrations past the worker's turns is answered
SYSTEM_BUSY at once."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import redis

from service.http.app_keys import NODE
from service.registry import Registry
from service.remoting import codes
from tests.builders import registration
from tests.calls import register as http_register
from tests.calls import route
from tests.remoting import frames
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.redis_server import free_port
from tests.tables import violations
from tests.waits import until

SHARED = [f"Shared{i}" for i in range(10)]  # served by the storm's groups and a live one


async def storm_fleet(worker: Worker, groups: int) -> list[RemotingClient]:
    """A master and a slave per group, each registered on its own connection (default
    timeout: 120 s, far beyond any wait here, so whatever goes was removed by its close)."""
    turns = asyncio.Semaphore(16)

    async def member(g: int, broker_id: int) -> RemotingClient:
        async with turns:
            client = await RemotingClient.connect(worker.port)
            reg = registration(addr=f"10.1.{g}.{broker_id + 1}:10911", name=f"storm-{g}", broker_id=broker_id,
                               topics=[f"S{g}-{i}" for i in range(5)] + SHARED)
            assert (await client.call(frames.register(reg), timeout=30)).code == codes.SUCCESS
            return client

    return list(await asyncio.gather(*(member(g, b) for g in range(groups) for b in (0, 1))))


async def groups_left(worker: Worker) -> set[str]:
    return set((await (await worker.http.get("/v1/cluster")).json())["brokerAddrTable"])


@pytest.mark.slow
async def test_a_close_storm_of_three_hundred_brokers_removes_every_one_through_the_closes(
        worker: Worker, r: redis.Redis) -> None:
    clients = await storm_fleet(worker, 150)
    await asyncio.gather(*(c.close() for c in clients))
    await until(lambda: _empty(worker), 60, "every group removed")
    removals = worker.app[NODE].removals
    await until(lambda: _settled(removals), 10, "the removal queue settled")  # the last script's answer read
    assert removals.removed["connection closed"] == 300
    assert violations(r) == []


async def _empty(worker: Worker) -> bool:
    return not await groups_left(worker)


async def test_live_route_reads_keep_answering_during_a_close_storm(worker: Worker) -> None:
    await http_register(worker.http, registration(addr="10.2.0.1:10911", name="live", topics=SHARED))
    clients = await storm_fleet(worker, 50)
    reader = await RemotingClient.connect(worker.port)
    answers: list[int] = []
    stop = asyncio.Event()

    async def read() -> None:
        while not stop.is_set():
            for topic in SHARED:  # each changes as a storm group goes: not all from the cache
                answers.append((await reader.call(frames.route(topic), timeout=10)).code)

    reading = asyncio.create_task(read())
    await asyncio.gather(*(c.close() for c in clients))
    await until(lambda: _only_live(worker), 60, "only the live group left")
    stop.set()
    await reading
    await reader.close()
    assert answers and set(answers) == {codes.SUCCESS}


async def _only_live(worker: Worker) -> bool:
    return await groups_left(worker) == {"live"}


async def test_a_close_while_redis_is_frozen_is_removed_when_redis_returns(make_worker, own_redis) -> None:
    worker = await make_worker(redis_url=own_redis.url, redis_timeout_ms=300)
    client = await RemotingClient.connect(worker.port)
    assert (await client.call(frames.register(registration(topics=["T1"])))).code == codes.SUCCESS
    own_redis.proc.send_signal(signal.SIGSTOP)
    try:
        await client.close()
        removals = worker.app[NODE].removals
        await until(lambda: _failed(removals), 10, "the removal meeting the frozen Redis")
        assert removals.queued == 1  # kept, not dropped
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
    await until(lambda: _gone(worker, "T1"), 10, "T1's route gone")
    await until(lambda: _settled(removals), 10, "the removal queue settled")  # settled by a retry, not dropped


async def _settled(removals) -> bool:
    return removals.queued == 0


async def _failed(removals) -> bool:
    return removals.failures > 0


async def _gone(worker: Worker, topic: str) -> bool:
    return await route(worker.http, topic) is None


async def test_an_unregistration_redis_refused_is_done_once_redis_takes_writes_again(make_worker, own_redis) -> None:
    worker = await make_worker(redis_url=own_redis.url)
    reg = registration(topics=["T1"])
    client = await RemotingClient.connect(worker.port)
    assert (await client.call(frames.register(reg))).code == codes.SUCCESS
    admin = redis.Redis.from_url(own_redis.url)
    # a replica of a primary it cannot reach: it keeps its data and refuses every write
    # (READONLY), so the unregistration is not applied
    admin.replicaof("127.0.0.1", free_port())
    try:
        answer = await client.call(request(codes.UNREGISTER_BROKER, frames.identity(reg)))
        assert answer.code == codes.SYSTEM_ERROR
        assert await route(worker.http, "T1") is not None
    finally:
        admin.replicaof("NO", "ONE")
        admin.close()
    # the connection stays open: the queued unregistration, not a close, removes it
    await until(lambda: _gone(worker, "T1"), 10, "T1's route gone")
    assert worker.app[NODE].removals.removed["unregistered"] == 1
    await client.close()


async def test_registrations_past_the_workers_turns_are_answered_system_busy(make_worker, monkeypatch) -> None:
    monkeypatch.setattr(Registry, "REGISTRATIONS_IN_FLIGHT", 0)  # no turn ever free
    worker = await make_worker(redis_timeout_ms=100)
    client = await RemotingClient.connect(worker.port)
    began = time.monotonic()
    answer = await client.call(frames.register(registration(topics=["T1"])))
    assert answer.code == codes.SYSTEM_BUSY
    assert time.monotonic() - began < 2  # answered after its 0.2 s wait, not a timeout
    assert await route(worker.http, "T1") is None  # nothing registered
    await client.close()


async def test_registrations_past_the_workers_turns_are_answered_503_with_retry_after_over_http(
        make_worker, monkeypatch) -> None:
    monkeypatch.setattr(Registry, "REGISTRATIONS_IN_FLIGHT", 0)
    worker = await make_worker(redis_timeout_ms=100)
    resp = await worker.http.post("/v1/brokers/register", json=registration(topics=["T1"]))
    assert resp.status == 503 and resp.headers["Retry-After"] == "1"
    assert (await resp.json())["error"] == "BUSY"
