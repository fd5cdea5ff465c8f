"""Request bodies as brokers send them, and fast in-process seeding through the real scripts."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from bench.common import ROOT  # noqa: F401  (puts the repo on sys.path)
from service.config import Settings
from service.models import RegisterRequest
from service.registry import Registry
from service.store import Store, load_sources
from tests.builders import registration, topic_config  # noqa: F401


def topics(n: int, prefix: str = "Topic") -> list[str]:
    return [f"{prefix}{i:06d}" for i in range(n)]


def store_for(redis_url: str, **settings: Any) -> Store:
    return Store(Settings(redis_url=redis_url, redis_timeout_ms=30_000, **settings))


async def register_many(registry: Registry, bodies: list[dict[str, Any]], concurrency: int = 32) -> None:
    """Registers every body through Registry.register (the register.lua script), `concurrency` at a time."""
    sem = asyncio.Semaphore(concurrency)

    async def one(body: dict[str, Any]) -> None:
        req = RegisterRequest.model_validate(body, context={"max_queue_nums": 1024, "max_topics": 1_000_000})
        async with sem:
            await registry.register(req)

    await asyncio.gather(*(one(b) for b in bodies))


def script_sha(name: str) -> str:
    """The SHA1 the registry calls a script by (prelude + script, as service.store loads it)."""
    return hashlib.sha1(load_sources()[name].encode()).hexdigest()


def script_times_us(r: Any, sha: str, limit: int = 100_000) -> list[int]:
    """Durations (µs) of the EVALSHA calls of `sha` in a redis.Redis' slow log, newest first."""
    times = []
    for entry in r.slowlog_get(limit):
        cmd = entry["command"]
        cmd = cmd.decode() if isinstance(cmd, bytes) else cmd
        parts = cmd.split(" ", 2)
        if parts[0].upper() == "EVALSHA" and len(parts) > 1 and parts[1] == sha:
            times.append(entry["duration"])
    return times
