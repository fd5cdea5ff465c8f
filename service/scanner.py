"""The expiry loop every worker runs: removes brokers whose deadline has passed.

A pass reads only the due part of the deadline index (ZRANGEBYSCORE up to Redis'
now), so it costs O(expired), not O(brokers). The due addresses go to the worker's one
removal path (service/removals.py), which removes them in batches and checks each
deadline again, so a heartbeat that lands between the read and the removal wins, and
several workers scanning at once do no harm.

A broker is expired when a pass finds its deadline passed, as RocketMQ's
scanNotActiveBroker does (lastUpdateTimestamp + timeout < now, every 5 s): until then its
live row is kept (lua/_members.lua) and a late heartbeat still refreshes it. Java's scanner
thread stalls with its process; a worker's deadlines are Redis time, which runs on while
the worker is stopped. So after this worker could not hear its brokers (its event loop
stalled: the process or its machine stopped; or its scans could not reach Redis), its
passes expire nothing for GRACE_S: the heartbeats sent meanwhile, waiting unread in its
sockets or sent again as the brokers resume, are applied first (``Hearing``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from service.liveness import count_late
from service.registry import Registry
from service.removals import EXPIRED, REMOVED, Removal, Removals
from service.store import StoreUnavailable
from service.store_watch import History, StoreWatch

log = logging.getLogger(__name__)


@dataclass
class ScanStats:
    passes: int = 0
    expired: int = 0
    failures: int = 0
    lag_ms: int = 0  # how long past its deadline the most overdue broker was at the last pass
    live_brokers: int = 0  # addresses with a deadline, at the last pass
    late_brokers: int = 0  # of them, late (service/liveness.py) at the last pass
    topics: int = 0
    groups_without_master: int = 0
    masterless: dict[str, str] = field(default_factory=dict)  # broker group without master -> its cluster
    cluster_groups: dict[str, int] = field(default_factory=dict)  # cluster -> broker groups in it
    # cluster -> brokers this worker removed on expiry; every cluster seen starts at 0, so a
    # rule's increase() sees its first expiry
    expired_by_cluster: dict[str, int] = field(default_factory=dict)
    # what the lag is estimated from while passes fail: the earliest deadline and Redis'
    # clock at the last observation, and this process' monotonic clock then
    oldest_deadline_ms: int | None = None
    observed_redis_ms: int = 0
    observed_at: float | None = None  # None: the tables were never read
    failing: bool = False  # the last pass failed


class Hearing:
    """Whether this worker could hear its brokers lately: a tick every TICK_S notes a stall of
    the event loop (a tick STALL_S late or more); a failed pass notes Redis out of reach.
    Either holds expiries back for GRACE_S from then (the scanner asks ``expiring``)."""

    TICK_S = 0.25
    # a tick this late: the loop did not run (the process stopped, its machine stalled, or
    # something blocked the loop); a loaded machine delays ticks by far less
    STALL_S = 1.0
    # what a broker that went unheard gets to be heard before anything expires: RocketMQ 5's
    # heartbeat interval (brokerHeartbeatInterval, 1 s, an acting-master group's) twice
    GRACE_S = 2.0

    def __init__(self) -> None:
        self.deaf_until = 0.0  # monotonic time before which nothing expires
        self.stalls = 0  # stalls of the loop seen

    def deaf(self, why: str = "") -> None:
        """Holds expiries back for GRACE_S from now; `why`, when given, is logged unless
        expiries are held back already (a failed pass is not: the outage is logged already)."""
        if why and self.expiring():
            log.warning("%s: no broker expires on this worker for the next %.0f s, so heartbeats sent meanwhile are "
                        "applied first", why, self.GRACE_S)
        self.deaf_until = time.monotonic() + self.GRACE_S

    def expiring(self) -> bool:
        return time.monotonic() >= self.deaf_until

    async def run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.TICK_S)
            late = time.monotonic() - before - self.TICK_S
            if late >= self.STALL_S:
                self.stalls += 1
                self.deaf(f"this worker's event loop stalled for {late:.1f} s")


class Scanner:
    def __init__(self, registry: Registry, interval_ms: int, batch: int = 1000, removals: Removals | None = None,
                 history: History | None = None) -> None:
        self.registry = registry
        self.removals = removals or Removals(registry)
        self.store = registry.store
        self.interval = interval_ms / 1000
        self.batch = batch
        self.stats = ScanStats()
        self.watch = StoreWatch(self.store, history)  # `history`: the read cache's change records
        self.hearing = Hearing()

    async def now_ms(self) -> int:
        seconds, micros = await self.store.call(self.store.redis.time())
        return seconds * 1000 + micros // 1000

    async def due(self) -> list[str]:
        raw = await self.store.call(
            self.store.redis.zrangebyscore(self.store.keys.expiry, "-inf", await self.now_ms(), start=0, num=self.batch)
        )
        return [a.decode() if isinstance(a, bytes) else a for a in raw]

    async def observe_tables(self) -> None:
        """The gauges of /metrics: scanner lag, live and late brokers, topics, groups without a master
        and their clusters, broker groups per cluster (a few reads a pass: one more per
        cluster and per group without a master, not per group)."""
        keys, redis, stats = self.store.keys, self.store.redis, self.stats
        oldest = await self.store.call(redis.zrange(keys.expiry, 0, 0, withscores=True))
        now = await self.now_ms()
        observed_at = time.monotonic()
        stats.oldest_deadline_ms = int(oldest[0][1]) if oldest else None
        stats.lag_ms = max(0, now - stats.oldest_deadline_ms) if stats.oldest_deadline_ms is not None else 0
        stats.observed_redis_ms, stats.observed_at = now, observed_at
        stats.live_brokers = await self.store.call(redis.zcard(keys.expiry))
        stats.late_brokers = await count_late(self.store, now, self.registry.settings.broker_timeout_ms)
        stats.topics = await self.store.call(redis.scard(keys.topics))
        groups = sorted(g.decode() for g in await self.store.call(redis.smembers(keys.masterless)))
        in_cluster = await asyncio.gather(*(self.store.call(redis.hget(keys.broker(g), "cluster")) for g in groups))
        stats.masterless = {g: c.decode() if c is not None else "" for g, c in zip(groups, in_cluster)}
        stats.groups_without_master = len(groups)
        clusters = sorted(c.decode() for c in await self.store.call(redis.smembers(keys.clusters)))
        sizes = await asyncio.gather(*(self.store.call(redis.scard(keys.cluster(c))) for c in clusters))
        stats.cluster_groups = dict(zip(clusters, sizes))
        for cluster in clusters:
            stats.expired_by_cluster.setdefault(cluster, 0)

    def lag_now_ms(self) -> int | None:
        """How far past its deadline the most overdue broker is: measured at the last pass
        while passes succeed; while they fail (Redis frozen or unreachable), estimated from
        the earliest deadline last read, so it grows as long as no scanner can run (an
        upper bound by at most one scan interval: that broker may have been removed since).
        None until the tables were read once."""
        stats = self.stats
        if stats.observed_at is None:
            return None
        if not stats.failing or stats.oldest_deadline_ms is None:
            return stats.lag_ms
        redis_now = stats.observed_redis_ms + (time.monotonic() - stats.observed_at) * 1000
        return max(stats.lag_ms, int(redis_now) - stats.oldest_deadline_ms)

    async def scan_once(self) -> int:
        """One pass; returns how many brokers this worker removed on expiry. Waits for the
        removal path to settle what it found due (StoreUnavailable when it cannot reach
        Redis: the expiries stay queued there all the same)."""
        removed = 0
        while True:
            due = await self.due()
            if not self.hearing.expiring():  # checked after a call to Redis: a stall is noted by then
                if due:  # expiries wait out the grace: not a pass (a scanner failing again and
                    return removed  # again between graces must not look like one that works)
                break
            for settled in await self.removals.settle([Removal(a, "", EXPIRED) for a in due]):
                # an expiry is counted by cluster, so a rule tells a cluster lost this way
                # from one whose brokers unregistered; the log line names group and role
                if settled.status == REMOVED and settled.removal.cause == EXPIRED:
                    removed += 1
                    cluster = settled.cluster
                    self.stats.expired_by_cluster[cluster] = self.stats.expired_by_cluster.get(cluster, 0) + 1
                    role = "master" if settled.broker_id == "0" else f"slave {settled.broker_id or '?'}"
                    log.info("broker %s (%s of group %s) of cluster %s expired: removed from the route tables",
                             settled.removal.addr, role, settled.group or "?", cluster or "?")
            if len(due) < self.batch:
                break
        # departed groups with QueueData still to remove (lua/collect_leaving.lua): another
        # worker's departures, or ones whose worker stopped before it was done
        if await self.store.call(self.store.redis.exists(self.store.keys.leaving)):
            self.removals.collect()
        self.stats.passes += 1
        self.stats.expired += removed
        return removed

    async def check_store(self) -> None:
        """Whether the store lost its data since the last pass (service/store_watch.py): run
        right after observe_tables, so a reset is noticed within one scan interval."""
        stats = self.stats
        self.watch.seen(sum(stats.cluster_groups.values()), stats.topics, stats.live_brokers)
        await self.watch.check()

    async def run(self) -> None:
        hearing = asyncio.create_task(self.hearing.run(), name="hearing")
        try:
            await self._passes()
        finally:
            hearing.cancel()

    async def _passes(self) -> None:
        while True:
            try:
                await self.observe_tables()
                await self.check_store()
                await self.scan_once()
                self.stats.failing = False
            except StoreUnavailable as exc:
                self.stats.failures += 1
                self.stats.failing = True
                log.warning("expiry scan skipped, Redis unavailable: %s", exc)
                # heartbeats could not be recorded meanwhile either
                self.hearing.deaf()
            except Exception:  # the loop must outlive any one bad pass
                self.stats.failures += 1
                self.stats.failing = True
                log.exception("expiry scan failed")
            await asyncio.sleep(self.interval)
