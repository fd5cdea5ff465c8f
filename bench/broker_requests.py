"""The loader's requests, encoded as RocketMQ's Java broker and clients encode them.

Written from RocketMQ's sources (BrokerOuterAPI.registerBrokerAll, RegisterBrokerBody.encode,
TopicConfig.encode, RemotingCommand's JSON header), independently of the registry's own
codec, so the same bytes go to the registry and to the Java NameServer:

- ``json``:  a 4.9.8 broker (``compressedRegister=false``, the default): the body is
  fastjson's JSON of RegisterBrokerBody (bean fields in name order), header version 4.9.8.
- ``zlib``:  a 4.9.8 broker with ``compressedRegister=true``: header ``compressed=true``,
  the body RegisterBrokerBody.encode(true) of 4.9.8 (a Deflater stream of int32-length
  parts: DataVersion JSON, topic count, one ``name read write perm filterType`` line per
  topic, filter server list JSON).
- ``zlib5``: a 5.x broker (5.3.3) with ``compressedRegister=true``: 5.x's BrokerOuterAPI
  sends ``compressed=false`` in the header with the compressed body, each topic line ends
  with its attributes JSON (``{}``), and the body ends with the (empty) queue-mapping
  section. No Java NameServer reads this form (4.9.8 and 5.3.3 both parse the body as
  JSON when the header says compressed=false), so only the registry is measured with it.
- ``json5``: a 5.x broker (5.3.3) with the default ``compressedRegister=false`` and one
  static topic: fastjson's JSON of RegisterBrokerBody around TopicConfigAndMappingSerializeWrapper
  (dataVersion, mappingDataVersion, topicConfigTable with each TopicConfig's attributes,
  topicQueueMappingDetailMap, topicQueueMappingInfoMap whose currIdMap keys fastjson
  writes bare). Its mappingDataVersion's timestamp is the time the frame is made, as a
  real broker's moves at every 30 s registration while nothing else does.

Blocking sockets: one request at a time, as a broker registers over its one connection.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import zlib
from typing import Any

REGISTER_BROKER = 103
GET_ROUTEINFO_BY_TOPIC = 105
TOPIC_NOT_EXIST = 17
V4_9_8 = 409  # MQVersion.Version.V4_9_8.ordinal()
V5_3_3 = 479
FORMS = ("json", "zlib", "zlib5", "json5")
# forms a Java NameServer decodes, 4.9.8 or 5.3.3 (bench/java_namesrv.py starts either): 5.3.3
# reads a zlib body only when the header says compressed=true, which a 5.3.3 broker never
# sends (its compressedRegister body gets a NullPointerException there, as on 4.9.8)
JAVA_READS = {"json": True, "zlib": True, "zlib5": False, "json5": True}
FORM_NOTES = {
    "json": "4.9.8 broker, plain JSON body",
    "zlib": "4.9.8 broker, compressedRegister=true",
    "zlib5": "5.3.3 broker, compressedRegister=true (no Java NameServer reads it: 5.3.3's fails with an NPE)",
    "json5": "5.3.3 broker, plain JSON body with one static topic (mappingDataVersion moving)",
}

_LEN = struct.Struct(">i")


def _dumps(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def frame(code: int, ext: dict[str, str], body: bytes, opaque: int, version: int) -> bytes:
    """RemotingCommand with a JSON header, fields in fastjson's (name) order, as a Java client sends it."""
    header = (f'{{"code":{code},"extFields":{_dumps(ext)},"flag":0,"language":"JAVA","opaque":{opaque},'
              f'"serializeTypeCurrentRPC":"JSON","version":{version}}}').encode()
    return _LEN.pack(4 + len(header) + len(body)) + _LEN.pack(len(header)) + header + body


def route_frame(topic: str, opaque: int, version: int = V5_3_3) -> bytes:
    return frame(GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, b"", opaque, version)


# ---------------------------------------------------------------------- topics and bodies
def topic_config(name: str, queues: int = 8, perm: int = 6) -> dict[str, Any]:
    """TopicConfig's bean fields in name order (what fastjson writes)."""
    return {"order": False, "perm": perm, "readQueueNums": queues, "topicFilterType": "SINGLE_TAG",
            "topicName": name, "topicSysFlag": 0, "writeQueueNums": queues}


def topics(prefix: str, n: int) -> dict[str, dict[str, Any]]:
    return {f"{prefix}{i:06d}": topic_config(f"{prefix}{i:06d}") for i in range(n)}


def data_version(counter: int) -> dict[str, int]:
    return {"counter": counter, "timestamp": int(time.time() * 1000)}


def json_body(table: dict[str, dict[str, Any]], version: dict[str, int]) -> bytes:
    return _dumps({"filterServerList": [],
                   "topicConfigSerializeWrapper": {"dataVersion": version, "topicConfigTable": table}}).encode()


STATIC_TOPIC_QUEUES = 4


_FIRST = object()


def json5_body(table: dict[str, dict[str, Any]], version: dict[str, int], broker: str,
               static: Any = _FIRST) -> bytes:
    """A 5.3.3 broker's plain body; `static` is its static topic, whose mapping it carries
    (by default the first topic of `table`; None: no mapping, as a split registration's
    parts but the last)."""
    if static is _FIRST:
        static = next(iter(table))
    config = lambda tc: {"attributes": {}, **tc}  # noqa: E731 (fastjson: attributes first)
    ids = ",".join(f"{i}:{i}" for i in range(STATIC_TOPIC_QUEUES))
    mapping = "{}" if static is None else (
        f'{{"{static}":{{"bname":{_dumps(broker)},"currIdMap":{{{ids}}},"dirty":false,"epoch":1700000000000,'
        f'"scope":"__global__","topic":"{static}","totalQueues":{STATIC_TOPIC_QUEUES}}}}}')
    wrapper = (f'{{"dataVersion":{_dumps(dict(sorted({**version, "stateVersion": 0}.items())))},'
               f'"mappingDataVersion":{_dumps({"counter": 1, "stateVersion": 0, "timestamp": int(time.time() * 1000)})},'
               f'"topicConfigTable":{_dumps({k: config(v) for k, v in table.items()})},'
               f'"topicQueueMappingDetailMap":{{}},"topicQueueMappingInfoMap":{mapping}}}')
    return f'{{"filterServerList":[],"topicConfigSerializeWrapper":{wrapper}}}'.encode()


def zlib_body(table: dict[str, dict[str, Any]], version: dict[str, int], five: bool) -> bytes:
    def part(b: bytes) -> bytes:
        return _LEN.pack(len(b)) + b

    out = [part(_dumps(version).encode()), _LEN.pack(len(table))]
    for tc in table.values():
        line = f"{tc['topicName']} {tc['readQueueNums']} {tc['writeQueueNums']} {tc['perm']} {tc['topicFilterType']}"
        out.append(part((line + " {}" if five else line).encode()))
    out.append(part(b"[]"))
    if five:
        out.append(_LEN.pack(0))  # topicQueueMappingInfoMap: empty
    return zlib.compress(b"".join(out), 9)  # Deflater(BEST_COMPRESSION), zlib wrapper


def crc32(body: bytes) -> int:
    """UtilAll.crc32: CRC-32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def register_frame(form: str, broker: str, addr: str, broker_id: int, table: dict[str, dict[str, Any]],
                   version: dict[str, int], opaque: int, cluster: str = "BenchCluster") -> bytes:
    if form == "json":
        body, compressed, mq_version = json_body(table, version), "false", V4_9_8
    elif form == "zlib":
        body, compressed, mq_version = zlib_body(table, version, five=False), "true", V4_9_8
    elif form == "zlib5":
        body, compressed, mq_version = zlib_body(table, version, five=True), "false", V5_3_3
    elif form == "json5":
        body, compressed, mq_version = json5_body(table, version, broker), "false", V5_3_3
    else:
        raise ValueError(f"unknown registration form {form!r}: one of {', '.join(FORMS)}")
    ext = {"brokerAddr": addr, "brokerId": str(broker_id), "brokerName": broker, "clusterName": cluster,
           "haServerAddr": addr.rsplit(":", 1)[0] + ":10912", "compressed": compressed, "bodyCrc32": str(crc32(body))}
    if mq_version >= V5_3_3:
        ext.update({"enableActingMaster": "false", "heartbeatTimeoutMillis": "120000"})
    return frame(REGISTER_BROKER, ext, body, opaque, mq_version)


# ---------------------------------------------------------------------- a broker's connection
class Connection:
    """One blocking TCP connection; `call` sends a frame and reads its answer (code, remark, body)."""

    def __init__(self, port: int, timeout: float = 60) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opaque = 0

    def next_opaque(self) -> int:
        self.opaque += 1
        return self.opaque

    def call(self, data: bytes) -> tuple[int, str, bytes]:
        self.sock.sendall(data)
        return self.read()

    def timed(self, data: bytes) -> tuple[float, int, str]:
        """Milliseconds from the first byte written to the whole answer read; code; remark."""
        started = time.perf_counter()
        code, remark, _ = self.call(data)
        return (time.perf_counter() - started) * 1000, code, remark

    def read(self) -> tuple[int, str, bytes]:
        (length,) = _LEN.unpack(self._exactly(4))
        payload = self._exactly(length)
        header_len = _LEN.unpack_from(payload)[0] & 0xFFFFFF
        header = json.loads(payload[4:4 + header_len])
        return header["code"], header.get("remark") or "", payload[4 + header_len:]

    def _exactly(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def register(conn: Connection, form: str, broker: str, addr: str, broker_id: int,
             table: dict[str, dict[str, Any]], version: dict[str, int]) -> float:
    """One registration; its client-observed milliseconds. Anything but SUCCESS raises."""
    ms, code, remark = conn.timed(register_frame(form, broker, addr, broker_id, table, version, conn.next_opaque()))
    if code != 0:
        raise RuntimeError(f"REGISTER_BROKER ({form}) of {broker} answered code {code}: {remark}")
    return ms


def register_retrying(conn: Connection, form: str, broker: str, addr: str, broker_id: int,
                      table: dict[str, dict[str, Any]], version: dict[str, int], limit_s: float = 60) -> float:
    """A set-up registration (not a measured one): retried while the server answers an error, as
    a broker retries on its next round; the last error raises after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return register(conn, form, broker, addr, broker_id, table, version)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_gone(port: int, topics: list[str], limit_s: float = 30) -> float | None:
    """Waits until no route is left for any of `topics` (their brokers' connections closed, the
    server removed them), so that work does not fall into the next measurement. Seconds waited,
    or None (said in one line) when a route was still there after `limit_s`."""
    started = time.monotonic()
    conn = Connection(port)
    try:
        for topic in topics:
            while True:
                code, _, _ = conn.call(route_frame(topic, conn.next_opaque()))
                if code == TOPIC_NOT_EXIST:
                    break
                if time.monotonic() - started > limit_s:
                    print(f"  the route of {topic} (port {port}) was still there {limit_s:.0f} s after its broker's "
                          "connection closed; going on")
                    return None
                time.sleep(0.05)
    finally:
        conn.close()
    return time.monotonic() - started
