"""The dashboard's fleet-wide write-queue chart: writable write queues per broker group,
summed over every topic, read a bounded slice per request.

At 300 groups and 100,000 topics the sum covers about 1,000,000 QueueDatas: too much for
one request, and far too much for a browser walking the topic pages. Each group's
``broker-topics`` hash (service/keys.py: topic -> "read,write,perm,sysflag", kept by the
change scripts) holds that group's queues, so a pass reads one hash per group. A request
for the tally advances the pass under way by at most ``budget`` values (a few groups),
then answers the last complete pass and the progress of the next: no request reads more
than a bounded slice, and a worker nobody asks reads nothing. A new pass starts when the
registry's version moved since the last one began, at most once per ``interval_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from service.store import Store

# RocketMQ PermName: 2 is write. A QueueData without it takes no writes whatever its
# writeQueueNums says (a wiped broker); the page and the analytics count the same way.
PERM_WRITE = 2


def writable_queues(values: list[bytes]) -> int:
    """The sum of writeQueueNums over "read,write,perm,sysflag" values whose perm has W.
    Most of a group's topics share a handful of distinct values: each is parsed once."""
    total = 0
    for value, count in Counter(values).items():
        _, write, perm, _ = value.split(b",", 3)
        if int(perm) & PERM_WRITE:
            total += int(write) * count
    return total


@dataclass
class Pass:
    version: int
    started: float  # wall clock, s
    pending: list[tuple[str, str]]  # (cluster, brokerName) still to read
    groups: int
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)


class QueueTally:
    """One per worker: the last complete pass and the one under way."""

    def __init__(self, budget: int = 40_000, interval_s: float = 30.0) -> None:
        self.budget = budget
        self.interval_s = interval_s
        self.done: dict[str, Any] | None = None  # the answer of the last complete pass
        self.done_version = -1
        self.current: Pass | None = None
        self.lock = asyncio.Lock()

    async def step(self, store: Store, cluster_info: Any) -> dict[str, Any]:
        """Advances the pass by one bounded slice and answers. `cluster_info` is an
        awaitable factory of (version, ClusterInfo body): the groups a pass reads."""
        async with self.lock:  # concurrent requests share one slice, not one each
            if self.current is None:
                version = int(await store.call(store.redis.get(store.keys.version)) or 0)
                due = self.done is None or (version != self.done_version and
                                            time.time() - self.done["finishedAt"] / 1000 >= self.interval_s)
                if due:
                    version, body = await cluster_info()
                    table = body["brokerAddrTable"]
                    pending = sorted(((row["cluster"], name) for name, row in table.items()), reverse=True)
                    self.current = Pass(version, time.time(), pending, len(pending))
            if self.current is not None:
                await self._read_slice(store, self.current)
                if not self.current.pending:
                    self._finish(self.current)
            return self.answer()

    async def _read_slice(self, store: Store, run: Pass) -> None:
        read = 0
        while run.pending and read < self.budget:
            cluster, name = run.pending[-1]
            values = await store.call(store.redis.hvals(store.keys.broker_topics(name)))
            run.pending.pop()  # only once read: a failed read is tried again by the next request
            read += len(values) + 1
            run.rows[name] = {"brokerName": name, "cluster": cluster, "topics": len(values),
                              "writeQueues": writable_queues(values)}

    def _finish(self, run: Pass) -> None:
        finished = time.time()
        self.done = {
            "groups": sorted(run.rows.values(), key=lambda r: (r["cluster"], r["brokerName"])),
            "version": run.version,
            "startedAt": int(run.started * 1000),
            "finishedAt": int(finished * 1000),
        }
        self.done_version = run.version
        self.current = None

    def answer(self) -> dict[str, Any]:
        run = self.current
        progress = {"read": run.groups - len(run.pending), "of": run.groups} if run else None
        return {"tally": self.done, "pass": progress}
