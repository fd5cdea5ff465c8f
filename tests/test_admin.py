"""Operator actions: write permission, topic deletion, KV config."""

from __future__ import annotations

from aiohttp.test_utils import TestClient

from tests.builders import registration, topic_config
from tests.calls import register, route


async def test_wipe_write_perm_clears_the_write_bit_and_counts_topics(client: TestClient, consistent: None) -> None:
    topics = {"T1": topic_config("T1", perm=6), "T2": topic_config("T2", perm=7), "T3": topic_config("T3", perm=4)}
    await register(client, registration(topics=topics))
    resp = await client.post("/v1/brokers/broker-a/wipe-write-perm")
    assert await resp.json() == {"wipeTopicCount": 3}
    perms = {t: (await route(client, t))["queueDatas"][0]["perm"] for t in topics}
    assert perms == {"T1": 4, "T2": 5, "T3": 4}


async def test_add_write_perm_sets_read_write(client: TestClient) -> None:
    await register(client, registration(topics={"T1": topic_config("T1", perm=4), "T2": topic_config("T2", perm=2)}))
    resp = await client.post("/v1/brokers/broker-a/add-write-perm")
    assert await resp.json() == {"addTopicCount": 2}
    assert [(await route(client, t))["queueDatas"][0]["perm"] for t in ("T1", "T2")] == [6, 6]


async def test_write_perm_of_unknown_broker_touches_nothing(client: TestClient) -> None:
    await register(client, registration())
    assert await (await client.post("/v1/brokers/nobody/wipe-write-perm")).json() == {"wipeTopicCount": 0}
    assert (await route(client, "TopicTest"))["queueDatas"][0]["perm"] == 6


async def test_wipe_touches_only_the_named_broker(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="a", topics=["T"]))
    await register(client, registration(addr="10.0.0.2:10911", name="b", topics=["T"]))
    await client.post("/v1/brokers/a/wipe-write-perm")
    assert {q["brokerName"]: q["perm"] for q in (await route(client, "T"))["queueDatas"]} == {"a": 4, "b": 6}


async def test_delete_topic_removes_its_route(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics=["T1", "T2"]))
    assert await (await client.delete("/v1/topics/T1")).json() == {}
    assert await route(client, "T1") is None
    assert (await (await client.get("/v1/topics")).json())["topicList"] == ["T2"]


async def test_delete_topic_in_a_cluster_keeps_other_clusters_queues(client: TestClient, consistent: None) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="a", cluster="c1", topics=["T"]))
    await register(client, registration(addr="10.0.0.2:10911", name="b", cluster="c2", topics=["T"]))
    await client.delete("/v1/topics/T?clusterName=c1")
    assert [q["brokerName"] for q in (await route(client, "T"))["queueDatas"]] == ["b"]
    await client.delete("/v1/topics/T?clusterName=c2")
    assert await route(client, "T") is None
    assert (await (await client.get("/v1/topics")).json())["topicList"] == []


async def test_kv_put_then_get(client: TestClient) -> None:
    assert (await client.put("/v1/kv/ns1/k1", json={"value": "v1"})).status == 200
    assert await (await client.get("/v1/kv/ns1/k1")).json() == {"value": "v1"}


async def test_kv_get_of_missing_key_is_not_found(client: TestClient) -> None:
    await client.put("/v1/kv/ns1/k1", json={"value": "v1"})
    resp = await client.get("/v1/kv/ns1/other")
    assert resp.status == 404
    assert await resp.json() == {"error": "KV_NOT_FOUND", "message": "No config item, Namespace: ns1 Key: other"}


async def test_kv_delete_of_missing_key_succeeds(client: TestClient) -> None:
    resp = await client.delete("/v1/kv/ns1/never")
    assert resp.status == 200 and await resp.json() == {}


async def test_kv_namespace_never_created_is_not_found(client: TestClient) -> None:
    resp = await client.get("/v1/kv/nothing")
    assert resp.status == 404 and (await resp.json())["error"] == "KV_NOT_FOUND"


async def test_kv_namespace_emptied_lists_as_empty_table(client: TestClient) -> None:
    await client.put("/v1/kv/ns1/k1", json={"value": "v1"})
    await client.put("/v1/kv/ns1/k2", json={"value": "v2"})
    assert await (await client.get("/v1/kv/ns1")).json() == {"table": {"k1": "v1", "k2": "v2"}}
    await client.delete("/v1/kv/ns1/k1")
    await client.delete("/v1/kv/ns1/k2")
    assert await (await client.get("/v1/kv/ns1")).json() == {"table": {}}


async def test_kv_put_replaces_the_value(client: TestClient) -> None:
    await client.put("/v1/kv/ns1/k1", json={"value": "v1"})
    await client.put("/v1/kv/ns1/k1", json={"value": "v2"})
    assert await (await client.get("/v1/kv/ns1/k1")).json() == {"value": "v2"}
