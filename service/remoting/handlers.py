"""One coroutine per request code, on the app's Registry and ReadCache.

Headers arrive as RocketMQ's extFields (all strings). A required field that is absent is
answered as RocketMQ does (SYSTEM_ERROR, "the custom field <x> is null"); documents are
validated by the same pydantic models as the HTTP API, and a validation error is a
SYSTEM_ERROR too (a NameServer answers every undecodable request that way). Nothing is
changed by a request that is refused.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field
import logging
from typing import Any, Awaitable, Callable, TypeVar

import orjson
from pydantic import ValidationError

from service.cache import CLUSTER, Answer, ReadCache, make_answer
from service.config import Settings
from service.models import (
    M,
    TOPIC_MAX,
    HeartbeatRequest,
    QueryDataVersionRequest,
    TOPIC_CONFIG,
    RegisterRequest,
    UnregisterRequest,
    describe,
    kv_value_error,
    name_rule,
    queue_count_error,
    valid_name,
    validated,
)
from service.node import Node
from service.registration import body_digest, body_weight, off_loop
from service.registry import Registry
from service.addresses import AddressList
from service.auth import TokenFile
from service.remoting import acl, bodies, codes
from service.remoting.bodies import Layout
from service.remoting.body_deltas import BodyDeltas, plain_layout
from service.remoting.codec import Command, response_to
from service.remoting.namesrv_config import properties as namesrv_config_values
from service.store import NotReplicated, OutcomeUnknown, Store, StoreRefusing, StoreUnavailable, outcome_text

log = logging.getLogger(__name__)


@dataclass
class Channel:
    """One client connection: its id, and the brokers that registered or refreshed on it."""

    id: str
    brokers: set[str] = field(default_factory=set)
    peer: str = ""  # the client's address (the PROXY header's when there is one): whitelists check it


# the connection a request came on; set by the server for each connection's tasks
CHANNEL: ContextVar[Channel | None] = ContextVar("remoting_channel", default=None)


def channel_id(addr: str) -> str:
    channel = CHANNEL.get()
    if channel is None:
        return ""
    channel.brokers.add(addr)
    return channel.id


class RemotingError(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class Context:
    """What the handlers share: the worker's registry, cache and settings (its Node)."""

    def __init__(self, node: Node) -> None:
        self.registry: Registry = node.registry
        self.store: Store = node.store
        self.cache: ReadCache = node.cache
        self.settings: Settings = node.settings
        # with authentication on, every request is checked against the file's key pairs
        self.keys = TokenFile(node.settings.auth_tokens_file) if node.settings.auth_tokens_file else None
        white = node.settings.remoting_white_addresses
        self.white = AddressList.from_setting(white) if white else None
        self.listen_port = node.settings.remoting_port  # the bound one once the server listens
        # large bodies are decoded one at a time (see ``decoded``)
        self.decode_turn = asyncio.Semaphore(1)
        self.deltas = BodyDeltas()  # big brokers' last bodies: the next is read as a change


Handler = Callable[[Context, Command], Awaitable[Command]]


# ---------------------------------------------------------------------- helpers
def ok(request: Command, ext: dict[str, str] | None = None, body: bytes = b"") -> Command:
    return response_to(request, codes.SUCCESS, None, ext, body, version=codes.V5_3_3)


def fail(request: Command, code: int, remark: str) -> Command:
    return response_to(request, code, remark, version=codes.V5_3_3)


def need(cmd: Command, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise RemotingError(codes.SYSTEM_ERROR, f"the custom field <{name}> is null")
    return value


def long_field(cmd: Command, name: str, required: bool = True) -> int | None:
    raw = need(cmd, name) if required else cmd.ext_fields.get(name)
    if raw is None or (raw == "" and not required):
        return None
    try:
        return int(raw)
    except ValueError:
        raise RemotingError(codes.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {raw!r}") from None


def bool_field(cmd: Command, name: str) -> bool:
    return cmd.ext_fields.get(name, "").strip().lower() == "true"  # Boolean.parseBoolean


def name_field(cmd: Command, name: str, max_length: int = 255, required: bool = True) -> str | None:
    value = need(cmd, name) if required else cmd.ext_fields.get(name)
    if value is None:
        return None
    if not valid_name(value, max_length):
        raise RemotingError(codes.SYSTEM_ERROR,
                            f"invalid request: {name} must be {name_rule(max_length)}")
    return value


def validate(ctx: Context, model: type[M], data: dict[str, Any]) -> M:
    try:
        return validated(model, data, ctx.settings)
    except ValidationError as e:
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: {describe(e)}") from None


async def body_doc(ctx: Context, cmd: Command, what: str) -> Any:
    try:
        return await decoded(ctx, cmd, lambda: bodies.json_body(cmd.body, what))
    except bodies.BodyError as e:
        raise RemotingError(codes.SYSTEM_ERROR, str(e)) from None


# Bodies up to this size are decoded at once: a few hundred microseconds at most.
SMALL_BODY = 4096
T = TypeVar("T")


async def decoded(ctx: Context, cmd: Command, decode: Callable[[], T]) -> T:
    """``decode()`` of a request's body. A larger body waits for its turn: one at a time
    per worker, each after the I/O that arrived meanwhile, so that pipelined bodies
    costing milliseconds each never run back to back while other clients wait; a big one
    (a 10,000-topic registration takes tens of ms) runs in a thread, so the event loop
    answers route reads meanwhile."""
    if len(cmd.body) <= SMALL_BODY:
        return decode()
    async with ctx.decode_turn:
        await asyncio.sleep(0)
        return await off_loop(body_weight(len(cmd.body)), decode)


def identity(cmd: Command) -> dict[str, Any]:
    return {
        "clusterName": need(cmd, "clusterName"),
        "brokerAddr": need(cmd, "brokerAddr"),
        "brokerName": need(cmd, "brokerName"),
        "brokerId": long_field(cmd, "brokerId"),
    }


# ---------------------------------------------------------------------- broker-facing
EMPTY_WRAPPER = {"dataVersion": {"timestamp": 0, "counter": 0}, "topicConfigTable": {}}


# Header fields that vary between otherwise identical registrations and change nothing
# they register (an ACL signature is a function of the rest).
_UNDIGESTED = frozenset({"Signature", "AccessKey", "SecurityToken"})


def registration_digest(cmd: Command) -> str:
    """What makes two REGISTER_BROKER requests the same registration: the protocol version
    (it decides how the body is read), every header field that matters, and the body."""
    head = b"".join(key.encode() + b"\0" + cmd.ext_fields[key].encode() + b"\0"
                    for key in sorted(cmd.ext_fields) if key not in _UNDIGESTED)
    return body_digest(b"remoting\0%d\0" % cmd.version, head, cmd.body)


async def register_broker(ctx: Context, cmd: Command) -> Command:
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
        return fail(cmd, codes.SYSTEM_ERROR, "crc32 not match")
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


def delta_request(ctx: Context, cmd: Command, key: str, data: dict[str, Any]) -> RegisterRequest | None:
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


def whole_request(ctx: Context, cmd: Command, data: dict[str, Any]) -> tuple[RegisterRequest, Layout | None]:
    """The request, and where its body's table lies when the body may be held for the next
    one to be read as a change (see service/remoting/body_deltas.py)."""
    req, layout = register_request(ctx, cmd, data)
    if layout is None and compressed_form(cmd) is False:
        layout = plain_layout(cmd.body, len(req.topicConfigSerializeWrapper.topicConfigTable))
    return req, layout


def register_request(ctx: Context, cmd: Command, data: dict[str, Any]) -> tuple[RegisterRequest, Layout | None]:
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


def request_of(ctx: Context, cmd: Command, data: dict[str, Any], doc: dict[str, Any]) -> RegisterRequest:
    """The request of header fields `data` and RegisterBrokerBody `doc`."""
    data["haServerAddr"] = cmd.ext_fields.get("haServerAddr")
    data["heartbeatTimeoutMillis"] = long_field(cmd, "heartbeatTimeoutMillis", required=False)
    data["topicConfigSerializeWrapper"] = doc.get("topicConfigSerializeWrapper")
    if "filterServerList" in doc:
        data["filterServerList"] = doc["filterServerList"] if doc["filterServerList"] is not None else []
    return validate(ctx, RegisterRequest, data)


def registration_answer(cmd: Command, result: dict[str, Any]) -> Command:
    ext = {k: result[k] for k in ("masterAddr", "haServerAddr") if result.get(k)}
    body = bodies.kv_table(result["kvTable"]) if result["kvTable"] else b""
    return ok(cmd, ext, body)


async def unregister_broker(ctx: Context, cmd: Command) -> Command:
    req = validate(ctx, UnregisterRequest, identity(cmd))
    await ctx.registry.unregister(req)
    return ok(cmd)


async def broker_heartbeat(ctx: Context, cmd: Command) -> Command:
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


async def query_data_version(ctx: Context, cmd: Command) -> Command:
    data = identity(cmd)
    data["dataVersion"] = await body_doc(ctx, cmd, "DataVersion")
    req = validate(ctx, QueryDataVersionRequest, data)
    result = await ctx.registry.query_data_version(req, channel_id(req.brokerAddr))
    stored = result["nameServerDataVersion"]
    body = bodies.data_version(stored) if stored else b""
    return ok(cmd, {"changed": "true" if result["changed"] else "false"}, body)


# ---------------------------------------------------------------------- client-facing
def stale_max_ms(ctx: Context) -> int | None:
    """With RMQ_REMOTING_STALE_READS, reads answer from the last answers this worker knew (at
    most RMQ_STALE_MAX_MS old) while Redis is unreachable, as a NameServer answers from
    memory (ReadCache.read_route); otherwise Redis' failure is the answer."""
    return ctx.settings.stale_max_ms if ctx.settings.remoting_stale_reads else None


# RocketMQ appends FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL) to this remark; clients log it.
FAQ_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def topic_not_exist(cmd: Command, topic: str) -> Command:
    return fail(cmd, codes.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}{FAQ_HINT}")


async def get_route(ctx: Context, cmd: Command) -> Command:
    topic = need(cmd, "topic")
    if not valid_name(topic, TOPIC_MAX):
        return topic_not_exist(cmd, topic)  # no route can exist under such a name
    standard = cmd.version >= codes.V4_9_4 or bool_field(cmd, "acceptStandardJsonOnly")
    reg = ctx.registry

    async def fetch() -> Answer:
        route = await reg.route(topic)
        if route.body is None:
            return make_answer(route.version, 404, b"")
        return make_answer(route.version, 200, bodies.route(orjson.loads(route.body), standard), route.groups)

    answer, _ = await ctx.cache.read_route("tcp-std" if standard else "tcp", topic, fetch, stale_max_ms(ctx))
    if answer.status != 200:
        return topic_not_exist(cmd, topic)
    return ok(cmd, body=answer.body)


async def cluster_info(ctx: Context, cmd: Command) -> Command:
    reg = ctx.registry

    async def fetch() -> Answer:
        version, doc = await reg.cluster_info()
        return make_answer(version, 200, bodies.cluster_info(doc))

    answer, _ = await ctx.cache.read_scoped(("remoting-cluster",), fetch, CLUSTER, stale_max_ms(ctx))
    return ok(cmd, body=answer.body)


def topic_list(which: str) -> Handler:
    async def handler(ctx: Context, cmd: Command) -> Command:
        cluster = name_field(cmd, "cluster") if which == "cluster" else ""
        reg = ctx.registry

        async def fetch() -> Answer:
            version, doc = await reg.topic_list(which, cluster or "")
            return make_answer(version, 200, bodies.topic_list(doc))

        answer, _ = await ctx.cache.read_scoped(("remoting-topics", which, cluster), fetch,
                                                stale_max_ms=stale_max_ms(ctx))
        return ok(cmd, body=answer.body)

    return handler


# ---------------------------------------------------------------------- admin
def write_perm(mode: str) -> Handler:
    answer_field = {"wipe": "wipeTopicCount", "add": "addTopicCount"}[mode]

    async def handler(ctx: Context, cmd: Command) -> Command:
        name = name_field(cmd, "brokerName")
        assert name is not None
        count = await ctx.registry.write_perm(name, mode)
        return ok(cmd, {answer_field: str(count)})

    return handler


async def delete_topic(ctx: Context, cmd: Command) -> Command:
    topic = name_field(cmd, "topic", TOPIC_MAX)
    cluster = cmd.ext_fields.get("clusterName") or None
    if cluster is not None and not valid_name(cluster):
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: clusterName must be {name_rule()}")
    assert topic is not None
    await ctx.registry.delete_topic(topic, cluster)
    return ok(cmd)


async def register_topic(ctx: Context, cmd: Command) -> Command:
    topic = name_field(cmd, "topic", TOPIC_MAX)
    doc = await body_doc(ctx, cmd, "TopicRouteData") if cmd.body else {}
    queues = doc.get("queueDatas") if isinstance(doc, dict) else None
    if not queues:
        return ok(cmd)  # RocketMQ: nothing to register
    if not isinstance(queues, list):
        raise RemotingError(codes.SYSTEM_ERROR, "invalid request: queueDatas must be a list")
    rows: list[tuple[str, int, int, int, int]] = []
    for i, q in enumerate(queues):
        if not isinstance(q, dict) or not isinstance(q.get("brokerName"), str) or not valid_name(q["brokerName"]):
            raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: queueDatas.{i}.brokerName is missing or invalid")
        try:
            tc = TOPIC_CONFIG.validate_python({k: q.get(k) for k in ("readQueueNums", "writeQueueNums", "perm")}
                                              | {"topicSysFlag": q.get("topicSysFlag", 0)})
        except ValidationError as e:
            raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: queueDatas.{i}: {describe(e)}") from None
        error = queue_count_error(tc, ctx.settings.max_queue_nums)
        if error:
            raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: queueDatas.{i}.{error}")
        rows.append((q["brokerName"], tc["readQueueNums"], tc["writeQueueNums"], tc["perm"], tc.get("topicSysFlag", 0)))
    await ctx.registry.register_topic(topic or "", rows)  # unknown broker names: refused whole, answered SUCCESS as RocketMQ does
    return ok(cmd)


async def put_kv(ctx: Context, cmd: Command) -> Command:
    namespace, key = name_field(cmd, "namespace"), name_field(cmd, "key")
    value = need(cmd, "value")
    assert namespace is not None and key is not None
    error = kv_value_error(value)
    if error:
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: {error}")
    await ctx.registry.kv_put(namespace, key, value)
    return ok(cmd)


async def get_kv(ctx: Context, cmd: Command) -> Command:
    namespace, key = name_field(cmd, "namespace"), name_field(cmd, "key")
    assert namespace is not None and key is not None
    value = await ctx.registry.kv_get(namespace, key)
    if value is None:
        return fail(cmd, codes.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
    return ok(cmd, {"value": value})


async def delete_kv(ctx: Context, cmd: Command) -> Command:
    namespace, key = name_field(cmd, "namespace"), name_field(cmd, "key")
    assert namespace is not None and key is not None
    await ctx.registry.kv_delete(namespace, key)
    return ok(cmd)


async def kv_list(ctx: Context, cmd: Command) -> Command:
    namespace = name_field(cmd, "namespace")
    assert namespace is not None
    table = await ctx.registry.kv_table(namespace)
    if table is None:
        return fail(cmd, codes.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
    return ok(cmd, body=bodies.kv_table(table))


async def broker_member_group(ctx: Context, cmd: Command) -> Command:
    """GET_BROKER_MEMBER_GROUP (5.x): the group's members; the cluster is the one asked
    for, and an unknown group has no members, as RouteInfoManager answers."""
    cluster, name = name_field(cmd, "clusterName"), name_field(cmd, "brokerName")
    assert cluster is not None and name is not None
    _, addrs = await ctx.registry.member_group(name)
    return ok(cmd, body=bodies.member_group(cluster, name, addrs))


async def namesrv_config(ctx: Context, cmd: Command) -> Command:
    """GET_NAMESRV_CONFIG: the Java NameServer's keys that apply, then the worker's settings
    (service.remoting.namesrv_config); no credentials."""
    return ok(cmd, body=bodies.properties(namesrv_config_values(ctx.settings, ctx.listen_port)))


async def update_namesrv_config(ctx: Context, cmd: Command) -> Command:
    return fail(cmd, codes.NO_PERMISSION, "settings come from the environment (RMQ_* variables) and apply to every "
                "worker alike: change them in the deployment, not through UPDATE_NAMESRV_CONFIG")


_timeout = getattr(asyncio, "timeout", None)

HANDLERS: dict[int, Handler] = {
    codes.PUT_KV_CONFIG: put_kv,
    codes.GET_KV_CONFIG: get_kv,
    codes.DELETE_KV_CONFIG: delete_kv,
    codes.REGISTER_BROKER: register_broker,
    codes.UNREGISTER_BROKER: unregister_broker,
    codes.GET_ROUTEINFO_BY_TOPIC: get_route,
    codes.GET_BROKER_CLUSTER_INFO: cluster_info,
    codes.WIPE_WRITE_PERM_OF_BROKER: write_perm("wipe"),
    codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topic_list("all"),
    codes.DELETE_TOPIC_IN_NAMESRV: delete_topic,
    codes.REGISTER_TOPIC_IN_NAMESRV: register_topic,
    codes.GET_KVLIST_BY_NAMESPACE: kv_list,
    codes.GET_TOPICS_BY_CLUSTER: topic_list("cluster"),
    codes.GET_SYSTEM_TOPIC_LIST_FROM_NS: topic_list("system"),
    codes.GET_UNIT_TOPIC_LIST: topic_list("unit"),
    codes.GET_HAS_UNIT_SUB_TOPIC_LIST: topic_list("unit-sub"),
    codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: topic_list("unit-sub-without-unit"),
    codes.QUERY_DATA_VERSION: query_data_version,
    codes.ADD_WRITE_PERM_OF_BROKER: write_perm("add"),
    codes.BROKER_HEARTBEAT: broker_heartbeat,
    codes.GET_BROKER_MEMBER_GROUP: broker_member_group,
    codes.GET_NAMESRV_CONFIG: namesrv_config,
    codes.UPDATE_NAMESRV_CONFIG: update_namesrv_config,
}


async def dispatch(ctx: Context, cmd: Command, timeout: float) -> Command:
    """The answer to one request; never raises (a failed request must not end the connection)."""
    if ctx.keys is not None:
        channel = CHANNEL.get()
        refused = acl.refusal(ctx.keys, ctx.settings.auth_reads, cmd, channel.peer if channel else "", ctx.white)
        if refused is not None:
            return fail(cmd, codes.SYSTEM_ERROR, refused)
    handler = HANDLERS.get(cmd.code)
    if handler is None:
        return fail(cmd, codes.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
    try:
        if _timeout is not None:  # Python 3.11+: no extra task per request
            async with _timeout(timeout):
                return await handler(ctx, cmd)
        return await asyncio.wait_for(handler(ctx, cmd), timeout)
    except RemotingError as e:
        return fail(cmd, e.code, e.remark)
    except StoreUnavailable as e:
        if not isinstance(e, (StoreRefusing, NotReplicated)):  # refusals are logged once per burst by the store
            log.warning("Redis unavailable for request code %s: %s", cmd.code, e)
        return fail(cmd, codes.SYSTEM_ERROR, outcome_text(e))
    except asyncio.TimeoutError:  # the handler's own calls may have gone through
        log.warning("request code %s took longer than %.1f s", cmd.code, timeout)
        return fail(cmd, codes.SYSTEM_ERROR, outcome_text(OutcomeUnknown()))
    except Exception:
        log.exception("unhandled error in request code %s", cmd.code)
        return fail(cmd, codes.SYSTEM_ERROR, "internal error; see the registry's log")
