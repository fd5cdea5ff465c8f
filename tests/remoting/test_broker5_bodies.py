"""Every body a RocketMQ 5.x broker sends is read, whatever its size: fastjson's bare
integer map keys (a static topic's ``currIdMap``) in a plain body of any size, and the
compressed form's queue mappings. A registration the registry refuses leaves a log line
naming the broker and the reason."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from service.remoting import bodies, codec, codes
from service.http.app_keys import REGISTRY
from tests.remoting import broker5
from tests.remoting.client import RemotingClient, request
from tests.remoting.frames import route

pytestmark = pytest.mark.usefixtures("consistent")

STATIC = {"ST1": broker5.mapping_info("ST1", "broker-a", 4)}


def test_the_bodys_static_topic_carries_bare_integer_keys_as_fastjson_writes_them() -> None:
    body = broker5.plain_body(broker5.topics(200), STATIC)
    assert len(body) > 16 * 1024
    assert b'"currIdMap":{0:0,1:1,2:2,3:3}' in body
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)


def test_a_big_document_with_bare_integer_keys_is_read() -> None:
    doc = b"{" + b",".join(b'%d:"a"' % i for i in range(20_000)) + b"}"
    assert codec.loads(doc)["19999"] == "a"


@pytest.mark.parametrize("doc, expected", [
    (b'{"k":"{0:1}","m":{5:1}}', {"k": "{0:1}", "m": {"5": 1}}),
    (b'{"k":"a\\"{0:1}","m":{5:1}}', {"k": 'a"{0:1}', "m": {"5": 1}}),
    (b'{"s":"\\"currIdMap\\":{1:2}","m":{"currIdMap":{0:0,1:1}}}',
     {"s": '"currIdMap":{1:2}', "m": {"currIdMap": {"0": 0, "1": 1}}}),
    (b'{"k":"a\\\\","m":{5:1}}', {"k": "a\\", "m": {"5": 1}}),
    ('{"é":"x,1:y","m":{ -3 : 4}}'.encode(), {"é": "x,1:y", "m": {"-3": 4}}),
], ids=["lookalike in a string", "after an escaped quote", "currIdMap lookalike in a string",
        "after an escaped backslash", "non-ASCII and spaces"])
def test_only_keys_outside_strings_are_quoted(doc: bytes, expected: dict) -> None:
    assert codec.loads(doc) == expected


def test_a_document_that_is_no_json_even_with_keys_quoted_is_refused() -> None:
    with pytest.raises(ValueError):
        codec.loads(b'{0:1,,}' + b" " * 20_000)


async def test_a_changed_5x_body_registers_its_new_topic(rmq: RemotingClient) -> None:
    table = broker5.topics(1_000)
    table["ST1"] = broker5.topic_config("ST1", 4, 4)
    assert (await rmq.call(broker5.register(broker5.plain_body(table, STATIC, counter=1)))).code == codes.SUCCESS
    table["NewTopic"] = broker5.topic_config("NewTopic", 2, 2)
    assert (await rmq.call(broker5.register(broker5.plain_body(table, STATIC, counter=2)))).code == codes.SUCCESS
    answer = await rmq.call(route("NewTopic"))
    assert answer.code == codes.SUCCESS, (answer.code, answer.remark)
    assert orjson.loads(answer.body)["queueDatas"][0]["readQueueNums"] == 2
    assert orjson.loads((await rmq.call(route("ST1"))).body)["topicQueueMappingByBroker"]


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
async def test_a_5x_broker_with_a_static_topic_in_a_big_body_keeps_its_routes(rmq: RemotingClient, compressed: bool) -> None:
    table = broker5.topics(1_000)
    table["ST1"] = broker5.topic_config("ST1", 4, 4)
    body = (broker5.compressed_body if compressed else broker5.plain_body)(table, STATIC)
    answer = await rmq.call(broker5.register(body))
    assert (answer.code, answer.remark) == (codes.SUCCESS, None)
    for topic in ("Topic0", "Topic999", "ST1"):
        got = await rmq.call(route(topic))
        assert got.code == codes.SUCCESS, topic
        assert orjson.loads(got.body)["queueDatas"][0]["brokerName"] == "broker-a"


async def test_a_refused_registration_leaves_one_log_line_naming_the_broker_and_the_reason(
        rmq: RemotingClient, caplog: pytest.LogCaptureFixture) -> None:
    cmd = broker5.register(b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":' + b"[" * 40 + b"}}",
                           addr="10.0.0.9:10911", name="broker-z")
    with caplog.at_level(logging.WARNING):
        answer = await rmq.call(cmd)
    assert answer.code == codes.SYSTEM_ERROR
    lines = [r.getMessage() for r in caplog.records if "registration refused" in r.getMessage()]
    assert len(lines) == 1
    assert "10.0.0.9:10911" in lines[0] and "broker-z" in lines[0] and "Failed to decode RegisterBrokerBody" in lines[0]


async def test_a_5x_reregistration_that_moves_only_the_mapping_version_takes_the_unchanged_path(
        worker: Any, rmq: RemotingClient) -> None:
    table = broker5.topics(600)
    first = broker5.plain_body(table, STATIC, mapping_timestamp=1700000000000)
    later = broker5.plain_body(table, STATIC, mapping_timestamp=1700000030000)
    assert first != later
    for body in (first, later):
        assert (await rmq.call(broker5.register(body))).code == codes.SUCCESS
    assert worker.app[REGISTRY].operations["register_unchanged"] == 1
    assert worker.app[REGISTRY].operations["register"] == 1


async def test_a_5x_reregistration_with_a_new_data_version_is_registered_in_full(
        worker: Any, rmq: RemotingClient) -> None:
    table = broker5.topics(600)
    assert (await rmq.call(broker5.register(broker5.plain_body(table, STATIC, counter=1)))).code == codes.SUCCESS
    table["NewTopic"] = broker5.topic_config("NewTopic")
    assert (await rmq.call(broker5.register(broker5.plain_body(table, STATIC, counter=2)))).code == codes.SUCCESS
    assert worker.app[REGISTRY].operations["register_unchanged"] == 0
    assert (await rmq.call(route("NewTopic"))).code == codes.SUCCESS


# Java 5.3.3's NameServer's answers to GET_ROUTEINFO_BY_TOPIC for a static topic of a
# broker registered as below (seen on the wire): standard JSON from 4.9.4 on, fastjson's
# dialect before it.
JAVA_533_STATIC_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster",'
    b'"enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
    b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}],"topicQueueMappingByBroker":{"broker-a":'
    b'{"bname":"broker-a","currIdMap":{"0":0,"1":1,"2":2,"3":3},"dirty":false,"epoch":1795565131974,'
    b'"scope":"__global__","topic":"ST1","totalQueues":4}}}'
)


@pytest.mark.parametrize("version, expected", [
    (479, JAVA_533_STATIC_ROUTE),
    (399, JAVA_533_STATIC_ROUTE.replace(b'{"0":"127.', b'{0:"127.').replace(b'{"0":0,"1":1,"2":2,"3":3}', b"{0:0,1:1,2:2,3:3}")),
], ids=["4.9.4 and later", "before 4.9.4"])
async def test_a_static_topics_route_is_the_bytes_java_533_answers(rmq: RemotingClient, version: int,
                                                                    expected: bytes) -> None:
    table = broker5.topics(300)
    table["ST1"] = broker5.topic_config("ST1", 4, 4)
    mapping = {"ST1": broker5.mapping_info("ST1", "broker-a", 4, epoch=1795565131974)}
    assert (await rmq.call(broker5.register(broker5.plain_body(table, mapping), addr="127.0.0.1:10911"))).code == 0
    answer = await rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "ST1"}, version=version))
    assert answer.body == expected
