"""bench/tcp_route_query.py keeps working: a tiny run into a temp dir, its result file checked.

A benchmark, not a test: nothing here asserts on a time or a rate, only that the script
finished, wrote its result with the expected keys, positive numbers and no failed answers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_tcp_route_query_bench_runs(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/test installs it)")
    proc = subprocess.run([sys.executable, "bench/tcp_route_query.py", "--quick", "--out", str(tmp_path),
                           "--seconds", "1", "--rounds", "1", "--connections", "4", "--depth", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    doc = json.loads((tmp_path / "tcp_route_query.json").read_text())
    assert doc["bench"] == "tcp_route_query"
    machine = doc["machine"]
    assert machine["cores"] >= 1 and machine["python"] and machine["redis_server"] and machine["date"]
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3
    params = doc["params"]
    assert {"seconds", "rounds", "connections", "depth", "loaders", "load_generator", "route_bytes"} <= params.keys()
    assert params["connections"] == 4 and params["depth"] == 2 and params["route_bytes"] > 0
    assert "asyncio" in params["load_generator"]

    res = doc["results"]
    assert {"summary", "runs"} <= res.keys() and len(res["runs"]) == 1
    s = res["summary"]
    assert s["errors"] == 0
    for key in ("rps", "p50_us", "p99_us", "worker_cpu_share", "rps_per_worker_core"):
        assert isinstance(s[key], (int, float)) and s[key] > 0, (key, s)
    assert s["p50_us"] <= s["p99_us"]
    run = res["runs"][0]
    assert run["requests"] > 0 and run["elapsed_s"] > 0
    assert doc["summary"], "no summary rows for the README table"
    for r in doc["summary"]:
        assert {"metric", "value", "unit"} <= r.keys()
        assert isinstance(r["value"], (int, float)) and r["value"] > 0, r
