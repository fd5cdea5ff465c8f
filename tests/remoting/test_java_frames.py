"""Frames built byte for byte as RocketMQ's Java RemotingCommand.encode() writes them.

No Java RocketMQ runs here (no Maven Central), so these frames are written by hand from
the Java source (apache/rocketmq, 5.3.x), independently of service.remoting.codec:

- RemotingCommand.encode(): int32 length (= 4 + header + body), int32
  markProtocolType(headerLength, type) = type << 24 | headerLength, header, body.
- JSON header: fastjson's JSON.toJSONString(RemotingCommand): bean properties in
  alphabetical order, nulls left out, transient fields (customHeader, body) skipped;
  ``language`` and ``serializeTypeCurrentRPC`` as enum names; extFields are the custom
  header's non-null fields turned to strings (makeCustomHeaderToNet).
- ROCKETMQ header: RocketMQSerializable.rocketMQProtocolEncode(): short code, byte
  language (LanguageCode JAVA=0, CPP=1), short version, int opaque, int flag, int
  remark length + remark, int ext length + (short key length + key, int value length + value)...
- A 5.3.3 broker (MQVersion.CURRENT_VERSION = V5_3_3, ordinal 479) sends REGISTER_BROKER
  with RegisterBrokerRequestHeader {brokerName, brokerAddr, clusterName, haServerAddr,
  brokerId, heartbeatTimeoutMillis, enableActingMaster, compressed, bodyCrc32}, the body
  being RegisterBrokerBody JSON (TopicConfigAndMappingSerializeWrapper inside) and
  bodyCrc32 = CRC32(body) & 0x7FFFFFFF (UtilAll.crc32).
"""

from __future__ import annotations

import struct
import zlib

import orjson
import pytest
import redis

from service.remoting import codec
from tests.remoting.client import RemotingClient
from tests.remoting.frames import refreshed

pytestmark = pytest.mark.usefixtures("consistent")


def java_frame(header: bytes, body: bytes = b"", serialize: int = 0) -> bytes:
    return struct.pack(">i", 4 + len(header) + len(body)) + struct.pack(">i", serialize << 24 | len(header)) + header + body


def jstr(s: str, short: bool = False) -> bytes:
    b = s.encode()
    return (struct.pack(">h", len(b)) if short else struct.pack(">i", len(b))) + b


def rocketmq_header(code: int, language: int, version: int, opaque: int, flag: int, ext: list[tuple[str, str]]) -> bytes:
    out = struct.pack(">h", code) + struct.pack(">b", language) + struct.pack(">h", version)
    out += struct.pack(">i", opaque) + struct.pack(">i", flag) + struct.pack(">i", 0)  # no remark
    ext_bytes = b"".join(jstr(k, True) + jstr(v) for k, v in ext)
    return out + struct.pack(">i", len(ext_bytes)) + ext_bytes


# RegisterBrokerBody of a 5.3.3 broker with TopicTest and one of the system topics every
# broker's table holds (one topic alone, from a broker not registered yet, is what RocketMQ
# 5.3 refuses: apache/rocketmq#4522), as fastjson writes it (fields sorted, TopicQueueMappingInfo's
# currIdMap with an Integer key written unquoted)
BROKER_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":2,"stateVersion":0,'
    b'"timestamp":1700000000123},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},'
    b'"topicConfigTable":{"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,'
    b'"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4},'
    b'"SELF_TEST_TOPIC":{"attributes":{},"order":false,"perm":6,"readQueueNums":1,'
    b'"topicFilterType":"SINGLE_TAG","topicName":"SELF_TEST_TOPIC","topicSysFlag":0,"writeQueueNums":1}},'
    b'"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{"TopicTest":{"bname":"broker-a",'
    b'"currIdMap":{0:0},"dirty":false,"epoch":0,"scope":"__global__","topic":"TopicTest","totalQueues":4}}}}'
)


def register_header_json(crc: int, opaque: int) -> bytes:
    return (
        b'{"code":103,"extFields":{"brokerId":"0","bodyCrc32":"' + str(crc).encode() + b'","clusterName":"DefaultCluster",'
        b'"brokerAddr":"192.168.1.10:10911","haServerAddr":"192.168.1.10:10912","compressed":"false",'
        b'"enableActingMaster":"false","brokerName":"broker-a","heartbeatTimeoutMillis":"10000"},'
        b'"flag":0,"language":"JAVA","opaque":' + str(opaque).encode() + b',"serializeTypeCurrentRPC":"JSON","version":479}'
    )


async def read_answer(rmq: RemotingClient) -> tuple[int, bytes, bytes]:
    """(serialize type, header bytes, body) of the next frame, split by hand."""
    (length,) = struct.unpack(">i", await rmq.reader.readexactly(4))
    payload = await rmq.reader.readexactly(length)
    (field,) = struct.unpack(">i", payload[:4])
    header_len = field & 0xFFFFFF
    return field >> 24, payload[4:4 + header_len], payload[4 + header_len:]


async def test_broker_533_registers_with_a_json_header(rmq: RemotingClient) -> None:
    crc = zlib.crc32(BROKER_BODY) & 0x7FFFFFFF
    await rmq.send_raw(java_frame(register_header_json(crc, 0), BROKER_BODY))
    kind, header, body = await read_answer(rmq)
    assert kind == 0
    assert header == b'{"code":0,"flag":1,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":479}'
    assert body == b""

    # a 5.3.3 Java client asks for the route (GetRouteInfoRequestHeader: topic; version >= 4.9.4)
    header = b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":1,' \
             b'"serializeTypeCurrentRPC":"JSON","version":479}'
    await rmq.send_raw(java_frame(header))
    kind, header, body = await read_answer(rmq)
    assert header == b'{"code":0,"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}'
    assert orjson.loads(body) == {
        "brokerDatas": [{"brokerAddrs": {"0": "192.168.1.10:10911"}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster", "enableActingMaster": False}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}],
        # the body's queue mapping, as 5.3's pickupTopicRouteData attaches it
        "topicQueueMappingByBroker": {"broker-a": {"bname": "broker-a", "currIdMap": {"0": 0}, "dirty": False, "epoch": 0,
                                                  "scope": "__global__", "topic": "TopicTest", "totalQueues": 4}},
    }


async def test_broker_with_rocketmq_header_and_compressed_body(rmq: RemotingClient) -> None:
    # brokerConfig compressedRegister=true: RegisterBrokerBody.encode(true), a Deflater stream
    def part(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    raw = part(b'{"counter":5,"stateVersion":0,"timestamp":1700000000999}') + struct.pack(">i", 2)
    raw += part(b'TopicTest 8 8 6 SINGLE_TAG {"+message.type":"NORMAL"}')
    raw += part(b'SELF_TEST_TOPIC 1 1 6 SINGLE_TAG {}')
    raw += part(b'[]') + struct.pack(">i", 0)  # no filter servers, no queue mappings
    body = zlib.compress(raw, 9)
    # BrokerOuterAPI.registerBrokerAll sets compressed=false in the header even for this body
    ext = [("brokerName", "broker-a"), ("brokerAddr", "192.168.1.10:10911"), ("clusterName", "DefaultCluster"),
           ("haServerAddr", "192.168.1.10:10912"), ("brokerId", "0"), ("heartbeatTimeoutMillis", "10000"),
           ("enableActingMaster", "false"), ("compressed", "false"),
           ("bodyCrc32", str(zlib.crc32(body) & 0x7FFFFFFF))]
    await rmq.send_raw(java_frame(rocketmq_header(103, 0, 479, 7, 0, ext), body, serialize=1))
    kind, header, body = await read_answer(rmq)
    assert kind == 1
    # short 0, byte JAVA, short 479, int opaque 7, int flag 1, no remark, no extFields
    assert header == struct.pack(">hbhiiii", 0, 0, 479, 7, 1, 0, 0)

    # a C++ client (rocketmq-client-cpp, version 63) asks in the ROCKETMQ form: fastjson dialect back
    await rmq.send_raw(java_frame(rocketmq_header(105, 1, 63, 8, 0, [("topic", "TopicTest")]), serialize=1))
    kind, header, body = await read_answer(rmq)
    assert header == struct.pack(">hbhiiii", 0, 0, 479, 8, 1, 0, 0)
    assert b'"brokerAddrs":{0:"192.168.1.10:10911"}' in body
    assert codec.loads(body)["queueDatas"][0]["readQueueNums"] == 8


async def test_oneway_heartbeat_frame(rmq: RemotingClient, r: redis.Redis) -> None:
    crc = zlib.crc32(BROKER_BODY) & 0x7FFFFFFF
    await rmq.send_raw(java_frame(register_header_json(crc, 0), BROKER_BODY))
    await read_answer(rmq)
    r.hset("{rmq}:live:192.168.1.10:10911", "lastUpdateTimestamp", "1")
    # BrokerOuterAPI.sendHeartbeat: clusterName, brokerAddr, brokerName (no brokerId), invokeOneway
    hb = (b'{"code":904,"extFields":{"clusterName":"DefaultCluster","brokerAddr":"192.168.1.10:10911",'
          b'"brokerName":"broker-a"},"flag":2,"language":"JAVA","opaque":2,'
          b'"serializeTypeCurrentRPC":"JSON","version":479}')
    await rmq.send_raw(java_frame(hb))
    probe = b'{"code":9999,"flag":0,"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":479}'
    await rmq.send_raw(java_frame(probe))
    kind, header, _ = await read_answer(rmq)
    assert header == (b'{"code":3,"flag":1,"language":"JAVA","opaque":3,"remark":" request type 9999 not supported",'
                      b'"serializeTypeCurrentRPC":"JSON","version":479}')
    # refreshed (requests run concurrently: the probe's answer may come first)
    await refreshed(r, "{rmq}:live:192.168.1.10:10911")
