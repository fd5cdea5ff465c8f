"""What the model test (tests/model/test_model.py) found the registry doing otherwise than
RocketMQ 5.3.3's NameServer, each as a plain test named after the behaviour. One marked
xfail(strict=True) is a difference in code being changed elsewhere: it passes (and its
mark must go) once that change lands."""

from __future__ import annotations

import pytest

from tests.builders import registration
from tests.calls import register, route


def member(broker_id: int, zone: str | None, acting: bool | None) -> dict:
    body = registration(addr=f"10.0.0.{broker_id + 1}:10911", broker_id=broker_id, topics=["T1", "T2"])
    if acting is not None:
        body["enableActingMaster"] = acting
    if zone is not None:
        body["zoneName"] = zone
    return body


@pytest.mark.xfail(strict=True, reason="the unchanged path (lua/register*.lua) refreshes liveness "
                                       "only; Java sets the group's zoneName at every registration")
async def test_an_unchanged_registration_sets_the_groups_zone(client) -> None:
    # the model test's shrunk run: a 5.x slave of zone-b registers first (prime slave), a
    # 4.x master without a zone joins (Java: the group's zone becomes null), the slave's
    # periodic registration, byte for byte its first, makes it zone-b again on Java
    slave = member(1, "zone-b", False)
    await register(client, slave)
    await register(client, member(0, None, None))
    await register(client, slave)
    answer = await route(client, "T1")
    assert answer is not None and answer["brokerDatas"][0].get("zoneName") == "zone-b"


@pytest.mark.xfail(strict=True, reason="the unchanged path (lua/register*.lua) refreshes liveness "
                                       "only; Java sets enableActingMaster at every registration")
async def test_an_unchanged_registration_sets_the_groups_acting_master_flag(client) -> None:
    acting_slave = member(1, None, True)
    await register(client, acting_slave)
    await register(client, member(0, None, None))  # a 4.x master: Java's flag becomes false
    await register(client, acting_slave)
    answer = await route(client, "T1")
    assert answer is not None and answer["brokerDatas"][0].get("enableActingMaster") is True


ALL_TOPICS_SLICE = 20_000  # Registry.LIST_SLICES["all"]


@pytest.mark.xfail(strict=True, reason="lua/topic_lists.lua unpacks a 20,000-name page, past Lua's "
                                       "~8,000 values, once the list has two slices (being fixed)")
async def test_the_all_topics_list_past_one_slice_names_every_topic(client) -> None:
    names = [f"T{i}" for i in range(ALL_TOPICS_SLICE + 1)]
    await register(client, registration(topics=names, timeout_ms=86_400_000))
    resp = await client.get("/v1/topics")
    assert resp.status == 200, await resp.text()
    assert sorted((await resp.json())["topicList"]) == sorted(names)
