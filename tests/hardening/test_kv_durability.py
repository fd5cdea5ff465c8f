"""KV config survives a Redis restart with AOF on (redis-server of the test's own, own dir).

Written and read back through the API of a real worker process that stays up across the
restart (and so also recovers by itself):

- SHUTDOWN and SIGTERM: Redis flushes and fsyncs the AOF on the way down, nothing is lost;
- SIGKILL with `appendfsync everysec`, after waiting > 1 s: the last fsync has happened,
  nothing is lost (writes of the last second before a SIGKILL could be: documented).
"""

from __future__ import annotations

import signal
import time
from typing import Callable, Iterator

import pytest
import redis
import requests

from service.keys import ORDER_TOPIC_CONFIG
from tests.builders import registration
from tests.hardening.harness import Worker, atomic_violations, own_redis
from tests.redis_server import RedisServer
from tests.waits import until_sync

ENTRIES = {(ns, f"key{i}"): f"value-{ns}-{i}-{'é' if i % 2 else 'x'}" for ns in ("NS1", "NS2", ORDER_TOPIC_CONFIG)
           for i in range(50)}


def shutdown(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    try:
        client.shutdown()  # SHUTDOWN: flushes and fsyncs the AOF, then exits
    except redis.ConnectionError:
        pass
    assert server.proc is not None
    server.proc.wait(timeout=30)
    server.proc = None


def sigterm(server: RedisServer) -> None:
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(timeout=30)
    server.proc = None


def sigkill_after_fsync(server: RedisServer) -> None:
    time.sleep(2.0)  # everysec: the background fsync of the last writes has run
    server.stop()  # SIGKILL


@pytest.fixture
def aof_server() -> Iterator[RedisServer]:
    server = own_redis("--appendonly", "yes", "--appendfsync", "everysec")
    yield server
    server.cleanup()


def get(session: requests.Session, url: str) -> requests.Response:
    """A read that retries 503 past the 2 s recovery window, with room for a loaded machine
    (a stale pooled connection may fail its first call after a restart: see test_faults.py,
    pooled connections)."""
    def answered() -> tuple[requests.Response] | None:
        resp = session.get(url, timeout=10)
        return None if resp.status_code == 503 else (resp,)  # in a tuple: a Response of 4xx is false

    [resp] = until_sync(answered, 10.0, f"{url} answering other than 503", poll_s=0.05)
    return resp


def wait_ok(session: requests.Session, url: str, limit_s: float = 30) -> None:
    def ready() -> bool:
        try:
            return session.get(url + "/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    until_sync(ready, limit_s, "the worker ready after Redis returned")


@pytest.mark.parametrize("stop", [shutdown, sigterm, sigkill_after_fsync], ids=["SHUTDOWN", "SIGTERM", "SIGKILL-after-1s"])
def test_kv_written_through_the_api_survives_a_redis_restart_with_aof(aof_server: RedisServer,
                                                                      stop: Callable[[RedisServer], None]) -> None:
    worker = Worker(aof_server.url, RMQ_SCAN_INTERVAL_MS=3_600_000).start()
    session = requests.Session()
    try:
        for (ns, key), value in ENTRIES.items():
            assert session.put(f"{worker.url}/v1/kv/{ns}/{key}", json={"value": value}, timeout=10).status_code == 200
        # a deleted key stays deleted, an emptied namespace stays (as {})
        assert session.put(f"{worker.url}/v1/kv/EMPTIED/k", json={"value": "v"}, timeout=10).status_code == 200
        assert session.delete(f"{worker.url}/v1/kv/EMPTIED/k", timeout=10).status_code == 200
        assert session.delete(f"{worker.url}/v1/kv/NS1/key0", timeout=10).status_code == 200
        # a broker too, so the route tables' recovery is checked as well
        reg = registration(topics=["DurableTopic"], timeout_ms=3_600_000)
        assert session.post(f"{worker.url}/v1/brokers/register", json=reg, timeout=10).status_code == 200

        stop(aof_server)
        assert session.get(f"{worker.url}/v1/kv/NS2/key1", timeout=10).status_code == 503
        aof_server.start()  # same port, same dir: the AOF is replayed
        wait_ok(session, worker.url)

        for (ns, key), value in ENTRIES.items():
            resp = get(session, f"{worker.url}/v1/kv/{ns}/{key}")
            if (ns, key) == ("NS1", "key0"):
                assert resp.status_code == 404
            else:
                assert resp.status_code == 200 and resp.json() == {"value": value}, (ns, key, resp.text)
        table = get(session, f"{worker.url}/v1/kv/NS2").json()["table"]
        assert table == {k: v for (ns, k), v in ENTRIES.items() if ns == "NS2"}
        assert get(session, f"{worker.url}/v1/kv/EMPTIED").json() == {"table": {}}
        # ORDER_TOPIC_CONFIG comes back in a broker's register answer too
        answer = session.post(f"{worker.url}/v1/brokers/register", json=reg, timeout=10).json()
        assert answer["kvTable"] == {k: v for (ns, k), v in ENTRIES.items() if ns == ORDER_TOPIC_CONFIG}
        assert get(session, f"{worker.url}/v1/routes/DurableTopic").status_code == 200
        r = redis.Redis.from_url(aof_server.url)
        assert atomic_violations(r) == []
        r.close()
        assert worker.alive()
    finally:
        session.close()
        worker.cleanup()
