"""Redis connection and the Lua scripts: loaded once, called by SHA, reloaded on NOSCRIPT.

Every call is bounded by the configured timeout and turns any Redis failure into
``StoreUnavailable``, which the API answers with 503; redis-py's pool reconnects on
the next call, so a worker recovers by itself when Redis returns.
"""

from __future__ import annotations

import asyncio
import logging
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import redis.asyncio as aioredis
from redis.asyncio.client import Redis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.asyncio.retry import Retry

from service.config import Settings
from service.keys import Keys

log = logging.getLogger(__name__)

SCRIPTS = (
    "register", "register_unchanged", "heartbeat", "unregister", "destroy", "write_perm", "delete_topic",
    "kv_put", "kv_delete", "register_topic", "channel_closed", "route", "cluster_info", "topic_lists",
    "live_brokers", "topic_summary", "changes_since",
)


_timeout = getattr(asyncio, "timeout", None)


class StoreUnavailable(Exception):
    """Redis could not be reached or did not answer in time; nothing can be assumed done."""


def _lua_dir() -> Any:
    # An installed wheel carries the scripts as the package data `service.lua`; a source
    # checkout run without installing has them in the top-level lua/ folder.
    try:
        return resources.files("service.lua")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "lua"


def load_sources() -> dict[str, str]:
    base = _lua_dir()
    prelude = (base / "_lib.lua").read_text(encoding="utf-8")
    return {name: prelude + (base / f"{name}.lua").read_text(encoding="utf-8") for name in SCRIPTS}


def connect(settings: Settings) -> Redis:
    timeout = settings.redis_timeout_ms / 1000
    if settings.embedded:
        import fakeredis

        return fakeredis.aioredis.FakeRedis()
    if settings.redis_cluster:
        # every key shares one hash tag, so each script runs on the one node owning that slot
        return RedisCluster.from_url(
            settings.redis_url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    # A blocking pool: past max_connections a call waits (within the timeout) for a free
    # connection instead of failing at once with "Too many connections".
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
        # one immediate retry replaces a pooled connection that died with a restarted Redis
        retry=Retry(NoBackoff(), 1),
    )
    return aioredis.Redis(connection_pool=pool)


class Store:
    def __init__(self, settings: Settings, client: Redis | None = None) -> None:
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.redis: Redis = client if client is not None else connect(settings)
        self.timeout = settings.redis_timeout_ms / 1000
        self.errors = 0  # calls that failed as unavailable (for /metrics)
        self._sources = load_sources()
        self._scripts = {name: self.redis.register_script(src) for name, src in self._sources.items()}

    async def call(self, coro: Any) -> Any:
        """Runs one Redis operation within the timeout; any failure is StoreUnavailable."""
        try:
            if _timeout is not None:  # Python 3.11+: bounds the call without a task of its own
                async with _timeout(self.timeout):
                    return await coro
            return await asyncio.wait_for(coro, self.timeout)
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            if isinstance(exc, ResponseError) and not isinstance(exc, NoScriptError):
                raise  # a script bug, not an outage: let it surface as a 500 and in logs
            self.errors += 1
            raise StoreUnavailable(str(exc) or type(exc).__name__) from exc

    async def run(self, name: str, args: Sequence[str | int]) -> Any:
        """EVALSHA of a named script; redis-py loads it again on NOSCRIPT, and a cache
        flushed again between that load and its retry gets a few more tries."""
        script = self._scripts[name]
        for _ in range(2):
            try:
                return await self.call(script(keys=[self.keys.version], args=list(args)))
            except StoreUnavailable as exc:
                if not isinstance(exc.__cause__, NoScriptError):
                    raise
        return await self.call(script(keys=[self.keys.version], args=list(args)))

    async def load_scripts(self) -> None:
        for script in self._scripts.values():
            script.sha = await self.call(self.redis.script_load(script.script))

    async def ready(self) -> bool:
        """Redis answers and every script is in its cache (loading those that are not)."""
        shas = [s.sha for s in self._scripts.values()]
        exists = await self.call(self.redis.script_exists(*shas))
        if not all(exists):
            await self.load_scripts()
        return True

    async def version(self) -> int:
        raw = await self.call(self.redis.get(self.keys.version))
        return int(raw or 0)

    async def close(self) -> None:
        await self.redis.aclose()
