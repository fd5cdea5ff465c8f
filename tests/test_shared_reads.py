"""Concurrent route reads of one topic sharing one route.lua call (service/shared_reads.py)."""

from __future__ import annotations

import asyncio
import sys
import types
from functools import partial
from typing import Any, AsyncIterator, Callable, Coroutine, Generator

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
    assert sorted(q["brokerName"] for q in orjson.loads(later.body or b"{}")["queueDatas"]) == ["broker-a", "broker-b"]
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


def eager_task_factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                       **kw: Any) -> asyncio.Future[Any]:
    """asyncio.eager_task_factory (3.12+), also on 3.11: a new task's coroutine runs at once, inside
    create_task, up to its first suspension."""
    if sys.version_info >= (3, 12):
        return asyncio.eager_task_factory(loop, coro, **kw)  # type: ignore[attr-defined]
    try:
        blocked_on = coro.send(None)
    except StopIteration as done:
        finished = loop.create_future()
        finished.set_result(done.value)
        return finished
    except BaseException as error:  # noqa: BLE001 - the task's outcome, whatever it is
        finished = loop.create_future()
        finished.set_exception(error)
        return finished
    return asyncio.Task(_resumed(coro, blocked_on), loop=loop, **kw)


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, Any], blocked_on: Any) -> Generator[Any, Any, Any]:
    """Drives an already started coroutine on in a task, passing on what the task sends or throws."""
    while True:
        try:
            sent = yield blocked_on
        except BaseException as error:  # noqa: BLE001 - a cancellation goes on to the coroutine
            step: Callable[[], Any] = partial(coro.throw, error)
        else:
            step = partial(coro.send, sent)
        try:
            blocked_on = step()
        except StopIteration as done:
            return done.value


@pytest.fixture
async def eager_tasks() -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    loop.set_task_factory(eager_task_factory)
    yield
    loop.set_task_factory(None)


async def test_under_eager_tasks_a_failed_read_leaves_its_key_to_the_next_read(eager_tasks: None) -> None:
    shared: SharedReads[str] = SharedReads()

    async def fail() -> str:
        raise ConnectionError("redis went away")

    async def answer() -> str:
        return "route"

    with pytest.raises(ConnectionError):
        await shared.read("k", fail)
    assert await shared.read("k", answer) == "route"


async def test_under_eager_tasks_a_read_after_an_answered_one_makes_its_own_call(eager_tasks: None) -> None:
    shared: SharedReads[int] = SharedReads()
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        answer = calls
        await asyncio.sleep(0)  # the call is out: its task suspends, as one waiting on Redis does
        return answer

    assert [await shared.read("k", fetch) for _ in range(3)] == [1, 2, 3]
    assert shared.shared == 0
