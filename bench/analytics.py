"""Bench 10: the analytics `all` job at fleet size, the index reader against the pattern reader.

Seeds, through the HTTP API of one worker, the fleet of `fleet.py` (its generator: 300
broker groups, 100,000 topics on 3 to 30 groups each, one group of 10,000 topics: ~1,000,000
(topic, group) pairs; `--topics 20000` gives ~200,000), then runs `python -m service
analytics all` as a fresh process (start-up included) with `--reader builtin` (pattern SCAN
+ HMGET per row, the baseline) and `--reader index` (the registry's indexes), interleaved,
`--reps` times each. Per run: wall time, the peak resident memory of the whole process tree
(Python driver + JVM + Python workers), the Redis commands and Redis time the job reports
(INFO commandstats before/after, `redisCost`), and the longest single Redis call (SLOWLOG
at a 1 ms threshold, reset before each run).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.common import ROOT, machine_info, median, parser, redis_server, row, workers, write_result  # noqa: E402
from bench.fleet import assign, member_bodies, post_all  # noqa: E402

SLOW_US = 1000


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        p = int(entry)
        children.setdefault(int(fields[1]), []).append(p)
        rss[p] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def run_job(url: str, reader: str, probe: redis.Redis) -> dict[str, Any]:
    probe.slowlog_reset()
    with tempfile.TemporaryDirectory() as out:
        summary = Path(out) / "all.json"
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "service", "analytics", "all", "--redis-url", url,
                                 "--reader", reader, "--out", out, "--no-charts", "--no-history",
                                 "--json", str(summary)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, tree_rss(proc.pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = proc.communicate(timeout=1800)
        wall = time.monotonic() - started
        done.set()
        sampler.join()
        if proc.returncode != 0:
            raise RuntimeError(f"analytics --reader {reader} failed:\n{err[-3000:]}")
        result = json.loads(summary.read_text())
    slow = probe.slowlog_get(10_000)
    cost = result["redisCost"]
    return {"reader": reader, "wall_s": wall, "peak_tree_rss_mib": peak / 2**20, "commands": cost["commands"],
            "redis_s": cost["redisSeconds"], "by_command": cost["byCommand"],
            "longest_call_ms": max((e["duration"] for e in slow), default=0) / 1000,
            "longest_calls": [{"ms": e["duration"] / 1000, "command": (e["command"] or b"")[:60].decode(errors="replace")}
                              for e in sorted(slow, key=lambda e: -e["duration"])[:5]],
            "calls_over_1ms": len(slow), "job_s": result["elapsedSeconds"],
            "pairs_read": result["topics"]["counts"]["queueRows"]}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, help="broker groups (default 300, quick 6)")
    p.add_argument("--topics", type=int, help="topics (default 100000, quick 300)")
    p.add_argument("--big", type=int, help="topics of the one big group (default 10000, quick 200)")
    p.add_argument("--reps", type=int, help="runs per reader (default 3, quick 1)")
    p.add_argument("--readers", default="builtin,index")
    args = p.parse_args()
    q = args.quick
    groups, n_topics = args.groups or (6 if q else 300), args.topics or (300 if q else 100_000)
    big, reps = args.big or (200 if q else 10_000), args.reps or (1 if q else 3)
    machine = machine_info()
    by_group = assign(groups, n_topics, random.Random(12))
    bodies = [json.dumps(b).encode() for b in member_bodies(by_group, big)]
    pairs = sum(len(v) for v in by_group.values()) + big
    print(f"fleet: {groups} groups, {n_topics} topics, {pairs} pairs")
    runs: list[dict[str, Any]] = []
    with redis_server() as rs:
        # a generous Redis timeout: the big group's registration is a long script on a busy machine
        with workers(rs.url, count=1, RMQ_REDIS_TIMEOUT_MS="60000") as [writer]:
            started = time.monotonic()
            post_all(f"http://127.0.0.1:{writer}", bodies)
            seeded = time.monotonic() - started
        # the worker stops once the fleet is in: the job's runs are the only Redis clients,
        # so commandstats and SLOWLOG are the job's alone
        print(f"seeded in {seeded:.1f} s")
        probe = redis.Redis.from_url(rs.url)
        probe.config_set("slowlog-log-slower-than", SLOW_US)
        probe.config_set("slowlog-max-len", 10_000)
        readers = args.readers.split(",")
        for i in range(reps):
            for reader in readers:  # interleaved: the machine's other load hits both alike
                r = run_job(rs.url, reader, probe)
                r["load_avg_1m"] = os.getloadavg()[0]
                runs.append(r)
                print(f"{reader} #{i + 1}: {r['wall_s']:.1f} s wall, {r['redis_s']:.3f} s Redis, "
                      f"{r['commands']} commands, longest call {r['longest_call_ms']:.2f} ms, "
                      f"peak tree RSS {r['peak_tree_rss_mib']:.0f} MiB, load {r['load_avg_1m']:.1f}")
    by_reader = {rd: [r for r in runs if r["reader"] == rd] for rd in readers}
    results: dict[str, Any] = {"fleet": {"groups": groups, "topics": n_topics, "pairs": pairs},
                               "seeding_s": seeded, "runs": runs}
    summary = [row("fleet: (topic, group) pairs", pairs, "", f"{groups} groups x2 members, {n_topics:,} topics")]
    for rd, rs_ in by_reader.items():
        walls = [r["wall_s"] for r in rs_]
        summary += [
            row(f"`all`, --reader {rd}: wall (process, start-up included)", median(walls), "s",
                f"median of {len(walls)}, min {min(walls):.1f}, max {max(walls):.1f}"),
            row(f"`all`, --reader {rd}: Redis time", median([r["redis_s"] for r in rs_]), "s",
                "INFO commandstats before/after"),
            row(f"`all`, --reader {rd}: Redis commands", median([r["commands"] for r in rs_]), ""),
            row(f"`all`, --reader {rd}: longest Redis call", max(r["longest_call_ms"] for r in rs_), "ms",
                "SLOWLOG, 1 ms threshold; 0: none over 1 ms"),
            row(f"`all`, --reader {rd}: peak memory, process tree", median([r["peak_tree_rss_mib"] for r in rs_]),
                "MiB", "driver + JVM + Python workers"),
        ]
    if "builtin" in by_reader and "index" in by_reader:
        summary.append(row("`all` wall, index / builtin", median(
            [b["wall_s"] / a["wall_s"] for a, b in zip(by_reader["builtin"], by_reader["index"])]), "",
            "per interleaved pair, median"))
    write_result(args.out, f"analytics_{pairs // 1000}k" if not q else "analytics_quick",
                 {"groups": groups, "topics": n_topics, "big": big, "reps": reps}, results, summary, machine)


if __name__ == "__main__":
    main()
