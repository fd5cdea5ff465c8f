"""The HTTP front's application factory: an aiohttp app serving docs/api.md on a worker's Node.

No aiohttp middleware: every route's handler is wrapped once instead (service.http.observe
says why). The app does not own the Node's lifetime: service.worker starts and stops it.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import orjson
from aiohttp import web

from service import auth
from service.http.connections import quiet_malformed_requests
from service.http.app_keys import NODE, OPENAPI, bind
from service.http.request_metrics import RequestCollector, RequestTally
from service.http.observe import Observer, Unmatched
from service.http.openapi import openapi_document
from service.http.routes import add_routes
from service.logs import RefusalLog, WindowedLog, redis_failure_log
from service.node import Node


def create_app(node: Node) -> web.Application:
    settings = node.settings
    app = web.Application(client_max_size=settings.max_body_bytes)
    quiet_malformed_requests()
    tally = RequestTally()
    node.prometheus.register(RequestCollector(tally))
    tokens = auth.TokenFile(settings.auth_tokens_file) if settings.auth_tokens_file else None
    refusals = RefusalLog(logging.getLogger("service.http.refusals"))
    failures = redis_failure_log(logging.getLogger("service.http.observe"))
    bind(app, node, Observer(tally, tokens, settings.auth_reads, refusals, failures))
    add_routes(app)
    # last: it answers 404/405 for whatever no route above matched
    app.router.register_resource(Unmatched(app.router, tally))
    app[OPENAPI] = orjson.dumps(openapi_document(app))
    app.on_shutdown.append(_on_shutdown)
    app.on_cleanup.append(_close(refusals, failures))
    return app


def _close(*logs: WindowedLog) -> Callable[[web.Application], Awaitable[None]]:
    async def close(app: web.Application) -> None:
        for held in logs:
            held.close()

    return close


async def _on_shutdown(app: web.Application) -> None:
    app[NODE].begin_stopping()
