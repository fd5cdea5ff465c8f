"""A 5.3.3 broker with enableSplitRegistration over RocketMQ's protocol: its table in parts
(BrokerController.registerBrokerAll: parts of splitRegistrationSize topics, the static
topics' mappings with the last), its dataVersion moved at every part. The digest of a plain
body leaves the dataVersion out, so each unchanged part takes the unchanged path, and the
dataVersion QUERY_DATA_VERSION compares against is the last part's."""

from __future__ import annotations

import itertools
import re
from typing import Any

import orjson
import pytest

from service.remoting import codes
from tests.remoting import broker5
from tests.remoting.client import RemotingClient, request
from tests.remoting.frames import route

pytestmark = pytest.mark.usefixtures("consistent")

PART = 800
STATIC = {"Topic0": broker5.mapping_info("Topic0", "broker-a", 4)}


def split(table: dict[str, dict[str, Any]]) -> list[tuple[dict[str, dict[str, Any]], dict[str, Any]]]:
    names = list(table)
    parts = [{n: table[n] for n in names[i:i + PART]} for i in range(0, len(names), PART)]
    return [(part, STATIC if i == len(parts) - 1 else {}) for i, part in enumerate(parts)]


async def registration_round(rmq: RemotingClient, parts: list[tuple[dict[str, Any], dict[str, Any]]],
                             counter: itertools.count) -> int:  # type: ignore[type-arg]
    """Every part once, each with the next dataVersion; the last counter sent."""
    last = 0
    for topics, mappings in parts:
        last = next(counter)
        answer = await rmq.call(broker5.register(broker5.plain_body(topics, mappings, counter=last)))
        assert answer.code == codes.SUCCESS, answer.remark
    return last


async def unchanged_count(worker: Any) -> float:
    metrics = await (await worker.http.get("/metrics")).text()
    found = re.search(r'rmq_table_changes_total\{script="register_unchanged"\} ([0-9.]+)', metrics)
    return float(found.group(1)) if found else 0.0


async def test_each_unchanged_part_of_a_split_registration_takes_the_unchanged_path(
        worker: Any, rmq: RemotingClient) -> None:
    parts, counter = split(broker5.topics(3 * PART)), itertools.count(1)
    for _ in range(2):
        await registration_round(rmq, parts, counter)
    before = await unchanged_count(worker)
    await registration_round(rmq, parts, counter)
    assert await unchanged_count(worker) - before == len(parts)
    answer = await rmq.call(route("Topic2000"))
    assert answer.code == codes.SUCCESS and orjson.loads(answer.body)["queueDatas"][0]["brokerName"] == "broker-a"


async def test_the_data_version_a_split_broker_queries_is_its_last_parts(rmq: RemotingClient) -> None:
    parts, counter = split(broker5.topics(2 * PART)), itertools.count(1)
    for _ in range(3):
        last = await registration_round(rmq, parts, counter)
    version = {"counter": last, "stateVersion": 0, "timestamp": 1700000000000}
    asked = request(codes.QUERY_DATA_VERSION, {"brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a",
                                               "brokerId": "0", "clusterName": "DefaultCluster"},
                    orjson.dumps(version))
    answer = await rmq.call(asked)
    assert answer.code == codes.SUCCESS and answer.ext_fields["changed"] == "false"
