"""SIGTERM, as an orchestrator sends it, against a real worker process."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

import orjson
import pytest
import redis

from service.config import Settings
from service.keys import Keys
from service.remoting import codes
from service.scripts import Scripts
from service.store import Store
from tests.builders import identity, registration
from tests.processes import Worker, console_script, http_status, post, start, wait_http
from tests.redis_server import RedisServer, free_port
from tests.remoting import frames
from tests.remoting.client import RemotingClient
from tests.tables import violations
from tests.waits import BOUND_S, until_sync


def test_sigterm_drains_finishes_in_flight_requests_and_exits_0(redis_url: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 env={"REDIS_URL": redis_url, "RMQ_DRAIN_MS": "1500", "RMQ_REDIS_TIMEOUT_MS": "3000"})
    try:
        wait_http(f"{base}/readyz")
        # an in-flight request: Redis holds every client for 1 s
        admin = redis.Redis.from_url(redis_url)
        results: dict[str, object] = {}

        def slow_read() -> None:
            results["status"] = http_status(f"{base}/v1/cluster")
            results["done"] = time.monotonic()

        admin.execute_command("CLIENT", "PAUSE", 1000, "ALL")
        reader = threading.Thread(target=slow_read)
        reader.start()
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        time.sleep(0.3)
        # draining: not ready, but still serving
        assert http_status(f"{base}/readyz") == 503
        assert http_status(f"{base}/healthz") == 200
        reader.join(timeout=10)
        assert results["status"] == 200
        code = proc.wait(timeout=20)
        stopped = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate()[0].decode()
    assert code == 0, out
    assert stopped - sent >= 1.5  # the drain period was kept
    assert "stop requested" in out and "stopped" in out
    admin.close()


def test_sigterm_answers_a_waiting_watch_at_once(redis_url: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 env={"REDIS_URL": redis_url})
    try:
        wait_http(f"{base}/readyz")
        body = json.dumps({"clusterName": "c", "brokerAddr": "10.0.0.1:1", "brokerName": "b", "brokerId": 0,
                           "topicConfigSerializeWrapper": {"topicConfigTable": {"T": {
                               "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}},
                               "dataVersion": {"timestamp": 1, "counter": 1}}}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{base}/v1/brokers/register", data=body,
                                                      headers={"Content-Type": "application/json"}), timeout=5).close()
        with urllib.request.urlopen(f"{base}/v1/routes/T", timeout=5) as resp:
            etag = resp.headers["ETag"]
        results: dict[str, int] = {}
        watcher = threading.Thread(target=lambda: results.update(
            status=http_status(f"{base}/v1/routes/T?watch={etag.strip(chr(34))}&timeout=60s")))
        watcher.start()
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        watcher.join(timeout=30)
        assert results["status"] == 304
        assert proc.wait(timeout=20) == 0
        assert time.monotonic() - sent < 10  # not the watch's 60 s
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


DRAIN_MS = 3000


def test_sigterm_with_idle_connections_stops_9876_at_drain_start_exits_within_drain_and_restarts_at_once(
        redis_url: str) -> None:
    port, remoting_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    args = [console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    env = {"REDIS_URL": redis_url, "RMQ_REMOTING_PORT": str(remoting_port), "RMQ_DRAIN_MS": str(DRAIN_MS)}
    proc = start(args, env=env)
    restarted = remoting = None
    try:
        wait_http(f"{base}/readyz")
        # an idle keep-alive HTTP connection (one request answered, the connection kept)
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        kept.request("GET", "/healthz")
        assert kept.getresponse().read()
        # an idle RocketMQ connection
        remoting = socket.create_connection(("127.0.0.1", remoting_port), timeout=5)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        # 9876 stops accepting at drain start, while HTTP still answers (not ready)
        until_sync(lambda: not _accepts(remoting_port), 5, "9876 closed at drain start")
        assert time.monotonic() - sent < DRAIN_MS / 1000 - 1  # at its start, not its end
        assert http_status(f"{base}/readyz") == 503
        code = proc.wait(timeout=20)
        took = time.monotonic() - sent
        out = proc.communicate()[0].decode()
        # at once on the same ports (server-closed connections leave TIME_WAIT on both)
        restarted = start(args, env=env)
        wait_http(f"{base}/readyz", limit_s=10)
        assert _accepts(remoting_port)
    finally:
        for p in (proc, restarted):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
        if remoting is not None:
            remoting.close()
    assert code == 0, out
    # the drain, and room for a loaded machine: not RMQ_SHUTDOWN_TIMEOUT_MS' 20 s
    assert took < DRAIN_MS / 1000 + 4, f"took {took:.1f} s to stop, drain {DRAIN_MS} ms\n{out}"
    assert f"RocketMQ port {remoting_port}: not accepting connections (stopping)" in out


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------- work under way at SIGTERM
# A worker stopped by SIGTERM finishes, within its drain time, the background work it began
# (docs/design.md, "Stop"): one test per kind, each on a real process and the test
# redis-server, each checked against the tables' invariants once the worker has exited.
K = Keys()
BIG = 3_000  # QueueData of the departing group: past LEAVE_NOW_MAX (256), collected in slices


@pytest.fixture(autouse=True)
def workers() -> Iterator[None]:
    yield
    Worker.kill_left()


def group_queues(r: redis.Redis, name: str) -> int:
    return sum(1 for _ in r.scan_iter(match=f"{K.tag}:queue:*:{name}", count=1000))


def test_sigterm_right_after_a_big_groups_departure_collects_all_its_queues_before_exit(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.ping()  # connected now: the pause below must follow the departure by a round trip, not a connect
    worker = Worker(redis_url)
    big = registration(addr="10.0.0.1:10911", name="broker-big", topics=[f"T{i}" for i in range(BIG)])
    assert post(worker.base, "/v1/brokers/register", big, timeout_s=60) == 200
    assert post(worker.base, "/v1/brokers/register",
                registration(addr="10.0.0.2:10911", name="broker-small", topics=["T0", "Other"])) == 200
    assert post(worker.base, "/v1/brokers/unregister", identity(big)) == 200
    # Redis holds every write for a moment: the stop begins with most of the collection to do
    r.execute_command("CLIENT", "PAUSE", 1000, "WRITE")
    left_at_signal = group_queues(r, "broker-big")
    out = worker.stop()
    assert left_at_signal > BIG // 2, left_at_signal
    assert not r.exists(K.leaving) and group_queues(r, "broker-big") == 0, out
    assert r.smembers(K.topics) == {"T0", "Other"}
    assert violations(r) == []
    assert "stopping with" not in out


async def test_sigterm_during_a_close_storm_removes_every_closed_broker_before_exit(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    worker = Worker(redis_url)
    clients = []
    for g in range(30):  # 60 brokers on 60 connections; one group past LEAVE_NOW_MAX
        topics = [f"Big{i}" for i in range(BIG)] if g == 0 else [f"S{g}-{i}" for i in range(5)]
        for broker_id in (0, 1):
            client = await RemotingClient.connect(worker.remoting)
            reg = registration(addr=f"10.1.{g}.{broker_id + 1}:10911", name=f"storm-{g}", broker_id=broker_id,
                               topics=topics)
            assert (await client.call(frames.register(reg), timeout=60)).code == codes.SUCCESS
            clients.append(client)
    # Redis holds every write for longer than the 2 s a stop used to give its queue
    r.execute_command("CLIENT", "PAUSE", 4000, "WRITE")
    await asyncio.gather(*(c.close() for c in clients))
    until_sync(lambda: worker.metric("rmq_removals_queued") == 60, BOUND_S, "the worker queued every close")
    out = worker.stop()
    assert r.smembers(K.clusters) == set() and not r.exists(K.leaving), out
    assert r.keys(f"{K.tag}:queue:*") == [] and r.zcard(K.expiry) == 0
    assert violations(r) == []
    causes = [json.loads(d)["cause"] for d in r.zrange(K.departures, 0, -1)]
    assert causes == ["connection closed"] * 60
    assert "stopping with" not in out


async def test_sigterm_during_a_staged_first_registration_over_9876_publishes_it_before_exit(
        redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    worker = Worker(redis_url)
    n = 20_000  # ~67 slices of 300: SIGTERM lands among them
    reg = registration(addr="10.0.0.7:10911", name="broker-new", topics=[f"N{i:05d}" for i in range(n)])
    client = await RemotingClient.connect(worker.remoting)
    await client.send(frames.register(reg))
    until_sync(lambda: r.hget(K.broker("broker-new"), "staging"), 60, "the staging begun", poll_s=0.005)
    staged_at_signal = r.hlen(K.broker_topics("broker-new"))
    out = worker.stop()
    await client.close()
    assert staged_at_signal < n  # the signal came while the slices were being written
    row = r.hgetall(K.broker("broker-new"))
    assert "staging" not in row and row.get("queuesIntact") == "1", out
    assert r.hlen(K.broker_topics("broker-new")) == n and r.scard(K.topics) == n
    assert not r.exists(K.stagings) and not r.exists(K.staged_topics)
    assert violations(r) == []
    assert "unfinished" not in out


async def test_a_collection_left_behind_is_finished_at_the_next_start_without_waiting_for_a_scan(
        redis_url: str, settings: Settings) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    # a departure whose worker is gone: its group marked leaving, no worker collecting
    store = Store(settings)
    try:
        scripts = Scripts(store)
        await scripts.register(
            cluster="c", addr="10.0.0.1:10911", name="broker-big", broker_id=0, ha_addr="", timeout_ms=120_000,
            data_version='{"counter":1}', keep_filters=True, delete_absent=False,
            topics=orjson.dumps([x for i in range(BIG) for x in (f"T{i}", "4,4,6,0")]), filters=b"[]", channel="",
            digest="", acting="", zone="", mappings=b"[]", topic_count=BIG, state_version=0, staging="")
        await scripts.unregister("c", "10.0.0.1:10911", "broker-big", 0)
    finally:
        await store.close()
    assert r.sismember(K.leaving, "broker-big") and group_queues(r, "broker-big") == BIG
    # a scan an hour away: only the start's own pass can collect it
    worker = Worker(redis_url, RMQ_SCAN_INTERVAL_MS="3600000")
    until_sync(lambda: not r.exists(K.leaving), BOUND_S, "the leaving group collected")
    assert group_queues(r, "broker-big") == 0 and violations(r) == []
    worker.stop()


async def test_a_stop_that_cannot_reach_redis_gives_up_at_its_drain_time_and_says_what_it_left(
        own_redis: RedisServer) -> None:
    worker = Worker(own_redis.url, RMQ_SHUTDOWN_TIMEOUT_MS="1500", RMQ_REDIS_TIMEOUT_MS="300")
    clients = []
    for g in range(3):
        client = await RemotingClient.connect(worker.remoting)
        reg = registration(addr=f"10.2.{g}.1:10911", name=f"gone-{g}", topics=[f"G{g}"])
        assert (await client.call(frames.register(reg))).code == codes.SUCCESS
        clients.append(client)
    own_redis.stop()
    await asyncio.gather(*(c.close() for c in clients))
    until_sync(lambda: worker.metric("rmq_removals_queued") == 3, BOUND_S, "the worker queued every close")
    sent = time.monotonic()
    out = worker.stop()
    assert time.monotonic() - sent < 1.5 + 3  # its drain time, and the process' own exit
    assert "stopping with 3 broker removal(s) queued" in out
