"""The registry Deployment's readiness probe against the rule docs/deploy.md states
("Readiness and a Redis outage"): a Redis outage, shared by every worker, must not take the
workers out of the Service, so that reads keep answering from memory (the RocketMQ port
with the ConfigMap's RMQ_REMOTING_STALE_READS, HTTP with ?stale) and writes get their 503;
a draining worker leaves it. The manifests are rendered by kustomize and the probe's own
path is asked of a real worker started with the rendered ConfigMap's settings."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

import tests.deploy.test_manifests as m
from service.remoting.client import NameServerClient
from tests.builders import registration
from tests.deploy.test_redis_sentinel import render
from tests.processes import console_script, start, wait_http
from tests.redis_server import RedisServer, free_port
from tests.waits import until_sync

TOKEN = "probe-test-broker-token"
BOUND_S = 20  # a loaded machine notices an outage (a 500 ms poll) well within this


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return render(m.K8S)


def registry_container(docs: list[dict]) -> dict:
    pod = m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))["spec"]
    return next(c for c in pod["containers"] if c["name"] == "registry")


def fetch(url: str, data: dict | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    body = json.dumps(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Worker:
    """A worker process with the rendered ConfigMap's settings, on free ports, its tokens
    file in a temporary folder instead of the Secret's mount."""

    def __init__(self, docs: list[dict], redis_url: str, tmp: Path, **env: str) -> None:
        tokens = tmp / "tokens"
        tokens.write_text(f"broker {TOKEN}\n")
        self.http, self.remoting = free_port(), free_port()
        config = m.one("ConfigMap", "rmq-registry-config", docs=docs)["data"]
        self.proc = start([console_script("rmq-registry"), "serve"], env={
            **config, "REDIS_URL": redis_url, "RMQ_HOST": "127.0.0.1", "RMQ_PORT": str(self.http),
            "RMQ_REMOTING_PORT": str(self.remoting), "RMQ_AUTH_TOKENS_FILE": str(tokens), **env})
        self.base = f"http://127.0.0.1:{self.http}"
        probe = registry_container(docs)["readinessProbe"]["httpGet"]
        assert probe["port"] == "http"
        self.probe = self.base + probe["path"]
        wait_http(self.base + "/readyz", limit_s=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def deployed(rendered: list[dict], own_redis: RedisServer, tmp_path: Path) -> Iterator[Worker]:
    worker = Worker(rendered, own_redis.url, tmp_path, RMQ_DRAIN_MS="3000")
    try:
        yield worker
    finally:
        worker.stop()


def outage(worker: Worker, redis: RedisServer) -> None:
    """Stops Redis and waits until the worker has noticed (its plain /readyz says 503) and
    its cache no longer answers as fresh (a read without ?stale gets its 503): past the
    bound of fresh cached answers, what answers now is stale."""
    redis.stop()
    until_sync(lambda: fetch(worker.base + "/readyz")[0] == 503, BOUND_S, "the worker noticing Redis had stopped")
    until_sync(lambda: fetch(worker.probe)[1].get("redis") == "unreachable", BOUND_S,
               "the probe's answer saying Redis was unreachable")
    until_sync(lambda: fetch(worker.base + "/v1/routes/TopicTest")[0] == 503, BOUND_S,
               "the cache refusing fresh reads")


def test_the_configmap_turns_the_rocketmq_ports_stale_reads_on(rendered: list[dict]) -> None:
    config = m.one("ConfigMap", "rmq-registry-config", docs=rendered)["data"]
    assert config["RMQ_REMOTING_STALE_READS"] == "true"
    assert int(config["RMQ_STALE_MAX_MS"]) > 0


def test_the_readiness_probe_leaves_redis_out(rendered: list[dict]) -> None:
    container = registry_container(rendered)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz?exclude=redis"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"  # nor may liveness restart on it


def test_through_a_redis_outage_the_probe_keeps_the_worker_ready_and_reads_answer(
        deployed: Worker, own_redis: RedisServer) -> None:
    assert fetch(deployed.base + "/v1/brokers/register", registration())[0] == 200

    async def remoting_route() -> dict | None:
        async with NameServerClient(f"127.0.0.1:{deployed.remoting}") as client:
            return await client.route("TopicTest")

    # both fronts have read it: known to this worker
    assert fetch(deployed.base + "/v1/routes/TopicTest?stale")[0] == 200 and asyncio.run(remoting_route())
    outage(deployed, own_redis)
    # every probe of a stretch longer than the probe's failureThreshold x periodSeconds' worth
    # of attempts answers ready
    answers = {fetch(deployed.probe)[0] for _ in range(20)}
    assert answers == {200}
    status, body = fetch(deployed.base + "/v1/routes/TopicTest?stale")
    assert status == 200 and body["brokerDatas"][0]["brokerName"] == "broker-a"
    route = asyncio.run(remoting_route())
    assert route is not None and route["queueDatas"][0]["brokerName"] == "broker-a"


def test_through_a_redis_outage_writes_get_their_503(deployed: Worker, own_redis: RedisServer) -> None:
    outage(deployed, own_redis)
    assert fetch(deployed.probe)[0] == 200
    status, body = fetch(deployed.base + "/v1/brokers/register", registration())
    assert (status, body["error"]) == (503, "STORE_UNAVAILABLE")


def test_a_draining_worker_leaves_the_service(deployed: Worker) -> None:
    assert fetch(deployed.probe)[0] == 200
    deployed.proc.send_signal(signal.SIGTERM)
    def not_ready() -> int | None:
        status = fetch(deployed.probe)[0]
        return None if status == 200 else status

    assert until_sync(not_ready, BOUND_S, "the probe answering not ready while the worker drains") == 503
