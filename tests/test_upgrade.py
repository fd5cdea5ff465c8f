"""Rolling updates on one Redis, with real worker processes.

- The previous release (0.1.0, commit 3fcd6f1; tests/previous_release.py installs it from
  this repository's history with its own locked dependencies) beside this one under a live
  fleet registering over HTTP and over RocketMQ's TCP protocol: a rolling upgrade (old
  workers, old and new, new only), then a rollback (new and old, old only). After each step
  every worker's reads over both fronts (routes, cluster info, the whole topic list, a KV
  namespace) equal each other's and the fleet's within one scan interval; a group of more
  than 256 QueueData departs across the switch, groups return through the older release;
  no ERROR line in either release's log. docs/upgrade.md says what it shows. The same at
  README's fleet size (tests/fleet_process.py: 600 brokers, 108,313 topics, ~1,000,000
  pairs), with groups of ~3,300 and ~11,200 QueueData departing across the switches.
- Every setting value tried that 0.1.0 took (run through its own parser and logging)
  starts this release, or is refused in one line saying what to write instead; WARN and
  FATAL start a real worker (tests/test_previous_settings.py: the same values, quick).
- Another key schema version is refused at start (a copy of this tree with its
  SCHEMA_VERSION raised: no release has raised it yet), and the first worker stamps an
  empty Redis with its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from service.config import ENV, Settings, StartupError
from service.keys import SCHEMA_VERSION, Keys
from service.remoting import codec, codes
from tests import fleet_process, previous_release
from tests.builders import identity, registration, topic_config
from tests.processes import ROOT, start, wait_http
from tests.redis_server import free_port
from tests.remoting import frames
from tests.remoting.client import RemotingClient, request
from tests.settings_env import settings_from
from tests.test_horizontal import canonical
from tests.tables import violations
from tests.waits import until_sync

KEYS = Keys()
# one scan interval, the default both releases run with: how long workers may disagree with
# the fleet (a collection another worker left is finished by the next scan)
BOUND_S = Settings().scan_interval_ms / 1000
PERIOD_S = 2.0  # the fleet's registration period (RocketMQ's is 30 s)
NEW = "new"
OLD = "old"
KV = "UPGRADE"  # the KV namespace the test writes
WIDE = 20_001  # the first topic count past a topic list's page of 20,000 (service/registry.py LIST_SLICES)
REMOVAL_RULE = 256  # lua/_groups.lua LEAVE_NOW_MAX: a group leaving with more QueueData is hidden, then collected


class Worker:
    """A worker of either release, its output in a file (it logs for minutes)."""

    def __init__(self, release: str, redis_url: str, logs: Path, old_venv: Path | None = None) -> None:
        self.release = release
        self.stopping = False  # retired: the fleet's requests to it may fail
        self.port, self.remoting_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = logs / f"{release}-{self.port}.log"
        env = {"REDIS_URL": redis_url, "RMQ_REMOTING_PORT": str(self.remoting_port)}
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log, "wb") as out:
            if release == OLD:
                assert old_venv is not None
                # none of this checkout: its venv's console script, no PYTHONPATH, another cwd
                self.proc = start([*previous_release.command(old_venv), *args], {**env, "PYTHONPATH": ""},
                                  cwd=logs, output=out)
            else:
                self.proc = start([sys.executable, "-m", "service", *args], env, output=out)
        wait_http(self.url + "/readyz", 120)  # two releases starting on two loaded cores

    def get(self, path: str) -> tuple[int, Any]:
        try:
            # a whole topic list of 108,313 names on a loaded machine: seconds, not ten
            with urllib.request.urlopen(self.url + path, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def send(self, method: str, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        """The answer to a change (every one sent here is idempotent), sent again after a 503,
        as a client does: a worker answers 503 when Redis does not answer within its timeout,
        and 0.1.0's is 1 s, which the fleet's seeding of ~1,000,000 pairs can outlast."""
        req = urllib.request.Request(self.url + path, data=json.dumps(doc).encode(), method=method,
                                     headers={"Content-Type": "application/json"})

        def answered() -> tuple[dict[str, Any]] | None:  # in a tuple: an empty answer is one too
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return (json.loads(resp.read()),)
            except urllib.error.HTTPError as err:
                if err.code != 503:
                    raise
                return None

        return until_sync(answered, 60, f"{method} {path} answered but 503", poll_s=0.5)[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def errors(self) -> list[str]:
        """Its ERROR and CRITICAL lines, each with the traceback lines under it."""
        out: list[str] = []
        for line in self.log.read_text(errors="replace").splitlines():
            if " ERROR " in line or " CRITICAL " in line:
                out.append(line)
            elif out and not re.match(r"\d{4}-\d\d-\d\d ", line):
                out[-1] += "\n" + line
        return out


class Fleet:
    """Brokers registering every PERIOD_S, half over HTTP and half over TCP, each through
    the next running worker (a worker that stops: the next registration goes elsewhere), on
    an event loop of its own thread."""

    def __init__(self, workers: Callable[[], list[Worker]], http: list[dict[str, Any]], tcp: list[dict[str, Any]]) -> None:
        self.workers, self.http, self.tcp = workers, http, tcp
        self.failures: list[str] = []
        self.refused: list[str] = []  # registrations answered 503
        self.unanswered: set[str] = set()  # brokers whose last registration was refused
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
                self.unanswered.discard(reg["brokerName"])
            except urllib.error.HTTPError as exc:
                # 503 (Redis slower than RMQ_REDIS_TIMEOUT_MS on loaded cores, or a worker
                # draining): a broker registers again at its next round, as RocketMQ's do
                body = exc.read().decode(errors="replace")
                if exc.code != 503:
                    self.failures.append(f"HTTP {reg['brokerName']} through {worker.url}: {exc.code} {body}")
                self.refused.append(f"{reg['brokerName']} through {worker.url}: {body}")
                self.unanswered.add(reg["brokerName"])
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
        return worker.proc.returncode is not None or worker.stopping


class Model:
    """What the fleet has registered and what was put in the KV: what every read must show."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}  # brokerName -> its master's registration
        self.slaves: dict[str, dict[str, str]] = {}  # brokerName -> its slaves' {brokerId: address}
        self.kv: dict[str, str] = {}

    def table(self, name: str) -> dict[str, Any]:
        return self.groups[name]["topicConfigSerializeWrapper"]["topicConfigTable"]

    def addrs(self, name: str) -> dict[str, str]:
        return {"0": self.groups[name]["brokerAddr"], **self.slaves.get(name, {})}

    def topics(self) -> list[str]:
        return sorted({t for name in self.groups for t in self.table(name)})

    def route(self, topic: str) -> Any:
        holding = [n for n in self.groups if topic in self.table(n)]
        if not holding:
            return None
        return {"brokers": {n: self.addrs(n) for n in holding},
                "queues": {n: [self.table(n)[topic][k] for k in ("readQueueNums", "writeQueueNums", "perm")]
                           for n in holding}}

    def cluster(self) -> Any:
        clusters: dict[str, list[str]] = {}
        for n, reg in self.groups.items():
            clusters.setdefault(reg["clusterName"], []).append(n)
        return {"brokers": {n: [reg["clusterName"], self.addrs(n)] for n, reg in self.groups.items()},
                "clusters": {c: sorted(ns) for c, ns in clusters.items()}}


def route_shape(answer: Any) -> Any:
    return {"brokers": {b["brokerName"]: b["brokerAddrs"] for b in answer["brokerDatas"]},
            "queues": {q["brokerName"]: [q["readQueueNums"], q["writeQueueNums"], q["perm"]] for q in answer["queueDatas"]}}


def cluster_shape(answer: Any) -> Any:
    if not isinstance(answer, dict):
        return answer  # the status or code of a read that failed
    return {"brokers": {n: [b["cluster"], b["brokerAddrs"]] for n, b in answer["brokerAddrTable"].items()},
            "clusters": {c: sorted(ns) for c, ns in answer["clusterAddrTable"].items()}}


def http_view(worker: Worker, topics: list[str]) -> dict[str, Any]:
    """What a worker answers about the fleet over HTTP: each route (its status when not
    200), the cluster info, the topic list, the KV namespace ({} when there is none)."""
    routes = {}
    for topic in topics:
        status, answer = worker.get(f"/v1/routes/{topic}")
        routes[topic] = canonical(answer) if status == 200 else status
    kv, listed, cluster = worker.get(f"/v1/kv/{KV}"), worker.get("/v1/topics"), worker.get("/v1/cluster")
    return {"routes": routes, "cluster": canonical(cluster[1]) if cluster[0] == 200 else cluster[0],
            "topics": sorted(listed[1]["topicList"]) if listed[0] == 200 else listed[0],
            "kv": kv[1]["table"] if kv[0] == 200 else {}}


async def tcp_view(worker: Worker, topics: list[str]) -> dict[str, Any]:
    """The same over RocketMQ's protocol, as a client and mqadmin read it (an answer's
    code when not SUCCESS)."""
    client = await RemotingClient.connect(worker.remoting_port)
    try:
        async def read(cmd: Any) -> Any:
            answer = await client.call(cmd, timeout=30)
            return canonical(codec.loads(answer.body)) if answer.code == codes.SUCCESS else answer.code

        routes = {topic: await read(frames.route(topic)) for topic in topics}
        kv = await read(request(codes.GET_KVLIST_BY_NAMESPACE, {"namespace": KV}))
        listed = await read(request(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return {"routes": routes, "cluster": await read(request(codes.GET_BROKER_CLUSTER_INFO)),
                "topics": sorted(listed["topicList"]) if isinstance(listed, dict) else listed,
                "kv": kv["table"] if isinstance(kv, dict) else {}}
    finally:
        await client.close()


def differences(workers: list[Worker], model: Model, topics: list[str]) -> list[str]:
    """What any worker answers otherwise than the model, or than the first worker, on
    either front: [] when all agree."""
    # every worker and front read at once: a round at fleet size stays within the interval
    with ThreadPoolExecutor(2 * len(workers)) as pool:
        reads = [(w, pool.submit(http_view, w, topics), pool.submit(lambda w=w: asyncio.run(tcp_view(w, topics))))
                 for w in workers]
        views = [(w, {"HTTP": http.result(), "TCP": tcp.result()}) for w, http, tcp in reads]
    routes = {topic: model.route(topic) for topic in topics}
    cluster, listed = model.cluster(), model.topics()
    out = []
    for worker, fronts in views:
        for front, seen in fronts.items():
            name = f"{worker.release} {worker.url} over {front}"
            for topic in topics:
                want, got = routes[topic], seen["routes"][topic]
                shown = got if isinstance(got, int) else route_shape(got)
                if (want is None and isinstance(got, dict)) or (want is not None and shown != want):
                    out.append(f"{name}: route {topic}: {shown} (expected {want or 'TOPIC_NOT_EXIST'})")
            if cluster_shape(seen["cluster"]) != cluster:
                out.append(f"{name}: cluster {cluster_shape(seen['cluster'])} (expected {cluster})")
            if seen["topics"] != listed:
                shown = f"of {len(seen['topics'])}" if isinstance(seen["topics"], list) else f"answered {seen['topics']}"
                out.append(f"{name}: topic list {shown} (expected {len(listed)} topics)")
            if seen["kv"] != model.kv:
                out.append(f"{name}: KV {seen['kv']} (expected {model.kv})")
    first_worker, first = views[0]
    for worker, fronts in views[1:]:
        for front, seen in fronts.items():
            which = [k for k in seen if seen[k] != first[front][k]]
            if which:
                out.append(f"{worker.release} {worker.url} answers otherwise than {first_worker.url} over {front}: {which}")
    return out


class Rollout:
    """The workers of a rollout on one Redis, in the order they came, and the check after
    each step: every worker agrees with the model on both fronts."""

    def __init__(self, redis_url: str, logs: Path, old_venv: Path, model: Model, topics: list[str],
                 serve: Callable[[list[Worker]], None] = lambda workers: None) -> None:
        self.redis_url, self.logs, self.old_venv = redis_url, logs, old_venv
        self.model, self.topics = model, topics  # what is read: `topics` may grow
        self.serve = serve  # told the workers serving whenever they change (a Service's endpoints)
        self.workers: list[Worker] = []  # serving
        self.everyone: list[Worker] = []  # every one started: their logs are checked at the end
        self.timings: dict[str, tuple[float, float]] = {}  # step -> when its agreeing round began, ended

    def add(self, release: str) -> Worker:
        w = Worker(release, self.redis_url, self.logs, self.old_venv)
        self.workers.append(w)
        self.everyone.append(w)
        self.serve(self.workers)
        return w

    def retire(self, w: Worker) -> None:
        """Out of the Service's endpoints, then SIGTERM (a terminating pod)."""
        w.stopping = True
        self.workers.remove(w)
        self.serve(self.workers)
        w.stop()

    def agree(self, step: str) -> None:
        """Every worker agrees on both fronts in a round of reads begun within one scan
        interval of the step (a round begun before may end past it)."""
        began = time.monotonic()
        last: list[str] = []

        def settled() -> bool:
            nonlocal last
            round_began = time.monotonic()
            last = differences(self.workers, self.model, self.topics)
            self.timings[step] = (round(round_began - began, 2), round(time.monotonic() - began, 2))
            return not last
        try:
            until_sync(settled, BOUND_S, step, poll_s=0.05)
        except AssertionError:
            raise AssertionError(f"{step}: still after {BOUND_S} s:\n" + "\n".join(last[:20])) from None

    def logged_errors(self) -> dict[str, list[str]]:
        """Each worker's ERROR lines but 0.1.0's known one at its stop."""
        out = {}
        for w in self.everyone:
            errors = [e for e in w.errors() if not (w.release == OLD and known_0_1_0_stop_line(e))]
            if errors:
                out[f"{w.release} worker {w.url}"] = errors
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
    # the first size past the 256-QueueData removal rule: its departure is collected after
    # the fact, by this release only
    big = group("big", "Cluster0", "10.3.0.1:10911", [f"Big-{i}" for i in range(REMOVAL_RULE + 1)])
    big_back = group("big-back", "Cluster1", "10.3.2.1:10911", [f"BigBack-{i}" for i in range(REMOVAL_RULE + 1)])
    returning = group("returning", "Cluster1", "10.3.1.1:10911", [f"Back-{i}" for i in range(20)])
    gone_old = group("gone-old", "Cluster0", "10.3.3.1:10911", ["GoneOld", "Shared"])
    gone_new = group("gone-new", "Cluster0", "10.3.4.1:10911", ["GoneNew", "Shared"])
    # past the topic lists' page (Registry.LIST_SLICES: 20,000 names) on its own
    wide = group("wide", "Cluster1", "10.3.5.1:10911", [f"Wide-{i}" for i in range(WIDE)])
    model = Model()
    for reg in (*http, *tcp, big, big_back, returning, gone_old, gone_new, wide):
        model.groups[reg["brokerName"]] = reg
    # every topic of the small groups, every 15th of the big ones, every 1000th of the wide
    # one (the topic lists hold them all): a round of reads stays well within the interval
    def sampled(topic: str) -> bool:
        every = 15 if topic.startswith("Big") else 1000 if topic.startswith("Wide") else 1
        return int(topic.rsplit("-", 1)[1]) % every == 0 if every > 1 else True

    topics = [t for t in model.topics() if sampled(t)]
    topics.append("NoSuchTopic")

    rollout = Rollout(redis_url, logs, old_venv, model, topics)
    workers, timings = rollout.workers, rollout.timings
    add, retire, agree = rollout.add, rollout.retire, rollout.agree

    fleet = Fleet(lambda: workers, http, tcp)
    try:
        first = add(OLD)
        add(OLD)
        assert first.get("/healthz")[1] == {"status": "ok"}  # 0.1.0 names no version
        for reg in (big, big_back, returning, gone_old, gone_new, wide):
            first.send("POST", "/v1/brokers/register", reg)
        first.send("PUT", f"/v1/kv/{KV}/before", {"value": "0.1.0"})
        model.kv["before"] = "0.1.0"
        fleet.start()
        until_sync(lambda: fleet.rounds >= 2 * len(http + tcp), 60, "the fleet's first two rounds")
        agree("0.1.0 only")

        # the upgrade: new workers beside the old ones, old ones out one at a time
        n1 = add(NEW)
        assert "version" in n1.get("/healthz")[1]  # this release names itself
        agree("0.1.0 and this release")
        n1.send("PUT", f"/v1/kv/{KV}/during", {"value": "mixed"})
        model.kv["during"] = "mixed"
        # one departure through each release: only this release's scripts record theirs
        workers[0].send("POST", "/v1/brokers/unregister", identity(gone_old))
        n1.send("POST", "/v1/brokers/unregister", identity(gone_new))
        del model.groups["gone-old"], model.groups["gone-new"]
        agree("a departure through each release")
        departed = {d["brokerName"] for d in n1.get("/v1/departures")[1]["departures"]}
        assert "gone-new" in departed and "gone-old" not in departed, departed
        retire(workers[0])
        n2 = add(NEW)
        # a group of 257 QueueData departs through a new worker stopped right after: hidden
        # at once, collected by the other new worker while the switch goes on
        n1.send("POST", "/v1/brokers/unregister", identity(big))
        del model.groups["big"]
        retire(n1)
        agree("257 QueueData departed and collected across the switch")
        retire(workers[0])
        add(NEW)
        agree("this release only")

        # the rollback: old workers back beside the new, then the new ones out
        old = add(OLD)
        agree("this release and 0.1.0")
        # a group leaves, every worker's reads find its topics gone (and cache that), it
        # returns through the older release
        n2.send("POST", "/v1/brokers/unregister", identity(returning))
        del model.groups["returning"]
        agree("a group away")
        old.send("POST", "/v1/brokers/register", returning)
        model.groups["returning"] = returning
        agree("the group back through 0.1.0")
        # a group of 257 QueueData leaves through this release and comes straight back
        # through 0.1.0 (a broker restarting), whatever of it was collected by then
        n2.send("POST", "/v1/brokers/unregister", identity(big_back))
        old.send("POST", "/v1/brokers/register", big_back)
        agree("257 QueueData back through 0.1.0 as they were collected")
        retire(n2)
        add(OLD)
        # what only this release collects is done before its last worker goes
        until_sync(lambda: not r.exists(KEYS.leaving), BOUND_S, f"{KEYS.leaving} empty")
        retire(workers[0])
        agree("0.1.0 only again")
        old.send("DELETE", f"/v1/kv/{KV}/during", {})
        del model.kv["during"]
        agree("a KV change after the rollback")
        until_sync(lambda: not fleet.unanswered, 3 * PERIOD_S, "every refused broker registered again")
    finally:
        fleet.stop()
        for w in list(workers):
            w.stop()
    print(f"\nseconds from each step to the start and end of the round of reads that agreed: {timings}")
    assert fleet.failures == [], fleet.failures
    print(f"registrations refused with 503 and sent again a round later: {fleet.refused}")
    # 0.1.0's register.lua keeps one body digest per address where this release keeps a list:
    # the pointers to this release's digests that it replaced stay behind (docs/upgrade.md)
    assert [v for v in violations(r) if not v.startswith("body digest ")] == []
    assert rollout.logged_errors() == {}


def known_0_1_0_stop_line(error: str) -> bool:
    """0.1.0 stopped while a connection's handler ends: its remoting server cancels the
    handlers again every 0.1 s, a cancel landing as one returns ends its task cancelled, and
    Python 3.11's asyncio.StreamReaderProtocol logs that as an ERROR (its done-callback calls
    task.exception()). Seen once in 21 runs; harmless, and 0.1.0's to keep (docs/upgrade.md)."""
    return ("Exception in callback <function StreamReaderProtocol.connection_made.<locals>.callback" in error
            and error.rstrip().endswith("CancelledError"))


def test_a_collection_left_at_a_rollback_lists_departed_topics_on_the_previous_release_until_a_worker_of_this_one_runs(
        own_redis: Any, old_venv: Path, logs: Path) -> None:
    """What docs/upgrade.md's rollback rule ({rmq}:leaving empty first) prevents, and its
    remedy: the last worker of this release killed while it collects a departed group's
    QueueData leaves them to nobody on 0.1.0, which lists their topics (routes answer
    TOPIC_NOT_EXIST); one worker of this release started again collects them within a scan
    interval."""
    r = redis.Redis.from_url(own_redis.url)
    old, new = Worker(OLD, own_redis.url, logs, old_venv), Worker(NEW, own_redis.url, logs)
    try:
        gone = group("gone", "Cluster0", "10.4.0.1:10911", [f"Gone-{i}" for i in range(10_000)])
        old.send("POST", "/v1/brokers/register", gone)
        old.send("POST", "/v1/brokers/register", group("stays", "Cluster0", "10.4.0.2:10911", ["Stays"]))
        new.send("POST", "/v1/brokers/unregister", identity(gone))
        new.proc.kill()  # a crash mid-collection (20 scripts of 500), which no stop-time drain covers
        new.proc.wait()
        left = r.scard(KEYS.leaving), len(old.get("/v1/topics")[1]["topicList"])
        assert left[0] == 1 and left[1] > 1, left
        assert old.get("/v1/routes/Gone-9999")[0] == 404
        print(f"\nleft to 0.1.0: {left[1] - 1} of 10,000 departed topics listed")
        new = Worker(NEW, own_redis.url, logs)
        until_sync(lambda: not r.exists(KEYS.leaving), BOUND_S + 5, "the leftover collected by a worker of this release")
        until_sync(lambda: old.get("/v1/topics")[1]["topicList"] == ["Stays"], BOUND_S, "0.1.0 lists what stays")
    finally:
        new.stop()
        old.stop()
    assert old.errors() == [] and new.errors() == []


# README's fleet re-registering every FLEET_PERIOD_S (RocketMQ's period is 30 s: three times
# the load, and the test keeps its ~600 registrations a round at the full suite's load)
FLEET_PERIOD_S = 10.0


def unregister(worker: Worker, reg: dict[str, Any]) -> None:
    """A member shutting down: over TCP for the fleet's TCP groups (fleet_process.py), else HTTP."""
    if int(reg["brokerName"].rsplit("-", 1)[1]) % 2 == 1:
        worker.send("POST", "/v1/brokers/unregister", identity(reg))
        return

    async def call() -> None:
        client = await RemotingClient.connect(worker.remoting_port)
        try:
            answer = await client.call(request(codes.UNREGISTER_BROKER, frames.identity(reg)), timeout=30)
        finally:
            await client.close()
        assert answer.code == codes.SUCCESS, answer.remark

    asyncio.run(call())


@pytest.mark.timeout(900)  # 60-205 s here; seeding a million pairs through 0.1.0 at the full suite's load takes longer
def test_an_upgrade_and_a_rollback_at_the_readme_fleet_size_agree_under_the_live_fleet(
        own_redis: Any, old_venv: Path, logs: Path) -> None:
    """The first test's rollout at README's fleet size (tests/fleet_process.py: 300 groups,
    600 brokers, 108,313 topics, ~1,000,000 pairs; 300 brokers on TCP connections they keep,
    300 over HTTP), seeded through 0.1.0: the whole topic list of 108,313 names through both
    releases and fronts, groups of ~3,300 and ~11,200 QueueData departing through a new
    worker stopped right after (its drain collects them, the last new worker's too), a
    departure through 0.1.0, groups returning through each release (one read while away),
    topics created and changed through whichever worker the fleet reaches."""
    r = redis.Redis.from_url(own_redis.url)
    model = Model()
    away: dict[str, dict[str, Any]] = {}  # departed groups' master registrations
    for member in fleet_process.fleet_plan():
        reg = member["reg"]
        if reg["brokerId"] == 0:
            model.groups[member["group"]] = reg
        else:
            model.slaves.setdefault(member["group"], {})[str(reg["brokerId"])] = reg["brokerAddr"]
    # departing groups: ~3,300 QueueData over TCP (plain) and over HTTP, ~11,200 over TCP (zlib)
    tcp_group, http_group, old_group, huge = "group-8", "group-7", "group-9", "group-150"
    rng = random.Random(3)
    topics = sorted({*rng.sample([t for t in model.topics() if t.startswith("T")], 100),
                     *rng.sample([f"W{i}" for i in range(8_000)], 10), "TBW102", "ClusterA",
                     *(t for name in (tcp_group, http_group, old_group, huge)
                       for t in [name, *rng.sample(sorted(model.table(name)), 5)])})
    topics.append("NoSuchTopic")
    fleet = fleet_process.FleetProcess(FLEET_PERIOD_S)
    rollout = Rollout(own_redis.url, logs, old_venv, model, topics,
                      serve=lambda workers: fleet.ask({"workers": [[w.port, w.remoting_port] for w in workers]}))
    add, retire, agree = rollout.add, rollout.retire, rollout.agree

    def depart(name: str, via: Worker) -> None:
        assert fleet.ask({"pause": name}) == "paused"
        unregister(via, {**model.groups[name], "brokerId": 1, "brokerAddr": model.slaves[name]["1"]})
        unregister(via, model.groups[name])
        away[name] = model.groups.pop(name)

    def come_back(name: str, via: Worker) -> None:
        assert fleet.ask({"resume": name, "via": [via.port, via.remoting_port]}) == [True, True], name
        model.groups[name] = away.pop(name)

    def change_topics(step: str) -> None:
        """A topic created and one changed on a TCP (plain), a TCP (zlib) and an HTTP group,
        each registered at once through whichever worker the fleet reaches next."""
        for name in ("group-20", "group-30", "group-21"):
            created = f"Created-{name}-{len(topics)}"
            changed = sorted(t for t in model.table(name) if t.startswith("T"))[len(topics) % 50]
            queues = 16 if model.table(name)[changed]["writeQueueNums"] != 16 else 8
            for topic, config in ((created, topic_config(created)),
                                  (changed, {**model.table(name)[changed], "readQueueNums": queues, "writeQueueNums": queues})):
                assert fleet.ask({"set": name, "topic": topic, "config": config}) == [True, True], (name, topic)
                model.table(name)[topic] = config  # the master's table: the one the fleet's master sends
                if topic not in topics:
                    topics.insert(0, topic)
        agree(step)

    try:
        o1 = add(OLD)
        o2 = add(OLD)
        o1.send("PUT", f"/v1/kv/{KV}/before", {"value": "0.1.0"})
        model.kv["before"] = "0.1.0"
        seeding = time.monotonic()
        # a precondition, not a bound: a million pairs through 0.1.0 on two loaded cores
        until_sync(lambda: fleet.ask({"stats": 1})["registered"] == fleet.members, 300,
                   "every broker of the fleet registered through 0.1.0", poll_s=1)
        seeded_s = time.monotonic() - seeding
        agree("0.1.0 only")

        # the upgrade
        n1 = add(NEW)
        agree("0.1.0 and this release")
        n1.send("PUT", f"/v1/kv/{KV}/during", {"value": "mixed"})
        model.kv["during"] = "mixed"
        change_topics("topics created and changed, 0.1.0 and this release")
        depart(old_group, o1)
        agree("~3,300 QueueData departed through 0.1.0")
        retire(o1)
        n2 = add(NEW)
        depart(tcp_group, n1)
        retire(n1)  # SIGTERM right after: its drain collects what it began
        agree("~3,300 QueueData departed through a new worker stopped right after")
        n3 = add(NEW)
        retire(o2)
        agree("this release only")
        come_back(tcp_group, n2)
        come_back(old_group, n3)
        change_topics("two groups back, topics created and changed, this release only")

        # the rollback
        o3 = add(OLD)
        agree("this release and 0.1.0")
        depart(huge, n2)
        differences(rollout.workers, model, topics)  # read while away: what every worker caches
        come_back(huge, o3)
        agree("~11,200 QueueData left through this release, read away, back through 0.1.0")
        depart(http_group, n2)
        retire(n2)
        agree("~3,300 QueueData departed through a new worker stopped right after, 0.1.0 beside")
        add(OLD)
        until_sync(lambda: not r.exists(KEYS.leaving), BOUND_S, f"{KEYS.leaving} empty")
        # the last new worker, stopped right after a departure: no worker of this release is
        # left to collect what its drain would not finish
        depart(huge, n3)
        retire(n3)
        assert not r.exists(KEYS.leaving)
        agree("0.1.0 only again, ~11,200 QueueData departed through the last new worker")
        come_back(huge, o3)
        come_back(http_group, o3)
        change_topics("two groups back, topics created and changed, 0.1.0 only again")
        o3.send("DELETE", f"/v1/kv/{KV}/during", {})
        del model.kv["during"]
        agree("a KV change after the rollback")
        stats = fleet.ask({"stats": 1})
    finally:
        # the workers go first, while the fleet runs (a 0.1.0 worker stopped while a close
        # storm of brokers is being acted on logs an ERROR per connection: docs/upgrade.md)
        for w in list(rollout.workers):
            retire(w)
        fleet.stop()
    print(f"\nseconds from each step to the start and end of the round of reads that agreed: {rollout.timings}")
    print(f"seeded through 0.1.0 in {seeded_s:.0f} s; fleet: {stats}")
    assert stats["failures"] == []
    assert rollout.logged_errors() == {}


# values to try for each setting: spellings, edges and ranges (REDIS_URL's with unencoded
# characters in their password)
SETTING_TRIES = {
    "RMQ_LOG_LEVEL": ["warn", "WARN", "fatal", "FATAL", "notset", "NOTSET", "Warning", " info", "10", "debug", "LOUD"],
    "RMQ_LOG_FORMAT": ["json", "JSON", "text"],
    "RMQ_AUTH_READS": ["open", "OPEN", "token"],
    "RMQ_REDIS_CLUSTER": ["1", "TRUE", "Yes", "ON", " true ", "0", "False", "no", "OFF", " off", "t", "maybe"],
    "RMQ_REMOTING_STALE_READS": [" on ", "off"],
    "RMQ_PORT": [" 8080", "+8080", "8_080", "8080 ", "٨٠٨٠", "0", "-1", "99999", "8080.0"],
    "RMQ_REMOTING_PORT": ["0", "-1", "70000", " 9876"],
    **{var: ["0", "-1", " 7 "] for var in (
        "RMQ_REDIS_MAX_CONNECTIONS", "RMQ_REDIS_MIN_REPLICAS", "RMQ_BROKER_TIMEOUT_MS", "RMQ_SCAN_INTERVAL_MS",
        "RMQ_SCAN_BATCH", "RMQ_REDIS_TIMEOUT_MS", "RMQ_REDIS_START_TIMEOUT_MS", "RMQ_MAX_BODY_BYTES",
        "RMQ_MAX_QUEUE_NUMS", "RMQ_MAX_TOPICS_PER_REGISTRATION", "RMQ_MAX_STALENESS_MS", "RMQ_WATCH_MAX_MS",
        "RMQ_STALE_MAX_MS", "RMQ_CACHE_MAX_ENTRIES", "RMQ_CACHE_MAX_BYTES", "RMQ_CACHE_NEGATIVE_ENTRIES",
        "RMQ_DRAIN_MS", "RMQ_SHUTDOWN_TIMEOUT_MS", "RMQ_REMOTING_IDLE_MS", "RMQ_REMOTING_MAX_CONNECTIONS",
        "RMQ_HTTP_BACKLOG", "RMQ_MAX_WATCHES")},
    "RMQ_VERSION_POLL_MS": ["0", "999", "1000"],
    "RMQ_KEY_PREFIX": [" ", "rmq2"],
    "REDIS_URL": ["redis://127.0.0.1:6379", "redis://:p@ss@127.0.0.1:6379/0", "redis://u:pa:ss@h:1/0",
                  "redis://:pa%40ss@h:1/0", "unix:///tmp/r.sock", "redis+sentinel://h:26379/mymaster"],
}
# what 0.1.0 made of each: its own parser, then Python's logging given its level, as its
# worker's start did (a value either refuses is "refused")
PREVIOUS_PARSE = """
import json, logging, sys
from service import config, logs
out = {}
for var, values in json.load(sys.stdin).items():
    field = config.ENV[var][0]
    for value in values:
        try:
            settings = config.from_env({var: value})
            logs.setup(settings.log_level, settings.log_format)
            taken = getattr(settings, field)
            out[var + "=" + value] = logging.getLogger().level if field == "log_level" else taken
        except (SystemExit, ValueError):
            out[var + "=" + value] = "refused"
print(json.dumps(out))
"""


def test_every_setting_the_previous_release_took_starts_this_one_or_is_refused_saying_what_to_write(
        old_venv: Path, tmp_path: Path) -> None:
    # in another directory: `python -c` imports from its working directory first
    done = subprocess.run([str(old_venv / "bin" / "python"), "-c", PREVIOUS_PARSE], input=json.dumps(SETTING_TRIES),
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    previous = json.loads(done.stdout)
    refused: dict[str, str] = {}
    for var, values in SETTING_TRIES.items():
        field = ENV[var]
        for value in values:
            took = previous[f"{var}={value}"]
            if took == "refused":
                continue
            try:
                taken = getattr(settings_from({var: value}), field)
            except StartupError as exc:
                refused[f"{var}={value}"] = str(exc)
                continue
            if field == "log_level":  # its level, NOTSET's as DEBUG (both let every record through)
                taken, took = logging.getLevelName(taken), max(took, logging.DEBUG)
            assert taken == took, (var, value, taken, took)
    print(f"\n{len(refused)} values 0.1.0 took are refused: {sorted(refused)}")
    for setting, line in refused.items():
        var, value = setting.split("=", 1)
        # one line naming the variable and what to write instead, and only for what
        # CHANGELOG.md's upgrade notes name: a number out of its range, an unencoded password
        assert "\n" not in line and line.startswith(f"{var}="), line
        if var == "REDIS_URL":
            assert "percent-encode" in line, line
            continue
        allowed = re.search(r"must be an integer (?:from (-?\d+) to (\d+)|of at least (-?\d+))", line)
        assert allowed, line
        least = int(allowed.group(1) or allowed.group(3))
        most = int(allowed.group(2)) if allowed.group(2) else None
        assert int(value) < least or (most is not None and int(value) > most), line


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


def test_the_first_worker_stamps_redis_with_its_key_schema_version(own_redis: Any, logs: Path) -> None:
    r = redis.Redis.from_url(own_redis.url)
    assert r.get(KEYS.schema) is None
    worker = Worker(NEW, own_redis.url, logs)
    try:
        assert r.get(KEYS.schema) == str(SCHEMA_VERSION).encode()
    finally:
        worker.stop()


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
