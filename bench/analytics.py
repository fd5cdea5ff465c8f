"""Bench 10: the analytics `all` job at fleet size: readers, checkouts, where the wall time goes.

Seeds, through the HTTP API of one worker, the fleet of `fleet.py` (its generator: 300
broker groups, 100,000 topics on 3 to 30 groups each, one group of 10,000 topics: ~1,000,000
(topic, group) pairs; `--topics 20000` gives ~200,000), then runs `python -m service
analytics all` as a fresh process (start-up included, Parquet tables and charts written as
by default) with each of `--readers` (`builtin`: pattern SCAN + HMGET per row; `index`: the
registry's indexes) and, with `--checkouts A,B`, from each of those source trees (e.g. main's
checkout against a branch's), all interleaved, `--reps` times each. Per run: wall time and
its breakdown (start-up, then each stage the job logs), the peak resident memory of the
whole process tree (Python driver + JVM + Python workers), the Redis commands and Redis
time the job reports (INFO commandstats before/after, `redisCost`), and the longest single
Redis call (SLOWLOG at `--slowlog-us`, default 0: every call; reset before each run).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import datetime as dt
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.common import ROOT, machine_info, median, parser, pct, redis_server, row, workers, write_result  # noqa: E402
from bench.fleet import assign, member_bodies, post_all  # noqa: E402

LONG_CALL_MS = 5.0  # the goal: no single Redis call over this
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ service\.analytics: (.*)$")


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


def breakdown(log: str, started_wall: float, ended_wall: float) -> dict[str, float]:
    """Seconds per phase of a run, from the job's log lines (stderr, one per stage):
    ``start-up`` until the Spark session is up, then each ``[job] stage N: text`` until
    the next line of the same kind, and ``end`` (Redis cost, summary, Spark stop)."""
    marks: list[tuple[str, float]] = [("start-up", started_wall)]
    for line in log.splitlines():
        m = LOG_LINE.match(line)
        if not m:
            continue
        at = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()
        text = m.group(2)
        if text.startswith("Spark ") and ", master " in text:
            marks.append(("session to first stage", at))
        stage = re.match(r"\[(\w+)\] stage \d+: (.*?)(?: \(|$| to /)", text)
        if stage:
            marks.append((f"{stage.group(1)}: {stage.group(2)}", at))
        elif re.match(r"\[all\] Redis cost", text):
            marks.append(("end: cost, summary, Spark stop", at))
    phases: dict[str, float] = {}
    for (name, at), (_, nxt) in zip(marks, marks[1:] + [("", ended_wall)]):
        phases[name] = round(phases.get(name, 0.0) + nxt - at, 2)
    return phases


def run_job(url: str, reader: str, probe: redis.Redis, tree: Path) -> dict[str, Any]:
    probe.slowlog_reset()
    with tempfile.TemporaryDirectory() as out:
        summary = Path(out) / "all.json"
        started, started_wall = time.monotonic(), time.time()
        # cwd picks the checkout whose `service` package runs (python -m puts it first on sys.path)
        proc = subprocess.Popen([sys.executable, "-m", "service", "analytics", "all", "--redis-url", url,
                                 "--reader", reader, "--out", str(Path(out) / "out"), "--json", str(summary)],
                                cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
            raise RuntimeError(f"analytics --reader {reader} in {tree} failed:\n{err[-3000:]}")
        result = json.loads(summary.read_text())
    slow = [e for e in probe.slowlog_get(100_000) if (e["command"] or b"").split(b" ")[0].upper() != b"SLOWLOG"]
    cost = result["redisCost"]
    return {"reader": reader, "checkout": str(tree), "wall_s": wall, "peak_tree_rss_mib": peak / 2**20,
            "commands": cost["commands"], "redis_s": cost["redisSeconds"], "by_command": cost["byCommand"],
            "longest_call_ms": max((e["duration"] for e in slow), default=0) / 1000,
            "calls_over_5ms": sum(1 for e in slow if e["duration"] > LONG_CALL_MS * 1000),
            # with every call logged (--slowlog-us 0): the typical call, not only the outliers
            "call_ms_p50": pct([e["duration"] / 1000 for e in slow], 50) if slow else 0.0,
            "call_ms_p99": pct([e["duration"] / 1000 for e in slow], 99) if slow else 0.0,
            "longest_calls": [{"ms": e["duration"] / 1000, "command": (e["command"] or b"")[:60].decode(errors="replace")}
                              for e in sorted(slow, key=lambda e: -e["duration"])[:5]],
            "calls_logged": len(slow), "job_s": result["elapsedSeconds"],
            "phases_s": breakdown(err, started_wall, started_wall + wall),
            "pairs_read": result["topics"]["counts"]["queueRows"]}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, help="broker groups (default 300, quick 6)")
    p.add_argument("--topics", type=int, help="topics (default 100000, quick 300)")
    p.add_argument("--big", type=int, help="topics of the one big group (default 10000, quick 200)")
    p.add_argument("--reps", type=int, help="runs per reader and checkout (default 3, quick 1)")
    p.add_argument("--readers", default="builtin,index")
    p.add_argument("--checkouts", default=str(ROOT),
                   help="comma-separated source trees to run the job from (default this one), interleaved")
    p.add_argument("--slowlog-us", type=int, default=0,
                   help="SLOWLOG threshold in microseconds (default 0: every call is logged)")
    p.add_argument("--name", default=None, help="result file name (default analytics_<pairs>k)")
    args = p.parse_args()
    q = args.quick
    groups, n_topics = args.groups or (6 if q else 300), args.topics or (300 if q else 100_000)
    big, reps = args.big or (200 if q else 10_000), args.reps or (1 if q else 3)
    machine = machine_info()
    by_group = assign(groups, n_topics, random.Random(12))
    bodies = [json.dumps(b).encode() for b in member_bodies(by_group, big)]
    pairs = sum(len(v) for v in by_group.values()) + big
    print(f"fleet: {groups} groups, {n_topics} topics, {pairs} pairs")
    trees = [Path(t).resolve() for t in args.checkouts.split(",")]
    readers = args.readers.split(",")
    variants = [(t, rd) for t in trees for rd in readers]
    label = {(t, rd): (f"{t.name} " if len(trees) > 1 else "") + f"--reader {rd}" for t, rd in variants}
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
        probe.config_set("slowlog-log-slower-than", args.slowlog_us)
        probe.config_set("slowlog-max-len", 100_000)
        for i in range(reps):
            for tree, reader in variants:  # interleaved: the machine's other load hits all alike
                r = run_job(rs.url, reader, probe, tree)
                r["load_avg_1m"] = os.getloadavg()[0]
                runs.append(r)
                print(f"{label[tree, reader]} #{i + 1}: {r['wall_s']:.1f} s wall, {r['redis_s']:.3f} s Redis, "
                      f"{r['commands']} commands, longest call {r['longest_call_ms']:.2f} ms "
                      f"({r['calls_over_5ms']} over {LONG_CALL_MS:g} ms), "
                      f"peak tree RSS {r['peak_tree_rss_mib']:.0f} MiB, load {r['load_avg_1m']:.1f}")
                print("    " + ", ".join(f"{k} {v:.1f}" for k, v in r["phases_s"].items()))
    results: dict[str, Any] = {"fleet": {"groups": groups, "topics": n_topics, "pairs": pairs},
                               "seeding_s": seeded, "checkouts": [str(t) for t in trees], "runs": runs}
    summary = [row("fleet: (topic, group) pairs", pairs, "", f"{groups} groups x2 members, {n_topics:,} topics")]
    by_variant = {v: [r for r in runs if (Path(r["checkout"]), r["reader"]) == v] for v in variants}
    for v, rs_ in by_variant.items():
        name = label[v]
        walls = [r["wall_s"] for r in rs_]
        loads = [r["load_avg_1m"] for r in rs_]
        summary += [
            row(f"`all`, {name}: wall (process, start-up included)", median(walls), "s",
                f"median of {len(walls)}, min {min(walls):.1f}, max {max(walls):.1f}; "
                f"load {min(loads):.1f}-{max(loads):.1f}"),
            row(f"`all`, {name}: Redis time", median([r["redis_s"] for r in rs_]), "s",
                f"INFO commandstats before/after; min {min(r['redis_s'] for r in rs_):.3f}, "
                f"max {max(r['redis_s'] for r in rs_):.3f}"),
            row(f"`all`, {name}: Redis commands", median([r["commands"] for r in rs_]), ""),
            row(f"`all`, {name}: longest Redis call", max(r["longest_call_ms"] for r in rs_), "ms",
                f"SLOWLOG at {args.slowlog_us} us, max over the runs; calls over {LONG_CALL_MS:g} ms: "
                + ", ".join(str(r["calls_over_5ms"]) for r in rs_)),
            row(f"`all`, {name}: Redis call, median / p99", median([r["call_ms_p50"] for r in rs_]), "ms",
                "p99 per run: " + ", ".join(f"{r['call_ms_p99']:.2f}" for r in rs_)),
            row(f"`all`, {name}: peak memory, process tree", median([r["peak_tree_rss_mib"] for r in rs_]),
                "MiB", f"driver + JVM + Python workers; min {min(r['peak_tree_rss_mib'] for r in rs_):.0f}, "
                f"max {max(r['peak_tree_rss_mib'] for r in rs_):.0f}"),
        ]
        for phase in rs_[0]["phases_s"]:
            values = [r["phases_s"].get(phase, 0.0) for r in rs_]
            summary.append(row(f"`all`, {name}: {phase}", median(values), "s",
                               f"min {min(values):.1f}, max {max(values):.1f}"))
    if len(variants) == 2:
        (a, b) = variants
        summary.append(row(f"`all` wall, {label[b]} / {label[a]}", median(
            [y["wall_s"] / x["wall_s"] for x, y in zip(by_variant[a], by_variant[b])]), "",
            "per interleaved pair, median"))
    write_result(args.out, args.name or (f"analytics_{pairs // 1000}k" if not q else "analytics_quick"),
                 {"groups": groups, "topics": n_topics, "big": big, "reps": reps, "readers": readers,
                  "slowlog_us": args.slowlog_us}, results, summary, machine)


if __name__ == "__main__":
    main()
