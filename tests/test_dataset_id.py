"""The data set's id: written once into the key space by the first worker, kept by every later
start, so readers outside the service (the analytics history) can tell registries apart."""

from __future__ import annotations

import re
from typing import Any

import redis

from service.keys import Keys


async def test_the_first_worker_names_the_data_set_and_later_ones_keep_the_name(
        make_client: Any, r: redis.Redis) -> None:
    assert r.get(Keys().dataset) is None
    await make_client()
    first = r.get(Keys().dataset)
    assert first is not None and re.fullmatch(r"[0-9a-f]{32}", first)
    await make_client()  # a restart, or a second worker
    assert r.get(Keys().dataset) == first


async def test_a_new_key_space_gets_a_new_name(make_client: Any, r: redis.Redis) -> None:
    await make_client()
    first = r.get(Keys().dataset)
    r.flushall()
    await make_client()
    assert r.get(Keys().dataset) not in (None, first)
