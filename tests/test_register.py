"""Registration: every rule of docs/design.md part 1, one test each."""

from __future__ import annotations

import json

import redis
from aiohttp.test_utils import TestClient

from service.keys import Keys
from tests.builders import registration, topic_config
from tests.calls import register, route
from tests.waits import BOUND_S, until

K = Keys()


async def test_register_adds_broker_name_to_its_cluster(client: TestClient, consistent: None) -> None:
    await register(client, registration(cluster="c1", name="broker-a"))
    await register(client, registration(cluster="c1", name="broker-b", addr="10.0.0.2:10911"))
    info = await (await client.get("/v1/cluster")).json()
    assert info["clusterAddrTable"] == {"c1": ["broker-b", "broker-a"]}  # as Java's HashSet iterates them


async def test_register_creates_broker_data_with_id_to_address(client: TestClient, consistent: None) -> None:
    await register(client, registration(addr="10.0.0.1:10911", broker_id=0))
    await register(client, registration(addr="10.0.0.2:10911", broker_id=1))
    info = await (await client.get("/v1/cluster")).json()
    assert info["brokerAddrTable"]["broker-a"] == {
        "cluster": "DefaultCluster", "brokerName": "broker-a",
        "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
    }


async def test_promoted_slave_keeps_one_record_per_address(client: TestClient, consistent: None) -> None:
    await register(client, registration(addr="10.0.0.1:10911", broker_id=0))
    await register(client, registration(addr="10.0.0.2:10911", broker_id=1))
    # the master goes; its slave is promoted at the same address with id 0
    await register(client, registration(addr="10.0.0.2:10911", broker_id=0, version=2))
    info = await (await client.get("/v1/cluster")).json()
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "10.0.0.2:10911"}


async def test_id_taken_by_a_new_address_forgets_the_old_address(client: TestClient, r: redis.Redis, consistent: None) -> None:
    await register(client, registration(addr="10.0.0.1:10911", broker_id=0))
    await register(client, registration(addr="10.0.0.9:10911", broker_id=0))
    assert not r.exists(K.live("10.0.0.1:10911"))
    assert r.zscore(K.expiry, "10.0.0.1:10911") is None


async def test_master_topic_configs_become_queue_data(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics={"T1": topic_config("T1", read=8, write=4, perm=6, sys_flag=0)}))
    assert (await route(client, "T1"))["queueDatas"] == [
        {"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
    ]


async def test_slave_never_writes_queue_data(client: TestClient, consistent: None) -> None:
    await register(client, registration(addr="10.0.0.2:10911", broker_id=1, topics=["OnlyOnSlave"]))
    assert await route(client, "OnlyOnSlave") is None
    topics = await (await client.get("/v1/topics")).json()
    assert topics["topicList"] == []


async def test_unchanged_data_version_does_not_rewrite_queue_data(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics={"T1": topic_config("T1", write=4)}, version=1))
    await register(client, registration(topics={"T1": topic_config("T1", write=16)}, version=1))
    assert (await route(client, "T1"))["queueDatas"][0]["writeQueueNums"] == 4


async def test_changed_data_version_replaces_queue_data(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics={"T1": topic_config("T1", write=4)}, version=1))
    await register(client, registration(topics={"T1": topic_config("T1", write=16)}, version=2))
    assert (await route(client, "T1"))["queueDatas"][0]["writeQueueNums"] == 16


async def test_new_data_version_rewrites_only_the_queue_data_that_differ(client: TestClient, r: redis.Redis,
                                                                          consistent: None) -> None:
    topics = {t: topic_config(t, write=4) for t in ("T1", "T2", "T3")}
    await register(client, registration(topics=topics, version=1))
    r.config_set("notify-keyspace-events", "Kh")
    events = r.pubsub()
    events.psubscribe(f"__keyspace@*__:{K.tag}:queue:*")
    try:
        events.get_message(timeout=1)  # the subscription's confirmation
        await register(client, registration(topics={**topics, "T2": topic_config("T2", write=16)}, version=2))
        written = []
        while (message := events.get_message(timeout=0.5)) is not None:
            written.append(message["channel"].split(":queue:", 1)[1])
    finally:
        events.close()
        r.config_set("notify-keyspace-events", "")
    assert written == ["T2:broker-a"]
    assert (await route(client, "T2"))["queueDatas"][0]["writeQueueNums"] == 16


async def test_wiped_write_permission_comes_back_with_a_new_data_version(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics={"T1": topic_config("T1", perm=6)}, version=1))
    await client.post("/v1/brokers/broker-a/wipe-write-perm")
    await register(client, registration(topics={"T1": topic_config("T1", perm=6)}, version=2))
    assert (await route(client, "T1"))["queueDatas"][0]["perm"] == 6


async def test_deleted_route_returns_with_next_unchanged_registration(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics=["T1"], version=1))
    assert (await client.delete("/v1/topics/T1")).status == 200
    assert await route(client, "T1") is None
    await register(client, registration(topics=["T1"], version=1))
    assert await route(client, "T1") is not None


async def test_new_topic_in_unchanged_version_is_added(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics=["T1"], version=1))
    await register(client, registration(topics=["T1", "T2"], version=1))
    assert await route(client, "T2") is not None


async def test_id_without_address_counts_as_first_registration(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics={"T1": topic_config("T1", write=4)}, broker_id=0, version=1))
    # demoted at the same address (id 0 is now empty), then master again with the same version
    await register(client, registration(topics={"T1": topic_config("T1", write=4)}, broker_id=1, version=1))
    await register(client, registration(topics={"T1": topic_config("T1", write=32)}, broker_id=0, version=1))
    assert (await route(client, "T1"))["queueDatas"][0]["writeQueueNums"] == 32


async def test_topics_absent_from_config_stay_by_default(client: TestClient, consistent: None) -> None:
    await register(client, registration(topics=["T1", "T2"], version=1))
    await register(client, registration(topics=["T1"], version=2))
    assert await route(client, "T2") is not None


async def test_topics_absent_from_config_go_when_configured(make_client, consistent: None) -> None:
    client = await make_client(delete_topic_with_broker_registration=True)
    await register(client, registration(topics=["T1", "T2"], version=1))
    await register(client, registration(topics=["T1"], version=2))
    assert await route(client, "T2") is None
    assert await route(client, "T1") is not None


async def test_live_row_carries_redis_time_and_a_ttl_a_minute_past_the_timeout(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(timeout_ms=30_000))
    row = r.hgetall(K.live("10.0.0.1:10911"))
    seconds, micros = r.time()
    assert abs(int(row["lastUpdateTimestamp"]) - (seconds * 1000 + micros // 1000)) < 2_000
    assert row["heartbeatTimeoutMillis"] == "30000"
    assert 88_000 < r.pttl(K.live("10.0.0.1:10911")) <= 90_000  # a backstop: a scan removes it at its deadline
    assert r.zscore(K.expiry, "10.0.0.1:10911") == int(row["lastUpdateTimestamp"]) + 30_000


async def test_default_timeout_is_the_configured_one(make_client, r: redis.Redis) -> None:
    client = await make_client(broker_timeout_ms=45_000)
    await register(client, registration())
    assert r.hget(K.live("10.0.0.1:10911"), "heartbeatTimeoutMillis") == "45000"


async def test_filter_servers_absent_leave_empty_remove_nonempty_replace(client: TestClient, consistent: None) -> None:
    await register(client, registration(filters=["10.0.0.1:30000"]))
    assert (await route(client, "TopicTest"))["filterServerTable"] == {"10.0.0.1:10911": ["10.0.0.1:30000"]}
    await register(client, registration())  # no filterServerList: left as it is
    assert (await route(client, "TopicTest"))["filterServerTable"] == {"10.0.0.1:10911": ["10.0.0.1:30000"]}
    await register(client, registration(filters=["10.0.0.1:30001", "10.0.0.1:30002"]))
    assert (await route(client, "TopicTest"))["filterServerTable"] == {"10.0.0.1:10911": ["10.0.0.1:30001", "10.0.0.1:30002"]}
    await register(client, registration(filters=[]))
    assert (await route(client, "TopicTest"))["filterServerTable"] == {}


async def test_slave_answer_names_its_live_master(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", broker_id=0, ha="10.0.0.1:10912"))
    answer = await register(client, registration(addr="10.0.0.2:10911", broker_id=1))
    assert answer["masterAddr"] == "10.0.0.1:10911"
    assert answer["haServerAddr"] == "10.0.0.1:10912"


async def test_slave_answer_is_null_without_a_master(client: TestClient) -> None:
    answer = await register(client, registration(addr="10.0.0.2:10911", broker_id=1))
    assert answer["masterAddr"] is None and answer["haServerAddr"] is None


async def test_slave_answer_is_null_when_master_live_row_expired(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(addr="10.0.0.1:10911", broker_id=0))
    r.delete(K.live("10.0.0.1:10911"))  # what the key TTL does at the master's deadline
    answer = await register(client, registration(addr="10.0.0.2:10911", broker_id=1))
    assert answer["masterAddr"] is None and answer["haServerAddr"] is None


async def test_master_answer_has_no_master_address(client: TestClient) -> None:
    answer = await register(client, registration(broker_id=0))
    assert answer["masterAddr"] is None and answer["haServerAddr"] is None


async def test_register_answer_carries_order_topic_config(client: TestClient) -> None:
    assert (await client.put("/v1/kv/ORDER_TOPIC_CONFIG/TopicTest", json={"value": "broker-a:4"})).status == 200
    answer = await register(client, registration())
    assert answer["kvTable"] == {"TopicTest": "broker-a:4"}


async def test_address_moving_to_another_group_leaves_the_old_one(client: TestClient, consistent: None) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="broker-a", topics=["T1"]))
    await register(client, registration(addr="10.0.0.1:10911", name="broker-b", topics=["T2"]))
    info = await (await client.get("/v1/cluster")).json()
    assert list(info["brokerAddrTable"]) == ["broker-b"]
    assert await route(client, "T1") is None


async def test_group_moving_cluster_is_listed_in_the_new_cluster_only(client: TestClient, consistent: None) -> None:
    await register(client, registration(cluster="c1"))
    await register(client, registration(cluster="c2", version=2))
    info = await (await client.get("/v1/cluster")).json()
    assert info["clusterAddrTable"] == {"c2": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["cluster"] == "c2"


async def test_unchanged_reregistration_does_not_bump_the_route_version(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(version=1))
    before = r.get(K.version)
    await register(client, registration(version=1))
    assert r.get(K.version) == before


async def test_a_visible_change_bumps_the_version_and_publishes_its_change_record(client: TestClient, r: redis.Redis) -> None:
    pubsub = r.pubsub()
    pubsub.subscribe(K.changes)
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    await register(client, registration())
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert message is not None and r.get(K.version) == "1"
    seq, _time, *tags = json.loads(message["data"])
    assert seq == "1" and sorted(tags) == ["g:broker-a", "t:TopicTest"]
    assert r.lrange(K.changelog, 0, -1) == [message["data"]]


async def test_identical_reregistration_takes_the_fast_path_and_refreshes_liveness(client: TestClient, r: redis.Redis) -> None:
    from service.http.app_keys import REGISTRY

    reg = registration(topics=[f"T{i}" for i in range(50)], timeout_ms=30_000)
    await register(client, reg)
    r.hset(K.live("10.0.0.1:10911"), "lastUpdateTimestamp", 1)
    await register(client, reg)
    assert client.app[REGISTRY].operations["register_unchanged"] == 1
    assert int(r.hget(K.live("10.0.0.1:10911"), "lastUpdateTimestamp")) > 1
    assert r.pttl(K.live("10.0.0.1:10911")) > 29_000


async def test_fast_path_answer_carries_current_kv_and_master(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", broker_id=0))
    slave = registration(addr="10.0.0.2:10911", broker_id=1)
    await register(client, slave)
    await client.put("/v1/kv/ORDER_TOPIC_CONFIG/TopicTest", json={"value": "broker-a:8"})
    answer = await register(client, slave)
    assert answer == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912",
                      "kvTable": {"TopicTest": "broker-a:8"}}


async def test_identical_body_after_expiry_registers_in_full(client: TestClient, r: redis.Redis, consistent: None) -> None:
    from service.http.app_keys import REGISTRY, SCANNER

    reg = registration(timeout_ms=200)
    await register(client, reg)
    await until(client.app[SCANNER].scan_once, BOUND_S, "a scan removing the expired broker")
    assert await route(client, "TopicTest") is None
    await register(client, reg)
    assert client.app[REGISTRY].operations["register_unchanged"] == 0
    assert await route(client, "TopicTest") is not None


async def test_identical_body_after_a_wipe_keeps_the_wiped_permission(client: TestClient) -> None:
    # as the full path would: an unchanged dataVersion does not rewrite existing QueueData
    reg = registration()
    await register(client, reg)
    await client.post("/v1/brokers/broker-a/wipe-write-perm")
    await register(client, reg)
    assert (await route(client, "TopicTest"))["queueDatas"][0]["perm"] == 4
