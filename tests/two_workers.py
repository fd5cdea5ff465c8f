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
    return made
