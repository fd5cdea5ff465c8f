"""The registry's operations: each change is one Lua script, each read one read script."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import orjson

from service.models import (
    HeartbeatRequest,
    QueryDataVersionRequest,
    RegisterRequest,
    UnregisterRequest,
)
from service import registration
from service.shared_reads import SharedReads
from service.store import Store

log = logging.getLogger(__name__)

# topics a skipped-topics warning names; the count says how many more there were
SKIPPED_NAMED = 5
# skipped topics a registration's answer lists (skippedTopicCount says how many in all)
SKIPPED_LISTED = 1000


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {_s(flat[i]): _s(flat[i + 1]) for i in range(0, len(flat), 2)}


def _broker_data(row: list[Any]) -> dict[str, Any]:
    name, cluster, addrs, acting, zone = row
    by_id = _pairs(addrs)
    data: dict[str, Any] = {
        "cluster": _s(cluster),
        "brokerName": _s(name),
        "brokerAddrs": {k: by_id[k] for k in sorted(by_id, key=int)},
    }
    # as route.lua writes BrokerData: only when set (the HTTP contract's documents stay as they were)
    if acting and _s(acting) == "1":
        data["enableActingMaster"] = True
    if zone:
        data["zoneName"] = _s(zone)
    return data


# where a script that changes a group's members returns its notices (JSON, '' for none)
NOTICES_AT = {"register": 9, "unregister": 2, "channel_closed": 2, "destroy": 2}


@dataclass(frozen=True)
class Route:
    """A topic's route as one version of the tables saw it, encoded by route.lua."""

    version: int
    body: bytes | None  # docs/api.md's JSON; None: TOPIC_NOT_EXIST
    groups: list[str]  # the broker groups it names: a change to any of them may change it

    @property
    def data(self) -> dict[str, Any] | None:
        return None if self.body is None else orjson.loads(self.body)


class Registry:
    def __init__(self, store: Store, on_change: Callable[[Any], None] | None = None) -> None:
        self.store = store
        self.settings = store.settings
        # told each change script's first result (its change record, or the bare version),
        # so this worker's own cache reads its writes at once instead of when the change
        # channel brings the news
        self.on_change = on_change
        self.operations: Counter[str] = Counter()  # applied changes by script (for /metrics)
        self.skipped_topics: Counter[str] = Counter()  # topic configs left out, by reason (for /metrics)
        self.copies = registration.Copies()  # big groups' stored fingerprints, to send only what differs
        # registrations by how they went: 'diff' (only what differs from a copy), 'stale' (a
        # copy found out of date), 'staged' (a new group's, in slices), 'full' (for /metrics)
        self.register_paths: Counter[str] = Counter()
        self.route_reads: SharedReads[Route] = SharedReads()
        # told the NOTIFY_MIN_BROKER_ID_CHANGE notices of the scripts that change a group's
        # members (lua/_lib.lua note_min_change), when set (RMQ_NOTIFY_MIN_BROKER_ID_CHANGED)
        self.on_notices: Callable[[list[dict[str, Any]]], None] | None = None

    async def _change(self, script: str, args: Sequence[str | int | bytes]) -> list[Any]:
        result = await self.store.run(script, args)
        self.operations[script] += 1
        if self.on_change is not None:
            self.on_change(result[0])
        at = NOTICES_AT.get(script)
        if at is not None and len(result) > at and result[at] and self.on_notices is not None:
            self.on_notices(orjson.loads(result[at]))
        return result

    # ------------------------------------------------------------------ broker-facing
    async def register_unchanged(self, digest: str, channel: str = "") -> dict[str, Any] | None:
        """The answer when ``digest`` is the body an address last registered in full and
        nothing changed since (liveness refreshed); None when a full registration is needed."""
        result = await self.store.run("register_unchanged", [digest, channel])
        if not int(result[0]):
            return None
        self.operations["register_unchanged"] += 1
        return self._answer(*result[1:])

    @staticmethod
    def _answer(master_found: Any, master_addr: Any, master_ha: Any, kv: list[Any]) -> dict[str, Any]:
        found = bool(int(master_found))
        return {
            "masterAddr": _s(master_addr) if found else None,
            "haServerAddr": (_s(master_ha) or None) if found else None,
            "kvTable": _pairs(kv),
        }

    # A master whose group is new and that registers this many topics or more is staged
    # (lua/register_stage.lua) in slices of STAGE_SLICE, so that no script runs long.
    # (bench/README.md, section 7b's "longest script" rows: what one slice costs Redis)
    STAGE_MIN = 500
    STAGE_SLICE = 300

    async def register(self, req: RegisterRequest, channel: str = "", digest: str = "") -> dict[str, Any]:
        """``channel``: the remoting connection it came on, whose close may remove it;
        ``digest``: of the request body, so the next identical one takes the fast path."""
        wrapper = req.topicConfigSerializeWrapper
        if wrapper.skipped:
            self._report_skipped(req)
        timeout = req.heartbeatTimeoutMillis or self.settings.broker_timeout_ms
        mappings = wrapper.topicQueueMappingInfoMap
        # RocketMQ 5 leaves a broker with static topics out of this rule
        delete_absent = self.settings.delete_topic_with_broker_registration and not mappings
        head: list[str | int | bytes] = [
            req.clusterName, req.brokerAddr, req.brokerName, req.brokerId,
            req.haServerAddr or "", timeout, wrapper.dataVersion.canonical(),
            "keep" if req.filterServerList is None else "set", "1" if delete_absent else "0",
        ]
        tail = [orjson.dumps(req.filterServerList or []), channel, digest]
        acting = "" if req.enableActingMaster is None else "1" if req.enableActingMaster else "0"
        extra = [acting, req.zoneName or "", registration.mapping_args(mappings)]
        name, master = req.brokerName, req.brokerId == 0
        # a 4.x slave's topics are never stored; a 5.x slave's are when it is its group's
        # prime slave (the script decides: it sees the group's members)
        writer = master or req.enableActingMaster is not None
        table = wrapper.topicConfigTable if writer else {}
        fps = wrapper.fingerprints if writer else {}
        if fps is None:  # a table that went through the full validation (skipped topics)
            fps = await registration.off_loop(len(table), registration.fingerprints, table)
        size = len(fps)
        copy = self.copies.get(name) if master else None
        for _ in range(2):  # a copy found out of date, then perhaps a staging
            if copy is None and master and size >= self.STAGE_MIN:
                copy = await self._stage(name, fps)
            if copy is None:
                break
            generation, held = copy
            plan = await registration.off_loop(size, registration.plan, held, fps, delete_absent)
            args = head + [orjson.dumps(registration.flat(plan.changed)), *tail, "diff", generation,
                           orjson.dumps(plan.absent), *extra]
            result = await self._change("register", args)
            if _s(result[6]) == "ok":
                fresh = plan.if_rewritten if int(result[8]) else plan.if_not
                self.copies.put(name, _s(result[7]), fresh)
                self.register_paths["diff"] += 1
                return self._answer(*result[2:6])
            self.register_paths["stale"] += 1
            self.copies.drop(name)  # out of date: the whole table goes
            copy = None
        flat = await registration.off_loop(size, lambda: orjson.dumps(registration.flat(fps)))
        result = await self._change("register", head + [flat, *tail, "full", "", b"[]", *extra])
        if master:
            self.copies.put(name, _s(result[7]), fps)
        self.register_paths["full"] += 1
        return self._answer(*result[2:6])

    async def _stage(self, name: str, fps: dict[str, str]) -> tuple[str, dict[str, str]] | None:
        """Writes the QueueData of a new group's master a slice at a time, where no reader
        sees them (lua/register_stage.lua); the registration then publishes them in one
        short script. None when the group is visible already or another registration of it
        took over the staging: the registration then goes in one script."""
        # the slices as register.lua's flat [topic, fingerprint, ...] lists, made without a
        # tuple per topic (10,000 of them set the garbage collector going over the heap)
        flat = registration.flat(fps)
        step = 2 * self.STAGE_SLICE
        slices = [orjson.dumps(flat[i:i + step]) for i in range(0, len(flat), step)]
        generation = ""
        for _ in range(len(fps) // 1000 + 2):  # an earlier staging's leftovers, 1,000 a call
            result = await self._change("register_stage", [name, "", slices[0]])
            status = _s(result[1])
            if status == "published":
                return None
            if status == "staged":
                generation = _s(result[2])
                break
        if not generation:
            return None
        for part in slices[1:]:
            result = await self._change("register_stage", [name, generation, part])
            if _s(result[1]) != "staged":
                return None
        self.register_paths["staged"] += 1
        return generation, fps

    def _report_skipped(self, req: RegisterRequest) -> None:
        """One warning per registration, however many topics it skipped, and the counter."""
        skipped = req.topicConfigSerializeWrapper.skipped
        for s in skipped:
            self.skipped_topics[s.reason] += 1
        # a name may be 255 characters of anything: quoted, and cut for the log line
        named = "; ".join(f"{s.topic[:80]!r}: {s.message}" for s in skipped[:SKIPPED_NAMED])
        more = f" (+{len(skipped) - SKIPPED_NAMED} more)" if len(skipped) > SKIPPED_NAMED else ""
        log.warning("registration of %r (%s) skipped %d topic config(s) the registry cannot store: %s%s",
                    req.brokerName, req.brokerAddr, len(skipped), named, more)

    @staticmethod
    def skipped_answer(req: RegisterRequest) -> dict[str, Any]:
        """The fields telling a registration's caller which of its topics were left out (and
        so have no route): ``skippedTopics`` (at most SKIPPED_LISTED) and
        ``skippedTopicCount``; nothing when none was."""
        skipped = req.topicConfigSerializeWrapper.skipped
        if not skipped:
            return {}
        return {"skippedTopics": [{"topic": s.topic, "reason": s.reason, "message": s.message}
                                  for s in skipped[:SKIPPED_LISTED]],
                "skippedTopicCount": len(skipped)}

    async def heartbeat(self, req: HeartbeatRequest, channel: str = "") -> bool:
        """True when the broker is registered and alive (its liveness is then refreshed)."""
        result = await self.store.run("heartbeat", [req.brokerAddr, req.brokerName, req.brokerId, channel])
        self.operations["heartbeat"] += 1
        return bool(int(result[0]))

    async def query_data_version(self, req: QueryDataVersionRequest, channel: str = "") -> dict[str, Any]:
        result = await self.store.run("heartbeat", [req.brokerAddr, req.brokerName, req.brokerId, channel])
        stored = _s(result[1]) if int(result[0]) and result[1] else None
        return {
            "changed": stored != req.dataVersion.canonical(),
            "nameServerDataVersion": orjson.loads(stored) if stored else None,
        }

    async def unregister(self, req: UnregisterRequest) -> None:
        await self._change("unregister", [req.clusterName, req.brokerAddr, req.brokerName, req.brokerId])

    async def channel_closed(self, addr: str, channel: str) -> bool:
        """A remoting connection closed; True when the broker it still owned was removed."""
        result = await self._change("channel_closed", [addr, channel])
        return bool(int(result[1]))

    async def destroy(self, addr: str) -> bool:
        """Expiry of one address; True when it was due and removed."""
        result = await self._change("destroy", [addr])
        return bool(int(result[1]))

    # ------------------------------------------------------------------ client-facing
    async def route(self, topic: str) -> Route:
        """The topic's route as route.lua reads it; concurrent reads of one topic share a
        call sent after they all began (service/shared_reads.py)."""
        return await self.route_reads.read(topic, lambda: self._route(topic))

    async def _route(self, topic: str) -> Route:
        order = "1" if self.settings.order_message_enable else "0"
        acting = "1" if self.settings.support_acting_master else "0"
        version, body, names = await self.store.run("route", [topic, order, acting])
        return Route(int(version), bytes(body) if body else None, [_s(n) for n in names])

    async def cluster_info(self) -> tuple[int, dict[str, Any]]:
        version, clusters, brokers = await self.store.run("cluster_info", [])
        return int(version), {
            "brokerAddrTable": {d["brokerName"]: d for d in sorted(map(_broker_data, brokers), key=lambda d: d["brokerName"])},
            "clusterAddrTable": {_s(c): sorted(_s(n) for n in names) for c, names in sorted(clusters)},
        }

    # Slice sizes of a topic list (lua/topic_lists.lua): each call stays within a few ms at
    # 100,000 topics on ~10 broker groups each.
    LIST_SLICES = {"all": 20_000, "cluster": 8}
    LIST_SLICE_DEFAULT = 1_000  # the unit lists read each topic's first QueueData

    async def topic_list(self, which: str, cluster: str = "") -> tuple[int, dict[str, Any]]:
        size = self.LIST_SLICES.get(which, self.LIST_SLICE_DEFAULT)
        found: set[str] = set()
        cursor: Any = ""
        version = None
        while True:
            slice_version, names, broker_addr, cursor = await self.store.run("topic_lists", [which, cluster, cursor, size])
            version = slice_version if version is None else version
            found.update(_s(n) for n in names)
            if not cursor:
                break
            cursor = _s(cursor)
        body: dict[str, Any] = {"topicList": sorted(found)}
        if which == "system":
            body["brokerAddr"] = _s(broker_addr) or None
        return int(version), body

    # ------------------------------------------------------------------ admin
    async def write_perm(self, broker_name: str, mode: str) -> int:
        result = await self._change("write_perm", [broker_name, mode])
        return int(result[1])

    async def delete_topic(self, topic: str, cluster: str | None) -> None:
        await self._change("delete_topic", [topic, cluster or ""])

    async def register_topic(self, topic: str, queues: Sequence[tuple[str, int, int, int, int]]) -> None:
        """QueueData for existing broker names (RocketMQ REGISTER_TOPIC_IN_NAMESRV)."""
        args: list[str | int] = [topic, len(queues)]
        for queue in queues:
            args += list(queue)
        await self._change("register_topic", args)

    async def kv_put(self, namespace: str, key: str, value: str) -> None:
        await self._change("kv_put", [namespace, key, value])

    async def kv_delete(self, namespace: str, key: str) -> None:
        await self._change("kv_delete", [namespace, key])

    async def member_group(self, name: str) -> tuple[str | None, dict[str, str]]:
        """A broker group's cluster (None when the group is unknown) and its brokerId -> address."""
        keys = self.store.keys
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.hget(keys.broker(name), "cluster")
        pipe.hgetall(keys.addrs(name))
        cluster, addrs = await self.store.call(pipe.execute())
        return (_s(cluster) if cluster is not None else None), {_s(k): _s(v) for k, v in addrs.items()}

    async def kv_get(self, namespace: str, key: str) -> str | None:
        raw = await self.store.call(self.store.redis.hget(self.store.keys.kv(namespace), key))
        return _s(raw) if raw is not None else None

    async def kv_table(self, namespace: str) -> dict[str, str] | None:
        """None when the namespace was never created; {} when it was emptied."""
        keys = self.store.keys
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.sismember(keys.kv_namespaces, namespace)
        pipe.hgetall(keys.kv(namespace))
        exists, table = await self.store.call(pipe.execute())
        if not exists:
            return None
        return {_s(k): _s(v) for k, v in table.items()}
