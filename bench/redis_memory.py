"""Bench 5: Redis memory per (topic, broker) pair.

INFO memory used_memory before and after 10 master broker groups (broker-0 .. broker-9,
one cluster) each register the same 10,000 topics (100,000 QueueData rows), through
register.lua in-process; bytes per pair = the difference / pairs. Also MEMORY USAGE of
one queue hash and of the per-topic and per-broker sets.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.common import machine_info, parser, redis_server, row, write_result  # noqa: E402
from bench.seed import register_many, registration, store_for, topics  # noqa: E402


async def seed(redis_url: str, n_topics: int, n_brokers: int) -> None:
    store = store_for(redis_url)
    try:
        await store.load_scripts()
        from service.registry import Registry

        names = topics(n_topics)
        bodies = [registration(addr=f"10.0.0.{b + 1}:10911", name=f"broker-{b}", topics=names)
                  for b in range(n_brokers)]
        await register_many(Registry(store), bodies, concurrency=1)
    finally:
        await store.close()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--topics", type=int, help="topics per broker (default 10000, quick 500)")
    p.add_argument("--brokers", type=int, help="master broker groups (default 10, quick 2)")
    args = p.parse_args()
    n_topics = args.topics or (500 if args.quick else 10_000)
    n_brokers = args.brokers or (2 if args.quick else 10)
    machine = machine_info()
    with redis_server() as rs:
        r = redis.Redis(port=rs.port)
        before = r.info("memory")
        asyncio.run(seed(rs.url, n_topics, n_brokers))
        after = r.info("memory")
        t0 = topics(1)[0]
        usage = {
            "queue_hash": r.memory_usage(f"{{rmq}}:queue:{t0}:broker-0", samples=0),
            "topic_set": r.memory_usage(f"{{rmq}}:topic:{t0}", samples=0),
            "broker_topics_hash": r.memory_usage("{rmq}:broker-topics:broker-0", samples=0),
            "topics_set": r.memory_usage("{rmq}:topics", samples=0),
        }
        keys = r.dbsize()
        encoding = r.object("encoding", f"{{rmq}}:queue:{t0}:broker-0")
    pairs = n_topics * n_brokers
    delta = after["used_memory"] - before["used_memory"]
    results = {
        "pairs": pairs, "keys": keys, "used_memory_before": before["used_memory"], "used_memory_after": after["used_memory"],
        "used_memory_dataset_after": after.get("used_memory_dataset"), "delta_bytes": delta,
        "bytes_per_pair": delta / pairs, "memory_usage": usage,
        "queue_hash_encoding": encoding.decode() if isinstance(encoding, bytes) else encoding,
        "mem_allocator": after.get("mem_allocator"),
    }
    summary = [
        row(f"memory per (topic, broker) pair ({n_topics:,} topics x {n_brokers} brokers)", delta / pairs, "bytes",
            f"used_memory +{delta / 2**20:.1f} MiB, {keys:,} keys"),
        row("MEMORY USAGE of one queue hash", usage["queue_hash"], "bytes", f"encoding {results['queue_hash_encoding']}"),
        row(f"MEMORY USAGE of one topic's broker set ({n_brokers} names)", usage["topic_set"], "bytes"),
    ]
    write_result(args.out, "redis_memory", {"topics": n_topics, "brokers": n_brokers}, results, summary, machine)


if __name__ == "__main__":
    main()
