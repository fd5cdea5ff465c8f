"""The jobs under spark-submit on a standalone Spark cluster: a master and a worker in JVMs of
their own, started from pyspark's jars, on loopback. spark-submit's ``--master`` and ``--conf``
reach the job, the application runs on the cluster (the master lists it), and the history row
is written by the driver where it was asked to go."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")

import pyarrow.parquet as pq  # noqa: E402
import redis  # noqa: E402

from tests.analytics.seed import DATASET, build_model, write_model  # noqa: E402
from tests.redis_server import free_port  # noqa: E402
from tests.waits import until_sync  # noqa: E402

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent


def master_json(webui: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, int]]:
    if shutil.which("java") is None:
        pytest.skip("no Java runtime")
    # the worker's launcher finds the jars of a Spark home only beside a RELEASE file, which
    # pip's pyspark lacks: a home of links to pyspark's own jars and scripts, plus that file
    home = tmp_path / "spark-home"
    home.mkdir()
    for part in ("jars", "bin"):
        (home / part).symlink_to(SPARK_HOME / part)
    (home / "RELEASE").write_text("pyspark " + pyspark.__version__ + "\n")
    # SPARK_SCALA_VERSION: the launcher otherwise looks for a source build's target folders
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_SCALA_VERSION": "2.12"}
    cp = f"{home}/jars/*"
    port, webui = free_port(), free_port()
    logs = [open(tmp_path / "master.log", "w"), open(tmp_path / "worker.log", "w")]
    procs = [subprocess.Popen(["java", "-Xmx128m", "-cp", cp, "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)],
                              env=env, stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        def answers() -> bool:
            try:
                return bool(master_json(webui))
            except OSError:  # not listening yet
                return False

        until_sync(answers, 120, lambda: "the master's web UI: " + (tmp_path / "master.log").read_text()[-2000:],
                   poll_s=0.5)
        procs.append(subprocess.Popen(
            ["java", "-Xmx128m", "-cp", cp, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
             "--host", "127.0.0.1", "--cores", "1", "--memory", "768m", "--webui-port", str(free_port()),
             "--work-dir", str(tmp_path / "work")], env=env, stdout=logs[1], stderr=subprocess.STDOUT))
        until_sync(lambda: [w for w in master_json(webui).get("workers", []) if w.get("state") == "ALIVE"],
                   120,
                   lambda: "a worker alive: " + (tmp_path / "worker.log").read_text()[-2000:], poll_s=0.5)
        yield f"spark://127.0.0.1:{port}", webui
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def test_spark_submit_runs_the_job_on_the_cluster_and_the_driver_writes_the_history(standalone, redis_url,
                                                                                    tmp_path):
    master, webui = standalone
    client = redis.Redis.from_url(redis_url)
    try:
        write_model(client, build_model())
    finally:
        client.close()
    history, summary = tmp_path / "history", tmp_path / "all.json"
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_PYTHON", None)  # the executors' Python comes from spark.pyspark.python
    env.pop("REDIS_URL", None)
    proc = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--driver-memory", "512m",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=1",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=5", "--conf", f"spark.pyspark.python={sys.executable}",
         str(ROOT / "service" / "analytics" / "job.py"), "all", "--redis-url", redis_url,
         "--out", str(tmp_path / "out"), "--history", str(history), "--no-charts", "--json", str(summary)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(summary.read_text())
    assert result["spark"]["master"] == master  # not local[*]
    assert result["spark"]["shufflePartitions"] == "5"  # --conf reached the session
    assert result["snapshot"]["counts"]["brokerGroups"] == 9 and result["topics"]["counts"]["topics"] == 320
    apps = master_json(webui)
    ran = [a for a in apps["completedapps"] + apps["activeapps"] if a["id"] == result["spark"]["applicationId"]]
    assert ran and ran[0]["name"] == "rmq-registry-analytics"
    rows = pq.read_table(history).to_pylist()
    assert len(rows) == 1 and rows[0]["dataset"] == DATASET and rows[0]["brokerGroups"] == 9
