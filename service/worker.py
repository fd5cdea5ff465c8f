"""The composition root: one worker process, its core (a ``service.node.Node``) and the two
protocol fronts on it, the HTTP API (``service.http``) and RocketMQ's remoting protocol
(``service.remoting``). Neither front knows the other; this module wires both to the
same Node and decides the order things start and stop in.

Start: the Node (secrets, Redis, scripts, scanner, cache), then the remoting server, then
the HTTP port, then the start's heap is frozen (``freeze_startup_heap``); a failure of
any of them (a port in use, ...) stops what had started and is a one-line
``StartupError`` naming the setting. On SIGTERM (or
SIGINT) the worker first answers /readyz with 503 for the drain period (RMQ_DRAIN_MS),
so a load balancer takes it out while it still serves; the RocketMQ port stops accepting
and idle HTTP keep-alive connections close at once (busy ones once answered), so that
none holds it past the drain. Then it stops accepting HTTP, lets in-flight requests
finish (long polls are answered at once), stops the remoting server, then the Node
(scanner, cache tasks, Redis), and exits 0.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import signal
import socket
from typing import AsyncIterator, Awaitable

from aiohttp import web

from service import start_log
from service.config import Settings, StartupError
from service.http.app import create_app as create_http_app
from service.http.connections import HttpServer
from service.http.app_keys import NODE
from service.node import Node
from service.remoting.context import HandlerContext
from service.remoting.notify import MinBrokerIdNotifier
from service.remoting.server import RemotingServer
from service.remoting.server_metrics import RequestCounts
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
        install_remoting(app, settings.remoting_host or settings.host, settings.remoting_port,
                         "RMQ_REMOTING_HOST" if settings.remoting_host else "RMQ_HOST")
    return app


def listen_error(setting: str, host_setting: str, host: str, port: int, exc: OSError) -> StartupError:
    """The line for a port that cannot be listened on, naming the setting at fault: the
    port's when it is taken or refused, the host's when the host is not this machine's or
    not a name at all."""
    if isinstance(exc, socket.gaierror):
        return StartupError(f"{host_setting}={host}: cannot listen on {host}:{port}: not a host name or address "
                            f"this machine resolves ({exc.strerror})")
    if exc.errno == errno.EADDRNOTAVAIL:
        return StartupError(f"{host_setting}={host}: cannot listen on {host}:{port}: not an address of this "
                            "machine (0.0.0.0: every one)")
    reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
    return StartupError(f"{setting}={port}: cannot listen on {host}:{port} ({reason})")


async def _run_node(app: web.Application) -> AsyncIterator[None]:
    node = app[NODE]
    try:
        await node.start()
    except BaseException:
        await node.stop()  # what had started (the Redis client) stops with it
        raise
    try:
        yield
    finally:
        await node.stop()


def install_remoting(app: web.Application, host: str, port: int, host_setting: str = "RMQ_REMOTING_HOST") -> None:
    """Serves the app's Node over RocketMQ's protocol too, started after the Node and
    stopped before it (so the store is still open while connections close).

    ``port`` 0 binds a free port (tests); the server, and its ``bound_port``, are then
    ``app[REMOTING]`` once the app has started."""
    node = app[NODE]
    server = RemotingServer(HandlerContext(node), host, port)
    node.prometheus.register(RequestCounts(server))
    app[REMOTING] = server
    notifier = MinBrokerIdNotifier() if node.settings.notify_min_broker_id_changed else None

    async def remoting(app: web.Application) -> AsyncIterator[None]:
        try:
            await server.start()
        except OSError as exc:
            raise listen_error("RMQ_REMOTING_PORT", host_setting, host, port, exc) from None
        node.registry.on_notices = notifier
        try:
            yield
        finally:
            node.registry.on_notices = None
            await server.stop()
            if notifier is not None:
                await notifier.close()

    app.cleanup_ctx.append(remoting)


async def _unless_stopped(step: Awaitable[None], stop: asyncio.Event) -> bool:
    """Runs ``step`` unless ``stop`` is set first, then cancels it: whether it completed
    (its exception, a ``StartupError`` say, raised as it is)."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
        return False
    task.result()
    return True


def freeze_startup_heap() -> None:
    """Moves what the start left (modules, classes, functions, the libraries' internals,
    the Node and its fronts: some 70,000 tracked objects, nearly all of them for the
    process's life) out of the garbage collector's reach. Otherwise every full collection
    walks them all, holding the GIL, so the loop and the decode thread alike, for 16-37 ms
    of CPU, and a big registration's allocations trigger one (bench/README.md, 7c).
    Collected first, so no garbage of the start is kept for good."""
    gc.collect()
    gc.freeze()


async def serve(app: web.Application, settings: Settings) -> None:
    """Runs a worker made by ``create_app`` until SIGTERM or SIGINT, then stops it
    gracefully; raises ``StartupError`` when it cannot start, after stopping what had."""
    server = HttpServer(app, handle_signals=False, access_log=None,
                        shutdown_timeout_s=settings.shutdown_timeout_ms / 1000,
                        header_timeout_s=settings.http_header_timeout_ms / 1000)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        # a worker told to stop while it waits for Redis at start stops, instead of
        # waiting out RMQ_REDIS_START_TIMEOUT_MS
        if not await _unless_stopped(server.setup(), stop):
            log.info("stop requested while starting")
            return
        # a listen queue for bursts of new clients (aiohttp's default is 128; the kernel caps
        # it at net.core.somaxconn)
        try:
            await server.listen(settings.host, settings.port, backlog=settings.http_backlog)
        except OSError as exc:
            raise listen_error("RMQ_PORT", "RMQ_HOST", settings.host, settings.port, exc) from None
        start_log.release()  # held since the start (service/start_log.py)
        freeze_startup_heap()  # every part started: what is left now lives as long as the process
        log.info("serving on http://%s:%s", settings.host, settings.port)
        await stop.wait()
        log.info("stop requested: not ready from now, draining for %d ms", settings.drain_ms)
        app[NODE].begin_stopping()
        if REMOTING in app:
            app[REMOTING].stop_accepting()
        server.close_connections()
        await asyncio.sleep(settings.drain_ms / 1000)
    finally:
        # stops accepting, waits for in-flight requests, then runs the app's cleanup
        await server.cleanup()
        log.info("stopped")
