"""The TCP benches keep working: tiny runs into a temp dir, their result files checked.

Benchmarks, not tests: nothing here asserts on a time or a rate, only that each script
finished, wrote its result with the expected keys, positive numbers and no failed answers,
and compared what it was given. Without a Java NameServer (the default) the benches say so
and measure the registry alone; with RMQ_BENCH_JAVA_NAMESRV_HOME naming a RocketMQ 4.9.8
NameServer laid out as DIR/lib/*.jar, the Java tests run it too (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import broker_requests as br
from bench.common import have_wrk
from service.remoting import bodies

ROOT = Path(__file__).resolve().parent.parent
JAVA_ENV = "RMQ_BENCH_JAVA_NAMESRV_HOME"
QUICK = {
    "tcp_route_query": ["--seconds", "1", "--rounds", "1", "--connections", "4", "--depth", "2"],
    "tcp_registration": ["--sizes", "50", "--reps", "1"],
    "tcp_reads_during_registration": ["--brokers", "2", "--topics", "100", "--reps", "1"],
    "tcp_fleet": ["--storm"],
    "tcp_split": [],
}


def run_bench(bench: str, tmp_path: Path, java: bool, *extra: str) -> tuple[dict[str, Any], str]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/test installs it)")
    env = dict(os.environ)
    if not java:
        env.pop(JAVA_ENV, None)
    proc = subprocess.run([sys.executable, f"bench/{bench}.py", "--quick", "--out", str(tmp_path),
                           *QUICK[bench], *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / f"{bench}.json").read_text())
    assert doc["bench"] == bench
    machine = doc["machine"]
    assert machine["cores"] >= 1 and machine["python"] and machine["redis_server"] and machine["date"]
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3
    assert doc["summary"], "no summary rows for the README table"
    for r in doc["summary"]:
        assert {"metric", "value", "unit"} <= r.keys()
        assert isinstance(r["value"], (int, float)) and r["value"] > 0, r
    return doc, proc.stdout


def java_home() -> str:
    home = os.environ.get(JAVA_ENV)
    if not home:
        pytest.skip(f"no Java NameServer: set {JAVA_ENV} to Apache RocketMQ 4.9.8's binary distribution, unpacked "
                    "(rocketmq-all-4.9.8-bin-release.zip from https://rocketmq.apache.org/download)")
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    return home


def ratio_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["summary"] if r["metric"].endswith("/ Java")]


# ---------------------------------------------------------------------- the loader's bodies
@pytest.mark.parametrize("form", br.FORMS)
def test_loader_bodies_read_back_as_the_topics_sent(form: str) -> None:
    """Each of the loader's forms carries the broker's topic table (read by the registry's decoder)."""
    table = br.topics("T", 3)
    frame = br.register_frame(form, "b", "10.0.0.1:10911", 0, table, br.data_version(4), 1)
    header_len = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    header = json.loads(frame[8:8 + header_len])
    body = frame[8 + header_len:]
    assert header["extFields"]["bodyCrc32"] == str(bodies.crc32(body))
    decoded = bodies.register_broker_body(body, header["extFields"]["compressed"] == "true", header["version"])
    wrapper = decoded["topicConfigSerializeWrapper"]
    assert wrapper["dataVersion"]["counter"] == 4
    assert {name: (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"])
            for name, tc in wrapper["topicConfigTable"].items()} == {name: (8, 8, 6) for name in table}


# ---------------------------------------------------------------------- without Java
def test_tcp_route_query_bench_runs(tmp_path: Path) -> None:
    doc, out = run_bench("tcp_route_query", tmp_path, java=False)
    assert "no Java NameServer given" in out
    params = doc["params"]
    assert {"seconds", "rounds", "connections", "depth", "loaders", "load_generator", "route_bytes", "cores"} \
        <= params.keys()
    assert params["connections"] == 4 and params["depth"] == 2 and params["route_bytes"]["registry"] > 0
    assert list(params["targets"]) == ["registry"]
    s = doc["results"]["summary"]["registry"]
    assert s["errors"] == 0
    for key in ("rps", "p50_us", "p99_us", "server_cpu_share", "rps_per_server_cpu_s"):
        assert s[key]["median"] > 0, (key, s)
    assert s["p50_us"]["median"] <= s["p99_us"]["median"]
    assert not ratio_rows(doc)


def test_tcp_registration_bench_runs(tmp_path: Path) -> None:
    doc, out = run_bench("tcp_registration", tmp_path, java=False)
    assert "no Java NameServer given" in out
    by_form = doc["results"]["by_form"]
    assert set(by_form) == set(br.FORMS)
    for form in br.FORMS:
        for case in ("first", "unchanged", "changed", "added"):
            assert list(by_form[form]["50"][case]) == ["registry"]
            assert len(by_form[form]["50"][case]["registry"]["client_ms"]) == 1
    assert not ratio_rows(doc)


def test_tcp_fleet_bench_runs(tmp_path: Path) -> None:
    doc, out = run_bench("tcp_fleet", tmp_path, java=False)
    assert "no Java NameServer given" in out
    by_form = doc["results"]["by_form"]
    assert set(by_form) == {"json", "json5"}
    for form in by_form.values():
        (turn,) = form["registry"]
        assert turn["cold_start_s"] > 0 and turn["cold_start_cpu_s"] > 0 and turn["steady_cpu_s_per_1000"] > 0
        # the close storm: every closed member's routes gone, the live group read meanwhile
        assert 0 < turn["storm_gone_s"] < 60 and turn["storm_live_reads"] > 0
        assert turn["storm_live_read_failures"] == 0 and "storm_longest_script_ms" in turn
    assert doc["params"]["members"] == 22 and doc["params"]["pairs"] > 0
    assert not ratio_rows(doc)


def test_tcp_split_bench_runs_and_the_unchanged_parts_take_the_unchanged_path(tmp_path: Path) -> None:
    doc, out = run_bench("tcp_split", tmp_path, java=False)
    assert "no Java NameServer given" in out
    (turn,) = doc["results"]["by_target"]["registry"]
    assert turn["wall_ms_per_round"] > 0
    assert turn["unchanged_share"] == 1.0  # after the warm-up rounds every part is unchanged
    assert not ratio_rows(doc)


def test_tcp_reads_during_registration_bench_runs(tmp_path: Path) -> None:
    doc, out = run_bench("tcp_reads_during_registration", tmp_path, java=False)
    assert "no Java NameServer given" in out
    runs = doc["results"]["runs"]
    assert set(runs) == {"registry same worker", "registry other worker"}
    for seat in runs.values():
        assert seat[0]["errors"] == 0 and len(seat[0]["register_ms"]) == 4
        assert seat[0]["cache_hits"] > 0 and seat[0]["cache_misses"] is not None  # the reader's worker's counts


def test_a_java_home_without_jars_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "bench/tcp_registration.py", "--quick", "--out", str(tmp_path),
                           "--java-namesrv-home", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == f"Java NameServer home {str(tmp_path)!r} " \
        f"(--java-namesrv-home / {JAVA_ENV}): no lib/*.jar in it"
    assert not (tmp_path / "tcp_registration.json").exists()


# ---------------------------------------------------------------------- with Java
def test_tcp_registration_bench_compares_with_java(tmp_path: Path) -> None:
    java_home()
    doc, _ = run_bench("tcp_registration", tmp_path, java=True)
    by_form = doc["results"]["by_form"]
    for form in br.FORMS:
        expected = {"registry", "java"} if br.JAVA_READS[form] else {"registry"}
        assert set(by_form[form]["50"]["first"]) == expected, form
    # one ratio per case for each form Java reads
    assert len(ratio_rows(doc)) == 4 * sum(br.JAVA_READS.values())


def test_tcp_route_query_bench_compares_with_java(tmp_path: Path) -> None:
    java_home()
    doc, _ = run_bench("tcp_route_query", tmp_path, java=True)
    assert doc["results"]["summary"]["java"]["errors"] == 0
    assert doc["params"]["route_bytes"]["java"] > 0
    # and, with wrk installed, the same route over HTTP (cached) against Java's TCP figure
    http = ["HTTP route (cached) per server CPU-second (Java over TCP): registry / Java",
            f"HTTP route (cached, {doc['params']['depth']} pipelined) per server CPU-second (Java over TCP): "
            "registry / Java"] if have_wrk() else []
    assert [r["metric"] for r in ratio_rows(doc)] == ["TCP route (105) per server CPU-second: registry / Java", *http]


def test_tcp_reads_during_registration_bench_compares_with_java(tmp_path: Path) -> None:
    java_home()
    doc, _ = run_bench("tcp_reads_during_registration", tmp_path, java=True)
    assert doc["results"]["runs"]["java"][0]["errors"] == 0
    assert any(r["metric"].endswith("p99.9: registry / Java") for r in ratio_rows(doc))
