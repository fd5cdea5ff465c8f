"""The cached read path: fresh within the stated bound, ETags, and the watch long poll."""

from __future__ import annotations

import asyncio
import time

import redis
from aiohttp.test_utils import TestClient

from service.http.app_keys import CACHE
from tests import waits
from tests.builders import identity, registration, topic_config
from tests.calls import register, route

BOUND_S = 1.0  # RMQ_MAX_STALENESS_MS default, the bound README states
# for the tests that count Redis calls: no poll of the poller's own, and a bound no loaded
# machine runs past, while they count
QUIET_POLL = {"version_poll_ms": 60_000, "max_staleness_ms": 120_000}


async def stale_for(client: TestClient, topic: str, check, limit_s: float = 30) -> float:
    """How long after the call the last read whose answer fails ``check`` was sent (0 when
    none did). The bound holds for a read from when it arrives: a read sent past it must see
    the change, however long its answer then takes on a loaded machine."""
    started = time.monotonic()
    stale_sent = 0.0

    async def changed() -> bool:
        nonlocal stale_sent
        sent = time.monotonic() - started
        if check(await route(client, topic)):
            return True
        stale_sent = sent
        return False

    await waits.until(changed, limit_s, f"{topic}'s route changed", poll_s=0.01)
    return stale_sent


def write_queues(answer: dict | None) -> int | None:
    return None if answer is None else answer["queueDatas"][0]["writeQueueNums"]


async def test_change_through_one_worker_is_read_fresh_through_another_within_the_bound(make_client) -> None:
    a, b = await make_client(), await make_client()
    await register(a, registration(topics={"T": topic_config("T", write=4)}, version=1))
    assert write_queues(await route(b, "T")) == 4  # now cached in b
    await register(a, registration(topics={"T": topic_config("T", write=8)}, version=2))
    assert await stale_for(b, "T", lambda r: write_queues(r) == 8) <= BOUND_S


async def test_fresh_within_the_bound_after_the_change_channel_was_killed(make_client, r: redis.Redis) -> None:
    a, b = await make_client(), await make_client()
    await register(a, registration(topics={"T": topic_config("T", write=4)}, version=1))
    assert write_queues(await route(b, "T")) == 4
    assert r.execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
    await register(a, registration(topics={"T": topic_config("T", write=8)}, version=2))
    assert await stale_for(b, "T", lambda r: write_queues(r) == 8) <= BOUND_S


async def test_repeated_reads_are_served_without_running_a_script(make_client, r: redis.Redis) -> None:
    client = await make_client(**QUIET_POLL)
    await register(client, registration())
    await route(client, "TopicTest")
    await client.app[CACHE].poll_once()  # a confirmed version, as the poller keeps it
    before = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    for _ in range(50):
        assert await route(client, "TopicTest") is not None
    assert r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) == before


async def test_reads_of_held_answers_past_the_bound_share_one_poll_instead_of_a_read_each(
        make_client, r: redis.Redis) -> None:
    client = await make_client(**QUIET_POLL)
    topics = [f"T{i}" for i in range(200)]
    await register(client, registration(topics={t: topic_config(t) for t in topics}))
    for t in topics:
        await route(client, t)
    cache = client.app[CACHE]
    await cache.poll_once()
    cache.confirmed_at -= 2 * cache.bound  # as when the event loop fell behind the poller
    before = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    answers = await asyncio.gather(*(route(client, t) for t in topics))
    assert all(a is not None and a["queueDatas"] for a in answers)
    assert r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) - before <= 2  # a poll, not 200 reads


async def test_cached_answers_are_not_served_past_the_bound_when_redis_is_gone(make_client, redis_server) -> None:
    client = await make_client()
    await register(client, registration())
    await route(client, "TopicTest")
    redis_server.stop()
    try:
        await asyncio.sleep(BOUND_S + 0.1)  # time must pass: past the bound, what the test is about
        assert (await client.get("/v1/routes/TopicTest")).status == 503
    finally:
        redis_server.start()


async def test_route_answer_carries_an_etag_and_if_none_match_gives_304(client: TestClient) -> None:
    await register(client, registration())
    first = await client.get("/v1/routes/TopicTest")
    etag = first.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')
    again = await client.get("/v1/routes/TopicTest", headers={"If-None-Match": etag})
    assert again.status == 304 and again.headers["ETag"] == etag and await again.read() == b""


async def test_etag_changes_when_the_route_changes(client: TestClient) -> None:
    await register(client, registration(version=1))
    etag = (await client.get("/v1/routes/TopicTest")).headers["ETag"]
    await client.post("/v1/brokers/broker-a/wipe-write-perm")
    await client.app[CACHE].poll_once()
    resp = await client.get("/v1/routes/TopicTest", headers={"If-None-Match": etag})
    assert resp.status == 200 and resp.headers["ETag"] != etag


async def test_cluster_and_topic_lists_answer_304_too(client: TestClient) -> None:
    await register(client, registration())
    for path in ("/v1/cluster", "/v1/topics", "/v1/clusters/DefaultCluster/topics"):
        etag = (await client.get(path)).headers["ETag"]
        assert (await client.get(path, headers={"If-None-Match": etag})).status == 304


async def test_watch_returns_as_soon_as_the_route_changes(make_client) -> None:
    a, b = await make_client(), await make_client()
    await register(a, registration(version=1))
    etag = (await b.get("/v1/routes/TopicTest")).headers["ETag"]

    async def change_later() -> float:
        await asyncio.sleep(0.3)  # time must pass: the watch must not answer before the change (asserted below)
        await a.post("/v1/brokers/broker-a/wipe-write-perm")
        return time.monotonic()

    started = time.monotonic()
    watch = asyncio.create_task(b.get(f"/v1/routes/TopicTest?watch={etag.strip(chr(34))}&timeout=10s"))
    changed_at = await change_later()
    resp = await watch
    assert resp.status == 200
    assert (await resp.json())["queueDatas"][0]["perm"] == 4
    assert resp.headers["ETag"] != etag
    assert time.monotonic() - started >= 0.3
    assert time.monotonic() - changed_at <= BOUND_S


async def test_watch_of_an_old_version_returns_at_once(client: TestClient) -> None:
    await register(client, registration())
    started = time.monotonic()
    resp = await client.get('/v1/routes/TopicTest?watch="0000"&timeout=10s')
    # at once: long before the watch's 10 s, with room for a loaded machine
    assert resp.status == 200 and time.monotonic() - started < 5


async def test_watch_times_out_with_304_when_nothing_changes(client: TestClient) -> None:
    await register(client, registration())
    etag = (await client.get("/v1/routes/TopicTest")).headers["ETag"]
    started = time.monotonic()
    resp = await client.get(f"/v1/routes/TopicTest?watch={etag}&timeout=500ms")
    assert resp.status == 304 and resp.headers["ETag"] == etag
    assert time.monotonic() - started >= 0.5


async def test_watch_is_not_woken_by_another_topics_change(make_client) -> None:
    client = await make_client()
    await register(client, registration(topics=["Watched"]))
    etag = (await client.get("/v1/routes/Watched")).headers["ETag"]
    watch = asyncio.create_task(client.get(f"/v1/routes/Watched?watch={etag}&timeout=1s"))
    await waits.until(lambda: client.app[CACHE].watchers == 1, waits.BOUND_S, "the watch waiting")
    await register(client, registration(addr="10.0.0.2:10911", name="broker-b", topics=["Other"]))
    resp = await watch
    assert resp.status == 304


async def test_watch_sees_a_topic_appear(make_client) -> None:
    a, b = await make_client(), await make_client()
    first = await b.get("/v1/routes/Later")
    assert first.status == 404
    watch = asyncio.create_task(b.get(f"/v1/routes/Later?watch={first.headers['ETag']}&timeout=10s"))
    await waits.until(lambda: b.app[CACHE].watchers == 1, waits.BOUND_S, "the watch waiting")
    await register(a, registration(topics=["Later"]))
    resp = await watch
    assert resp.status == 200 and (await resp.json())["queueDatas"][0]["brokerName"] == "broker-a"


async def test_bad_watch_timeout_is_rejected(client: TestClient) -> None:
    resp = await client.get("/v1/routes/T?watch=x&timeout=soon")
    assert resp.status == 400 and (await resp.json())["error"] == "INVALID_REQUEST"


async def test_unregister_through_one_worker_empties_the_others_cache(make_client) -> None:
    a, b = await make_client(), await make_client()
    reg = registration()
    await register(a, reg)
    assert await route(b, "TopicTest") is not None
    await a.post("/v1/brokers/unregister", json=identity(reg))
    assert await stale_for(b, "TopicTest", lambda r: r is None) <= BOUND_S
