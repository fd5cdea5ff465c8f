"""Departures: every broker that leaves is recorded by the script that removes it, kept an
hour and at most 1,000, and listed newest first by GET /v1/departures from any worker."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest
import redis
from aiohttp.test_utils import TestClient

from service.http.app_keys import SCANNER
from service.keys import Keys
from tests.builders import identity, registration
from tests.calls import register
from tests.waits import BOUND_S, until

K = Keys()
HOUR_MS = 3_600_000
RETAIN = 1_000  # docs/api.md: at most the last 1,000
MASTER = registration(addr="10.0.0.1:10911", name="broker-a", broker_id=0, cluster="C1")
SLAVE = registration(addr="10.0.0.2:10911", name="broker-a", broker_id=1, cluster="C1", topics=[])


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def departures(client: TestClient) -> list[dict]:
    resp = await client.get("/v1/departures")
    assert resp.status == 200, await resp.text()
    return (await resp.json())["departures"]


async def unregister(client: TestClient, reg: dict) -> None:
    resp = await client.post("/v1/brokers/unregister", json=identity(reg))
    assert resp.status == 200, await resp.text()


def filler(r: redis.Redis, count: int, at: int) -> None:
    """`count` departures at `at` - count .. `at` - 1, as the scripts write them."""
    entries = {orjson.dumps({"brokerAddr": f"10.9.{i // 250}.{i % 250}:10911", "brokerName": f"old-{i}",
                             "cluster": "C0", "brokerId": 0, "cause": "expired", "at": at - count + i}).decode():
               at - count + i for i in range(count)}
    r.zadd(K.departures, entries)


async def test_an_unregistered_slave_is_listed_by_another_worker_with_its_cause(make_client, r: redis.Redis) -> None:
    a, b = await make_client(), await make_client()
    await register(a, MASTER)
    await register(a, SLAVE)
    before = redis_ms(r)
    await unregister(a, SLAVE)
    after = redis_ms(r)
    listed = await departures(b)
    assert [{k: v for k, v in d.items() if k != "at"} for d in listed] == [
        {"brokerAddr": "10.0.0.2:10911", "brokerName": "broker-a", "cluster": "C1", "brokerId": 1,
         "cause": "unregistered", "backAt": None}]
    assert before <= listed[0]["at"] <= after
    assert listed == await departures(a)


async def test_an_expired_broker_is_recorded_as_expired(client: TestClient, r: redis.Redis) -> None:
    await register(client, registration(addr="10.0.0.3:10911", name="broker-b", broker_id=1, cluster="C2",
                                        timeout_ms=200))
    assert await until(client.app[SCANNER].scan_once, BOUND_S, "a scan removing the expired broker") == 1
    [gone] = await departures(client)
    assert (gone["brokerAddr"], gone["brokerName"], gone["cluster"], gone["brokerId"], gone["cause"]) == (
        "10.0.0.3:10911", "broker-b", "C2", 1, "expired")


async def test_the_expiry_log_line_names_the_group_and_the_role(
        client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    await register(client, registration(addr="10.0.0.3:10911", name="broker-b", broker_id=1, cluster="C2",
                                        timeout_ms=200))
    with caplog.at_level(logging.INFO, logger="service.scanner"):
        assert await until(client.app[SCANNER].scan_once, BOUND_S, "a scan removing the expired broker") == 1
    [line] = [rec.getMessage() for rec in caplog.records if "expired" in rec.getMessage()]
    assert line == ("broker 10.0.0.3:10911 (slave 1 of group broker-b) of cluster C2 expired: "
                    "removed from the route tables")


async def test_departures_are_listed_newest_first(client: TestClient) -> None:
    await register(client, MASTER)
    await register(client, SLAVE)
    other = registration(addr="10.0.0.5:10911", name="broker-c", broker_id=0, cluster="C1")
    await register(client, other)
    for reg in (SLAVE, other, MASTER):
        await unregister(client, reg)
        await asyncio.sleep(0.005)  # a distinct millisecond each
    listed = await departures(client)
    assert [d["brokerAddr"] for d in listed] == ["10.0.0.1:10911", "10.0.0.5:10911", "10.0.0.2:10911"]
    assert listed[0]["at"] > listed[1]["at"] > listed[2]["at"]


async def test_a_second_unregister_of_a_gone_broker_records_nothing(client: TestClient) -> None:
    await register(client, MASTER)
    await unregister(client, MASTER)
    await unregister(client, MASTER)
    assert len(await departures(client)) == 1


async def test_the_record_keeps_the_last_thousand(client: TestClient, r: redis.Redis) -> None:
    filler(r, RETAIN, redis_ms(r))
    await register(client, MASTER)
    await unregister(client, MASTER)
    assert r.zcard(K.departures) == RETAIN
    listed = await departures(client)
    assert len(listed) == RETAIN
    assert listed[0]["brokerAddr"] == MASTER["brokerAddr"]
    assert listed[-1]["brokerName"] == "old-1"  # old-0, the oldest, made room


async def test_a_departure_trims_those_older_than_an_hour(client: TestClient, r: redis.Redis) -> None:
    filler(r, 3, redis_ms(r) - HOUR_MS - 1_000)
    await register(client, MASTER)
    await unregister(client, MASTER)
    assert [orjson.loads(m)["brokerAddr"] for m in r.zrange(K.departures, 0, -1)] == [MASTER["brokerAddr"]]


async def test_the_read_leaves_out_departures_older_than_an_hour_not_yet_trimmed(
        client: TestClient, r: redis.Redis) -> None:
    now = redis_ms(r)
    filler(r, 1, now - HOUR_MS - 1_000)
    filler(r, 1, now - 60_000)
    assert [d["at"] for d in await departures(client)] == [now - 60_001]
    assert r.zcard(K.departures) == 2  # a read writes nothing


async def test_the_answer_carries_an_etag_and_a_poller_that_has_it_gets_304(client: TestClient) -> None:
    await register(client, MASTER)
    await unregister(client, MASTER)
    first = await client.get("/v1/departures")
    again = await client.get("/v1/departures", headers={"If-None-Match": first.headers["ETag"]})
    assert first.status == 200 and again.status == 304


async def scan_pass(client: TestClient) -> None:
    """One pass's store check: what marks the returns (service/departure_copy.py)."""
    scanner = client.app[SCANNER]
    await scanner.observe_tables()
    await scanner.check_store()


async def test_a_broker_that_left_and_registered_again_is_marked_back_for_every_worker(
        make_client, r: redis.Redis) -> None:
    a, b = await make_client(scan_interval_ms=60_000), await make_client(scan_interval_ms=60_000)
    await register(a, MASTER)
    await register(a, SLAVE)
    await unregister(a, SLAVE)
    await scan_pass(a)
    assert [d["backAt"] for d in await departures(b)] == [None]  # not back yet
    await register(a, SLAVE)
    before = redis_ms(r)
    await scan_pass(a)
    [listed] = await departures(b)
    assert listed["brokerAddr"] == SLAVE["brokerAddr"] and before <= listed["backAt"] <= redis_ms(r), listed
    await scan_pass(b)  # a later pass of another worker keeps the first mark
    assert await departures(a) == [listed]


async def test_only_the_newest_departure_of_an_address_is_marked_back(make_client) -> None:
    """An address that left, came back unseen by any pass and left again: its older departure
    is no evidence of when it came back, and the newer one is not back."""
    client = await make_client(scan_interval_ms=60_000)
    await register(client, MASTER)
    await register(client, SLAVE)
    await unregister(client, SLAVE)
    await asyncio.sleep(0.005)
    await register(client, SLAVE)
    await unregister(client, SLAVE)
    await scan_pass(client)
    assert [d["backAt"] for d in await departures(client)] == [None, None]
    await register(client, SLAVE)
    await scan_pass(client)
    newer, older = await departures(client)
    assert newer["backAt"] is not None and older["backAt"] is None


async def test_the_returns_past_the_record_bound_lose_those_older_than_an_hour(
        make_client, r: redis.Redis) -> None:
    client = await make_client(scan_interval_ms=60_000)
    old = redis_ms(r) - HOUR_MS - 1_000
    r.hset(K.departures_back, mapping={f"10.9.0.{i}:10911|{old}": old for i in range(RETAIN + 1)})
    await register(client, MASTER)
    await unregister(client, MASTER)
    await register(client, MASTER)
    await scan_pass(client)
    assert list(r.hgetall(K.departures_back)) == [f"{MASTER['brokerAddr']}|{(await departures(client))[0]['at']}"]
