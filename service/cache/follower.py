"""The change-record follower: records arrive on the change channel (fast, but lost across
reconnects) and from a poll every ``poll`` seconds that reads the changelog from the last
record this worker applied (``lua/changes_since.lua``): a gap is replayed from it, and only
a gap older than the changelog's retention, a version that went backwards or a rewritten
history flushes everything. ``confirmed_at`` is when a poll that found every record applied
was sent: the cache serves answers only within its bound of it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any


from service import changes
from service.changes import Change
from service.scripts import Scripts
from service.store import REDIS_FAILURES, Store, StoreUnavailable, redis_failure

log = logging.getLogger(__name__)


class Follower:
    """Applies each change record once, in sequence (a part of ReadCache: ``_init_follower``
    sets it up; ``_evict`` and ``flush`` are the cache's)."""

    store: Store
    poll: float

    def _init_follower(self) -> None:
        # every record up to `seq` is applied; `anchor` is the record at `seq` (None when
        # unknown), `ahead` those applied beyond it
        self.seq = 0
        self.anchor: bytes | None = None
        self.ahead: dict[int, bytes] = {}
        self.confirmed_at = float("-inf")  # when a poll that found everything applied was sent
        self.unreachable = False  # the last poll failed: Redis is down or not answering
        # the change history going backwards (a store reset): how many times, and the last
        # record applied before the last time (service/store_watch.py reads it)
        self.rewound = (0, 0)
        self._polling: asyncio.Future[None] | None = None  # the poll under way, shared
        self.scripts = Scripts(self.store)

    def _evict(self, change: Change) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

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

    def _reset(self, version: int, anchor: bytes | None) -> None:
        self.flush()
        self.seq, self.anchor = version, anchor
        self.ahead.clear()


    def confirm(self) -> asyncio.Future[None]:
        """A poll, shared by everyone who asks while it is under way. Readers that hold an
        answer only past the bound wait for it rather than each reading Redis: when the
        event loop falls behind (a burst of connections, a big registration being decoded)
        the whole cache goes past the bound at once, and thousands of reads would otherwise
        go to Redis together, queue for its connections and time out."""
        if self._polling is None or self._polling.done():
            self._polling = asyncio.ensure_future(self.poll_once())
        return asyncio.shield(self._polling)

    async def poll_once(self) -> None:
        sent = time.monotonic()
        # both taken before the call: the channel may move them while it is under way
        since, anchor = self.seq, self.anchor
        version, records = await self.scripts.changes_since(since)
        if not self._catch_up(since, anchor, version, records):
            log.info("change records %s..%s not replayable; flushing the read cache", since, version)
            if version < since:
                self.rewound = (self.rewound[0] + 1, since)
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
        """Polls every ``poll`` seconds; the poll is also what tells the log that Redis went
        away and, in one line, that it answers again and for how long it was away."""
        away_since = 0.0  # monotonic: the last poll that reached Redis before the outage
        while True:
            try:
                await self.confirm()
                if self.unreachable:
                    log.warning("Redis answers again after %.1f s away", time.monotonic() - away_since)
                self.unreachable = False
            except StoreUnavailable as e:
                if not self.unreachable:
                    away_since = self.confirmed_at if self.confirmed_at != float("-inf") else time.monotonic()
                    log.warning("Redis does not answer (%s): requests get 503 until it does", e)
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
            except (*REDIS_FAILURES, StoreUnavailable, ValueError) as exc:
                if isinstance(exc, RuntimeError) and not redis_failure(exc):
                    raise
                log.debug("change channel lost (%s); resubscribing", exc)
            finally:
                try:
                    await asyncio.wait_for(pubsub.aclose(), 1)
                except REDIS_FAILURES as exc:
                    if not redis_failure(exc):
                        raise
            await asyncio.sleep(min(self.poll, 0.5))
