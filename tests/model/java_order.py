"""The iteration order of Java's HashMap and ConcurrentHashMap, for the reference model.

Java iterates a hash map bucket by bucket (bucket = the spread key hash masked by the
table size, a power of two that doubles as the map fills and never shrinks) and, inside
a bucket, along its linked nodes. Not modelled: a bucket of 8 or more keys (a tree, or in
a table under 64 an early resize), which the model test's names never make.
"""

from __future__ import annotations

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
    """A dict whose iteration follows a Java hash map's: its buckets kept as Java keeps
    them (a new key at its bucket's tail; on a resize HashMap keeps each bucket's order,
    ConcurrentHashMap's transfer puts the nodes before the bucket's last run in reverse).

    `capacity`: the table's first size (HashMap's constructor argument, rounded up to a
    power of two; 16 for either map made without one); `concurrent`: a ConcurrentHashMap,
    which grows on reaching 3/4 full (a HashMap, on passing it). chm() takes the capacity
    a ConcurrentHashMap's constructor is given."""

    def __init__(self, capacity: int = 16, concurrent: bool = False) -> None:
        self.concurrent = concurrent
        self.table = table_size_for(capacity)
        self._values: dict[K, V] = {}
        self._buckets: list[list[K]] = [[] for _ in range(self.table)]

    @classmethod
    def chm(cls, capacity: int) -> "JavaMap[K, V]":
        """new ConcurrentHashMap<>(capacity): its table is the power of two above 1 + capacity / 0.75."""
        return cls(int(1 + capacity / 0.75), concurrent=True)

    def _bucket(self, key: K, size: int) -> int:
        return _spread(java_hash(key)) & (size - 1)

    def _grow(self) -> None:
        size = len(self._values)
        limit = self.table - (self.table >> 2)
        while size >= limit if self.concurrent else size > limit:
            n = self.table
            grown: list[list[K]] = [[] for _ in range(2 * n)]
            for i, bucket in enumerate(self._buckets):
                if not bucket:
                    continue
                if not self.concurrent:
                    for key in bucket:
                        grown[self._bucket(key, 2 * n)].append(key)
                    continue
                # ConcurrentHashMap.transfer: the last run of nodes going the same way moves
                # as it is; each node before it is pushed onto the head of its new bucket
                high = [bool(_spread(java_hash(k)) & n) for k in bucket]
                last_run = len(bucket) - 1
                while last_run > 0 and high[last_run - 1] == high[last_run]:
                    last_run -= 1
                lo = [k for k, h in zip(bucket[last_run:], high[last_run:]) if not h]
                hi = [k for k, h in zip(bucket[last_run:], high[last_run:]) if h]
                for k, h in zip(bucket[:last_run], high[:last_run]):
                    (hi if h else lo).insert(0, k)
                grown[i], grown[i + n] = lo, hi
            self._buckets, self.table = grown, 2 * n
            limit = self.table - (self.table >> 2)

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self._values:
            self._buckets[self._bucket(key, self.table)].append(key)
        self._values[key] = value
        self._grow()

    def __getitem__(self, key: K) -> V:
        return self._values[key]

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._values.get(key, default)

    def pop(self, key: K, default: V | None = None) -> V | None:
        if key not in self._values:
            return default
        self._buckets[self._bucket(key, self.table)].remove(key)
        return self._values.pop(key)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    def keys(self) -> list[K]:
        return [k for bucket in self._buckets for k in bucket]

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def values(self) -> list[V]:
        return [self._values[k] for k in self.keys()]

    def items(self) -> list[tuple[K, V]]:
        return [(k, self._values[k]) for k in self.keys()]


def java_set_order(keys: list[str], capacity: int = 16, concurrent: bool = False) -> list[str]:
    """The keys, added in this order to a new HashSet (or, `concurrent`, a
    ConcurrentHashMap key set), as it iterates them."""
    s: JavaMap[str, None] = JavaMap(capacity, concurrent)
    for k in keys:
        s[k] = None
    return s.keys()
