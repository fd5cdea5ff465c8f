from __future__ import annotations

from typing import Iterator

import pytest
import redis

from tests.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of this test's own, so stopping it disturbs no other test."""
    server = RedisServer()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The shared test server, emptied before each test."""
    if redis_server.proc is None:
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


from typing import Any, Awaitable, Callable  # noqa: E402

from aiohttp.test_utils import TestClient  # noqa: E402

from service.worker import create_app  # noqa: E402
from service.config import Settings  # noqa: E402
from tests.tables import violations  # noqa: E402

# The scanner stays out of the way unless a test asks for it.
QUIET_SCAN_MS = 3_600_000


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, scan_interval_ms=QUIET_SCAN_MS)


@pytest.fixture
def make_client(aiohttp_client: Any, settings: Settings) -> Callable[..., Awaitable[TestClient]]:
    """A worker (app) on the test Redis; keyword arguments override settings."""

    async def make(**overrides: Any) -> TestClient:
        return await aiohttp_client(create_app(settings.with_overrides(**overrides)))

    return make


@pytest.fixture
async def client(make_client: Callable[..., Awaitable[TestClient]]) -> TestClient:
    return await make_client()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def consistent(r: redis.Redis) -> Iterator[None]:
    """Asserts the invariants on the tables when the test ends."""
    yield
    assert violations(r) == []
