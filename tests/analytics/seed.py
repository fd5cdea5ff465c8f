"""A deterministic registry state for the analytics tests, written straight into Redis.

The model (``build_model``) is plain Python, so a test computes the figures it expects
from it independently of Spark. ``write_model`` writes it with redis-py following the key
schema (docs/design.md part 3, ``service/keys.py``) exactly as the registry's scripts leave it:
row hashes (live with a key TTL, member, broker, queue), the SETs, ``addrs:<name>``,
the expiry ZSET and the KV namespace ORDER_TOPIC_CONFIG. When the registry's HTTP API is
in, seeding can go through it instead; the model stays the source of the expected figures.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import redis

from service.keys import ORDER_TOPIC_CONFIG, Keys

# Long timeouts, so that a slow CI machine reading the tables a minute after seeding
# still finds the same brokers alive and flagged.
DEFAULT_TIMEOUT = 1_200_000


@dataclass(frozen=True)
class Member:
    addr: str
    cluster: str
    name: str
    broker_id: int
    live: bool = True  # False: timed out (TTL gone), member row not yet removed
    age_ms: int = 50_000  # now - lastUpdateTimestamp at seeding
    timeout_ms: int = DEFAULT_TIMEOUT

    @property
    def ha_addr(self) -> str:
        host, port = self.addr.split(":")
        return f"{host}:{int(port) + 1}"


@dataclass(frozen=True)
class Queue:
    topic: str
    name: str
    read: int
    write: int
    perm: int = 6
    sys_flag: int = 0


@dataclass
class Model:
    groups: dict[str, str] = field(default_factory=dict)  # brokerName -> cluster
    members: list[Member] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    order: dict[str, str] = field(default_factory=dict)  # topic -> orderTopicConf

    @property
    def clusters(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, cluster in sorted(self.groups.items()):
            out.setdefault(cluster, []).append(name)
        return out

    @property
    def topics(self) -> list[str]:
        return sorted({q.topic for q in self.queues})


# groups per cluster; per group: (slave ids, master present?)
LAYOUT: dict[str, dict[str, tuple[tuple[int, ...], bool]]] = {
    "ClusterA": {"broker-a0": ((1,), True), "broker-a1": ((1, 2), True),
                 "broker-a2": ((1,), True), "broker-a3": ((1, 2), False)},
    "ClusterB": {"broker-b0": ((1,), True), "broker-b1": ((1,), True), "broker-b2": ((1,), True)},
    "ClusterC": {"broker-c0": ((1,), True), "broker-c1": ((), True)},
}
# brokers in special states: addr-independent (name, id) -> field overrides
SPECIAL: dict[tuple[str, int], dict[str, object]] = {
    ("broker-a1", 0): {"age_ms": 1_000_000},  # 83 % of 1200 s: flagged, 200 s left
    ("broker-b0", 1): {"age_ms": 1_250_000, "timeout_ms": 1_500_000},  # 83 % of 1500 s: flagged
    ("broker-a0", 0): {"age_ms": 700_000},  # 58 %: not flagged
    ("broker-c0", 1): {"age_ms": 300_000, "timeout_ms": 600_000},  # 50 % of a shorter timeout: not flagged
    ("broker-b2", 0): {"live": False},  # master timed out, awaiting the scanner
    ("broker-a2", 1): {"live": False},  # slave timed out
}
NO_TOPICS = {"broker-c1"}  # a fresh group that serves nothing yet
# groups whose 5.x brokers run with acting master (the masterless one among them), and a zone
ACTING = {"broker-a3": {"enableActingMaster": "1", "zoneName": "zone-1"}, "broker-b0": {"enableActingMaster": "0"}}


def build_model(seed: int = 20240607, topics: int = 320) -> Model:
    rng = random.Random(seed)
    m = Model()
    for ci, (cluster, groups) in enumerate(LAYOUT.items()):
        for gi, (name, (slaves, has_master)) in enumerate(groups.items()):
            m.groups[name] = cluster
            ids = ((0,) if has_master else ()) + slaves
            for bid in ids:
                addr = f"10.{ci + 1}.{gi}.{10 + bid}:10911"
                attrs: dict[str, object] = {"age_ms": rng.choice([10_000, 50_000, 150_000, 300_000, 450_000])}
                attrs.update(SPECIAL.get((name, bid), {}))
                m.members.append(Member(addr, cluster, name, bid, **attrs))  # type: ignore[arg-type]
    clusters = m.clusters
    for i in range(topics):
        topic = f"Topic-{i:03d}"
        cluster = rng.choice(sorted(clusters))
        candidates = [n for n in clusters[cluster] if n not in NO_TOPICS]
        k = rng.choice([1, 1, 1, 2, 2, 3, len(candidates)])
        names = sorted(rng.sample(candidates, min(k, len(candidates))))
        base = rng.choice([4, 8, 8, 16])
        for name in names:
            read = write = base
            roll = rng.random()
            if roll < 0.06:
                write = base // 2  # scaling down: write first
            elif roll < 0.09:
                read = base * 2
            perm = 6
            roll = rng.random()
            if roll < 0.05:
                perm = 4  # write bit wiped
            elif roll < 0.08:
                perm = 7
            elif roll < 0.09:
                perm = 0
            sys_flag = rng.choice([0] * 12 + [1, 2, 3])
            m.queues.append(Queue(topic, name, read, write, perm, sys_flag))
    for i in range(0, topics, 31):
        topic = f"Topic-{i:03d}"
        names = sorted({q.name for q in m.queues if q.topic == topic})
        m.order[topic] = ";".join(f"{n}:{next(q.write for q in m.queues if q.topic == topic and q.name == n)}"
                                  for n in names)
    m.order["OrderTopicGone"] = "broker-a0:4"  # KV entry with no route
    return m


def redis_now_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


DATASET = "5eed0000000000000000000000000001"


def write_model(client: redis.Redis, model: Model, prefix: str = "rmq", dataset: str | None = DATASET) -> int:
    """Write the model; returns the Redis time (ms) the ages are relative to. ``dataset``:
    the data-set id a worker would have written at its first start (``Keys.dataset``);
    None: a store seeded without a worker, which has none."""
    k = Keys(prefix)
    now = redis_now_ms(client)
    p = client.pipeline(transaction=False)
    if dataset is not None:
        p.set(k.dataset, dataset, nx=True)
    for cluster, names in model.clusters.items():
        p.sadd(k.clusters, cluster)
        p.sadd(k.cluster(cluster), *names)
        for name in names:
            p.hset(k.broker(name), mapping={"cluster": cluster, "brokerName": name, **ACTING.get(name, {})})
    for b in model.members:
        p.hset(k.addrs(b.name), str(b.broker_id), b.addr)
        p.hset(k.member(b.addr), mapping={
            "brokerAddr": b.addr, "cluster": b.cluster, "brokerName": b.name, "brokerId": str(b.broker_id)})
        if b.live:
            last = now - b.age_ms
            p.hset(k.live(b.addr), mapping={
                "brokerAddr": b.addr, "cluster": b.cluster, "brokerName": b.name,
                "brokerId": str(b.broker_id), "haServerAddr": b.ha_addr,
                "lastUpdateTimestamp": str(last), "heartbeatTimeoutMillis": str(b.timeout_ms),
                "dataVersion": json.dumps({"timestamp": last - 1000, "counter": 7}, separators=(",", ":")),
            })
            p.pexpire(k.live(b.addr), b.timeout_ms - b.age_ms)
            p.zadd(k.expiry, {b.addr: last + b.timeout_ms})
    for q in model.queues:
        p.sadd(k.topics, q.topic)
        p.sadd(k.topic(q.topic), q.name)
        p.hset(k.broker_topics(q.name), q.topic, f"{q.read},{q.write},{q.perm},{q.sys_flag}")
        p.hset(k.queue(q.topic, q.name), mapping={
            "topic": q.topic, "brokerName": q.name, "readQueueNums": str(q.read),
            "writeQueueNums": str(q.write), "perm": str(q.perm), "topicSysFlag": str(q.sys_flag)})
    if model.order:
        p.sadd(k.kv_namespaces, ORDER_TOPIC_CONFIG)
        p.hset(k.kv(ORDER_TOPIC_CONFIG), mapping=model.order)
    p.incr(k.version)
    p.execute()
    return now


def remove_member(client: redis.Redis, model: Model, addr: str, prefix: str = "rmq") -> Model:
    """What the expiry cascade does for a non-last member of a group; returns the new model."""
    k = Keys(prefix)
    b = next(m for m in model.members if m.addr == addr)
    group_left = [m for m in model.members if m.name == b.name and m.addr != addr]
    assert group_left, "remove_member only removes a member whose group stays"
    p = client.pipeline(transaction=True)
    p.delete(k.live(addr), k.member(addr))
    p.hdel(k.addrs(b.name), str(b.broker_id))
    p.zrem(k.expiry, addr)
    p.incr(k.version)
    p.execute()
    return Model(dict(model.groups), [m for m in model.members if m.addr != addr],
                 list(model.queues), dict(model.order))


def fleet_model(groups: int = 300, clusters: int = 5, topics_per_group: int = 3, seed: int = 29) -> Model:
    """A fleet-sized layout for the charts: ``groups`` broker groups of a master and a slave
    in ``clusters`` clusters, a few topics each, plus the cases a chart must not hide: group
    ``fleet-7`` a far outlier (40,000 write queues), ``fleet-12`` wiped (write bit cleared on
    every row), ``fleet-13`` serving nothing, and the slave of ``fleet-3`` timed out."""
    rng = random.Random(seed)
    m = Model()
    for g in range(groups):
        name, cluster = f"fleet-{g}", f"Fleet{g % clusters}"
        m.groups[name] = cluster
        for bid in (0, 1):
            live = not (g == 3 and bid == 1)
            m.members.append(Member(f"10.{100 + g // 250}.{g % 250}.{10 + bid}:10911", cluster, name, bid, live=live,
                                    age_ms=rng.choice([10_000, 50_000, 150_000])))
        if g == 13:
            continue
        for t in range(topics_per_group):
            queues = 40_000 if g == 7 and t == 0 else rng.choice([8, 16, 16, 24])
            m.queues.append(Queue(f"T-{g}-{t}", name, queues, queues, 4 if g == 12 else 6))
    return m
