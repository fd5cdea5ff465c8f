from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.worker import create_app
from service.config import Settings
from service.worker import REMOTING
from service.worker import install_remoting as install
from tests.remoting.client import RemotingClient


@dataclass
class Worker:
    app: web.Application
    http: TestClient

    @property
    def port(self) -> int:
        return self.app[REMOTING].bound_port


@pytest.fixture
def make_worker(aiohttp_client: Any, settings: Settings) -> Callable[..., Awaitable[Worker]]:
    """A worker serving HTTP and the remoting endpoint (on a free port) on the test Redis."""

    async def make(host: str = "127.0.0.1", **overrides: Any) -> Worker:
        app = create_app(settings.with_overrides(**overrides))
        install(app, host, 0)
        return Worker(app, await aiohttp_client(app))

    return make


@pytest.fixture
async def worker(make_worker: Callable[..., Awaitable[Worker]]) -> Worker:
    return await make_worker()


@pytest.fixture
async def rmq(worker: Worker) -> AsyncIterator[RemotingClient]:
    client = await RemotingClient.connect(worker.port)
    yield client
    await client.close()
