"""The dashboard: a read-only page served by every worker, and the reads it needs.

``add_ui_routes(app)`` registers

- ``GET /``            the page (``service/http/ui_static/index.html``), served without auth;
- ``GET /ui/{path}``   its assets (``app.js``, ``style.css``), served without auth;
- ``GET /v1/brokers/live``     every registered broker address with its heartbeat age
  against its timeout, as Redis sees it now (read-only script ``live_brokers.lua``);
- ``GET /v1/topics/summary``   every topic's QueueDatas and order config in one read
  (read-only script ``topic_summary.lua``), so the page needs no route call per topic;
  ``cluster=`` and ``system=0`` filter it, a bounded number of pages per request;
- ``GET /v1/brokers/write-queues``  writable write queues per broker group over every
  topic (service/http/queue_tally.py), a bounded slice of the fleet read per request;
- ``GET /v1/departures``   the brokers that left in the last hour, with cause and time, and when each came back
  (read-only script ``departures.lua``; the scripts that remove a broker record it).
- ``GET /v1/store``    the last store reset, as the store records it for every worker (service/store_watch.py),
  which the first screen shows until the fleet is back.

The reads send an ETag and answer ``If-None-Match`` with 304; they, the page and its
assets are gzip-compressed for a client that accepts it, and their 503s carry the time
this worker last reached Redis (``X-Registry-Last-Reached``). The page itself uses only
these and the public API (``/v1/cluster``, ``/v1/routes/{topic}`` with its watch).
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
import time
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from service.auth import OPEN, READ
from service.cache import CLUSTER, Answer, make_answer
from service.http.app_keys import CACHE, REGISTRY, SCANNER, STORE, add_route
from service.http.errors import error_response, invalid
from service.http.queue_tally import QueueTally
from service.http.views import answer_response, compressed, etag_matches, json_response
from service.liveness import LATE_FRACTION
from service.scripts import text

log = logging.getLogger(__name__)

STATIC_DIR = "ui_static"

# The page loads nothing but its own files; no inline script or style.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_UI_ASSETS = web.AppKey("ui_assets", dict)
_TALLY = web.AppKey("ui_queue_tally", QueueTally)


def _opt_int(value: Any) -> int | None:
    if value is None or value is False:
        return None
    return int(float(text(value)))


# ---------------------------------------------------------------------- static files
def _static_dir() -> Any:
    try:
        base = resources.files("service.http") / STATIC_DIR
        if base.is_dir():
            return base
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent / STATIC_DIR


def load_assets() -> dict[str, tuple[bytes, str, str]]:
    """name -> (body, content type, ETag) of every file of the page, read once."""
    assets: dict[str, tuple[bytes, str, str]] = {}
    base = _static_dir()
    if not base.is_dir():
        # an install without the package data: the API serves on, the page answers 404
        log.warning("dashboard files not found at %s: GET / answers 404", base)
        return assets
    for entry in base.iterdir():
        if not entry.is_file() or entry.name.startswith("."):
            continue
        body = entry.read_bytes()
        ctype = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/javascript", "image/svg+xml"):
            ctype += "; charset=utf-8"
        if entry.name.endswith(".js"):
            ctype = "text/javascript; charset=utf-8"
        etag = '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'
        assets[entry.name] = (body, ctype, etag)
    return assets


def _asset_response(request: web.Request, name: str) -> web.Response:
    asset = request.app[_UI_ASSETS].get(name)
    if asset is None:
        return error_response(404, "NOT_FOUND", f"no such file: /ui/{name}")
    body, ctype, etag = asset
    headers = {**PAGE_HEADERS, "ETag": etag}
    if etag_matches(request.headers.get("If-None-Match"), etag):
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = ctype
    return compressed(request, web.Response(body=body, headers=headers))


async def page(request: web.Request) -> web.Response:
    return _asset_response(request, "index.html")


async def asset(request: web.Request) -> web.Response:
    return _asset_response(request, request.match_info["path"])


# Page sizes: a page is one Lua call whose cost follows its size (no call runs long at
# 300 broker groups and 100,000 topics); a request without `limit` gets the default.
SUMMARY_LIMIT, SUMMARY_MAX = 200, 300
LIVE_LIMIT, LIVE_MAX = 500, 1000


def page_params(request: web.Request, default: int, most: int) -> tuple[str, int]:
    """`cursor` (opaque, from the previous page's nextCursor) and `limit`; 400 when bad."""
    cursor = request.query.get("cursor", "")
    raw = request.query.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise invalid(f"limit must be a whole number from 1 to {most}")
    if len(cursor) > 1024:
        raise invalid("cursor is not one this server gave")
    return cursor, int(raw)


async def live_brokers(app: web.Application, cursor: str = "", limit: int = LIVE_LIMIT) -> dict[str, Any]:
    if cursor:
        try:
            after = orjson.loads(cursor)
            if not (isinstance(after, list) and len(after) == 2 and all(isinstance(x, str) for x in after)):
                raise ValueError
        except ValueError:
            raise invalid("cursor is not one this server gave") from None
    version, now, rows, next_group = await app[REGISTRY].scripts.live_brokers(cursor, limit)
    now = int(text(now))
    brokers = []
    for addr, cluster, name, broker_id, ha, last, timeout, data_version, deadline, acting, zone in rows:
        last_ms, timeout_ms, deadline_ms = _opt_int(last), _opt_int(timeout), _opt_int(deadline)
        alive = last_ms is not None
        dv: Any = None
        if data_version:
            try:
                dv = orjson.loads(text(data_version))
            except orjson.JSONDecodeError:
                dv = text(data_version)
        brokers.append({
            "brokerAddr": text(addr),
            "cluster": text(cluster),
            "brokerName": text(name),
            "brokerId": int(text(broker_id)),
            "haServerAddr": text(ha) if ha else None,
            "lastUpdateTimestamp": last_ms,
            "heartbeatTimeoutMillis": timeout_ms,
            "ageMs": max(0, now - last_ms) if last_ms is not None else None,
            "alive": alive,
            "deadline": deadline_ms,
            "dataVersion": dv,
            "enableActingMaster": text(acting) == "1",  # the group's (RocketMQ 5)
            "zoneName": text(zone) or None,
        })
    next_cursor = orjson.dumps([text(next_group[0]), text(next_group[1])]).decode() if next_group else None
    # the late rule is the server's (the gauge rmq_late_brokers counts by it too): the page reads it here
    return {"version": int(text(version)), "now": now, "lateFraction": LATE_FRACTION, "brokers": brokers,
            "nextCursor": next_cursor}


async def topic_summary(app: web.Application, cursor: str = "", limit: int = SUMMARY_LIMIT, prefix: str = "",
                        order_only: bool = False) -> tuple[int, dict[str, Any]]:
    version, topics, next_cursor, total, order_total = await app[REGISTRY].scripts.topic_summary(
        cursor, limit, prefix, order_only)
    return int(text(version)), {"topics": [
        {
            "topic": text(topic),
            "orderTopicConf": text(order) if order else None,
            "queueDatas": [
                {"brokerName": text(n), "readQueueNums": int(r), "writeQueueNums": int(w),
                 "perm": int(p), "topicSysFlag": int(f)}
                for n, r, w, p, f in queues
            ],
        }
        for topic, queues, order in topics
    ], "nextCursor": text(next_cursor) if next_cursor else None, "total": int(total), "orderTopics": int(order_total)}


# ---------------------------------------------------------------------- topic filters
# RocketMQ's own topics: TopicValidator's system set and prefix, a consumer group's retry
# and dead-letter topics (MixAll), and, as rocketmq-dashboard counts them, the topics every
# broker creates named after its cluster and its broker name.
SYSTEM_TOPICS = frozenset((
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
))
SYSTEM_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%")
# A filtered view reads at most this many pages of the summary per request; a page that
# fills up with fewer rows ends where the reading stopped (its nextCursor goes on from there).
FILTER_PAGES = 10


def is_system_topic(topic: str, names: frozenset[str]) -> bool:
    """`names`: the cluster and broker names registered now."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIXES) or topic in names


async def cluster_table(app: web.Application) -> dict[str, Any]:
    """ClusterInfo, through the worker's cache (the answer /v1/cluster serves)."""
    reg = app[REGISTRY]

    async def fetch() -> Answer:
        version, body = await reg.cluster_info()
        return make_answer(version, 200, orjson.dumps(body))

    answer = await app[CACHE].get(("cluster",), fetch, scope=CLUSTER)
    return orjson.loads(answer.body)


async def filtered_summary(app: web.Application, cursor: str, limit: int, prefix: str, order_only: bool,
                           cluster: str, hide_system: bool) -> tuple[int, dict[str, Any]]:
    """Up to `limit` topics past `cursor` served by a group of `cluster` (when given) and
    not RocketMQ's own (when `hide_system`), from at most FILTER_PAGES summary pages.
    `examined` says how many topics were looked at, `skipped` how many of them were left out."""
    info = await cluster_table(app)
    names = frozenset(info["clusterAddrTable"]) | frozenset(info["brokerAddrTable"])
    groups = frozenset(info["clusterAddrTable"].get(cluster, ())) if cluster else frozenset()
    kept: list[dict[str, Any]] = []
    examined = 0
    version, body = 0, {"total": 0, "orderTopics": 0}
    next_cursor: str | None = cursor
    for _ in range(FILTER_PAGES):
        version, body = await topic_summary(app, next_cursor or "", limit, prefix, order_only)
        page = body["topics"]
        next_cursor = body["nextCursor"]
        for i, t in enumerate(page):
            examined += 1
            if hide_system and is_system_topic(t["topic"], names):
                continue
            if cluster and not any(q["brokerName"] in groups for q in t["queueDatas"]):
                continue
            kept.append(t)
            if len(kept) == limit:
                # more may follow this one on the page, or on the pages after it
                next_cursor = t["topic"] if i < len(page) - 1 or next_cursor else None
                break
        if len(kept) == limit or not next_cursor:
            break
    return version, {"topics": kept, "nextCursor": next_cursor, "total": body["total"],
                     "orderTopics": body["orderTopics"], "examined": examined, "skipped": examined - len(kept)}


# ---------------------------------------------------------------------- handlers
async def get_live_brokers(request: web.Request) -> web.Response:
    """The body changes with every millisecond (now, ageMs); its ETag covers only what
    changes with the tables and heartbeats, so a poller that already has it gets a 304
    and keeps counting the ages itself from the last `now`."""
    cursor, limit = page_params(request, LIVE_LIMIT, LIVE_MAX)
    body = await live_brokers(request.app, cursor, limit)
    stable = [{k: v for k, v in b.items() if k != "ageMs"} for b in body["brokers"]]
    etag = '"' + hashlib.blake2b(orjson.dumps(stable), digest_size=8).hexdigest() + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if etag_matches(request.headers.get("If-None-Match"), etag):
        return web.Response(status=304, headers=headers)
    del body["version"]
    return compressed(request, web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers))


def flag(request: web.Request, name: str, default: bool) -> bool:
    raw = request.query.get(name)
    if raw is None:
        return default
    if raw not in ("0", "1", "true", "false"):
        raise invalid(f"{name} must be 1 or 0, not {raw[:20]!r}")
    return raw in ("1", "true")


async def get_topic_summary(request: web.Request) -> web.Response:
    """A page of topics in name order; `q` keeps those starting with it, `order=1` the
    order topics, `cluster=` those a group of that cluster serves, `system=0` leaves
    RocketMQ's own out. The dashboard's first page of each filter is cached; other pages
    are read each time (their number is unbounded, each read is bounded)."""
    app = request.app
    cursor, limit = page_params(request, SUMMARY_LIMIT, SUMMARY_MAX)
    prefix = request.query.get("q", "")
    order_only = request.query.get("order", "") in ("1", "true")
    cluster = request.query.get("cluster", "")
    hide_system = not flag(request, "system", True)
    if len(prefix) > 255:
        raise invalid("q is a topic name prefix of at most 255 characters")
    if len(cluster) > 255:
        raise invalid("cluster is a cluster name of at most 255 characters")

    async def fetch() -> Answer:
        if cluster or hide_system:
            version, body = await filtered_summary(app, cursor, limit, prefix, order_only, cluster, hide_system)
        else:
            version, body = await topic_summary(app, cursor, limit, prefix, order_only)
        return make_answer(version, 200, orjson.dumps(body))

    if cursor or prefix or order_only:
        return compressed(request, answer_response(request, await fetch()))
    key = ("ui", "topic-summary", limit, cluster, hide_system)
    return compressed(request, answer_response(request, await app[CACHE].get(key, fetch)))


def etagged(request: web.Request, body: bytes) -> web.Response:
    """A JSON body with an ETag of its bytes: 304 when the poller already has it."""
    etag = '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if etag_matches(request.headers.get("If-None-Match"), etag):
        return web.Response(status=304, headers=headers)
    return compressed(request, web.Response(body=body, content_type="application/json", headers=headers))


async def get_write_queues(request: web.Request) -> web.Response:
    """Writable write queues per broker group over every topic: the last complete pass,
    and how far the next one got (QueueTally)."""
    app = request.app
    return etagged(request, orjson.dumps(await app[_TALLY].step(app[STORE], app[REGISTRY].cluster_info)))


async def get_departures(request: web.Request) -> web.Response:
    """The brokers that left in the last hour, newest first, as Redis holds them (so every
    worker answers the same): what the first screen lists, whoever opens it."""
    return etagged(request, orjson.dumps({"departures": await request.app[REGISTRY].scripts.departures()}))


async def get_store(request: web.Request) -> web.Response:
    """The resets of the store this worker noticed, and the last one as the store's record
    holds it (the same on every worker, one started after it included): read from memory,
    the record as the last scan pass read it, so it answers while Redis does not."""
    watch = request.app[SCANNER].watch
    last = watch.last.as_json() if watch.last is not None else None
    return json_response({"resets": watch.resets, "lastReset": last}, headers={"Cache-Control": "no-cache"})


# The reads whose 503 says when this worker last reached Redis: the page tells since when
# the store has been out, whenever the tab was opened.
LAST_REACHED_PATHS = frozenset(("/v1/cluster", "/v1/brokers/live", "/v1/topics/summary", "/v1/brokers/write-queues",
                                "/v1/departures"))


async def add_last_reached(request: web.Request, response: web.StreamResponse) -> None:
    if response.status != 503 or request.path not in LAST_REACHED_PATHS:
        return
    confirmed = request.app[CACHE].confirmed_at  # monotonic; -inf before the first poll
    if confirmed != float("-inf"):
        reached = time.time() - (time.monotonic() - confirmed)
        response.headers["X-Registry-Last-Reached"] = str(int(reached * 1000))


def add_ui_routes(app: web.Application) -> None:
    """Registers the page, its assets and its reads; a second call does nothing.

    The page and its assets are open (the page holds no data); the reads follow the read
    rule (RMQ_AUTH_READS) like /v1/cluster. They are GET only, no implicit HEAD, so no
    method slips past their auth check."""
    if any(getattr(r, "canonical", None) == "/v1/brokers/live" for r in app.router.resources()):
        return
    app[_UI_ASSETS] = load_assets()
    app[_TALLY] = QueueTally()
    app.on_response_prepare.append(add_last_reached)
    add_route(app, "GET", "/", page, OPEN, allow_head=True)
    add_route(app, "GET", "/ui/{path}", asset, OPEN, allow_head=True)
    for path, handler in (("/v1/brokers/live", get_live_brokers), ("/v1/topics/summary", get_topic_summary),
                          ("/v1/brokers/write-queues", get_write_queues), ("/v1/departures", get_departures),
                          ("/v1/store", get_store)):
        add_route(app, "GET", path, handler, READ)
