"""The dashboard: a read-only page served by every worker, and the two reads it needs.

``add_ui_routes(app)`` registers

- ``GET /``            the page (``service/http/ui_static/index.html``), served without auth;
- ``GET /ui/{path}``   its assets (``app.js``, ``style.css``), served without auth;
- ``GET /v1/brokers/live``     every registered broker address with its heartbeat age
  against its timeout, as Redis sees it now (read-only script ``live_brokers.lua``);
- ``GET /v1/topics/summary``   every topic's QueueDatas and order config in one read
  (read-only script ``topic_summary.lua``), so the page needs no route call per topic.

Both reads send an ETag and answer ``If-None-Match`` with 304. The page itself uses only
these and the public API (``/v1/cluster``, ``/v1/routes/{topic}`` with its watch).
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from service.auth import OPEN, READ
from service.cache import Answer, make_answer
from service.http.context import CACHE, STORE, add_route
from service.http.errors import error_response, invalid
from service.http.views import answer_response, etag_matches
from service.store import SCRIPTS, Store

log = logging.getLogger(__name__)

STATIC_DIR = "ui_static"
LIVE_SCRIPT = "live_brokers"
SUMMARY_SCRIPT = "topic_summary"

# The page loads nothing but its own files; no inline script or style.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

# Set in the per-app script table when the store does not load the script itself.
_UI_SCRIPTS = web.AppKey("ui_scripts", dict)
_UI_ASSETS = web.AppKey("ui_assets", dict)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _opt_int(value: Any) -> int | None:
    if value is None or value is False:
        return None
    return int(float(_s(value)))


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
    return web.Response(body=body, headers=headers)


async def page(request: web.Request) -> web.Response:
    return _asset_response(request, "index.html")


async def asset(request: web.Request) -> web.Response:
    return _asset_response(request, request.match_info["path"])


# ---------------------------------------------------------------------- read scripts
def _lua_dir() -> Any:
    # as service/store.py finds them: package data when installed, lua/ in a checkout
    try:
        return resources.files("service.lua")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "lua"


def _source(name: str) -> str:
    base = _lua_dir()
    prelude = (base / "_lib.lua").read_text(encoding="utf-8")
    return prelude + (base / f"{name}.lua").read_text(encoding="utf-8")


async def run_script(app: web.Application, name: str, args: list[str | int] | None = None) -> Any:
    """A read script: the store's own when service/store.py loads it, else one of ours
    (registered on the store's client; redis-py loads it on NOSCRIPT)."""
    store: Store = app[STORE]
    if name in SCRIPTS:
        return await store.run(name, args or [])
    scripts = app[_UI_SCRIPTS]
    script = scripts.get(name)
    if script is None:
        script = scripts[name] = store.redis.register_script(_source(name))
    return await store.call(script(keys=[store.keys.version], args=list(args or [])))


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
    version, now, rows, next_group = await run_script(app, LIVE_SCRIPT, [cursor, limit])
    now = int(_s(now))
    brokers = []
    for addr, cluster, name, broker_id, ha, last, timeout, data_version, deadline in rows:
        last_ms, timeout_ms, deadline_ms = _opt_int(last), _opt_int(timeout), _opt_int(deadline)
        alive = last_ms is not None
        dv: Any = None
        if data_version:
            try:
                dv = orjson.loads(_s(data_version))
            except orjson.JSONDecodeError:
                dv = _s(data_version)
        brokers.append({
            "brokerAddr": _s(addr),
            "cluster": _s(cluster),
            "brokerName": _s(name),
            "brokerId": int(_s(broker_id)),
            "haServerAddr": _s(ha) if ha else None,
            "lastUpdateTimestamp": last_ms,
            "heartbeatTimeoutMillis": timeout_ms,
            "ageMs": max(0, now - last_ms) if last_ms is not None else None,
            "alive": alive,
            "deadline": deadline_ms,
            "dataVersion": dv,
        })
    next_cursor = orjson.dumps([_s(next_group[0]), _s(next_group[1])]).decode() if next_group else None
    return {"version": int(_s(version)), "now": now, "brokers": brokers, "nextCursor": next_cursor}


async def topic_summary(app: web.Application, cursor: str = "", limit: int = SUMMARY_LIMIT, prefix: str = "",
                        order_only: bool = False) -> tuple[int, dict[str, Any]]:
    version, topics, next_cursor, total, order_total = await run_script(
        app, SUMMARY_SCRIPT, [cursor, limit, prefix, "1" if order_only else "0"])
    return int(_s(version)), {"topics": [
        {
            "topic": _s(topic),
            "orderTopicConf": _s(order) if order else None,
            "queueDatas": [
                {"brokerName": _s(n), "readQueueNums": int(r), "writeQueueNums": int(w),
                 "perm": int(p), "topicSysFlag": int(f)}
                for n, r, w, p, f in queues
            ],
        }
        for topic, queues, order in topics
    ], "nextCursor": _s(next_cursor) if next_cursor else None, "total": int(total), "orderTopics": int(order_total)}


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
    return web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers)


async def get_topic_summary(request: web.Request) -> web.Response:
    """A page of topics in name order; `q` keeps those starting with it, `order=1` the
    order topics. The dashboard's default view (first page, no filter) is cached; other
    pages are read each time (their number is unbounded, each read is bounded)."""
    app = request.app
    cursor, limit = page_params(request, SUMMARY_LIMIT, SUMMARY_MAX)
    prefix = request.query.get("q", "")
    order_only = request.query.get("order", "") in ("1", "true")
    if len(prefix) > 255:
        raise invalid("q is a topic name prefix of at most 255 characters")

    async def fetch() -> Answer:
        version, body = await topic_summary(app, cursor, limit, prefix, order_only)
        return make_answer(version, 200, orjson.dumps(body))

    if cursor or prefix or order_only:
        return answer_response(request, await fetch())
    return answer_response(request, await app[CACHE].get(("ui", "topic-summary", limit), fetch))


def add_ui_routes(app: web.Application) -> None:
    """Registers the page, its assets and its two reads; a second call does nothing.

    The page and its assets are open (the page holds no data); the two reads follow the
    read rule (RMQ_AUTH_READS) like /v1/cluster. They are GET only, no implicit HEAD,
    so no method slips past their auth check."""
    if any(getattr(r, "canonical", None) == "/v1/brokers/live" for r in app.router.resources()):
        return
    app[_UI_SCRIPTS] = {}
    app[_UI_ASSETS] = load_assets()
    add_route(app, "GET", "/", page, OPEN, allow_head=True)
    add_route(app, "GET", "/ui/{path}", asset, OPEN, allow_head=True)
    for path, handler in (("/v1/brokers/live", get_live_brokers), ("/v1/topics/summary", get_topic_summary)):
        add_route(app, "GET", path, handler, READ)
