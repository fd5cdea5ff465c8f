"""Noticing that the store lost its data: Redis restarted empty (no persistence), a failover
to an empty replica, a FLUSHALL. Brokers then vanish without expiring, so no expiry-based
alert fires, and an empty registry looks healthy; this makes it an incident.

The sign is the store's stamps: the data-set id (``Keys.dataset``) and the key schema
version (``Keys.schema``), written once (SET NX) when the key space is first used. A
worker remembers the data-set id it found; the expiry scanner tells ``seen`` what each
pass read and asks ``check`` after it (service/scanner.py). When a stamp is gone, or the
data-set id is another one (a worker that noticed first, or one started on the emptied
store, has stamped it anew), the store was reset. If the worker knew of data in it
(broker groups or topics at its last two passes, or change records its read cache
applied: a fleet registered and wiped between two passes), this is one ERROR line saying
what was lost, a count for ``rmq_store_resets_total``, and the reset record written into
the emptied store (lua/store_reset.lua): the first worker creates it, the others add what
they knew. A store that came back empty cannot tell by itself; only a worker that knew
it before can, so a registry whose every worker restarted with its Redis starts afresh.

Every worker reads that record at each pass, a worker started after the reset included,
so the dashboard, ``GET /v1/store``, ``/readyz`` and ``rmq_store_reset_open`` (the alert)
say the same on every worker and end together: when a pass finds the fleet back (as
many broker groups as were lost, lua/store_reset_seen.lua), or an hour after the reset
(``SHOWN_S``, the record's lifetime). The worker that noticed also writes back its copy of
the departures record (service/departure_copy.py), which the wipe erased with the rest.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Protocol

from service.departure_copy import DepartureCopy
from service.keys import SCHEMA_VERSION
from service.scripts import Scripts, text
from service.store import Store, StoreUnavailable

log = logging.getLogger(__name__)

# how long a reset stays on the first screen and in /readyz when the fleet never comes back
# (the lifetime of its record in the store)
SHOWN_S = 3600.0


@dataclass
class Reset:
    """A reset as the store's record holds it (times in ms since the epoch, Redis time)."""

    at: int
    groups: int  # broker groups the workers that noticed knew at their last pass before the reset
    topics: int
    brokers: int
    gone: str  # which stamp told, in words
    changes: int = 0  # change records the noticing workers' read caches had applied from the store
    groups_now: int = 0  # broker groups at the last pass since
    back_at: int | None = None  # when the groups were back to as many as were lost
    dataset: str = ""  # the data-set id stamped after it

    @classmethod
    def of_record(cls, fields: dict[str, str]) -> Reset:
        def n(name: str) -> int:
            return int(fields.get(name) or 0)
        back = fields.get("backAt")
        return cls(n("at"), n("lostGroups"), n("lostTopics"), n("lostBrokers"), fields.get("gone", ""),
                   n("lostChanges"), n("groupsNow"), int(back) if back else None, fields.get("dataset", ""))

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
        self.scripts = Scripts(store)
        self.history = history
        self.departures = DepartureCopy(store, self.scripts)
        self._rewinds = 0  # the history's rewinds already told
        self.dataset: str | None = None  # the data-set id this worker found; None until the first check
        self.resets = 0  # resets this worker noticed (rmq_store_resets_total)
        self.last: Reset | None = None  # the last reset record read from the store (kept while Redis is away)
        # what the last two passes saw: a pass that read the tables just after the reset saw
        # them empty, the one before did not
        self._passes: list[Counts] = []

    def seen(self, groups: int, topics: int, brokers: int) -> None:
        """What a pass saw (read by the next check)."""
        self._passes = [*self._passes[-1:], (groups, topics, brokers)]

    async def check(self) -> Reset | None:
        """Reads the stamps, then the reset record, then the departures added since (marking
        the brokers that came back): the reset when this call noticed one, else None.
        Raises StoreUnavailable as any call (not for the departures: bookkeeping)."""
        noticed = await self.notice()
        await self.read_record()
        try:
            await self.departures.follow()
            await self.departures.mark_returns()
        except StoreUnavailable as exc:  # bookkeeping: the pass's expiries must not wait on it
            log.debug("the departures record was not followed this pass: %s", exc)  # the store logs refusals
        return self.last if noticed else None

    async def notice(self) -> bool:
        """Whether the stamps tell a reset of a store this worker knew data in (recorded)."""
        keys, redis = self.store.keys, self.store.redis
        dataset, schema = (text(v) if v is not None else None
                           for v in await self.store.call(redis.mget(keys.dataset, keys.schema)))
        if dataset is not None and dataset == self.dataset and schema is not None:
            return False
        known = self.dataset
        gone = ("its data-set id is gone" if dataset is None else "its schema stamp is gone" if schema is None
                else "its data-set id was replaced (a worker stamped the emptied store first)")
        groups, topics, brokers = (max(c) for c in zip((0, 0, 0), *self._passes))
        changes = self.changes_lost() if known is not None else 0
        if known is None or not (groups or topics or changes):
            self.dataset = await self.stamp(dataset, schema)
            if known is not None:
                log.info("the store was reset (%s) while it held nothing this worker knew of; stamped anew", gone)
            return False  # else the first check: this worker learns the id
        self.dataset, created = await self.scripts.store_reset(
            secrets.token_hex(16), SCHEMA_VERSION, (groups, topics, brokers, changes), gone, int(SHOWN_S * 1000))
        self.resets += 1
        log.error("the store (Redis) lost its data (%s): the %d broker groups, %d topics and %d brokers this worker "
                  "knew (at its last scans) and %d change records are gone; brokers re-register by themselves "
                  "(within 30 s); %s", gone, groups, topics, brokers, changes,
                  "stamped anew and recorded for every worker" if created else "recorded with the other workers'")
        restored = await self.departures.restore()
        if restored:
            log.warning("wrote back the %d departures of the last hour this worker had read before the reset", restored)
        return True

    async def read_record(self) -> None:
        """The reset record of the data set this worker knows; while it is open, this pass's
        broker groups go into it, and the fleet is back once they are as many as were lost
        (at least one, when no scan had counted them)."""
        if self.dataset is None:
            return
        was = self.last
        groups = self._passes[-1][0] if self._passes else 0
        if was is not None and was.dataset == self.dataset and was.recent:
            fields = await self.scripts.store_reset_seen(self.dataset, groups)
        else:
            keys, redis = self.store.keys, self.store.redis
            fields = {text(k): text(v) for k, v in (await self.store.call(redis.hgetall(keys.store_reset))).items()}
        if not fields or fields.get("dataset") != self.dataset:
            return  # none, or expired: a worker keeps the last one it read
        self.last = reset = Reset.of_record(fields)
        if was is not None and was.at == reset.at and was.back_at is None and reset.back_at is not None:
            log.warning("the fleet is back after the store reset: %d broker groups registered (%d were lost), "
                        "%.0f s after it", reset.groups_now, reset.groups, (reset.back_at - reset.at) / 1000)

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
