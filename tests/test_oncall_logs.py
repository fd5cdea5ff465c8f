"""What a real worker process tells an on-call operator, read from its log and /metrics:

- a store reset (FLUSHALL under 20 registered broker groups) is counted in
  ``rmq_store_resets_total`` and one ERROR line within 15 s, and the worker serves on;
- a Redis outage (the redis-server frozen with SIGSTOP for 6 s) under 50 brokers
  heartbeating through the HTTP API, or on the RocketMQ port, is a handful of lines, not
  one per failed request, and its end is one line saying how long Redis was away.

Each situation is made once per module on a redis-server of its own; the tests read what
it left. Bounds are generous: a slow machine makes the test slower, not red.
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import pytest
import redis

from service.keys import Keys
from service.remoting import codes
from service.remoting.client import ClientError, NameServerClient
from tests.builders import identity, registration
from tests.processes import console_script, post, start, wait_http
from tests.redis_server import RedisServer, free_port
from tests.waits import until_sync

SCAN_MS = 500
BROKERS_AT_RESET = 20
BROKERS_IN_OUTAGE = 50
OUTAGE_S = 6.0
MOST_LINES_IN_OUTAGE = 20


def metric(base: str, name: str) -> float | None:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def until(check: Any, bound_s: float, what: str) -> float:
    """Seconds until `check()` held (tests/waits.py's wait, timed)."""
    started = time.monotonic()
    until_sync(check, bound_s, what, poll_s=0.05)
    return time.monotonic() - started


@dataclass
class Worker:
    base: str
    remoting_port: int
    log: Path
    redis: RedisServer

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A worker process on a redis-server of its own, its log in a file."""
    server = RedisServer()
    server.start()
    port, remoting_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("oncall") / "worker.log"
    out: IO[bytes] = log.open("wb")
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 {"REDIS_URL": server.url, "RMQ_SCAN_INTERVAL_MS": str(SCAN_MS), "RMQ_REMOTING_PORT": str(remoting_port)},
                 output=out)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/readyz")
        yield Worker(base, remoting_port, log, server)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()
        server.cleanup()


@dataclass
class ResetSeen:
    noticed_s: float  # from the FLUSHALL to rmq_store_resets_total 1
    lines: list[str]  # the worker's log lines written after the FLUSHALL


@pytest.fixture(scope="module")
def reset(worker: Worker) -> ResetSeen:
    """20 broker groups registered and scanned, then FLUSHALL; until the counter says 1."""
    for i in range(BROKERS_AT_RESET):
        assert post(worker.base, "/v1/brokers/register",
                    registration(f"10.0.3.{i}:10911", f"reset-{i}", topics=[f"R{i}"])) == 200
    until(lambda: metric(worker.base, "rmq_live_brokers") == BROKERS_AT_RESET, 15, "the scanner sees the fleet")
    time.sleep(2 * SCAN_MS / 1000)  # a second pass: what a reset loses is what two passes saw
    before = len(worker.lines())
    redis.Redis(port=worker.redis.port).flushall()
    noticed = until(lambda: metric(worker.base, "rmq_store_resets_total") == 1, 15, "rmq_store_resets_total 1")
    time.sleep(3 * SCAN_MS / 1000)  # more passes: nothing more may be counted or logged
    return ResetSeen(noticed, worker.lines()[before:])


def test_a_flushall_under_a_registered_fleet_raises_rmq_store_resets_total_within_15_s(
        worker: Worker, reset: ResetSeen) -> None:
    assert reset.noticed_s < 15
    assert metric(worker.base, "rmq_store_resets_total") == 1


def test_a_flushall_under_a_registered_fleet_is_one_error_line_saying_what_was_lost(reset: ResetSeen) -> None:
    errors = [line for line in reset.lines if " ERROR " in line]
    assert len(errors) == 1, reset.lines
    assert f"the {BROKERS_AT_RESET} broker groups, {BROKERS_AT_RESET} topics" in errors[0], errors[0]


def test_after_a_store_reset_the_worker_restamps_the_store_and_takes_a_registration(
        worker: Worker, reset: ResetSeen) -> None:
    client = redis.Redis(port=worker.redis.port, decode_responses=True)
    assert client.get(Keys().dataset) is not None and client.get(Keys().schema) is not None
    assert post(worker.base, "/v1/brokers/register", registration("10.0.4.1:10911", "after-reset")) == 200


class HttpHeartbeats(threading.Thread):
    """One broker heartbeating through the HTTP API every 0.2 s until stopped."""

    def __init__(self, worker: Worker, body: dict[str, Any], stopping: threading.Event) -> None:
        super().__init__(daemon=True)
        self.base, self.body, self.stopping = worker.base, identity(body), stopping

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            post(self.base, "/v1/brokers/heartbeat", self.body)


class TcpHeartbeats(threading.Thread):
    """One broker heartbeating on the RocketMQ port (BROKER_HEARTBEAT) every 0.2 s until stopped."""

    def __init__(self, worker: Worker, body: dict[str, Any], stopping: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.stopping = f"127.0.0.1:{worker.remoting_port}", stopping
        self.ext = {k: str(v) for k, v in identity(body).items()}

    def run(self) -> None:
        asyncio.run(self.beat())

    async def beat(self) -> None:
        async with NameServerClient(self.addr, timeout_s=5) as client:
            while not self.stopping.wait(0.2):
                try:
                    await client.call(codes.BROKER_HEARTBEAT, self.ext)
                except ClientError:
                    pass  # the answer did not come within 5 s: the next one is sent all the same


@dataclass
class OutageSeen:
    during: list[str]  # lines written while Redis was frozen
    after: list[str]  # lines written after it was thawed, until it was said to answer again


def outage(worker: Worker, front: type[threading.Thread], prefix: str) -> OutageSeen:
    """50 brokers registered and heartbeating through `front`; Redis frozen for 6 s (SIGSTOP),
    then thawed, until the worker says it answers again."""
    bodies = [registration(f"10.{prefix}.{i}:10911", f"outage-{prefix}-{i}", topics=[f"O{i}"])
              for i in range(BROKERS_IN_OUTAGE)]
    for body in bodies:
        assert post(worker.base, "/v1/brokers/register", body) == 200
    stopping = threading.Event()
    beats = [front(worker, body, stopping) for body in bodies]
    for beat in beats:
        beat.start()
    try:
        time.sleep(1)
        before = len(worker.lines())
        assert worker.redis.proc is not None
        worker.redis.proc.send_signal(signal.SIGSTOP)
        time.sleep(OUTAGE_S)
        frozen = worker.lines()
        worker.redis.proc.send_signal(signal.SIGCONT)
        until(lambda: any("Redis answers again" in line for line in worker.lines()[len(frozen):]), 30,
              "the end of the outage logged")
        return OutageSeen(frozen[before:], worker.lines()[len(frozen):])
    finally:
        stopping.set()
        for beat in beats:
            beat.join(timeout=10)


@pytest.fixture(scope="module")
def http_outage(worker: Worker, reset: ResetSeen) -> OutageSeen:
    """After the reset tests: the store is whole again by then."""
    return outage(worker, HttpHeartbeats, "5.0")


@pytest.fixture(scope="module")
def tcp_outage(worker: Worker, http_outage: OutageSeen) -> OutageSeen:
    """After the HTTP front's outage, whose summaries have been written by then."""
    time.sleep(6)
    return outage(worker, TcpHeartbeats, "6.0")


def test_a_redis_outage_under_50_brokers_heartbeating_over_http_logs_at_most_20_lines_in_6_s(
        http_outage: OutageSeen) -> None:
    assert http_outage.during, "the outage logged nothing"
    assert len(http_outage.during) <= MOST_LINES_IN_OUTAGE, "\n".join(http_outage.during)


def test_a_redis_outage_under_50_brokers_heartbeating_on_9876_logs_at_most_20_lines_in_6_s(
        tcp_outage: OutageSeen) -> None:
    assert any("request code" in line for line in tcp_outage.during), tcp_outage.during
    assert len(tcp_outage.during) <= MOST_LINES_IN_OUTAGE, "\n".join(tcp_outage.during)


def test_the_end_of_a_redis_outage_is_one_line_saying_how_long_redis_was_away(http_outage: OutageSeen) -> None:
    back = [line for line in http_outage.after if "Redis answers again" in line]
    assert len(back) == 1, http_outage.after
    away = float(re.search(r"after (\d+\.\d) s away", back[0]).group(1))  # type: ignore[union-attr]
    assert OUTAGE_S - 1 <= away <= OUTAGE_S + 10, back[0]
