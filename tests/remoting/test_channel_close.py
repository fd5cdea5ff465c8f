"""A broker's connection closing removes it, unless another connection (or HTTP) owns it now."""

from __future__ import annotations

import asyncio

from service.remoting import codes
from tests.builders import identity as http_identity
from tests.builders import registration
from tests.calls import register as http_register
from tests.calls import route
from tests.remoting import frames
from tests.remoting.client import RemotingClient, request
from tests.tables import violations
from tests.waits import until


async def cluster_of(worker) -> dict:
    return await (await worker.http.get("/v1/cluster")).json()


async def gone_within(worker, topic: str, seconds: float) -> bool:
    async def gone() -> bool:
        return await route(worker.http, topic) is None

    return await until(gone, seconds, f"{topic}'s route gone")


# the close removes the broker at once; without it the broker would stay for its 120 s timeout
GONE_WITHIN_S = 10.0
# where a close must remove nothing, time must pass (no event tells that no removal is
# coming): the removal it must not make would take milliseconds
NOTHING_WITHIN_S = 0.5


async def test_closing_the_registering_connection_removes_the_broker(worker, r) -> None:
    client = await RemotingClient.connect(worker.port)
    assert (await client.call(frames.register(registration(topics=["T1"])))).code == codes.SUCCESS
    assert await route(worker.http, "T1") is not None
    await client.close()
    assert await gone_within(worker, "T1", GONE_WITHIN_S)
    assert await cluster_of(worker) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert violations(r) == []


async def test_close_after_reregistering_through_another_worker_keeps_the_broker(make_worker, r) -> None:
    a, b = await make_worker(), await make_worker()
    reg = registration(topics=["T1"])
    first = await RemotingClient.connect(a.port)
    second = await RemotingClient.connect(b.port)
    assert (await first.call(frames.register(reg))).code == codes.SUCCESS
    assert (await second.call(frames.register(reg))).code == codes.SUCCESS
    await first.close()
    await asyncio.sleep(NOTHING_WITHIN_S)
    assert await route(a.http, "T1") is not None
    await second.close()
    assert await gone_within(a, "T1", GONE_WITHIN_S)


async def test_close_after_a_heartbeat_on_another_connection_keeps_the_broker(worker) -> None:
    reg = registration(topics=["T1"])
    first, second = await RemotingClient.connect(worker.port), await RemotingClient.connect(worker.port)
    assert (await first.call(frames.register(reg))).code == codes.SUCCESS
    await second.send(request(codes.BROKER_HEARTBEAT, frames.identity(reg), oneway=True))
    await asyncio.sleep(0.3)  # oneway: no answer to wait for
    await first.close()
    await asyncio.sleep(NOTHING_WITHIN_S)
    assert await route(worker.http, "T1") is not None
    await second.close()


async def test_close_after_an_http_registration_keeps_the_broker(worker) -> None:
    reg = registration(topics=["T1"])
    client = await RemotingClient.connect(worker.port)
    assert (await client.call(frames.register(reg))).code == codes.SUCCESS
    await http_register(worker.http, reg)
    await client.close()
    await asyncio.sleep(NOTHING_WITHIN_S)
    assert await route(worker.http, "T1") is not None


async def test_a_worker_shutting_down_removes_no_broker(make_worker, aiohttp_client) -> None:
    a, b = await make_worker(), await make_worker()
    client = await RemotingClient.connect(a.port)
    assert (await client.call(frames.register(registration(topics=["T1"])))).code == codes.SUCCESS
    await a.http.close()  # the worker stops: its connections close without destroying
    await asyncio.sleep(0.3)  # time must pass (see NOTHING_WITHIN_S)
    assert await route(b.http, "T1") is not None
    await client.close()


async def test_a_client_that_registered_nothing_removes_nothing_when_it_closes(worker) -> None:
    reg = registration(topics=["T1"])
    await http_register(worker.http, reg)
    client = await RemotingClient.connect(worker.port)
    assert (await client.call(frames.route("T1"))).code == codes.SUCCESS
    await client.close()
    await asyncio.sleep(0.3)  # time must pass (see NOTHING_WITHIN_S)
    assert await route(worker.http, "T1") is not None
    await worker.http.post("/v1/brokers/unregister", json=http_identity(reg))


async def test_a_connection_closed_as_idle_removes_the_broker_it_registered(make_worker) -> None:
    # RocketMQ's NameServer closes a channel idle for serverChannelMaxIdleTimeSeconds (120 s)
    # and its close removes the brokers on it (onChannelDestroy); a broker that sends nothing
    # for that long (its period is 30 s) is gone with its connection here too
    worker = await make_worker(remoting_idle_ms=500)
    client = await RemotingClient.connect(worker.port)
    try:
        assert (await client.call(frames.register(registration(topics=["T1"])))).code == codes.SUCCESS
        assert await route(worker.http, "T1") is not None
        assert await gone_within(worker, "T1", GONE_WITHIN_S)
    finally:
        await client.close()
