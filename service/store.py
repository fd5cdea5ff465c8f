"""Redis connection and the Lua scripts: loaded once, called by SHA, reloaded on NOSCRIPT.

Every call is bounded by the configured timeout and turns any Redis failure into
``StoreUnavailable``, which the API answers with 503; redis-py's pool reconnects on
the next call, so a worker recovers by itself when Redis returns.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import redis.asyncio as aioredis
from redis.asyncio.client import Redis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import (AskError, ClusterDownError, ConnectionError as RedisConnectionError, NoScriptError,
                              OutOfMemoryError, ReadOnlyError, RedisClusterException, RedisError, ResponseError,
                              TimeoutError as RedisTimeoutError, TryAgainError)
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel

from service import redis_cluster
from service.config import Settings
from service.redis_url import SENTINEL_SCHEME, parse_sentinel_url
from service.keys import Keys
from service.logs import WindowedLog

log = logging.getLogger(__name__)

SCRIPTS = (
    "register", "register_stage", "register_unchanged", "heartbeat", "unregister", "remove_batch", "collect_leaving",
    "write_perm", "delete_topic", "kv_put", "kv_delete", "register_topic", "route", "cluster_info", "topic_lists",
    "live_brokers", "topic_summary", "changes_since", "topic_index_sync", "masterless_sync",
    "departures", "departures_back", "departures_restore", "store_reset", "store_reset_seen",
)
# Scripts that only read: every other one writes, and with RMQ_REDIS_MIN_REPLICAS waits for replicas.
READ_SCRIPTS = frozenset({"route", "cluster_info", "topic_lists", "live_brokers", "topic_summary", "changes_since",
                          "departures"})


_timeout = getattr(asyncio, "timeout", None)


class StoreUnavailable(Exception):
    """Redis could not be reached or did not answer in time; nothing can be assumed done."""


class StoreRefusing(StoreUnavailable):
    """Redis answers but refuses writes (maxmemory, a demoted primary, a failing snapshot):
    an outage of the store, not a bug; the refused change was not applied."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(f"Redis refuses writes: {cause} ({detail})")
        self.cause = cause


class NotReplicated(StoreUnavailable):
    """The change was applied on the primary but fewer replicas than RMQ_REDIS_MIN_REPLICAS
    confirmed it in time: it may be lost if the primary fails now. Every change is
    idempotent, so sending it again is safe."""


# Errors that say the store cannot serve the call now (the script did not run), not that it
# has a bug: a script flushed from the cache, a Redis Cluster's slot moving or failing over.
_NOT_SERVED = (NoScriptError, AskError, ClusterDownError, TryAgainError)


class OutcomeUnknown(StoreUnavailable):
    """A change went to Redis but no answer came back in time: its script may have run
    (whole: a script is atomic) or not. Every change is idempotent, so sending it again is
    safe; a caller must not be told that nothing was changed."""


def outcome_text(e: StoreUnavailable, read: bool = False) -> str:
    """What an answer says about a change that failed this way, the same on both fronts:
    whether it was applied, and whether a retry is safe; to a `read`, that the store is
    unavailable (no change to speak of)."""
    if read:
        cause = f" ({e.cause})" if isinstance(e, StoreRefusing) else ""
        return f"the route store is unavailable{cause}; retry"
    if isinstance(e, NotReplicated):
        return f"{e}: it may be lost if the primary fails now; sending it again is safe"
    if isinstance(e, OutcomeUnknown):
        return ("the route store did not answer in time: the change may or may not have been applied; "
                "sending it again is safe")
    if isinstance(e, StoreRefusing):
        return f"the route store refuses writes ({e.cause}); nothing was changed, retry later"
    return "the route store is unavailable; nothing was changed, retry"


def transport_closed(exc: BaseException) -> bool:
    """A write on a connection Redis has just closed (a restart): uvloop refuses it with a
    RuntimeError ('unable to perform operation on <TCPTransport closed=True ...>; the handler
    is closed') where asyncio's own loop raises an OSError, and redis-py lets it through."""
    return isinstance(exc, RuntimeError) and "the handler is closed" in str(exc)


# What a lost or refused Redis connection comes as: the store is unavailable, no bug.
REDIS_FAILURES = (RedisError, RedisClusterException, OSError, asyncio.TimeoutError, RuntimeError)


def redis_failure(exc: BaseException) -> bool:
    return isinstance(exc, REDIS_FAILURES) and (not isinstance(exc, RuntimeError) or transport_closed(exc))


def _may_have_run(exc: BaseException) -> bool:
    """Whether a command that failed this way may have reached Redis: a timeout, or a
    connection lost after it was set up (one that could not be made sent nothing). A
    closed transport may come from the retry of a command the first connection sent."""
    if isinstance(exc, (asyncio.TimeoutError, RedisTimeoutError)) or transport_closed(exc):
        return True
    return isinstance(exc, RedisConnectionError) and "connecting to" not in str(exc)


# Redis' refusals, by the error they come as: what an operator must fix, in a word. Too few
# replicas: Redis' own min-replicas-to-write (NOREPLICAS), or a WAIT that RMQ_REDIS_MIN_REPLICAS
# replicas did not confirm in time (NotReplicated).
OUT_OF_MEMORY, READ_ONLY, SNAPSHOT_FAILING, TOO_FEW_REPLICAS = REFUSAL_CAUSES = (
    "out of memory", "read-only replica", "snapshot failing", "too few replicas")


def refusal_cause(exc: BaseException) -> str | None:
    if isinstance(exc, OutOfMemoryError):
        return OUT_OF_MEMORY
    if isinstance(exc, ReadOnlyError):
        return READ_ONLY
    if isinstance(exc, ResponseError) and str(exc).startswith("MISCONF"):
        return SNAPSHOT_FAILING
    if isinstance(exc, ResponseError) and str(exc).startswith("NOREPLICAS"):
        return TOO_FEW_REPLICAS
    return None


@dataclass
class Refusals:
    """Redis' refusals by cause, for /metrics and /readyz, logged a line per cause and burst."""

    BURST_S = 10.0

    counts: Counter[str] = field(default_factory=Counter)
    last: dict[str, float] = field(default_factory=dict)  # cause -> monotonic time of the last one
    lines: WindowedLog = field(default_factory=lambda: WindowedLog(
        log, Refusals.BURST_S, ("refusal", "refusals"), of="of this cause ({})", level=logging.ERROR))

    def add(self, cause: str, detail: str) -> None:
        self.counts[cause] += 1
        self.last[cause] = time.monotonic()
        self.lines.write(cause, f"Redis refuses writes: {cause} ({detail})")

    def recent(self, within_s: float = BURST_S) -> list[str]:
        """The causes refused within the last `within_s` seconds."""
        now = time.monotonic()
        return sorted(c for c, t in self.last.items() if now - t <= within_s)


def _lua_dir() -> Any:
    # An installed wheel carries the scripts as the package data `service.lua`; a source
    # checkout run without installing has them in the top-level lua/ folder.
    try:
        return resources.files("service.lua")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "lua"


# The prelude, by concern, in the order it is prepended: lua/_<part>.lua each. A script's
# `-- uses:` line names the parts it calls (a part's own line the parts it calls): only
# those are loaded with it, so a heartbeat does not define the removal cascade at each
# call (docs/design.md, "Scripts": the measured cost).
PARTS = ("keys", "basics", "javaorder", "changes", "staging", "queues", "members", "groups")
_USES = re.compile(r"^-- uses: *(.*)$", re.MULTILINE)


def uses(source: str) -> list[str]:
    """The parts a script or part names on its `-- uses:` line ([] without one)."""
    m = _USES.search(source)
    return [p.strip() for p in m.group(1).split(",") if p.strip()] if m else []


def load_sources(base: Any = None) -> dict[str, str]:
    """Each script as Redis runs it: the prelude parts it uses (with theirs), in PARTS
    order, then the script file itself."""
    base = base if base is not None else _lua_dir()
    parts = {p: (base / f"_{p}.lua").read_text(encoding="utf-8") for p in PARTS}
    sources = {}
    for name in SCRIPTS:
        body = (base / f"{name}.lua").read_text(encoding="utf-8")
        needed: set[str] = set()
        todo = uses(body)
        while todo:
            part = todo.pop()
            if part not in parts:
                raise ValueError(f"lua/{name}.lua (or a part it uses) names an unknown prelude part {part!r}")
            if part not in needed:
                needed.add(part)
                todo += uses(parts[part])
        sources[name] = "".join(parts[p] for p in PARTS if p in needed) + body
    return sources


def connect(settings: Settings) -> Redis:
    timeout = settings.redis_timeout_ms / 1000
    if settings.embedded:
        import fakeredis

        return fakeredis.aioredis.FakeRedis()
    if settings.redis_url and settings.redis_url.startswith(SENTINEL_SCHEME):
        return connect_sentinel(settings)
    if settings.redis_cluster:
        # every key shares one hash tag, so each script runs on the one node owning that slot
        return redis_cluster.connect(settings.redis_url or "", timeout)
    return _pooled(settings)


def connect_reads(settings: Settings) -> Redis | None:
    """The read scripts' own client (a plain redis:// URL only; None: they share the one
    client): however many writes wait for a connection, a route read never waits behind
    them for one of its own pool's."""
    if settings.embedded or settings.redis_cluster or (settings.redis_url or "").startswith(SENTINEL_SCHEME):
        return None
    return _pooled(settings)


def _pooled(settings: Settings) -> Redis:
    timeout = settings.redis_timeout_ms / 1000
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


def connect_sentinel(settings: Settings) -> Redis:
    """A client of the current primary as the Sentinels name it: after a failover its
    connections find the new primary by themselves (a demoted primary's READONLY answer
    drops the connection), scripts are loaded again on NOSCRIPT."""
    target = parse_sentinel_url(settings.redis_url or "")
    timeout = settings.redis_timeout_ms / 1000
    sentinel_kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    sentinel = Sentinel(target.sentinels, sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(
        target.master, redis_class=aioredis.Redis, db=target.db, username=target.username,
        password=target.password, socket_timeout=timeout, socket_connect_timeout=timeout,
        health_check_interval=30, retry=Retry(NoBackoff(), 1),
    )


class Store:
    def __init__(self, settings: Settings, client: Redis | None = None) -> None:
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.redis: Redis = client if client is not None else connect(settings)
        # the read scripts' connections, apart from the writes' (connect_reads)
        self.reads: Redis = (connect_reads(settings) if client is None else None) or self.redis
        self.timeout = settings.redis_timeout_ms / 1000
        self.errors = 0  # calls that failed as unavailable (for /metrics)
        self.refusals = Refusals()
        self.min_replicas = settings.redis_min_replicas
        # within the call's own timeout, leaving it room to answer
        self.wait_ms = max(10, settings.redis_timeout_ms // 2)
        self._sources = load_sources()
        self._scripts = {name: self.redis.register_script(src) for name, src in self._sources.items()}
        self._slot_owner = (redis_cluster.SlotOwner(self.redis, self.keys.version, settings.redis_url or "",
                                                    self.timeout)
                            if isinstance(self.redis, RedisCluster) else None)

    async def call(self, coro: Any, writes: bool = False) -> Any:
        """Runs one Redis operation within the timeout; any failure is StoreUnavailable, and
        OutcomeUnknown when the operation ``writes`` and may have run all the same."""
        try:
            if _timeout is not None:  # Python 3.11+: bounds the call without a task of its own
                async with _timeout(self.timeout):
                    return await coro
            return await asyncio.wait_for(coro, self.timeout)
        except REDIS_FAILURES as exc:
            if not redis_failure(exc):
                raise  # a RuntimeError of our own: a bug, not an outage
            cause = refusal_cause(exc)
            if cause is not None:
                self.errors += 1
                self.refusals.add(cause, str(exc).split(". script:")[0])
                raise StoreRefusing(cause, str(exc).split(". script:")[0]) from exc
            if isinstance(exc, ResponseError) and not isinstance(exc, _NOT_SERVED):
                raise  # a script bug, not an outage: let it surface as a 500 and in logs
            self.errors += 1
            if writes and _may_have_run(exc):
                raise OutcomeUnknown(str(exc) or type(exc).__name__) from exc
            raise StoreUnavailable(str(exc) or type(exc).__name__) from exc

    async def run(self, name: str, args: Sequence[str | int]) -> Any:
        """EVALSHA of a named script; redis-py loads it again on NOSCRIPT, and a cache
        flushed again between that load and its retry gets a few more tries. A script that
        writes waits for RMQ_REDIS_MIN_REPLICAS replicas when that is set."""
        writes = name not in READ_SCRIPTS
        replicated = self.min_replicas > 0 and writes
        for attempt in range(3):
            try:
                if replicated:
                    return await self._run_replicated(name, args)
                client = self.redis if writes else self.reads
                return await self.call(self._scripts[name](keys=[self.keys.version], args=list(args), client=client),
                                       writes)
            except StoreUnavailable as exc:
                if attempt == 2 or not isinstance(exc.__cause__, NoScriptError):
                    raise
        raise AssertionError("unreachable")

    async def _run_replicated(self, name: str, args: Sequence[str | int]) -> Any:
        # WAIT counts the replicas that have every write of *this* connection, so the script
        # and the WAIT go out together on one connection, as a pipeline
        script = self._scripts[name]
        if self._slot_owner is not None:  # on a cluster: a connection of the slot's primary
            waited = self._slot_owner.run_and_wait(script.sha, script.script, [self.keys.version], list(args),
                                                   self.min_replicas, self.wait_ms)
            result, acknowledged = await self.call(waited, writes=True)
        else:
            pipe = self.redis.pipeline(transaction=False)
            await script(keys=[self.keys.version], args=list(args), client=pipe)  # queues it
            pipe.execute_command("WAIT", self.min_replicas, self.wait_ms)
            result, acknowledged = await self.call(pipe.execute(), writes=True)
        if int(acknowledged) < self.min_replicas:
            self.errors += 1
            detail = (f"the change was applied on the primary but {acknowledged} of {self.min_replicas} "
                      f"replicas confirmed it within {self.wait_ms} ms")
            # told here for both fronts, once per burst, and by /readyz while it lasts
            self.refusals.add(TOO_FEW_REPLICAS, f"{detail}; RMQ_REDIS_MIN_REPLICAS={self.min_replicas}")
            raise NotReplicated(detail)
        return result

    async def know_layout(self) -> None:
        """On a Redis Cluster, reads its layout if no node has answered yet (a worker that
        started while Redis was down): redis-py's cluster pub/sub does not, and fails."""
        if self._slot_owner is not None:
            await self.call(self.redis.initialize())

    async def load_scripts(self) -> None:
        for script in self._scripts.values():
            script.sha = await self.call(self.redis.script_load(script.script))

    async def stamp_dataset(self) -> bool:
        """Name this key space's data set once (SET NX: the first worker ever wins, a restart
        keeps the name); True when this call wrote it."""
        return bool(await self.call(self.redis.set(self.keys.dataset, secrets.token_hex(16), nx=True)))

    async def ready(self) -> bool:
        """Redis answers and every script is in its cache (loading those that are not)."""
        shas = [s.sha for s in self._scripts.values()]
        exists = await self.call(self.redis.script_exists(*shas))
        if not all(exists):
            await self.load_scripts()
        return True

    async def close(self) -> None:
        self.refusals.lines.close()
        if self._slot_owner is not None:
            await self._slot_owner.aclose()
        if self.reads is not self.redis:
            await self.reads.aclose()
        await self.redis.aclose()
