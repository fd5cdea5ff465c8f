"""Concurrent route reads of one topic sharing one route.lua call (service/shared_reads.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import redis

from service.config import Settings
from service.models import RegisterRequest, validated
from service.registry import Registry
from service.shared_reads import SharedReads
from service.store import Store
from tests.builders import registration


def route_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


async def registered(settings: Settings, **kw: Any) -> Registry:
    reg = Registry(Store(settings))
    await reg.register(validated(RegisterRequest, registration(**kw), settings))
    return reg


async def test_reads_of_one_topic_begun_together_share_one_call(settings: Settings, r: redis.Redis) -> None:
    reg = await registered(settings, topics=["T"])
    await reg.route("T")  # route.lua loaded (a first EVALSHA is refused NOSCRIPT)
    before = route_calls(r)
    routes = await asyncio.gather(*(reg.route("T") for _ in range(10)), reg.route("Other"))
    assert len({route.body for route in routes[:10]}) == 1 and routes[0].body is not None
    assert routes[10].body is None
    assert route_calls(r) - before == 2  # one for T, one for Other
    assert reg.route_reads.shared == 9


async def test_a_read_begun_after_the_call_was_sent_makes_its_own_and_sees_writes_before_it(
        settings: Settings) -> None:
    reg = await registered(settings, topics=["T"])
    first = asyncio.create_task(reg.route("T"))
    for _ in range(3):  # the first read's call goes out
        await asyncio.sleep(0)
    # a second group takes the topic too; a read begun after that must name it
    other = await registered(settings, topics=["T"], name="broker-b", addr="10.0.0.2:10911")
    later = await reg.route("T")
    assert [q["brokerName"] for q in orjson.loads(later.body or b"{}")["queueDatas"]] == ["broker-a", "broker-b"]
    await first
    assert reg.route_reads.shared == 0


async def test_a_reader_going_away_leaves_the_shared_call_to_the_others(settings: Settings) -> None:
    reg = await registered(settings, topics=["T"])
    leaving, staying = asyncio.create_task(reg.route("T")), asyncio.create_task(reg.route("T"))
    await asyncio.sleep(0)
    leaving.cancel()
    assert (await staying).body is not None
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_failed_call_fails_every_read_that_shared_it() -> None:
    shared: SharedReads[int] = SharedReads()

    async def fail() -> int:
        raise ConnectionError("redis went away")

    results = await asyncio.gather(shared.read("k", fail), shared.read("k", fail), return_exceptions=True)
    assert [type(e) for e in results] == [ConnectionError, ConnectionError]
    assert shared.shared == 1
