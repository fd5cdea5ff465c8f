"""The bodies of the protocol, as RocketMQ's Java classes encode them: the read codes'
answers, the brokers' RegisterBrokerBody (plain or compressed) and the answers to them, and
a JSON body's reading (``json_body``: a ``BodyError`` when it cannot be read)."""

from __future__ import annotations

import re
import struct
import zlib
from typing import Any

import orjson

from service.remoting import codec, codes
from service.remoting.codec import MAX_FRAME, loads


def topic_list(doc: dict[str, Any]) -> bytes:
    """TopicList: {"brokerAddr":..., "topicList":[...]}, brokerAddr only when set."""
    out: dict[str, Any] = {}
    if doc.get("brokerAddr"):
        out["brokerAddr"] = doc["brokerAddr"]
    out["topicList"] = doc["topicList"]
    return orjson.dumps(out)


def _broker_data(d: dict[str, Any]) -> dict[str, Any]:
    # BrokerData's fields in fastjson's order; a null zoneName is left out
    out = {"brokerAddrs": d["brokerAddrs"], "brokerName": d["brokerName"], "cluster": d["cluster"],
           "enableActingMaster": bool(d.get("enableActingMaster", False))}
    if d.get("zoneName") is not None:
        out["zoneName"] = d["zoneName"]
    return out


def route(data: dict[str, Any], standard: bool) -> bytes:
    """TopicRouteData: standard JSON (sorted keys) or fastjson's default dialect."""
    doc: dict[str, Any] = {
        "brokerDatas": [_broker_data(b) for b in data["brokerDatas"]],
        "filterServerTable": dict(sorted((data.get("filterServerTable") or {}).items())),
    }
    if data.get("orderTopicConf") is not None:
        doc["orderTopicConf"] = data["orderTopicConf"]
    doc["queueDatas"] = [
        {"brokerName": q["brokerName"], "perm": q["perm"], "readQueueNums": q["readQueueNums"],
         "topicSysFlag": q["topicSysFlag"], "writeQueueNums": q["writeQueueNums"]}
        for q in data["queueDatas"]
    ]
    if data.get("topicQueueMappingByBroker"):  # a static topic's (null otherwise: left out)
        doc["topicQueueMappingByBroker"] = data["topicQueueMappingByBroker"]
    encoded = orjson.dumps(doc)  # fields already in order; brokerAddrs sorted by id
    return encoded if standard else codec.dialect(encoded)


def member_group(cluster: str, name: str, addrs: dict[str, str]) -> bytes:
    """GetBrokerMemberGroupResponseBody, in fastjson's default dialect (numeric map keys bare)."""
    ordered = {k: addrs[k] for k in sorted(addrs, key=int)}
    doc = {"brokerMemberGroup": {"brokerAddrs": ordered, "brokerName": name, "cluster": cluster}}
    return codec.dialect(orjson.dumps(doc))


def properties(values: dict[str, str]) -> bytes:
    """java.util.Properties text, as MixAll.properties2String writes it: key=value lines."""
    return "".join(f"{k}={v}\n" for k, v in values.items()).encode()


def cluster_info(data: dict[str, Any]) -> bytes:
    """ClusterInfo, always in fastjson's default dialect (as ClusterInfo.encode() writes it)."""
    doc = {
        "brokerAddrTable": {name: _broker_data(d) for name, d in data["brokerAddrTable"].items()},
        "clusterAddrTable": data["clusterAddrTable"],
    }
    return codec.dialect(orjson.dumps(doc))


# ---------------------------------------------------------------------- RegisterBrokerBody
EMPTY_WRAPPER = {"dataVersion": {"timestamp": 0, "counter": 0}, "topicConfigTable": {}}

# The most a compressed RegisterBrokerBody may inflate to: what the largest frame could
# carry uncompressed. Inflating stops there, so a zlib bomb costs at most this much memory.
MAX_INFLATED = MAX_FRAME


def register_broker_body(body: bytes, compressed: bool, version: int, max_topics: int | None = None) -> dict[str, Any]:
    """RegisterBrokerBody -> {"topicConfigSerializeWrapper": {...}, "filterServerList": [...]}.

    Plain: fastjson JSON of RegisterBrokerBody. Compressed (header ``compressed=true``): a
    zlib (Deflater) stream of int32-length-prefixed parts, see ``_inflate_register``.
    RocketMQ 5.x brokers with ``compressedRegister=true`` send the compressed form with
    ``compressed=false`` in the header (BrokerOuterAPI.registerBrokerAll always sets false),
    so a body starting with a zlib header (0x78; JSON starts with '{') is inflated too.
    More than ``max_topics`` topics (when given) is refused before any of them is read further.
    """
    if compressed or body[:1] == b"\x78":  # a zlib header, whatever the header field says
        return _inflate_register(body, version, max_topics)
    doc = json_body(body, "RegisterBrokerBody")
    if not isinstance(doc, dict):
        raise BodyError("RegisterBrokerBody must be a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper")
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if isinstance(table, dict):
        _check_topic_count(len(table), max_topics)
    return doc


def _check_topic_count(count: int, max_topics: int | None) -> None:
    if max_topics is not None and count > max_topics:
        raise BodyError(f"{count} topics; at most {max_topics} topics per registration (RMQ_MAX_TOPICS_PER_REGISTRATION)")


# The first bytes inflated: they hold the DataVersion part and the topic count.
_HEAD = 64 * 1024


def inflate(body: bytes, max_topics: int | None) -> bytes:
    """The whole zlib stream, at most MAX_INFLATED bytes of it: a bomb costs no more. A topic
    count over `max_topics` is refused from the stream's first bytes, before the rest."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, _HEAD)
        if max_topics is not None:
            _check_head(data, max_topics)
        if inflater.unconsumed_tail:
            data += inflater.decompress(inflater.unconsumed_tail, MAX_INFLATED + 1 - len(data))
    except zlib.error as e:
        raise BodyError(f"compressed RegisterBrokerBody does not inflate: {e}") from None
    if len(data) > MAX_INFLATED:
        raise BodyError(f"compressed RegisterBrokerBody inflates past {MAX_INFLATED} bytes")
    return data


def _check_head(head: bytes, max_topics: int) -> None:
    """The topic count after the DataVersion part, when the head holds it (a head that does
    not, or is malformed, is left to the full read, which says so)."""
    stream = Parts(head)
    try:
        stream.part()
        count = stream.count()
    except BodyError:
        return
    _check_topic_count(count, max_topics)


class Parts:
    """Reads the int32-length-prefixed parts of an inflated RegisterBrokerBody."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise BodyError("compressed RegisterBrokerBody ends early")
        (n,) = _INT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return n

    def part(self) -> bytes:
        n = self.int32()
        if n < 0 or n > MAX_INFLATED:
            raise BodyError("compressed RegisterBrokerBody has a bad part length")
        end = self.pos + n
        if end > len(self.data):
            raise BodyError("compressed RegisterBrokerBody ends early")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def count(self) -> int:
        n = self.int32()
        if n < 0:
            raise BodyError("compressed RegisterBrokerBody has a negative count")
        return n

    def parts(self, count: int) -> list[bytes]:
        """`count` parts in a row (one topic config each): the loop of ``part``, inlined,
        since a broker sends 10,000 of them."""
        data, pos, size, unpack = self.data, self.pos, len(self.data), _INT32.unpack_from
        out = []
        for _ in range(count):
            if pos + 4 > size:
                raise BodyError("compressed RegisterBrokerBody ends early")
            (n,) = unpack(data, pos)
            end = pos + 4 + n
            if n < 0 or end > size:
                raise BodyError("compressed RegisterBrokerBody has a bad part length" if n < 0 or n > MAX_INFLATED
                                else "compressed RegisterBrokerBody ends early")
            out.append(data[pos + 4:end])
            pos = end
        self.pos = pos
        return out


_INT32 = struct.Struct(">i")


def _inflate_register(body: bytes, version: int, max_topics: int | None) -> dict[str, Any]:
    """RegisterBrokerBody.encode(true): after inflating,

    int32 n + DataVersion JSON; int32 count; count x (int32 n + TopicConfig.encode()),
    TopicConfig.encode() being ``topicName readQueueNums writeQueueNums perm topicFilterType
    [attributes JSON]`` separated by single spaces (no topicSysFlag, no order: RocketMQ
    drops them on this path too); int32 n + filterServerList JSON; and from broker version
    5.0.0 on int32 count + count x (int32 n + TopicQueueMappingInfo JSON), which a
    NameServer keeps for static topics (topicQueueMappingByBroker of their routes).
    """
    stream = Parts(inflate(body, max_topics))
    data_version = json_body(stream.part(), "DataVersion")
    count = stream.count()
    _check_topic_count(count, max_topics)
    table = topic_configs(stream.parts(count))
    filters_json = stream.part()
    try:
        filters = loads(filters_json) if filters_json else []
    except ValueError:
        filters = []  # RocketMQ logs and goes on with an empty list
    mappings: dict[str, Any] = {}
    if version >= codes.V5_0_0:
        for _ in range(stream.count()):
            info = json_body(stream.part(), "TopicQueueMappingInfo")
            if not isinstance(info, dict) or not isinstance(info.get("topic"), str):
                raise BodyError("a TopicQueueMappingInfo must be an object naming its topic")
            mappings[info["topic"]] = info
    return {
        "topicConfigSerializeWrapper": {"dataVersion": data_version, "topicConfigTable": table,
                                        "topicQueueMappingInfoMap": mappings},
        "filterServerList": filters if filters is not None else [],
    }


# One TopicConfig line as nearly every broker writes it: a name without spaces or line
# breaks, three plain numbers, then the filter type and maybe attributes.
_LINE = re.compile(rb"^([^ \n]+) ([0-9]{1,9}) ([0-9]{1,9}) ([0-9]{1,9}) [^\n]*$", re.M)


# Lines read through the regex in one call: the decoding thread holds the GIL for one such
# call, so all 10,000 of a broker's lines at once would hold the event loop's reads that
# much longer (see SLICE_BYTES; bench/README.md, section 7c).
LINES_AT_ONCE = 1_000


def topic_configs(lines: list[bytes]) -> dict[str, Any]:
    """topicName -> config of the lines, the later of two with the same name winning (as
    RocketMQ's map does). Plain lines go through one regex LINES_AT_ONCE at a time (a
    third of the time a line at a time takes), others a line at a time."""
    table: dict[str, Any] = {}
    for at in range(0, len(lines), LINES_AT_ONCE):
        table.update(_plain_configs(lines[at:at + LINES_AT_ONCE]))
    return table


def _plain_configs(lines: list[bytes]) -> dict[str, Any]:
    joined = b"\n".join(lines)
    # a line break inside a line would let one line pass for two
    found = _LINE.findall(joined) if joined.count(b"\n") == len(lines) - 1 else []
    if len(found) != len(lines):
        return {c["topicName"]: c for c in map(_topic_config_line, lines)}
    try:
        return {name: {"topicName": name, "readQueueNums": int(r), "writeQueueNums": int(w), "perm": int(p),
                       "topicSysFlag": 0}
                for name, r, w, p in ((n.decode(), r, w, p) for n, r, w, p in found)}
    except UnicodeDecodeError:
        return {c["topicName"]: c for c in map(_topic_config_line, lines)}


def _topic_config_line(raw: bytes) -> dict[str, Any]:
    parts = raw.decode("utf-8", errors="replace").split(" ", 5)  # the attributes after the 5th stay whole
    if len(parts) < 5:
        raise BodyError(f"bad TopicConfig line {raw[:80]!r}")
    try:
        return {"topicName": parts[0], "readQueueNums": int(parts[1]), "writeQueueNums": int(parts[2]),
                "perm": int(parts[3]), "topicSysFlag": 0}
    except ValueError:
        raise BodyError(f"bad TopicConfig line {raw[:80]!r}") from None


def crc32(body: bytes) -> int:
    """UtilAll.crc32: CRC-32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


class BodyError(ValueError):
    """A body that cannot be read: answered with SYSTEM_ERROR, the connection stays."""


def json_body(body: bytes, what: str) -> Any:
    if not body:
        raise BodyError(f"{what} body is missing")
    try:
        return loads(body)
    except ValueError as e:
        raise BodyError(f"{what} body is not JSON: {e}") from None


# ---------------------------------------------------------------------- the brokers' answers
def data_version(stored: dict[str, Any]) -> bytes:
    """DataVersion as fastjson writes it (fields in alphabetical order)."""
    return orjson.dumps({"counter": stored["counter"], "stateVersion": stored.get("stateVersion", 0),
                         "timestamp": stored["timestamp"]})


def kv_table(table: dict[str, str]) -> bytes:
    return orjson.dumps({"table": table})
