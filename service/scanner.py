"""The expiry loop every worker runs: removes brokers whose deadline has passed.

A pass reads only the due part of the deadline index (ZRANGEBYSCORE up to Redis'
now), so it costs O(expired), not O(brokers). The destroy script checks the deadline
again, so a heartbeat that lands between the read and the removal wins, and several
workers scanning at once do no harm.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from service.registry import Registry
from service.store import StoreUnavailable

log = logging.getLogger(__name__)


@dataclass
class ScanStats:
    passes: int = 0
    expired: int = 0
    failures: int = 0
    lag_ms: int = 0  # how long past its deadline the most overdue broker was at the last pass
    live_brokers: int = 0  # addresses with a deadline, at the last pass
    topics: int = 0
    groups_without_master: int = 0
    cluster_groups: dict[str, int] = field(default_factory=dict)  # cluster -> broker groups in it


class Scanner:
    CONCURRENCY = 32

    def __init__(self, registry: Registry, interval_ms: int, batch: int = 1000) -> None:
        self.registry = registry
        self.store = registry.store
        self.interval = interval_ms / 1000
        self.batch = batch
        self.stats = ScanStats()

    async def now_ms(self) -> int:
        seconds, micros = await self.store.call(self.store.redis.time())
        return seconds * 1000 + micros // 1000

    async def due(self) -> list[str]:
        raw = await self.store.call(
            self.store.redis.zrangebyscore(self.store.keys.expiry, "-inf", await self.now_ms(), start=0, num=self.batch)
        )
        return [a.decode() if isinstance(a, bytes) else a for a in raw]

    async def observe_tables(self) -> None:
        """The gauges of /metrics: scanner lag, live brokers, topics, groups without a master,
        broker groups per cluster (a few reads a pass: one more per cluster, not per group)."""
        keys, redis = self.store.keys, self.store.redis
        oldest = await self.store.call(redis.zrange(keys.expiry, 0, 0, withscores=True))
        now = await self.now_ms()
        self.stats.lag_ms = max(0, now - int(oldest[0][1])) if oldest else 0
        self.stats.live_brokers = await self.store.call(redis.zcard(keys.expiry))
        self.stats.topics = await self.store.call(redis.scard(keys.topics))
        self.stats.groups_without_master = await self.store.call(redis.scard(keys.masterless))
        clusters = sorted(c.decode() for c in await self.store.call(redis.smembers(keys.clusters)))
        sizes = await asyncio.gather(*(self.store.call(redis.scard(keys.cluster(c))) for c in clusters))
        self.stats.cluster_groups = dict(zip(clusters, sizes))

    async def scan_once(self) -> int:
        """One pass; returns how many brokers this worker removed."""
        removed = 0
        while True:
            due = await self.due()
            # each removal is its own atomic script; sending a chunk at once overlaps the
            # round trips instead of paying one per broker
            for at in range(0, len(due), self.CONCURRENCY):
                chunk = due[at:at + self.CONCURRENCY]
                for addr, gone in zip(chunk, await asyncio.gather(*map(self.registry.destroy, chunk))):
                    if gone:
                        removed += 1
                        log.info("broker %s expired: removed from the route tables", addr)
            if len(due) < self.batch:
                break
        self.stats.passes += 1
        self.stats.expired += removed
        return removed

    async def run(self) -> None:
        while True:
            try:
                await self.observe_tables()
                await self.scan_once()
            except StoreUnavailable as exc:
                self.stats.failures += 1
                log.warning("expiry scan skipped, Redis unavailable: %s", exc)
            except Exception:  # the loop must outlive any one bad pass
                self.stats.failures += 1
                log.exception("expiry scan failed")
            await asyncio.sleep(self.interval)
