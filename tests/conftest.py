from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from tests.redis_server import RedisServer

TESTS = Path(__file__).parent

# The tiers. A test under one of these paths (relative to tests/) is of the full suite only,
# marked with what it needs beyond Python and a redis-server; every other test is marked
# `quick`: units and in-process workers on a real redis-server (`scripts/test --quick`, or
# pytest -m quick). The full suite is all of them (`scripts/test`, what .ci/run runs).
FULL_ONLY: dict[str, str] = {
    "failover/": "failover",
    "hardening/": "hardening",
    "hostile/": "hostile",
    "analytics/": "spark",
    "ui/": "browser",
    "deploy/": "deploy",
    "remoting/real_clients/": "clients",
    "test_bench_smoke.py": "bench",
    "test_bench_tcp_smoke.py": "bench",
    "test_dependency_range.py": "dependency_range",
    "test_alerts_live.py": "processes",
    "test_api_examples.py": "processes",
    "test_entrypoints.py": "processes",
    "test_horizontal.py": "processes",
    "test_monitoring.py": "processes",
    "test_oncall_logs.py": "processes",
    "test_readme.py": "processes",
    "test_shutdown.py": "processes",
    "test_stall.py": "processes",
    "test_startup_failures.py": "processes",
    "test_upgrade.py": "processes",
    "test_worker_heap.py": "processes",
    "remoting/test_balancer_idle.py": "processes",
    "remoting/test_big_broker.py": "processes",
    "remoting/test_proxy_protocol.py": "processes",
}
# Marked where they stand (@pytest.mark.slow): in-process tests that spend seconds waiting
# on real time (timeouts, expiries, many rounds), so the quick tier stays well under its
# 3 minutes on two busy cores.
FULL_ONLY_MARKERS = frozenset(FULL_ONLY.values()) | {"slow"}

# scripts/test runs the tests in parallel processes (pytest-xdist, --dist loadgroup), which
# take them in collection order, one at a time as each process frees up. The kinds that
# hold tests of tens of seconds to minutes come first, so that the run does not end with
# one process on a two-minute test while the others are idle; the quick tier fills the gaps.
START_FIRST = ("hardening", "dependency_range", "failover", "processes", "browser", "spark",
               "clients", "hostile", "bench", "deploy", "slow")
# Tests (by path, as FULL_ONLY) whose session- or module-scoped fixtures cost too much to
# make in more than one process, or that build on what the module's tests before them left:
# each group runs whole, in order, in one process (tests/xdist_scheduling.py); every other
# test goes to whichever process is free.
ONE_PROCESS = {
    # one Spark session (and one module's Spark job) for the run: tests/analytics took 115 s
    # in one process and 341 s spread over four, four JVMs starting at once on two cores
    "analytics/": "spark",
    # its 300 broker groups seeded once (40 s on a busy machine); the outage tab's test, last,
    # reads the problems the first one made
    "ui/test_fleet.py": "fleet",
    "deploy/test_wheel_install.py": "wheel",  # the wheel built and installed into a venv once (20 s)
    # its module's fleet (Prometheus, two workers, brokers) made once, and its last test reads
    # what the situations before it left in Prometheus (an idle route)
    "test_alerts_live.py": "alerts",
}


def start_rank(item: pytest.Item) -> int:
    return next((rank for rank, marker in enumerate(START_FIRST) if item.get_closest_marker(marker)),
                len(START_FIRST))


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(TESTS).as_posix()
        for prefix, marker in FULL_ONLY.items():
            if where.startswith(prefix):
                item.add_marker(marker)
        if not any(item.get_closest_marker(marker) for marker in FULL_ONLY_MARKERS):
            item.add_marker(pytest.mark.quick)
    items.sort(key=start_rank)  # stable: a module's tests stay in their order


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: no error where it is not installed
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdist_scheduling import OneProcessScheduling

    return OneProcessScheduling(config, log, ONE_PROCESS)


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


from typing import Any, AsyncIterator, Awaitable, Callable  # noqa: E402

from aiohttp.test_utils import TestClient  # noqa: E402

from service.worker import create_app  # noqa: E402
from service.config import Settings  # noqa: E402
from tests import two_workers  # noqa: E402
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


@pytest.fixture
async def workers(aiohttp_client: Any, settings: Settings) -> AsyncIterator[list[two_workers.Worker]]:
    """Two workers on the test Redis, each with HTTP and RocketMQ's protocol (tests/two_workers.py)."""
    made = await two_workers.start(aiohttp_client, settings)
    yield made
    for w in made:
        await w.rmq.close()
