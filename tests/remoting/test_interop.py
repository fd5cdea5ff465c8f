"""Both fronts on one table set: what one writes, the other reads (and the tables stay whole)."""

from __future__ import annotations


import orjson
import pytest

from service.remoting import codec, codes
from tests.builders import identity as http_identity
from tests.builders import registration
from tests.calls import register as http_register
from tests.calls import route as http_route
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import register, route
from tests.waits import BOUND_S, until

pytestmark = pytest.mark.usefixtures("consistent")


def normal(doc: dict) -> dict:
    """A route as HTTP writes it and as TCP writes it, compared on what both carry."""
    return {
        "orderTopicConf": doc.get("orderTopicConf"),
        "queueDatas": doc["queueDatas"],
        "brokerDatas": [{k: b[k] for k in ("cluster", "brokerName", "brokerAddrs")} for b in doc["brokerDatas"]],
        "filterServerTable": doc["filterServerTable"],
    }


async def tcp_route(rmq: RemotingClient, topic: str, version: int = 479) -> dict | None:
    answer = await rmq.call(route(topic, version=version))
    if answer.code == codes.TOPIC_NOT_EXIST:
        return None
    assert answer.code == 0, answer.remark
    return codec.loads(answer.body)


async def test_registered_over_tcp_read_over_http(worker: Worker, rmq: RemotingClient) -> None:
    await rmq.call(register(registration(topics=["A", "B"], filters=["10.0.0.9:7000"])))
    await rmq.call(register(registration(addr="10.0.0.2:10911", broker_id=1)))
    await rmq.call(register(registration(addr="10.0.0.3:10911", name="broker-b", topics=["A"])))
    for topic in ("A", "B"):
        over_http = await http_route(worker.http, topic)
        assert over_http is not None
        for version in (63, 479):
            assert normal(await tcp_route(rmq, topic, version)) == normal(over_http)
    cluster = await (await worker.http.get("/v1/cluster")).json()
    tcp_cluster = codec.loads((await rmq.call(request(codes.GET_BROKER_CLUSTER_INFO))).body)
    assert tcp_cluster["clusterAddrTable"] == cluster["clusterAddrTable"]
    assert {n: normal({"queueDatas": [], "filterServerTable": {}, "brokerDatas": [b]})
            for n, b in tcp_cluster["brokerAddrTable"].items()} == \
           {n: normal({"queueDatas": [], "filterServerTable": {}, "brokerDatas": [b]})
            for n, b in cluster["brokerAddrTable"].items()}


async def test_registered_over_http_read_over_tcp(worker: Worker, rmq: RemotingClient) -> None:
    reg = registration(topics=["A"])
    await http_register(worker.http, reg)
    assert normal(await tcp_route(rmq, "A")) == normal(await http_route(worker.http, "A"))
    # unregister over HTTP: the TCP answer (cached a moment ago) follows
    resp = await worker.http.post("/v1/brokers/unregister", json=http_identity(reg))
    assert resp.status == 200
    assert await tcp_route(rmq, "A") is None


async def test_kv_both_ways(worker: Worker, rmq: RemotingClient) -> None:
    await rmq.call(request(codes.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}))
    assert await (await worker.http.get("/v1/kv/NS/k")).json() == {"value": "v"}
    await worker.http.put("/v1/kv/NS/j", json={"value": "w"})
    answer = await rmq.call(request(codes.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
    assert orjson.loads(answer.body) == {"table": {"k": "v", "j": "w"}}
    await worker.http.delete("/v1/kv/NS/k")
    assert (await rmq.call(request(codes.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}))).code == codes.QUERY_NOT_FOUND


async def test_two_workers(make_worker) -> None:
    a: Worker = await make_worker()
    b: Worker = await make_worker()
    ca, cb = await RemotingClient.connect(a.port), await RemotingClient.connect(b.port)
    assert await tcp_route(cb, "TopicTest") is None  # b caches the miss
    await ca.call(register())
    # b's cache learns of the change by pub/sub, or by its poll within 1 s
    found = await until(lambda: tcp_route(cb, "TopicTest"), BOUND_S, "TopicTest routed by b after a's registration")
    assert normal(found) == normal(await http_route(b.http, "TopicTest"))
    await cb.call(request(codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert (await http_route(a.http, "TopicTest"))["queueDatas"][0]["perm"] == 4
    await ca.close()
    await cb.close()
