"""The periodic registration (the same body again, every 30 s: lua/register_unchanged.lua)
applies what RocketMQ 5.3.3's RouteInfoManager.registerBroker applies at every call,
whatever the topic config's dataVersion, as a full registration does.

What registerBroker applies at every call, and where it stands here:
- the group's zoneName and enableActingMaster (BrokerData.setZoneName, a null zone too, and
  setEnableActingMaster): group fields, the last registration's whichever member sent it.
  Members that disagree make them flip at each round: set here from what the body carried;
- the cluster the group is in (clusterAddrTable): a group is in one cluster here, its last
  registration's, which the unchanged path now moves as the full one does;
- a 5.x prime slave's QueueData (isTopicConfigChanged: a topic without the group's QueueData
  is written): its table must be the one in place, as a master's;
- the broker's address for its id, haServerAddr, heartbeatTimeoutMillis and the filter server
  list: the address's own, carried in the body's digest (a body that differs in any of them
  is not found by it) and unchanged since its full registration (the path checks the id's
  address): nothing to apply.

Two workers (HTTP and RocketMQ's protocol each) on the test redis-server; each registration is
sent to the first, every answer read on both over both fronts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from service.remoting import codec, codes
from tests.remoting import broker5
from tests.remoting.client import request
from tests.two_workers import Worker
from tests.waits import BOUND_S, until

pytestmark = pytest.mark.usefixtures("consistent")

MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"


async def groups(w: Worker) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """broker-a's BrokerData in T1's route and the cluster info, over HTTP then TCP."""
    route = await (await w.http.get("/v1/routes/T1")).json()
    cluster = await (await w.http.get("/v1/cluster")).json()
    out = [(route["brokerDatas"][0], cluster)]
    answer = await w.rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    info = await w.rmq.call(request(codes.GET_BROKER_CLUSTER_INFO))
    out.append((codec.loads(answer.body)["brokerDatas"][0], codec.loads(info.body)))
    return out


class Broker:
    """One member's registration, sent as the same bytes at every round over `kind`."""

    def __init__(self, w: Worker, kind: str, addr: str, broker_id: int, topics: list[str], *,
                 zone: str | None = None, acting: bool | None = False, cluster: str = "DefaultCluster") -> None:
        self.w, self.kind = w, kind
        configs = {t: broker5.topic_config(t, 4, 4) for t in ("broker-a", *topics)}
        if kind == "tcp":
            self.cmd = broker5.register(broker5.plain_body(configs), addr=addr, broker_id=broker_id, acting=acting,
                                        zone=zone, cluster=cluster)
        else:
            doc: dict[str, Any] = {
                "clusterName": cluster, "brokerAddr": addr, "brokerName": "broker-a", "brokerId": broker_id,
                "topicConfigSerializeWrapper": {"topicConfigTable": configs,
                                                "dataVersion": {"timestamp": 1700000000000, "counter": 1}}}
            if acting is not None:
                doc["enableActingMaster"] = acting
            if zone is not None:
                doc["zoneName"] = zone
            self.body = orjson.dumps(doc)

    async def register(self) -> None:
        if self.kind == "tcp":
            self.cmd.opaque += 1_000_000  # a new request, the same registration
            answer = await self.w.rmq.call(self.cmd)
            assert answer.code == codes.SUCCESS, answer.remark
        else:
            resp = await self.w.http.post("/v1/brokers/register", data=self.body,
                                          headers={"Content-Type": "application/json"})
            assert resp.status == 200, await resp.text()


async def rounds(workers: list[Worker], members: list[tuple[Broker, Any]], times: int = 2) -> int:
    """Each member registers in turn, `times` rounds after a first full one each; after each
    registration both workers must show, over both fronts, what `check` expects of the
    answers (the route's BrokerData, the cluster info). The periodic rounds' full
    registrations: 0 when each took the unchanged path."""
    for broker, _ in members:
        await broker.register()
    full = sum(w.registry.register_paths["full"] for w in workers)
    for _ in range(times):
        for broker, check in members:
            await broker.register()
            for w in workers:
                await until(lambda w=w, check=check: _all(check, w), BOUND_S, f"after {broker.kind} registration")
    return sum(w.registry.register_paths["full"] for w in workers) - full


async def _all(check: Any, w: Worker) -> bool:
    return all(check(group, cluster) for group, cluster in await groups(w))


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_a_groups_zone_flips_at_each_round_when_its_members_disagree(workers: list[Worker], kind: str) -> None:
    # RocketMQ 5.3.3: brokerData.setZoneName(zoneName) at every registration, a null one too
    master = Broker(workers[0], kind, MASTER, 0, ["T1"], zone="zone-a")
    slave = Broker(workers[0], kind, SLAVE, 1, ["T1"])
    full = await rounds(workers, [
        (master, lambda g, c: g.get("zoneName") == "zone-a" and c["brokerAddrTable"]["broker-a"].get("zoneName") == "zone-a"),
        (slave, lambda g, c: "zoneName" not in g and "zoneName" not in c["brokerAddrTable"]["broker-a"])])
    assert full == 0


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_a_groups_enable_acting_master_flips_at_each_round_when_its_members_disagree(
        workers: list[Worker], kind: str) -> None:
    # brokerData.setEnableActingMaster(!isOldVersionBroker && enableActingMaster): a 4.x slave
    # (no header) sets false
    master = Broker(workers[0], kind, MASTER, 0, ["T1"], acting=True)
    slave = Broker(workers[0], kind, SLAVE, 1, ["T1"], acting=None)
    full = await rounds(workers, [
        (master, lambda g, c: g.get("enableActingMaster") is True
         and c["brokerAddrTable"]["broker-a"].get("enableActingMaster") is True),
        (slave, lambda g, c: not g.get("enableActingMaster")
         and not c["brokerAddrTable"]["broker-a"].get("enableActingMaster"))])
    assert full == 0


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_a_groups_cluster_follows_each_rounds_registration_on_the_unchanged_path(
        workers: list[Worker], kind: str) -> None:
    # RocketMQ adds the group to each cluster a member names; here it is in one, the last
    # registration's, which the periodic registration now applies as the full one does
    master = Broker(workers[0], kind, MASTER, 0, ["T1"], cluster="cluster-x")
    slave = Broker(workers[0], kind, SLAVE, 1, ["T1"], cluster="cluster-y")
    full = await rounds(workers, [
        (master, lambda g, c: g["cluster"] == "cluster-x" and c["clusterAddrTable"] == {"cluster-x": ["broker-a"]}),
        (slave, lambda g, c: g["cluster"] == "cluster-y" and c["clusterAddrTable"] == {"cluster-y": ["broker-a"]})])
    assert full == 0


@pytest.mark.parametrize("kind", ["http", "tcp"])
async def test_a_slave_that_became_prime_writes_the_topics_its_group_lacks_at_its_next_round(
        workers: list[Worker], kind: str) -> None:
    # isTopicConfigChanged at every call: a topic without the group's QueueData is written by
    # the master or the prime slave (a 5.x slave with the group's smallest id, no master)
    master = Broker(workers[0], kind, MASTER, 0, ["T1"])
    slave = Broker(workers[0], kind, SLAVE, 1, ["T1", "T2"])
    await master.register()
    await slave.register()  # not prime: T2 is not written
    resp = await workers[0].http.post("/v1/brokers/unregister", json={
        "clusterName": "DefaultCluster", "brokerAddr": MASTER, "brokerName": "broker-a", "brokerId": 0})
    assert resp.status == 200
    for w in workers:
        assert (await w.http.get("/v1/routes/T2")).status == 404
    full = sum(w.registry.register_paths["full"] for w in workers)
    await slave.register()  # the same body, now from the prime slave
    for w in workers:
        await until(lambda w=w: _t2(w), BOUND_S, "T2 routed on both fronts")
    assert sum(w.registry.register_paths["full"] for w in workers) == full + 1
    await slave.register()  # its own table in place now: the unchanged path again
    assert sum(w.registry.register_paths["full"] for w in workers) == full + 1


async def _t2(w: Worker) -> bool:
    answer = await w.rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T2"}))
    return (await w.http.get("/v1/routes/T2")).status == 200 and answer.code == codes.SUCCESS


async def test_a_live_row_an_older_release_wrote_is_registered_in_full_once(workers: list[Worker], r: Any) -> None:
    # such a row does not say what the body carried for the group (docs/upgrade.md): the
    # unchanged path cannot set it again, so the body goes the full way, which keeps it
    master = Broker(workers[0], "http", MASTER, 0, ["T1"], zone="zone-a")
    await master.register()
    r.hdel(f"{{rmq}}:live:{MASTER}", "enableActingMaster", "zoneName")
    full = workers[0].registry.register_paths["full"]
    await master.register()
    assert workers[0].registry.register_paths["full"] == full + 1
    assert r.hmget(f"{{rmq}}:live:{MASTER}", "enableActingMaster", "zoneName") == ["0", "zone-a"]
    await master.register()
    assert workers[0].registry.register_paths["full"] == full + 1
