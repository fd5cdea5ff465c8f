"""SIGTERM, as an orchestrator sends it, against a real worker process."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import redis

from tests.processes import console_script, http_status, start, wait_http
from tests.redis_server import free_port
from tests.waits import until_sync


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
