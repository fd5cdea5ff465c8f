"""The iteration order of Java's HashMap and ConcurrentHashMap, for the reference model.

Java iterates a hash map bucket by bucket (bucket = the spread key hash masked by the
table size, a power of two that doubles when the map passes 3/4 full and never shrinks)
and, inside a bucket, in the order the keys went in (a resize splits a bucket keeping
that order). So the order is (bucket under the table's size now, insertion), which this
module computes. Not modelled: a bucket of more than 8 keys in a table of 64 or more
becomes a tree (ordered differently), and ConcurrentHashMap's resize may reverse part of
a bucket; both need many keys sharing a bucket, which the model test's names avoid.
"""

from __future__ import annotations

import itertools
from typing import Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_INT = 1 << 32


def _int32(value: int) -> int:
    value &= _INT - 1
    return value - _INT if value >= 1 << 31 else value


def string_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = _int32(31 * h + int.from_bytes(units[i:i + 2], "big"))
    return h


def long_hash(v: int) -> int:
    """java.lang.Long.hashCode."""
    v &= (1 << 64) - 1
    return _int32(v ^ (v >> 32))


def java_hash(key: object) -> int:
    if isinstance(key, str):
        return string_hash(key)
    if isinstance(key, int):
        return long_hash(key)
    if isinstance(key, tuple):  # BrokerAddrInfo(cluster, addr): cluster chars, '_', addr chars
        h = 0
        for ch in key[0] + "_" + key[1]:
            h = _int32(31 * h + ord(ch))
        return h
    raise TypeError(f"no Java hash for {key!r}")


def _spread(h: int) -> int:
    h &= _INT - 1
    return h ^ (h >> 16)


def table_size_for(capacity: int) -> int:
    n = 1
    while n < capacity:
        n <<= 1
    return n


class JavaMap(Generic[K, V]):
    """A dict whose iteration follows a Java hash map's, for a map made with `capacity`
    (Java's `new HashMap<>(capacity)`, `new ConcurrentHashMap<>(capacity)` as its table
    size: HashMap's default 16)."""

    _seq = itertools.count()

    def __init__(self, capacity: int = 16) -> None:
        self.table = table_size_for(capacity)
        self._items: dict[K, tuple[int, V]] = {}

    def _grow(self) -> None:
        while len(self._items) > self.table * 3 // 4:
            self.table <<= 1

    def __setitem__(self, key: K, value: V) -> None:
        old = self._items.get(key)
        self._items[key] = (old[0] if old else next(self._seq), value)
        self._grow()

    def __getitem__(self, key: K) -> V:
        return self._items[key][1]

    def get(self, key: K, default: V | None = None) -> V | None:
        found = self._items.get(key)
        return found[1] if found else default

    def pop(self, key: K, default: V | None = None) -> V | None:
        found = self._items.pop(key, None)
        return found[1] if found else default

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def keys(self) -> list[K]:
        mask = self.table - 1
        return sorted(self._items, key=lambda k: (_spread(java_hash(k)) & mask, self._items[k][0]))

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def values(self) -> list[V]:
        return [self._items[k][1] for k in self.keys()]

    def items(self) -> list[tuple[K, V]]:
        return [(k, self._items[k][1]) for k in self.keys()]


def java_set_order(keys: list[str], capacity: int = 16) -> list[str]:
    """The keys, added in this order to a new HashSet / ConcurrentHashMap key set, as it iterates them."""
    s: JavaMap[str, None] = JavaMap(capacity)
    for k in keys:
        s[k] = None
    return s.keys()
