"""NOTIFY_MIN_BROKER_ID_CHANGE (RMQ_NOTIFY_MIN_BROKER_ID_CHANGED): brokers listening here
(each a small server standing for a broker's remoting port) are told when their group's
smallest brokerId changes, as RocketMQ 5.3's RouteInfoManager tells them."""

from __future__ import annotations

import asyncio
import struct
from typing import AsyncIterator, Awaitable, Callable

import pytest

from service.remoting import codec, codes
from service.remoting.codec import Command
from tests.remoting.conftest import Worker
from tests.waits import BOUND_S, until

pytestmark = pytest.mark.usefixtures("consistent")


class Broker:
    """A broker's listening port: what NameServers send it."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[Command] = asyncio.Queue()
        self.server: asyncio.AbstractServer | None = None

    addr = ""

    async def start(self) -> "Broker":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                await self.received.put(codec.decode_payload(await reader.readexactly(length)))
        except asyncio.IncompleteReadError:
            writer.close()

    async def told(self, timeout: float = 10) -> Command:
        return await asyncio.wait_for(self.received.get(), timeout)

    async def told_nothing(self, within: float = 0.5) -> bool:
        await asyncio.sleep(within)
        return self.received.empty()


@pytest.fixture
async def brokers() -> AsyncIterator[list[Broker]]:
    started = [await Broker().start() for _ in range(3)]
    yield started
    for b in started:
        assert b.server is not None
        b.server.close()


async def register(worker: Worker, broker: Broker, broker_id: int, acting: bool = True) -> None:
    host, port = broker.addr.rsplit(":", 1)
    resp = await worker.http.post("/v1/brokers/register", json={
        "clusterName": "DefaultCluster", "brokerAddr": broker.addr, "brokerName": "broker-a", "brokerId": broker_id,
        "haServerAddr": f"{host}:{int(port) + 1}", "enableActingMaster": acting,
        "topicConfigSerializeWrapper": {"topicConfigTable": {}, "dataVersion": {"timestamp": 1, "counter": 1}}})
    assert resp.status == 200, await resp.text()


async def unregister(worker: Worker, broker: Broker, broker_id: int) -> None:
    resp = await worker.http.post("/v1/brokers/unregister", json={
        "clusterName": "DefaultCluster", "brokerAddr": broker.addr, "brokerName": "broker-a", "brokerId": broker_id})
    assert resp.status == 200, await resp.text()


@pytest.fixture
async def notifying(make_worker: Callable[..., Awaitable[Worker]]) -> Worker:
    return await make_worker(notify_min_broker_id_changed=True)


async def test_a_smaller_id_registering_tells_the_groups_other_brokers(notifying: Worker, brokers: list[Broker]) -> None:
    slave1, slave2, master = brokers
    await register(notifying, slave1, 1)
    await register(notifying, slave2, 2)
    await register(notifying, master, 0)
    for told in (slave1, slave2):
        cmd = await told.told()
        assert cmd.code == codes.NOTIFY_MIN_BROKER_ID_CHANGE and cmd.is_oneway
        host, port = master.addr.rsplit(":", 1)
        assert cmd.ext_fields == {"minBrokerId": "0", "minBrokerAddr": master.addr, "haBrokerAddr": f"{host}:{int(port) + 1}"}
    assert await master.told_nothing()


async def test_the_smallest_leaving_an_acting_master_group_tells_every_member_left(
        notifying: Worker, brokers: list[Broker]) -> None:
    master, slave1, slave2 = brokers
    for broker_id, broker in enumerate(brokers):
        await register(notifying, broker, broker_id)
    await unregister(notifying, master, 0)
    for told in (slave1, slave2):
        cmd = await told.told()
        assert cmd.ext_fields == {"minBrokerId": "1", "minBrokerAddr": slave1.addr, "offlineBrokerAddr": master.addr}


async def test_the_smallest_leaving_a_group_without_acting_master_tells_nobody(
        notifying: Worker, brokers: list[Broker]) -> None:
    master, slave1, _ = brokers
    await register(notifying, master, 0, acting=False)
    await register(notifying, slave1, 1, acting=False)
    await unregister(notifying, master, 0)
    assert await slave1.told_nothing()


async def test_nothing_is_sent_with_the_setting_off(make_worker: Callable[..., Awaitable[Worker]],
                                                     brokers: list[Broker]) -> None:
    worker = await make_worker()
    slave1, _, master = brokers
    await register(worker, slave1, 1)
    await register(worker, master, 0)
    assert await slave1.told_nothing()


async def test_a_broker_that_cannot_be_reached_is_logged_and_the_rest_are_told(
        notifying: Worker, brokers: list[Broker], caplog: pytest.LogCaptureFixture) -> None:
    slave1, gone, master = brokers
    await register(notifying, slave1, 1)
    await register(notifying, gone, 2)
    assert gone.server is not None
    gone.server.close()
    await gone.server.wait_closed()
    await register(notifying, master, 0)
    assert (await slave1.told()).ext_fields["minBrokerId"] == "0"
    await until(lambda: any("could not tell" in r.getMessage() and gone.addr in r.getMessage()
                            for r in caplog.records), BOUND_S, "a line for the broker that could not be told")
