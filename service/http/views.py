"""The HTTP front's handlers, one per endpoint of docs/api.md; service.http.routes maps paths
to them. Each works on the worker's core through service.http.app_keys."""

from __future__ import annotations

import asyncio
import re
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from service import __version__
from service.cache import ANY, CLUSTER, Answer, ReadCache, make_answer
from service.http.app_keys import OPENAPI, WATCHES, node
from service.http.errors import ApiError, error_response, invalid, topic_not_exist
from service.http.observe import Handler
from service.models import (
    M,
    NAME_MAX,
    TOPIC_MAX,
    HeartbeatRequest,
    KvPutRequest,
    QueryDataVersionRequest,
    RegisterRequest,
    UnregisterRequest,
    describe,
    name_rule,
    valid_name,
    validated,
)
from service.registry import RegistrationRefused, Registry, body_digest, body_weight, in_zone, off_loop
from service.store import StoreUnavailable


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


OK = orjson.dumps({})


def ok() -> web.Response:
    return web.Response(body=OK, content_type="application/json")


async def read_body(request: web.Request) -> bytes:
    """The request's body: refused up front (413) when its Content-Length is over the
    limit, and 408 when it has not all arrived within RMQ_HTTP_BODY_TIMEOUT_MS."""
    limit = node(request).settings.max_body_bytes  # the app's client_max_size
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, "PAYLOAD_TOO_LARGE", f"a body of {request.content_length} bytes is over the "
                       f"{limit}-byte limit (RMQ_MAX_BODY_BYTES)")
    timeout_ms = node(request).settings.http_body_timeout_ms
    try:
        return await asyncio.wait_for(request.read(), timeout_ms / 1000)
    except asyncio.TimeoutError:
        raise ApiError(408, "REQUEST_TIMEOUT", f"the body did not arrive within {timeout_ms} ms "
                       "(RMQ_HTTP_BODY_TIMEOUT_MS)") from None


async def read_json(request: web.Request) -> dict[str, Any]:
    """The body's JSON object; anything malformed is a 400 before any change."""
    return json_object(await read_body(request))


def json_object(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise invalid(f"malformed JSON: {e}") from None
    if not isinstance(data, dict):
        raise invalid("the body must be a JSON object")
    return data


def validate(request: web.Request, model: type[M], data: dict[str, Any]) -> M:
    try:
        return validated(model, data, node(request).settings)
    except ValidationError as e:
        raise invalid(describe(e)) from None


async def parse(request: web.Request, model: type[M]) -> M:
    """Reads and validates a JSON body; anything wrong is a 400 before any change."""
    return validate(request, model, await read_json(request))


def name_param(request: web.Request, param: str, max_length: int = 255) -> str:
    # aiohttp matches the still-encoded path and percent-decodes each segment it hands
    # over, so a name may carry any character, "/" as %2F included
    value = request.match_info[param]
    if not valid_name(value, max_length):
        raise invalid(f"{param} must be {name_rule(max_length)}")
    return value


def registry(request: web.Request) -> Registry:
    return node(request).registry


# ---------------------------------------------------------------------- broker-facing
async def register_broker(request: web.Request) -> web.Response:
    # A broker re-sends the same body every 30 s: when it is byte for byte the one an
    # address last registered in full (so already validated), only liveness is refreshed,
    # without parsing, validating or walking thousands of topic configs again.
    body = await read_body(request)
    digest = body_digest(body)
    answer = await registry(request).register_unchanged(digest)
    if answer is not None:
        return json_response(answer)
    # big bodies are read and checked in a thread, so the loop answers reads meanwhile
    req = await off_loop(body_weight(len(body)), register_request, request, body)
    try:
        answer = await registry(request).register(req, digest=digest)
    except RegistrationRefused as e:
        raise ApiError(409, "REGISTRATION_REFUSED", f"register broker failed: {e}") from None
    return json_response(answer | Registry.skipped_answer(req))  # which topics have no route, if any


def register_request(request: web.Request, body: bytes) -> RegisterRequest:
    return validate(request, RegisterRequest, json_object(body))


async def heartbeat(request: web.Request) -> web.Response:
    req = await parse(request, HeartbeatRequest)
    if not await registry(request).heartbeat(req):
        raise ApiError(404, "BROKER_NOT_FOUND", f"broker {req.brokerAddr} is not registered or has expired; register in full")
    return ok()


async def query_data_version(request: web.Request) -> web.Response:
    req = await parse(request, QueryDataVersionRequest)
    return json_response(await registry(request).query_data_version(req))


async def unregister_broker(request: web.Request) -> web.Response:
    req = await parse(request, UnregisterRequest)
    await registry(request).unregister(req)
    return ok()


# ---------------------------------------------------------------------- client-facing
def not_modified(answer: Answer) -> web.Response:
    return web.Response(status=304, headers={"ETag": answer.etag, "Cache-Control": "no-cache"})


def answer_response(request: web.Request, answer: Answer) -> web.Response:
    """The cached bytes as they are; 304 when the client already has them."""
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match and etag_matches(if_none_match, answer.etag):
        return not_modified(answer)
    # headers are built per response rather than kept with each cached answer: aiohttp
    # copies them into every response anyway, and kept they cost ~2 KB an entry
    return web.Response(status=answer.status, body=answer.body, headers={
        "ETag": answer.etag, "Cache-Control": "no-cache", "Content-Type": "application/json"})


# Bodies below this go out as they are: gzip would save less than its own cost.
COMPRESS_MIN_BYTES = 1024


def compressed(request: web.Request, response: web.Response) -> web.Response:
    """The response gzip-encoded for a client whose Accept-Encoding names gzip (else
    whatever aiohttp negotiates; it compresses bodies over 4 KiB in a thread). For
    whole-table answers a browser reads (the dashboard's); route reads stay as they are."""
    body = response.body
    if isinstance(body, bytes) and len(body) >= COMPRESS_MIN_BYTES:
        gzip = "gzip" in request.headers.get("Accept-Encoding", "").lower()
        response.enable_compression(web.ContentCoding.gzip if gzip else None)
        response.headers["Vary"] = "Accept-Encoding"
    return response


def etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    return header.strip() == "*" or etag in (t.strip().removeprefix("W/") for t in header.split(","))


async def wait(event: asyncio.Event, timeout: float) -> bool:
    """False when the timeout passed first."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False


def parse_duration(value: str, limit_ms: int) -> float:
    """'30s', '500ms', '2m' or plain seconds; at most the configured watch limit."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", value.strip())
    if m is None:
        raise invalid(f"timeout must look like 30s, 500ms or 2m, not {value!r}")
    seconds = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m.group(2)]
    return min(seconds, limit_ms / 1000)


def route_reader(cache: ReadCache) -> Handler:
    """GET /v1/routes/{topic}, the hot path, with the app's cache bound once."""

    async def get_route(request: web.Request) -> web.Response:
        if not request.query_string:
            # Look the raw topic up first: only answers to validated topics are ever
            # cached, so a hit needs no validation (read_route validates a miss).
            answer = cache.lookup_route("http", request.match_info["topic"])
            if answer is not None:
                return answer_response(request, answer)
        return await read_route(request, cache)

    return get_route


async def read_route(request: web.Request, cache: ReadCache) -> web.Response:
    """A route read the cache could not answer at once: a miss, or a long poll (?watch=)."""
    topic = name_param(request, "topic", TOPIC_MAX)
    reg = registry(request)

    async def fetch() -> Answer:
        route = await reg.route(topic)
        if route.body is None:
            e = topic_not_exist(topic)
            return make_answer(route.version, e.status, orjson.dumps({"error": e.code, "message": e.message}))
        return make_answer(route.version, 200, route.body, route.groups)

    watch = request.query.get("watch") if request.query_string else None
    zone = zone_param(request) if request.query_string else None
    if watch is None:
        answer, age_ms = await cache.read_route("http", topic, fetch, stale_max_ms(request))
        return stale_response(request, in_zone_answer(answer, zone), age_ms)
    # long poll: answer as soon as the route differs from the one the client has
    watched = '"' + watch.strip().strip('"') + '"'
    timeout = parse_duration(request.query.get("timeout", "30s"), node(request).settings.watch_max_ms)
    watches = request.app[WATCHES]
    if watches.waiting >= watches.limit:
        watches.refused += 1
        return error_response(503, "TOO_MANY_WATCHES", f"this worker already holds {watches.limit} watches "
                              "(RMQ_MAX_WATCHES); read without ?watch, or watch again in a second",
                              headers={"Retry-After": "1"})
    watches.waiting += 1
    try:
        return await long_poll(request, cache, topic, fetch, watched, timeout, zone)
    finally:
        watches.waiting -= 1


def zone_param(request: web.Request) -> str | None:
    """?zone=<name>: the route as a RocketMQ 5 client in zone mode gets it (its
    -Drocketmq.zone.mode and -Drocketmq.zone), docs/api.md; None without it."""
    zone = request.query.get("zone")
    if zone is not None and (not zone.strip() or len(zone) > NAME_MAX):
        raise invalid(f"zone must be {name_rule()} and not blank")
    return zone


def in_zone_answer(answer: Answer, zone: str | None) -> Answer:
    """A route answer as `zone`'s clients get it (service/registry.py in_zone): the cached
    answer itself when the zone leaves every group in."""
    if zone is None or answer.status != 200:
        return answer
    route = orjson.loads(answer.body)
    kept = in_zone(route, zone)
    return answer if kept is route else make_answer(answer.version, 200, orjson.dumps(kept), answer.groups)


# How often a waiting watch looks whether its client is still there.
HANGUP_CHECK_S = 2.0


async def long_poll(request: web.Request, cache: ReadCache, topic: str, fetch: Callable[[], Awaitable[Answer]],
                    watched: str, timeout: float, zone: str | None) -> web.Response:
    """Answers as soon as the route of `topic` (in `zone`, when given) differs from
    `watched`, or 304 at the timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        held = await cache.route("http", topic, fetch)
        answer = in_zone_answer(held, zone)
        remaining = deadline - asyncio.get_running_loop().time()
        if answer.etag != watched or remaining <= 0 or node(request).stopping:
            break
        # woken only by a change to this topic or a group its answer names: a waiting
        # watch costs no Redis work, and other topics' changes do not wake it
        watcher = cache.watch(topic, held)
        try:
            woken = await wait(watcher.event, min(remaining, HANGUP_CHECK_S))
        finally:
            cache.unwatch(watcher)
        if not woken and request.transport is None:
            break  # the client hung up: its place under RMQ_MAX_WATCHES is free again
    if answer.etag == watched:
        return not_modified(answer)
    return answer_response(request, answer)


def stale_max_ms(request: web.Request) -> int | None:
    """?stale (Consul's opt-in): while Redis does not answer, the last answer this worker
    knew, at most RMQ_STALE_MAX_MS old (ReadCache.read_route)."""
    return node(request).settings.stale_max_ms if "stale" in request.query else None


def stale_response(request: web.Request, answer: Answer, age_ms: int | None) -> web.Response:
    """The answer of ReadCache.read_route / read_scoped (the one read path of both fronts);
    a stale one with its age in X-Registry-Age-Ms (how long ago the worker last confirmed
    its cache)."""
    response = answer_response(request, answer)
    if age_ms is not None:
        response.headers["X-Registry-Age-Ms"] = str(age_ms)
    return response


async def scoped_read(request: web.Request, key: tuple[str, ...], fetch: Callable[[], Awaitable[Answer]],
                      scope: str = ANY) -> web.Response:
    return stale_response(request, *await node(request).cache.read_scoped(key, fetch, scope, stale_max_ms(request)))


async def get_cluster(request: web.Request) -> web.Response:
    reg = registry(request)

    async def fetch() -> Answer:
        version, body = await reg.cluster_info()
        return make_answer(version, 200, orjson.dumps(body))

    # 40 KB at 300 broker groups, 4 KB gzipped: the dashboard polls it
    return compressed(request, await scoped_read(request, ("cluster",), fetch, scope=CLUSTER))


async def _topic_list(request: web.Request, which: str, cluster: str = "") -> web.Response:
    reg = registry(request)

    async def fetch() -> Answer:
        version, body = await reg.topic_list(which, cluster)
        return make_answer(version, 200, orjson.dumps(body))

    return await scoped_read(request, ("topics", which, cluster), fetch)


def topic_list(which: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return await _topic_list(request, which)

    return handler


async def cluster_topics(request: web.Request) -> web.Response:
    return await _topic_list(request, "cluster", name_param(request, "clusterName"))


# ---------------------------------------------------------------------- admin
async def delete_topic(request: web.Request) -> web.Response:
    topic = name_param(request, "topic", TOPIC_MAX)
    cluster = request.query.get("clusterName")
    if cluster is not None and not valid_name(cluster):
        raise invalid(f"clusterName must be {name_rule()}")
    await registry(request).delete_topic(topic, cluster)
    return ok()


async def wipe_write_perm(request: web.Request) -> web.Response:
    name = name_param(request, "brokerName")
    return json_response({"wipeTopicCount": await registry(request).write_perm(name, "wipe")})


async def add_write_perm(request: web.Request) -> web.Response:
    name = name_param(request, "brokerName")
    return json_response({"addTopicCount": await registry(request).write_perm(name, "add")})


async def kv_put(request: web.Request) -> web.Response:
    namespace, key = name_param(request, "namespace"), name_param(request, "key")
    req = await parse(request, KvPutRequest)
    await registry(request).kv_put(namespace, key, req.value)
    return ok()


async def kv_get(request: web.Request) -> web.Response:
    namespace, key = name_param(request, "namespace"), name_param(request, "key")
    value = await registry(request).kv_get(namespace, key)
    if value is None:
        raise ApiError(404, "KV_NOT_FOUND", f"No config item, Namespace: {namespace} Key: {key}")
    return json_response({"value": value})


async def kv_delete(request: web.Request) -> web.Response:
    namespace, key = name_param(request, "namespace"), name_param(request, "key")
    await registry(request).kv_delete(namespace, key)
    return ok()


async def kv_table(request: web.Request) -> web.Response:
    namespace = name_param(request, "namespace")
    table = await registry(request).kv_table(namespace)
    if table is None:
        raise ApiError(404, "KV_NOT_FOUND", f"No config item, Namespace: {namespace}")
    return json_response({"table": table})


# ---------------------------------------------------------------------- operations
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok", "version": __version__})


async def readyz(request: web.Request) -> web.Response:
    """Both forms answer one shape: ``status`` (ready / not ready), ``redis`` (ok /
    unreachable), ``writes`` (ok / refused: <causes>), ``store`` after a store reset; a 503
    adds the API's ``error`` and ``message``. ``?exclude=redis`` (the Deployment's readiness
    probe) is this worker's own readiness: serving and not draining, whatever Redis does.
    Redis is shared by every worker, so its outage taking them all out of the Service would
    turn the stale reads and the writes' clear 503 into refused connections; what Redis did
    at the last change-record poll is told, and no Redis call is made (a frozen Redis does
    not slow the probe). Without it, Redis is asked now."""
    excluded = request.query.getall("exclude", [])
    if any(check != "redis" for check in excluded):
        raise invalid("exclude takes one check: redis")
    worker = node(request)
    body = readiness(worker.cache.unreachable, worker.store.refusals.recent())
    # Still ready after a store reset: the brokers re-register through this very Service;
    # the body says so until the fleet is back (service/store_watch.py).
    reset = worker.scanner.watch.recent()
    if reset is not None:
        body["store"] = reset.describe()
    if worker.stopping:
        return not_ready(body, "shutting down")
    if not excluded:
        try:
            await worker.store.ready()
        except StoreUnavailable as e:
            return not_ready({**body, **readiness(True, [])}, f"Redis unreachable: {e}")
        body.update(readiness(False, worker.store.refusals.recent()))  # reached just now
    # Still ready when Redis refuses writes: reads go on, and every worker sees the same
    # Redis, so taking them out of the balancer would only stop the reads too.
    return json_response(body)


def readiness(unreachable: bool, refused: list[str]) -> dict[str, str]:
    if unreachable:
        return {"status": "ready", "redis": "unreachable", "writes": "refused: Redis unreachable"}
    return {"status": "ready", "redis": "ok", "writes": f"refused: {', '.join(refused)}" if refused else "ok"}


def not_ready(body: dict[str, str], why: str) -> web.Response:
    return json_response({**body, "status": "not ready", "error": "STORE_UNAVAILABLE", "message": why}, status=503)


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(node(request).prometheus)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
