"""The read cache stays within its budget whatever is asked of it."""

from __future__ import annotations

import time
import tracemalloc

import redis

from service.http.app_keys import CACHE
from service.cache import ENTRY_OVERHEAD, ReadCache, make_answer
from tests.builders import registration
from tests.calls import register, route
from tests.test_cache_dependencies import evalsha_calls


async def test_a_stream_of_unknown_topics_stays_within_the_negative_budget_and_hot_routes_stay_cached(
        make_client, r: redis.Redis) -> None:
    client = await make_client(cache_negative_entries=50)
    await register(client, registration(topics=["Hot"]))
    await route(client, "Hot")
    cache = client.app[CACHE]
    await cache.poll_once()
    for i in range(400):
        assert await route(client, f"Unknown{i}") is None
        assert len(cache.negatives) <= 50
    before = await evalsha_calls(r)
    assert await route(client, "Hot") is not None
    assert await evalsha_calls(r) == before
    assert cache.stats.evictions == 350


async def test_routes_are_bounded_by_entries_least_recently_used_first(make_client) -> None:
    client = await make_client(cache_max_entries=10)
    await register(client, registration(topics=[f"T{i}" for i in range(30)]))
    cache = client.app[CACHE]
    await cache.poll_once()
    for i in range(30):
        await route(client, "T0")  # kept in use
        await route(client, f"T{i}")
        assert len(cache.routes) <= 10
    assert cache.lookup_route("http", "T0") is not None
    assert cache.lookup_route("http", "T1") is None


async def test_routes_are_bounded_by_bytes(make_client) -> None:
    budget = 10 * (ENTRY_OVERHEAD + 400)
    client = await make_client(cache_max_bytes=budget)
    await register(client, registration(topics=[f"T{i}" for i in range(40)]))
    cache = client.app[CACHE]
    await cache.poll_once()
    for i in range(40):
        await route(client, f"T{i}")
        assert cache.bytes <= budget
    assert 0 < len(cache.routes) < 40
    assert cache.bytes == sum(a.size for a in cache.routes.values())


def test_the_byte_estimate_of_an_entry_is_not_below_what_it_takes() -> None:
    cache = ReadCache(store=None, poll_ms=500, bound_ms=1000)  # type: ignore[arg-type]
    n = 2000
    answers = [make_answer(1, 200, b"x" * 100 + str(i).encode(), (f"broker-{i % 7}", "broker-x"))
               for i in range(n)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i, answer in enumerate(answers):
        cache._insert_route(("http", f"topic-{i}"), answer)
    taken = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    # the answers themselves were built before; add what building one costs
    tracemalloc.start()
    built = [make_answer(1, 200, b"y" * 100 + str(i).encode(), (f"broker-{i % 7}", "broker-x")) for i in range(n)]
    taken += tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(built) == n
    assert cache.bytes >= taken, f"estimated {cache.bytes / n:.0f} B an entry, measured {taken / n:.0f} B"


def test_an_answer_larger_than_the_whole_byte_budget_is_not_cached_and_pushes_no_route_out() -> None:
    cache = ReadCache(store=None, poll_ms=500, bound_ms=1000,  # type: ignore[arg-type]
                      max_bytes=10 * (ENTRY_OVERHEAD + 100))
    small = make_answer(1, 200, b"x" * 100)
    cache._insert_route(("http", "Small"), small)
    cache._insert_route(("http", "Big"), make_answer(1, 200, b"y" * 20 * (ENTRY_OVERHEAD + 100)))
    assert list(cache.routes) == [("http", "Small")]
    assert cache.bytes == small.size
    assert cache.stats.evictions == 1


def test_topic_not_exist_answers_are_bounded_least_recently_used_first() -> None:
    cache = ReadCache(store=None, poll_ms=500, bound_ms=60_000, negative_entries=3)  # type: ignore[arg-type]
    cache.confirmed_at = time.monotonic()  # as a poll that found every record applied
    for i in range(3):
        cache._insert_route(("tcp", f"Unknown{i}"), make_answer(1, 404, b"no"))
    assert cache.lookup_route("tcp", "Unknown0") is not None  # kept in use
    cache._insert_route(("tcp", "Unknown3"), make_answer(1, 404, b"no"))
    assert cache.lookup_route("tcp", "Unknown0") is not None
    assert cache.lookup_route("tcp", "Unknown1") is None
    assert cache.stats.evictions == 1
