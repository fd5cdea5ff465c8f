"""Split registration (RocketMQ 5's enableSplitRegistration): a broker sends its table in
parts of splitRegistrationSize topics, each part a REGISTER_BROKER of its own, and moves its
dataVersion at every part (TopicConfigManager.buildSerializeWrapper). Each part is a body
the address is found by (lua/register.lua's bodyDigest; over RocketMQ's protocol the digest
leaves the dataVersion out), so a part that did not change takes the unchanged path
(lua/register_unchanged.lua), which stores its dataVersion. Against the test's real
redis-server."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import redis

from service.config import Settings
from service.models import RegisterRequest, validated
from service.registry import Registry
from service.store import Store
from tests.builders import registration, topic_config

PART = 800


class Broker:
    """A split broker: its table in parts, its dataVersion moving at every part."""

    def __init__(self, n: int, **fields: Any) -> None:
        names = [f"T{i:05d}" for i in range(n)]
        self.parts = [{t: topic_config(t) for t in names[i:i + PART]} for i in range(0, n, PART)]
        self.fields = fields
        self.counter = itertools.count(1)

    def request(self, i: int) -> tuple[RegisterRequest, str]:
        """Part `i`'s next registration, and its digest without the dataVersion (what the
        RocketMQ front digests: here the part's table and fields)."""
        version = next(self.counter)
        req = validated(RegisterRequest, registration(topics=self.parts[i], version=version, **self.fields), Settings())
        return req, hashlib.sha256(repr((self.parts[i], self.fields)).encode()).hexdigest()[:32]

    async def round(self, reg: Registry) -> int:
        """Every part once, as the broker's periodic registration sends them; how many took
        the unchanged path."""
        unchanged = 0
        for i in range(len(self.parts)):
            req, digest = self.request(i)
            dv = req.topicConfigSerializeWrapper.dataVersion.canonical()
            if await reg.register_unchanged(digest, "", dv) is not None:
                unchanged += 1
            else:
                await reg.register(req, digest=digest)
        return unchanged


def registry(settings: Settings) -> Registry:
    reg = Registry(Store(settings))
    reg.STAGE_MIN = 10**9  # one script a part: the unchanged path is what is tested
    return reg


async def test_every_part_takes_the_unchanged_path_once_the_table_is_in_place(settings: Settings) -> None:
    reg, broker = registry(settings), Broker(3 * PART)
    await broker.round(reg)  # new topics: each part changes the tables
    await broker.round(reg)  # nothing changes: each part's body is kept
    assert await broker.round(reg) == 3


async def test_the_unchanged_path_stores_the_parts_data_version(settings: Settings, r: redis.Redis) -> None:
    reg, broker = registry(settings), Broker(2 * PART)
    for _ in range(3):
        await broker.round(reg)
    req, digest = broker.request(0)
    assert await reg.register_unchanged(digest, "", req.topicConfigSerializeWrapper.dataVersion.canonical())
    stored = r.hget("{rmq}:live:10.0.0.1:10911", "dataVersion")
    assert stored == req.topicConfigSerializeWrapper.dataVersion.canonical()


async def test_a_part_whose_topic_an_operator_deleted_registers_in_full_and_brings_it_back(
        settings: Settings, r: redis.Redis) -> None:
    reg, broker = registry(settings), Broker(2 * PART)
    for _ in range(2):
        await broker.round(reg)
    await reg.delete_topic("T00001", None)  # a topic of the first part
    assert await broker.round(reg) == 0
    assert r.exists("{rmq}:queue:T00001:broker-a") == 1
    assert await broker.round(reg) == 2


async def test_an_operators_write_perm_change_sends_every_part_the_full_way(settings: Settings) -> None:
    reg, broker = registry(settings), Broker(2 * PART)
    for _ in range(2):
        await broker.round(reg)
    await reg.write_perm("broker-a", "wipe")
    assert await broker.round(reg) == 0


async def test_a_body_that_changes_the_tables_retires_the_addresses_other_bodies(settings: Settings) -> None:
    """A part whose registration changed what readers see (here: a topic's queues) leaves
    the tables unlike the other parts' bodies may say: those go the full way once."""
    reg, broker = registry(settings), Broker(2 * PART)
    for _ in range(2):
        await broker.round(reg)
    broker.parts[1]["T00900"] = topic_config("T00900", write=2)
    assert await broker.round(reg) == 1  # the first part unchanged, the second changed
    assert await broker.round(reg) == 1  # the first part the full way, the second unchanged
    assert await broker.round(reg) == 2


async def test_an_address_keeps_a_bounded_number_of_bodies(settings: Settings, r: redis.Redis) -> None:
    reg = registry(settings)
    one = validated(RegisterRequest, registration(topics=["T"]), Settings())
    for i in range(140):
        await reg.register(one, digest=f"d{i:04d}")
    held = r.hget("{rmq}:member:10.0.0.1:10911", "bodyDigest").split()
    assert len(held) == r.hlen("{rmq}:body-digests") == 128
    assert held == [f"d{i:04d}" for i in range(128)]  # the newest left out: a cycle of parts keeps hitting
