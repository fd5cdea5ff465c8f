"""The registry on a Redis Cluster (RMQ_REDIS_CLUSTER=true): hash-tagged keys, one slot."""

from __future__ import annotations

from typing import Iterator

import pytest
from redis.cluster import RedisCluster

from service.worker import create_app
from service.config import Settings, StartupError
from service.redis_cluster import node_url, parse_cluster_url
from tests.builders import identity, registration
from tests.calls import register, route
from tests.redis_cluster import RedisClusterNodes
from tests.settings_env import settings_from
from tests.waits import until


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    cluster = RedisClusterNodes(masters=3)
    yield f"redis://127.0.0.1:{cluster.nodes[0].port}/0"
    cluster.stop()


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
    async def expired() -> bool:
        return await route(b, "TopicTest") is None

    # 200 ms timeout, 100 ms scans: room for a loaded machine
    await until(expired, 10, "the silent broker's route gone", poll_s=0.05)
    assert (await b.get("/readyz")).status == 200


def test_a_seed_list_names_every_node_with_the_urls_credentials_and_options() -> None:
    seeds = parse_cluster_url("rediss://u:p@h1:7000, h2:7001,[::1]:7002/0?ssl_cert_reqs=none")
    assert seeds.nodes == [("h1", 7000), ("h2", 7001), ("::1", 7002)]
    assert seeds.url == "rediss://u:p@h1:7000/0?ssl_cert_reqs=none"
    assert parse_cluster_url("redis://h1").nodes == [("h1", 6379)]


def test_a_nodes_url_keeps_the_seed_urls_credentials_tls_and_options() -> None:
    seed = parse_cluster_url("rediss://u:p@h1:7000,h2:7001/0?ssl_cert_reqs=none").url
    assert node_url(seed, "10.0.0.5", 7005) == "rediss://u:p@10.0.0.5:7005/0?ssl_cert_reqs=none"
    assert node_url(seed, "::1", 7002) == "rediss://u:p@[::1]:7002/0?ssl_cert_reqs=none"


@pytest.mark.parametrize("url,cluster,says", [
    ("redis://:secret@h1:7000,h2:x/0", "true", "seed 'h2:x' is not host:port"),
    ("redis://h1:7000,,h2:7001/0", "true", "an empty host in the seed list"),
    ("redis://h1:7000,h2:70000/0", "true", "seed 'h2:70000' is not host:port"),
    ("redis://h1:7000/2", "true", "database 0 only, not '2'"),
    ("redis+sentinel://h1:26379/rmq/0", "true", "starts with redis:// or rediss://"),
    ("redis://h1:7000,h2:7001/0", "false", "set RMQ_REDIS_CLUSTER=true"),
])
def test_a_bad_seed_list_stops_with_one_clear_line(url: str, cluster: str, says: str) -> None:
    with pytest.raises(StartupError) as stopped:
        settings_from({"REDIS_URL": url, "RMQ_REDIS_CLUSTER": cluster})
    message = str(stopped.value)
    assert "REDIS_URL" in message and says in message and "secret" not in message and "\n" not in message
