"""The bench scripts keep working: each runs at a tiny size into a temp dir.

Benchmarks, not tests: nothing here asserts on a time, only that each script finished
and wrote its result file with the expected keys and positive numbers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS_WRK = {"route_query", "scale_workers", "changing_reads", "fleet"}

# bench -> (extra arguments, keys of "results")
BENCHES = {
    "route_query": (["--seconds", "1", "--rounds", "1"], {"targets", "ratios", "runs"}),
    "registration": (["--sizes", "50", "--reps", "1"], {"by_topics", "longest_script_ms"}),
    "heartbeat": (["--requests", "100", "--seconds", "1"], {"sequential"}),
    "scanner_pass": (["--totals", "50", "--dues", "0,5", "--reps", "1"], {"cases"}),
    "redis_memory": (["--topics", "100", "--brokers", "2"], {"pairs", "bytes_per_pair", "memory_usage"}),
    "scale_workers": (["--workers", "2", "--seconds", "1", "--rounds", "1"], {"direct"}),
    "changing_reads": (["--seconds", "1", "--rounds", "1"], {"rates", "ratio_to_no_change", "runs"}),
    "fleet": (["--no-analytics"], {"fleet", "seeding", "steady_state", "random_reads", "watch", "slowest_scripts"}),
    "script_prelude": ([], {"this"}),
}


def positive_numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in positive_numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in positive_numbers(v)]
    return []


@pytest.mark.parametrize("bench", list(BENCHES))
def test_bench_script_runs(bench: str, tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/test installs it)")
    if bench in NEEDS_WRK and shutil.which("wrk") is None:
        pytest.skip(f"bench/{bench}.py needs wrk (apt-get install wrk; bench/run installs it)")
    extra, keys = BENCHES[bench]
    if bench == "heartbeat" and shutil.which("wrk") is None:
        extra = [*extra, "--no-wrk"]
    proc = subprocess.run([sys.executable, f"bench/{bench}.py", "--quick", "--out", str(tmp_path), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    doc = json.loads((tmp_path / f"{bench}.json").read_text())
    assert doc["bench"] == bench
    assert keys <= doc["results"].keys()
    machine = doc["machine"]
    assert machine["cores"] >= 1 and machine["python"] and machine["redis_server"] and machine["date"]
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3
    assert doc["summary"], "no summary rows for the README table"
    for r in doc["summary"]:
        assert {"metric", "value", "unit"} <= r.keys()
        assert isinstance(r["value"], (int, float)) and r["value"] >= 0, r

    res = doc["results"]
    if bench == "route_query":
        for target in ("ceiling", "uncached", "cached"):
            assert res["targets"][target]["rps"] > 0 and res["targets"][target]["p99_us"] > 0
            assert res["targets"][target]["errors"] == 0
        assert res["ratios"]["cached_over_ceiling"] > 0 and res["ratios"]["uncached_over_ceiling"] > 0
    elif bench == "registration":
        for case in ("first", "unchanged", "changed"):
            assert res["by_topics"]["50"][case]["client_ms"] > 0
            assert res["by_topics"]["50"][case]["redis_ms"] > 0
    elif bench == "heartbeat":
        assert 0 < res["sequential"]["p50_us"] <= res["sequential"]["p99_us"]
        if "concurrent" in res:
            assert res["concurrent"]["rps"] > 0 and res["concurrent"]["errors"] == 0
    elif bench == "scanner_pass":
        assert res["cases"]["50/5"]["removed"] == [5]
        assert set(res["cases"]["50/0"]["removed"]) == {0}
        assert all(c["pass_ms"] > 0 for c in res["cases"].values())
    elif bench == "redis_memory":
        assert res["pairs"] == 200 and res["bytes_per_pair"] > 0 and res["memory_usage"]["queue_hash"] > 0
    elif bench == "changing_reads":
        for rate in ("0", "1", "2", "10"):
            assert res["rates"][rate]["rps"] > 0 and res["rates"][rate]["errors"] == 0
    elif bench == "fleet":
        assert res["fleet"]["pairs"] > res["fleet"]["topics"] and res["seeding"]["redis_bytes_per_pair"] > 0
        for rate in ("0", "1", "10"):
            assert res["random_reads"][rate]["rps"] > 0 and res["random_reads"][rate]["errors"] == 0
        # what the change records promise: one topic's change wakes its one watcher, and a
        # group's membership change wakes exactly the watchers of topics naming the group
        watch = res["watch"]
        assert watch["waiting"] == watch["watchers"]
        assert watch["woken_by_one_topic_change"] == 1
        assert watch["woken_by_membership_change"] == watch["watched_topics_of_that_group"]
    elif bench == "scale_workers":
        for mode in res:
            assert set(res[mode]) == {"1", "2"} and all(p["rps"] > 0 for p in res[mode].values())
    assert positive_numbers(res)


def test_report_builds_table_and_plot(tmp_path: Path) -> None:
    """bench/report.py turns result files into the README block and a PNG."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/test installs it)")
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "bench/redis_memory.py", "--quick", "--out", str(out),
                           "--topics", "50", "--brokers", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    readme = tmp_path / "README.md"
    readme.write_text("# Bench\n\nprose kept\n")
    proc = subprocess.run([sys.executable, "bench/report.py", "--results", str(out), "--readme", str(readme)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = readme.read_text()
    assert "prose kept" in text and "| measure | value | unit | note |" in text and "bytes per (topic, broker) pair" in text
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
