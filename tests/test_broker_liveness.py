"""Heartbeat, query-data-version and unregister."""

from __future__ import annotations

import asyncio

import redis
from aiohttp.test_utils import TestClient

from service.keys import Keys
from tests.builders import identity, registration
from tests.calls import register, route
from tests.tables import snapshot
from tests.waits import BOUND_S, until

K = Keys()


async def test_heartbeat_of_unknown_broker_is_broker_not_found(client: TestClient) -> None:
    resp = await client.post("/v1/brokers/heartbeat", json=identity(registration()))
    assert resp.status == 404
    assert (await resp.json())["error"] == "BROKER_NOT_FOUND"


async def test_heartbeat_refreshes_timestamp_and_ttl(client: TestClient, r: redis.Redis) -> None:
    reg = registration(timeout_ms=10_000)
    await register(client, reg)
    first = int(r.hget(K.live(reg["brokerAddr"]), "lastUpdateTimestamp"))
    await asyncio.sleep(0.3)  # time must pass: the heartbeat's timestamp is asserted 250 ms on
    resp = await client.post("/v1/brokers/heartbeat", json=identity(reg))
    assert resp.status == 200 and await resp.json() == {}
    second = int(r.hget(K.live(reg["brokerAddr"]), "lastUpdateTimestamp"))
    assert second >= first + 250
    assert r.pttl(K.live(reg["brokerAddr"])) > 9_500
    assert r.zscore(K.expiry, reg["brokerAddr"]) == second + 10_000


async def test_heartbeat_after_live_row_expired_asks_for_full_registration(client: TestClient, r: redis.Redis) -> None:
    reg = registration()
    await register(client, reg)
    r.delete(K.live(reg["brokerAddr"]))
    assert (await client.post("/v1/brokers/heartbeat", json=identity(reg))).status == 404


async def test_heartbeat_with_another_identity_is_not_found(client: TestClient) -> None:
    reg = registration()
    await register(client, reg)
    other = {**identity(reg), "brokerName": "broker-z"}
    assert (await client.post("/v1/brokers/heartbeat", json=other)).status == 404


async def test_query_data_version_unchanged(client: TestClient) -> None:
    reg = registration(version=7)
    await register(client, reg)
    body = {**identity(reg), "dataVersion": {"timestamp": 1700000000000, "counter": 7}}
    answer = await (await client.post("/v1/brokers/query-data-version", json=body)).json()
    assert answer == {"changed": False, "nameServerDataVersion": {"timestamp": 1700000000000, "counter": 7}}


async def test_query_data_version_changed(client: TestClient) -> None:
    reg = registration(version=7)
    await register(client, reg)
    body = {**identity(reg), "dataVersion": {"timestamp": 1700000000000, "counter": 8}}
    answer = await (await client.post("/v1/brokers/query-data-version", json=body)).json()
    assert answer["changed"] is True
    assert answer["nameServerDataVersion"] == {"timestamp": 1700000000000, "counter": 7}


async def test_query_data_version_of_unknown_broker_is_changed_with_null(client: TestClient) -> None:
    body = {**identity(registration()), "dataVersion": {"timestamp": 1, "counter": 1}}
    answer = await (await client.post("/v1/brokers/query-data-version", json=body)).json()
    assert answer == {"changed": True, "nameServerDataVersion": None}


async def test_query_data_version_refreshes_liveness(client: TestClient, r: redis.Redis) -> None:
    reg = registration()
    await register(client, reg)
    first = int(r.hget(K.live(reg["brokerAddr"]), "lastUpdateTimestamp"))
    await asyncio.sleep(0.2)  # time must pass: the query's timestamp is asserted 150 ms on
    body = {**identity(reg), "dataVersion": {"timestamp": 1700000000000, "counter": 1}}
    await client.post("/v1/brokers/query-data-version", json=body)
    assert int(r.hget(K.live(reg["brokerAddr"]), "lastUpdateTimestamp")) >= first + 150


async def test_unregister_removes_live_and_filter_entries(client: TestClient, r: redis.Redis, consistent: None) -> None:
    master = registration(addr="10.0.0.1:10911", broker_id=0)
    slave = registration(addr="10.0.0.2:10911", broker_id=1, filters=["10.0.0.2:30000"])
    await register(client, master)
    await register(client, slave)
    assert (await client.post("/v1/brokers/unregister", json=identity(slave))).status == 200
    assert not r.exists(K.live("10.0.0.2:10911"))
    assert not r.exists(K.filter("10.0.0.2:10911"))
    assert (await route(client, "TopicTest"))["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}


async def test_late_unregister_does_not_remove_new_master_with_same_id(client: TestClient, consistent: None) -> None:
    old = registration(addr="10.0.0.1:10911", broker_id=0)
    new = registration(addr="10.0.0.9:10911", broker_id=0)
    await register(client, old)
    await register(client, new)
    await client.post("/v1/brokers/unregister", json=identity(old))
    assert (await route(client, "TopicTest"))["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.9:10911"}


async def test_queue_data_stays_while_a_group_member_lives(client: TestClient, consistent: None) -> None:
    master = registration(addr="10.0.0.1:10911", broker_id=0, topics=["T1"])
    slave = registration(addr="10.0.0.2:10911", broker_id=1)
    await register(client, master)
    await register(client, slave)
    await client.post("/v1/brokers/unregister", json=identity(master))
    r1 = await route(client, "T1")
    assert r1["queueDatas"][0]["brokerName"] == "broker-a"
    assert r1["brokerDatas"][0]["brokerAddrs"] == {"1": "10.0.0.2:10911"}


async def test_last_member_unregistering_cascades_to_cluster_and_topics(client: TestClient, r: redis.Redis, consistent: None) -> None:
    a = registration(addr="10.0.0.1:10911", name="broker-a", cluster="c1", topics=["Shared", "OnlyA"])
    b = registration(addr="10.0.0.2:10911", name="broker-b", cluster="c2", topics=["Shared"])
    await register(client, a)
    await register(client, b)
    await client.post("/v1/brokers/unregister", json=identity(a))
    info = await (await client.get("/v1/cluster")).json()
    assert info["clusterAddrTable"] == {"c2": ["broker-b"]}
    assert list(info["brokerAddrTable"]) == ["broker-b"]
    assert await route(client, "OnlyA") is None
    assert [q["brokerName"] for q in (await route(client, "Shared"))["queueDatas"]] == ["broker-b"]
    assert (await (await client.get("/v1/topics")).json())["topicList"] == ["Shared"]


async def test_a_master_dropping_more_topics_than_one_variadic_slice_drops_them_whole(
        make_client, r: redis.Redis, consistent: None) -> None:
    # the scripts write and delete in slices of a few thousand values (Lua's unpack limit)
    client = await make_client(delete_topic_with_broker_registration=True)
    many = [f"Bulk{i:05d}" for i in range(9_000)]
    a = registration(addr="10.0.0.1:10911", name="broker-a", topics=[*many, "Kept"])
    await register(client, a)
    await register(client, registration(addr="10.0.0.2:10911", name="broker-b", topics=many[:10]))
    assert r.scard(K.topics) == 9_001 and r.hlen(K.broker_topics("broker-a")) == 9_001
    await register(client, registration(addr="10.0.0.1:10911", name="broker-a", topics=["Kept"], version=2))
    assert sorted(r.smembers(K.topics)) == sorted([*many[:10], "Kept"])
    assert r.hkeys(K.broker_topics("broker-a")) == ["Kept"]
    assert [q["brokerName"] for q in (await route(client, many[0]))["queueDatas"]] == ["broker-b"]


async def test_a_big_groups_unregistration_takes_its_routes_at_once_and_its_queues_after(
        client: TestClient, r: redis.Redis, consistent: None) -> None:
    many = [f"Bulk{i:05d}" for i in range(3_000)]
    a = registration(addr="10.0.0.1:10911", name="broker-a", topics=many)
    await register(client, a)
    await register(client, registration(addr="10.0.0.2:10911", name="broker-b", topics=many[:10]))
    await client.post("/v1/brokers/unregister", json=identity(a))
    assert [q["brokerName"] for q in (await route(client, many[0]))["queueDatas"]] == ["broker-b"]
    assert await route(client, many[-1]) is None
    await until(lambda: not r.exists(K.broker_topics("broker-a")), BOUND_S, "the group's queues collected")
    assert sorted(r.smembers(K.topics)) == many[:10] and not r.exists(K.broker("broker-a"))


async def test_unregister_of_unknown_broker_succeeds_and_changes_nothing(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration())
    before = snapshot(r)
    resp = await client.post("/v1/brokers/unregister", json=identity(registration(addr="10.9.9.9:1", name="ghost")))
    assert resp.status == 200 and await resp.json() == {}
    assert snapshot(r) == before
