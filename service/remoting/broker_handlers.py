"""The requests brokers send: REGISTER_BROKER (with its unchanged fast path, and big
bodies read as a change to their broker's previous one: service/remoting/body_deltas.py),
UNREGISTER_BROKER, BROKER_HEARTBEAT and QUERY_DATA_VERSION."""

from __future__ import annotations

import logging
import re
from typing import Any

from service.models import HeartbeatRequest, QueryDataVersionRequest, RegisterRequest, UnregisterRequest
from service.registration import body_digest
from service.removals import UNREGISTERED, Removal
from service.remoting import bodies, codes
from service.remoting.bodies import Layout
from service.remoting.body_deltas import plain_layout
from service.remoting.codec import Command
from service.remoting.requests import (
    CHANNEL,
    HandlerContext,
    RemotingError,
    body_doc,
    bool_field,
    channel_id,
    decoded,
    identity,
    long_field,
    need,
    ok,
    validate,
)
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

ZONE_NAME = "__ZONE_NAME"  # MixAll.ZONE_NAME: the broker's zone, among its extFields

EMPTY_WRAPPER = {"dataVersion": {"timestamp": 0, "counter": 0}, "topicConfigTable": {}}


# Header fields that vary between otherwise identical registrations and change nothing
# they register (an ACL signature is a function of the rest, the body's CRC of the body).
_UNDIGESTED = frozenset({"Signature", "AccessKey", "SecurityToken", "bodyCrc32"})


# A 5.x broker's plain body carries the static topics' mapping version, whose timestamp
# moves at every periodic registration (30 s) though nothing else does; a NameServer
# decides "changed" by the topic config's dataVersion alone. fastjson writes it in the
# body's first bytes (the wrapper's fields in name order, after dataVersion); digits only,
# so the pattern cannot stand inside a JSON string (whose quotes would be escaped).
_MAPPING_VERSION = re.compile(rb'"mappingDataVersion":\{"counter":\d+,"stateVersion":\d+,"timestamp":\d+\}')
_MAPPING_VERSION_WITHIN = 4096


def registration_digest(cmd: Command) -> str:
    """What makes two REGISTER_BROKER requests the same registration: the protocol version
    (it decides how the body is read), every header field that matters, and the body but
    a 5.x plain body's mappingDataVersion (the mappings themselves are digested)."""
    head = b"".join(key.encode() + b"\0" + cmd.ext_fields[key].encode() + b"\0"
                    for key in sorted(cmd.ext_fields) if key not in _UNDIGESTED)
    body = cmd.body
    found = _MAPPING_VERSION.search(body, 0, _MAPPING_VERSION_WITHIN)
    if found is None:
        return body_digest(b"remoting\0%d\0" % cmd.version, head, body)
    # a NUL byte stands where it was: no JSON body holds one, so none digests the same
    return body_digest(b"remoting\0%d\0" % cmd.version, head, body[:found.start()], b"\0", body[found.end():])


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
                    f.get("clusterName", "?"), channel.peer if channel and channel.peer else "?", e.remark)
        raise


async def _register_broker(ctx: HandlerContext, cmd: Command) -> Command:
    # Brokers send the same registration every 30 s (4.x forces a full one on that timer):
    # when it is the one this address last registered in full, only liveness is refreshed,
    # without decoding, validating or walking its topics again (as over HTTP).
    digest = registration_digest(cmd)
    channel = CHANNEL.get()
    fast = await ctx.registry.register_unchanged(digest, channel.id if channel else "")
    if fast is not None:
        channel_id(cmd.ext_fields.get("brokerAddr", ""))  # the refreshed broker is this connection's now
        return registration_answer(cmd, fast)
    data = identity(cmd)
    crc = long_field(cmd, "bodyCrc32", required=False) or 0
    if crc != 0 and crc != bodies.crc32(cmd.body):
        raise RemotingError(codes.SYSTEM_ERROR, "crc32 not match")
    key = cmd.ext_fields.get("brokerAddr", "")
    req = delta_request(ctx, cmd, key, data)
    if req is None:
        req, layout = await decoded(ctx, cmd, lambda: whole_request(ctx, cmd, data))
        wrapper = req.topicConfigSerializeWrapper
        if wrapper.fingerprints is not None and not wrapper.skipped:
            ctx.deltas.keep(key, layout, wrapper.fingerprints, req.filterServerList)
        else:
            ctx.deltas.drop(key)
    return registration_answer(cmd, await ctx.registry.register(req, channel_id(req.brokerAddr), digest=digest))


def compressed_form(cmd: Command) -> bool | None:
    """Whether a RegisterBrokerBody is in the compressed form (True) or plain JSON (False);
    None for a bare wrapper (brokers before 3.0.11) or no body: never read as a change."""
    if cmd.version < codes.V3_0_11 or not cmd.body:
        return None
    if bool_field(cmd, "compressed") or bodies.is_compressed(cmd.body):
        return True
    return False if cmd.body[:1] == b"{" else None


def delta_request(ctx: HandlerContext, cmd: Command, key: str, data: dict[str, Any]) -> RegisterRequest | None:
    """The request of a big body read as a change to the last one from `key`
    (service/remoting/body_deltas.py), or None: it is decoded whole. Anything a whole
    decode would refuse or skip goes the whole way, so its answer is the same."""
    compressed = compressed_form(cmd)
    max_topics = ctx.settings.max_topics_per_registration
    delta = ctx.deltas.read(key, cmd.body, compressed, max_topics) if compressed is not None else None
    if delta is None:
        return None
    doc = delta.head
    wrapper = doc["topicConfigSerializeWrapper"]
    try:
        req = request_of(ctx, cmd, dict(data), {**doc, "topicConfigSerializeWrapper": {
            **wrapper, "topicConfigTable": delta.configs}})
    except RemotingError:
        return None
    read = req.topicConfigSerializeWrapper
    fps = delta.fingerprints(read.fingerprints) if read.fingerprints is not None and not read.skipped else None
    if fps is None or len(fps) > max_topics:
        return None
    read.registering(fps)
    ctx.deltas.keep(key, delta.layout, fps, req.filterServerList)
    ctx.deltas.reads += 1
    return req


def whole_request(ctx: HandlerContext, cmd: Command, data: dict[str, Any]) -> tuple[RegisterRequest, Layout | None]:
    """The request, and where its body's table lies when the body may be held for the next
    one to be read as a change (see service/remoting/body_deltas.py)."""
    req, layout = register_request(ctx, cmd, data)
    if layout is None and compressed_form(cmd) is False:
        layout = plain_layout(cmd.body, len(req.topicConfigSerializeWrapper.topicConfigTable))
    return req, layout


def register_request(ctx: HandlerContext, cmd: Command, data: dict[str, Any]) -> tuple[RegisterRequest, Layout | None]:
    """The request, and the layout of a compressed body (see bodies.Layout)."""
    layout = None
    try:
        if cmd.version >= codes.V3_0_11:
            doc, layout = (bodies.register_broker_body_laid_out(cmd.body, bool_field(cmd, "compressed"), cmd.version,
                                                                ctx.settings.max_topics_per_registration)
                           if cmd.body else ({"topicConfigSerializeWrapper": EMPTY_WRAPPER, "filterServerList": []}, None))
        else:  # before 3.0.11 the body is a bare TopicConfigSerializeWrapper, no filter servers
            doc = {"topicConfigSerializeWrapper": bodies.json_body(cmd.body, "TopicConfigSerializeWrapper")
                   if cmd.body else EMPTY_WRAPPER}
    except bodies.BodyError as e:
        raise RemotingError(codes.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}") from None
    if not isinstance(doc, dict):
        raise RemotingError(codes.SYSTEM_ERROR, "Failed to decode RegisterBrokerBody: not an object")
    return request_of(ctx, cmd, data, doc), layout


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
    body = bodies.kv_table(result["kvTable"]) if result["kvTable"] else b""
    return ok(cmd, ext, body)


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
    body = bodies.data_version(stored) if stored else b""
    return ok(cmd, {"changed": "true" if result["changed"] else "false"}, body)
