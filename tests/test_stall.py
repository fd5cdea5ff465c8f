"""A stall of the machine against an acting-master group, as once seen with real 5.3.3
brokers: its two members heartbeat over RocketMQ's protocol as 5.3.3 brokers do
(BROKER_HEARTBEAT, oneway, no brokerId, every brokerHeartbeatInterval) with a timeout as
short as that interval allows (brokerNotActiveTimeoutMillis), both scaled down here. The
worker and its redis-server are stopped (SIGSTOP) for longer than the timeout, then
resumed. RocketMQ's NameServer expires a broker only when a scan finds
lastUpdateTimestamp + timeout < now, so a heartbeat read before that scan keeps it; the
registry must keep them too, and still expire a broker that stays silent once the stall
is over (docs/design.md, "channel destroy / expiry")."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any, Iterator

import pytest
import redis

from service.keys import Keys
from service.remoting import codes
from tests.builders import registration
from tests.processes import Worker
from tests.redis_server import RedisServer
from tests.remoting import frames
from tests.remoting.client import RemotingClient, request
from tests.waits import BOUND_S, until

K = Keys()
TIMEOUT_MS = 2_000  # an acting-master group's 10 s, scaled down with its heartbeat interval
BEAT_S = 0.2  # 5.3.3's brokerHeartbeatInterval (1 s), scaled down
SCAN_MS = 200
STALL_S = TIMEOUT_MS / 1000 + 0.6  # every member's deadline has passed when the machine resumes
MEMBERS = ("10.0.0.1:10911", "10.0.0.2:10911")


@pytest.fixture(autouse=True)
def workers() -> Iterator[None]:
    yield
    Worker.kill_left()


class Broker:
    """A 5.x broker of an acting-master group on its own connection: it registers, then
    heartbeats every BEAT_S while `beating`."""

    def __init__(self, client: RemotingClient, reg: dict[str, Any]) -> None:
        self.client, self.reg = client, reg
        self.beating = True
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def join(cls, port: int, addr: str, name: str, broker_id: int) -> "Broker":
        client = await RemotingClient.connect(port)
        reg = registration(addr=addr, name=name, broker_id=broker_id, topics=["T1", "T2"], timeout_ms=TIMEOUT_MS)
        assert (await client.call(frames.register(reg, acting=True))).code == codes.SUCCESS
        broker = cls(client, reg)
        broker.task = asyncio.create_task(broker.beat())
        return broker

    async def beat(self) -> None:
        header = {k: self.reg[k] for k in ("clusterName", "brokerAddr", "brokerName")}  # 5.3.3 sends no brokerId
        while True:
            if self.beating:
                await self.client.send(request(codes.BROKER_HEARTBEAT, header, oneway=True))
            await asyncio.sleep(BEAT_S)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        await self.client.close()


def departed(r: redis.Redis) -> dict[str, str]:
    """Address -> cause, of every departure recorded."""
    return {e["brokerAddr"]: e["cause"] for e in map(json.loads, r.zrange(K.departures, 0, -1))}


def members(r: redis.Redis, name: str) -> set[str]:
    return set(r.hvals(K.addrs(name)))


async def stall(worker: Worker, store: RedisServer, seconds: float) -> None:
    """The machine stops: the worker and its Redis do not run for `seconds`."""
    assert store.proc is not None
    pids = (store.proc.pid, worker.proc.pid)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


async def fleet(worker: Worker) -> tuple[list[Broker], Broker]:
    """The acting-master group (master and slave) and a broker of another group that falls
    silent for good when the stall begins."""
    group = [await Broker.join(worker.remoting, addr, "acting", i) for i, addr in enumerate(MEMBERS)]
    silent = await Broker.join(worker.remoting, "10.0.0.9:10911", "silent", 0)
    return group, silent


async def test_heartbeats_sent_during_a_stall_keep_an_acting_master_group_registered(own_redis: RedisServer) -> None:
    r = redis.Redis.from_url(own_redis.url, decode_responses=True)
    worker = Worker(own_redis.url, RMQ_SCAN_INTERVAL_MS=str(SCAN_MS))
    group, silent = await fleet(worker)
    try:
        silent.beating = False
        # the brokers run elsewhere: their heartbeats wait in the stopped worker's sockets
        await stall(worker, own_redis, STALL_S)
        # the silent one expires once the stall is over: scans ran after the grace, and found
        # the group's members heard
        await until(lambda: departed(r).get("10.0.0.9:10911") == "expired", BOUND_S, "the silent broker expired")
        assert members(r, "acting") == set(MEMBERS)
        assert departed(r) == {"10.0.0.9:10911": "expired"}
    finally:
        for broker in (*group, silent):
            await broker.close()


async def test_brokers_stalled_with_the_worker_are_heard_before_anything_expires(own_redis: RedisServer) -> None:
    r = redis.Redis.from_url(own_redis.url, decode_responses=True)
    worker = Worker(own_redis.url, RMQ_SCAN_INTERVAL_MS=str(SCAN_MS))
    group, silent = await fleet(worker)
    try:
        for broker in (*group, silent):
            broker.beating = False  # the whole machine stops, the brokers with it
        await stall(worker, own_redis, STALL_S)
        resumed = time.monotonic()
        # the brokers' own schedule brings their next heartbeat up to an interval after they
        # resume (5.3.3: 1 s; here a second too, past several scans)
        await asyncio.sleep(1.0)
        for broker in group:
            broker.beating = True
        await until(lambda: departed(r).get("10.0.0.9:10911") == "expired", BOUND_S, "the silent broker expired")
        assert time.monotonic() - resumed >= 1.0
        assert members(r, "acting") == set(MEMBERS)
        assert departed(r) == {"10.0.0.9:10911": "expired"}
        assert "event loop stalled" in worker.stop()
    finally:
        for broker in (*group, silent):
            await broker.close()
