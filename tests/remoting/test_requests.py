"""Every request code against a real redis-server, through a worker's remoting endpoint."""

from __future__ import annotations

import orjson
import pytest
import redis

from service.http.app_keys import CACHE, REGISTRY
from service.remoting import codec, codes
from tests.builders import registration, topic_config
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import identity, register, route
from tests.tables import snapshot

pytestmark = pytest.mark.usefixtures("consistent")


@pytest.mark.parametrize("serialize", [codec.JSON, codec.ROCKETMQ])
@pytest.mark.parametrize("compressed", [False, True])
async def test_register_and_route(rmq: RemotingClient, serialize: int, compressed: bool) -> None:
    reg = registration(topics=["TopicTest", "Other"], filters=["10.0.0.9:7000"])
    answer = await rmq.call(register(reg, compressed=compressed, serialize=serialize))
    assert (answer.code, answer.remark, answer.ext_fields, answer.body) == (0, None, {}, b"")
    answer = await rmq.call(route("TopicTest", serialize=serialize))
    assert answer.code == 0
    assert orjson.loads(answer.body) == {
        "brokerDatas": [{"brokerAddrs": {"0": "10.0.0.1:10911"}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster", "enableActingMaster": False}],
        "filterServerTable": {"10.0.0.1:10911": ["10.0.0.9:7000"]},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                        "writeQueueNums": 4}],
    }


async def test_route_dialect_by_version(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(broker_id=0)))
    await rmq.call(register(registration(addr="10.0.0.2:10911", broker_id=1)))
    old = await rmq.call(route("TopicTest", version=63, language="CPP"))
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in old.body
    new = await rmq.call(route("TopicTest", version=401))
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}' in new.body
    asked = await rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest", "acceptStandardJsonOnly": "true"},
                                   version=63))
    assert asked.body == new.body
    assert codec.loads(old.body) == orjson.loads(new.body)


async def test_route_not_found_names_5_3_3s_faq(rmq: RemotingClient) -> None:
    for topic in ("Nope", "bad:name"):
        answer = await rmq.call(route(topic))
        assert answer.code == codes.TOPIC_NOT_EXIST
        assert answer.remark == (f"No topic route info in name server for the topic: {topic}"
                                 "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
        assert answer.body == b""


async def test_order_topic_conf_in_route(make_worker, r: redis.Redis) -> None:
    worker: Worker = await make_worker(order_message_enable=True)
    rmq = await RemotingClient.connect(worker.port)
    await rmq.call(request(codes.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicTest",
                                                 "value": "broker-a:4"}))
    answer = await rmq.call(register())
    assert orjson.loads(answer.body) == {"table": {"TopicTest": "broker-a:4"}}
    assert orjson.loads((await rmq.call(route("TopicTest"))).body)["orderTopicConf"] == "broker-a:4"
    await rmq.close()


async def test_slave_learns_its_master(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(ha="10.0.0.1:10912")))
    answer = await rmq.call(register(registration(addr="10.0.0.2:10911", broker_id=1)))
    assert answer.ext_fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}


async def test_crc_mismatch_changes_nothing(rmq: RemotingClient, r: redis.Redis) -> None:
    cmd = register()
    cmd.ext_fields["bodyCrc32"] = str((int(cmd.ext_fields["bodyCrc32"]) + 1) & 0x7FFFFFFF)
    answer = await rmq.call(cmd)
    assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, "crc32 not match")
    assert snapshot(r) == {}
    # crc 0 is not checked
    assert (await rmq.call(register(crc=False))).code == 0


async def test_old_broker_sends_a_bare_wrapper(rmq: RemotingClient) -> None:
    reg = registration()
    body = orjson.dumps(reg["topicConfigSerializeWrapper"])
    ext = {**identity(reg), "haServerAddr": reg["haServerAddr"]}
    answer = await rmq.call(request(codes.REGISTER_BROKER, ext, body, version=36))
    assert answer.code == 0
    assert (await rmq.call(route("TopicTest"))).code == 0


async def test_register_without_body(rmq: RemotingClient) -> None:
    reg = registration()
    answer = await rmq.call(request(codes.REGISTER_BROKER, {**identity(reg), "haServerAddr": ""}))
    assert answer.code == 0
    info = codec.loads((await rmq.call(request(codes.GET_BROKER_CLUSTER_INFO))).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


async def test_register_validation(rmq: RemotingClient, r: redis.Redis) -> None:
    answer = await rmq.call(register(registration(name="b" * 256)))
    assert answer.code == codes.SYSTEM_ERROR
    assert answer.remark.startswith("invalid request: ") and "brokerName" in answer.remark
    cmd = register()
    cmd.ext_fields["brokerAddr"] = "no-port"
    assert (await rmq.call(cmd)).code == codes.SYSTEM_ERROR
    cmd = register()
    cmd.ext_fields["brokerId"] = "zero"
    answer = await rmq.call(cmd)
    assert answer.code == codes.SYSTEM_ERROR and "<brokerId>" in answer.remark
    cmd = register()
    cmd.body = b"{not json"
    cmd.ext_fields["bodyCrc32"] = "0"
    answer = await rmq.call(cmd)
    assert answer.code == codes.SYSTEM_ERROR and "RegisterBrokerBody" in answer.remark
    assert snapshot(r) == {}


async def test_query_data_version_and_heartbeat(rmq: RemotingClient, r: redis.Redis) -> None:
    reg = registration(version=7)
    await rmq.call(register(reg))
    same = orjson.dumps({"counter": 7, "stateVersion": 0, "timestamp": 1700000000000})
    answer = await rmq.call(request(codes.QUERY_DATA_VERSION, identity(reg), same))
    assert answer.code == 0 and answer.ext_fields == {"changed": "false"}
    assert orjson.loads(answer.body) == {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000}
    other = orjson.dumps({"counter": 8, "timestamp": 1700000000000})
    answer = await rmq.call(request(codes.QUERY_DATA_VERSION, identity(reg), other))
    assert answer.ext_fields == {"changed": "true"}
    unknown = {**identity(reg), "brokerAddr": "10.9.9.9:1"}
    answer = await rmq.call(request(codes.QUERY_DATA_VERSION, unknown, same))
    assert answer.ext_fields == {"changed": "true"} and answer.body == b""
    # heartbeat refreshes the live row (answered when not oneway; brokerId optional)
    r.hset("{rmq}:live:10.0.0.1:10911", "lastUpdateTimestamp", "1")
    hb = {k: v for k, v in identity(reg).items() if k != "brokerId"}
    assert (await rmq.call(request(codes.BROKER_HEARTBEAT, hb))).code == 0
    assert int(r.hget("{rmq}:live:10.0.0.1:10911", "lastUpdateTimestamp")) > 1
    assert (await rmq.call(request(codes.BROKER_HEARTBEAT, {**hb, "brokerAddr": "10.9.9.9:1"}))).code == 0


async def test_unregister(rmq: RemotingClient, r: redis.Redis) -> None:
    reg = registration()
    await rmq.call(register(reg))
    assert (await rmq.call(request(codes.UNREGISTER_BROKER, identity(reg)))).code == 0
    assert (await rmq.call(route("TopicTest"))).code == codes.TOPIC_NOT_EXIST
    assert (await rmq.call(request(codes.UNREGISTER_BROKER, identity(reg)))).code == 0  # already gone


async def test_cluster_info_is_fastjson(rmq: RemotingClient) -> None:
    await rmq.call(register())
    answer = await rmq.call(request(codes.GET_BROKER_CLUSTER_INFO, version=479))
    assert answer.body == (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
                           b'"cluster":"DefaultCluster","enableActingMaster":false}},'
                           b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')


async def test_topic_lists(rmq: RemotingClient) -> None:
    topics = {"Plain": topic_config("Plain"), "Unit": topic_config("Unit", sys_flag=1),
              "UnitSub": topic_config("UnitSub", sys_flag=2), "Both": topic_config("Both", sys_flag=3)}
    await rmq.call(register(registration(topics=topics)))
    await rmq.call(register(registration(addr="10.0.0.5:10911", name="broker-b", cluster="Other", topics=["B"])))

    async def listed(code: int, ext: dict[str, str] | None = None) -> dict:
        answer = await rmq.call(request(code, ext))
        assert answer.code == 0
        return orjson.loads(answer.body)

    assert await listed(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER) == {"topicList": ["B", "Both", "Plain", "Unit", "UnitSub"]}
    assert await listed(codes.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"}) == {"topicList": ["B"]}
    system = await listed(codes.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert set(system["topicList"]) == {"DefaultCluster", "Other", "broker-a", "broker-b"}
    assert system.get("brokerAddr") in ("10.0.0.1:10911", "10.0.0.5:10911")
    assert await listed(codes.GET_UNIT_TOPIC_LIST) == {"topicList": ["Both", "Unit"]}
    assert await listed(codes.GET_HAS_UNIT_SUB_TOPIC_LIST) == {"topicList": ["Both", "UnitSub"]}
    assert await listed(codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) == {"topicList": ["UnitSub"]}
    missing = await rmq.call(request(codes.GET_TOPICS_BY_CLUSTER))
    assert (missing.code, missing.remark) == (codes.SYSTEM_ERROR, "the custom field <cluster> is null")


async def test_write_perm(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(topics=["A", "B"])))
    answer = await rmq.call(request(codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert (answer.code, answer.ext_fields) == (0, {"wipeTopicCount": "2"})
    assert orjson.loads((await rmq.call(route("A"))).body)["queueDatas"][0]["perm"] == 4
    answer = await rmq.call(request(codes.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert (answer.code, answer.ext_fields) == (0, {"addTopicCount": "2"})
    assert orjson.loads((await rmq.call(route("A"))).body)["queueDatas"][0]["perm"] == 6
    answer = await rmq.call(request(codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}))
    assert answer.ext_fields == {"wipeTopicCount": "0"}


async def test_delete_topic(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(topics=["A", "B"])))
    await rmq.call(register(registration(addr="10.0.0.5:10911", name="broker-b", cluster="Other", topics=["A"])))
    assert (await rmq.call(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": "A", "clusterName": "Other"}))).code == 0
    assert [q["brokerName"] for q in orjson.loads((await rmq.call(route("A"))).body)["queueDatas"]] == ["broker-a"]
    assert (await rmq.call(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": "A", "clusterName": ""}))).code == 0
    assert (await rmq.call(route("A"))).code == codes.TOPIC_NOT_EXIST
    assert (await rmq.call(route("B"))).code == 0


async def test_register_topic(rmq: RemotingClient, r: redis.Redis) -> None:
    await rmq.call(register(registration(topics=["A"])))
    queue = {"brokerName": "broker-a", "perm": 6, "readQueueNums": 2, "topicSysFlag": 0, "writeQueueNums": 2}
    body = orjson.dumps({"queueDatas": [queue], "brokerDatas": []})
    assert (await rmq.call(request(codes.REGISTER_TOPIC_IN_NAMESRV, {"topic": "New"}, body))).code == 0
    assert orjson.loads((await rmq.call(route("New"))).body)["queueDatas"] == [queue]
    # a broker name without BrokerData: refused whole, answered SUCCESS as RocketMQ does
    body = orjson.dumps({"queueDatas": [queue, {**queue, "brokerName": "ghost"}]})
    before = r.get("{rmq}:version")
    assert (await rmq.call(request(codes.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Other"}, body))).code == 0
    assert (await rmq.call(route("Other"))).code == codes.TOPIC_NOT_EXIST
    assert r.get("{rmq}:version") == before
    # empty queueDatas: nothing to do; bad numbers: refused
    assert (await rmq.call(request(codes.REGISTER_TOPIC_IN_NAMESRV, {"topic": "X"}, b'{"queueDatas":[]}'))).code == 0
    bad = orjson.dumps({"queueDatas": [{**queue, "perm": 9}]})
    assert (await rmq.call(request(codes.REGISTER_TOPIC_IN_NAMESRV, {"topic": "X"}, bad))).code == codes.SYSTEM_ERROR


async def test_kv(rmq: RemotingClient) -> None:
    ns = {"namespace": "NS"}
    assert (await rmq.call(request(codes.GET_KVLIST_BY_NAMESPACE, ns))).code == codes.QUERY_NOT_FOUND
    assert (await rmq.call(request(codes.PUT_KV_CONFIG, {**ns, "key": "k", "value": "v 1"}))).code == 0
    answer = await rmq.call(request(codes.GET_KV_CONFIG, {**ns, "key": "k"}))
    assert (answer.code, answer.ext_fields) == (0, {"value": "v 1"})
    answer = await rmq.call(request(codes.GET_KVLIST_BY_NAMESPACE, ns))
    assert orjson.loads(answer.body) == {"table": {"k": "v 1"}}
    assert (await rmq.call(request(codes.DELETE_KV_CONFIG, {**ns, "key": "k"}))).code == 0
    assert (await rmq.call(request(codes.DELETE_KV_CONFIG, {**ns, "key": "k"}))).code == 0
    answer = await rmq.call(request(codes.GET_KV_CONFIG, {**ns, "key": "k"}))
    assert (answer.code, answer.remark) == (codes.QUERY_NOT_FOUND, "No config item, Namespace: NS Key: k")
    assert orjson.loads((await rmq.call(request(codes.GET_KVLIST_BY_NAMESPACE, ns))).body) == {"table": {}}
    answer = await rmq.call(request(codes.PUT_KV_CONFIG, {**ns, "key": "k"}))
    assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, "the custom field <value> is null")
    answer = await rmq.call(request(codes.PUT_KV_CONFIG, {**ns, "key": "", "value": "v"}))
    assert answer.code == codes.SYSTEM_ERROR and answer.remark.startswith("invalid request: key")
    answer = await rmq.call(request(codes.PUT_KV_CONFIG, {**ns, "key": "k", "value": "v" * 65537}))
    assert answer.code == codes.SYSTEM_ERROR and "65536 bytes" in answer.remark


async def test_kv_key_may_be_an_ip_address(rmq: RemotingClient) -> None:
    kv = {"namespace": "PROJECT_CONFIG", "key": "10.0.0.1"}
    assert (await rmq.call(request(codes.PUT_KV_CONFIG, {**kv, "value": "project-a"}))).code == 0
    answer = await rmq.call(request(codes.GET_KV_CONFIG, kv))
    assert (answer.code, answer.ext_fields) == (0, {"value": "project-a"})
    answer = await rmq.call(request(codes.GET_KVLIST_BY_NAMESPACE, {"namespace": "PROJECT_CONFIG"}))
    assert orjson.loads(answer.body) == {"table": {"10.0.0.1": "project-a"}}


async def test_dotted_broker_name_registers_and_gets_a_route(rmq: RemotingClient) -> None:
    answer = await rmq.call(register(registration(name="node1.example.com", topics=["T1"])))
    assert (answer.code, answer.remark) == (0, None)
    data = orjson.loads((await rmq.call(route("T1"))).body)
    assert data["brokerDatas"][0]["brokerName"] == "node1.example.com"


async def test_one_unstorable_topic_skips_only_that_topic(worker: Worker, rmq: RemotingClient) -> None:
    long_topic = "L" * 201
    topics = {t: topic_config(t) for t in ("Valid1", "a.b", long_topic)}
    topics["Wide"] = topic_config("Wide", read=2048, write=2048)
    answer = await rmq.call(register(registration(topics=topics)))
    assert (answer.code, answer.remark) == (0, None)
    for topic in ("Valid1", "a.b", long_topic):
        assert (await rmq.call(route(topic))).code == 0, topic
    assert (await rmq.call(route("Wide"))).code == codes.TOPIC_NOT_EXIST
    metrics = await (await worker.http.get("/metrics")).text()
    assert 'rmq_skipped_topic_configs_total{reason="queue_nums"} 1.0' in metrics


async def test_a_skipped_topic_is_named_in_the_log_and_the_answer_stays_rocketmqs(
        rmq: RemotingClient, caplog: pytest.LogCaptureFixture) -> None:
    topics = {"Ok": topic_config("Ok"), "Wide": topic_config("Wide", write=4096)}
    answer = await rmq.call(register(registration(topics=topics)))
    # RocketMQ's NameServer answers SUCCESS with no remark and no header beyond its own
    assert (answer.code, answer.remark, answer.ext_fields) == (0, None, {})
    (line,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert "'broker-a' (10.0.0.1:10911) skipped 1 topic config(s)" in line and "'Wide'" in line


async def test_colon_in_topic_and_broker_names_gives_two_routes(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(name="c", topics=["a:b"])))
    await rmq.call(register(registration(name="b:c", addr="10.0.0.2:10911", topics=["a"])))
    for topic, name in (("a:b", "c"), ("a", "b:c")):
        assert [q["brokerName"] for q in orjson.loads((await rmq.call(route(topic))).body)["queueDatas"]] == [name]


async def test_an_identical_registration_takes_the_fast_path(make_worker) -> None:
    worker: Worker = await make_worker()
    rmq = await RemotingClient.connect(worker.port)
    reg = registration(topics=[f"T{i}" for i in range(50)])
    first = await rmq.call(register(reg))
    again = await rmq.call(register(reg))
    operations = worker.app[REGISTRY].operations
    assert operations["register"] == 1 and operations["register_unchanged"] == 1
    assert (again.code, again.ext_fields, again.body) == (first.code, first.ext_fields, first.body)


async def test_a_changed_registration_does_not_take_the_fast_path(make_worker) -> None:
    worker: Worker = await make_worker()
    rmq = await RemotingClient.connect(worker.port)
    await rmq.call(register(registration(topics=["T1"], version=1)))
    await rmq.call(register(registration(topics={"T1": topic_config("T1", write=8)}, version=2)))
    await rmq.call(register(registration(topics={"T1": topic_config("T1", write=8)}, version=2, ha="10.0.0.1:20912")))
    operations = worker.app[REGISTRY].operations
    assert operations["register"] == 3 and operations["register_unchanged"] == 0
    answer = await rmq.call(route("T1"))
    assert orjson.loads(answer.body)["queueDatas"][0]["writeQueueNums"] == 8


async def test_broker_member_group_lists_the_groups_members_by_id(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(broker_id=0)))
    await rmq.call(register(registration(addr="10.0.0.2:10911", broker_id=1)))
    answer = await rmq.call(request(codes.GET_BROKER_MEMBER_GROUP, {"clusterName": "DefaultCluster",
                                                                    "brokerName": "broker-a"}))
    assert answer.code == codes.SUCCESS
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in answer.body
    assert codec.loads(answer.body) == {"brokerMemberGroup": {
        "cluster": "DefaultCluster", "brokerName": "broker-a",
        "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}}}


async def test_broker_member_group_of_an_unknown_group_has_no_members(rmq: RemotingClient) -> None:
    answer = await rmq.call(request(codes.GET_BROKER_MEMBER_GROUP, {"clusterName": "c1", "brokerName": "nobody"}))
    assert answer.code == codes.SUCCESS
    assert codec.loads(answer.body) == {"brokerMemberGroup": {"cluster": "c1", "brokerName": "nobody", "brokerAddrs": {}}}


async def test_namesrv_config_answers_the_settings_as_properties_without_secrets(make_worker) -> None:
    worker: Worker = await make_worker(broker_timeout_ms=45_000)
    rmq = await RemotingClient.connect(worker.port)
    answer = await rmq.call(request(codes.GET_NAMESRV_CONFIG, {}))
    assert answer.code == codes.SUCCESS
    props = dict(line.split("=", 1) for line in answer.body.decode().splitlines())
    assert props["brokerTimeoutMs"] == "45000" and props["remotingPort"] == "0"
    assert "redisUrl" not in props and "redis://" not in answer.body.decode()


async def test_namesrv_config_carries_the_java_nameservers_keys_with_javas_booleans(make_worker) -> None:
    worker: Worker = await make_worker(order_message_enable=True, scan_interval_ms=7000, remoting_stale_reads=False)
    rmq = await RemotingClient.connect(worker.port)
    body = (await rmq.call(request(codes.GET_NAMESRV_CONFIG, {}))).body.decode()
    props = dict(line.split("=", 1) for line in body.splitlines())
    assert {k: props[k] for k in ("listenPort", "orderMessageEnable", "deleteTopicWithBrokerRegistration",
                                  "scanNotActiveBrokerInterval", "enableAllTopicList", "supportActingMaster")} == {
        "listenPort": str(worker.port), "orderMessageEnable": "true", "deleteTopicWithBrokerRegistration": "false",
        "scanNotActiveBrokerInterval": "7000", "enableAllTopicList": "true", "supportActingMaster": "false"}
    assert props["remotingStaleReads"] == "false"  # the project's own settings, beside them, formatted alike
    assert not {"True", "False", "None"} & set(props.values())
    assert "authTokensFile" not in props and "kvConfigPath" not in props


async def test_update_namesrv_config_is_refused_and_changes_nothing(make_worker) -> None:
    worker: Worker = await make_worker()
    rmq = await RemotingClient.connect(worker.port)
    answer = await rmq.call(request(codes.UPDATE_NAMESRV_CONFIG, {}, body=b"brokerTimeoutMs=1\n"))
    assert answer.code == codes.NO_PERMISSION and "environment" in answer.remark
    props = (await rmq.call(request(codes.GET_NAMESRV_CONFIG, {}))).body.decode()
    assert "brokerTimeoutMs=120000" in props.splitlines()


@pytest.mark.parametrize("serialize", [codec.JSON, codec.ROCKETMQ])
async def test_a_cached_route_is_answered_as_an_uncached_one(worker: Worker, rmq: RemotingClient, serialize: int) -> None:
    await rmq.call(register(registration(topics=["T1"])))
    first = await rmq.call(route("T1", serialize=serialize))
    hits = worker.app[CACHE].stats.hits
    again = await rmq.call(route("T1", serialize=serialize))
    assert worker.app[CACHE].stats.hits == hits + 1  # served from the cache, on the server's fast path
    assert (again.code, again.remark, again.ext_fields, again.body, again.version, again.flag) == \
        (first.code, first.remark, first.ext_fields, first.body, first.version, first.flag)
