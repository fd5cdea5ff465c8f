"""Redis Cluster specifics: the seed list in REDIS_URL, and running a change and its WAIT
on one connection to the primary that owns the registry's slot.

Every key shares the hash tag ``{<prefix>}``, so one slot, so one primary holds the whole
registry. ``WAIT`` counts the replicas holding every write *of the connection it is sent
on*; redis-py's cluster client sends each command on whichever connection it picks (and
a command without a key, as WAIT is, to a node of its own choosing), so the script and
its WAIT go out here together, as a pipeline of a plain client of the slot's primary.
Only redis-py's public API: the cluster client says which node owns the slot
(``get_node_from_key``) and follows the layout as it changes; the pipeline is an
ordinary ``redis.asyncio.Redis`` pipeline to that node's address.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
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


def node_url(url: str, host: str, port: int) -> str:
    """`url` (one host, as ``ClusterSeeds.url``) naming `host`:`port` instead, with the same
    credentials, TLS and options."""
    parts = urlsplit(url)
    credentials, at, _ = parts.netloc.rpartition("@")
    netloc = f"{credentials}{at}{'[' + host + ']' if ':' in host else host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


class SlotOwner:
    """Sends a script and its WAIT on one connection of the primary owning ``key``'s slot,
    following the cluster's layout as it changes.

    Sent again at most once, to where the cluster says the slot now is, and only where that
    is safe: a redirect (MOVED, ASK, CLUSTERDOWN, TRYAGAIN) or NOSCRIPT means the script did
    not run; a connection lost mid-call means it may have, and it is sent again because
    every change is idempotent (sending one twice leaves the tables as sending it once)."""

    def __init__(self, cluster: RedisCluster, key: str, url: str, timeout_s: float) -> None:
        self.cluster = cluster
        self.key = key
        self._url = parse_cluster_url(url).url
        self._timeout = timeout_s
        self._nodes: dict[tuple[str, int], Redis] = {}  # a plain client per node address
        self._layout = 0  # how many times the layout was followed anew: concurrent callers do it once
        self._lock: asyncio.Lock | None = None

    async def run_and_wait(self, sha: str, source: str, keys: Sequence[str], args: Sequence[Any],
                           replicas: int, wait_ms: int) -> tuple[Any, int]:
        """The script's result and how many replicas acknowledged it (WAIT's answer)."""
        await self.cluster.initialize()  # no-op once it has read the layout
        address = self._owner()
        asking, sent_again, loaded = False, False, False
        while True:
            layout = self._layout
            node = self._client(address)
            try:
                *_, result, acknowledged = await self._pipeline(node, asking, sha, keys, args, replicas, wait_ms)
            except (ConnectionError, TimeoutError):
                if sent_again:
                    raise
                sent_again = True
                address = await self._owner_anew(layout)
                continue
            if isinstance(result, NoScriptError) and not loaded:
                # a promoted replica has an empty script cache: the script did not run
                await node.script_load(source)
                loaded = True
                continue
            if isinstance(result, (AskError, ClusterDownError, TryAgainError)):  # AskError covers MOVED
                if sent_again:
                    raise ClusterError(f"the registry's slot is not served yet: {result}")
                sent_again = True
                if isinstance(result, AskError):  # the node that answered says where the slot is
                    # ASK: the slot is migrating and this key is asked of its destination
                    # once; MOVED (a subclass): the slot is there now
                    asking, address = type(result) is AskError, (result.host, int(result.port))
                else:
                    address = await self._owner_anew(layout)
                continue
            if isinstance(result, Exception):
                raise result
            return result, int(acknowledged)

    @staticmethod
    async def _pipeline(node: Redis, asking: bool, sha: str, keys: Sequence[str], args: Sequence[Any],
                        replicas: int, wait_ms: int) -> list[Any]:
        """Each command's answer, or the error it got, from one connection (in order)."""
        pipe = node.pipeline(transaction=False)
        if asking:  # the slot is migrating: its key is asked of the destination
            pipe.execute_command("ASKING")
        pipe.evalsha(sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, wait_ms)
        return await pipe.execute(raise_on_error=False)

    def _client(self, address: tuple[str, int]) -> Redis:
        client = self._nodes.get(address)
        if client is None:
            # no retries of its own: whether a change is sent again is decided above
            client = self._nodes[address] = Redis.from_url(
                node_url(self._url, *address), socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout, retry=Retry(NoBackoff(), 0))
        return client

    async def _owner_anew(self, layout: int) -> tuple[str, int]:
        """The slot's primary once the cluster client has followed the layout again (one
        read of the slot's key, which it sends on through redirects and a layout read
        anew), unless another call already did since ``layout``."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._layout == layout:
                await self.cluster.exists(self.key)
                self._layout += 1
        return self._owner()

    def _owner(self) -> tuple[str, int]:
        node: ClusterNode | None = self.cluster.get_node_from_key(self.key)
        if node is None:  # redis-py before any node answered: no layout at all
            raise SlotNotCoveredError(f"no node of the cluster has answered yet (slot of {self.key!r})")
        return node.host, int(node.port)

    async def aclose(self) -> None:
        for client in self._nodes.values():
            await client.aclose()
        self._nodes.clear()
