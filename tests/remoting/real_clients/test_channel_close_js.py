"""A broker's connection closing removes it, as a NameServer does; not after it re-registered elsewhere.

The broker here is ali-ons (a real JavaScript remoting client) sending REGISTER_BROKER over
one TCP connection that it keeps open; the connection ends when its node process ends.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import pytest

from tests.builders import registration
from tests.calls import register as http_register
from tests.remoting.conftest import Worker
from tests.remoting.real_clients.helpers import JsSession, need_node
from tests.remoting.real_clients.js_frames import js_register
from tests.waits import until

pytestmark = pytest.mark.usefixtures("consistent")

# the close removes the broker at once; without it the broker would stay for its 120 s timeout
GONE_WITHIN_S = 10.0
# where a close must remove nothing, time must pass (no event tells that no removal is
# coming): the removal it must not make would take milliseconds
NOTHING_WITHIN_S = 0.5


@pytest.fixture(autouse=True)
def _node() -> None:
    need_node()


async def brokers(worker: Worker) -> dict:
    resp = await worker.http.get("/v1/cluster")
    assert resp.status == 200
    return (await resp.json())["brokerAddrTable"]


async def gone(worker: Worker, name: str) -> None:
    """Until the broker group `name` left /v1/cluster."""
    async def left() -> bool:
        return name not in await brokers(worker)

    await until(left, GONE_WITHIN_S, f"{name} gone after its connection closed")


async def stays(worker: Worker, name: str) -> None:
    await asyncio.sleep(NOTHING_WITHIN_S)
    assert name in await brokers(worker), f"{name} removed by a close that was no longer its connection's"


@pytest.mark.parametrize("how", ["exit", "kill"])
async def test_closing_the_connection_removes_the_broker(worker: Worker, how: str) -> None:
    """exit: the client closes its socket (FIN); kill: SIGKILL, the kernel closes it."""
    session = await JsSession.start(worker.port)
    try:
        await js_register(session, registration(addr="10.0.0.1:10911", name="broker-a", topics=["CloseTopic"]))
        assert "broker-a" in await brokers(worker)
    finally:
        await (session.exit() if how == "exit" else session.kill())
    await gone(worker, "broker-a")
    assert (await worker.http.get("/v1/routes/CloseTopic")).status == 404


async def test_only_that_brokers_connection(worker: Worker) -> None:
    """Two brokers on two connections: closing one removes only that one."""
    a = await JsSession.start(worker.port)
    b = await JsSession.start(worker.port)
    try:
        await js_register(a, registration(addr="10.0.0.1:10911", name="broker-a", topics=["T"]))
        await js_register(b, registration(addr="10.0.0.2:10911", name="broker-b", topics=["T"]))
        await a.exit()
        await gone(worker, "broker-a")
        assert "broker-b" in await brokers(worker)
    finally:
        await a.exit()
        await b.exit()


async def test_not_after_it_reregistered_through_a_second_worker(
        make_worker: Callable[..., Awaitable[Worker]]) -> None:
    worker_a = await make_worker()
    worker_b = await make_worker()  # a second app on the same Redis
    reg = registration(addr="10.0.0.1:10911", name="broker-a", topics=["MovedTopic"])
    via_a = await JsSession.start(worker_a.port)
    via_b = await JsSession.start(worker_b.port)
    try:
        await js_register(via_a, reg)
        await js_register(via_b, reg)  # the same broker, now through worker B's connection
        await via_a.exit()
        # A's close must not remove it: it is B's connection that is the broker's now
        await stays(worker_a, "broker-a")
        assert "broker-a" in await brokers(worker_b)
        assert (await worker_b.http.get("/v1/routes/MovedTopic")).status == 200
        # and when B's connection closes too, it goes
        await via_b.exit()
        await gone(worker_b, "broker-a")
    finally:
        await via_a.exit()
        await via_b.exit()


async def test_not_after_it_reregistered_over_http(worker: Worker) -> None:
    reg = registration(addr="10.0.0.1:10911", name="broker-a", topics=["HttpOwned"])
    session = await JsSession.start(worker.port)
    try:
        await js_register(session, reg)
        await http_register(worker.http, reg)  # HTTP registrations have no connection to close
    finally:
        await session.exit()
    await stays(worker, "broker-a")
