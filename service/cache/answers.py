"""Cached answers: the encoded bytes with what they depend on, and the cache's counters."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable

# What the answers of one topic are cached under, one per front and encoding.
ROUTE_KINDS = ("http", "tcp", "tcp-std")
# Scopes of whole-table answers: evicted by any change naming a group, or by any visible change.
CLUSTER = "cluster"
ANY = "any"
# Memory of one cached answer beyond its body, topic and group names: the object, its
# ETag, the key and its three slots in cachetools' LRUCache (value, size, order; ~100 B
# more than the one OrderedDict slot of before: measured 805 B an entry at 200,000 entries
# of a 100-byte body). tests/test_cache_budget.py measures it with tracemalloc and fails
# if this undercounts; the byte budget counts with it.
ENTRY_OVERHEAD = 660


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

