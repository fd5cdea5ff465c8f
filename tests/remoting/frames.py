"""Request builders for the tests: the headers and bodies RocketMQ's broker and tools send."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson
import redis

from service.remoting import bodies, codec, codes
from service.remoting.codec import Command
from tests.builders import registration
from tests.remoting.client import request
from tests.waits import BOUND_S, until


def compress_register_body(doc: dict[str, Any], version: int) -> bytes:
    """RegisterBrokerBody.encode(true) (the layout service.remoting.bodies reads)."""
    wrapper = doc["topicConfigSerializeWrapper"]

    def part(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    table = wrapper.get("topicConfigTable", {})
    out = [part(orjson.dumps(wrapper["dataVersion"])), struct.pack(">i", len(table))]
    for name, tc in table.items():
        line = f"{name} {tc['readQueueNums']} {tc['writeQueueNums']} {tc['perm']} SINGLE_TAG {{}}"
        out.append(part(line.encode()))
    out.append(part(orjson.dumps(doc.get("filterServerList") or [])))
    if version >= codes.V5_0_0:
        out.append(struct.pack(">i", 0))
    return zlib.compress(b"".join(out), 9)


def register(reg: dict[str, Any] | None = None, *, compressed: bool = False, crc: bool = True,
             version: int = 479, serialize: int = codec.JSON, oneway: bool = False,
             acting: bool | None = None) -> Command:
    """REGISTER_BROKER as BrokerOuterAPI.registerBrokerAll builds it, from a tests.builders document.
    `acting`: the header's enableActingMaster, which marks a 5.x broker; None leaves it
    out, so a document of one topic (the builders' default) is no single-topic 5.x
    registration, which RocketMQ 5.3 refuses from an id its group lacks (apache/rocketmq#4522)."""
    reg = reg or registration()
    doc = {"topicConfigSerializeWrapper": reg["topicConfigSerializeWrapper"],
           "filterServerList": reg.get("filterServerList") or []}
    # fastjson writes a bean's fields in name order: the table comes last
    body = compress_register_body(doc, version) if compressed else orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    ext = {
        "brokerName": reg["brokerName"], "brokerAddr": reg["brokerAddr"], "clusterName": reg["clusterName"],
        "haServerAddr": reg.get("haServerAddr") or "", "brokerId": str(reg["brokerId"]),
        "compressed": "true" if compressed else "false",
        "bodyCrc32": str(bodies.crc32(body) if crc else 0),
    }
    if acting is not None:
        ext["enableActingMaster"] = "true" if acting else "false"
    if reg.get("heartbeatTimeoutMillis") is not None:
        ext["heartbeatTimeoutMillis"] = str(reg["heartbeatTimeoutMillis"])
    return request(codes.REGISTER_BROKER, ext, body, version=version, serialize=serialize, oneway=oneway)


def identity(reg: dict[str, Any]) -> dict[str, str]:
    return {"clusterName": reg["clusterName"], "brokerAddr": reg["brokerAddr"],
            "brokerName": reg["brokerName"], "brokerId": str(reg["brokerId"])}


def route(topic: str, **kw: Any) -> Command:
    return request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, **kw)


async def refreshed(r: redis.Redis, key: str) -> None:
    """Until the live row's lastUpdateTimestamp (set to 1 by the test) moved."""
    await until(lambda: int(r.hget(key, "lastUpdateTimestamp") or 0) > 1, BOUND_S, f"{key} refreshed")
