"""Route query, cluster info and the topic lists."""

from __future__ import annotations

import redis
from aiohttp.test_utils import TestClient

from service.javaorder import concurrent_capacity, copied_capacity, grown_capacity, java_order
from service.keys import Keys
from tests.builders import identity, registration, topic_config
from tests.calls import register, route

K = Keys()


async def test_route_of_unknown_topic_is_topic_not_exist(client: TestClient) -> None:
    resp = await client.get("/v1/routes/Nope")
    assert resp.status == 404
    assert await resp.json() == {
        "error": "TOPIC_NOT_EXIST", "message": "No topic route info in name server for the topic: Nope"}


async def test_route_lists_groups_in_javas_hash_order(client: TestClient) -> None:
    # two clusters' groups, 14 of them: past 12 the topic's HashMap has 32 bins
    names = [f"{c}-broker-{i}" for i in range(7) for c in ("cluster-y", "cluster-x")]
    for i, name in enumerate(names):
        await register(client, registration(addr=f"10.0.0.{i + 1}:10911", name=name, cluster=name[:9], topics=["T1"]))
    answer = await route(client, "T1")
    in_map = java_order(names, grown_capacity(len(names)))
    assert [q["brokerName"] for q in answer["queueDatas"]] == in_map != sorted(names)
    assert [b["brokerName"] for b in answer["brokerDatas"]] == java_order(in_map, copied_capacity(len(names)))
    assert answer["orderTopicConf"] is None and answer["filterServerTable"] == {}


THIRTEEN = [registration(addr=f"10.0.1.{i + 1}:10911", name=f"broker-{i}", topics=["T1"]) for i in range(13)]
TWELVE = [reg["brokerName"] for reg in THIRTEEN[:12]]


async def test_a_topic_that_held_more_groups_keeps_the_table_it_grew_to(client: TestClient) -> None:
    # Java's HashMap never shrinks: 13 groups grew it to 32 bins, and 12 stay in those
    for reg in THIRTEEN:
        await register(client, reg)
    assert (await client.post("/v1/brokers/unregister", json=identity(THIRTEEN[-1]))).status == 200
    answer = await route(client, "T1")
    assert [q["brokerName"] for q in answer["queueDatas"]] == java_order(TWELVE, 32) != java_order(TWELVE, 16)
    assert [b["brokerName"] for b in answer["brokerDatas"]] == java_order(TWELVE, 32)  # HashSet(12 names): 32 too


async def test_a_topic_gone_and_back_starts_again_at_sixteen_bins(client: TestClient) -> None:
    for reg in THIRTEEN:
        await register(client, reg)
    for reg in THIRTEEN:
        assert (await client.post("/v1/brokers/unregister", json=identity(reg))).status == 200
    for reg in THIRTEEN[:12]:
        await register(client, reg)
    answer = await route(client, "T1")
    assert [q["brokerName"] for q in answer["queueDatas"]] == java_order(TWELVE, 16)
    assert [b["brokerName"] for b in answer["brokerDatas"]] == java_order(java_order(TWELVE, 16), 32)


async def test_route_lists_groups_of_one_bin_as_they_came(client: TestClient) -> None:
    # "Aa" and "BB" share String.hashCode, so these two names fall in one bin
    for addr, name in (("10.0.0.1:10911", "broker-BB"), ("10.0.0.2:10911", "broker-Aa")):
        await register(client, registration(addr=addr, name=name, topics=["T1"]))
    answer = await route(client, "T1")
    assert [q["brokerName"] for q in answer["queueDatas"]] == ["broker-BB", "broker-Aa"]
    assert [b["brokerName"] for b in answer["brokerDatas"]] == ["broker-BB", "broker-Aa"]


async def test_a_queue_data_an_older_release_wrote_comes_first_in_its_bin(client: TestClient, r: redis.Redis) -> None:
    # rows written before the seq field existed have none: they are the older ones
    for addr, name in (("10.0.0.1:10911", "broker-BB"), ("10.0.0.2:10911", "broker-Aa")):
        await register(client, registration(addr=addr, name=name, topics=["T1", "T2"]))
    r.hdel(K.queue("T1", "broker-Aa"), "seq")
    assert [q["brokerName"] for q in (await route(client, "T1"))["queueDatas"]] == ["broker-Aa", "broker-BB"]
    assert [q["brokerName"] for q in (await route(client, "T2"))["queueDatas"]] == ["broker-BB", "broker-Aa"]


async def test_a_group_changing_its_queue_data_keeps_its_place(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="broker-BB", topics=["T1"]))
    await register(client, registration(addr="10.0.0.2:10911", name="broker-Aa", topics=["T1"]))
    await register(client, registration(addr="10.0.0.1:10911", name="broker-BB", version=2,
                                        topics={"T1": topic_config("T1", read=8, write=8)}))
    assert [q["brokerName"] for q in (await route(client, "T1"))["queueDatas"]] == ["broker-BB", "broker-Aa"]


async def test_a_group_that_left_and_came_back_comes_after_those_that_stayed(client: TestClient) -> None:
    # one bin, as in the test above: the one that came back is put last, as Java's HashMap does
    first = registration(addr="10.0.0.1:10911", name="broker-Aa", topics=["T1"])
    await register(client, first)
    await register(client, registration(addr="10.0.0.2:10911", name="broker-BB", topics=["T1"]))
    assert (await client.post("/v1/brokers/unregister", json=identity(first))).status == 200
    await register(client, first)
    assert [q["brokerName"] for q in (await route(client, "T1"))["queueDatas"]] == ["broker-BB", "broker-Aa"]


async def test_route_has_no_order_conf_unless_enabled(client: TestClient) -> None:
    await register(client, registration())
    await client.put("/v1/kv/ORDER_TOPIC_CONFIG/TopicTest", json={"value": "broker-a:4"})
    assert (await route(client, "TopicTest"))["orderTopicConf"] is None


async def test_route_carries_order_conf_when_enabled(make_client) -> None:
    client = await make_client(order_message_enable=True)
    await register(client, registration())
    await client.put("/v1/kv/ORDER_TOPIC_CONFIG/TopicTest", json={"value": "broker-a:4"})
    assert (await route(client, "TopicTest"))["orderTopicConf"] == "broker-a:4"


async def test_cluster_info_lists_every_cluster_and_group(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="a", cluster="c1"))
    await register(client, registration(addr="10.0.0.2:10911", name="a", broker_id=1, cluster="c1"))
    await register(client, registration(addr="10.0.0.3:10911", name="b", cluster="c2"))
    info = await (await client.get("/v1/cluster")).json()
    assert info == {
        "brokerAddrTable": {
            "a": {"cluster": "c1", "brokerName": "a", "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}},
            "b": {"cluster": "c2", "brokerName": "b", "brokerAddrs": {"0": "10.0.0.3:10911"}},
        },
        "clusterAddrTable": {"c1": ["a"], "c2": ["b"]},
    }


async def test_cluster_info_lists_clusters_and_groups_in_javas_hash_order(client: TestClient) -> None:
    names = [f"{c}-broker-{i}" for i in range(7) for c in ("cluster-y", "cluster-x")]
    for i, name in enumerate(names):
        await register(client, registration(addr=f"10.0.0.{i + 1}:10911", name=name, cluster=name[:9]))
    info = await (await client.get("/v1/cluster")).json()
    assert list(info["brokerAddrTable"]) == java_order(sorted(names), concurrent_capacity(128, len(names))) != sorted(names)
    assert list(info["clusterAddrTable"]) == java_order(["cluster-x", "cluster-y"], concurrent_capacity(32, 2))
    in_x = sorted(n for n in names if n.startswith("cluster-x"))
    assert info["clusterAddrTable"]["cluster-x"] == java_order(in_x, grown_capacity(len(in_x))) != in_x


async def test_all_topics(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="a", topics=["T2", "T1"]))
    await register(client, registration(addr="10.0.0.2:10911", name="b", topics=["T3", "T1"]))
    assert await (await client.get("/v1/topics")).json() == {"topicList": ["T1", "T2", "T3"]}


async def test_topics_of_a_cluster(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="a", cluster="c1", topics=["T1", "T2"]))
    await register(client, registration(addr="10.0.0.2:10911", name="b", cluster="c2", topics=["T2", "T3"]))
    assert (await (await client.get("/v1/clusters/c1/topics")).json())["topicList"] == ["T1", "T2"]
    assert (await (await client.get("/v1/clusters/c2/topics")).json())["topicList"] == ["T2", "T3"]
    assert (await (await client.get("/v1/clusters/none/topics")).json())["topicList"] == []


async def test_system_topics_are_cluster_and_broker_names(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.1:10911", name="a", cluster="c1"))
    await register(client, registration(addr="10.0.0.2:10911", name="b", cluster="c2"))
    body = await (await client.get("/v1/topics/system")).json()
    assert body["topicList"] == ["a", "b", "c1", "c2"]
    assert body["brokerAddr"] in ("10.0.0.1:10911", "10.0.0.2:10911")


async def test_unit_topic_lists_follow_the_sys_flag_bits(client: TestClient) -> None:
    topics = {
        "Plain": topic_config("Plain", sys_flag=0),
        "Unit": topic_config("Unit", sys_flag=1),
        "UnitSub": topic_config("UnitSub", sys_flag=2),
        "Both": topic_config("Both", sys_flag=3),
    }
    await register(client, registration(topics=topics))
    assert (await (await client.get("/v1/topics/unit")).json())["topicList"] == ["Both", "Unit"]
    assert (await (await client.get("/v1/topics/unit-sub")).json())["topicList"] == ["Both", "UnitSub"]
    assert (await (await client.get("/v1/topics/unit-sub-without-unit")).json())["topicList"] == ["UnitSub"]


async def test_unit_flags_come_from_the_first_queue_data_by_broker_name(client: TestClient) -> None:
    await register(client, registration(addr="10.0.0.2:10911", name="b", topics={"T": topic_config("T", sys_flag=0)}))
    await register(client, registration(addr="10.0.0.1:10911", name="a", topics={"T": topic_config("T", sys_flag=1)}))
    assert (await (await client.get("/v1/topics/unit")).json())["topicList"] == ["T"]


async def test_topic_lists_read_in_many_slices_are_whole(client: TestClient, monkeypatch) -> None:
    from service.registry import Registry

    monkeypatch.setattr(Registry, "LIST_SLICES", {"all": 3, "cluster": 1})
    monkeypatch.setattr(Registry, "LIST_SLICE_DEFAULT", 2)
    await register(client, registration(topics={f"T{i}": topic_config(f"T{i}", sys_flag=i % 2) for i in range(10)}))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-b", topics=["T3", "Other"]))
    everything = sorted([f"T{i}" for i in range(10)] + ["Other"])
    assert (await (await client.get("/v1/topics")).json())["topicList"] == everything
    assert (await (await client.get("/v1/clusters/DefaultCluster/topics")).json())["topicList"] == everything
    assert (await (await client.get("/v1/topics/unit")).json())["topicList"] == sorted(f"T{i}" for i in range(1, 10, 2))
