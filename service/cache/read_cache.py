"""Per-worker cache of read answers, evicted by what each change touched, kept within a
stated staleness bound and a memory budget.

Dependencies. A route answer depends on its topic and on every broker group it names; a
change record (service/changes.py) lists the topics and groups a change touched, so only
the answers it may change are evicted: a topic's answers at once (their keys are known), a
group's lazily (each answer remembers the local change count it was read at, and a group
changed after that invalidates it on lookup). Cluster info depends on every group; the
topic lists and other whole-table answers on every visible change.

Freshness. Records arrive on the change channel (fast, but lost across reconnects) and
from a poll every ``poll`` seconds that reads the changelog from the last record this
worker applied (``lua/changes_since.lua``): a gap is replayed from it, and only a gap older
than the changelog's retention, a version that went backwards or a rewritten history
flushes everything. An answer is served only while a poll sent within the bound has found
every record up to its version applied, so an answer is never older than the bound,
whatever happens to pub/sub; when Redis or the poll fails the cache stops answering.

Races. An answer read while a change that touches it was applied is not cached: each
applied change is kept in a short ring with the local count, and an insert checks the
changes since its read began.

Memory. Positive route answers are an LRU (cachetools' LRUCache) bounded in entries and
bytes; TOPIC_NOT_EXIST answers have their own small LRU, so a stream of unknown topics
cannot push routes out.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Hashable, Iterable

from service.cache.answers import ANY, ROUTE_KINDS, Answer, Fetch, Stats
from service.cache.budget import Budget
from service.cache.follower import Follower
from service.cache.watches import Watches
from service.changes import Change
from service.store import Store, StoreUnavailable

# Applied changes remembered for the insert check; an answer whose read began further back
# is served but not cached.
RECENT = 4096


class ReadCache(Budget, Watches, Follower):
    """The answers, their freshness and dependencies; its memory budget, watch registry
    and change follower are the parts in service/cache/budget.py, watches.py, follower.py."""

    def __init__(self, store: Store, poll_ms: int, bound_ms: int, max_entries: int = 200_000,
                 max_bytes: int = 512 * 1024 * 1024, negative_entries: int = 10_000) -> None:
        self.store = store
        self.poll = poll_ms / 1000
        self.bound = bound_ms / 1000
        self.stats = Stats()
        self._init_budget(max_entries, max_bytes, negative_entries)
        self._init_watches()
        self._init_follower()
        # local count of applied visible changes, and the latest of them
        self.tick = 0
        self.recent: deque[tuple[int, Change | None]] = deque(maxlen=RECENT)  # None: a flush
        self.group_changed: dict[str, int] = {}
        self.scoped: dict[Hashable, tuple[str, Answer]] = {}

    # ------------------------------------------------------------------ reads
    def fresh(self) -> bool:
        return time.monotonic() - self.confirmed_at <= self.bound

    def lookup_route(self, kind: str, topic: str) -> Answer | None:
        """The cached answer while it may be served; no await, so a hit costs no coroutine."""
        if not self.fresh():  # first: an answer past the bound is not marked used
            return None
        key = (kind, topic)
        if key not in self.routes:
            answer = self.negatives.get(key)
            if answer is not None:
                self.stats.hits += 1
            return answer
        answer = self.routes[key]  # marked used; dropped below if out of date
        stamp, changed = answer.stamp, self.group_changed
        for group in answer.groups:
            if changed.get(group, -1) > stamp:
                self._drop_route(key)
                self.stats.invalidations += 1
                return None
        self.stats.hits += 1
        return answer

    async def route(self, kind: str, topic: str, fetch: Fetch) -> Answer:
        answer = self.lookup_route(kind, topic)
        if answer is not None:
            return answer
        if not self.fresh() and ((kind, topic) in self.routes or (kind, topic) in self.negatives):
            await self.confirm()  # held but past the bound: one shared poll, not a read each
            answer = self.lookup_route(kind, topic)
            if answer is not None:
                return answer
        self.stats.misses += 1
        stamp = self.tick
        answer = await fetch()
        answer.stamp = stamp
        if self._untouched_since(stamp, topic, answer.groups):
            self._insert_route((kind, topic), answer)
        else:
            self.stats.not_cached += 1
        return answer

    async def get(self, key: Hashable, fetch: Fetch, scope: str = ANY) -> Answer:
        """A whole-table answer (cluster info, topic lists, summaries) under `scope`."""
        held = self.scoped.get(key)
        if held is not None and not self.fresh():
            await self.confirm()
            held = self.scoped.get(key)
        if held is not None and self.fresh():
            self.stats.hits += 1
            return held[1]
        self.stats.misses += 1
        stamp = self.tick
        answer = await fetch()
        answer.stamp = stamp
        if self._scope_untouched_since(stamp, scope):
            self.scoped[key] = (scope, answer)
        else:
            self.stats.not_cached += 1
        return answer

    def _since(self, stamp: int) -> Iterable[Change | None] | None:
        """The changes applied after `stamp`, or None when the ring no longer reaches back."""
        if self.tick == stamp:
            return ()
        if not self.recent or self.recent[0][0] > stamp + 1:
            return None
        return (change for tick, change in reversed(self.recent) if tick > stamp)

    def _untouched_since(self, stamp: int, topic: str, groups: tuple[str, ...]) -> bool:
        since = self._since(stamp)
        if since is None:
            return False
        for change in since:
            if change is None or change.flush or topic in change.topics or not change.groups.isdisjoint(groups) \
                    or (change.negatives and not groups):  # a TOPIC_NOT_EXIST answer names no group
                return False
        return True

    def _scope_untouched_since(self, stamp: int, scope: str) -> bool:
        since = self._since(stamp)
        if since is None:
            return False
        for change in since:
            if change is None or change.flush or change.groups or scope == ANY:
                return False
        return True

    # ------------------------------------------------------------------ the read path
    async def read_route(self, kind: str, topic: str, fetch: Fetch,
                         stale_max_ms: int | None = None) -> tuple[Answer, int | None]:
        """A route answer as both fronts read it: cached or fetched; with ``stale_max_ms``
        (``?stale`` over HTTP, RMQ_REMOTING_STALE_READS over TCP), while Redis is
        unreachable, the last answer this worker knew at most that old. The age (ms) of
        the knowledge a stale answer stands on, or None when the answer is current."""
        return await self._or_stale(lambda: self.route(kind, topic, fetch),
                                    lambda max_ms: self.stale_route(kind, topic, max_ms), stale_max_ms)

    async def read_scoped(self, key: Hashable, fetch: Fetch, scope: str = ANY,
                          stale_max_ms: int | None = None) -> tuple[Answer, int | None]:
        """A whole-table answer (cluster info, topic lists), as ``read_route`` reads routes."""
        return await self._or_stale(lambda: self.get(key, fetch, scope=scope),
                                    lambda max_ms: self.stale_scoped(key, max_ms), stale_max_ms)

    async def _or_stale(self, read: Fetch, stale: Callable[[int], tuple[Answer, int] | None],
                        max_ms: int | None) -> tuple[Answer, int | None]:
        if max_ms is None:
            return await read(), None
        held = stale(max_ms) if self.unreachable else None  # a poll failed: no wait for Redis' timeout
        if held is None:
            try:
                return await read(), None
            except StoreUnavailable:
                held = stale(max_ms)
                if held is None:
                    raise
        return held

    # ------------------------------------------------------------------ stale answers
    def stale_route(self, kind: str, topic: str, max_age_ms: int) -> tuple[Answer, int] | None:
        """The answer last known current and how old that knowledge is (ms), when a caller
        accepts an answer past the bound (Redis unreachable) and it is at most `max_age_ms`."""
        answer = self.routes.get((kind, topic)) or self.negatives.get((kind, topic))
        if answer is None or any(self.group_changed.get(g, -1) > answer.stamp for g in answer.groups):
            return None
        return self._stale(answer, max_age_ms)

    def stale_scoped(self, key: Hashable, max_age_ms: int) -> tuple[Answer, int] | None:
        held = self.scoped.get(key)
        return None if held is None else self._stale(held[1], max_age_ms)

    def _stale(self, answer: Answer, max_age_ms: int) -> tuple[Answer, int] | None:
        age_ms = int((time.monotonic() - self.confirmed_at) * 1000)
        if age_ms > max_age_ms:
            return None
        self.stats.stale_served += 1
        self.stats.stale_age_ms = age_ms
        return answer, age_ms

    @property
    def size(self) -> int:
        return len(self.routes) + len(self.negatives) + len(self.scoped)

    def _may_have_changed(self, topic: str, answer: Answer) -> bool:
        return not self._untouched_since(answer.stamp, topic, answer.groups) or \
            any(self.group_changed.get(g, -1) > answer.stamp for g in answer.groups)

    # ------------------------------------------------------------------ invalidation
    def _evict(self, change: Change) -> None:
        self.tick += 1
        if change.flush:
            self.flush()
            return
        self.recent.append((self.tick, change))
        if change.negatives:
            self.stats.invalidations += len(self.negatives)
            self._clear_negatives()
            self._wake_negative()
        # only the topics held are visited (a first registration names every topic it has)
        self.stats.invalidations += self.routes.drop_topics(change.topics, ROUTE_KINDS)
        self.stats.invalidations += self.negatives.drop_topics(change.topics, ROUTE_KINDS)
        for topic in self.watch_topics.keys() & change.topics:
            self._wake(self.watch_topics.get(topic))
        for group in change.groups:
            self.group_changed[group] = self.tick
            self._wake(self.watch_groups.get(group))
        for key in [k for k, (scope, _) in self.scoped.items() if scope == ANY or change.groups]:
            del self.scoped[key]

    def flush(self) -> None:
        """Forgets every answer: the worker cannot tell what changed."""
        self.tick += 1
        self.recent.append((self.tick, None))
        self.stats.invalidations += self.size
        self.stats.flushes += 1
        self._clear_routes()
        self.scoped.clear()
        self.group_changed.clear()
        self.wake_all()

