"""Bench 8: random-topic route reads on one worker while other broker groups change.

20 broker groups x 500 topics (10,000 topics, each on one group) are read at random by
`wrk -t1 -c64` on one worker; meanwhile a 21st group re-registers through a second worker
with a new dataVersion that changes one of its own 10 topics, at 0, 1, 2 and 10 changes a
second. Before change records, any change anywhere emptied every worker's cache, which is
what this bench was written to catch. Reports reads/s per
rate, their ratio to the no-change rate of the same run (goal >= 0.9 at 10 a second) and
the reading worker's cache hit ratio (goal >= 99 %).
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    http, machine_info, median, parser, post_json, redis_server, row, workers, wrk, write_result,
)
from bench.seed import register_many, registration, store_for, topic_config  # noqa: E402
from service.registry import Registry  # noqa: E402

GROUPS, PER_GROUP = 20, 500


def seed(redis_url: str, per_group: int) -> None:
    async def run() -> None:
        store = store_for(redis_url)
        await store.load_scripts()
        bodies = [registration(addr=f"10.1.{g}.1:10911", name=f"group-{g}",
                               topics=[f"T{g * per_group + i}" for i in range(per_group)]) for g in range(GROUPS)]
        await register_many(Registry(store), bodies)
        await store.close()

    asyncio.run(run())


class Changer(threading.Thread):
    """Re-registers one group at `rate` a second, each time with a new dataVersion and a
    different write queue count on one of its topics; counts the changes made."""

    def __init__(self, base: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.base, self.rate, self.made = base, rate, 0
        self.stop = threading.Event()

    def run(self) -> None:
        if self.rate <= 0:
            return
        period = 1 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.made += 1
            topics = {f"C{i}": topic_config(f"C{i}") for i in range(10)}
            topics["C0"] = topic_config("C0", write=1 + self.made % 8)
            post_json(f"{self.base}/v1/brokers/register", registration(
                addr="10.2.0.1:10911", name="changing", topics=topics, version=self.made + 1))
            next_at += period
            self.stop.wait(max(0.0, next_at - time.monotonic()))


def cache_counts(port: int) -> tuple[float, float]:
    _, text = http("GET", f"http://127.0.0.1:{port}/metrics")
    found = dict(re.findall(r"^rmq_cache_(hits|misses)_total (\S+)$", text.decode(), re.M))
    return float(found["hits"]), float(found["misses"])


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, help="wrk duration per rate and round (default 5, quick 1)")
    p.add_argument("--rounds", type=int, help="rounds over the rates (default 3, quick 1)")
    args = p.parse_args()
    seconds = args.seconds or (1 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 3)
    per_group = 20 if args.quick else PER_GROUP
    rates = (0, 1, 2, 10)
    machine = machine_info()

    with redis_server() as rs, workers(rs.url) as [reader], workers(rs.url) as [writer]:
        seed(rs.url, per_group)
        status, _ = http("GET", f"http://127.0.0.1:{reader}/v1/routes/T0")
        assert status == 200
        url = f"http://127.0.0.1:{reader}/v1/routes/T0"
        wrk(url, 1 if args.quick else 3, routes=("random", GROUPS * per_group))  # warm the cache
        runs: dict[int, list[dict]] = {rate: [] for rate in rates}
        for r in range(rounds):
            for rate in rates:
                changer = Changer(f"http://127.0.0.1:{writer}", rate)
                hits0, misses0 = cache_counts(reader)
                changer.start()
                result = wrk(url, seconds, routes=("random", GROUPS * per_group))
                changer.stop.set()
                changer.join()
                hits, misses = cache_counts(reader)
                result["changes_per_s"] = changer.made / seconds
                result["hit_ratio"] = (hits - hits0) / max(1.0, (hits - hits0) + (misses - misses0))
                runs[rate].append(result)
                print(f"round {r + 1}, {rate} changes/s: {result['rps']:.0f} reads/s, "
                      f"hit ratio {result['hit_ratio']:.4f}, {changer.made} changes")

    per_rate = {rate: {"rps": median([x["rps"] for x in rs_]), "hit_ratio": median([x["hit_ratio"] for x in rs_]),
                       "errors": sum(sum(x["errors"].values()) for x in rs_)} for rate, rs_ in runs.items()}
    ratio = {rate: median([runs[rate][i]["rps"] / runs[0][i]["rps"] for i in range(rounds)]) for rate in rates}
    summary = []
    for rate in rates:
        summary.append(row(f"random route reads, {rate} changes/s elsewhere", per_rate[rate]["rps"], "req/s"))
        summary.append(row(f"random route reads, {rate} changes/s: ratio to 0", ratio[rate], "",
                           "goal >= 0.9" if rate == 10 else ""))
        summary.append(row(f"random route reads, {rate} changes/s: cache hit ratio", per_rate[rate]["hit_ratio"], "",
                           "goal >= 0.99" if rate == 10 else ""))
    write_result(args.out, "changing_reads", {
        "seconds": seconds, "rounds": rounds, "connections": 64, "wrk_threads": 1, "groups": GROUPS,
        "topics_per_group": per_group, "rates": list(rates),
    }, {"rates": per_rate, "ratio_to_no_change": ratio, "runs": runs}, summary, machine)


if __name__ == "__main__":
    main()
