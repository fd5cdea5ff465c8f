"""A TCP balancer's idle timeout in front of the RocketMQ port (docs/deploy.md, "The
balancer's idle timeout"): a broker keeps one connection and is quiet on it between
registrations, and a closed connection unregisters its brokers at once, as a NameServer
does. So a balancer that closes idle connections sooner than the brokers' registration
period makes them vanish between registrations; above it, they stay. Behind a real
HAProxy, with the periods scaled down to seconds."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import AsyncIterator

import redis

from service.remoting import codes
from tests.builders import registration
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker
from tests.remoting.frames import register
from tests.remoting.test_proxy_protocol import haproxy
from tests.waits import until

BROKER_KEY = "{rmq}:broker:broker-a"
QUIET_S = 2.5  # the broker's silence between two registrations (30 s in RocketMQ)


@contextlib.asynccontextmanager
async def registered_behind_haproxy(worker: Worker, tmp_path: Path, idle_timeout: str) -> AsyncIterator[RemotingClient]:
    """A broker registered through HAProxy closing connections idle for `idle_timeout`."""
    async with haproxy(tmp_path, worker.port, "127.0.0.1", "", idle_timeout=idle_timeout) as port:
        broker = await RemotingClient.connect(port)
        try:
            assert (await broker.call(register(registration()))).code == codes.SUCCESS
            yield broker
        finally:
            await broker.close()


async def test_a_balancer_idle_timeout_below_the_brokers_period_unregisters_them_between_registrations(
        worker: Worker, tmp_path: Path, r: redis.Redis) -> None:
    async with registered_behind_haproxy(worker, tmp_path, "1s"):
        assert r.exists(BROKER_KEY)
        # gone before its next registration; generous: HAProxy closes after 1 s of silence
        await until(lambda: not r.exists(BROKER_KEY), QUIET_S + 10, "the broker removed")


async def test_a_balancer_idle_timeout_above_the_brokers_period_keeps_them(
        worker: Worker, tmp_path: Path, r: redis.Redis) -> None:
    async with registered_behind_haproxy(worker, tmp_path, "1h") as broker:
        await asyncio.sleep(QUIET_S)
        assert r.exists(BROKER_KEY)
        assert (await broker.call(register(registration()))).code == codes.SUCCESS  # on the same connection
        assert r.exists(BROKER_KEY)
