"""Split registration (RocketMQ 5's enableSplitRegistration): a broker sends its table in
parts of splitRegistrationSize topics, each part a REGISTER_BROKER of its own with the same
dataVersion. Each part is a body the address is found by (lua/register.lua's bodyDigest),
so a part that did not change takes the unchanged path (lua/register_unchanged.lua).
Against the test's real redis-server."""

from __future__ import annotations

from typing import Any

import redis

from service.config import Settings
from service.models import RegisterRequest, validated
from service.registry import Registry
from service.store import Store
from tests.builders import registration, topic_config

PART = 800


def parts(n: int, version: int = 1, **fields: Any) -> list[RegisterRequest]:
    """A table of `n` topics as BrokerOuterAPI splits it: one registration per PART topics."""
    topics = [f"T{i:05d}" for i in range(n)]
    settings = Settings()
    return [validated(RegisterRequest, registration(topics={t: topic_config(t) for t in topics[i:i + PART]},
                                                     version=version, **fields), settings)
            for i in range(0, n, PART)]


def digest(i: int, version: int = 1) -> str:
    """What a front digests a body into (service/registration.py body_digest): here, a
    name per part and dataVersion, since the bodies differ by part."""
    return f"{version:08x}{i:024x}"


async def register_all(reg: Registry, requests: list[RegisterRequest], version: int = 1) -> None:
    for i, req in enumerate(requests):
        await reg.register(req, digest=digest(i, version))


def registry(settings: Settings) -> Registry:
    reg = Registry(Store(settings))
    reg.STAGE_MIN = 10**9  # one script a part: the unchanged path is what is tested
    return reg


async def test_every_unchanged_part_takes_the_unchanged_path(settings: Settings) -> None:
    reg = registry(settings)
    requests = parts(3 * PART)
    await register_all(reg, requests)
    for i in range(len(requests)):
        assert await reg.register_unchanged(digest(i), "") is not None, i


async def test_a_new_data_version_retires_every_earlier_part(settings: Settings, r: redis.Redis) -> None:
    reg = registry(settings)
    await register_all(reg, parts(2 * PART))
    await reg.register(parts(2 * PART, version=2)[0], digest=digest(0, 2))
    assert await reg.register_unchanged(digest(1), "") is None
    assert await reg.register_unchanged(digest(0, 2), "") is not None
    assert r.hlen("{rmq}:body-digests") == 1


async def test_a_part_whose_topic_an_operator_deleted_registers_in_full_and_brings_it_back(
        settings: Settings, r: redis.Redis) -> None:
    reg = registry(settings)
    await register_all(reg, parts(2 * PART))
    await reg.delete_topic("T00001", None)  # a topic of the first part
    await reg.register(parts(2 * PART)[1], digest=digest(1))  # the second part goes in full first
    assert await reg.register_unchanged(digest(0), "") is None
    await reg.register(parts(2 * PART)[0], digest=digest(0))
    assert r.exists("{rmq}:queue:T00001:broker-a") == 1
    assert await reg.register_unchanged(digest(0), "") is not None


async def test_a_body_that_changes_the_address_retires_its_other_bodies(settings: Settings) -> None:
    """A body with other filter servers leaves the address unlike its earlier bodies: one
    of those sent again must be applied, not taken as unchanged."""
    reg = registry(settings)
    await register_all(reg, parts(2 * PART, filters=["10.0.0.9:9"]))
    await reg.register(parts(2 * PART, filters=["10.0.0.8:8"])[1], digest=digest(7))
    assert await reg.register_unchanged(digest(0), "") is None
    assert await reg.register_unchanged(digest(7), "") is not None


async def test_an_address_keeps_a_bounded_number_of_bodies(settings: Settings, r: redis.Redis) -> None:
    reg = registry(settings)
    one = parts(1)[0]
    for i in range(140):
        await reg.register(one, digest=digest(i))
    held = r.hget("{rmq}:member:10.0.0.1:10911", "bodyDigest").split()
    assert len(held) == r.hlen("{rmq}:body-digests") == 128
    assert held[-1] == digest(139)
