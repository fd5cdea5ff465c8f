"""Concurrent HTTP load for the fault tests: brokers registering, heartbeating and
unregistering, and readers, spread over several worker processes; every answer recorded."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.builders import identity, registration

# a client timeout far beyond any allowed answer time: a hang shows up as a long elapsed time
CLIENT_TIMEOUT_S = 30


@dataclass
class Outcome:
    op: str
    status: int  # -1: no HTTP answer (connection error, client timeout)
    started: float
    elapsed: float
    error: str = ""


@dataclass
class Load:
    urls: list[str]
    groups: int = 10
    topics_per_group: int = 20
    timeout_ms: int = 60_000
    unregister: bool = True
    seed: int = 1
    readers: int = 3
    outcomes: list[Outcome] = field(default_factory=list)
    # address -> body of its last registration answered 200 (and not unregistered since)
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        self.rng = rng
        self.topics = [f"FT{i}" for i in range(self.groups * self.topics_per_group // 2)]
        self.brokers = []
        for g in range(self.groups):
            group_topics = rng.sample(self.topics, self.topics_per_group)
            for bid in (0, 1):
                self.brokers.append(registration(
                    addr=f"10.9.{g}.{bid}:10911", name=f"fgroup{g}", broker_id=bid, cluster=f"fc{g % 3}",
                    topics=group_topics, timeout_ms=self.timeout_ms))

    async def _call(self, session: aiohttp.ClientSession, op: str, method: str, path: str,
                    body: Any = None) -> int:
        url = self.rng.choice(self.urls) + path
        started = time.monotonic()
        try:
            async with session.request(method, url, json=body) as resp:
                await resp.read()
                status = resp.status
            error = ""
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            status, error = -1, f"{type(exc).__name__}: {exc}"
        self.outcomes.append(Outcome(op, status, started, time.monotonic() - started, error))
        return status

    async def _broker(self, session: aiohttp.ClientSession, reg: dict[str, Any], stop: asyncio.Event) -> None:
        registered = False
        version = 1
        while not stop.is_set():
            action = self.rng.random()
            if not registered or action < 0.35:
                version += self.rng.random() < 0.3
                reg["topicConfigSerializeWrapper"]["dataVersion"]["counter"] = version
                if await self._call(session, "register", "POST", "/v1/brokers/register", reg) == 200:
                    registered = True
                    self.acked[reg["brokerAddr"]] = reg
            elif action < 0.9 or not self.unregister:
                status = await self._call(session, "heartbeat", "POST", "/v1/brokers/heartbeat", identity(reg))
                registered = status != 404
            else:
                self.acked.pop(reg["brokerAddr"], None)
                await self._call(session, "unregister", "POST", "/v1/brokers/unregister", identity(reg))
                registered = False
            await asyncio.sleep(self.rng.uniform(0.01, 0.05))

    async def _reader(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.rng.random() < 0.8:
                await self._call(session, "route", "GET", f"/v1/routes/{self.rng.choice(self.topics)}")
            else:
                await self._call(session, "cluster", "GET", "/v1/cluster")
            await asyncio.sleep(self.rng.uniform(0.005, 0.02))

    async def run(self, stop: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._broker(session, b, stop) for b in self.brokers),
                                 *(self._reader(session, stop) for _ in range(self.readers)))

    def statuses(self, since: float = 0.0) -> dict[int, int]:
        out: dict[int, int] = {}
        for o in self.outcomes:
            if o.started >= since:
                out[o.status] = out.get(o.status, 0) + 1
        return dict(sorted(out.items()))

    def bad(self, allowed: tuple[int, ...] = (200, 404, 503), limit_s: float = 3.0) -> list[Outcome]:
        """Answers outside the allowed statuses, or later than the limit."""
        return [o for o in self.outcomes if o.status not in allowed or o.elapsed > limit_s]
