"""Every topic list answers whole one size past its slice (Registry.LIST_SLICES: a list is read
from Redis in slices, lua/topic_lists.lua), through both fronts: the first slice boundary is
where a page of names met Lua's unpack limit (~8,000 values) and the list failed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from service.registry import Registry
from service.remoting import codes
from tests.builders import registration, topic_config
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import register

ALL = Registry.LIST_SLICES["all"] + 1
UNIT = Registry.LIST_SLICE_DEFAULT + 1
GROUPS = Registry.LIST_SLICES["cluster"] + 1


async def listed_tcp(rmq: RemotingClient, code: int, ext: dict[str, str] | None = None) -> list[str]:
    answer = await rmq.call(request(code, ext), timeout=60)
    assert answer.code == codes.SUCCESS, answer.remark
    return orjson.loads(answer.body)["topicList"]


async def listed_http(worker: Worker, path: str) -> list[str]:
    resp = await worker.http.get(path)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["topicList"]


async def registered(rmq: RemotingClient, topics: dict[str, dict[str, Any]], **identity: Any) -> None:
    answer = await rmq.call(register(registration(topics=topics, **identity)), timeout=120)
    assert answer.code == codes.SUCCESS, answer.remark


async def test_the_whole_topic_list_answers_one_topic_past_a_slice(worker: Worker, rmq: RemotingClient) -> None:
    names = [f"orders.{i:06d}" for i in range(ALL)]
    await registered(rmq, {n: topic_config(n) for n in names})
    assert await listed_tcp(rmq, codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER) == names
    assert await listed_http(worker, "/v1/topics") == names


@pytest.mark.parametrize(("code", "path", "flag"), [
    (codes.GET_UNIT_TOPIC_LIST, "/v1/topics/unit", 1),
    (codes.GET_HAS_UNIT_SUB_TOPIC_LIST, "/v1/topics/unit-sub", 2),
    (codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, "/v1/topics/unit-sub-without-unit", 2),
])
async def test_a_unit_topic_list_answers_one_topic_past_a_slice(worker: Worker, rmq: RemotingClient, code: int,
                                                                   path: str, flag: int) -> None:
    # every other topic flagged: the flagged ones span both slices, the list is filtered per slice
    names = [f"unit.{i:05d}" for i in range(UNIT)]
    flagged = names[::2]
    await registered(rmq, {n: topic_config(n, sys_flag=flag if n in flagged else 0) for n in names})
    assert await listed_tcp(rmq, code) == flagged
    assert await listed_http(worker, path) == flagged


async def test_a_clusters_topic_list_answers_one_group_past_a_slice(worker: Worker, rmq: RemotingClient) -> None:
    for g in range(GROUPS):
        await registered(rmq, {f"g{g}.T": topic_config(f"g{g}.T"), "Shared": topic_config("Shared")},
                         addr=f"10.0.1.{g}:10911", name=f"broker-{g:02d}", cluster="Big")
    expected = sorted({"Shared"} | {f"g{g}.T" for g in range(GROUPS)})
    assert await listed_tcp(rmq, codes.GET_TOPICS_BY_CLUSTER, {"cluster": "Big"}) == expected
    assert await listed_http(worker, "/v1/clusters/Big/topics") == expected
