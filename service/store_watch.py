"""Noticing that the store lost its data: Redis restarted empty (no persistence), a failover
to an empty replica, a FLUSHALL. Brokers then vanish without expiring, so no expiry-based
alert fires, and an empty registry looks healthy; this makes it an incident.

The sign is the store's stamps: the data-set id (``Keys.dataset``) and the key schema
version (``Keys.schema``), written once (SET NX) when the key space is first used. A
worker remembers the data-set id it found; the expiry scanner tells ``seen`` what each
pass read and asks ``check`` after it (service/scanner.py). When a stamp is gone, or the
data-set id is another one (a worker that noticed first has stamped the store anew), the
store was reset. If the worker knew of data in it (broker groups or topics at its last
two passes, or change records its read cache applied: a fleet registered and wiped
between two passes), this is one ERROR line saying what was lost, a count for
``rmq_store_resets_total`` and a record the dashboard and ``/readyz`` show until the fleet
is back (as many broker groups as were lost, or at most ``SHOWN_S``). Then the worker
stamps the store again (SET NX: several workers noticing at once write one id, and each
counts the reset once) and serves on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from service.keys import SCHEMA_VERSION
from service.store import Store
from service.scripts import text

log = logging.getLogger(__name__)

# how long a reset stays on the first screen and in /readyz when the fleet never comes back
SHOWN_S = 3600.0


@dataclass
class Reset:
    """One reset as this worker noticed it (times in ms since the epoch)."""

    at: int
    groups: int  # broker groups this worker knew at its last pass before the reset
    topics: int
    brokers: int
    gone: str  # which stamp told, in words
    changes: int = 0  # change records the worker's read cache had applied from the store
    groups_now: int = 0  # broker groups at the last pass since
    back_at: int | None = None  # when the groups were back to as many as were lost

    @property
    def recent(self) -> bool:
        """Still an incident: the fleet is not back, and the reset is less than SHOWN_S old."""
        return self.back_at is None and time.time() * 1000 - self.at < SHOWN_S * 1000

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at / 1000))
        if not (self.groups or self.topics):  # registered and wiped before a scan counted them
            return (f"the store was reset at {when}: {self.changes} change records lost (no scan had counted its "
                    f"broker groups yet); {self.groups_now} groups back (brokers re-register within 30 s)")
        return (f"the store was reset at {when}: {self.groups} broker groups and {self.topics} topics lost; "
                f"{self.groups_now} of {self.groups} groups back (brokers re-register within 30 s)")

    def as_json(self) -> dict[str, object]:
        return {"at": self.at, "lostGroups": self.groups, "lostTopics": self.topics, "lostBrokers": self.brokers,
                "lostChanges": self.changes, "gone": self.gone, "groupsNow": self.groups_now, "backAt": self.back_at,
                "recent": self.recent, "text": self.describe()}


Counts = tuple[int, int, int]  # broker groups, topics, brokers


class History(Protocol):
    """The change records a worker's read cache applied (service/cache/follower.py)."""

    seq: int  # the last one applied
    rewound: tuple[int, int]  # how many times the history went backwards, and from which record the last time


class StoreWatch:
    def __init__(self, store: Store, history: History | None = None) -> None:
        self.store = store
        self.history = history
        self._rewinds = 0  # the history's rewinds already told
        self.dataset: str | None = None  # the data-set id this worker found; None until the first check
        self.resets = 0  # resets this worker noticed (rmq_store_resets_total)
        self.last: Reset | None = None
        # what the last two passes saw: a pass that read the tables just after the reset saw
        # them empty, the one before did not
        self._passes: list[Counts] = []

    def seen(self, groups: int, topics: int, brokers: int) -> None:
        """What a pass saw; the fleet is back once its groups are as many as were lost (at
        least one, when no scan had counted them)."""
        self._passes = [*self._passes[-1:], (groups, topics, brokers)]
        reset = self.last
        if reset is None or reset.back_at is not None:
            return
        reset.groups_now = groups
        if groups >= max(reset.groups, 1):
            reset.back_at = int(time.time() * 1000)
            log.warning("the fleet is back after the store reset: %d broker groups registered (%d were lost), "
                        "%.0f s after it", groups, reset.groups, (reset.back_at - reset.at) / 1000)

    async def check(self) -> Reset | None:
        """Reads the stamps: the reset when this call noticed one, else None. Raises
        StoreUnavailable as any call."""
        keys, redis = self.store.keys, self.store.redis
        dataset, schema = (text(v) if v is not None else None
                           for v in await self.store.call(redis.mget(keys.dataset, keys.schema)))
        if dataset is not None and dataset == self.dataset and schema is not None:
            return None
        known = self.dataset
        self.dataset = await self.stamp(dataset, schema)
        if known is None:
            return None  # the first check: this worker learns the id
        gone = ("its data-set id is gone" if dataset is None else "its schema stamp is gone" if schema is None
                else "its data-set id was replaced (another worker noticed first)")
        groups, topics, brokers = (max(c) for c in zip((0, 0, 0), *self._passes))
        changes = self.changes_lost()
        if not (groups or topics or changes):
            log.info("the store was reset (%s) while it held nothing this worker knew of; stamped anew", gone)
            return None
        now_groups = self._passes[-1][0] if self._passes else 0
        self.last = Reset(int(time.time() * 1000), groups, topics, brokers, gone, changes, groups_now=now_groups)
        self.resets += 1
        log.error("the store (Redis) lost its data (%s): the %d broker groups, %d topics and %d brokers this worker "
                  "knew (at its last scans) and %d change records are gone; brokers re-register by themselves "
                  "(within 30 s); stamped anew", gone, groups, topics, brokers, changes)
        return self.last

    def changes_lost(self) -> int:
        """The change records the store held before the reset, as far as this worker's read
        cache applied them: the record it had reached when the history went backwards, or
        the last one it applied when its poll has not read the wiped store yet."""
        if self.history is None:
            return 0
        rewinds, rewound_from = self.history.rewound
        if rewinds > self._rewinds:
            self._rewinds = rewinds
            return rewound_from
        return self.history.seq

    async def stamp(self, dataset: str | None, schema: str | None) -> str | None:
        """Writes the stamps found missing (SET NX: another worker may have written one since)
        and returns the data-set id there now. Nothing is written when none is missing."""
        keys, redis = self.store.keys, self.store.redis
        if schema is None:
            await self.store.call(redis.set(keys.schema, SCHEMA_VERSION, nx=True))
        if dataset is not None:
            return dataset
        await self.store.stamp_dataset()
        found = await self.store.call(redis.get(keys.dataset))
        return text(found) if found is not None else None

    def recent(self) -> Reset | None:
        """The last reset while it is still an incident."""
        return self.last if self.last is not None and self.last.recent else None
