"""Bench 4: expiry scanner pass time with 1,000 and 10,000 live brokers and 0 / 100 / 1,000 due.

The live brokers (timeout 1 h) are seeded through register.lua in-process. For each due
count, that many more brokers register with a 100 ms timeout; once Redis' clock has
passed all their deadlines, one Scanner.scan_once() (as every worker runs it) is timed,
and the remove_batch.lua time in Redis summed from SLOWLOG. Each broker is its own master
broker group with one topic (of 100 shared ones), so each removal runs the cascade.
A pass should cost O(due): the same for 1,000 and 10,000 live brokers at a given due count.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.common import machine_info, median, parser, redis_server, row, write_result  # noqa: E402
from bench.seed import register_many, registration, script_sha, script_times_us, store_for  # noqa: E402
from service.registry import Registry  # noqa: E402
from service.scanner import Scanner  # noqa: E402


def broker(i: int, timeout_ms: int, prefix: str) -> dict:
    return registration(addr=f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}:{10000 + i // 16_777_216}",
                        name=f"{prefix}-{i}", topics=[f"Topic{i % 100:03d}"], timeout_ms=timeout_ms)


async def run(redis_url: str, port: int, totals: list[int], dues: list[int], reps: int) -> dict:
    store = store_for(redis_url)
    await store.load_scripts()
    registry = Registry(store)
    scanner = Scanner(registry, interval_ms=5000, batch=1000)
    r = redis.Redis(port=port)
    sha = script_sha("remove_batch")
    out: dict = {}
    seeded = 0
    serial = 0
    try:
        for total in totals:
            t0 = time.perf_counter()
            await register_many(registry, [broker(i, 3_600_000, "live") for i in range(seeded, total)])
            print(f"seeded {total - seeded} live brokers in {time.perf_counter() - t0:.1f} s")
            seeded = total
            for due in dues:
                passes, in_redis, removed = [], [], []
                for _ in range(reps if due else max(reps, 3)):
                    bodies = [broker(10_000_000 + serial + i, 100, "due") for i in range(due)]
                    serial += due
                    await register_many(registry, bodies)
                    # wait until Redis' clock has passed every due deadline
                    while True:
                        sec, usec = r.time()
                        now = sec * 1000 + usec // 1000
                        if r.zcount(store.keys.expiry, "-inf", now) >= due:
                            break
                        await asyncio.sleep(0.02)
                    assert r.zcard(store.keys.expiry) == total + due
                    r.config_set("slowlog-log-slower-than", 0)
                    r.config_set("slowlog-max-len", 100_000)
                    r.slowlog_reset()
                    t = time.perf_counter()
                    n = await scanner.scan_once()
                    passes.append((time.perf_counter() - t) * 1000)
                    in_redis.append(sum(script_times_us(r, sha)) / 1000)
                    r.config_set("slowlog-log-slower-than", 10_000)
                    removed.append(n)
                    assert r.zcard(store.keys.expiry) == total, "the scan left due brokers behind"
                out[f"{total}/{due}"] = {
                    "live": total, "due": due, "pass_ms": median(passes), "removals_in_redis_ms": median(in_redis),
                    "removed": removed, "pass_ms_all": [round(x, 3) for x in passes],
                }
                print(f"live {total} due {due}: pass {median(passes):.2f} ms (remove_batch.lua in Redis {median(in_redis):.2f} ms)")
    finally:
        await scanner.removals.stop()
        await store.close()
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--totals", type=lambda s: [int(x) for x in s.split(",")], help="live broker counts (default 1000,10000)")
    p.add_argument("--dues", type=lambda s: [int(x) for x in s.split(",")], help="due counts (default 0,100,1000)")
    p.add_argument("--reps", type=int, help="passes per case (default 3, quick 1)")
    args = p.parse_args()
    totals = args.totals or ([100, 300] if args.quick else [1000, 10_000])
    dues = args.dues or ([0, 10, 50] if args.quick else [0, 100, 1000])
    reps = args.reps or (1 if args.quick else 3)
    machine = machine_info()
    with redis_server() as rs:
        results = asyncio.run(run(rs.url, rs.port, totals, dues, reps))
    summary = [row(f"scanner pass, {v['live']:,} live, {v['due']:,} due", v["pass_ms"], "ms",
                   f"remove_batch.lua in Redis {v['removals_in_redis_ms']:.2f} ms") for v in results.values()]
    write_result(args.out, "scanner_pass", {"totals": totals, "dues": dues, "reps": reps, "batch": 1000,
                                            "statistic": "median"}, {"cases": results}, summary, machine)


if __name__ == "__main__":
    main()
