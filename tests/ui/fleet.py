"""A registry at fleet size for the dashboard's browser tests: 300 broker groups in three
clusters (a master and a slave each), about 108,000 topics (8,000 of them on one group), RocketMQ's own system topics,
seeded into a real redis-server through register.lua (the same scripts a worker runs).

The fleet is deterministic (a fixed seed), so a test can count what the page must show.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import redis

from service.config import Settings
from service.models import RegisterRequest, validated
from service.registry import Registry
from service.store import Store
from tests.builders import registration, topic_config

CLUSTERS = ("ClusterA", "ClusterB", "ClusterC")
GROUPS_PER_CLUSTER = 100
TOPICS = 100_000
# what a RocketMQ broker creates on its own (TopicValidator's set and prefixes, %RETRY% and
# %DLQ% of a consumer group); each master also registers its cluster's and its own name
SYSTEM_TOPICS = ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
                 "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest", "rmq_sys_SYNC_BROKER_MEMBER_x",
                 "%RETRY%orders-consumer", "%DLQ%orders-consumer")
LONG_TIMEOUT_MS = 3_600_000
BIG = "group-150"
BIG_TOPICS = 8_000


@dataclass
class Fleet:
    """What was seeded: group -> cluster, group -> [(brokerId, address)], and the
    writable write queues each group carries (the chart's values)."""

    cluster_of: dict[str, str] = field(default_factory=dict)
    members: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    write_queues: dict[str, int] = field(default_factory=dict)
    topics: int = 0
    cluster_topics: dict[str, str] = field(default_factory=dict)  # a topic only that cluster serves

    @property
    def brokers(self) -> int:
        return sum(len(m) for m in self.members.values())


def group_name(i: int) -> str:
    return f"group-{i}"


def addr(i: int, broker_id: int) -> str:
    return f"10.{i // 250}.{i % 250}.{broker_id + 1}:10911"


def plan(rng: random.Random) -> tuple[Fleet, dict[str, dict[str, dict[str, Any]]]]:
    """The fleet and each master's topic config table. Topic T<n> lives on 3 to 30 groups
    of one cluster (mean about 10), so a cluster filter has something to keep out."""
    fleet = Fleet()
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    by_cluster: dict[str, list[str]] = {}
    for c, cluster in enumerate(CLUSTERS):
        for j in range(GROUPS_PER_CLUSTER):
            i = c * GROUPS_PER_CLUSTER + j
            name = group_name(i)
            fleet.cluster_of[name] = cluster
            fleet.members[name] = [(0, addr(i, 0)), (1, addr(i, 1))]
            by_cluster.setdefault(cluster, []).append(name)
            tables[name] = {t: topic_config(t) for t in SYSTEM_TOPICS + (cluster, name)}
    for n in range(TOPICS):
        groups = by_cluster[CLUSTERS[n % len(CLUSTERS)]]
        k = min(len(groups), 3 + min(27, int(rng.expovariate(1 / 7.5))))
        write = rng.choice((4, 8, 16))
        for name in rng.sample(groups, k):
            tables[name][f"T{n}"] = topic_config(f"T{n}", read=write, write=write)
    # one group far above the rest (the chart must name it): 8,000 topics of its own
    for n in range(BIG_TOPICS):
        tables[BIG][f"W{n}"] = topic_config(f"W{n}", read=8, write=8)
    for c, cluster in enumerate(CLUSTERS):
        fleet.cluster_topics[cluster] = f"T{c}"
    fleet.topics = TOPICS + BIG_TOPICS + len(SYSTEM_TOPICS) + len(CLUSTERS) + len(fleet.members)
    for name, table in tables.items():
        fleet.write_queues[name] = sum(t["writeQueueNums"] for t in table.values() if t["perm"] & 2)
    return fleet, tables


async def _register_all(redis_url: str, bodies: list[dict[str, Any]]) -> None:
    settings = Settings(redis_url=redis_url, redis_timeout_ms=60_000)
    store = Store(settings)
    await store.load_scripts()
    registry = Registry(store)
    sem = asyncio.Semaphore(8)

    async def one(body: dict[str, Any]) -> None:
        req = validated(RegisterRequest, body, settings)
        async with sem:
            await registry.register(req)

    try:
        await asyncio.gather(*(one(b) for b in bodies))
    finally:
        await store.close()


def seed_fleet(redis_url: str) -> Fleet:
    """Registers the fleet: masters with their topics, slaves without (a slave's topics
    make no route), every member with a one-hour timeout."""
    fleet, tables = plan(random.Random(29))
    bodies = []
    for name, members in fleet.members.items():
        for broker_id, address in members:
            bodies.append(registration(addr=address, name=name, broker_id=broker_id, cluster=fleet.cluster_of[name],
                                       topics=tables[name] if broker_id == 0 else [], timeout_ms=LONG_TIMEOUT_MS))
    asyncio.run(_register_all(redis_url, bodies))
    r = redis.Redis.from_url(redis_url)
    try:
        assert r.zcard("{rmq}:topic-index") == fleet.topics
    finally:
        r.close()
    return fleet
