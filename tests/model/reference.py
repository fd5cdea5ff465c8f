"""A reference model of RocketMQ 5.3.3's NameServer tables (RouteInfoManager) and its
KVConfigManager, written from what Java's NameServer does, with a clock the test moves.

Plain Python, kept apart from the registry's code and its Lua scripts: the model test
(tests/model/test_model.py) drives the registry and this model with the same operations
and compares what each read answers. Maps iterate as Java's do (tests/model/java_order.py),
so each read's order is Java's; the test decides whether order is compared.

What it leaves out, because the model test never sends it: stateVersion conflicts (every
dataVersion it sends has stateVersion 0), static topics' queue mappings, REGISTER_TOPIC,
the min-brokerId notices, `deleteTopicWithBrokerRegistration` and `supportActingMaster`
(both off, as the registry's defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.model.java_order import JavaMap, java_set_order

MASTER_ID = 0
PERM_WRITE = 2
PERM_READ = 4
DEFAULT_TIMEOUT_MS = 120_000
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class Clock:
    """Milliseconds; moves only when the test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass(frozen=True)
class TopicConfig:
    name: str
    read: int = 4
    write: int = 4
    perm: int = 6
    sys_flag: int = 0


@dataclass
class QueueData:
    broker_name: str
    read: int
    write: int
    perm: int
    sys_flag: int

    def doc(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "readQueueNums": self.read, "writeQueueNums": self.write,
                "perm": self.perm, "topicSysFlag": self.sys_flag}


@dataclass
class BrokerData:
    cluster: str
    name: str
    addrs: JavaMap[int, str] = field(default_factory=JavaMap)
    acting_master: bool = False
    zone: str | None = None

    def doc(self, addrs: list[tuple[int, str]] | None = None) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.name,
                "brokerAddrs": {str(i): a for i, a in (addrs if addrs is not None else self.addrs.items())},
                "enableActingMaster": self.acting_master, "zoneName": self.zone}


@dataclass
class LiveInfo:
    last_update_ms: int
    timeout_ms: int
    data_version: tuple[int, int, int]  # (timestamp, counter, stateVersion): DataVersion.equals
    channel: object | None
    ha_addr: str | None


@dataclass(frozen=True)
class Registration:
    """What one REGISTER_BROKER carries (its header and body), as the model takes it."""
    cluster: str
    addr: str
    name: str
    broker_id: int
    ha_addr: str | None
    topics: tuple[TopicConfig, ...]
    data_version: tuple[int, int, int]
    # None: a 4.x broker (its header has no enableActingMaster)
    acting_master: bool | None = None
    zone: str | None = None
    timeout_ms: int | None = None
    filters: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RegisterResult:
    master_addr: str | None
    ha_addr: str | None


class KVConfig:
    """KVConfigManager: namespace -> {key: value}; a namespace once made stays (emptied)."""

    def __init__(self) -> None:
        self.table: JavaMap[str, JavaMap[str, str]] = JavaMap()

    def put(self, namespace: str, key: str, value: str) -> None:
        if namespace not in self.table:
            self.table[namespace] = JavaMap()
        self.table[namespace][key] = value

    def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is not None:
            kv.pop(key)

    def get(self, namespace: str, key: str) -> str | None:
        kv = self.table.get(namespace)
        return kv.get(key) if kv is not None else None

    def list(self, namespace: str) -> list[tuple[str, str]] | None:
        """The namespace's pairs in Java's order; None for a namespace never made."""
        kv = self.table.get(namespace)
        return kv.items() if kv is not None else None


class RouteInfo:
    """RouteInfoManager's five tables and what each request does to them."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        # the capacities RouteInfoManager's constructor gives its ConcurrentHashMaps
        self.topic_queue: JavaMap[str, JavaMap[str, QueueData]] = JavaMap.chm(1024)
        self.broker_addr: JavaMap[str, BrokerData] = JavaMap.chm(128)
        self.cluster_addr: JavaMap[str, JavaMap[str, None]] = JavaMap.chm(32)
        self.live: JavaMap[tuple[str, str], LiveInfo] = JavaMap.chm(256)
        self.filters: JavaMap[tuple[str, str], tuple[str, ...]] = JavaMap.chm(256)
        # Java 5.3.3 applies the single-topic guard (apache/rocketmq#4522) to every broker,
        # and a refused registration keeps what it wrote before the guard (the cluster's set,
        # a first registration's empty BrokerData, the group's flags, a promoted slave's old
        # id gone). A registry may differ on purpose; its test says so through these.
        self.guard_old_brokers = True
        self.refusal_keeps_earlier_writes = True

    # ---- changes

    def register(self, reg: Registration, channel: object | None) -> RegisterResult | None:
        """None: refused (a single-topic registration from an id the group lacks)."""
        guarded = reg.acting_master is not None or self.guard_old_brokers
        if not self.refusal_keeps_earlier_writes and guarded and len(reg.topics) == 1:
            held = self.broker_addr.get(reg.name)
            if held is None or reg.broker_id not in held.addrs:
                return None
        names = self.cluster_addr.get(reg.cluster)
        if names is None:
            names = self.cluster_addr[reg.cluster] = JavaMap()
        names[reg.name] = None
        first = False
        group = self.broker_addr.get(reg.name)
        if group is None:
            first = True
            group = self.broker_addr[reg.name] = BrokerData(reg.cluster, reg.name)
        old_broker = reg.acting_master is None
        group.acting_master = not old_broker and bool(reg.acting_master)
        group.zone = reg.zone
        # one address, one id: a slave promoted to master leaves its old id
        for bid, addr in group.addrs.items():
            if addr == reg.addr and bid != reg.broker_id:
                group.addrs.pop(bid)
        # (the stateVersion refusal: never reached, every stateVersion sent is 0)
        if guarded and reg.broker_id not in group.addrs and len(reg.topics) == 1:
            return None
        old_addr = group.addrs.get(reg.broker_id)
        group.addrs[reg.broker_id] = reg.addr
        first = first or not old_addr
        master = reg.broker_id == MASTER_ID
        prime_slave = not old_broker and not master and reg.broker_id == min(group.addrs.keys())
        if master or prime_slave:
            stored = self.live.get((reg.cluster, reg.addr))
            version_changed = stored is None or stored.data_version != reg.data_version
            for tc in reg.topics:
                held = self.topic_queue.get(tc.name)
                if first or version_changed or not held or reg.name not in held:
                    perm = tc.perm
                    if prime_slave and group.acting_master:
                        perm &= ~PERM_WRITE
                    self._put_queue_data(reg.name, tc, perm)
        self.live[(reg.cluster, reg.addr)] = LiveInfo(
            self.clock.now_ms, reg.timeout_ms if reg.timeout_ms is not None else DEFAULT_TIMEOUT_MS,
            reg.data_version, channel, reg.ha_addr)
        if reg.filters is not None:
            if reg.filters:
                self.filters[(reg.cluster, reg.addr)] = reg.filters
            else:
                self.filters.pop((reg.cluster, reg.addr))
        master_addr = ha = None
        if not master:
            found = group.addrs.get(MASTER_ID)
            if found is not None:
                live = self.live.get((reg.cluster, found))
                if live is not None:
                    master_addr, ha = found, live.ha_addr
        return RegisterResult(master_addr, ha)

    def _put_queue_data(self, name: str, tc: TopicConfig, perm: int) -> None:
        qd = QueueData(name, tc.read, tc.write, perm, tc.sys_flag)
        held = self.topic_queue.get(tc.name)
        if held is None:
            held = self.topic_queue[tc.name] = JavaMap()
        if held.get(name) != qd:
            held[name] = qd

    def refresh(self, cluster: str, addr: str) -> bool:
        """BROKER_HEARTBEAT / QUERY_DATA_VERSION: a known broker's last update is now."""
        live = self.live.get((cluster, addr))
        if live is None:
            return False
        live.last_update_ms = self.clock.now_ms
        return True

    def unregister(self, requests: list[tuple[str, str, str, int]]) -> None:
        """(cluster, addr, name, id) each; one batch, as BatchUnregistrationService applies them."""
        removed: list[str] = []
        reduced: list[str] = []
        for cluster, addr, name, _bid in requests:
            self.live.pop((cluster, addr))
            self.filters.pop((cluster, addr))
            gone = False
            group = self.broker_addr.get(name)
            if group is not None:
                for bid, held in group.addrs.items():
                    if held == addr:
                        group.addrs.pop(bid)
                if not group.addrs:
                    self.broker_addr.pop(name)
                    gone = True
            if gone:
                names = self.cluster_addr.get(cluster)
                if names is not None:
                    names.pop(name)
                    if not names:
                        self.cluster_addr.pop(cluster)
                removed.append(name)
            else:
                reduced.append(name)
        for topic, queues in self.topic_queue.items():
            for name in removed:
                queues.pop(name)
            if not queues:
                self.topic_queue.pop(topic)
            for name in reduced:
                qd = queues.get(name)
                group = self.broker_addr.get(name)
                if qd is not None and group is not None and group.acting_master and self._no_master(name):
                    qd.perm &= ~PERM_WRITE

    def _no_master(self, name: str) -> bool:
        group = self.broker_addr.get(name)
        return group is None or not group.addrs or min(group.addrs.keys()) > 0

    def _identity(self, cluster: str, addr: str) -> tuple[str, str, str, int] | None:
        for group in self.broker_addr.values():
            if group.cluster != cluster:
                continue
            for bid, held in group.addrs.items():
                if held == addr:
                    return cluster, addr, group.name, bid
        return None

    def channel_closed(self, channel: object) -> None:
        """onChannelDestroy(channel): the broker whose live entry holds this channel leaves."""
        for (cluster, addr), live in self.live.items():
            if live.channel is channel:
                found = self._identity(cluster, addr)
                if found is not None:
                    self.unregister([found])
                return

    def scan(self) -> list[tuple[str, str]]:
        """scanNotActiveBroker at the clock's now: the addresses it removes."""
        expired = [key for key, live in self.live.items()
                   if live.last_update_ms + live.timeout_ms < self.clock.now_ms]
        for cluster, addr in expired:
            found = self._identity(cluster, addr)
            if found is not None:
                self.unregister([found])
            # (Java leaves a live entry with no BrokerData in place; the model test never makes one)
        return expired

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if not cluster:
            self.topic_queue.pop(topic)
            return
        names = self.cluster_addr.get(cluster)
        queues = self.topic_queue.get(topic)
        if not names or queues is None:
            return
        for name in names.keys():
            queues.pop(name)
        if not queues:
            self.topic_queue.pop(topic)

    def write_perm(self, name: str, wipe: bool) -> int:
        count = 0
        for queues in self.topic_queue.values():
            qd = queues.get(name)
            if qd is None:
                continue
            qd.perm = qd.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
            count += 1
        return count

    # ---- reads, each as Java's answer (lists in Java's iteration order)

    def route(self, topic: str) -> dict[str, Any] | None:
        queues = self.topic_queue.get(topic)
        if queues is None:
            return None
        groups = []
        filters: dict[str, list[str]] = {}
        names = queues.keys()
        for name in java_set_order(names, max(int(len(names) / .75) + 1, 16)):
            group = self.broker_addr.get(name)
            if group is None:
                continue
            groups.append(group.doc())
            if not self.filters:
                continue
            for addr in group.addrs.values():
                listed = self.filters.get((group.cluster, addr))
                if listed is not None:  # fastjson leaves a map's null value out
                    filters[addr] = list(listed)
        if not groups:
            return None
        return {"queueDatas": [qd.doc() for qd in queues.values()], "brokerDatas": groups,
                "filterServerTable": filters}

    def cluster_info(self) -> dict[str, Any]:
        return {"brokerAddrTable": {name: group.doc() for name, group in self.broker_addr.items()},
                "clusterAddrTable": {cluster: names.keys() for cluster, names in self.cluster_addr.items()}}

    # a TopicList's set is ConcurrentHashMap.newKeySet(): a ConcurrentHashMap of table 16
    def all_topics(self) -> list[str]:
        return java_set_order(self.topic_queue.keys(), concurrent=True)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr.get(cluster)
        found: list[str] = []
        for name in names.keys() if names is not None else []:
            found += [topic for topic, queues in self.topic_queue.items() if name in queues]
        return java_set_order(found, concurrent=True)

    def system_topics(self) -> tuple[list[str], str | None]:
        """Cluster and broker names, and the first address of the first group with one."""
        found: list[str] = []
        for cluster, names in self.cluster_addr.items():
            found += [cluster, *names.keys()]
        addr = None
        for group in self.broker_addr.values():
            if group.addrs:
                addr = group.addrs.values()[0]
                break
        return java_set_order(found, concurrent=True), addr

    def _flagged(self, keep: Any) -> list[str]:
        return java_set_order([topic for topic, queues in self.topic_queue.items()
                               if queues and keep(queues.values()[0].sys_flag)], concurrent=True)

    def unit_topics(self) -> list[str]:
        return self._flagged(lambda flag: flag & 1)

    def unit_sub_topics(self) -> list[str]:
        return self._flagged(lambda flag: flag & 2)

    def unit_sub_without_unit_topics(self) -> list[str]:
        return self._flagged(lambda flag: not flag & 1 and flag & 2)
