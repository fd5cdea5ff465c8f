"""Two workers on the test redis-server, each serving HTTP and RocketMQ's protocol, and a
client of each front: what a test of what every worker answers over both fronts stands on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp.test_utils import TestClient

from service.cache import ReadCache
from service.config import Settings
from service.http.app_keys import CACHE, NODE
from service.registry import Registry
from service.worker import REMOTING, create_app, install_remoting
from tests.remoting.client import RemotingClient
from tests.waits import until


@dataclass
class Worker:
    http: TestClient
    rmq: RemotingClient

    @property
    def cache(self) -> ReadCache:
        return self.http.app[CACHE]

    @property
    def registry(self) -> Registry:
        return self.http.app[NODE].registry


async def start(aiohttp_client: Any, settings: Settings, n: int = 2) -> list[Worker]:
    made = []
    for _ in range(n):
        app = create_app(settings)
        install_remoting(app, "127.0.0.1", 0)
        http = await aiohttp_client(app)
        made.append(Worker(http, await RemotingClient.connect(app[REMOTING].bound_port)))
    # each scanner's first pass, which runs at start, done before the test begins: a pass that
    # came late (a loaded machine) would collect the test's own departures in its midst
    scanners = [w.http.app[NODE].scanner for w in made]
    await until(lambda: all(s.stats.passes or s.stats.failures for s in scanners), 30, "every worker's first scan pass")
    return made
