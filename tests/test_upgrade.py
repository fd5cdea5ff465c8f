"""Rolling updates on one Redis, with real worker processes.

- The previous release (0.1.0, commit 3fcd6f1; tests/previous_release.py installs it from
  this repository's history with its own locked dependencies) beside this one under a live
  fleet registering over HTTP and over RocketMQ's TCP protocol: a rolling upgrade (old
  workers, old and new, new only), then a rollback (new and old, old only). After each step
  every worker's reads (every topic's route, cluster info, the topic list, a KV namespace)
  equal each other's and the fleet's state within one scan interval; a group of more than
  256 QueueData departs across the switch, a group returns through the older release; no
  ERROR line in either release's log. docs/upgrade.md says what it shows.
- Another key schema version is refused at start (a copy of this tree with its
  SCHEMA_VERSION raised: no release has raised it yet).
- Settings only Python's logging named (WARN, FATAL), which 0.1.0 started with, start this
  release's worker (tests/test_previous_settings.py reads each value).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from service.keys import SCHEMA_VERSION, Keys
from tests import previous_release
from tests.builders import identity, registration
from tests.processes import ROOT, start, wait_http
from tests.redis_server import free_port
from tests.remoting import frames
from tests.remoting.client import RemotingClient
from tests.test_horizontal import canonical
from tests.tables import violations
from tests.waits import until_sync

KEYS = Keys()
SCAN_MS = 2_000
BOUND_S = SCAN_MS / 1000  # one scan interval: how long workers may disagree with the fleet
PERIOD_S = 2.0  # the fleet's registration period (RocketMQ's is 30 s)
NEW = "new"
OLD = "old"


class Worker:
    """A worker of either release, its output in a file (it logs for minutes)."""

    def __init__(self, release: str, redis_url: str, logs: Path, old_venv: Path | None = None) -> None:
        self.release = release
        self.port, self.remoting_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = logs / f"{release}-{self.port}.log"
        env = {"REDIS_URL": redis_url, "RMQ_SCAN_INTERVAL_MS": str(SCAN_MS),
               "RMQ_REMOTING_PORT": str(self.remoting_port)}
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log, "wb") as out:
            if release == OLD:
                assert old_venv is not None
                # none of this checkout: its venv's console script, no PYTHONPATH, another cwd
                self.proc = start([*previous_release.command(old_venv), *args], {**env, "PYTHONPATH": ""},
                                  cwd=logs, output=out)
            else:
                self.proc = start([sys.executable, "-m", "service", *args], env, output=out)
        wait_http(self.url + "/readyz", 60)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def send(self, method: str, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.url + path, data=json.dumps(doc).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def errors(self) -> list[str]:
        return [line for line in self.log.read_text(errors="replace").splitlines()
                if " ERROR " in line or " CRITICAL " in line or "Traceback" in line]


class Fleet:
    """Brokers registering every PERIOD_S, half over HTTP and half over TCP, each through
    the next running worker (a worker that stops: the next registration goes elsewhere), on
    an event loop of its own thread."""

    def __init__(self, workers: Callable[[], list[Worker]], http: list[dict[str, Any]], tcp: list[dict[str, Any]]) -> None:
        self.workers, self.http, self.tcp = workers, http, tcp
        self.failures: list[str] = []
        self.rounds = 0
        self._stop = threading.Event()
        self._picked = 0
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> "Fleet":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _next(self) -> Worker:
        running = [w for w in self.workers() if w.proc.poll() is None]
        self._picked += 1
        return running[self._picked % len(running)]

    async def _run(self) -> None:
        await asyncio.gather(*(self._http_broker(reg) for reg in self.http), *(self._tcp_broker(reg) for reg in self.tcp))

    async def _http_broker(self, reg: dict[str, Any]) -> None:
        while not self._stop.is_set():
            worker = self._next()
            try:
                await asyncio.to_thread(worker.send, "POST", "/v1/brokers/register", reg)
                self.rounds += 1
            except OSError as exc:
                if worker.proc.poll() is None and not self._stopping(worker):
                    self.failures.append(f"HTTP {reg['brokerName']} through {worker.url}: {exc!r}")
            await asyncio.sleep(PERIOD_S)

    async def _tcp_broker(self, reg: dict[str, Any]) -> None:
        client: RemotingClient | None = None
        worker: Worker | None = None
        while not self._stop.is_set():
            try:
                if client is None:
                    worker = self._next()
                    client = await RemotingClient.connect(worker.remoting_port)
                answer = await client.call(frames.register(reg))
                assert answer.code == 0, answer
                self.rounds += 1
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
                # the worker stopped under it: a broker reconnects to the Service's next one
                if worker is not None and worker.proc.poll() is None and not self._stopping(worker):
                    self.failures.append(f"TCP {reg['brokerName']} through {worker.url}")
                client = None
                continue
            await asyncio.sleep(PERIOD_S)
        if client is not None:
            await client.close()

    @staticmethod
    def _stopping(worker: Worker) -> bool:
        return worker.proc.returncode is not None or getattr(worker, "stopping", False)


class Model:
    """What the fleet has registered and what was put in the KV: what every read must show."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}  # brokerName -> its master's registration
        self.kv: dict[str, str] = {}

    def topics(self) -> list[str]:
        return sorted({t for reg in self.groups.values() for t in reg["topicConfigSerializeWrapper"]["topicConfigTable"]})

    def route(self, topic: str) -> Any:
        holding = {n: reg for n, reg in self.groups.items()
                   if topic in reg["topicConfigSerializeWrapper"]["topicConfigTable"]}
        if not holding:
            return None
        return {"brokers": {n: {"0": reg["brokerAddr"]} for n, reg in holding.items()},
                "queues": {n: [4, 4, 6] for n in holding}}

    def cluster(self) -> Any:
        clusters: dict[str, list[str]] = {}
        for n, reg in self.groups.items():
            clusters.setdefault(reg["clusterName"], []).append(n)
        return {"brokers": {n: [reg["clusterName"], {"0": reg["brokerAddr"]}] for n, reg in self.groups.items()},
                "clusters": {c: sorted(ns) for c, ns in clusters.items()}}


def route_shape(answer: Any) -> Any:
    return {"brokers": {b["brokerName"]: b["brokerAddrs"] for b in answer["brokerDatas"]},
            "queues": {q["brokerName"]: [q["readQueueNums"], q["writeQueueNums"], q["perm"]] for q in answer["queueDatas"]}}


def cluster_shape(answer: Any) -> Any:
    return {"brokers": {n: [b["cluster"], b["brokerAddrs"]] for n, b in answer["brokerAddrTable"].items()},
            "clusters": {c: sorted(ns) for c, ns in answer["clusterAddrTable"].items()}}


def view(worker: Worker, topics: list[str]) -> dict[str, Any]:
    """Everything a worker answers about the fleet, as returned (order aside)."""
    routes = {}
    for topic in topics:
        status, answer = worker.get(f"/v1/routes/{topic}")
        routes[topic] = canonical(answer) if status == 200 else status
    return {"routes": routes, "cluster": canonical(worker.get("/v1/cluster")), "topics": canonical(worker.get("/v1/topics")),
            "kv": worker.get("/v1/kv/UPGRADE")}


def differences(workers: list[Worker], model: Model, topics: list[str]) -> list[str]:
    """What any worker answers otherwise than the model, or than the first worker: [] when
    all agree."""
    views = [(w, view(w, topics)) for w in workers]
    out = []
    expected_topics = model.topics()
    for worker, seen in views:
        name = f"{worker.release} {worker.url}"
        for topic in topics:
            want, got = model.route(topic), seen["routes"][topic]
            shown = got if isinstance(got, int) else route_shape(got)
            if (want is None and got != 404) or (want is not None and shown != want):
                out.append(f"{name}: route {topic}: {shown} (expected {want or 404})")
        status, cluster = seen["cluster"]
        if cluster_shape(cluster) != model.cluster():
            out.append(f"{name}: cluster {cluster_shape(cluster)} (expected {model.cluster()})")
        if seen["topics"][1]["topicList"] != expected_topics:
            out.append(f"{name}: topic list of {len(seen['topics'][1]['topicList'])} (expected {len(expected_topics)})")
        kv = seen["kv"][1]["table"] if seen["kv"][0] == 200 else {}
        if kv != model.kv:
            out.append(f"{name}: KV {kv} (expected {model.kv})")
    first = views[0][1]
    for worker, seen in views[1:]:
        if seen != first:
            which = [k for k in first if seen[k] != first[k]]
            out.append(f"{worker.release} {worker.url} answers otherwise than {views[0][0].url} in {which}")
    return out


@pytest.fixture(scope="module")
def old_venv() -> Path:
    return previous_release.venv()


@pytest.fixture
def logs() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rmq-upgrade-") as d:
        yield Path(d)


def group(name: str, cluster: str, addr: str, topics: list[str]) -> dict[str, Any]:
    return registration(addr=addr, name=name, cluster=cluster, topics=topics)


def test_a_rolling_upgrade_from_the_previous_release_and_a_rollback_agree_under_a_live_fleet(
        own_redis: Any, old_venv: Path, logs: Path) -> None:
    redis_url = own_redis.url
    r = redis.Redis.from_url(redis_url)
    http = [group(f"http-{g}", f"Cluster{g % 2}", f"10.1.{g}.1:10911", [f"HT{g}-{i}" for i in range(8)] + ["Shared"])
            for g in range(6)]
    tcp = [group(f"tcp-{g}", f"Cluster{g % 2}", f"10.2.{g}.1:10911", [f"TT{g}-{i}" for i in range(8)] + ["Shared"])
           for g in range(6)]
    # past the 256-QueueData removal rule: its departure is collected after the fact by this release
    big = group("big", "Cluster0", "10.3.0.1:10911", [f"Big-{i}" for i in range(300)])
    returning = group("returning", "Cluster1", "10.3.1.1:10911", [f"Back-{i}" for i in range(20)])
    model = Model()
    for reg in (*http, *tcp, big, returning):
        model.groups[reg["brokerName"]] = reg
    topics = [*model.topics(), "NoSuchTopic"]

    workers: list[Worker] = []
    everyone: list[Worker] = []
    timings: dict[str, float] = {}

    def add(release: str) -> Worker:
        w = Worker(release, redis_url, logs, old_venv)
        workers.append(w)
        everyone.append(w)
        return w

    def retire(w: Worker) -> None:
        w.stopping = True  # type: ignore[attr-defined]
        workers.remove(w)
        w.stop()

    def agree(step: str, bound_s: float = BOUND_S) -> None:
        began = time.monotonic()
        last: list[str] = []

        def settled() -> bool:
            nonlocal last
            last = differences(workers, model, topics)
            return not last
        try:
            until_sync(settled, bound_s, step, poll_s=0.1)
        except AssertionError:
            raise AssertionError(f"{step}: still after {bound_s} s:\n" + "\n".join(last[:20])) from None
        timings[step] = time.monotonic() - began

    fleet = Fleet(lambda: workers, http, tcp)
    try:
        first = add(OLD)
        add(OLD)
        assert first.get("/healthz")[1] == {"status": "ok"}  # 0.1.0 names no version
        first.send("POST", "/v1/brokers/register", big)
        first.send("POST", "/v1/brokers/register", returning)
        first.send("PUT", "/v1/kv/UPGRADE/before", {"value": "0.1.0"})
        model.kv["before"] = "0.1.0"
        fleet.start()
        until_sync(lambda: fleet.rounds >= 2 * len(http + tcp), 60, "the fleet's first two rounds")
        agree("0.1.0 only")

        # the upgrade: one new worker beside the old ones, then one old worker out at a time
        new = add(NEW)
        assert new.get("/healthz")[1]["version"] != previous_release.VERSION
        agree("0.1.0 and this release")
        new.send("PUT", "/v1/kv/UPGRADE/during", {"value": "mixed"})
        model.kv["during"] = "mixed"
        # a big group departs through this release while an old worker still serves: hidden
        # at once and collected by this release's workers while the switch goes on
        new.send("POST", "/v1/brokers/unregister", identity(big))
        del model.groups["big"]
        retire(workers[0])
        agree("a departure of 300 QueueData collected across the switch")
        add(NEW)
        retire(workers[0])
        agree("this release only")

        # the rollback: old workers back beside the new, then new ones out
        old = add(OLD)
        agree("this release and 0.1.0")
        # a group leaves, every worker caches its topics' TOPIC_NOT_EXIST, it returns
        # through the older release
        workers[0].send("POST", "/v1/brokers/unregister", identity(returning))
        del model.groups["returning"]
        agree("a group away")
        old.send("POST", "/v1/brokers/register", returning)
        model.groups["returning"] = returning
        agree("a group back through 0.1.0")
        retire(workers[0])
        add(OLD)
        retire(workers[0])
        agree("0.1.0 only again")
        old.send("DELETE", "/v1/kv/UPGRADE/during", {})
        del model.kv["during"]
        agree("a KV change after the rollback")
    finally:
        fleet.stop()
        for w in list(workers):
            w.stop()
    print(f"\nseconds until every worker agreed with the fleet, by step: {timings}")
    assert fleet.failures == [], fleet.failures
    # 0.1.0's register.lua keeps one body digest per address where this release keeps a list:
    # the pointers to this release's digests that it replaced stay behind (docs/upgrade.md)
    assert [v for v in violations(r) if not v.startswith("body digest ")] == []
    # nothing waits to be collected that the older release would never finish
    assert not r.exists(KEYS.leaving)
    for w in everyone:
        assert w.errors() == [], f"{w.release} worker {w.url} logged:\n" + "\n".join(w.errors()[:20])


@pytest.mark.parametrize("level", ["WARN", "FATAL"])
def test_a_worker_started_with_a_logging_alias_the_previous_release_took_serves(level: str, redis_url: str) -> None:
    port = free_port()
    proc = start([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)],
                 {"REDIS_URL": redis_url, "RMQ_LOG_LEVEL": level})
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz")
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    assert "cannot start" not in out and "Traceback" not in out, out


def source_copy(tmp_path: Path, edit: Callable[[Path], None]) -> Path:
    """The worker's code as a later release would ship it: service/ with lua/ inside it
    (where an installed wheel has it), edited by ``edit``."""
    tree = tmp_path / "release"
    shutil.copytree(ROOT / "service", tree / "service", ignore=shutil.ignore_patterns("__pycache__", "analytics"))
    shutil.copytree(ROOT / "lua", tree / "service" / "lua")
    edit(tree)
    return tree


def test_a_worker_of_another_key_schema_version_refuses_to_start_on_stamped_redis(
        redis_url: str, tmp_path: Path) -> None:
    keys = ROOT / "service" / "keys.py"

    def bump(tree: Path) -> None:
        (tree / "service" / "keys.py").write_text(re.sub(r"^SCHEMA_VERSION = \d+$", f"SCHEMA_VERSION = {SCHEMA_VERSION + 1}",
                                                         keys.read_text(), flags=re.M))

    port = free_port()
    current = start([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)],
                    {"REDIS_URL": redis_url, "RMQ_MAX_STALENESS_MS": "0"})
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz")
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/brokers/register", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps(registration("10.0.0.1:10911", "broker-a", topics=["T1"])).encode()), timeout=5).read()
        newer = start([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(free_port())],
                      {"REDIS_URL": redis_url}, cwd=source_copy(tmp_path, bump))
        out = newer.communicate(timeout=30)[0].decode()
        assert newer.returncode == 2 and "Traceback" not in out
        [line] = [line for line in out.splitlines() if "cannot start" in line]
        assert f"key schema version {SCHEMA_VERSION}" in line and f"this worker's is {SCHEMA_VERSION + 1}" in line
        assert "RMQ_KEY_PREFIX=rmq" in line
        # it wrote nothing: the stamp and the running worker's tables are as they were
        r = redis.Redis.from_url(redis_url)
        assert r.get(KEYS.schema) == str(SCHEMA_VERSION).encode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/routes/T1", timeout=5) as resp:
            assert [b["brokerName"] for b in json.loads(resp.read())["brokerDatas"]] == ["broker-a"]
    finally:
        current.terminate()
        current.communicate(timeout=30)
