"""One worker's core, built and owned in one place: its settings, the Redis store, the
read cache, the registry, the removal path, the expiry scanner, their background tasks and the metrics
registry. The protocol fronts (``service.http``, ``service.remoting``) are each handed a
Node and use only it; ``service.worker`` composes a Node with the fronts and runs them.

Start: the secrets checked, Redis waited for (at most RMQ_REDIS_START_TIMEOUT_MS), its
scripts loaded and its key schema stamp checked (``service.startup``: any failure a
one-line ``StartupError``), then the removal path's drainer, the scanner, the cache's
version poll and change listener. Stop: ``begin_stopping`` first (not ready any more; long
polls answer at once), then ``stop`` stops the scanner, finishes within the drain time the
work under way (registrations, queued removals, collections), cancels the other
background tasks and closes Redis.
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import CollectorRegistry

from service import posture
from service.cache import ReadCache
from service.config import Settings
from service.metrics import CoreCollector
from service.registry import Registry
from service.removals import Removals
from service.scanner import Scanner
from service.startup import check_secrets, connect
from service.store import Store, StoreUnavailable

log = logging.getLogger(__name__)


class Node:
    def __init__(self, settings: Settings, store: Store | None = None) -> None:
        self.settings = settings
        self.store = store or Store(settings)
        self.cache = ReadCache(self.store, settings.version_poll_ms, settings.max_staleness_ms,
                               max_entries=settings.cache_max_entries, max_bytes=settings.cache_max_bytes,
                               negative_entries=settings.cache_negative_entries)
        # told every change this worker makes, so its own cache reads its writes at once
        self.registry = Registry(self.store, on_change=self.cache.observe)
        # every departure (connection close, failed unregistration, expiry) goes through it
        self.removals = Removals(self.registry)
        self.registry.on_departure = self.removals.collect
        self.scanner = Scanner(self.registry, settings.scan_interval_ms, settings.scan_batch, self.removals,
                               history=self.cache)
        # one Prometheus registry per worker (several in one process in tests must not
        # collide); each front adds its own collectors to it
        self.prometheus = CollectorRegistry()
        self.prometheus.register(CoreCollector(self.registry, self.scanner, self.removals, self.cache))
        self.stopping = False
        self._stop_by: float | None = None  # monotonic time by which the stop must be done (begin_stopping)
        self._tasks: list[asyncio.Task[None]] = []
        self._scanning: asyncio.Task[None] | None = None  # the scanner's, among _tasks

    async def start(self) -> None:
        settings = self.settings
        check_secrets(settings)
        posture.say(settings)
        if settings.embedded:
            log.warning("no REDIS_URL: running on an embedded in-process store "
                        "(single process, NOT durable: everything is lost on exit)")
        try:
            await connect(self.store, settings)
            indexed = await self.registry.scripts.topic_index_sync()
            if indexed:
                log.info("indexed %d topics by name (first start after an upgrade)", indexed)
            await self.registry.scripts.masterless_sync()
        except StoreUnavailable as e:  # it answered a moment ago: serve, 503 until it is back
            log.warning("Redis unavailable at start (%s); serving 503 until it returns", e)
        self.removals.start()
        self._scanning = asyncio.create_task(self.scanner.run(), name="expiry-scanner")
        self._tasks = [
            self._scanning,
            asyncio.create_task(self.cache.run_poller(), name="version-poller"),
            asyncio.create_task(self.cache.run_listener(), name="change-listener"),
        ]

    # What a stop not asked by a signal (a start that failed, a test's worker) gives the work
    # under way: a worker told to stop by SIGTERM gives it the rest of its drain time instead.
    STOP_LIMIT_S = 2.0

    def begin_stopping(self) -> None:
        """Not ready any more, and long polls answer now instead of holding the shutdown.
        From now the worker has RMQ_DRAIN_MS + RMQ_SHUTDOWN_TIMEOUT_MS to finish what it
        began (in-flight requests, registrations, removals, collections) and exit."""
        self.stopping = True
        self._stop_by = time.monotonic() + (self.settings.drain_ms + self.settings.shutdown_timeout_ms) / 1000
        self.cache.wake_all()

    async def stop(self) -> None:
        """Finishes, within the drain time, the background work this worker began: the
        registrations under way (a staging's slices and its publication), the queued
        removals and the departed groups' collections; then stops the rest. The scanner
        goes first: it would only begin more."""
        stop_by = self._stop_by if self._stop_by is not None else time.monotonic() + self.STOP_LIMIT_S
        await self._cancel([self._scanning] if self._scanning is not None else [])
        await self.registry.finish_registrations(stop_by - time.monotonic())
        await self.removals.stop(stop_by - time.monotonic())
        await self._cancel(self._tasks)
        await self.store.close()

    @staticmethod
    async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
        # Cancel until done: on Python 3.11, asyncio.wait_for can swallow a cancellation that
        # arrives as its inner call completes, and the loop would then run on.
        while pending := [t for t in tasks if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.1)
