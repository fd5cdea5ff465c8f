"""The load and the checks every failover test shares: brokers registering and
heartbeating, an admin writing KV, producers reading a route with ?stale, through the
workers given; the primary holding the registry SIGKILLed mid-run; afterwards, what was
acknowledged and what of it the promoted primary still has.

A Redis set-up is anything with ``current_primary()`` (the port holding the registry
now), ``node_on(port)`` (its RedisServer) and ``failed_over(old_port)`` (waits for a
promotion, returns the new primary's port)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
from aiohttp.test_utils import TestClient

from tests.builders import identity, registration
from tests.redis_server import RedisServer
from tests.tables import violations

BROKERS = 6
TIMEOUT_MS = 60_000  # no broker may expire in these tests: a removal would be an early expiry
KILL_AT_S = 2.5
RUN_S = 11.0
# the load goes on until a write sent after the kill was acknowledged, or this long after
# the promotion (a loaded machine makes a failover slower: the load waits for it)
RESUMED_WAIT_S = 60.0


class FailingOver(Protocol):
    def current_primary(self) -> int: ...
    def node_on(self, port: int) -> RedisServer: ...
    def failed_over(self, old_port: int, limit_s: float = 20) -> int: ...


@dataclass
class Record:
    kv: dict[str, str] = field(default_factory=dict)  # acknowledged KV writes
    kv_at: dict[str, float] = field(default_factory=dict)  # when each was acknowledged
    pairs: set[tuple[str, str]] = field(default_factory=set)  # acknowledged (brokerName, topic)
    writes: list[tuple[float, float, int]] = field(default_factory=list)  # (sent, answered, status) of every write
    reads: list[tuple[float, int, int | None]] = field(default_factory=list)  # (time, status, age ms)
    refused: int = 0
    promoted_at: float | None = None  # when the test saw a replica promoted

    def write(self, sent: float, status: int) -> None:
        self.writes.append((sent, time.monotonic(), status))


async def send(rec: Record, request: Any) -> int:
    """The status of one write (0 when it got no answer), recorded with when it was sent."""
    sent = time.monotonic()
    try:
        resp = await request
        status = resp.status
        resp.release()
    except (OSError, asyncio.TimeoutError):
        status = 0
    rec.write(sent, status)
    return status


async def broker(i: int, clients: list[TestClient], rec: Record, stop: asyncio.Event) -> None:
    name, n = f"broker-{i}", 0
    topics = [f"T{i}"]
    while not stop.is_set():
        n += 1
        client = clients[n % len(clients)]
        body = registration(addr=f"10.0.0.{i + 1}:10911", name=name, topics=topics + [f"T{i}_{n}"], version=n,
                            timeout_ms=TIMEOUT_MS)
        if await send(rec, client.post("/v1/brokers/register", json=body)) == 200:
            rec.pairs |= {(name, t) for t in topics + [f"T{i}_{n}"]}
            topics.append(f"T{i}_{n}")
        await send(rec, client.post("/v1/brokers/heartbeat", json=identity(body)))
        await asyncio.sleep(0.25)


async def admin(clients: list[TestClient], rec: Record, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        if await send(rec, clients[n % len(clients)].put(f"/v1/kv/FAILOVER/k{n}", json={"value": f"v{n}"})) == 200:
            rec.kv[f"k{n}"] = f"v{n}"
            rec.kv_at[f"k{n}"] = time.monotonic()
        await asyncio.sleep(0.04)


async def producer(clients: list[TestClient], rec: Record, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        resp = await clients[n % len(clients)].get("/v1/routes/T0?stale")
        age = resp.headers.get("X-Registry-Age-Ms")
        rec.reads.append((time.monotonic(), resp.status, int(age) if age else None))
        await resp.read()
        await asyncio.sleep(0.05)


async def run_load(clients: list[TestClient], rr: FailingOver, restart_killed: bool = False) -> tuple[Record, float, int]:
    """The load for RUN_S seconds, the primary SIGKILLed KILL_AT_S in. ``restart_killed``
    starts the killed node again once a replica was promoted (as a supervisor would), so
    that the new primary has a replica again. Returns the record, when the kill was, and
    the primary at the end."""
    rec, stop = Record(), asyncio.Event()
    for c in clients:  # every worker holds T0's route before the load starts
        await c.post("/v1/brokers/register", json=registration(addr="10.0.0.1:10911", name="broker-0", topics=["T0"],
                                                               timeout_ms=TIMEOUT_MS))
        assert (await c.get("/v1/routes/T0")).status == 200
    tasks = [asyncio.create_task(broker(i, clients, rec, stop)) for i in range(BROKERS)]
    tasks += [asyncio.create_task(admin(clients, rec, stop)), asyncio.create_task(producer(clients, rec, stop))]
    await asyncio.sleep(KILL_AT_S)
    old = rr.current_primary()
    killed = rr.node_on(old)
    killed.stop()  # SIGKILL
    killed_at = time.monotonic()
    await asyncio.to_thread(rr.failed_over, old)
    rec.promoted_at = time.monotonic()
    if restart_killed:
        await asyncio.to_thread(killed.start)
    await asyncio.sleep(max(0.0, RUN_S - KILL_AT_S - (time.monotonic() - killed_at)))
    while first_success_after(rec, killed_at) is None and time.monotonic() - rec.promoted_at < RESUMED_WAIT_S:
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks)
    # on two shared cores a failover may happen once more: the tables are the last primary's
    return rec, killed_at, rr.current_primary()


def first_success_after(rec: Record, t: float) -> float | None:
    """When the first write sent after ``t`` was acknowledged."""
    return min((done for sent, done, status in rec.writes if sent >= t and status == 200), default=None)


def longest_write_gap(rec: Record) -> float:
    """The longest time between two acknowledgements (the outage as callers saw it)."""
    done = sorted(done for _, done, status in rec.writes if status == 200)
    return max((b - a for a, b in zip(done, done[1:])), default=0.0)


def lost(rec: Record, r: redis.Redis) -> tuple[list[str], list[tuple[str, str]]]:
    kv = r.hgetall("{rmq}:kv:FAILOVER")
    lost_kv = [k for k, v in rec.kv.items() if kv.get(k) != v]
    lost_pairs = [(n, t) for n, t in rec.pairs if not r.exists(f"{{rmq}}:queue:{t}:{n}")]
    return lost_kv, lost_pairs


@dataclass
class Outcome:
    """What a failover run did, as the tests report it (run with -s to see it)."""

    kv: int
    pairs: int
    lost_kv: list[str]
    lost_pairs: list[tuple[str, str]]
    resumed_s: float | None  # first successful write after the kill
    promoted_s: float | None  # when the test saw a replica promoted, after the kill
    longest_gap_s: float
    stale: list[int]  # ages of the reads answered from a worker's memory after the kill

    def __str__(self) -> str:
        resumed = f"{self.resumed_s:.2f} s" if self.resumed_s is not None else "never"
        promoted = f"{self.promoted_s:.2f} s" if self.promoted_s is not None else "never"
        return (f"{self.kv} KV writes and {self.pairs} (broker, topic) pairs acknowledged, lost {len(self.lost_kv)} "
                f"and {len(self.lost_pairs)}; a replica promoted {promoted} and writes resumed {resumed} after the "
                f"kill, longest write gap "
                f"{self.longest_gap_s:.2f} s; {len(self.stale)} stale reads, oldest {max(self.stale, default=0)} ms")


def outcome(rec: Record, killed_at: float, r: redis.Redis) -> Outcome:
    lost_kv, lost_pairs = lost(rec, r)
    resumed = first_success_after(rec, killed_at)
    return Outcome(len(rec.kv), len(rec.pairs), lost_kv, lost_pairs,
                   resumed - killed_at if resumed is not None else None,
                   rec.promoted_at - killed_at if rec.promoted_at is not None else None, longest_write_gap(rec),
                   [age for t, status, age in rec.reads if t >= killed_at and age is not None])


def assert_nothing_acknowledged_lost(rec: Record, out: Outcome, r: redis.Redis, resume_within_s: float) -> None:
    """Every acknowledged change is on the promoted primary, writes resumed in time (within
    ``resume_within_s`` of the promotion: how long Redis takes to promote a replica on a
    loaded machine is Redis's, not the registry's), every ?stale read was answered, the
    tables are consistent and no broker expired."""
    assert rec.kv and rec.pairs
    assert out.lost_kv == [] and out.lost_pairs == []
    assert out.resumed_s is not None, "writes never resumed after the failover"
    assert out.promoted_s is not None
    assert out.resumed_s - out.promoted_s < resume_within_s, \
        f"writes resumed only {out.resumed_s - out.promoted_s:.2f} s after the promotion"
    # producers were answered throughout, with the age stated whenever it was past the bound
    assert all(status == 200 for _, status, _ in rec.reads), [x for x in rec.reads if x[1] != 200][:5]
    assert violations(r) == []
    # no broker expired: each still has its address (its timeout is 60 s)
    assert all(r.hget(f"{{rmq}}:addrs:broker-{i}", "0") == f"10.0.0.{i + 1}:10911" for i in range(BROKERS))


def workers_settings(**overrides: Any) -> dict[str, Any]:
    """The worker settings every failover test uses, short timeouts for a short outage."""
    return dict(scan_interval_ms=500, broker_timeout_ms=TIMEOUT_MS, redis_timeout_ms=500, version_poll_ms=200,
                **overrides)
