"""What the HTTP front keeps on its aiohttp application, and how routes are added.

The worker's core is one ``service.node.Node``, handed to ``service.http.app.create_app``;
the keys below give handlers (and tests) its parts. They belong to this front alone: the
RocketMQ front is handed the same Node and knows nothing of aiohttp's application.
"""

from __future__ import annotations

from aiohttp import web

from service.cache import ReadCache
from service.config import Settings
from service.http.observe import Handler, Observer
from service.node import Node
from service.registry import Registry
from service.scanner import Scanner
from service.store import Store

NODE = web.AppKey("node", Node)
SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
REGISTRY = web.AppKey("registry", Registry)
SCANNER = web.AppKey("scanner", Scanner)
CACHE = web.AppKey("cache", ReadCache)
OBSERVER = web.AppKey("observer", Observer)
OPENAPI = web.AppKey("openapi", bytes)


class WatchCount:
    """Long polls (?watch=) waiting on this worker, against RMQ_MAX_WATCHES."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0
        self.refused = 0


WATCHES = web.AppKey("watches", WatchCount)


def bind(app: web.Application, node: Node, observer: Observer) -> None:
    app[NODE] = node
    app[SETTINGS] = node.settings
    app[STORE] = node.store
    app[REGISTRY] = node.registry
    app[SCANNER] = node.scanner
    app[CACHE] = node.cache
    app[OBSERVER] = observer
    app[WATCHES] = WatchCount(node.settings.max_watches)


def node(request: web.Request) -> Node:
    return request.app[NODE]


def add_route(app: web.Application, method: str, path: str, handler: Handler, required: str,
              allow_head: bool = False) -> web.Resource:
    """Adds `handler`, wrapped by service.http.observe (request id, the auth rule for
    `required`, JSON errors, metrics under the path's canonical label); with allow_head,
    also for HEAD (as aiohttp's add_get). Every route of the app is added through here."""
    resource = app.router.add_resource(path)
    observer = app[OBSERVER]
    for m in ("HEAD", method) if allow_head else (method,):
        resource.add_route(m, observer.wrap(m, resource.canonical, handler, required))
    return resource
