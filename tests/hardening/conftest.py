"""Fixtures of the hardening tests."""

from __future__ import annotations

from typing import Iterator

import pytest
import redis

from service.keys import Keys
from tests.hardening.fuzz import Target
from tests.hardening.harness import Worker, own_redis


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    """A real worker process on a seeded Redis of this module's own (scanner out of the way)."""
    server = own_redis()
    worker = Worker(server.url, RMQ_SCAN_INTERVAL_MS=3_600_000, RMQ_MAX_BODY_BYTES=65_536).start()
    r = redis.Redis.from_url(server.url)
    t = Target(worker.url, r, Keys())
    try:
        t.seed()
        yield t
        assert worker.alive(), worker.log()
        assert "Traceback" not in worker.log(10**7), worker.log()
    finally:
        t.session.close()
        r.close()
        worker.cleanup()
        server.cleanup()
