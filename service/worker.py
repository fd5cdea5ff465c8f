"""The composition root: one worker process, its core (a ``service.node.Node``) and the two
protocol fronts on it, the HTTP API (``service.http``) and RocketMQ's remoting protocol
(``service.remoting``). Neither front knows the other; this module wires both to the
same Node and decides the order things start and stop in.

Start: the Node (scripts, scanner, cache), then the remoting server. On SIGTERM (or
SIGINT) the worker first answers /readyz with 503 for the drain period (RMQ_DRAIN_MS),
so a load balancer takes it out while it still serves; then it stops accepting HTTP, lets
in-flight requests finish (long polls are answered at once), stops the remoting server,
then the Node (scanner, cache tasks, Redis), and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import AsyncIterator

from aiohttp import web

from service.config import Settings
from service.http.app import create_app as create_http_app
from service.http.connections import HeaderDeadlineRunner
from service.http.context import NODE
from service.node import Node
from service.remoting.handlers import Context
from service.remoting.server import RemotingServer, RequestCounts
from service.store import Store

log = logging.getLogger(__name__)

REMOTING = web.AppKey("remoting", RemotingServer)


def create_app(settings: Settings, store: Store | None = None) -> web.Application:
    """A worker: its Node, served over HTTP, and over RocketMQ's protocol when
    ``settings.remoting_port`` is set. The aiohttp app runs the whole worker's lifetime."""
    node = Node(settings, store)
    app = create_http_app(node)
    app.cleanup_ctx.append(_run_node)
    if settings.remoting_port:
        install_remoting(app, settings.remoting_host or settings.host, settings.remoting_port)
    return app


async def _run_node(app: web.Application) -> AsyncIterator[None]:
    node = app[NODE]
    await node.start()
    try:
        yield
    finally:
        await node.stop()


def install_remoting(app: web.Application, host: str, port: int) -> None:
    """Serves the app's Node over RocketMQ's protocol too, started after the Node and
    stopped before it (so the store is still open while connections close).

    ``port`` 0 binds a free port (tests); the server, and its ``bound_port``, are then
    ``app[REMOTING]`` once the app has started."""
    node = app[NODE]
    server = RemotingServer(Context(node), host, port)
    node.prometheus.register(RequestCounts(server))
    app[REMOTING] = server

    async def remoting(app: web.Application) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app.cleanup_ctx.append(remoting)


async def serve(app: web.Application, settings: Settings) -> None:
    """Runs a worker made by ``create_app`` until SIGTERM or SIGINT, then stops it gracefully."""
    runner = HeaderDeadlineRunner(app, handle_signals=False, access_log=None,
                                  shutdown_timeout=settings.shutdown_timeout_ms / 1000,
                                  header_timeout_s=settings.http_header_timeout_ms / 1000)
    await runner.setup()
    # a listen queue for bursts of new clients (aiohttp's default is 128; the kernel caps
    # it at net.core.somaxconn)
    site = web.TCPSite(runner, settings.host, settings.port, backlog=settings.http_backlog)
    await site.start()
    log.info("serving on http://%s:%s", settings.host, settings.port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("stop requested: not ready from now, draining for %d ms", settings.drain_ms)
        app[NODE].begin_stopping()
        await asyncio.sleep(settings.drain_ms / 1000)
    finally:
        # stops accepting, waits for in-flight requests, then runs the app's cleanup
        await runner.cleanup()
        log.info("stopped")
