"""Per-worker cache of read answers, kept within a stated staleness bound.

Every answer is stored with the table version its read script saw. The cache knows the
current version from two sources: the change channel (pub/sub; fast, but messages can be
lost across reconnects) and a poll of the version counter every ``poll`` seconds (the
safety net). An entry is served only while it carries the known version *and* a poll
has confirmed that version within the bound; otherwise the read goes to Redis. So an
answer is never older than the bound, whatever happens to pub/sub.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Hashable

from multidict import CIMultiDict, CIMultiDictProxy
from redis.exceptions import RedisError

from service.store import Store, StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """An encoded answer: status, body and its ETag (a hash of the body)."""

    version: int
    status: int
    body: bytes
    etag: str
    # HTTP headers of the full and the 304 answer, built once here rather than on every
    # request that the cached answer serves (aiohttp copies them into each response)
    headers: CIMultiDictProxy[str] = field(init=False, repr=False, compare=False)
    not_modified_headers: CIMultiDictProxy[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validators = {"ETag": self.etag, "Cache-Control": "no-cache"}
        object.__setattr__(self, "not_modified_headers", CIMultiDictProxy(CIMultiDict(validators)))
        object.__setattr__(self, "headers", CIMultiDictProxy(CIMultiDict(validators, **{"Content-Type": "application/json"})))


def make_answer(version: int, status: int, body: bytes) -> Answer:
    return Answer(version, status, body, '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"')


Fetch = Callable[[], Awaitable[Answer]]


class ReadCache:
    def __init__(self, store: Store, poll_ms: int, bound_ms: int) -> None:
        self.store = store
        self.poll = poll_ms / 1000
        self.bound = bound_ms / 1000
        self.version = -1
        self.confirmed_at = float("-inf")  # when a poll that saw `version` was sent
        self.entries: dict[Hashable, Answer] = {}
        self.hits = 0
        self.misses = 0
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ reads
    def fresh(self) -> bool:
        return time.monotonic() - self.confirmed_at <= self.bound

    def lookup(self, key: Hashable) -> Answer | None:
        """The cached answer while it may be served; no await, so a hit costs no coroutine."""
        entry = self.entries.get(key)
        if entry is not None and entry.version == self.version and self.fresh():
            self.hits += 1
            return entry
        return None

    async def get(self, key: Hashable, fetch: Fetch) -> Answer:
        entry = self.lookup(key)
        if entry is not None:
            return entry
        self.misses += 1
        answer = await fetch()
        if answer.version == self.version:
            self.entries[key] = answer
        return answer

    @property
    def changed(self) -> asyncio.Event:
        """Set when the known version next moves; take it before a read, wait on it after."""
        return self._changed

    @staticmethod
    async def wait(event: asyncio.Event, timeout: float) -> bool:
        """False when the timeout passed first."""
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    # ------------------------------------------------------------------ invalidation
    def observe(self, version: int, confirmed_at: float | None = None) -> None:
        if version != self.version:
            # also when it goes down: a Redis restarted empty counts again from 0
            self.version = version
            self.entries.clear()
            self._changed.set()
            self._changed = asyncio.Event()
        if confirmed_at is not None and confirmed_at > self.confirmed_at:
            self.confirmed_at = confirmed_at

    async def poll_once(self) -> None:
        sent = time.monotonic()
        self.observe(await self.store.version(), confirmed_at=sent)

    async def run_poller(self) -> None:
        while True:
            try:
                await self.poll_once()
            except StoreUnavailable:
                pass  # entries age out by the bound; readers get 503 from Redis itself
            await asyncio.sleep(self.poll)

    async def run_listener(self) -> None:
        """Follows the change channel, resubscribing after any failure."""
        channel = self.store.keys.changes
        while True:
            pubsub = self.store.redis.pubsub()
            try:
                await pubsub.subscribe(channel)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self.observe(int(message["data"]))
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, ValueError) as exc:
                log.debug("change channel lost (%s); resubscribing", exc)
            finally:
                try:
                    await asyncio.wait_for(pubsub.aclose(), 1)
                except (RedisError, OSError, asyncio.TimeoutError):
                    pass
            await asyncio.sleep(min(self.poll, 0.5))
