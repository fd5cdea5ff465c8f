"""The registry's own indexes, listed on the driver: which rows exist, without a SCAN.

The route tables keep their indexes atomically with their rows (every change is one Lua
script): the SET of clusters, a SET of broker names per cluster, a HASH brokerId ->
address per broker name, the ZSET of live addresses by deadline. Listing them costs a few
hundred small commands at fleet size, where a pattern SCAN walks the whole key space
(every queue row included) once per table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from service.keys import Keys


@dataclass(frozen=True)
class Index:
    names: list[str]  # broker names, from the cluster SETs
    addrs: list[str]  # member addresses (addrs HASHes) and live ones (expiry ZSET)

    def keys_of(self, keys: Keys, kind: str) -> list[str]:
        """The row keys of a table kind other than ``queue`` (read from ``broker-topics``)."""
        if kind == "broker":
            return [keys.broker(n) for n in self.names]
        if kind == "member":
            return [keys.member(a) for a in self.addrs]
        if kind == "live":
            return [keys.live(a) for a in self.addrs]
        raise ValueError(f"no row keys for table {kind!r} in the index")


def chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def pipelined(client: Any, command: str, keys: Sequence[str], batch: int) -> list[Any]:
    """``command`` on each key, ``batch`` commands a round trip; the replies in order."""
    replies: list[Any] = []
    for part in chunks(keys, batch):
        pipe = client.pipeline(transaction=False)
        for key in part:
            getattr(pipe, command)(key)
        replies.extend(pipe.execute())
    return replies


def list_index(client: Any, keys: Keys, batch: int = 100) -> Index:
    """Pipelined; each command reads one small key."""
    clusters = sorted(client.smembers(keys.clusters))
    names = sorted({n for members in pipelined(client, "smembers", [keys.cluster(c) for c in clusters], batch)
                    for n in members})
    addrs = {a for values in pipelined(client, "hvals", [keys.addrs(n) for n in names], batch) for a in values}
    addrs.update(client.zrange(keys.expiry, 0, -1))
    return Index(names=names, addrs=sorted(addrs))
