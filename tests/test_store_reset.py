"""A store reset is an incident (service/store_watch.py): workers on a real redis-server with
a short scan interval, a registered fleet, then the store wiped (FLUSHALL, as Redis
restarted empty or a failover to an empty replica leaves it). Each worker notices within a
scan interval, counts and logs the reset once, stamps the store anew and serves on; the
dashboard's read and /readyz say so until the fleet is back. The real worker process'
log and metric: tests/test_store_reset_process.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.http.app_keys import SCANNER
from service.keys import SCHEMA_VERSION, Keys
from tests import waits
from tests.builders import registration
from tests.calls import register

SCAN_MS = 100
GROUPS = 20
BOUND_S = 15.0  # every wait: far above the few scan intervals an idle machine needs


def fleet(n: int = GROUPS) -> list[dict[str, Any]]:
    return [registration(f"10.0.1.{i}:10911", f"broker-{i}", topics=[f"T{i}", f"U{i}"]) for i in range(n)]


async def registered(client: TestClient, n: int = GROUPS) -> None:
    for body in fleet(n):
        await register(client, body)


async def until(check: Any, bound: float = BOUND_S) -> None:
    await waits.until(check, bound, "the store watch's condition")


async def scanned(client: TestClient, groups: int) -> None:
    """Until the worker's scanner has seen `groups` broker groups."""
    stats = client.app[SCANNER].stats
    await until(lambda: sum(stats.cluster_groups.values()) == groups)


async def store(client: TestClient) -> dict[str, Any]:
    resp = await client.get("/v1/store")
    assert resp.status == 200
    return await resp.json()


async def test_a_flushall_under_a_registered_fleet_is_counted_once_by_each_worker(
        make_client: Any, r: redis.Redis) -> None:
    workers = [await make_client(scan_interval_ms=SCAN_MS) for _ in range(3)]
    await registered(workers[0])
    for w in workers:
        await scanned(w, GROUPS)
    r.flushall()
    await until(lambda: all(w.app[SCANNER].watch.resets == 1 for w in workers))
    await asyncio.sleep(SCAN_MS * 5 / 1000)  # more passes: none counts it again
    assert [w.app[SCANNER].watch.resets for w in workers] == [1, 1, 1]


async def test_the_reset_is_logged_once_as_an_error_saying_what_was_lost(
        make_client: Any, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    client = await make_client(scan_interval_ms=SCAN_MS)
    await registered(client)
    await scanned(client, GROUPS)
    caplog.set_level(logging.INFO, logger="service.store_watch")
    r.flushall()
    await until(lambda: client.app[SCANNER].watch.resets == 1)
    await asyncio.sleep(SCAN_MS * 5 / 1000)  # more passes: none logs it again
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert f"the {GROUPS} broker groups, {2 * GROUPS} topics and {GROUPS} brokers this worker knew" in errors[0], errors[0]


async def test_a_fleet_registered_and_wiped_between_two_scans_is_a_reset_too(
        make_client: Any, r: redis.Redis) -> None:
    client = await make_client(scan_interval_ms=3_000)
    watch = client.app[SCANNER].watch
    await until(lambda: watch.dataset is not None)  # the first pass, on an empty store
    await registered(client, 3)
    r.flushall()  # before the next pass: no pass saw the fleet, the read cache did
    await until(lambda: watch.resets == 1)
    reset = (await store(client))["lastReset"]
    assert (reset["lostGroups"], reset["lostChanges"]) == (0, 3) and reset["recent"], reset


async def test_after_a_reset_the_worker_stamps_the_store_anew_and_takes_registrations(
        make_client: Any, r: redis.Redis) -> None:
    client = await make_client(scan_interval_ms=SCAN_MS)
    before = r.get(Keys().dataset)
    await registered(client, 2)
    await scanned(client, 2)
    r.flushall()
    await until(lambda: client.app[SCANNER].watch.resets == 1)
    assert r.get(Keys().dataset) not in (None, before)
    assert r.get(Keys().schema) == str(SCHEMA_VERSION)
    await register(client, registration("10.0.2.1:10911", "broker-new", topics=["Fresh"]))
    resp = await client.get("/v1/routes/Fresh")
    assert resp.status == 200


async def test_a_wiped_store_that_held_no_broker_group_is_stamped_anew_without_an_incident(
        make_client: Any, r: redis.Redis) -> None:
    client = await make_client(scan_interval_ms=SCAN_MS)
    watch = client.app[SCANNER].watch
    await until(lambda: watch.dataset is not None)
    r.flushall()
    await until(lambda: r.get(Keys().dataset) is not None)
    assert watch.resets == 0 and (await store(client))["lastReset"] is None


async def test_readyz_and_the_store_read_say_the_store_was_reset_until_the_fleet_is_back(
        make_client: Any, r: redis.Redis) -> None:
    client = await make_client(scan_interval_ms=SCAN_MS)
    await registered(client, 4)
    await scanned(client, 4)
    r.flushall()
    await until(lambda: client.app[SCANNER].watch.resets == 1)
    reset = (await store(client))["lastReset"]
    assert reset["recent"] and (reset["lostGroups"], reset["lostTopics"]) == (4, 8)
    ready = await client.get("/readyz")
    assert ready.status == 200  # the brokers re-register through the same Service
    assert "the store was reset at" in (await ready.json())["store"]
    await registered(client, 4)  # the fleet comes back
    await until(lambda: client.app[SCANNER].watch.recent() is None)
    assert "store" not in await (await client.get("/readyz")).json()
    assert (await store(client))["lastReset"]["backAt"] is not None
