"""Running a worker under an orchestrator: start, and stop gracefully on SIGTERM.

On SIGTERM (or SIGINT) the worker first answers /readyz with 503 for the drain period
(RMQ_DRAIN_MS), so a load balancer takes it out while it still serves; then it stops
accepting, lets in-flight requests finish (long polls are answered at once), stops the
scanner and the cache's watchers, closes Redis, and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from service.config import Settings

log = logging.getLogger(__name__)


async def serve(app: web.Application, settings: Settings) -> None:
    from service.api import begin_stopping

    runner = web.AppRunner(app, handle_signals=False, access_log=None,
                           shutdown_timeout=settings.shutdown_timeout_ms / 1000)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    log.info("serving on http://%s:%s", settings.host, settings.port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("stop requested: not ready from now, draining for %d ms", settings.drain_ms)
        begin_stopping(app)
        await asyncio.sleep(settings.drain_ms / 1000)
    finally:
        # stops accepting, waits for in-flight requests, then runs the app's cleanup
        await runner.cleanup()
        log.info("stopped")
