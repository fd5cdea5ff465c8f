"""The worker's removal path (service/removals.py, lua/remove_batch.lua): each entry checked
as it stands when its script runs, settled once, a big group hidden at once and its
QueueData collected a slice a script (lua/collect_leaving.lua)."""

from __future__ import annotations

import redis
from aiohttp.test_utils import TestClient

from service.http.app_keys import NODE, REGISTRY, SETTINGS
from service.keys import Keys
from service.models import RegisterRequest, UnregisterRequest, validated
from service.removals import CONNECTION_CLOSED, EXPIRED, Removal, Removals
from tests.builders import identity, registration
from tests.calls import route
from tests.tables import violations
from tests.waits import BOUND_S, until

K = Keys()
A1, A2 = "10.0.0.1:10911", "10.0.0.2:10911"


async def register_on(client: TestClient, body: dict, channel: str) -> None:
    req = validated(RegisterRequest, body, client.app[SETTINGS])
    await client.app[REGISTRY].register(req, channel=channel)


async def statuses(client: TestClient, removals: list[Removal]) -> list[str]:
    return [s.status for s in await client.app[NODE].removals.settle(removals)]


async def test_a_batch_settles_what_another_worker_already_removed_without_changing_anything(
        make_client, r: redis.Redis) -> None:
    a, b = await make_client(), await make_client()
    await register_on(a, registration(addr=A1, name="broker-a", topics=["T1"]), "conn-1")
    await register_on(a, registration(addr=A2, name="broker-b", topics=["T2"]), "conn-2")
    r.zadd(K.expiry, {A2: 0})  # due
    entries = [Removal(A1, "conn-1", CONNECTION_CLOSED), Removal(A2, "", EXPIRED)]
    assert await statuses(a, entries) == ["removed", "removed"]
    version = r.get(K.version)
    # the same departures reach another worker late (its own close, its own scan)
    assert await statuses(b, [Removal(A1, "conn-1", CONNECTION_CLOSED), Removal(A2, "", EXPIRED)]) == [
        "not owned", "gone"]
    assert r.get(K.version) == version  # nothing changed, nothing published
    assert b.app[NODE].removals.queued == 0
    assert violations(r) == []


async def test_a_close_of_a_connection_that_no_longer_owns_the_broker_keeps_it(client: TestClient) -> None:
    await register_on(client, registration(addr=A1, topics=["T1"]), "conn-1")
    await register_on(client, registration(addr=A1, topics=["T1"]), "conn-2")  # came back on another
    assert await statuses(client, [Removal(A1, "conn-1", CONNECTION_CLOSED)]) == ["not owned"]
    assert await route(client, "T1") is not None


async def test_a_big_groups_routes_go_in_one_script_and_its_queues_are_collected_after(
        make_client, r: redis.Redis, monkeypatch) -> None:
    monkeypatch.setattr(Removals, "PAIR_BUDGET", 600)
    monkeypatch.setattr(Removals, "COLLECT_BUDGET", 600)
    client = await make_client()
    topics = [f"T{i}" for i in range(1_500)]
    await register_on(client, registration(addr=A1, topics=topics), "conn-1")
    await register_on(client, registration(addr=A2, name="broker-b", topics=["T0", "Other"]), "conn-2")
    registry = client.app[REGISTRY]
    before = registry.operations["remove_batch"]
    assert await statuses(client, [Removal(A1, "conn-1", CONNECTION_CLOSED)]) == ["removed"]
    assert registry.operations["remove_batch"] - before == 1
    assert await route(client, "T1") is None
    assert [b["brokerName"] for b in (await route(client, "T0"))["brokerDatas"]] == ["broker-b"]
    # the drainer collects once its queue is empty, 600 + 600 + 300 pairs
    await until(lambda: not r.exists(K.leaving) and registry.operations["collect_leaving"] >= 3, BOUND_S,
                "the group's queues collected in three scripts")
    assert not r.exists(K.queue("T1", "broker-a")) and violations(r) == []


async def test_a_group_leaving_while_a_collection_runs_is_collected_after_it(
        client: TestClient, r: redis.Redis, monkeypatch) -> None:
    # the first departure's collection finds nothing to collect; the group's last member
    # leaves while that script runs: its answer (0 groups left) must not end the collecting
    topics = [f"T{i}" for i in range(300)]  # more than a departure removes at once
    master, slave = registration(addr=A1, topics=topics), registration(addr=A2, broker_id=1, topics=topics)
    await register_on(client, master, "conn-1")
    await register_on(client, slave, "conn-2")
    registry = client.app[REGISTRY]
    collect = registry.collect_leaving
    calls = 0

    async def slave_leaves_meanwhile(budget: int) -> int:
        nonlocal calls
        calls += 1
        left = await collect(budget)
        if calls == 1:
            await registry.unregister(validated(UnregisterRequest, identity(slave), client.app[SETTINGS]))
        return left

    monkeypatch.setattr(registry, "collect_leaving", slave_leaves_meanwhile)
    await registry.unregister(validated(UnregisterRequest, identity(master), client.app[SETTINGS]))
    await until(lambda: not r.exists(K.leaving) and not r.exists(K.topic_index), BOUND_S,
                "the group's queues collected after it left")
    assert violations(r) == []
