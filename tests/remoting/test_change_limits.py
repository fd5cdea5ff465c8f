"""The limits of a change record and of the departures record, one past each, seen from
another worker (its cache learns changes from the records, service/changes.py) through both
fronts: a change of more topics than a record tags one by one (lua/_changes.lua TAG_CAP: a
flush past it), a member change of a group with more pairs than are tagged by topic
(lua/_queues.lua PER_TOPIC_TAGS: tagged by group past it), and more departures than are kept
(lua/_members.lua DEPARTURES_RETAIN)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import orjson
import pytest

from service.remoting import codes
from tests import waits
from tests.builders import identity, registration, topic_config
from tests.lua_source import constant
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker
from tests.remoting.frames import route

TAG_CAP = constant("TAG_CAP", "_changes")
PER_TOPIC_TAGS = constant("PER_TOPIC_TAGS", "_queues")
DEPARTURES_RETAIN = constant("DEPARTURES_RETAIN", "_members")


async def post(worker: Worker, path: str, body: dict[str, Any]) -> None:
    resp = await worker.http.post(path, json=body)
    assert resp.status == 200, await resp.text()


async def http_route(worker: Worker, topic: str) -> dict[str, Any] | None:
    resp = await worker.http.get(f"/v1/routes/{topic}")
    return await resp.json() if resp.status == 200 else None


async def tcp_route(rmq: RemotingClient, topic: str) -> dict[str, Any] | None:
    answer = await rmq.call(route(topic))
    return orjson.loads(answer.body) if answer.code == codes.SUCCESS else None


async def both_fronts(reader: Worker, rmq: RemotingClient, topics: list[str],
                      holds: Callable[[dict[str, Any] | None], bool], what: str) -> None:
    """Every topic's route through both fronts of `reader` comes to hold `holds`."""
    for topic in topics:
        for read in (lambda t=topic: http_route(reader, t), lambda t=topic: tcp_route(rmq, t)):
            async def holding(read: Callable[[], Awaitable[Any]] = read) -> bool:
                return holds(await read())
            await waits.until(holding, waits.BOUND_S, f"{what}: {topic}")


@pytest.fixture
async def two(make_worker: Callable[..., Awaitable[Worker]]) -> tuple[Worker, Worker, RemotingClient]:
    writer, reader = await make_worker(), await make_worker()
    return writer, reader, await RemotingClient.connect(reader.port)


def perms(doc: dict[str, Any] | None) -> list[int]:
    return [q["perm"] for q in doc["queueDatas"]] if doc else []


async def test_a_change_of_one_topic_past_the_tag_cap_reaches_another_workers_cached_routes(two: Any) -> None:
    writer, reader, rmq = two
    names = [f"T{i:05d}" for i in range(TAG_CAP + 1)]
    sample = [names[0], names[TAG_CAP // 2], names[-1]]
    await post(writer, "/v1/brokers/register", registration(topics=names, version=1))
    await both_fronts(reader, rmq, sample, lambda d: perms(d) == [6], "route cached by the reader")
    await post(writer, "/v1/brokers/register",
               registration(topics={t: topic_config(t, perm=4) for t in names}, version=2))
    await both_fronts(reader, rmq, sample, lambda d: perms(d) == [4], "the change seen by the reader")
    await rmq.close()


async def test_a_member_change_of_a_group_past_the_per_topic_tags_reaches_another_workers_cached_routes(
        two: Any) -> None:
    writer, reader, rmq = two
    names = [f"T{i:03d}" for i in range(PER_TOPIC_TAGS + 1)]
    sample = [names[0], names[-1]]
    await post(writer, "/v1/brokers/register", registration(topics=names))
    await both_fronts(reader, rmq, sample, lambda d: d is not None, "route cached by the reader")
    await post(writer, "/v1/brokers/register", registration(addr="10.0.0.2:10911", broker_id=1, topics=names))
    await both_fronts(reader, rmq, sample, lambda d: d is not None and len(d["brokerDatas"][0]["brokerAddrs"]) == 2,
                      "the slave seen by the reader")
    await rmq.close()


async def test_one_departure_past_those_kept_leaves_the_newest_kept(two: Any) -> None:
    writer, reader, rmq = two
    await rmq.close()
    for i in range(DEPARTURES_RETAIN + 1):
        body = registration(addr=f"10.{i // 250}.{i % 250}.1:10911", name=f"broker-{i}", topics=[])
        await post(writer, "/v1/brokers/register", body)
        await post(writer, "/v1/brokers/unregister", identity(body))
    resp = await reader.http.get("/v1/departures")
    assert resp.status == 200
    departed = [(d["at"], d["brokerName"]) for d in (await resp.json())["departures"]]
    # newest first; departures within one ms may be kept in either order
    at = [a for a, _ in departed]
    assert len(departed) == DEPARTURES_RETAIN and at == sorted(at, reverse=True)
    assert {name for _, name in departed} < {f"broker-{i}" for i in range(DEPARTURES_RETAIN + 1)}
