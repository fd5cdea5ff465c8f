"""The commands of docs/api.md "Running", as real processes."""

from __future__ import annotations

import json
import signal
import sys
import urllib.request

from tests.processes import console_script, start, wait_http
from tests.redis_server import free_port


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def test_console_script_serves_on_the_embedded_store_and_says_so() -> None:
    port = free_port()
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)])
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz")
        assert get_json(f"http://127.0.0.1:{port}/v1/topics") == {"topicList": []}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert b"embedded in-process store" in out and b"NOT durable" in out


def test_python_module_serves_on_redis_from_the_environment(redis_url: str) -> None:
    port = free_port()
    proc = start([sys.executable, "-m", "service", "serve", "--port", str(port)],
                 env={"REDIS_URL": redis_url, "RMQ_HOST": "127.0.0.1"})
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz")
        body = json.dumps({"clusterName": "c", "brokerAddr": "10.0.0.1:1", "brokerName": "b", "brokerId": 0,
                           "topicConfigSerializeWrapper": {"topicConfigTable": {},
                                                           "dataVersion": {"timestamp": 1, "counter": 1}}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/brokers/register", data=body,
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).close()
        assert get_json(f"http://127.0.0.1:{port}/v1/cluster")["clusterAddrTable"] == {"c": ["b"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert b"embedded" not in out
