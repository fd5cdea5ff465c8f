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

Memory. Positive route answers are an LRU bounded in entries and bytes; TOPIC_NOT_EXIST
answers have their own small LRU, so a stream of unknown topics cannot push routes out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Hashable, Iterable

from redis.exceptions import RedisError

from service import changes
from service.changes import Change
from service.store import Store, StoreUnavailable

log = logging.getLogger(__name__)

# What the answers of one topic are cached under, one per front and encoding.
ROUTE_KINDS = ("http", "tcp", "tcp-std")
# Scopes of whole-table answers: evicted by any change naming a group, or by any visible change.
CLUSTER = "cluster"
ANY = "any"
# Applied changes remembered for the insert check; an answer whose read began further back
# is served but not cached.
RECENT = 4096
# Memory of one cached answer beyond its body, topic and group names: the object, its
# ETag, the key and the LRU's slot (tests/test_cache_budget.py measures it with
# tracemalloc and fails if this undercounts); the byte budget counts with it.
ENTRY_OVERHEAD = 560


class Answer:
    """An encoded answer: status, body, its ETag (a hash of the body), the version its read
    saw and the broker groups it names. `stamp` is the local change count when its read
    began."""

    __slots__ = ("status", "body", "etag", "version", "groups", "stamp", "size")

    def __init__(self, version: int, status: int, body: bytes, groups: tuple[str, ...] = ()) -> None:
        self.version = version
        self.status = status
        self.body = body
        self.etag = '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'
        self.groups = groups
        self.stamp = 0
        self.size = ENTRY_OVERHEAD + len(body) + sum(len(g) + 8 for g in groups)


def make_answer(version: int, status: int, body: bytes, groups: Iterable[str] = ()) -> Answer:
    return Answer(version, status, body, tuple(sorted(set(groups))))


Fetch = Callable[[], Awaitable[Answer]]
RouteKey = tuple[str, str]


@dataclass(eq=False)
class Watcher:
    """One long poll waiting for a route to change."""

    topic: str
    groups: tuple[str, ...]
    event: asyncio.Event


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0  # pushed out by the budget
    invalidations: int = 0  # removed or found out of date because of a change
    flushes: int = 0
    watchers_woken: int = 0
    not_cached: int = 0  # read while a change touching it was applied
    stale_served: int = 0  # answers served past the bound because Redis was unreachable (?stale)
    stale_age_ms: float = 0.0  # the age of the last of them


class ReadCache:
    def __init__(self, store: Store, poll_ms: int, bound_ms: int, max_entries: int = 200_000,
                 max_bytes: int = 512 * 1024 * 1024, negative_entries: int = 10_000) -> None:
        self.store = store
        self.poll = poll_ms / 1000
        self.bound = bound_ms / 1000
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.negative_entries = negative_entries
        self.stats = Stats()
        # the change sequence: every record up to `seq` is applied; `anchor` is the record
        # at `seq` (None when unknown), `ahead` those applied beyond it
        self.seq = 0
        self.anchor: bytes | None = None
        self.ahead: dict[int, bytes] = {}
        self.confirmed_at = float("-inf")  # when a poll that found everything applied was sent
        self.unreachable = False  # the last poll failed: Redis is down or not answering
        # local count of applied visible changes, and the latest of them
        self.tick = 0
        self.recent: deque[tuple[int, Change | None]] = deque(maxlen=RECENT)  # None: a flush
        self.group_changed: dict[str, int] = {}
        self.routes: OrderedDict[RouteKey, Answer] = OrderedDict()
        self.negatives: OrderedDict[RouteKey, Answer] = OrderedDict()
        self.scoped: dict[Hashable, tuple[str, Answer]] = {}
        self.bytes = 0
        self.watch_topics: dict[str, set[Watcher]] = {}
        self.watch_groups: dict[str, set[Watcher]] = {}
        self._wake_all = asyncio.Event()

    # ------------------------------------------------------------------ reads
    def fresh(self) -> bool:
        return time.monotonic() - self.confirmed_at <= self.bound

    def lookup_route(self, kind: str, topic: str) -> Answer | None:
        """The cached answer while it may be served; no await, so a hit costs no coroutine."""
        key = (kind, topic)
        answer = self.routes.get(key)
        if answer is None:
            answer = self.negatives.get(key)
            if answer is None or not self.fresh():
                return None
            self.stats.hits += 1
            return answer
        if not self.fresh():
            return None
        stamp, changed = answer.stamp, self.group_changed
        for group in answer.groups:
            if changed.get(group, -1) > stamp:
                self._drop_route(key)
                self.stats.invalidations += 1
                return None
        self.routes.move_to_end(key)
        self.stats.hits += 1
        return answer

    async def route(self, kind: str, topic: str, fetch: Fetch) -> Answer:
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
            if change is None or change.flush or topic in change.topics or not change.groups.isdisjoint(groups):
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

    # ------------------------------------------------------------------ stale reads
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

    # ------------------------------------------------------------------ memory
    def _insert_route(self, key: RouteKey, answer: Answer) -> None:
        if answer.status != 200:
            self.negatives[key] = answer
            self.negatives.move_to_end(key)
            while len(self.negatives) > self.negative_entries:
                self.negatives.popitem(last=False)
                self.stats.evictions += 1
            return
        self._drop_route(key)
        answer.size += len(key[1])
        self.routes[key] = answer
        self.bytes += answer.size
        while self.routes and (len(self.routes) > self.max_entries or self.bytes > self.max_bytes):
            _, old = self.routes.popitem(last=False)
            self.bytes -= old.size
            self.stats.evictions += 1

    def _drop_route(self, key: RouteKey) -> bool:
        old = self.routes.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        return (self.negatives.pop(key, None) is not None) or old is not None

    @property
    def size(self) -> int:
        return len(self.routes) + len(self.negatives) + len(self.scoped)

    # ------------------------------------------------------------------ watch
    def watch(self, topic: str, answer: Answer) -> Watcher:
        """Registers a long poll on `topic`, holding `answer`: its event is set by the next
        change that may alter that answer (at once if one came since its read began)."""
        watcher = Watcher(topic, answer.groups, asyncio.Event())
        if not self._untouched_since(answer.stamp, topic, answer.groups) or \
                any(self.group_changed.get(g, -1) > answer.stamp for g in answer.groups):
            watcher.event.set()
            return watcher
        self.watch_topics.setdefault(topic, set()).add(watcher)
        for group in answer.groups:
            self.watch_groups.setdefault(group, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        for index, name in [(self.watch_topics, watcher.topic)] + [(self.watch_groups, g) for g in watcher.groups]:
            held = index.get(name)
            if held is not None:
                held.discard(watcher)
                if not held:
                    del index[name]

    def _wake(self, watchers: set[Watcher] | None) -> None:
        for watcher in list(watchers or ()):
            watcher.event.set()
            self.unwatch(watcher)
            self.stats.watchers_woken += 1

    @property
    def watchers(self) -> int:
        return sum(len(w) for w in self.watch_topics.values())

    def wake_all(self) -> None:
        """Every long poll answers now (a flush, or the worker is stopping)."""
        for watchers in list(self.watch_topics.values()):
            self._wake(watchers)

    # ------------------------------------------------------------------ invalidation
    def apply(self, change: Change) -> None:
        """A change record from this worker's own write, the channel or the poll; each is
        applied once, in whatever order they come."""
        if change.seq <= self.seq or change.seq in self.ahead:
            return
        if change.visible:
            self._evict(change)
        self.ahead[change.seq] = change.raw
        while self.seq + 1 in self.ahead:
            self.seq += 1
            self.anchor = self.ahead.pop(self.seq)

    def observe(self, first: Any) -> None:
        """The first result of a change script (Registry's callback): its record, if any."""
        change = changes.of_result(first)
        if change is not None:
            self.apply(change)

    def _evict(self, change: Change) -> None:
        self.tick += 1
        if change.flush:
            self.flush()
            return
        self.recent.append((self.tick, change))
        for topic in change.topics:
            for kind in ROUTE_KINDS:
                if self._drop_route((kind, topic)):
                    self.stats.invalidations += 1
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
        self.routes.clear()
        self.negatives.clear()
        self.scoped.clear()
        self.group_changed.clear()
        self.bytes = 0
        self.wake_all()

    def _reset(self, version: int, anchor: bytes | None) -> None:
        self.flush()
        self.seq, self.anchor = version, anchor
        self.ahead.clear()

    async def poll_once(self) -> None:
        sent = time.monotonic()
        # both taken before the call: the channel may move them while it is under way
        since, anchor = self.seq, self.anchor
        version_raw, records = await self.store.run("changes_since", [since])
        version = int(version_raw)
        if not self._catch_up(since, anchor, version, records):
            log.info("change records %s..%s not replayable; flushing the read cache", since, version)
            self._reset(version, bytes(records[0]) if records else None)
        self.ahead = {s: r for s, r in self.ahead.items() if s > self.seq}
        if sent > self.confirmed_at:
            self.confirmed_at = sent

    def _catch_up(self, since: int, anchor: bytes | None, version: int, records: list[bytes] | None) -> bool:
        """Applies the records of (since, version]; False when they cannot be trusted.
        `anchor` is the record this worker had applied at `since`."""
        if records is None or version < since:
            return False
        parsed = [changes.parse(r) for r in records]
        expected = list(range(version, since - 1 if since > 0 else 0, -1))
        if [c.seq if c is not None else None for c in parsed] != expected:
            return False
        if since > 0 and anchor is not None and parsed[-1] is not None and parsed[-1].raw != anchor:
            return False  # the record this worker applied at `since` is not the one there now
        for change in reversed(parsed):
            if change is not None and change.seq > since:
                self.apply(change)
        if self.seq < version:  # records applied ahead earlier may have been skipped above
            self.seq = version
            self.anchor = parsed[0].raw if parsed and parsed[0] is not None else None
        return True

    async def run_poller(self) -> None:
        while True:
            try:
                await self.poll_once()
                self.unreachable = False
            except StoreUnavailable:
                self.unreachable = True  # answers age out by the bound; readers get 503 from Redis itself
            await asyncio.sleep(self.poll)

    def _message(self, data: bytes | str) -> None:
        change = changes.parse(data)
        if change is None:
            log.info("unreadable change message %r; flushing the read cache", data[:80])
            self.flush()
            return
        self.apply(change)

    async def run_listener(self) -> None:
        """Follows the change channel, resubscribing after any failure."""
        channel = self.store.keys.changes
        while True:
            pubsub = self.store.redis.pubsub()
            try:
                await self.store.know_layout()
                await pubsub.subscribe(channel)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._message(message["data"])
            except asyncio.CancelledError:
                raise
            except (RedisError, StoreUnavailable, OSError, ValueError) as exc:
                log.debug("change channel lost (%s); resubscribing", exc)
            finally:
                try:
                    await asyncio.wait_for(pubsub.aclose(), 1)
                except (RedisError, OSError, asyncio.TimeoutError):
                    pass
            await asyncio.sleep(min(self.poll, 0.5))
