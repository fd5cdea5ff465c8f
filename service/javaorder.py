"""The order Java's hash tables iterate String keys in: RocketMQ's NameServer lists a
route's QueueData and BrokerData, and its ClusterInfo's tables, in that order, and tools
take the first (``mqadmin topicClusterList`` prints the cluster of a route's first group).
lua/_javaorder.lua is the Lua twin (tests/test_java_order.py holds both to a real JVM);
docs/design.md ("Route order") gives the rule.
"""

from __future__ import annotations

from typing import Iterable


def java_hash(name: str) -> int:
    """String.hashCode (31 * h + c over UTF-16 code units, int32 wrapping), unsigned."""
    h = 0
    units = name.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (h * 31 + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def bucket(h: int, capacity: int) -> int:
    """HashMap's (and ConcurrentHashMap's) bin of hash `h`: (h ^ (h >>> 16)) & (capacity - 1)."""
    return (h ^ (h >> 16)) & (capacity - 1)


def grown_capacity(n: int) -> int:
    """A HashMap's table size grown by puts from the default 16: doubled whenever its size
    passes 0.75 of it."""
    cap = 16
    while n > cap * 0.75:
        cap *= 2
    return cap


def copied_capacity(n: int) -> int:
    """``new HashSet<>(c)`` of `n` keys (Java 8 to 17): tableSizeFor(max((int) (n / .75f) + 1, 16))."""
    want = max(n * 4 // 3 + 1, 16)
    cap = 1
    while cap < want:
        cap *= 2
    return cap


def concurrent_capacity(initial: int, n: int) -> int:
    """A ``new ConcurrentHashMap<>(initial)`` holding `n` keys put one by one: its table
    starts at tableSizeFor(1.5 * initial + 1) and doubles when a put makes the count reach
    0.75 of it."""
    cap = 1
    while cap < initial + (initial >> 1) + 1:
        cap *= 2
    while n >= cap - (cap >> 2):
        cap *= 2
    return cap


def java_order(names: Iterable[str], capacity: int) -> list[str]:
    """`names` (in the order they were put) as a hash table of `capacity` bins holding them
    iterates: by bin, then as put."""
    listed = list(names)
    return [n for _, _, n in sorted((bucket(java_hash(n), capacity), i, n) for i, n in enumerate(listed))]
