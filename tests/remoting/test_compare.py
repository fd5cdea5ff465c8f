"""`rmq-registry compare A B` finds what two NameServers answer differently (two workers
with tables of their own here, on one Redis under two key prefixes), and nothing when
they answer alike."""

from __future__ import annotations

import asyncio
import io
import ssl
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from service.remoting.compare import compare, route_differences
from service.remoting import codes
from tests.processes import console_script
from tests.remoting import broker5
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker

MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"
ST1 = broker5.mapping_info("ST1", "broker-a", 4)


ROOT = Path(__file__).resolve().parents[2]
OPEN: list[RemotingClient] = []


async def registered(worker: Worker, *registrations: Any, tls: ssl.SSLContext | None = None) -> None:
    """Registered over a connection that stays open (its close would remove the brokers)."""
    client = await RemotingClient.connect(worker.port, tls=tls)
    OPEN.append(client)
    for cmd in registrations:
        answer = await client.call(cmd)
        assert answer.code == codes.SUCCESS, answer.remark


def master(topics: dict[str, Any], mappings: dict[str, Any] | None = None, acting: bool = False) -> Any:
    return broker5.register(broker5.plain_body(topics, mappings), addr=MASTER, acting=acting)


@pytest.fixture
async def pair(make_worker: Callable[..., Awaitable[Worker]]) -> AsyncIterator[tuple[Worker, Worker]]:
    yield await make_worker(key_prefix="rmq-a"), await make_worker(key_prefix="rmq-b")
    while OPEN:
        await OPEN.pop().close()


def addr(worker: Worker) -> str:
    return f"127.0.0.1:{worker.port}"


async def differences(a: Worker, b: Worker) -> list[str]:
    report = await compare(addr(a), addr(b), progress_out=io.StringIO())
    return report.differences


TABLE = {n: broker5.topic_config(n, 4, 4) for n in ("T1", "T2", "ST1")}


async def test_two_nameservers_that_answer_alike_have_no_differences(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    for w in pair:
        await registered(w, master(TABLE, {"ST1": ST1}))
    report = await compare(addr(a), addr(b), progress_out=io.StringIO())
    assert report.differences == [] and report.topics == 3


async def test_a_missing_topic_is_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE))
    await registered(b, master({k: v for k, v in TABLE.items() if k != "T2"}))
    found = await differences(a, b)
    assert f"topic T2: listed only on {addr(a)}" in found
    assert f"topic T2: no route on {addr(b)}" in found


async def test_a_different_permission_is_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE))
    await registered(b, master({**TABLE, "T1": broker5.topic_config("T1", 4, 4, perm=4)}))
    assert await differences(a, b) == [f"topic T1: broker-a perm 6 on {addr(a)}, 4 on {addr(b)}"]


async def test_different_queue_counts_are_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE))
    await registered(b, master({**TABLE, "T1": broker5.topic_config("T1", 8, 4)}))
    assert await differences(a, b) == [f"topic T1: broker-a readQueueNums 4 on {addr(a)}, 8 on {addr(b)}"]


async def test_a_different_address_is_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE), broker5.register(broker5.plain_body(TABLE), addr=SLAVE, broker_id=1))
    await registered(b, master(TABLE))
    found = await differences(a, b)
    assert f"group broker-a: addrs {{0: {MASTER}, 1: {SLAVE}}} on {addr(a)}, {{0: {MASTER}}} on {addr(b)}" in found
    assert any(line.startswith("topic T1: broker-a addrs") for line in found)


async def test_an_acting_master_flag_is_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE, acting=True))
    await registered(b, master(TABLE, acting=False))
    assert f"group broker-a: enableActingMaster true on {addr(a)}, false on {addr(b)}" in await differences(a, b)


async def test_a_missing_static_topic_mapping_is_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE, {"ST1": ST1}))
    await registered(b, master(TABLE))
    found = await differences(a, b)
    assert len(found) == 1 and found[0].startswith("topic ST1: mappings {broker-a: ")


def zoned(zone_b: str) -> list[Any]:
    """broker-a in zone-a, and broker-b in `zone_b`."""
    body = broker5.plain_body(TABLE)
    return [broker5.register(body, addr=MASTER, zone="zone-a"),
            broker5.register(body, name="broker-b", addr="10.0.1.1:10911", zone=zone_b)]


async def test_a_route_that_differs_in_zone_mode_is_found_with_a_zone(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    for w, zone_b in ((a, "zone-b"), (b, "zone-a")):
        await registered(w, *zoned(zone_b))
    report = await compare(addr(a), addr(b), progress_out=io.StringIO(), zone="zone-a")
    assert f"topic T1 (zone zone-a): queues on broker-b only on {addr(b)}" in report.differences
    assert f"topic T1: broker-b zoneName zone-b on {addr(a)}, zone-a on {addr(b)}" in report.differences


async def test_a_missing_group_is_found(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    await registered(a, master(TABLE))
    found = await differences(a, b)
    assert f"cluster DefaultCluster: groups only on {addr(a)}: broker-a" in found
    assert f"group broker-a: only on {addr(a)}" in found


async def test_groups_listed_in_another_order_are_found(pair: tuple[Worker, Worker]) -> None:
    # "Aa" and "BB" share a hash: the two names share a bin, listed in the order they came
    a, b = pair
    aa = broker5.register(broker5.plain_body(TABLE), addr=MASTER, name="broker-Aa")
    bb = broker5.register(broker5.plain_body(TABLE), addr=SLAVE, name="broker-BB")
    await registered(a, aa, bb)
    await registered(b, bb, aa)
    found = await differences(a, b)
    assert found == [f"topic {t}: {what} order broker-Aa, broker-BB on {addr(a)}, broker-BB, broker-Aa on {addr(b)}"
                     for t in sorted(TABLE) for what in ("queueDatas", "brokerDatas")]


def test_a_group_only_one_side_lists_is_no_order_difference() -> None:
    def doc(*names: str) -> dict[str, Any]:
        return {"queueDatas": [{"brokerName": n, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
                               for n in names],
                "brokerDatas": [{"brokerName": n, "cluster": "c", "brokerAddrs": {"0": n}} for n in names]}

    lines = route_differences("T1", doc("x", "y", "z"), doc("x", "z"), "A", "B")
    assert lines == ["topic T1: queues on y only on A"]


@pytest.mark.slow
async def test_many_topics_are_read_with_progress_and_a_bounded_number_in_flight(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    many = {f"T{i}": broker5.topic_config(f"T{i}") for i in range(3_000)}
    for w in pair:
        await registered(w, master(many))
    progress = io.StringIO()
    import service.remoting.compare as module
    module.PROGRESS_EVERY_S, before = 0.0, module.PROGRESS_EVERY_S
    try:
        report = await compare(addr(a), addr(b), in_flight=4, progress_out=progress)
    finally:
        module.PROGRESS_EVERY_S = before
    assert report.differences == [] and report.topics == 3_000
    assert "routes read" in progress.getvalue()


@pytest.mark.parametrize("plant, code", [(False, 0), (True, 1)], ids=["alike", "a difference"])
async def test_the_command_exits_1_when_anything_differs(pair: tuple[Worker, Worker], plant: bool, code: int) -> None:
    a, b = pair
    await registered(a, master(TABLE))
    await registered(b, master({**TABLE, "T1": broker5.topic_config("T1", 4, 4, perm=2)} if plant else TABLE))
    proc = await asyncio.create_subprocess_exec(console_script("rmq-registry"), "compare", addr(a), addr(b),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == code, err.decode()
    assert ("no differences" in out.decode()) is (not plant)


async def test_the_command_with_a_zone_compares_the_routes_in_zone_mode(pair: tuple[Worker, Worker]) -> None:
    a, b = pair
    for w, zone_b in ((a, "zone-b"), (b, "zone-a")):
        await registered(w, *zoned(zone_b))
    # this checkout's command (python -m service from the repository root)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "service", "compare", addr(a), addr(b),
                                                "--zone", "zone-a", cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, err.decode()
    assert f"topic T1 (zone zone-a): queues on broker-b only on {addr(b)}" in out.decode().splitlines()


async def test_the_command_exits_2_when_a_nameserver_cannot_be_reached(pair: tuple[Worker, Worker]) -> None:
    proc = await asyncio.create_subprocess_exec(console_script("rmq-registry"), "compare", addr(pair[0]), "127.0.0.1:1",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert err.decode().count("\n") == 1 and "127.0.0.1:1: cannot connect" in err.decode()
