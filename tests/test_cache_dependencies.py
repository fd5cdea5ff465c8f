"""What a change evicts: exactly the cached answers it may change, and no other.

Three groups serve six topics (TX exists nowhere); every answer is cached, one change is
made, and the topics whose answers left the cache are compared with those the change can
alter. The rest must still be served without a script run.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.http.app_keys import CACHE, NODE, REGISTRY, SETTINGS
from service.keys import ORDER_TOPIC_CONFIG, Keys
from service.models import RegisterRequest, validated
from service.removals import CONNECTION_CLOSED, EXPIRED, Removal
from tests.builders import registration, topic_config
from tests.calls import register, route

K = Keys()
TOPICS = ("T1", "T2", "TA", "TB", "TC", "TX")
A0, A1, B0, C0 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911", "10.0.2.1:10911"


def group_a(version: int = 1, **changes: Any) -> dict:
    topics = {"T1": topic_config("T1"), "T2": topic_config("T2"), "TA": topic_config("TA")}
    topics.update(changes.pop("topics", {}))
    return registration(addr=changes.pop("addr", A0), name="broker-a", topics=topics, version=version, **changes)


async def seed(client: TestClient) -> None:
    await register(client, group_a())
    await register(client, registration(addr=A1, name="broker-a", broker_id=1, topics=["T1", "T2", "TA"]))
    await register(client, registration(addr=B0, name="broker-b", topics=["T1", "TB"]))
    await register(client, registration(addr=C0, name="broker-c", topics=["TC"]))


async def evalsha_calls(r: redis.Redis) -> int:
    return r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


async def cache_everything(client: TestClient) -> None:
    for topic in TOPICS:
        await route(client, topic)
    assert (await client.get("/v1/cluster")).status == 200
    await client.app[CACHE].poll_once()
    assert cached(client) == set(TOPICS)


def cached(client: TestClient) -> set[str]:
    cache = client.app[CACHE]
    return {t for t in TOPICS if cache.lookup_route("http", t) is not None}


async def register_on_channel(client: TestClient, body: dict, channel: str) -> None:
    req = validated(RegisterRequest, body, client.app[SETTINGS])
    await client.app[REGISTRY].register(req, channel=channel)


async def expire(client: TestClient, r: redis.Redis, addr: str) -> None:
    r.zadd(K.expiry, {addr: 0})
    [settled] = await client.app[NODE].removals.settle([Removal(addr, "", EXPIRED)])
    assert settled.status == "removed"


Change = Callable[[TestClient, redis.Redis], Awaitable[Any]]

CASES: dict[str, tuple[Change, set[str]]] = {
    "register a new topic": (
        lambda c, r: register(c, group_a(version=2, topics={"TN": topic_config("TN")})), set()),
    "register a changed topic": (
        lambda c, r: register(c, group_a(version=2, topics={"TA": topic_config("TA", write=8)})), {"TA"}),
    "register a changed address": (
        lambda c, r: register(c, group_a(addr="10.0.0.9:10911")), {"T1", "T2", "TA"}),
    "slave takes the master's id": (
        lambda c, r: register(c, registration(addr=A1, name="broker-a", broker_id=0, topics=["T1", "T2", "TA"])),
        {"T1", "T2", "TA"}),
    "unregister a slave": (
        lambda c, r: c.post("/v1/brokers/unregister", json={"clusterName": "DefaultCluster", "brokerAddr": A1,
                                                           "brokerName": "broker-a", "brokerId": 1}),
        {"T1", "T2", "TA"}),
    "expiry of a group's last address": (lambda c, r: expire(c, r, C0), {"TC"}),
    "wipe write permission": (lambda c, r: c.post("/v1/brokers/broker-b/wipe-write-perm"), {"T1", "TB"}),
    "delete a topic": (lambda c, r: c.delete("/v1/topics/T2"), {"T2"}),
    "order config put": (
        lambda c, r: c.put(f"/v1/kv/{ORDER_TOPIC_CONFIG}/TB", json={"value": "broker-b:4"}), {"TB"}),
    "another namespace's KV put": (lambda c, r: c.put("/v1/kv/OTHER/TB", json={"value": "x"}), set()),
    "filter servers of an address": (
        lambda c, r: register(c, registration(addr=B0, name="broker-b", topics=["T1", "TB"], filters=["10.0.9.9:1"])),
        {"T1", "TB"}),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_change_evicts_exactly_the_answers_it_may_change(make_client, r: redis.Redis, case: str) -> None:
    client = await make_client(order_message_enable=True)
    await seed(client)
    await cache_everything(client)
    action, expected = CASES[case]
    resp = await action(client, r)
    assert getattr(resp, "status", 200) == 200
    still = cached(client)
    # a new topic's route was not cached under its name before: only its own answer could change
    assert set(TOPICS) - still == expected
    before = await evalsha_calls(r)
    for topic in still:
        await route(client, topic)
    assert await evalsha_calls(r) == before


async def test_a_change_of_a_topic_keeps_cluster_info_cached_and_a_group_change_evicts_it(client: TestClient) -> None:
    await seed(client)
    await cache_everything(client)
    await register(client, group_a(version=2, topics={"TA": topic_config("TA", write=8)}))
    assert ("cluster",) in client.app[CACHE].scoped
    await register(client, group_a(addr="10.0.0.9:10911"))
    assert ("cluster",) not in client.app[CACHE].scoped


async def test_a_connection_close_evicts_the_routes_of_its_broker_group(client: TestClient) -> None:
    await seed(client)
    await register_on_channel(client, registration(addr=C0, name="broker-c", topics=["TC"]), "conn-1")
    await cache_everything(client)
    [settled] = await client.app[NODE].removals.settle([Removal(C0, "conn-1", CONNECTION_CLOSED)])
    assert settled.status == "removed"
    assert set(TOPICS) - cached(client) == {"TC"}


async def test_a_new_pair_evicts_the_topics_cached_not_found_answer(client: TestClient) -> None:
    await seed(client)
    await cache_everything(client)
    await register(client, registration(addr=C0, name="broker-c", topics=["TC", "TX"], version=2))
    assert set(TOPICS) - cached(client) == {"TX"}
    assert await route(client, "TX") is not None
