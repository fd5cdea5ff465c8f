"""Redis Cluster specifics: the seed list in REDIS_URL, and running a change and its WAIT
on one connection to the primary that owns the registry's slot.

Every key shares the hash tag ``{<prefix>}``, so one slot, so one primary holds the whole
registry. ``WAIT`` counts the replicas holding every write *of the connection it is sent
on*; redis-py's cluster client sends each command on whichever connection it picks (and
a command without a key, as WAIT is, to a node of its own choosing), so the script and
its WAIT go out here together, as a pipeline, on one connection of the slot's primary.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.exceptions import (AskError, ClusterDownError, ClusterError, ConnectionError, NoScriptError,
                              SlotNotCoveredError, TimeoutError, TryAgainError)

DEFAULT_PORT = 6379


@dataclass(frozen=True)
class ClusterSeeds:
    """``redis[s]://[user:pass@]host1:port1,host2:port2[/0][?options]``: the nodes a worker
    asks in turn for the cluster's layout (so it starts while any of them is down), each
    with the URL's credentials, TLS and options."""

    url: str  # the first seed as a one-host URL, for redis-py's from_url
    nodes: list[tuple[str, int]]


def _host_port(seed: str) -> tuple[str, int]:
    if not seed:
        raise ValueError("an empty host in the seed list")
    if seed.startswith("["):  # [::1]:7000
        host, _, rest = seed[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else (str(DEFAULT_PORT) if not rest else "?")
    elif seed.count(":") == 1:
        host, _, port = seed.partition(":")
    else:
        host, port = seed, str(DEFAULT_PORT)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"seed {seed!r} is not host:port")
    return host, int(port)


def parse_cluster_url(url: str) -> ClusterSeeds:
    """The seeds of a cluster URL; ValueError saying what is wrong (never echoing a password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"a Redis Cluster URL starts with redis:// or rediss://, not {parts.scheme + '://'!r}")
    credentials, at, hosts = parts.netloc.rpartition("@")
    nodes = [_host_port(seed.strip()) for seed in hosts.split(",")]
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(f"a Redis Cluster has database 0 only, not {parts.path.strip('/')!r}")
    host, port = nodes[0]
    first = f"{credentials}{at}{'[' + host + ']' if ':' in host else host}:{port}"
    return ClusterSeeds(urlunsplit((parts.scheme, first, "/0", parts.query, "")), nodes)


def names_several_hosts(url: str) -> bool:
    return "," in urlsplit(url).netloc.rpartition("@")[2]


def connect(url: str, timeout_s: float) -> RedisCluster:
    seeds = parse_cluster_url(url)
    return RedisCluster.from_url(
        seeds.url,
        # the first seed comes from the URL itself; redis-py gives the others its credentials
        startup_nodes=[ClusterNode(host, port) for host, port in seeds.nodes[1:]],
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )


class SlotOwner:
    """Sends a script and its WAIT on one connection of the primary owning ``key``'s slot,
    following the cluster's layout as it changes.

    Sent again at most once, after the layout was read anew, and only where that is safe:
    a redirect (MOVED, ASK, CLUSTERDOWN, TRYAGAIN) or NOSCRIPT means the script did not
    run; a connection lost mid-call means it may have, and it is sent again because every
    change is idempotent (sending one twice leaves the tables as sending it once)."""

    def __init__(self, cluster: RedisCluster, key: str) -> None:
        self.cluster = cluster
        self.slot = cluster.keyslot(key)
        self._layout = 0  # how many times the layout was read anew: concurrent callers read it once
        self._lock: asyncio.Lock | None = None

    async def run_and_wait(self, sha: str, source: str, keys: Sequence[str], args: Sequence[Any],
                           replicas: int, wait_ms: int) -> tuple[Any, int]:
        """The script's result and how many replicas acknowledged it (WAIT's answer)."""
        await self.cluster.initialize()  # no-op once it has read the layout
        node = self._owner()
        asking, sent_again, loaded = False, False, False
        while True:
            layout = self._layout
            commands = [("ASKING",)] if asking else []
            commands += [("EVALSHA", sha, len(keys), *keys, *args), ("WAIT", replicas, wait_ms)]
            try:
                *_, result, acknowledged = await self._pipeline(node, commands)
            except (ConnectionError, TimeoutError):
                if sent_again:
                    raise
                sent_again = True
                node = await self._owner_anew(layout)
                continue
            if isinstance(result, NoScriptError) and not loaded:
                # a promoted replica has an empty script cache: the script did not run
                await node.execute_command("SCRIPT", "LOAD", source)
                loaded = True
                continue
            if isinstance(result, (AskError, ClusterDownError, TryAgainError)):  # AskError covers MOVED
                if sent_again:
                    raise ClusterError(f"the registry's slot is not served yet: {result}")
                sent_again = True
                target = self.cluster.get_node(host=result.host, port=result.port) if type(result) is AskError else None
                if target is not None:  # the slot is migrating: this key is asked of its destination
                    asking, node = True, target
                else:
                    node = await self._owner_anew(layout)
                continue
            if isinstance(result, Exception):
                raise result
            return result, int(acknowledged)

    @staticmethod
    async def _pipeline(node: ClusterNode, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Each command's answer, or the error it got, from one connection (in order)."""
        pipe = [PipelineCommand(i, *command) for i, command in enumerate(commands)]
        await node.execute_pipeline(pipe)
        return [c.result for c in pipe]

    async def _owner_anew(self, layout: int) -> ClusterNode:
        """The slot's primary after reading the layout again, unless another call already
        did since ``layout``."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._layout == layout:
                await self.cluster.nodes_manager.initialize()
                self._layout += 1
        return self._owner()

    def _owner(self) -> ClusterNode:
        try:
            return self.cluster.nodes_manager.get_node_from_slot(self.slot)
        except KeyError:  # redis-py before any node answered: no layout at all
            raise SlotNotCoveredError(f"no node of the cluster has answered yet (slot {self.slot})") from None
