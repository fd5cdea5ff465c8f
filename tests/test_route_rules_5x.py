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
  topicQueueMappingByBroker; deleting the topic or the group removes them;
- 5.3.3's four rules: zone mode (ZoneRouteRPCHook), the stateVersion conflict rule and
  stateVersion in DataVersion equality (RouteInfoManager, DataVersion), and the refusal of
  a single-topic registration from an id the group lacks (apache/rocketmq#4522).
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import quote

import orjson
import pytest
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.remoting import codec, codes
from service.remoting.codec import Command
from service.worker import REMOTING, create_app, install_remoting
from tests.remoting import broker5
from tests.remoting.client import RemotingClient, request
from tests.tables import snapshot

pytestmark = pytest.mark.usefixtures("consistent")

MASTER, SLAVE, SLAVE2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
ST1 = broker5.mapping_info("ST1", "broker-a", 4)


# a successful answer's status (HTTP) or code (TCP)
SUCCESS = {"http": 200, "tcp": codes.SUCCESS}


def table(*names: str, perm: int = 6) -> dict[str, dict[str, Any]]:
    """The topic configs of `names` after the broker's own name, a topic of every real
    broker's table (so none of these is the single-topic registration of apache/rocketmq#4522)."""
    return {n: broker5.topic_config(n, 4, 4, perm) for n in ("broker-a", *names)}


class Front:
    """One protocol's way to register, unregister, delete a topic and read a route."""

    kind = ""

    async def register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                       name: str = "broker-a", acting: bool | None = False, zone: str | None = None,
                       mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1, state: int = 0,
                       filters: list[str] | None = None) -> None:
        """Registers; the answer must be a success."""
        status, error = await self.try_register(addr, broker_id, topics, name=name, acting=acting, zone=zone,
                                                mappings=mappings, counter=counter, state=state, filters=filters)
        assert status == SUCCESS[self.kind], error

    async def try_register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                           name: str = "broker-a", acting: bool | None = False, zone: str | None = None,
                           mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1, state: int = 0,
                           filters: list[str] | None = None) -> tuple[int, str | None]:
        """The answer's status (HTTP) or code (TCP), and its error (HTTP) or remark (TCP)."""
        raise NotImplementedError

    async def query_data_version(self, addr: str, broker_id: int, version: dict[str, int]) -> dict[str, Any]:
        """{"changed": bool, "stored": the stored DataVersion or None}."""
        raise NotImplementedError

    async def unregister(self, addr: str, broker_id: int) -> None:
        raise NotImplementedError

    async def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    async def route(self, topic: str, zone: str | None = None) -> dict[str, Any] | None:
        """The route; in `zone`'s zone mode when given."""
        raise NotImplementedError

    async def cluster_group(self, name: str) -> dict[str, Any]:
        raise NotImplementedError


class Http(Front):
    kind = "http"

    def __init__(self, client: TestClient) -> None:
        self.client = client

    async def try_register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                           name: str = "broker-a", acting: bool | None = False, zone: str | None = None,
                           mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1, state: int = 0,
                           filters: list[str] | None = None) -> tuple[int, str | None]:
        body: dict[str, Any] = {
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": name, "brokerId": broker_id,
            "topicConfigSerializeWrapper": {"topicConfigTable": topics, "topicQueueMappingInfoMap": mappings or {},
                                            "dataVersion": {"timestamp": 1700000000000, "counter": counter,
                                                            "stateVersion": state}}}
        if acting is not None:
            body["enableActingMaster"] = acting
        if zone is not None:
            body["zoneName"] = zone
        if filters is not None:
            body["filterServerList"] = filters
        resp = await self.client.post("/v1/brokers/register", json=body)
        return resp.status, None if resp.status == 200 else (await resp.json())["error"]

    async def query_data_version(self, addr: str, broker_id: int, version: dict[str, int]) -> dict[str, Any]:
        resp = await self.client.post("/v1/brokers/query-data-version", json={
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": broker_id,
            "dataVersion": version})
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        return {"changed": answer["changed"], "stored": answer["nameServerDataVersion"]}

    async def unregister(self, addr: str, broker_id: int) -> None:
        resp = await self.client.post("/v1/brokers/unregister", json={
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": broker_id})
        assert resp.status == 200, await resp.text()

    async def delete_topic(self, topic: str) -> None:
        resp = await self.client.delete(f"/v1/topics/{quote(topic, safe='')}")
        assert resp.status == 200, await resp.text()

    async def route(self, topic: str, zone: str | None = None) -> dict[str, Any] | None:
        resp = await self.client.get(f"/v1/routes/{quote(topic, safe='')}", params={"zone": zone} if zone else None)
        if resp.status == 404:
            return None
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def cluster_group(self, name: str) -> dict[str, Any]:
        return (await (await self.client.get("/v1/cluster")).json())["brokerAddrTable"][name]


class Tcp(Front):
    kind = "tcp"

    def __init__(self, rmq: RemotingClient) -> None:
        self.rmq = rmq

    async def try_register(self, addr: str, broker_id: int, topics: dict[str, dict[str, Any]], *,
                           name: str = "broker-a", acting: bool | None = False, zone: str | None = None,
                           mappings: dict[str, dict[str, Any]] | None = None, counter: int = 1, state: int = 0,
                           filters: list[str] | None = None) -> tuple[int, str | None]:
        body = broker5.plain_body(topics, mappings, counter=counter, state_version=state, filters=filters)
        answer = await self.rmq.call(broker5.register(body, addr=addr, name=name, broker_id=broker_id, acting=acting,
                                                      zone=zone))
        return answer.code, answer.remark

    async def query_data_version(self, addr: str, broker_id: int, version: dict[str, int]) -> dict[str, Any]:
        # BrokerOuterAPI.needRegister: the identity in the header, the DataVersion as the body
        answer = await self.rmq.call(request(codes.QUERY_DATA_VERSION, {
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": str(broker_id)},
            orjson.dumps(version, option=orjson.OPT_SORT_KEYS)))
        assert answer.code == codes.SUCCESS, answer.remark
        stored = orjson.loads(answer.body) if answer.body else None
        return {"changed": answer.ext_fields["changed"] == "true", "stored": stored}

    async def unregister(self, addr: str, broker_id: int) -> None:
        answer = await self.rmq.call(request(codes.UNREGISTER_BROKER, {
            "clusterName": "DefaultCluster", "brokerAddr": addr, "brokerName": "broker-a", "brokerId": str(broker_id)}))
        assert answer.code == codes.SUCCESS, answer.remark

    async def delete_topic(self, topic: str) -> None:
        answer = await self.rmq.call(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))
        assert answer.code == codes.SUCCESS, answer.remark

    async def route(self, topic: str, zone: str | None = None, version: int = 479) -> dict[str, Any] | None:
        answer = await self.rmq.call(zone_route(topic, zone, version) if zone else
                                     request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, version=version))
        if answer.code == codes.TOPIC_NOT_EXIST:
            return None
        assert answer.code == codes.SUCCESS, answer.remark
        return codec.loads(answer.body)

    async def cluster_group(self, name: str) -> dict[str, Any]:
        answer = await self.rmq.call(request(codes.GET_BROKER_CLUSTER_INFO))
        return codec.loads(answer.body)["brokerAddrTable"][name]


def zone_route(topic: str, zone: str, version: int = 479) -> Command:
    """GET_ROUTEINFO_BY_TOPIC as a 5.3.3 client in zone mode sends it (-Drocketmq.zone.mode=true
    -Drocketmq.zone=<zone>: DynamicalExtFieldRPCHook adds both extFields)."""
    return request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "__ZONE_NAME": zone, "__ZONE_MODE": "true"},
                   version=version)


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


# ---------------------------------------------------------------------- RocketMQ 5.3.3's four rules
MASTER_B, MASTER_C, SLAVE_D = "10.0.1.1:10911", "10.0.2.1:10911", "10.0.3.2:10911"
NEW_MASTER = "10.0.0.9:10911"


async def zoned_groups(front: Front) -> None:
    """broker-a in zone-a, broker-b in zone-b (with a filter server), broker-c in ZONE-A,
    broker-d in zone-b with no master (its prime slave's QueueData), all serving T1."""
    await front.register(MASTER, 0, table("T1"), zone="zone-a")
    await front.register(MASTER_B, 0, table("T1"), name="broker-b", zone="zone-b", filters=["10.0.1.9:7000"])
    await front.register(MASTER_C, 0, table("T1"), name="broker-c", zone="ZONE-A")
    await front.register(SLAVE_D, 1, table("T1"), name="broker-d", zone="zone-b")


async def test_a_zone_mode_route_keeps_the_zones_groups_and_those_without_a_master(front: Front) -> None:
    await zoned_groups(front)
    route = await front.route("T1", zone="Zone-A")
    assert route is not None
    # in Java's order (docs/design.md, "Route order"), as the whole route lists them
    assert [d["brokerName"] for d in route["brokerDatas"]] == ["broker-d", "broker-c", "broker-a"]
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-d", "broker-c", "broker-a"]
    assert route["filterServerTable"] == {}
    whole = await front.route("T1")
    assert whole is not None and whole["filterServerTable"] == {MASTER_B: ["10.0.1.9:7000"]}


async def test_a_zone_mode_route_of_an_unknown_zone_has_no_broker(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), zone="zone-a")
    route = await front.route("T1", zone="zone-x")
    assert route is not None
    assert (route["brokerDatas"], route["queueDatas"]) == ([], [])


async def test_a_zone_mode_route_is_fastjsons_default_form_as_java_encodes_it_again(
        make_front: Callable[..., Awaitable[Front]]) -> None:
    front = await make_front("tcp")
    assert isinstance(front, Tcp)
    await zoned_groups(front)
    answer = await front.rmq.call(zone_route("T1", "zone-b"))
    assert answer.code == codes.SUCCESS
    assert answer.body == (
        b'{"brokerDatas":[{"brokerAddrs":{1:"10.0.3.2:10911"},"brokerName":"broker-d","cluster":"DefaultCluster",'
        b'"enableActingMaster":false,"zoneName":"zone-b"},{"brokerAddrs":{0:"10.0.1.1:10911"},"brokerName":"broker-b",'
        b'"cluster":"DefaultCluster","enableActingMaster":false,"zoneName":"zone-b"}],'
        b'"filterServerTable":{"10.0.1.1:10911":["10.0.1.9:7000"]},'
        b'"queueDatas":[{"brokerName":"broker-d","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},'
        b'{"brokerName":"broker-b","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')


async def test_a_cached_route_is_not_answered_whole_to_a_zone_mode_read(
        make_front: Callable[..., Awaitable[Front]]) -> None:
    front = await make_front("tcp")
    assert isinstance(front, Tcp)
    await zoned_groups(front)
    for _ in range(2):  # the second read is the cache's (answered as its bytes arrive)
        assert len((await front.route("T1"))["brokerDatas"]) == 4  # type: ignore[index]
    route = await front.route("T1", zone="zone-b")
    assert route is not None and [d["brokerName"] for d in route["brokerDatas"]] == ["broker-d", "broker-b"]


async def test_a_zone_name_without_zone_mode_gets_the_whole_route(make_front: Callable[..., Awaitable[Front]]) -> None:
    front = await make_front("tcp")
    assert isinstance(front, Tcp)
    await zoned_groups(front)
    for mode in (None, "false"):
        ext = {"topic": "T1", "__ZONE_NAME": "zone-b"} | ({"__ZONE_MODE": mode} if mode else {})
        answer = await front.rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, ext))
        assert len(orjson.loads(answer.body)["brokerDatas"]) == 4


async def test_a_blank_zone_is_a_bad_request(make_front: Callable[..., Awaitable[Front]]) -> None:
    front = await make_front("http")
    assert isinstance(front, Http)
    await front.register(MASTER, 0, table("T1"), zone="zone-a")
    resp = await front.client.get("/v1/routes/T1", params={"zone": " "})
    assert resp.status == 400 and (await resp.json())["error"] == "INVALID_REQUEST"


async def test_an_address_with_an_older_state_version_cannot_take_a_live_members_id(front: Front, r: Any) -> None:
    # after a controller's fail-over the new master registers with the new epoch; the old
    # master coming back with the old one is ignored and leaves the live table
    await front.register(NEW_MASTER, 0, table("T1"), state=2)
    status, _ = await front.try_register(MASTER, 0, table("T1"), state=1)
    assert status == SUCCESS[front.kind]
    assert addrs(await front.route("T1")) == {"0": NEW_MASTER}
    assert r.exists(f"{{rmq}}:live:{MASTER}") == 0


async def test_an_address_ignored_for_its_state_version_leaves_the_id_it_had(front: Front, r: Any) -> None:
    await front.register(NEW_MASTER, 0, table("T1"), state=2)
    await front.register(MASTER, 1, table("T1"), state=1)
    await front.register(MASTER, 0, table("T1"), state=1)  # a stale master's claim
    assert addrs(await front.route("T1")) == {"0": NEW_MASTER}
    assert r.exists(f"{{rmq}}:live:{MASTER}", f"{{rmq}}:member:{MASTER}") == 0


async def test_an_address_with_an_equal_state_version_takes_the_id(front: Front) -> None:
    await front.register(NEW_MASTER, 0, table("T1"), state=2)
    await front.register(MASTER, 0, table("T1"), state=2)
    assert addrs(await front.route("T1")) == {"0": MASTER}


async def test_a_data_version_whose_state_version_moved_has_changed(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"), counter=7, state=1)
    same = {"counter": 7, "stateVersion": 1, "timestamp": 1700000000000}
    assert await front.query_data_version(MASTER, 0, same) == {"changed": False, "stored": same}
    moved = {**same, "stateVersion": 2}
    assert (await front.query_data_version(MASTER, 0, moved))["changed"] is True


async def test_a_5x_registration_of_one_topic_from_an_id_the_group_lacks_is_refused(front: Front, r: Any) -> None:
    answer = await front.try_register(MASTER, 0, {"T1": broker5.topic_config("T1", 4, 4)})
    refused = {"http": (409, "REGISTRATION_REFUSED"), "tcp": (codes.SYSTEM_ERROR, "register broker failed")}
    assert answer == refused[front.kind]
    assert snapshot(r) == {}


async def test_a_5x_registration_of_one_topic_from_a_registered_id_is_taken(front: Front) -> None:
    await front.register(MASTER, 0, table("T1"))
    await front.register(MASTER, 0, {"T2": broker5.topic_config("T2", 4, 4)}, counter=2)
    assert addrs(await front.route("T2")) == {"0": MASTER}


async def test_a_4x_registration_of_one_topic_is_taken(front: Front) -> None:
    await front.register(MASTER, 0, {"T1": broker5.topic_config("T1", 4, 4)}, acting=None)
    assert addrs(await front.route("T1")) == {"0": MASTER}
