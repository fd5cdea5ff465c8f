"""Runs the remoting TCP server with an aiohttp app (same Registry, ReadCache and Redis)."""

from __future__ import annotations

from typing import AsyncIterator

from aiohttp import web
from prometheus_client import Counter

from service.metrics import METRICS
from service.remoting.handlers import Context
from service.remoting.server import RemotingServer

REMOTING = web.AppKey("remoting", RemotingServer)


def install(app: web.Application, host: str, port: int) -> None:
    """Starts the TCP endpoint with the app and stops it before the app's store closes.

    ``port`` 0 binds a free port (tests); the server, and its ``bound_port``, are then
    readable as ``app[REMOTING]`` once the app has started. Call after ``create_app``
    built the app (it needs the app's registry, cache and settings) and before it starts.
    Requests are counted in the app's Prometheus registry as ``rmq_remoting_requests``.
    """

    metrics = None
    if METRICS in app:
        m = app[METRICS]
        if "remoting" not in m:
            m["remoting"] = Counter("rmq_remoting_requests", "RocketMQ remoting requests by request and response code",
                                    ["code", "response"], registry=m["registry"])
        metrics = m["remoting"]
    server = RemotingServer(Context.of(app), host, port, metrics=metrics)
    app[REMOTING] = server

    async def remoting(app: web.Application) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app.cleanup_ctx.append(remoting)
