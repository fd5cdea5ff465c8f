"""RegisterBrokerBody of a RocketMQ 5.x broker, byte for byte as fastjson writes it.

A 5.3.3 broker's body (BrokerController.registerBrokerAll, RegisterBrokerBody.encode):
- plain: fastjson's JSON.toJSONString, every bean's fields in name order, so the wrapper
  (TopicConfigAndMappingSerializeWrapper) reads dataVersion, mappingDataVersion,
  topicConfigTable, topicQueueMappingDetailMap, topicQueueMappingInfoMap; a TopicConfig
  reads attributes, order, perm, readQueueNums, topicFilterType, topicName, topicSysFlag,
  writeQueueNums; a TopicQueueMappingInfo's ``currIdMap`` (Integer keys) is written with
  its keys bare: ``{0:0,1:1}``;
- compressed (compressedRegister=true): a Deflater stream of int32-length-prefixed parts:
  DataVersion JSON, the topic count, one ``TopicConfig.encode()`` line per topic, the
  filter server list JSON, the mapping count and one TopicQueueMappingInfo JSON each
  (fastjson again, bare keys and all). No mappingDataVersion there.
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import Any

import orjson

from service.remoting import bodies, codes
from service.remoting.codec import Command
from tests.remoting.client import request

_QUOTED_INT_KEY = re.compile(rb'"(-?\d+)":')
_CURR_ID_MAP = re.compile(rb'"currIdMap":\{[^{}]*\}')


def topic_config(name: str, read: int = 8, write: int = 8, perm: int = 6, attributes: dict[str, str] | None = None,
                 ) -> dict[str, Any]:
    return {"attributes": attributes or {}, "order": False, "perm": perm, "readQueueNums": read,
            "topicFilterType": "SINGLE_TAG", "topicName": name, "topicSysFlag": 0, "writeQueueNums": write}


def mapping_info(topic: str, bname: str, queues: int, epoch: int = 1700000000000) -> dict[str, Any]:
    """TopicQueueMappingInfo of a static topic whose `queues` logic queues all lie on `bname`."""
    return {"bname": bname, "currIdMap": {str(i): i for i in range(queues)}, "dirty": False, "epoch": epoch,
            "scope": "__global__", "topic": topic, "totalQueues": queues}


def fastjson_bytes(doc: Any) -> bytes:
    """`doc` as fastjson writes it: keys in name order, currIdMap's integer keys bare."""
    return _CURR_ID_MAP.sub(lambda m: _QUOTED_INT_KEY.sub(rb"\1:", m.group(0)), orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))


def plain_body(topics: dict[str, dict[str, Any]], mappings: dict[str, dict[str, Any]] | None = None,
               counter: int = 1, mapping_timestamp: int = 1700000000000, filters: list[str] | None = None,
               state_version: int = 0) -> bytes:
    # the table keeps the broker's order; everything else is sorted by name as fastjson does
    wrapper_head = fastjson_bytes({"dataVersion": {"counter": counter, "stateVersion": state_version,
                                                   "timestamp": 1700000000000},
                                   "mappingDataVersion": {"counter": 1, "stateVersion": 0,
                                                          "timestamp": mapping_timestamp}})
    table = b",".join(orjson.dumps(name) + b":" + fastjson_bytes(config) for name, config in topics.items())
    tail = fastjson_bytes({"topicQueueMappingDetailMap": {}, "topicQueueMappingInfoMap": mappings or {}})
    return (b'{"filterServerList":' + orjson.dumps(filters or []) + b',"topicConfigSerializeWrapper":'
            + wrapper_head[:-1] + b',"topicConfigTable":{' + table + b"}," + tail[1:-1] + b"}}")


def compressed_body(topics: dict[str, dict[str, Any]], mappings: dict[str, dict[str, Any]] | None = None,
                    counter: int = 1, filters: list[str] | None = None) -> bytes:
    def part(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    out = [part(fastjson_bytes({"counter": counter, "stateVersion": 0, "timestamp": 1700000000000})),
           struct.pack(">i", len(topics))]
    for name, c in topics.items():
        line = f"{name} {c['readQueueNums']} {c['writeQueueNums']} {c['perm']} {c['topicFilterType']} "
        out.append(part(line.encode() + orjson.dumps(c["attributes"])))
    out.append(part(orjson.dumps(filters or [])))
    out.append(struct.pack(">i", len(mappings or {})))
    out += [part(fastjson_bytes(info)) for info in (mappings or {}).values()]
    return zlib.compress(b"".join(out), 9)


def register(body: bytes, *, addr: str = "10.0.0.1:10911", name: str = "broker-a", broker_id: int = 0,
             cluster: str = "DefaultCluster", acting: bool | None = False, zone: str | None = None,
             timeout_ms: int | None = None) -> Command:
    """REGISTER_BROKER as a 5.3.3 broker sends it (compressed bodies say compressed=false too:
    BrokerOuterAPI.registerBrokerAll always does). `acting` None: a 4.x broker's header,
    which has no enableActingMaster."""
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster,
           "haServerAddr": addr.rsplit(":", 1)[0] + ":10912", "brokerId": str(broker_id),
           "compressed": "false", "bodyCrc32": str(bodies.crc32(body))}
    if acting is not None:
        ext["enableActingMaster"] = "true" if acting else "false"
    if zone is not None:
        ext["__ZONE_NAME"] = zone
    if timeout_ms is not None:
        ext["heartbeatTimeoutMillis"] = str(timeout_ms)
    return request(codes.REGISTER_BROKER, ext, body, version=479 if acting is not None else 409)


def topics(n: int, prefix: str = "Topic") -> dict[str, dict[str, Any]]:
    return {f"{prefix}{i}": topic_config(f"{prefix}{i}", attributes={"+message.type": "NORMAL"} if i % 2 else None)
            for i in range(n)}
