"""The typed boundary to the scripts in lua/: one method per script, its arguments by name,
its result as a named tuple. The only Python that knows a script's ARGV order and the
order of what it returns (each script's header comment says the same; the two change
together). Callers never name a script or build an argument list.

Every change script answers one shape (lua/_changes.lua ``finish``): its change record (or
the bare version when nothing visible changed) first, then its own values; ``change`` in
the results that hand it on, for the caller's cache.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import orjson

from service.store import Store


def text(value: bytes | str) -> str:
    """A reply as a str (the store's client answers bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _notices(raw: Any) -> list[dict[str, Any]]:
    """NOTIFY_MIN_BROKER_ID_CHANGE notices (lua/_groups.lua ``note_min_change``): JSON, '' for none."""
    return orjson.loads(raw) if raw else []


class Answer(NamedTuple):
    """What a registration's answer carries (lua/_members.lua ``registration_answer``)."""

    master_addr: str | None  # a slave's live master
    master_ha: str | None
    kv: dict[str, str]  # the ORDER_TOPIC_CONFIG namespace


def _answer(master_found: Any, master_addr: Any, master_ha: Any, kv: Sequence[Any]) -> Answer:
    found = bool(int(master_found))
    return Answer(text(master_addr) if found else None, (text(master_ha) or None) if found else None, _pairs(kv))


class Registered(NamedTuple):
    change: Any
    changed: bool  # a visible change
    answer: Answer
    # 'ok', or RocketMQ 5.3's refusals: 'conflict' (another address holds the id with a
    # higher stateVersion: this one was removed) and 'refused' (one topic from an id the
    # group lacks: nothing applied)
    status: str
    notices: list[dict[str, Any]]


class Refreshed(NamedTuple):
    change: Any  # a group's cluster, enableActingMaster or zoneName set again: its record
    answer: Answer | None  # None: the body must be registered in full


class Staged(NamedTuple):
    change: Any
    status: str  # 'staged', 'published', 'cleaning' or 'stale' (lua/register_stage.lua)
    detail: str  # 'staged': the generation; 'cleaning': how many leftovers remain; else ''


class Removed(NamedTuple):
    change: Any
    removed: bool
    notices: list[dict[str, Any]]


class RemovedBatch(NamedTuple):
    change: Any
    statuses: list[str]  # per entry: 'removed', 'not due', 'not owned', 'gone', or '' (not reached)
    # per entry: a removed one's (cluster, brokerName, brokerId) as its identity row held
    # them, else None
    members: list[tuple[str, str, str] | None]
    notices: list[dict[str, Any]]


class Counted(NamedTuple):
    change: Any
    count: int


class RouteRead(NamedTuple):
    version: int
    body: bytes | None  # docs/api.md's JSON; None: TOPIC_NOT_EXIST
    names: list[str]  # the broker groups it names


class ClusterRead(NamedTuple):
    version: int
    clusters: list[tuple[str, list[str]]]  # cluster -> its broker names
    brokers: list[tuple[str, str, dict[str, str], bool, str | None]]  # name, cluster, id -> addr, acting, zone


class TopicSlice(NamedTuple):
    version: int
    names: list[str]
    broker_addr: str | None  # the 'system' list's
    cursor: str  # '' when the list is done


class Scripts:
    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ broker-facing
    async def register(self, *, cluster: str, addr: str, name: str, broker_id: int, ha_addr: str, timeout_ms: int,
                       data_version: str, keep_filters: bool, delete_absent: bool, topics: bytes, filters: bytes,
                       channel: str, digest: str, acting: str, zone: str, mappings: bytes,
                       topic_count: int, state_version: int, staging: str = "") -> Registered:
        """lua/register.lua. `topics`: the JSON [topic, fingerprint, ...] of the body's
        table; `acting` '1'/'0'/'' (no header: a broker before 5.0); `topic_count`: the
        topic configs the body holds; `state_version`: its dataVersion's; `staging`: the
        generation of the staging the caller wrote of `topics` ('' none)."""
        r = await self.store.run("register", [
            cluster, addr, name, broker_id, ha_addr, timeout_ms, data_version, "keep" if keep_filters else "set",
            "1" if delete_absent else "0", topics, filters, channel, digest, acting, zone, mappings, staging,
            topic_count, state_version])
        return Registered(r[0], bool(int(r[1])), _answer(*r[2:6]), text(r[6]), _notices(r[7]))

    async def register_stage(self, name: str, generation: str, topics: bytes) -> Staged:
        """lua/register_stage.lua: one slice of a new group's first registration."""
        r = await self.store.run("register_stage", [name, generation, topics])
        return Staged(r[0], text(r[1]), str(text(r[2])) if len(r) > 2 else "")  # 'cleaning' counts as an integer

    async def register_unchanged(self, digest: str, channel: str, data_version: str = "") -> Refreshed:
        """lua/register_unchanged.lua: the answer when the body of `digest` is one its
        address registered in full (liveness refreshed; `data_version`, when given, stored;
        the group's cluster, enableActingMaster and zoneName set from it), else None."""
        r = await self.store.run("register_unchanged", [digest, channel, data_version])
        return Refreshed(r[0], _answer(*r[2:6]) if int(r[1]) else None)

    async def heartbeat(self, addr: str, name: str, broker_id: int, channel: str) -> str | None:
        """lua/heartbeat.lua: the stored dataVersion ('' when none) when the broker is
        registered and alive (its liveness refreshed), else None."""
        r = await self.store.run("heartbeat", [addr, name, broker_id, channel])
        return (text(r[2]) if len(r) > 2 and r[2] else "") if int(r[1]) else None

    async def unregister(self, cluster: str, addr: str, name: str, broker_id: int) -> Removed:
        r = await self.store.run("unregister", [cluster, addr, name, broker_id])
        return Removed(r[0], bool(int(r[1])), _notices(r[2] if len(r) > 2 else ""))

    async def remove_batch(self, budget: int, entries: Sequence[tuple[str, str, str]]) -> RemovedBatch:
        """lua/remove_batch.lua: `entries` (brokerAddr, channel id or '', cause), removed
        while the script's pair `budget` lasts; a status per entry, '' when not reached."""
        args: list[str | int] = [budget]
        for entry in entries:
            args += entry
        r = await self.store.run("remove_batch", args)
        members = [(text(m[0]), text(m[1]), text(m[2])) if m else None for m in r[2]]
        return RemovedBatch(r[0], [text(s) for s in r[1]], members, _notices(r[3]))

    async def collect_leaving(self, budget: int) -> Counted:
        """lua/collect_leaving.lua: up to `budget` QueueData of groups whose last member
        left removed; how many groups are still leaving."""
        r = await self.store.run("collect_leaving", [budget])
        return Counted(r[0], int(r[1]))

    # ------------------------------------------------------------------ admin
    async def write_perm(self, name: str, wipe: bool) -> Counted:
        r = await self.store.run("write_perm", [name, "wipe" if wipe else "add"])
        return Counted(r[0], int(r[1]))

    async def delete_topic(self, topic: str, cluster: str) -> Counted:
        r = await self.store.run("delete_topic", [topic, cluster])
        return Counted(r[0], int(r[1]))

    async def register_topic(self, topic: str, queues: Sequence[tuple[str, int, int, int, int]]) -> Counted:
        """Count 1 when applied, 0 when a broker name has no visible BrokerData."""
        args: list[str | int] = [topic, len(queues)]
        for queue in queues:
            args += list(queue)
        r = await self.store.run("register_topic", args)
        return Counted(r[0], int(r[1]))

    async def kv_put(self, namespace: str, key: str, value: str) -> Any:
        return (await self.store.run("kv_put", [namespace, key, value]))[0]

    async def kv_delete(self, namespace: str, key: str) -> Any:
        return (await self.store.run("kv_delete", [namespace, key]))[0]

    # ------------------------------------------------------------------ reads
    async def route(self, topic: str, with_order: bool, support_acting: bool) -> RouteRead:
        version, body, names = await self.store.run("route", [topic, "1" if with_order else "0",
                                                              "1" if support_acting else "0"])
        return RouteRead(int(version), bytes(body) if body else None, [text(n) for n in names])

    async def cluster_info(self) -> ClusterRead:
        version, clusters, brokers = await self.store.run("cluster_info", [])
        return ClusterRead(int(version), [(text(c), [text(n) for n in names]) for c, names in clusters],
                           [(text(name), text(cluster), _pairs(addrs), text(acting) == "1", text(zone) or None)
                            for name, cluster, addrs, acting, zone in brokers])

    async def topic_lists(self, which: str, cluster: str, cursor: str, size: int) -> TopicSlice:
        version, names, broker_addr, next_cursor = await self.store.run("topic_lists", [which, cluster, cursor, size])
        return TopicSlice(int(version), [text(n) for n in names], text(broker_addr) or None if broker_addr else None,
                          text(next_cursor) if next_cursor else "")

    async def live_brokers(self, cursor: str, limit: int) -> list[Any]:
        """lua/live_brokers.lua's {version, now, rows, next group} as it returns them (its
        rows are read by service/http/ui.py, the one caller)."""
        return list(await self.store.run("live_brokers", [cursor, limit]))

    async def topic_summary(self, cursor: str, limit: int, prefix: str, order_only: bool) -> list[Any]:
        """lua/topic_summary.lua's {version, topics, next cursor, total, order topics}."""
        return list(await self.store.run("topic_summary", [cursor, limit, prefix, "1" if order_only else "0"]))

    async def departures(self) -> list[dict[str, Any]]:
        """lua/departures.lua: the brokers that left in the last hour, newest first, each
        {brokerAddr, brokerName, cluster, brokerId, cause, at, backAt} (docs/api.md)."""
        raw, backs = await self.store.run("departures", [])
        entries = [orjson.loads(e) for e in raw]
        return [{"brokerAddr": e["brokerAddr"], "brokerName": e["brokerName"], "cluster": e["cluster"],
                 "brokerId": e.get("brokerId"), "cause": e["cause"], "at": int(e["at"]),
                 "backAt": int(back) if back else None} for e, back in zip(entries, backs)]

    async def departures_back(self, departed: dict[str, str]) -> list[str]:
        """lua/departures_back.lua: marks the departures (field -> address) whose address is
        registered again; the fields it marked."""
        args = [v for field, addr in departed.items() for v in (field, addr)]
        return [text(f) for f in (await self.store.run("departures_back", args))[1]]

    async def departures_restore(self, entries: dict[str, int], backs: dict[str, int]) -> int:
        """lua/departures_restore.lua: a worker's copy of the record written back after a
        store reset (service/departure_copy.py); the entries the record holds now."""
        args: list[str | int] = [len(entries)]
        for entry, at in entries.items():
            args += [at, entry]
        for field, back in backs.items():
            args += [field, back]
        return int((await self.store.run("departures_restore", args))[1])

    async def store_reset(self, fresh_id: str, schema: int, lost: tuple[int, int, int, int], gone: str,
                          lifetime_ms: int) -> tuple[str, bool]:
        """lua/store_reset.lua: records a reset this worker noticed (`lost`: the groups,
        topics, brokers and change records it knew), stamping the store anew when a stamp
        is missing; (the data-set id now, whether this call created the record)."""
        _, dataset, created = await self.store.run("store_reset", [fresh_id, schema, *lost, gone, lifetime_ms])
        return text(dataset), bool(int(created))

    async def store_reset_seen(self, dataset: str, groups: int) -> dict[str, str]:
        """lua/store_reset_seen.lua: the groups a pass saw while the reset of `dataset` is
        open (marking the fleet back); the record's fields ({} when there is none)."""
        flat = (await self.store.run("store_reset_seen", [dataset, groups]))[1]
        return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def changes_since(self, since: int) -> tuple[int, list[bytes] | None]:
        """The version and the change records after `since` (None: not replayable)."""
        version, records = await self.store.run("changes_since", [since])
        return int(version), records

    # ------------------------------------------------------------------ upkeep at start
    async def topic_index_sync(self) -> int:
        return int((await self.store.run("topic_index_sync", []))[1])

    async def masterless_sync(self) -> int:
        return int((await self.store.run("masterless_sync", []))[1])
