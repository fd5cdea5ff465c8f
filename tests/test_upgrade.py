"""Rolling updates on one Redis, with real worker processes: a worker of this code beside a
worker of changed code (a copy of the source tree, edited), as during a rolling update.
Same key schema version: both serve the same tables. Another version: refused at start."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from service.keys import SCHEMA_VERSION, Keys
from service.store import load_sources
from tests.builders import registration
from tests.processes import ROOT, start, wait_http
from tests.redis_server import free_port
from tests.tables import violations

KEYS = Keys()


def source_copy(tmp_path: Path, edit: Callable[[Path], None]) -> Path:
    """The worker's code as another release would ship it: service/ with lua/ inside it
    (where an installed wheel has it), edited by ``edit``."""
    tree = tmp_path / "release"
    shutil.copytree(ROOT / "service", tree / "service", ignore=shutil.ignore_patterns("__pycache__", "analytics"))
    shutil.copytree(ROOT / "lua", tree / "service" / "lua")
    edit(tree)
    return tree


class Worker:
    def __init__(self, redis_url: str, cwd: Path = ROOT) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = start([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                          {"REDIS_URL": redis_url, "RMQ_MAX_STALENESS_MS": "0"}, cwd=cwd)

    def post(self, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.url + path, data=json.dumps(doc).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.communicate(timeout=30)[0].decode()
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[0].decode()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    running: list[Worker] = []
    yield running
    for w in running:
        w.stop()


def test_the_first_worker_stamps_redis_with_its_key_schema_version(redis_url: str, workers: list[Worker]) -> None:
    r = redis.Redis.from_url(redis_url)
    assert r.get(KEYS.schema) is None
    workers.append(Worker(redis_url))
    wait_http(workers[0].url + "/readyz")
    assert r.get(KEYS.schema) == str(SCHEMA_VERSION).encode()


def test_workers_with_different_scripts_of_one_schema_version_serve_one_table_set(
        redis_url: str, tmp_path: Path, workers: list[Worker]) -> None:
    marker = "-- a later release's fix, same keys and meaning\n"

    def edit(tree: Path) -> None:
        script = tree / "service" / "lua" / "register.lua"
        script.write_text(script.read_text() + marker)

    old = Worker(redis_url)
    workers.append(old)
    wait_http(old.url + "/readyz")
    old.post("/v1/brokers/register", registration("10.0.0.1:10911", "broker-a", topics=["T1"]))

    new = Worker(redis_url, cwd=source_copy(tmp_path, edit))
    workers.append(new)
    wait_http(new.url + "/readyz")
    r = redis.Redis.from_url(redis_url)
    # the script as service/store.py assembles it: the prelude parts it uses, then its file
    edited = load_sources()["register"] + marker
    edited_sha = hashlib.sha1(edited.encode()).hexdigest()
    assert r.script_exists(edited_sha) == [True], "the new worker runs the edited script"

    # during the rollout: each sees and changes the other's tables
    new.post("/v1/brokers/register", registration("10.0.0.2:10911", "broker-b", topics=["T1", "T2"]))
    assert sorted(b["brokerName"] for b in old.get("/v1/routes/T1")["brokerDatas"]) == ["broker-a", "broker-b"]
    assert [b["brokerName"] for b in new.get("/v1/routes/T2")["brokerDatas"]] == ["broker-b"]
    # the old worker leaves (the rollout's end); the new one serves what it registered
    assert "stopped" in old.stop()
    assert sorted(b["brokerName"] for b in new.get("/v1/routes/T1")["brokerDatas"]) == ["broker-a", "broker-b"]
    assert violations(r) == []


def test_a_worker_of_another_key_schema_version_refuses_to_start_on_stamped_redis(
        redis_url: str, tmp_path: Path, workers: list[Worker]) -> None:
    def bump(tree: Path) -> None:
        keys = tree / "service" / "keys.py"
        keys.write_text(re.sub(r"^SCHEMA_VERSION = \d+$", f"SCHEMA_VERSION = {SCHEMA_VERSION + 1}",
                               keys.read_text(), flags=re.M))

    current = Worker(redis_url)
    workers.append(current)
    wait_http(current.url + "/readyz")
    current.post("/v1/brokers/register", registration("10.0.0.1:10911", "broker-a", topics=["T1"]))

    newer = Worker(redis_url, cwd=source_copy(tmp_path, bump))
    code = newer.proc.wait(timeout=15)
    out = newer.stop()
    assert code != 0 and "Traceback" not in out
    [line] = [line for line in out.splitlines() if "cannot start" in line]
    assert f"key schema version {SCHEMA_VERSION}" in line and f"this worker's is {SCHEMA_VERSION + 1}" in line
    assert "RMQ_KEY_PREFIX=rmq" in line
    # it wrote nothing: the stamp and the running worker's tables are as they were
    r = redis.Redis.from_url(redis_url)
    assert r.get(KEYS.schema) == str(SCHEMA_VERSION).encode()
    assert [b["brokerName"] for b in current.get("/v1/routes/T1")["brokerDatas"]] == ["broker-a"]
