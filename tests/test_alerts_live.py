"""The alert rules under a real Prometheus scraping real workers.

Two worker processes on a redis-server of this module's own, four brokers of cluster "C"
registering every second through them, a ?stale reader on each; Prometheus (Debian's
``prometheus``) scrapes and evaluates every second, with k8s/monitoring's rules whose
durations (``for:``, range windows, the scanner lag's threshold) are divided by ``SCALE``,
so that an hour reads as three minutes. Each situation is made for real: a planned
decommission, Redis frozen (SIGSTOP), Redis refusing writes (out of memory, a read-only
replica), a worker killed, Redis wiped (FLUSHALL). Its alerts must go pending (those with a ``for:``), then
firing, then resolve once the situation ends; alerts that would be false there must not
fire. Every wait is bounded generously: a slow machine makes the test slower, not red.

With ``RMQ_TEST_ALERT_TABLE=<file>`` the table of what fired when is written there.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis
import yaml

from tests.builders import identity, registration
from tests.processes import console_script, http_status, post, start, wait_http
from tests.redis_server import RedisServer, free_port
from tests.test_monitoring import DASHBOARD, RULES
from tests.waits import until_sync

SCALE = 20
# registering every second, with a timeout a busy machine's late registration does not reach
BROKERS = [registration(f"10.0.0.{i}:10911", f"broker-{i}", cluster="C", topics=[f"T{i}"], timeout_ms=6_000)
           for i in range(4)]
WAIT_S = 180  # the bound of every wait for an alert: far above what an idle machine needs (~20 s)
POLL_S = 0.25


def seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smh])", duration))


def scaled(duration: str) -> str:
    return f"{seconds(duration) / SCALE:g}s"


def scaled_rules() -> dict[str, Any]:
    """The rules as Prometheus reads them, every duration divided by SCALE."""
    groups = copy.deepcopy(RULES["spec"]["groups"])
    for rule in (r for g in groups for r in g["rules"]):
        if "for" in rule:
            rule["for"] = scaled(rule["for"])
        rule["expr"] = re.sub(r"\[(\w+)\]", lambda m: f"[{scaled(m.group(1))}]", rule["expr"])
        if rule["alert"] == "RmqScannerLagging":  # its threshold is a duration too (30 s)
            assert "/ 1000 > 30" in rule["expr"], rule["expr"]
            rule["expr"] = rule["expr"].replace("/ 1000 > 30", f"/ 1000 > {30 / SCALE:g}")
    return {"groups": groups}


def pending_first(alert: str) -> bool:
    """Whether the rule has a ``for:``, so that the alert is pending before it fires."""
    return any(r["alert"] == alert and "for" in r for g in RULES["spec"]["groups"] for r in g["rules"])


@dataclass
class Seen:
    """One alert (name and labels) as Prometheus reported it over time."""

    pending: float | None = None
    firing: float | None = None
    gone: float | None = None  # when it was no longer reported after being


class Alerts(threading.Thread):
    """Polls Prometheus' /api/v1/alerts and keeps, per alert, when it was first pending,
    first firing, and when it went away."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.seen: dict[tuple[str, frozenset[tuple[str, str]]], Seen] = {}
        self.active: dict[tuple[str, frozenset[tuple[str, str]]], str] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.polls = 0  # answers read: an empty `active` before the first says nothing

    def run(self) -> None:
        while not self.stopping.wait(POLL_S):
            try:
                with urllib.request.urlopen(self.base + "/api/v1/alerts", timeout=5) as resp:
                    alerts = json.load(resp)["data"]["alerts"]
            except OSError:
                continue
            now = time.monotonic()
            active = {}
            for a in alerts:
                labels = {k: v for k, v in a["labels"].items() if k not in ("alertname", "severity")}
                active[(a["labels"]["alertname"], frozenset(labels.items()))] = a["state"]
            with self.lock:
                for key, state in active.items():
                    seen = self.seen.setdefault(key, Seen())
                    if seen.gone is not None:  # back again: a new episode
                        seen = self.seen[key] = Seen()
                    if state == "pending" and seen.pending is None:
                        seen.pending = now
                    if state == "firing" and seen.firing is None:
                        seen.firing = now
                for key in self.active.keys() - active.keys():
                    self.seen[key].gone = now
                self.active = active
                self.polls += 1

    def forget(self) -> None:
        """A new situation: what was seen before does not count for it."""
        with self.lock:
            self.seen = {k: v for k, v in self.seen.items() if k in self.active}

    def find(self, alert: str, **labels: str) -> list[tuple[tuple[str, frozenset[tuple[str, str]]], Seen]]:
        with self.lock:
            return [(k, copy.copy(s)) for k, s in self.seen.items()
                    if k[0] == alert and labels.items() <= dict(k[1]).items()]

    def names(self) -> set[str]:
        with self.lock:
            return {k[0] for k in self.seen}

    def quiet(self) -> bool:
        with self.lock:
            return not self.active


def until(check: Callable[[], Any], what: str) -> Any:
    """tests/waits.py's wait, with this module's bound and Prometheus-paced polling."""
    return until_sync(check, WAIT_S, what, POLL_S)


@dataclass
class Fleet:
    redis: RedisServer
    ports: list[int]
    prometheus: str
    alerts: Alerts
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    stale_statuses: list[tuple[float, int]] = field(default_factory=list)  # (when, status) of ?stale reads
    table: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)  # the brokers hold their registrations

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def start_worker(self, i: int) -> None:
        env = {"REDIS_URL": self.redis.url, "RMQ_SCAN_INTERVAL_MS": "500", "RMQ_STALE_MAX_MS": "5000"}
        with open(self.logs / f"worker{i}.log", "ab") as out:
            proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(self.ports[i])],
                         env, output=out)
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)
        wait_http(f"{self.urls[i]}/readyz", limit_s=60)

    def brokers(self) -> None:
        """Every broker registers every second (a whole registration, as a broker that
        expired must come back by itself), spread over the workers."""
        turn = 0
        while not self.stopping.is_set():
            if self.paused.is_set():  # brokers away: a store reset stays open until they are back
                self.stopping.wait(0.2)
                continue
            for body in BROKERS:
                turn += 1
                # the next worker when one does not answer, as brokers register with every NameServer
                for url in (self.urls[turn % 2], self.urls[(turn + 1) % 2]):
                    if post(url, "/v1/brokers/register", body, timeout_s=2) != 0:
                        break
            self.stopping.wait(1)

    def reader(self) -> None:
        while not self.stopping.is_set():
            for url in self.urls:
                try:
                    status = http_status(f"{url}/v1/routes/T0?stale", timeout_s=2)
                except OSError:
                    continue  # a worker killed
                self.stale_statuses.append((time.monotonic(), status))
            self.stopping.wait(0.5)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.load(resp)["data"]["result"]

    def expect(self, situation: str, began: float, alert: str, **labels: str) -> Seen:
        """Waits for the alert to fire; it must have been pending first when it has a for:."""
        def fired() -> Seen | None:
            return next((s for _, s in self.alerts.find(alert, **labels) if s.firing is not None), None)

        seen = until(fired, f"{alert}{labels or ''} firing ({situation})")
        if pending_first(alert):
            assert seen.pending is not None and seen.pending <= seen.firing, f"{alert} fired without being pending"
        self.table.append((self.label(alert, labels), situation, "yes", f"{seen.firing - began:.0f} s", ""))
        return seen

    def resolved(self, situation: str, ended: float, alert: str, **labels: str) -> None:
        def gone() -> Seen | None:
            found = self.alerts.find(alert, **labels)
            return found[0][1] if found and all(s.gone is not None for _, s in found) else None

        seen = until(gone, f"{alert}{labels or ''} resolved ({situation})")
        row = next(i for i, r in enumerate(self.table) if r[0] == self.label(alert, labels) and r[1] == situation)
        self.table[row] = (*self.table[row][:4], f"yes, {max(0.0, seen.gone - ended):.0f} s after")

    def quiet(self, situation: str, alert: str, **labels: str) -> None:
        """The alert has not been reported (pending or firing) during the situation."""
        assert not self.alerts.find(alert, **labels), f"{alert}{labels or ''} reported ({situation})"
        self.table.append((self.label(alert, labels), situation, "no (as it must)", "", ""))

    def live_through(self, situation: str, begin: Callable[[], Any], end: Callable[[], Any],
                     expected: list[tuple[str, dict[str, str]]], meanwhile: Callable[[float], None]) -> None:
        """Once the last situation's alerts are gone: makes this one, waits for each expected
        alert to fire, checks `meanwhile` (given when it began), ends it, and waits for each
        expected alert to resolve."""
        self.settle()
        began = time.monotonic()
        begin()
        try:
            for alert, labels in expected:
                self.expect(situation, began, alert, **labels)
            meanwhile(began)
        finally:
            end()
        ended = time.monotonic()
        for alert, labels in expected:
            self.resolved(situation, ended, alert, **labels)

    def settle(self) -> None:
        """Waits until Prometheus reports no alert (the aftermath of the last situation)."""
        # from a poll begun after this call: right after the poller starts, or while one is
        # under way, `active` may not hold what Prometheus reports now (it once missed a
        # RmqNoLiveBroker still pending from before the brokers came, on a loaded machine)
        first = self.alerts.polls + 2
        until(lambda: self.alerts.polls >= first and self.alerts.quiet(), "no alert active")
        self.alerts.forget()

    @staticmethod
    def label(alert: str, labels: dict[str, str]) -> str:
        return alert + ("{" + ",".join(f"{k}={v}" for k, v in labels.items()) + "}" if labels else "")


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; scripts/test installs it)")
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    binary = prometheus_binary()
    tmp = tmp_path_factory.mktemp("alerts-live")
    server = RedisServer()
    server.start()
    ports = [free_port(), free_port()]
    (tmp / "rules.yaml").write_text(yaml.safe_dump(scaled_rules()))
    (tmp / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "rules.yaml")],
        "scrape_configs": [{"job_name": "rmq-registry",
                            "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}]}))
    web = free_port()
    with open(tmp / "prometheus.log", "ab") as log:
        prometheus = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{web}"
    f = Fleet(server, ports, base, Alerts(base), tmp)
    threads: list[threading.Thread] = []
    try:
        for i in range(len(ports)):
            f.start_worker(i)
        wait_http(f"{base}/-/ready", limit_s=60)
        threads = [threading.Thread(target=f.brokers, daemon=True), threading.Thread(target=f.reader, daemon=True)]
        for t in threads:
            t.start()
        until(lambda: f.query('max(rmq_live_brokers) == 4 and count(up{job="rmq-registry"} == 1) == 2'),
              "Prometheus sees both workers and the four brokers")
        f.alerts.start()
        f.settle()  # the moment before the brokers came (no live broker) is no situation
        yield f
    finally:
        f.stopping.set()
        f.alerts.stopping.set()
        for t in threads:
            t.join(timeout=10)
        for proc in [*f.procs, prometheus]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        server.cleanup()
        table = ["| alert | situation | fired | time to fire | resolved |", "|---|---|---|---|---|",
                 *(f"| {' | '.join(row)} |" for row in f.table)]
        print("\n" + "\n".join(table))
        if os.environ.get("RMQ_TEST_ALERT_TABLE"):
            Path(os.environ["RMQ_TEST_ALERT_TABLE"]).write_text("\n".join(table) + "\n")


def test_a_quiet_fleet_and_a_planned_decommission_page_nobody(fleet: Fleet) -> None:
    leaving = registration("10.0.9.1:10911", "broker-gone", cluster="Gone", topics=["TGone"])
    assert post(fleet.urls[0], "/v1/brokers/register", leaving) == 200
    until(lambda: fleet.query('max(rmq_cluster_broker_groups{cluster="Gone"}) == 1'), "cluster Gone scraped")
    assert post(fleet.urls[1], "/v1/brokers/unregister", identity(leaving)) == 200
    until(lambda: not fleet.query('rmq_cluster_broker_groups{cluster="Gone"}'), "cluster Gone left the gauge")
    # past the rule's for: (2 min / SCALE) three times over
    time.sleep(3 * seconds(scaled("2m")))
    fleet.quiet("cluster Gone decommissioned (unregistered)", "RmqClusterLostAllBrokers", cluster="Gone")
    assert fleet.alerts.names() == set(), f"alerts on a quiet fleet: {fleet.alerts.names()}"


def test_redis_frozen_pages_and_resolves_when_it_thaws(fleet: Fleet) -> None:
    def stale_reads_end_and_the_alert_does_not(began: float) -> None:
        # stale answers end RMQ_STALE_MAX_MS after Redis was last reached; the outage does not
        until(lambda: any(t > began and s == 503 for t, s in fleet.stale_statuses), "?stale reads answer 503")
        time.sleep(2 * seconds(scaled("1m")))
        assert [s for _, s in fleet.alerts.find("RmqServingStaleReads") if s.gone is None], \
            "RmqServingStaleReads resolved while Redis is still frozen"

    assert fleet.redis.proc is not None
    fleet.live_through(
        "Redis frozen (SIGSTOP)",
        lambda: fleet.redis.proc.send_signal(signal.SIGSTOP), lambda: fleet.redis.proc.send_signal(signal.SIGCONT),
        [*(("RmqRedisUnavailable", {"instance": f"127.0.0.1:{p}"}) for p in fleet.ports), ("RmqServingStaleReads", {}),
         ("RmqScannerFailing", {}), ("RmqScannerLagging", {}), ("RmqHttp5xxRate", {})],
        stale_reads_end_and_the_alert_does_not)


def test_redis_out_of_memory_pages_refusals_and_lost_routes_not_unavailability(fleet: Fleet) -> None:
    r = redis.Redis.from_url(fleet.redis.url)
    situation = "Redis out of memory (maxmemory 1)"
    fleet.live_through(
        situation, lambda: r.config_set("maxmemory", 1), lambda: r.config_set("maxmemory", 0),
        # heartbeats refused: the brokers expire (removal is allowed), cluster C with them
        [("RmqRedisRefusingWrites", {"cause": "out of memory"}), ("RmqBrokerExpiryStorm", {"cluster": "C"}),
         ("RmqRoutesLost", {}), ("RmqClusterLostAllBrokers", {"cluster": "C"})],
        lambda began: fleet.quiet(situation, "RmqRedisUnavailable"))


def test_a_read_only_replica_pages_refusals_and_a_stuck_scanner_not_unavailability(fleet: Fleet) -> None:
    def reads_answered_and_redis_reached(began: float) -> None:
        fleet.quiet(situation, "RmqRedisUnavailable")
        assert http_status(f"{fleet.urls[0]}/v1/routes/T1") == 200

    r = redis.Redis.from_url(fleet.redis.url)
    situation = "Redis a read-only replica"
    fleet.live_through(
        # a primary nobody runs: the data stays, writes are refused
        situation, lambda: r.replicaof("127.0.0.1", free_port()), lambda: r.replicaof("NO", "ONE"),
        # heartbeats refused, and so are the removals: the brokers stay, overdue
        [("RmqRedisRefusingWrites", {"cause": "read-only replica"}), ("RmqScannerFailing", {}),
         ("RmqScannerLagging", {})],
        reads_answered_and_redis_reached)


def test_a_killed_worker_pages_until_it_is_back(fleet: Fleet) -> None:
    situation = "a worker killed (SIGKILL)"
    fleet.live_through(situation, fleet.procs[1].kill, lambda: fleet.start_worker(1),
                       [("RmqWorkerDown", {"instance": f"127.0.0.1:{fleet.ports[1]}"})],
                       lambda began: fleet.quiet(situation, "RmqRedisUnavailable"))


def test_every_dashboard_query_answers_numbers_and_whole_counts(fleet: Fleet) -> None:
    """After the situations above (expiries, refusals, an idle route), with the dashboard's
    windows scaled like the rules': no NaN (an idle route's p99 is left out), and the
    panels that show counts (0 decimals) show whole ones."""
    idle = "histogram_quantile(0.99, sum by (route, le) (rate(rmq_http_request_seconds_bucket[15s])))"
    # the p99 as the dashboard had it reads NaN for the route unregistered once, long ago
    assert any(r["value"][1] == "NaN" for r in fleet.query(idle)), "no idle route: the check below proves nothing"
    for panel in DASHBOARD["panels"]:
        whole = panel["fieldConfig"]["defaults"].get("decimals") == 0
        for t in panel["targets"]:
            expr = re.sub(r"\[(\w+)\]", lambda m: f"[{scaled(m.group(1))}]", t["expr"])
            for series in fleet.query(expr):
                value = float(series["value"][1])
                assert value == value, f'{panel["title"]}/{t["refId"]}: NaN for {series["metric"]}'
                assert not whole or value.is_integer(), f'{panel["title"]}/{t["refId"]}: {value}'


def test_a_wiped_store_pages_a_store_reset_and_nothing_of_expiry(fleet: Fleet) -> None:
    def no_expiry_alert(began: float) -> None:
        for alert in ("RmqRoutesLost", "RmqClusterLostAllBrokers", "RmqBrokerExpiryStorm"):
            fleet.quiet(situation, alert)  # the brokers vanished without expiring

    r = redis.Redis.from_url(fleet.redis.url)
    situation = "Redis wiped (FLUSHALL)"

    def wipe() -> None:
        fleet.paused.set()  # the brokers come back when the situation ends: the alert ends with them
        r.flushall()

    fleet.live_through(
        situation, wipe, fleet.paused.clear,
        [("RegistryStoreReset", {})],
        no_expiry_alert)
