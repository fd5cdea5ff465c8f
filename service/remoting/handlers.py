"""The handlers of the clients' reads and the operators' changes, one coroutine per request
code (dispatch.py names them; the brokers' requests are broker_handlers.py's, the bodies'
encoding bodies.py's). Nothing is
changed by a request that is refused.
"""

from __future__ import annotations


import orjson
from pydantic import ValidationError

from service.cache import CLUSTER, Answer, make_answer
from service.models import TOPIC_MAX, TOPIC_CONFIG, describe, kv_value_error, name_rule, queue_count_error, valid_name
from service.registry import in_zone
from service.remoting import bodies, codes
from service.remoting.context import Handler, HandlerContext, body_doc
from service.remoting.codec import Command, RemotingError, bool_field, fail, need, ok
from service.remoting.namesrv_config import properties as namesrv_config_values

def name_field(cmd: Command, name: str, max_length: int = 255, required: bool = True) -> str | None:
    value = need(cmd, name) if required else cmd.ext_fields.get(name)
    if value is None:
        return None
    if not valid_name(value, max_length):
        raise RemotingError(codes.SYSTEM_ERROR,
                            f"invalid request: {name} must be {name_rule(max_length)}")
    return value


# ---------------------------------------------------------------------- client-facing
def stale_max_ms(ctx: HandlerContext) -> int | None:
    """With RMQ_REMOTING_STALE_READS, reads answer from the last answers this worker knew (at
    most RMQ_STALE_MAX_MS old) while Redis is unreachable, as a NameServer answers from
    memory (ReadCache.read_route); otherwise Redis' failure is the answer."""
    return ctx.settings.stale_max_ms if ctx.settings.remoting_stale_reads else None


# RocketMQ appends FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL) to this remark (5.3.3's URL; 4.x had
# http://rocketmq.apache.org/docs/faq/); clients log it.
FAQ_HINT = "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."


def topic_not_exist(cmd: Command, topic: str) -> Command:
    return fail(cmd, codes.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}{FAQ_HINT}")


def zone_asked(ext: dict[str, str]) -> str | None:
    """The zone a route request asks its answer filtered by, as ZoneRouteRPCHook reads it:
    __ZONE_MODE true (any case: Boolean.parseBoolean) and a __ZONE_NAME that is not blank;
    None for the whole route."""
    if ext.get(codes.ZONE_MODE, "").lower() != "true":
        return None
    zone = ext.get(codes.ZONE_NAME, "")
    return zone if zone.strip() else None


async def get_route(ctx: HandlerContext, cmd: Command) -> Command:
    topic = need(cmd, "topic")
    if not valid_name(topic, TOPIC_MAX):
        return topic_not_exist(cmd, topic)  # no route can exist under such a name
    zone = zone_asked(cmd.ext_fields)
    # zone mode: filtered from the standard answer (cached as any other)
    standard = zone is not None or cmd.version >= codes.V4_9_4 or bool_field(cmd, "acceptStandardJsonOnly")
    reg = ctx.registry

    async def fetch() -> Answer:
        route = await reg.route(topic)
        if route.body is None:
            return make_answer(route.version, 404, b"")
        return make_answer(route.version, 200, bodies.route(orjson.loads(route.body), standard), route.groups)

    answer, _ = await ctx.cache.read_route("tcp-std" if standard else "tcp", topic, fetch, stale_max_ms(ctx))
    if answer.status != 200:
        return topic_not_exist(cmd, topic)
    if zone is not None:
        # ZoneRouteRPCHook decodes the answer, filters it and encodes it again with
        # fastjson's defaults: bare brokerAddrs keys, whatever the client's version
        return ok(cmd, body=bodies.route(in_zone(orjson.loads(answer.body), zone), standard=False))
    return ok(cmd, body=answer.body)


async def cluster_info(ctx: HandlerContext, cmd: Command) -> Command:
    reg = ctx.registry

    async def fetch() -> Answer:
        version, doc = await reg.cluster_info()
        return make_answer(version, 200, bodies.cluster_info(doc))

    answer, _ = await ctx.cache.read_scoped(("remoting-cluster",), fetch, CLUSTER, stale_max_ms(ctx))
    return ok(cmd, body=answer.body)


def topic_list(which: str) -> Handler:
    async def handler(ctx: HandlerContext, cmd: Command) -> Command:
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

    async def handler(ctx: HandlerContext, cmd: Command) -> Command:
        name = name_field(cmd, "brokerName")
        assert name is not None
        count = await ctx.registry.write_perm(name, mode)
        return ok(cmd, {answer_field: str(count)})

    return handler


async def delete_topic(ctx: HandlerContext, cmd: Command) -> Command:
    topic = name_field(cmd, "topic", TOPIC_MAX)
    cluster = cmd.ext_fields.get("clusterName") or None
    if cluster is not None and not valid_name(cluster):
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: clusterName must be {name_rule()}")
    assert topic is not None
    await ctx.registry.delete_topic(topic, cluster)
    return ok(cmd)


async def register_topic(ctx: HandlerContext, cmd: Command) -> Command:
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


async def put_kv(ctx: HandlerContext, cmd: Command) -> Command:
    namespace, key = name_field(cmd, "namespace"), name_field(cmd, "key")
    value = need(cmd, "value")
    assert namespace is not None and key is not None
    error = kv_value_error(value)
    if error:
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: {error}")
    await ctx.registry.kv_put(namespace, key, value)
    return ok(cmd)


async def get_kv(ctx: HandlerContext, cmd: Command) -> Command:
    namespace, key = name_field(cmd, "namespace"), name_field(cmd, "key")
    assert namespace is not None and key is not None
    value = await ctx.registry.kv_get(namespace, key)
    if value is None:
        return fail(cmd, codes.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
    return ok(cmd, {"value": value})


async def delete_kv(ctx: HandlerContext, cmd: Command) -> Command:
    namespace, key = name_field(cmd, "namespace"), name_field(cmd, "key")
    assert namespace is not None and key is not None
    await ctx.registry.kv_delete(namespace, key)
    return ok(cmd)


async def kv_list(ctx: HandlerContext, cmd: Command) -> Command:
    namespace = name_field(cmd, "namespace")
    assert namespace is not None
    table = await ctx.registry.kv_table(namespace)
    if table is None:
        return fail(cmd, codes.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
    return ok(cmd, body=bodies.kv_table(table))


async def broker_member_group(ctx: HandlerContext, cmd: Command) -> Command:
    """GET_BROKER_MEMBER_GROUP (5.x): the group's members; the cluster is the one asked
    for, and an unknown group has no members, as RouteInfoManager answers."""
    cluster, name = name_field(cmd, "clusterName"), name_field(cmd, "brokerName")
    assert cluster is not None and name is not None
    _, addrs = await ctx.registry.member_group(name)
    return ok(cmd, body=bodies.member_group(cluster, name, addrs))


async def namesrv_config(ctx: HandlerContext, cmd: Command) -> Command:
    """GET_NAMESRV_CONFIG: the Java NameServer's keys that apply, then the worker's settings
    (service.remoting.namesrv_config); no credentials."""
    return ok(cmd, body=bodies.properties(namesrv_config_values(ctx.settings, ctx.listen_port)))


async def update_namesrv_config(ctx: HandlerContext, cmd: Command) -> Command:
    return fail(cmd, codes.NO_PERMISSION, "settings come from the environment (RMQ_* variables) and apply to every "
                "worker alike: change them in the deployment, not through UPDATE_NAMESRV_CONFIG")
