"""The registry's operations: each change is one Lua script, each read one read script;
and what a registration sends register.lua: the body's digest (register_unchanged.lua
finds an unchanged body by it), the table's fingerprints as one flat JSON argument, the
static topics' mappings. Work on a big table runs in a thread: the event loop keeps
answering route reads meanwhile (``off_loop``)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NoReturn, Sequence, TypeVar

import orjson

from service.javaorder import concurrent_capacity, grown_capacity, java_order
from service.logs import WindowedLog
from service.models import (
    HeartbeatRequest,
    QueryDataVersionRequest,
    RegisterRequest,
    UnregisterRequest,
)
from service.scripts import Answer, Registered, Removed, RemovedBatch, Scripts, text
from service.shared_reads import SharedReads
from service.store import Store

log = logging.getLogger(__name__)

# Topic tables this size and over are worked on in a thread (one event loop turn each
# would hold up route reads by milliseconds).
OFF_LOOP_MIN = 2_000
# How long a thread working on a big table may hold the GIL while the event loop waits for
# it (Python's default is 5 ms; a route read takes the GIL several times on its way).
OFF_LOOP_SWITCH_S = 0.0005

T = TypeVar("T")


def body_weight(nbytes: int) -> int:
    """A request body's size in topic configs, at most (each takes 16 bytes and more, even
    compressed): what ``off_loop`` weighs."""
    return nbytes // 16


async def off_loop(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread when `size` (topic configs) is large, else here. The GIL
    still runs one thread at a time, but is handed back every OFF_LOOP_SWITCH_S (the
    worker's switch interval is set to it), so the loop's reads wait that long instead of
    the whole job."""
    if size >= OFF_LOOP_MIN:
        if sys.getswitchinterval() > OFF_LOOP_SWITCH_S:
            sys.setswitchinterval(OFF_LOOP_SWITCH_S)
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


def body_digest(*parts: bytes) -> str:
    """What finds a registration's body again (register_unchanged.lua): SHA-256 of the
    parts, cut to 128 bits. SHA-256 rather than BLAKE2: CPUs with SHA extensions hash a
    10,000-topic body (1.5 MB) in under half the time."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:32]


def fingerprints(table: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """topic -> "readQueueNums,writeQueueNums,perm,topicSysFlag" of validated configs, as
    lua/_queues.lua's ``fingerprint`` writes them."""
    return {topic: f"{c['readQueueNums']},{c['writeQueueNums']},{c['perm']},{c.get('topicSysFlag', 0)}"
            for topic, c in table.items()}


def flat(fps: Mapping[str, str]) -> list[str]:
    """[topic, fingerprint, ...]: register.lua's topic argument. Filled a column at a time:
    no tuple per topic (10,000 of them set the garbage collector going over the heap)."""
    out: list[str] = [""] * (2 * len(fps))
    out[0::2] = fps.keys()
    out[1::2] = fps.values()
    return out


def mapping_json(info: Mapping[str, Any]) -> bytes:
    """A TopicQueueMappingInfo as a 5.x NameServer answers it to clients of 4.9.4 and later
    (fastjson with MapSortField and quoted keys): fields in name order, ``currIdMap`` by
    logic queue id in numeric order."""
    doc = dict(info)
    ids = doc.get("currIdMap")
    if isinstance(ids, dict):
        try:
            doc["currIdMap"] = {str(k): ids[k] for k in sorted(ids, key=int)}
        except (TypeError, ValueError):
            pass  # not numbers: kept as sent, sorted as names
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def mapping_args(mappings: Mapping[str, Mapping[str, Any]]) -> bytes:
    """register.lua's queue mapping argument: [topic, bname, info JSON, ...]."""
    out: list[str] = []
    for topic, info in mappings.items():
        out += (topic, info["bname"], mapping_json(info).decode())
    return orjson.dumps(out)

# register.lua's statuses of RocketMQ 5.3's refusals ('conflict': the stateVersion rule,
# 'refused': the single-topic rule): nothing else was applied
RULES_5_3 = ("conflict", "refused")

# topics a skipped-topics warning names; the count says how many more there were
SKIPPED_NAMED = 5
# skipped topics a registration's answer lists (skippedTopicCount says how many in all)
SKIPPED_LISTED = 1000


def _broker_data(row: tuple[str, str, dict[str, str], bool, str | None]) -> dict[str, Any]:
    name, cluster, by_id, acting, zone = row
    data: dict[str, Any] = {
        "cluster": cluster,
        "brokerName": name,
        "brokerAddrs": {k: by_id[k] for k in sorted(by_id, key=int)},
    }
    # as route.lua writes BrokerData: only when set (the HTTP contract's documents stay as they were)
    if acting:
        data["enableActingMaster"] = True
    if zone:
        data["zoneName"] = zone
    return data


def _answer(answer: Answer) -> dict[str, Any]:
    return {"masterAddr": answer.master_addr, "haServerAddr": answer.master_ha, "kvTable": answer.kv}


def same_zone(a: str | None, b: str) -> bool:
    """Java's String.equalsIgnoreCase, as ZoneRouteRPCHook compares zone names: character by
    character, equal when equal upper- or lower-cased (no ß to SS)."""
    return a is not None and len(a) == len(b) and all(
        x == y or x.upper() == y.upper() or x.lower() == y.lower() for x, y in zip(a, b))


def in_zone(route: dict[str, Any], zone: str) -> dict[str, Any]:
    """A TopicRouteData document as RocketMQ 5's ZoneRouteRPCHook answers a client in zone
    mode: only the groups registered with `zone` (any case) and the groups without a master
    (no brokerId 0: "master down, consume from slave"), with their QueueData and filter
    servers. No group left is an answer too (no broker), not TOPIC_NOT_EXIST."""
    kept, left_out, gone = [], set(), set()
    for data in route.get("brokerDatas") or []:
        addrs = data.get("brokerAddrs") or {}
        if "0" not in addrs or same_zone(data.get("zoneName"), zone):
            kept.append(data)
        else:
            left_out.add(data["brokerName"])
            gone.update(addrs.values())
    if not left_out:
        return route
    filters = route.get("filterServerTable") or {}
    return {**route, "brokerDatas": kept,
            "queueDatas": [q for q in route.get("queueDatas") or [] if q["brokerName"] not in left_out],
            "filterServerTable": {addr: servers for addr, servers in filters.items() if addr not in gone}}


class RegistrationRefused(Exception):
    """A registration RocketMQ 5.3 refuses (apache/rocketmq#4522): one topic config from a
    brokerId its group does not have yet, as a 5.x broker sends a topic created before its
    full registration reached this NameServer. Nothing was changed."""


class Busy(Exception):
    """A registration refused because this worker already runs as many as it lets run at
    once: nothing was changed; the broker registers again on its next round."""


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
        self.scripts = Scripts(store)
        self.settings = store.settings
        # told each change script's first result (its change record, or the bare version),
        # so this worker's own cache reads its writes at once instead of when the change
        # channel brings the news
        self.on_change = on_change
        self.operations: Counter[str] = Counter()  # applied changes by script (for /metrics)
        self.skipped_topics: Counter[str] = Counter()  # topic configs left out, by reason (for /metrics)
        # registrations past the unchanged path, by how they went: 'staged' (a new group's,
        # in slices, then published) or 'full' (one script) (for /metrics)
        self.register_paths: Counter[str] = Counter()
        self.route_reads: SharedReads[Route] = SharedReads()
        # told the NOTIFY_MIN_BROKER_ID_CHANGE notices of the scripts that change a group's
        # members (lua/_groups.lua note_min_change), when set (RMQ_NOTIFY_MIN_BROKER_ID_CHANGED)
        self.on_notices: Callable[[list[dict[str, Any]]], None] | None = None
        # told when an unregistration removed a broker: a big group's QueueData then wait
        # to be collected (service/removals.py collect)
        self.on_departure: Callable[[], None] | None = None
        self._turns = asyncio.Semaphore(self.REGISTRATIONS_IN_FLIGHT)
        self._running: set[asyncio.Task[dict[str, Any]]] = set()  # registrations under way
        self.busy = 0  # registrations refused as busy (for /metrics)
        # one line per burst of refusals, the rest counted at its end
        self._busy_log = WindowedLog(log, self.BUSY_LOG_S, ("registration refused as busy",
                                                             "registrations refused as busy"), of="on this worker{}")

    def _applied(self, script: str, change: Any, notices: list[dict[str, Any]] | None = None) -> None:
        """A change script ran: counted, its change told to the cache, its notices sent on."""
        self.operations[script] += 1
        if self.on_change is not None:
            self.on_change(change)
        if notices and self.on_notices is not None:
            self.on_notices(notices)

    def _removed(self, script: str, result: Removed) -> bool:
        self._applied(script, result.change, result.notices)
        if result.removed and self.on_departure is not None:
            self.on_departure()
        return result.removed

    # ------------------------------------------------------------------ broker-facing
    async def register_unchanged(self, digest: str, channel: str = "", data_version: str = "") -> dict[str, Any] | None:
        """The answer when ``digest`` is a body an address registered in full and nothing
        changed since (liveness refreshed; ``data_version``, the canonical dataVersion of a
        body digested without it, stored; what RocketMQ sets on the group at every
        registration set from it: its cluster, enableActingMaster and zoneName); None when a
        full registration is needed."""
        result = await self.scripts.register_unchanged(digest, channel, data_version)
        if result.answer is None:
            return None
        self._applied("register_unchanged", result.change)
        return _answer(result.answer)

    # A master whose group is new and that registers this many topics or more is staged
    # (lua/register_stage.lua) in slices of STAGE_SLICE, so that no script runs long.
    # (bench/README.md, section 7b's "longest script" rows: what one slice costs Redis)
    STAGE_MIN = 500
    STAGE_SLICE = 300

    # Registrations past the unchanged fast path whose scripts run at once on this worker:
    # Redis runs them one after another anyway, so more would only queue there, ahead of
    # route reads and removals. One more waits for its turn up to twice RMQ_REDIS_TIMEOUT_MS,
    # then is refused at once (Busy: SYSTEM_BUSY over TCP, 503 with Retry-After over HTTP);
    # a broker registers again on its next round (30 s).
    REGISTRATIONS_IN_FLIGHT = 8
    BUSY_LOG_S = 10.0

    async def register(self, req: RegisterRequest, channel: str = "", digest: str = "") -> dict[str, Any]:
        """``channel``: the remoting connection it came on, whose close may remove it;
        ``digest``: of the request body, so the next identical one takes the fast path.
        Busy when this worker has had no turn free for it within its wait."""
        try:
            await asyncio.wait_for(self._turns.acquire(), 2 * self.settings.redis_timeout_ms / 1000)
        except asyncio.TimeoutError:
            self._refuse_busy(req)
        # once begun, a registration runs to its end whatever becomes of its caller (a
        # connection closed, a worker stopping): a staged one is several scripts, and one
        # cut between them would leave its slices written and never published
        task = asyncio.ensure_future(self._register_in_turn(req, channel, digest))
        self._running.add(task)
        task.add_done_callback(self._registered)
        return await asyncio.shield(task)

    async def _register_in_turn(self, req: RegisterRequest, channel: str, digest: str) -> dict[str, Any]:
        try:
            return await self._register(req, channel, digest)
        finally:
            self._turns.release()

    def _registered(self, task: asyncio.Task[dict[str, Any]]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller gone meanwhile no longer reads it

    async def finish_registrations(self, limit_s: float) -> int:
        """Waits up to `limit_s` for the registrations under way to end (a worker stopping),
        then cancels what is left: how many were cancelled. A staging cut so is hidden from
        readers and removed by its broker's next registration (lua/register_stage.lua)."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=max(0.0, limit_s))
        cut = [t for t in self._running if not t.done()]
        for task in cut:
            task.cancel()
        if cut:
            log.warning("stopping with %d registration(s) unfinished: cancelled (their brokers register again on their "
                        "next round)", len(cut))
            await asyncio.wait(cut)
        return len(cut)

    def _refuse_busy(self, req: RegisterRequest) -> NoReturn:
        self.busy += 1
        self._busy_log.write("", f"registration refused as busy: {self.REGISTRATIONS_IN_FLIGHT} running on this "
                                 f"worker (of {req.brokerAddr}, {req.brokerName!r})")
        raise Busy(f"{self.REGISTRATIONS_IN_FLIGHT} registrations are running on this worker; register again later")

    async def _register(self, req: RegisterRequest, channel: str, digest: str) -> dict[str, Any]:
        wrapper = req.topicConfigSerializeWrapper
        if wrapper.skipped:
            self._report_skipped(req)
        timeout = req.heartbeatTimeoutMillis or self.settings.broker_timeout_ms
        mappings = wrapper.topicQueueMappingInfoMap
        # RocketMQ 5 leaves a broker with static topics out of this rule
        delete_absent = self.settings.delete_topic_with_broker_registration and not mappings
        acting = "" if req.enableActingMaster is None else "1" if req.enableActingMaster else "0"
        common: dict[str, Any] = dict(
            cluster=req.clusterName, addr=req.brokerAddr, name=req.brokerName, broker_id=req.brokerId,
            ha_addr=req.haServerAddr or "", timeout_ms=timeout, data_version=wrapper.dataVersion.canonical(),
            keep_filters=req.filterServerList is None, delete_absent=delete_absent,
            filters=orjson.dumps(req.filterServerList or []), channel=channel, digest=digest, acting=acting,
            zone=req.zoneName or "", mappings=mapping_args(mappings),
            topic_count=len(wrapper.topicConfigTable if wrapper.fingerprints is None else wrapper.fingerprints)
            + len(wrapper.skipped), state_version=wrapper.dataVersion.stateVersion)
        name, master = req.brokerName, req.brokerId == 0
        # a 4.x slave's topics are never stored; a 5.x slave's are when it is its group's
        # prime slave (the script decides: it sees the group's members)
        writer = master or req.enableActingMaster is not None
        table = wrapper.topicConfigTable if writer else {}
        fps = wrapper.fingerprints if writer else {}
        if fps is None:  # a table that went through the full validation (skipped topics)
            fps = await off_loop(len(table), fingerprints, table)
        staging = await self._stage(name, fps) if master and len(fps) >= self.STAGE_MIN else ""
        self.register_paths["staged" if staging else "full"] += 1
        topics = await off_loop(len(fps), lambda: orjson.dumps(flat(fps)))
        result = await self.scripts.register(**common, topics=topics, staging=staging)
        self._applied("register", result.change, result.notices)
        if result.status in RULES_5_3:
            return self._declined(req, result)
        return _answer(result.answer)

    @staticmethod
    def _declined(req: RegisterRequest, result: Registered) -> dict[str, Any]:
        """The answer to a registration one of RocketMQ 5.3's rules turned down."""
        state = req.topicConfigSerializeWrapper.dataVersion.stateVersion
        if result.status == "refused":
            raise RegistrationRefused(f"one topic from brokerId {req.brokerId}, which group {req.brokerName!r} does not "
                                      "have yet: a broker registers its whole topic table first "
                                      "(RocketMQ 5.3, apache/rocketmq#4522)")
        log.warning("registration of %r (%s, brokerId %d, stateVersion %d) ignored and the address removed: another "
                    "address holds brokerId %d, alive with a higher stateVersion (RocketMQ 5.3: a controller made it "
                    "master since)", req.brokerName, req.brokerAddr, req.brokerId, state, req.brokerId)
        return _answer(result.answer)

    async def _stage(self, name: str, fps: dict[str, str]) -> str:
        """Writes the QueueData of a new group's master a slice at a time, where no reader
        sees them (lua/register_stage.lua); the registration then publishes them in one
        short script. The staging's generation, or '' when it gave up (the group is visible
        already, or another registration of it took over the staging): the registration
        then writes them in one script."""
        # the slices as register.lua's flat [topic, fingerprint, ...] lists, made without a
        # tuple per topic (10,000 of them set the garbage collector going over the heap)
        pairs = flat(fps)
        step = 2 * self.STAGE_SLICE
        slices = [orjson.dumps(pairs[i:i + step]) for i in range(0, len(pairs), step)]
        generation = ""
        for _ in range(len(fps) // 1000 + 2):  # an earlier staging's leftovers, 1,000 a call
            staged = await self.scripts.register_stage(name, "", slices[0])
            self._applied("register_stage", staged.change)
            if staged.status == "published":
                return ""
            if staged.status == "staged":
                generation = staged.detail
                break
        if not generation:
            return ""
        for part in slices[1:]:
            staged = await self.scripts.register_stage(name, generation, part)
            self._applied("register_stage", staged.change)
            if staged.status != "staged":
                return ""
        return generation

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
        alive = await self.scripts.heartbeat(req.brokerAddr, req.brokerName, req.brokerId, channel) is not None
        self.operations["heartbeat"] += 1
        return alive

    async def query_data_version(self, req: QueryDataVersionRequest, channel: str = "") -> dict[str, Any]:
        stored = await self.scripts.heartbeat(req.brokerAddr, req.brokerName, req.brokerId, channel) or None
        return {
            "changed": stored != req.dataVersion.canonical(),
            "nameServerDataVersion": orjson.loads(stored) if stored else None,
        }

    async def unregister(self, req: UnregisterRequest) -> None:
        self._removed("unregister", await self.scripts.unregister(req.clusterName, req.brokerAddr, req.brokerName,
                                                                  req.brokerId))

    async def remove_batch(self, budget: int, entries: Sequence[tuple[str, str, str]]) -> RemovedBatch:
        """Departed brokers, (address, channel id or '', cause) each, removed in one script
        while its pair budget lasts (service/removals.py is the one caller)."""
        result = await self.scripts.remove_batch(budget, entries)
        self._applied("remove_batch", result.change, result.notices)
        return result

    async def collect_leaving(self, budget: int) -> int:
        """Removes up to `budget` QueueData that departed groups left (readers skip them
        already); how many such groups are left (service/removals.py calls it)."""
        result = await self.scripts.collect_leaving(budget)
        self._applied("collect_leaving", result.change)
        return result.count

    # ------------------------------------------------------------------ client-facing
    async def route(self, topic: str) -> Route:
        """The topic's route as route.lua reads it; concurrent reads of one topic share a
        call sent after they all began (service/shared_reads.py)."""
        return await self.route_reads.read(topic, lambda: self._route(topic))

    async def _route(self, topic: str) -> Route:
        read = await self.scripts.route(topic, self.settings.order_message_enable, self.settings.support_acting_master)
        return Route(read.version, read.body, read.names)

    async def cluster_info(self) -> tuple[int, dict[str, Any]]:
        """ClusterInfo in the order Java's NameServer encodes it (docs/design.md, "Route
        order"): its ConcurrentHashMaps' bins (brokerAddrTable made with 128, clusterAddrTable
        with 32), a cluster's groups as its HashSet iterates; by name within a bin."""
        read = await self.scripts.cluster_info()
        groups = {d["brokerName"]: d for d in map(_broker_data, read.brokers)}
        clusters = dict(read.clusters)
        return read.version, {
            "brokerAddrTable": {n: groups[n] for n in java_order(sorted(groups), concurrent_capacity(128, len(groups)))},
            "clusterAddrTable": {c: java_order(sorted(clusters[c]), grown_capacity(len(clusters[c])))
                                 for c in java_order(sorted(clusters), concurrent_capacity(32, len(clusters)))},
        }

    # Slice sizes of a topic list (lua/topic_lists.lua): each call stays within a few ms at
    # 100,000 topics on ~10 broker groups each.
    LIST_SLICES = {"all": 20_000, "cluster": 8}
    LIST_SLICE_DEFAULT = 1_000  # the unit lists read each topic's first QueueData

    async def topic_list(self, which: str, cluster: str = "") -> tuple[int, dict[str, Any]]:
        size = self.LIST_SLICES.get(which, self.LIST_SLICE_DEFAULT)
        found: set[str] = set()
        cursor = ""
        version = None
        while True:
            part = await self.scripts.topic_lists(which, cluster, cursor, size)
            version = part.version if version is None else version
            found.update(part.names)
            cursor = part.cursor
            if not cursor:
                break
        body: dict[str, Any] = {"topicList": sorted(found)}
        if which == "system":
            body["brokerAddr"] = part.broker_addr
        return version, body

    # ------------------------------------------------------------------ admin
    async def write_perm(self, broker_name: str, mode: str) -> int:
        result = await self.scripts.write_perm(broker_name, mode == "wipe")
        self._applied("write_perm", result.change)
        return result.count

    async def delete_topic(self, topic: str, cluster: str | None) -> None:
        self._applied("delete_topic", (await self.scripts.delete_topic(topic, cluster or "")).change)

    async def register_topic(self, topic: str, queues: Sequence[tuple[str, int, int, int, int]]) -> None:
        """QueueData for existing broker names (RocketMQ REGISTER_TOPIC_IN_NAMESRV)."""
        self._applied("register_topic", (await self.scripts.register_topic(topic, queues)).change)

    async def kv_put(self, namespace: str, key: str, value: str) -> None:
        self._applied("kv_put", await self.scripts.kv_put(namespace, key, value))

    async def kv_delete(self, namespace: str, key: str) -> None:
        self._applied("kv_delete", await self.scripts.kv_delete(namespace, key))

    async def member_group(self, name: str) -> tuple[str | None, dict[str, str]]:
        """A broker group's cluster (None when the group is unknown) and its brokerId -> address."""
        keys = self.store.keys
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.hget(keys.broker(name), "cluster")
        pipe.hgetall(keys.addrs(name))
        cluster, addrs = await self.store.call(pipe.execute())
        return (text(cluster) if cluster is not None else None), {text(k): text(v) for k, v in addrs.items()}

    async def kv_get(self, namespace: str, key: str) -> str | None:
        raw = await self.store.call(self.store.redis.hget(self.store.keys.kv(namespace), key))
        return text(raw) if raw is not None else None

    async def kv_table(self, namespace: str) -> dict[str, str] | None:
        """None when the namespace was never created; {} when it was emptied."""
        keys = self.store.keys
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.sismember(keys.kv_namespaces, namespace)
        pipe.hgetall(keys.kv(namespace))
        exists, table = await self.store.call(pipe.execute())
        if not exists:
            return None
        return {text(k): text(v) for k, v in table.items()}
