"""The requests brokers send: REGISTER_BROKER (with its unchanged fast path: a body found
by its digest; its RegisterBrokerBody is bodies.py's), UNREGISTER_BROKER, BROKER_HEARTBEAT
and QUERY_DATA_VERSION.

Documents are validated by the same pydantic models as the HTTP API; a validation error
is a SYSTEM_ERROR (a NameServer answers every undecodable request that way).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson

from service.models import DataVersion, HeartbeatRequest, QueryDataVersionRequest, RegisterRequest, UnregisterRequest
from service.registry import RegistrationRefused, body_digest
from service.removals import UNREGISTERED, Removal
from service.remoting import codes
from service.remoting.bodies import EMPTY_WRAPPER, BodyError, crc32, data_version, json_body, kv_table, register_broker_body
from service.remoting.codec import Command, RemotingError, bool_field, long_field, need, ok
from service.remoting.connection import CHANNEL
from service.remoting.context import HandlerContext, body_doc, decoded, validate
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

# DefaultRequestProcessor's remark when RouteInfoManager.registerBroker refuses (apache/rocketmq#4522)
REGISTER_FAILED = "register broker failed"



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
    if cmd.ext_fields.get(codes.ZONE_NAME):
        data["zoneName"] = cmd.ext_fields[codes.ZONE_NAME]
    data["topicConfigSerializeWrapper"] = doc.get("topicConfigSerializeWrapper")
    if "filterServerList" in doc:
        data["filterServerList"] = doc["filterServerList"] if doc["filterServerList"] is not None else []
    return validate(ctx, RegisterRequest, data)


def registration_answer(cmd: Command, result: dict[str, Any]) -> Command:
    ext = {k: result[k] for k in ("masterAddr", "haServerAddr") if result.get(k)}
    body = kv_table(result["kvTable"]) if result["kvTable"] else b""
    return ok(cmd, ext, body)


def identity(cmd: Command, id_required: bool = True) -> dict[str, Any]:
    return {
        "clusterName": need(cmd, "clusterName"),
        "brokerAddr": need(cmd, "brokerAddr"),
        "brokerName": need(cmd, "brokerName"),
        "brokerId": long_field(cmd, "brokerId", required=id_required),
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
    data = identity(cmd, id_required=False)
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


