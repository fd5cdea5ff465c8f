"""The requests brokers send: REGISTER_BROKER (with its unchanged fast path: a body found
by its digest, and its body, RegisterBrokerBody plain or compressed, as RocketMQ's Java
classes encode it), UNREGISTER_BROKER, BROKER_HEARTBEAT and QUERY_DATA_VERSION; and how a
request's body is read (``decoded``: a big one in a thread, one at a time), which the
other handlers use too.

Documents are validated by the same pydantic models as the HTTP API; a validation error
is a SYSTEM_ERROR (a NameServer answers every undecodable request that way).
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import zlib
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import orjson
from pydantic import ValidationError

from service.models import (
    DataVersion,
    HeartbeatRequest,
    M,
    QueryDataVersionRequest,
    RegisterRequest,
    UnregisterRequest,
    describe,
    validated,
)
from service.registry import RegistrationRefused, body_digest, body_weight, off_loop
from service.removals import UNREGISTERED, Removal
from service.remoting import codes
from service.remoting.codec import MAX_FRAME, Command, RemotingError, bool_field, loads, long_field, need, ok
from service.remoting.connection import CHANNEL
from service.store import StoreUnavailable

if TYPE_CHECKING:  # the dispatcher hands every handler its context
    from service.remoting.dispatch import HandlerContext

log = logging.getLogger(__name__)

ZONE_NAME = "__ZONE_NAME"  # MixAll.ZONE_NAME: the broker's zone, among its extFields

# DefaultRequestProcessor's remark when RouteInfoManager.registerBroker refuses (apache/rocketmq#4522)
REGISTER_FAILED = "register broker failed"

EMPTY_WRAPPER = {"dataVersion": {"timestamp": 0, "counter": 0}, "topicConfigTable": {}}


# Header fields that vary between otherwise identical registrations and change nothing
# they register (an ACL signature is a function of the rest, the body's CRC of the body).
_UNDIGESTED = frozenset({"Signature", "AccessKey", "SecurityToken", "bodyCrc32"})


# A plain body's versions, which fastjson writes in its first bytes (the wrapper's fields in
# name order: dataVersion, then a 5.x body's mappingDataVersion); digits only, so neither
# pattern can stand inside a JSON string (whose quotes would be escaped); fields in any order.
# - mappingDataVersion: a 5.x broker's static topics' mapping version, whose timestamp
#   moves at every periodic registration (30 s) though nothing else does; a NameServer
#   decides "changed" by the topic config's dataVersion alone;
# - dataVersion: a broker with enableSplitRegistration moves it at every part it sends
#   (TopicConfigManager.buildSerializeWrapper), so no part is ever the same bytes twice.
# Both are left out of the digest; the dataVersion is handed to register_unchanged.lua,
# which stores it (the tables hold what the rest of the body says).
_VERSIONS = re.compile(rb'"(data|mappingData)Version":\{"[a-zA-Z]+":\d+(?:,"[a-zA-Z]+":\d+)*\}')
_VERSIONS_WITHIN = 4096


def registration_digest(cmd: Command) -> tuple[str, str]:
    """What makes two REGISTER_BROKER requests the same registration: the protocol version
    (it decides how the body is read), every header field that matters, and the body but a
    plain body's versions (above); and the body's dataVersion, canonical, when it was left
    out ('' when it is digested with the rest: a compressed or bare body)."""
    head = b"".join(key.encode() + b"\0" + cmd.ext_fields[key].encode() + b"\0"
                    for key in sorted(cmd.ext_fields) if key not in _UNDIGESTED)
    body, parts, at, data_version = cmd.body, [b"remoting\0%d\0" % cmd.version, head], 0, ""
    if body[:1] == b"{" and cmd.version >= codes.V3_0_11:
        for found in _VERSIONS.finditer(body, 0, _VERSIONS_WITHIN):
            if found.group(1) == b"data":
                if data_version:
                    break  # only the wrapper's, the first
                try:
                    data_version = DataVersion.model_validate(orjson.loads(body[found.end(1) + 9:found.end()])).canonical()
                except ValueError:
                    break
            # a NUL byte stands where it was: no JSON body holds one, so none digests the same
            parts += [body[at:found.start()], b"\0"]
            at = found.end()
    return body_digest(*parts, body[at:]), data_version


async def register_broker(ctx: HandlerContext, cmd: Command) -> Command:
    try:
        return await _register_broker(ctx, cmd)
    except RemotingError as e:
        # the broker only sees the answer's remark, and retries every 30 s until its timeout
        # drops its routes: the operator must be able to see why
        channel = CHANNEL.get()
        f = cmd.ext_fields
        log.warning("registration refused: broker %s (name %s, id %s, cluster %s) from %s: %s",
                    f.get("brokerAddr", "?"), f.get("brokerName", "?"), f.get("brokerId", "?"),
                    f.get("clusterName", "?"), channel.peer if channel and channel.peer else "?",
                    e.remark if e.__cause__ is None else f"{e.remark}: {e.__cause__}")
        raise


async def _register_broker(ctx: HandlerContext, cmd: Command) -> Command:
    # Brokers send the same registration every 30 s (4.x forces a full one on that timer):
    # when it is one this address registered in full and nothing changed since (with split
    # registration, each part is a body of its own), only liveness is refreshed,
    # without decoding, validating or walking its topics again (as over HTTP).
    digest, data_version = registration_digest(cmd)
    channel = CHANNEL.get()
    fast = await ctx.registry.register_unchanged(digest, channel.id if channel else "", data_version)
    if fast is not None:
        channel_id(cmd.ext_fields.get("brokerAddr", ""))  # the refreshed broker is this connection's now
        return registration_answer(cmd, fast)
    data = identity(cmd)
    crc = long_field(cmd, "bodyCrc32", required=False) or 0
    if crc != 0 and crc != crc32(cmd.body):
        raise RemotingError(codes.SYSTEM_ERROR, "crc32 not match")
    # the whole body, decoded off the event loop when it is big (``decoded``)
    req = await decoded(ctx, cmd, lambda: register_request(ctx, cmd, data))
    try:
        answer = await ctx.registry.register(req, channel_id(req.brokerAddr), digest=digest)
    except RegistrationRefused as e:
        raise RemotingError(codes.SYSTEM_ERROR, REGISTER_FAILED) from e
    return registration_answer(cmd, answer)


def register_request(ctx: HandlerContext, cmd: Command, data: dict[str, Any]) -> RegisterRequest:
    """The request of REGISTER_BROKER's header fields `data` and its body."""
    try:
        if cmd.version >= codes.V3_0_11:
            doc = (register_broker_body(cmd.body, bool_field(cmd, "compressed"), cmd.version,
                                        ctx.settings.max_topics_per_registration)
                   if cmd.body else {"topicConfigSerializeWrapper": EMPTY_WRAPPER, "filterServerList": []})
        else:  # before 3.0.11 the body is a bare TopicConfigSerializeWrapper, no filter servers
            doc = {"topicConfigSerializeWrapper": json_body(cmd.body, "TopicConfigSerializeWrapper")
                   if cmd.body else EMPTY_WRAPPER}
    except BodyError as e:
        raise RemotingError(codes.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}") from None
    if not isinstance(doc, dict):
        raise RemotingError(codes.SYSTEM_ERROR, "Failed to decode RegisterBrokerBody: not an object")
    return request_of(ctx, cmd, data, doc)


def request_of(ctx: HandlerContext, cmd: Command, data: dict[str, Any], doc: dict[str, Any]) -> RegisterRequest:
    """The request of header fields `data` and RegisterBrokerBody `doc`."""
    data["haServerAddr"] = cmd.ext_fields.get("haServerAddr")
    data["heartbeatTimeoutMillis"] = long_field(cmd, "heartbeatTimeoutMillis", required=False)
    if "enableActingMaster" in cmd.ext_fields:  # a 5.x broker's header (Boolean: absent before 5.0)
        data["enableActingMaster"] = bool_field(cmd, "enableActingMaster")
    if cmd.ext_fields.get(ZONE_NAME):
        data["zoneName"] = cmd.ext_fields[ZONE_NAME]
    data["topicConfigSerializeWrapper"] = doc.get("topicConfigSerializeWrapper")
    if "filterServerList" in doc:
        data["filterServerList"] = doc["filterServerList"] if doc["filterServerList"] is not None else []
    return validate(ctx, RegisterRequest, data)


def registration_answer(cmd: Command, result: dict[str, Any]) -> Command:
    ext = {k: result[k] for k in ("masterAddr", "haServerAddr") if result.get(k)}
    body = kv_table(result["kvTable"]) if result["kvTable"] else b""
    return ok(cmd, ext, body)


# ---------------------------------------------------------------------- RegisterBrokerBody
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
    if compressed or is_compressed(body):
        return _inflate_register(body, version, max_topics)
    doc = json_body(body, "RegisterBrokerBody")
    if not isinstance(doc, dict):
        raise BodyError("RegisterBrokerBody must be a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper")
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if isinstance(table, dict):
        _check_topic_count(len(table), max_topics)
    return doc


def is_compressed(body: bytes) -> bool:
    """A body in the compressed form whatever the header says (see ``register_broker_body``)."""
    return body[:1] == b"\x78"


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


# ---------------------------------------------------------------------- reading a request's body
class BodyError(ValueError):
    """A body that cannot be read: answered with SYSTEM_ERROR, the connection stays."""


def json_body(body: bytes, what: str) -> Any:
    if not body:
        raise BodyError(f"{what} body is missing")
    try:
        return loads(body)
    except ValueError as e:
        raise BodyError(f"{what} body is not JSON: {e}") from None


# Bodies up to this size are decoded at once: a few hundred microseconds at most.
SMALL_BODY = 4096
T = TypeVar("T")


async def decoded(ctx: HandlerContext, cmd: Command, decode: Callable[[], T]) -> T:
    """``decode()`` of a request's body. A larger body waits for its turn: one at a time
    per worker, each after the I/O that arrived meanwhile, so that pipelined bodies
    costing milliseconds each never run back to back while other clients wait; a big one
    (a 10,000-topic registration's, bench/README.md section 7b) runs in a thread, so the event loop
    answers route reads meanwhile."""
    if len(cmd.body) <= SMALL_BODY:
        return decode()
    async with ctx.decode_turn:
        await asyncio.sleep(0)
        return await off_loop(body_weight(len(cmd.body)), decode)


async def body_doc(ctx: HandlerContext, cmd: Command, what: str) -> Any:
    try:
        return await decoded(ctx, cmd, lambda: json_body(cmd.body, what))
    except BodyError as e:
        raise RemotingError(codes.SYSTEM_ERROR, str(e)) from None


def validate(ctx: HandlerContext, model: type[M], data: dict[str, Any]) -> M:
    try:
        return validated(model, data, ctx.settings)
    except ValidationError as e:
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: {describe(e)}") from None


def identity(cmd: Command) -> dict[str, Any]:
    return {
        "clusterName": need(cmd, "clusterName"),
        "brokerAddr": need(cmd, "brokerAddr"),
        "brokerName": need(cmd, "brokerName"),
        "brokerId": long_field(cmd, "brokerId"),
    }


def channel_id(addr: str) -> str:
    channel = CHANNEL.get()
    if channel is None:
        return ""
    channel.brokers.add(addr)
    return channel.id


# ---------------------------------------------------------------------- the other brokers' requests
async def unregister_broker(ctx: HandlerContext, cmd: Command) -> Command:
    req = validate(ctx, UnregisterRequest, identity(cmd))
    try:
        await ctx.registry.unregister(req)
    except StoreUnavailable:
        # a broker shutting down does not ask twice: the worker's removal path sends it
        # again until Redis answers, for as long as this connection owns the address (a
        # broker back through another connection meanwhile stays)
        channel = CHANNEL.get()
        if channel is not None:
            ctx.removals.submit([Removal(req.brokerAddr, channel.id, UNREGISTERED)])
        raise
    return ok(cmd)


async def broker_heartbeat(ctx: HandlerContext, cmd: Command) -> Command:
    data = {
        "clusterName": need(cmd, "clusterName"),
        "brokerAddr": need(cmd, "brokerAddr"),
        "brokerName": need(cmd, "brokerName"),
        "brokerId": long_field(cmd, "brokerId", required=False),
    }
    if data["brokerId"] is None:
        # RocketMQ refreshes by address alone; our script checks the identity, so read it
        raw = await ctx.store.call(ctx.store.redis.hget(ctx.store.keys.live(data["brokerAddr"]), "brokerId"))
        if raw is None:
            return ok(cmd)  # not registered: nothing to refresh, as in RocketMQ
        data["brokerId"] = int(raw)
    req = validate(ctx, HeartbeatRequest, data)
    await ctx.registry.heartbeat(req, channel_id(req.brokerAddr))  # RocketMQ answers SUCCESS whether or not it was known
    return ok(cmd)


async def query_data_version(ctx: HandlerContext, cmd: Command) -> Command:
    data = identity(cmd)
    data["dataVersion"] = await body_doc(ctx, cmd, "DataVersion")
    req = validate(ctx, QueryDataVersionRequest, data)
    result = await ctx.registry.query_data_version(req, channel_id(req.brokerAddr))
    stored = result["nameServerDataVersion"]
    body = data_version(stored) if stored else b""
    return ok(cmd, {"changed": "true" if result["changed"] else "false"}, body)


# ---------------------------------------------------------------------- answers
def data_version(stored: dict[str, Any]) -> bytes:
    """DataVersion as fastjson writes it (fields in alphabetical order)."""
    return orjson.dumps({"counter": stored["counter"], "stateVersion": stored.get("stateVersion", 0),
                         "timestamp": stored["timestamp"]})


def kv_table(table: dict[str, str]) -> bytes:
    return orjson.dumps({"table": table})

