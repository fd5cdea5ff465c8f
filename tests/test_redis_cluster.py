"""The registry on a Redis Cluster (RMQ_REDIS_CLUSTER=true): hash-tagged keys, one slot."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from service.worker import create_app
from service.config import Settings
from tests.builders import identity, registration
from tests.calls import register, route
from tests.redis_server import RedisServer, free_port


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    # a cluster node also listens on its port + 10000, so ports above 55535 are refused
    nodes = [RedisServer(free_port(below=55536), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf") for _ in range(3)]
    for node in nodes:
        node.start()
    try:
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=30)
        deadline = time.monotonic() + 15
        while b"cluster_state:ok" not in redis.Redis(port=nodes[0].port).execute_command("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "cluster did not form"
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{nodes[0].port}/0"
    finally:
        for node in nodes:
            node.cleanup()


@pytest.fixture
async def workers(aiohttp_client, cluster_url: str):
    RedisCluster.from_url(cluster_url).flushall()
    settings = Settings(redis_url=cluster_url, redis_cluster=True, scan_interval_ms=100)
    return [await aiohttp_client(create_app(settings)) for _ in range(2)]


async def test_register_route_and_cascade_on_a_cluster(workers) -> None:
    a, b = workers
    master, slave = registration(topics=["T1"]), registration(addr="10.0.0.2:10911", broker_id=1)
    await register(a, master)
    answer = await register(b, slave)
    assert answer["masterAddr"] == "10.0.0.1:10911"
    assert (await route(b, "T1"))["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    await a.post("/v1/brokers/unregister", json=identity(master))
    await b.post("/v1/brokers/unregister", json=identity(slave))
    assert (await (await a.get("/v1/cluster")).json()) == {"brokerAddrTable": {}, "clusterAddrTable": {}}


async def test_expiry_and_kv_on_a_cluster(workers) -> None:
    a, b = workers
    await register(a, registration(timeout_ms=200))
    assert (await a.put("/v1/kv/ns/k", json={"value": "v"})).status == 200
    assert await (await b.get("/v1/kv/ns")).json() == {"table": {"k": "v"}}
    started = time.monotonic()
    while await route(b, "TopicTest") is not None:
        assert time.monotonic() - started < 2
        await asyncio.sleep(0.05)
    assert (await b.get("/readyz")).status == 200
