"""This worker's copy of the registry's departures record (``Keys.departures`` and the
returns marked in ``Keys.departures_back``), kept so that a store reset does not erase
the last hour: the record lives in Redis with everything else, and a wipe takes it too.

Each scan pass reads what was added since the last (the entries from the newest one it
holds, so a pass costs what changed, not the hour), trimmed as the store trims it: the
last hour and the last 1,000. The worker that notices a reset writes its copy back
(lua/departures_restore.lua: ZADD of the same entries, so several workers writing back
the same hour leave it once). What left between a worker's last pass and the wipe is
lost with the store.

The copy also tells which brokers came back: the newest departure of each address with no
return marked is handed to lua/departures_back.lua, which marks those registered again
(once, whichever worker's pass finds it first), so the dashboard keeps a broker that left
and came back as such for the hour ("left 22:13, back 22:14").
"""

from __future__ import annotations

import time

import orjson

from service.scripts import Scripts, text
from service.store import Store

WINDOW_MS = 3_600_000  # lua/_members.lua DEPARTURES_MS
RETAIN = 1000  # lua/_members.lua DEPARTURES_RETAIN


class DepartureCopy:
    def __init__(self, store: Store, scripts: Scripts) -> None:
        self.store = store
        self.scripts = scripts
        self.entries: dict[str, int] = {}  # the entry's JSON as the store holds it -> when (ms)
        self.fields: dict[str, tuple[str, str]] = {}  # the entry's JSON -> (its departures-back field, address)
        self.backs: dict[str, int] = {}  # departures-back field -> when the broker came back (ms)

    async def follow(self) -> None:
        """Adds what the store holds since the newest entry this copy has. Raises
        StoreUnavailable as any call."""
        keys, redis = self.store.keys, self.store.redis
        since = max(self.entries.values(), default=int(time.time() * 1000) - WINDOW_MS)
        raw = await self.store.call(redis.zrangebyscore(keys.departures, since, "+inf", withscores=True))
        for raw_entry, at in raw:
            entry = text(raw_entry)
            if entry not in self.entries:
                parsed = orjson.loads(entry)
                self.fields[entry] = (f"{parsed['brokerAddr']}|{int(parsed['at'])}", parsed["brokerAddr"])
            self.entries[entry] = int(at)
        if self.entries:
            self.backs.update({text(f): int(v) for f, v in (await self.store.call(
                redis.hgetall(keys.departures_back))).items()})
        self.trim(int(time.time() * 1000))

    def trim(self, now_ms: int) -> None:
        kept = sorted(((at, e) for e, at in self.entries.items() if at >= now_ms - WINDOW_MS), reverse=True)[:RETAIN]
        self.entries = {e: at for at, e in kept}
        self.fields = {e: self.fields[e] for e in self.entries}
        oldest = min(self.entries.values(), default=now_ms)
        self.backs = {f: v for f, v in self.backs.items() if int(f.rsplit("|", 1)[1]) >= oldest}

    async def mark_returns(self) -> list[str]:
        """Marks the brokers found registered again since they left: the fields marked."""
        newest: dict[str, tuple[int, str]] = {}  # address -> its newest departure (when, field)
        for entry, at in self.entries.items():
            field, addr = self.fields[entry]
            if at >= newest.get(addr, (-1, ""))[0]:
                newest[addr] = (at, field)
        departed = {field: addr for addr, (_, field) in newest.items() if field not in self.backs}
        if not departed:
            return []
        marked = await self.scripts.departures_back(departed)
        now = int(time.time() * 1000)
        self.backs.update({f: now for f in marked})  # the store's time comes with the next read
        return marked

    async def restore(self) -> int:
        """Writes this copy back into the store (after a reset); how many entries it held."""
        if self.entries:
            await self.scripts.departures_restore(self.entries, self.backs)
        return len(self.entries)
