"""The job as an operator runs it, a process of its own: configuration and store errors come
before Spark starts, in one line on stderr; stdout holds only the JSON summary, under
spark-submit (which merges the Python driver's stdout and stderr into its own stdout) and
run directly (where the JVM pyspark starts inherits the job's stdout)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")

import redis  # noqa: E402

from tests.analytics.seed import DATASET, build_model, write_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
# a refusal before Spark is about a second (the Redis timeout) plus the interpreter's start;
# this bound only catches a run that went on to start Spark (10-20 s) or hung
WELL_BEFORE_SPARK_S = 8.0


def job_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYSPARK_GATEWAY_PORT",
                                                             "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS")}
    env.update(PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


@pytest.fixture
def no_spark_home(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A SPARK_HOME whose spark-submit only leaves a mark: a job that starts Spark leaves it."""
    home = tmp_path / "no-spark"
    (home / "bin").mkdir(parents=True)
    mark = tmp_path / "spark-was-started"
    script = home / "bin" / "spark-submit"
    script.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    script.chmod(0o755)
    return job_env(SPARK_HOME=str(home)), mark


@pytest.fixture
def silent_redis() -> Iterator[int]:
    """A port that accepts connections and never answers (a Redis frozen, a wrong service)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def run_job(args: list[str], env: dict[str, str], timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "service.analytics", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - started


def refused_before_spark(case: str, proc: subprocess.CompletedProcess, elapsed: float, mark: Path) -> str:
    print(f"{case}: refused in {elapsed:.2f} s")  # the figure for the notes (pytest -s)
    assert not mark.exists(), "Spark was started"
    assert proc.returncode != 0 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert elapsed < WELL_BEFORE_SPARK_S
    return lines[0]


def test_no_redis_url_is_refused_before_spark_starts(no_spark_home):
    env, mark = no_spark_home
    proc, elapsed = run_job(["all", "--no-out"], env)
    line = refused_before_spark("no REDIS_URL", proc, elapsed, mark)
    assert proc.returncode == 2 and line.startswith("error: no Redis to read: set REDIS_URL")


def test_a_wrong_password_is_refused_before_spark_starts(no_spark_home, redis_url):
    env, mark = no_spark_home
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "analytics", "on", ">right", "~*", "+@all")
    try:
        env["REDIS_URL"] = redis_url.replace("redis://", "redis://analytics:Wr0ng@")
        proc, elapsed = run_job(["snapshot", "--no-out"], env)
    finally:
        admin.execute_command("ACL", "DELUSER", "analytics")
        admin.close()
    line = refused_before_spark("wrong password", proc, elapsed, mark)
    assert "refused the credentials of REDIS_URL" in line and "Wr0ng" not in line


def test_an_unreachable_redis_is_refused_before_spark_starts(no_spark_home):
    env, mark = no_spark_home
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    proc, elapsed = run_job(["snapshot", "--no-out"], env)
    line = refused_before_spark("unreachable (port closed)", proc, elapsed, mark)
    assert line.startswith(f"error: snapshot: cannot reach redis 127.0.0.1:{port} db 0 (REDIS_URL)")


def test_a_redis_that_never_answers_is_refused_after_its_timeout_before_spark_starts(no_spark_home, silent_redis):
    env, mark = no_spark_home
    env["REDIS_URL"] = f"redis://127.0.0.1:{silent_redis}/0"
    proc, elapsed = run_job(["snapshot", "--no-out"], env)
    line = refused_before_spark("never answers (1 s timeout)", proc, elapsed, mark)
    assert line.startswith(f"error: snapshot: cannot reach redis 127.0.0.1:{silent_redis} db 0 (REDIS_URL)")
    assert elapsed >= 1.0, "the Redis timeout is a second"


def test_an_empty_store_is_refused_before_spark_starts(no_spark_home, redis_url):
    env, mark = no_spark_home
    env["REDIS_URL"] = redis_url
    proc, elapsed = run_job(["all", "--no-out"], env)
    line = refused_before_spark("empty store", proc, elapsed, mark)
    assert "no broker group under {rmq}" in line and "--allow-empty" in line


def test_a_store_of_another_data_set_than_the_history_is_refused_before_spark_starts(no_spark_home, redis_url,
                                                                                      tmp_path):
    env, mark = no_spark_home
    from service.analytics.history import append_history
    from service.analytics.jobs import Context

    held = {"redisTimeMs": 1_795_305_648_982, "prefix": "rmq", "reader": "index",
            "source": {"host": "h", "port": 6379, "db": 0, "dataset": "aaaa"},
            "counts": dict.fromkeys(("clusters", "brokerGroups", "members", "masters", "slaves", "liveBrokers",
                                     "groupsWithoutMaster", "flaggedBrokers", "membersWithoutLiveRow"), 1),
            "memberAddrs": []}
    append_history(Context(spark=None, history=tmp_path / "h"), held, None)
    client = redis.Redis.from_url(redis_url)
    try:
        write_model(client, build_model())
    finally:
        client.close()
    env["REDIS_URL"] = redis_url
    proc, elapsed = run_job(["snapshot", "--no-out", "--history", str(tmp_path / "h")], env)
    line = refused_before_spark("history of another data set", proc, elapsed, mark)
    assert "holds data set aaaa, but redis" in line and f"is data set {DATASET}" in line


# ------------------------------------------------------------------ stdout, for the JSON
def log4j_to_stdout(folder: Path) -> Path:
    """A site's log4j2.properties that sends Spark's log to SYSTEM_OUT."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "log4j2.properties").write_text(
        "rootLogger.level = info\nrootLogger.appenderRef.stdout.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\n"
        "appender.console.target = SYSTEM_OUT\nappender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d %p %c{1}: %m%n\n")
    return folder


@pytest.mark.spark
def test_run_directly_stdout_holds_only_the_json_whatever_spark_s_log4j_says(seeded, tmp_path):
    _, _, url = seeded
    # a JVM that writes to its stdout for sure: the GC log at start ("Using G1"), beside
    # Spark's log4j sent to SYSTEM_OUT
    env = job_env(SPARK_HOME=str(SPARK_HOME), REDIS_URL=url, SPARK_CONF_DIR=str(log4j_to_stdout(tmp_path / "conf")),
                  PYSPARK_PYTHON=sys.executable,
                  PYSPARK_SUBMIT_ARGS="--driver-java-options -Xlog:gc:stdout pyspark-shell")
    proc, _ = run_job(["snapshot", "--master", "local[1]", "--out", str(tmp_path / "out"), "--json", "-"], env,
                      timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # the whole of stdout: nothing before or after the JSON
    assert summary["counts"]["brokerGroups"] == 9
    assert "[info][gc] Using " in proc.stderr, "what the JVM wrote to its stdout went to stderr"
    assert "[snapshot] done in" in proc.stderr


def spark_submit(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[1]", "--driver-memory", "512m",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
         str(ROOT / "service" / "analytics" / "job.py"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.spark
def test_under_spark_submit_stdout_holds_only_the_json(seeded, tmp_path):
    _, _, url = seeded
    env = job_env(SPARK_HOME=str(SPARK_HOME), REDIS_URL=url, PYSPARK_PYTHON=sys.executable)
    proc = spark_submit(["all", "--out", str(tmp_path / "out"), "--json", "-"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout)  # the whole of stdout
    assert summary["snapshot"]["counts"]["brokerGroups"] == 9 and summary["topics"]["counts"]["topics"] == 320
    assert summary["spark"]["master"] == "local[1]"
    for line in ("[all] done in", "checked redis 127.0.0.1:"):
        assert line in proc.stderr, line


@pytest.mark.spark
def test_under_spark_submit_a_refusal_is_one_line_on_stderr_and_nothing_on_stdout(redis_url, tmp_path):
    env = job_env(SPARK_HOME=str(SPARK_HOME), REDIS_URL=redis_url, PYSPARK_PYTHON=sys.executable)
    proc = spark_submit(["all", "--no-out", "--json", "-"], env, tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "no broker group under {rmq}" in errors[0], proc.stderr[-3000:]
