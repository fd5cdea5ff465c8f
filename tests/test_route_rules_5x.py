"""RocketMQ 5.3's route rules (RouteInfoManager of 5.3.3), through both fronts: the same
registrations sent over HTTP and over RocketMQ's protocol leave the same routes.

- BrokerData carries enableActingMaster and zoneName as the broker sent them;
- a 5.x slave with the smallest id of a group without a master (the prime slave) writes
  the group's QueueData, without the write bit when the group runs with enableActingMaster;
  a 4.x slave (no enableActingMaster header) never writes QueueData;
- a member leaving a group that runs with enableActingMaster and has no master left wipes
  the write bit of the group's QueueData;
- supportActingMaster answers such a group's smallest-id member as id 0;
- a static topic's queue mappings are kept per (topic, group) and answered as
  topicQueueMappingByBroker; deleting the topic or the group removes them.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import quote

import orjson
import pytest
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.remoting import codes, fastjson
from service.worker import REMOTING, create_app, install_remoting
from tests.remoting import broker5
from tests.remoting.client import RemotingClient, request

pytestmark = pytest.mark.usefixtures("consistent")

MASTER, SLAVE, SLAVE2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
ST1 = broker5.mapping_info("ST1", "broker-a", 4)


def table(*names: str, perm: int = 6) -> dict[str, dict[str, Any]]:
    return {n: broker5.topic_config(n, 4, 4, perm) for n in names}


class Front:
    """One protocol's way to register, unregister, delete a topic and read a route."""

    async def register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                       acting: bool | None = False, zone: str | None = None,
                       mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1) -> None:
        raise NotImplementedError

    async def unregister(self, addr: str, broker_id: int) -> None:
        raise NotImplementedError

    async def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    async def route(self, topic: str) -> dict[str, Any] | None:
        raise NotImplementedError

    async def cluster_group(self, name: str) -> dict[str, Any]:
        raise NotImplementedError


class Http(Front):
    def __init__(self, client: TestClient) -> None:
        self.client = client

    async def register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                       acting: bool | None = False, zone: str | None = None,
                       mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1) -> None:
        body: dict[str, Any] = {
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": broker_id,
            "topicConfigSerializeWrapper": {"topicConfigTable": topics, "topicQueueMappingInfoMap": mappings or {},
                                            "dataVersion": {"timestamp": 1700000000000, "counter": counter}}}
        if acting is not None:
            body["enableActingMaster"] = acting
        if zone is not None:
            body["zoneName"] = zone
        resp = await self.client.post("/v1/brokers/register", json=body)
        assert resp.status == 200, await resp.text()

    async def unregister(self, addr: str, broker_id: int) -> None:
        resp = await self.client.post("/v1/brokers/unregister", json={
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": broker_id})
        assert resp.status == 200, await resp.text()

    async def delete_topic(self, topic: str) -> None:
        resp = await self.client.delete(f"/v1/topics/{quote(topic, safe='')}")
        assert resp.status == 200, await resp.text()

    async def route(self, topic: str) -> dict[str, Any] | None:
        resp = await self.client.get(f"/v1/routes/{quote(topic, safe='')}")
        if resp.status == 404:
            return None
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def cluster_group(self, name: str) -> dict[str, Any]:
        return (await (await self.client.get("/v1/cluster")).json())["brokerAddrTable"][name]


class Tcp(Front):
    def __init__(self, rmq: RemotingClient) -> None:
        self.rmq = rmq

    async def register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                       acting: bool | None = False, zone: str | None = None,
                       mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1) -> None:
        body = broker5.plain_body(topics, mappings, counter=counter)
        answer = await self.rmq.call(broker5.register(body, addr=addr, broker_id=broker_id, acting=acting, zone=zone))
        assert answer.code == codes.SUCCESS, answer.remark

    async def unregister(self, addr: str, broker_id: int) -> None:
        answer = await self.rmq.call(request(codes.UNREGISTER_BROKER, {
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": str(broker_id)}))
        assert answer.code == codes.SUCCESS, answer.remark

    async def delete_topic(self, topic: str) -> None:
        answer = await self.rmq.call(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))
        assert answer.code == codes.SUCCESS, answer.remark

    async def route(self, topic: str, version: int = 479) -> dict[str, Any] | None:
        answer = await self.rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, version=version))
        if answer.code == codes.TOPIC_NOT_EXIST:
            return None
        assert answer.code == codes.SUCCESS, answer.remark
        return fastjson.loads(answer.body)

    async def cluster_group(self, name: str) -> dict[str, Any]:
        answer = await self.rmq.call(request(codes.GET_BROKER_CLUSTER_INFO))
        return fastjson.loads(answer.body)["brokerAddrTable"][name]


@pytest.fixture
async def make_front(aiohttp_client: Any, settings: Settings) -> AsyncIterator[Callable[..., Awaitable[Front]]]:
    """A worker on the test Redis (keyword arguments override settings), and the front to
    reach it by."""
    opened: list[RemotingClient] = []

    async def make(kind: str, **overrides: Any) -> Front:
        app = create_app(settings.with_overrides(**overrides))
        if kind == "tcp":
            install_remoting(app, "127.0.0.1", 0)
        client = await aiohttp_client(app)
        if kind == "http":
            return Http(client)
        rmq = await RemotingClient.connect(app[REMOTING].bound_port)
        opened.append(rmq)
        return Tcp(rmq)

    yield make
    for rmq in opened:
        await rmq.close()


@pytest.fixture(params=["http", "tcp"])
async def front(request: pytest.FixtureRequest, make_front: Callable[..., Awaitable[Front]]) -> Front:
    return await make_front(request.param)


def addrs(route: dict[str, Any] | None) -> dict[str, str]:
    assert route is not None
    return route["brokerDatas"][0]["brokerAddrs"]


def perm(route: dict[str, Any] | None) -> int:
    assert route is not None
    return route["queueDatas"][0]["perm"]


async def test_broker_data_carries_enable_acting_master_and_zone_name_as_sent(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), acting=True, zone="zone-b")
    group = (await front.route("T1"))["brokerDatas"][0]  # type: ignore[index]
    assert (group["enableActingMaster"], group["zoneName"]) == (True, "zone-b")
    group = await front.cluster_group("broker-a")
    assert (group["enableActingMaster"], group["zoneName"]) == (True, "zone-b")


async def test_a_later_registration_without_acting_master_clears_it(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), acting=True, zone="zone-b")
    await front.register(MASTER, 0, table("T1"), acting=False, counter=2)
    group = (await front.route("T1"))["brokerDatas"][0]  # type: ignore[index]
    assert group.get("enableActingMaster", False) is False and "zoneName" not in group


async def test_a_4x_slave_alone_never_writes_queue_data(front: Front) -> None:
    await front.register(SLAVE, 1, table("T1"), acting=None)
    assert await front.route("T1") is None


async def test_a_5x_prime_slave_writes_the_groups_queue_data(front: Front) -> None:
    await front.register(SLAVE, 1, table("T1"), acting=False)
    route = await front.route("T1")
    assert (addrs(route), perm(route)) == ({"1": SLAVE}, 6)


async def test_a_5x_prime_slave_of_an_acting_master_group_writes_them_read_only(front: Front) -> None:
    await front.register(SLAVE, 1, table("T1"), acting=True)
    assert perm(await front.route("T1")) == 4


async def test_only_the_smallest_id_slave_is_prime(front: Front) -> None:
    await front.register(SLAVE, 1, table("T1"), acting=False)
    await front.register(SLAVE2, 2, table("T1", "T2"), acting=False)
    assert await front.route("T2") is None


async def test_a_5x_slave_beside_its_master_writes_nothing(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), acting=False)
    await front.register(SLAVE, 1, table("T1", "T2"), acting=False)
    assert await front.route("T2") is None


async def test_the_master_leaving_an_acting_master_group_wipes_its_write_perm(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), acting=True)
    await front.register(SLAVE, 1, table("T1"), acting=True)
    await front.unregister(MASTER, 0)
    route = await front.route("T1")
    assert (addrs(route), perm(route)) == ({"1": SLAVE}, 4)


async def test_the_master_leaving_a_group_without_acting_master_keeps_its_perm(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), acting=False)
    await front.register(SLAVE, 1, table("T1"), acting=False)
    await front.unregister(MASTER, 0)
    assert perm(await front.route("T1")) == 6


async def test_the_master_coming_back_restores_its_perm(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), acting=True)
    await front.register(SLAVE, 1, table("T1"), acting=True)
    await front.unregister(MASTER, 0)
    await front.register(MASTER, 0, table("T1"), acting=True)
    route = await front.route("T1")
    assert (addrs(route), perm(route)) == ({"0": MASTER, "1": SLAVE}, 6)


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_support_acting_master_answers_the_smallest_id_slave_as_id_0(
        make_front: Callable[..., Awaitable[Front]], kind: str) -> None:
    front = await make_front(kind, support_acting_master=True)
    await front.register(MASTER, 0, table("T1"), acting=True)
    await front.register(SLAVE, 1, table("T1"), acting=True)
    await front.register(SLAVE2, 2, table("T1"), acting=True)
    await front.unregister(MASTER, 0)
    route = await front.route("T1")
    assert (addrs(route), perm(route)) == ({"0": SLAVE, "2": SLAVE2}, 4)


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_support_acting_master_leaves_a_group_whose_queues_are_writable(
        make_front: Callable[..., Awaitable[Front]], kind: str) -> None:
    front = await make_front(kind, support_acting_master=True)
    await front.register(SLAVE, 1, table("T1"), acting=False)
    assert addrs(await front.route("T1")) == {"1": SLAVE}


async def test_a_static_topics_route_carries_its_queue_mappings(front: Front) -> None:
    await front.register(MASTER, 0, table("T1", "ST1"), mappings={"ST1": ST1})
    route = await front.route("ST1")
    assert route is not None
    assert route["topicQueueMappingByBroker"] == {"broker-a": ST1}
    assert "topicQueueMappingByBroker" not in (await front.route("T1") or {})


async def test_a_client_before_4_9_4_gets_the_mappings_in_fastjsons_dialect(make_front: Callable[..., Awaitable[Front]]) -> None:
    front = await make_front("tcp")
    assert isinstance(front, Tcp)
    await front.register(MASTER, 0, table("ST1"), mappings={"ST1": ST1})
    answer = await front.rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "ST1"}, version=63))
    assert b'"currIdMap":{0:0,1:1,2:2,3:3}' in answer.body
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in answer.body


async def test_deleting_a_static_topic_removes_its_mappings(front: Front, r: Any) -> None:
    await front.register(MASTER, 0, table("ST1"), mappings={"ST1": ST1})
    await front.delete_topic("ST1")
    assert r.exists("{rmq}:mapping:ST1") == 0 and r.sismember("{rmq}:mapped:broker-a", "ST1") == 0


async def test_a_group_that_leaves_takes_its_mappings_with_it(front: Front, r: Any) -> None:
    await front.register(MASTER, 0, table("ST1"), mappings={"ST1": ST1})
    await front.unregister(MASTER, 0)
    assert r.exists("{rmq}:mapping:ST1") == 0 and r.exists("{rmq}:mapped:broker-a") == 0


async def test_a_changed_mapping_is_written_though_the_data_version_is_not(front: Front) -> None:
    await front.register(MASTER, 0, table("ST1"), mappings={"ST1": ST1})
    moved = {**ST1, "epoch": ST1["epoch"] + 1}
    await front.register(MASTER, 0, table("ST1"), mappings={"ST1": moved})
    route = await front.route("ST1")
    assert route is not None and route["topicQueueMappingByBroker"]["broker-a"]["epoch"] == moved["epoch"]


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_delete_with_registration_spares_a_broker_with_static_topics(
        make_front: Callable[..., Awaitable[Front]], kind: str) -> None:
    front = await make_front(kind, delete_topic_with_broker_registration=True)
    await front.register(MASTER, 0, table("T1", "ST1"), mappings={"ST1": ST1})
    await front.register(MASTER, 0, table("ST1"), mappings={"ST1": ST1}, counter=2)
    assert await front.route("T1") is not None
    await front.register(MASTER, 0, table("ST1"), counter=3)  # no static topic: the rule applies
    await front.register(MASTER, 0, {}, counter=4)
    assert await front.route("T1") is None
