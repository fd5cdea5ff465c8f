"""Bench 2: registration latency of a master broker with 100 / 1,000 / 10,000 topics.

Three cases per size, each repeated and reported as the median:
  first      a broker that is not registered (the tables are emptied before each repetition);
  unchanged  the same body again (the periodic re-registration: nothing to write);
  changed    the same topics with a new dataVersion (every QueueData is rewritten).
Measured client-side (HTTP POST of pre-encoded bytes on a keep-alive connection to one
worker, until the answer is read) and in
Redis: the register.lua EVALSHA's own duration from SLOWLOG (slowlog-log-slower-than 0).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import json  # noqa: E402

import redis  # noqa: E402

from bench.spread import range_note  # noqa: E402
from bench.common import Client, machine_info, median, parser, redis_server, row, workers, write_result  # noqa: E402
from bench.seed import registration, script_sha, script_times_us, topics  # noqa: E402


def script_time_us(r: redis.Redis, sha: str) -> int | None:
    """The longest EVALSHA of `sha` in the slow log since the last reset (µs)."""
    times = script_times_us(r, sha)
    return max(times) if times else None


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="topic counts (default 100,1000,10000)")
    p.add_argument("--reps", type=int, help="repetitions per case (default 5, quick 2)")
    args = p.parse_args()
    sizes = args.sizes or ([100] if args.quick else [100, 1000, 10_000])
    reps = args.reps or (2 if args.quick else 5)
    machine = machine_info()
    sha = script_sha("register")
    # an unchanged re-registration takes the fast path, a script of its own
    fast_sha = script_sha("register_unchanged")
    # a new group's big first registration is staged in slices before register.lua publishes it
    stage_sha = script_sha("register_stage")
    results: dict[str, dict] = {}

    with redis_server() as rs, workers(rs.url) as [port]:
        r = redis.Redis(port=rs.port)
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 1024)
        client = Client(port)

        def timed(body: bytes) -> tuple[float, int | None, int | None]:
            r.slowlog_reset()
            t0 = time.perf_counter()
            status, answer = client.request("POST", "/v1/brokers/register", body)
            elapsed = time.perf_counter() - t0
            if status != 200:
                raise RuntimeError(f"register answered {status}: {answer[:300]!r}")
            full = script_time_us(r, sha)
            return elapsed * 1000, full if full is not None else script_time_us(r, fast_sha), script_time_us(r, stage_sha)

        for n in sizes:
            names = topics(n)
            first = json.dumps(registration(name="broker-a", topics=names, version=1)).encode()
            changed = [json.dumps(registration(name="broker-a", topics=names, version=2 + i)).encode()
                       for i in range(reps)]
            cases: dict[str, list[tuple[float, int | None, int | None]]] = {"first": [], "unchanged": [], "changed": []}
            for i in range(reps):
                r.flushall()
                cases["first"].append(timed(first))
                cases["unchanged"].append(timed(first))
            for i in range(reps):
                cases["changed"].append(timed(changed[i]))
            results[str(n)] = {
                case: {
                    "client_ms": median([c for c, _, _ in samples]),
                    "redis_ms": median([s / 1000 for _, s, _ in samples if s is not None]) if any(
                        s is not None for _, s, _ in samples) else None,
                    "client_ms_all": [round(c, 3) for c, _, _ in samples],
                    "redis_us_all": [s for _, s, _ in samples],
                    "stage_us_all": [s for _, _, s in samples],  # the longest slice, when staged
                }
                for case, samples in cases.items()
            }
            results[str(n)]["body_bytes"] = len(first)
            print(n, {k: (round(v["client_ms"], 2), v["redis_ms"]) for k, v in results[str(n)].items() if k != "body_bytes"})
        longest = max((s for size in results.values() for case in ("first", "unchanged", "changed")
                       for s in size[case]["redis_us_all"] + size[case]["stage_us_all"] if s is not None), default=0)

    summary = []
    for n, res in results.items():
        for case in ("first", "unchanged", "changed"):
            summary.append(row(f"register {int(n):,} topics, {case}: client", res[case]["client_ms"], "ms",
                               range_note(res[case]["client_ms_all"], "repetitions")))
            if res[case]["redis_ms"] is not None:
                script = "register_unchanged.lua" if case == "unchanged" else "register.lua"
                summary.append(row(f"register {int(n):,} topics, {case}: {script} in Redis", res[case]["redis_ms"], "ms"))
    summary.append(row("register: longest registration script (SLOWLOG; register.lua, register_unchanged.lua or "
                       "a register_stage.lua slice)", longest / 1000, "ms", "goal <= 20 ms at 10,000 topics"))
    write_result(args.out, "registration", {"sizes": sizes, "reps": reps, "statistic": "median"},
                 {"by_topics": results, "longest_script_ms": longest / 1000}, summary, machine)


if __name__ == "__main__":
    main()
