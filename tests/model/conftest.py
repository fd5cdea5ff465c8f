from __future__ import annotations

from typing import Iterator

import pytest

from tests.model.fleet import Worker, make_workers
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[str, list[Worker]]]:
    """One redis-server of the module's own and two workers on it, as processes."""
    server = RedisServer()
    server.start()
    workers = make_workers(server.url)
    yield server.url, workers
    for w in workers:
        w.stop()
    server.cleanup()
