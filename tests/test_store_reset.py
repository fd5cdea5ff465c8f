"""A store reset is an incident (service/store_watch.py): workers on a real redis-server with
a short scan interval, a registered fleet, then the store wiped (FLUSHALL, as Redis
restarted empty or a failover to an empty replica leaves it). Each worker notices within a
scan interval, counts and logs the reset once, stamps the store anew and serves on; the
reset is recorded in the store, so every worker's dashboard read, /readyz and
rmq_store_reset_open say so, a worker started after the reset included, until the fleet is
back, and end at the same pass; the departures of the last hour are written back. The real worker process'
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
from tests.builders import identity, registration
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


async def opened(client: TestClient) -> dict[str, Any] | None:
    """The reset this worker's answer calls an incident now (None: none)."""
    reset = (await store(client))["lastReset"]
    return reset if reset is not None and reset["recent"] else None


async def reset_gauge(client: TestClient) -> float:
    body = await (await client.get("/metrics")).text()
    return next(float(line.split()[-1]) for line in body.splitlines() if line.startswith("rmq_store_reset_open "))


async def wiped_then_started(make_client: Any, r: redis.Redis, groups: int = 4) -> tuple[TestClient, TestClient]:
    """A worker that knew `groups` groups noticed the store wiped; another started after,
    once it tells the reset: (the old worker, the new one)."""
    old = await make_client(scan_interval_ms=SCAN_MS)
    await registered(old, groups)
    await scanned(old, groups)
    r.flushall()
    await until(lambda: old.app[SCANNER].watch.resets == 1)
    new = await make_client(scan_interval_ms=SCAN_MS)
    await until(lambda: new.app[SCANNER].watch.recent() is not None)
    return old, new


async def test_a_worker_started_after_the_reset_tells_it_as_the_worker_that_noticed(
        make_client: Any, r: redis.Redis) -> None:
    old, new = await wiped_then_started(make_client, r)
    told = await opened(new)
    assert told is not None and (told["lostGroups"], told["lostTopics"]) == (4, 8), told
    assert told["at"] == (await opened(old))["at"]
    assert "the store was reset at" in (await (await new.get("/readyz")).json())["store"]
    assert await reset_gauge(new) == 1


async def test_a_worker_started_on_the_emptied_store_before_any_other_noticed_learns_the_reset(
        make_client: Any, r: redis.Redis) -> None:
    """The new worker stamps the emptied store first (a fresh data-set id, as on a new
    deployment); the worker that knew the fleet finds the id replaced and records it."""
    old = await make_client(scan_interval_ms=1_000)
    await registered(old, 3)
    await scanned(old, 3)
    r.flushall()
    new = await make_client(scan_interval_ms=SCAN_MS)
    await until(lambda: r.get(Keys().dataset) is not None)
    await until(lambda: new.app[SCANNER].watch.recent() is not None)
    assert old.app[SCANNER].watch.resets == 1 and new.app[SCANNER].watch.resets == 0
    assert (await opened(new))["lostGroups"] == 3


async def test_every_worker_ends_the_reset_at_the_same_pass_once_the_fleet_is_back(
        make_client: Any, r: redis.Redis) -> None:
    old, new = await wiped_then_started(make_client, r)
    await registered(new, 3)  # not yet back: 3 of 4
    await scanned(new, 3)
    await asyncio.sleep(SCAN_MS * 3 / 1000)
    assert await opened(old) is not None and await opened(new) is not None
    await registered(new, 4)
    await until(lambda: all(w.app[SCANNER].watch.recent() is None for w in (old, new)))
    backs = {(await store(w))["lastReset"]["backAt"] for w in (old, new)}
    assert len(backs) == 1 and None not in backs, backs
    for w in (old, new):
        assert "store" not in await (await w.get("/readyz")).json()
        assert await reset_gauge(w) == 0


async def test_the_lost_counts_are_the_most_any_noticing_worker_knew(make_client: Any, r: redis.Redis) -> None:
    """A worker whose scan had not counted the last groups yet does not shrink the record."""
    slow = await make_client(scan_interval_ms=2_000)
    fast = await make_client(scan_interval_ms=SCAN_MS)
    await registered(fast, 2)
    await scanned(slow, 2)
    await registered(fast, 6)
    await scanned(fast, 6)
    r.flushall()
    await until(lambda: all(w.app[SCANNER].watch.resets == 1 for w in (slow, fast)))
    await until(lambda: slow.app[SCANNER].watch.last is not None and slow.app[SCANNER].watch.last.groups == 6)
    assert r.hget(Keys().store_reset, "lostGroups") == "6"


async def test_the_departures_of_the_last_hour_survive_a_wipe(make_client: Any, r: redis.Redis) -> None:
    client = await make_client(scan_interval_ms=SCAN_MS)
    await registered(client, 3)
    for body in fleet(3)[:2]:
        resp = await client.post("/v1/brokers/unregister", json=identity(body))
        assert resp.status == 200
    await until(lambda: len(client.app[SCANNER].watch.departures.entries) == 2)
    before = (await (await client.get("/v1/departures")).json())["departures"]
    r.flushall()
    await until(lambda: client.app[SCANNER].watch.resets == 1)
    after = (await (await client.get("/v1/departures")).json())["departures"]
    assert after == before and len(after) == 2
