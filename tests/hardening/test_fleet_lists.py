"""README's fleet (300 broker groups in three clusters, 108,313 topics: tests/ui/fleet.py)
read through both fronts of a real worker process: every topic list, each cluster's list
(100 groups, many slices of Registry.LIST_SLICES["cluster"]) and the cluster info answer
whole, where a topic list past 20,000 topics once failed (a page past Lua's unpack limit)."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
from typing import Any, Iterator

import orjson
import pytest

from service.remoting import codes
from tests.hardening.harness import Worker, own_redis
from tests.redis_server import free_port
from tests.remoting.client import RemotingClient, request
from tests.ui.fleet import CLUSTERS, Fleet, plan, seed_fleet

pytestmark = pytest.mark.timeout(900)  # seeding a million (topic, group) pairs on a shared machine


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[Worker, int, Fleet, dict[str, dict[str, dict[str, Any]]]]]:
    server = own_redis()
    remoting = free_port()
    try:
        seeded = seed_fleet(server.url)
        # what is tested is that every list answers whole at this size, not how fast: a slice
        # script may take past the default 1 s Redis timeout while the suite loads the machine
        worker = Worker(server.url, RMQ_SCAN_INTERVAL_MS=3_600_000, RMQ_REMOTING_PORT=remoting,
                        RMQ_REMOTING_HOST="127.0.0.1", RMQ_REDIS_TIMEOUT_MS=10_000).start(wait_s=60)
        try:
            yield worker, remoting, seeded, plan(random.Random(29))[1]
            assert "ERROR" not in worker.log(10**7), worker.log()
        finally:
            worker.cleanup()
    finally:
        server.cleanup()


def http_list(worker: Worker, path: str) -> list[str]:
    with urllib.request.urlopen(worker.url + path, timeout=120) as resp:
        return json.loads(resp.read())["topicList"]


def tcp_list(port: int, code: int, ext: dict[str, str] | None = None) -> list[str]:
    async def call() -> list[str]:
        client = await RemotingClient.connect(port)
        try:
            answer = await client.call(request(code, ext), timeout=120)
        finally:
            await client.close()
        assert answer.code == codes.SUCCESS, answer.remark
        return orjson.loads(answer.body)["topicList"]

    return asyncio.run(call())


def test_the_whole_topic_list_of_the_fleet_answers_on_both_fronts(fleet: Any) -> None:
    worker, port, seeded, tables = fleet
    expected = sorted({t for table in tables.values() for t in table})
    assert len(expected) == seeded.topics
    assert tcp_list(port, codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER) == expected
    assert http_list(worker, "/v1/topics") == expected


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_each_clusters_topic_list_of_the_fleet_answers_on_both_fronts(fleet: Any, cluster: str) -> None:
    worker, port, seeded, tables = fleet
    expected = sorted({t for name, table in tables.items() if seeded.cluster_of[name] == cluster for t in table})
    assert sorted(tcp_list(port, codes.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})) == expected
    assert sorted(http_list(worker, f"/v1/clusters/{cluster}/topics")) == expected


def test_the_unit_topic_lists_of_the_fleet_answer_empty_on_both_fronts(fleet: Any) -> None:
    # no topic of the fleet has a unit flag: every slice of 108,313 topics is read and filtered
    worker, port, _, _ = fleet
    for code, path in ((codes.GET_UNIT_TOPIC_LIST, "/v1/topics/unit"),
                       (codes.GET_HAS_UNIT_SUB_TOPIC_LIST, "/v1/topics/unit-sub"),
                       (codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, "/v1/topics/unit-sub-without-unit")):
        assert tcp_list(port, code) == []
        assert http_list(worker, path) == []


def test_the_cluster_info_of_the_fleet_names_every_group_on_both_fronts(fleet: Any) -> None:
    worker, port, seeded, _ = fleet

    async def call() -> dict[str, Any]:
        client = await RemotingClient.connect(port)
        try:
            answer = await client.call(request(codes.GET_BROKER_CLUSTER_INFO), timeout=120)
        finally:
            await client.close()
        assert answer.code == codes.SUCCESS, answer.remark
        return answer.body

    body = asyncio.run(call())
    for name in seeded.cluster_of:
        assert f'"{name}"'.encode() in body
    with urllib.request.urlopen(worker.url + "/v1/cluster", timeout=120) as resp:
        info = json.loads(resp.read())
    assert {c: sorted(g) for c, g in info["clusterAddrTable"].items()} == {
        c: sorted(n for n, of in seeded.cluster_of.items() if of == c) for c in CLUSTERS}
    assert set(info["brokerAddrTable"]) == set(seeded.cluster_of)
