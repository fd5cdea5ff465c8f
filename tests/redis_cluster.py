"""A real Redis Cluster for the tests: redis-server nodes on free loopback ports, formed
with ``redis-cli --cluster create``; which primary owns the registry's slot, and waiting
for a failover of it."""

from __future__ import annotations

import subprocess

import redis
from redis.crc import key_slot

from tests.redis_server import RedisServer, wait_replicated
from tests.waits import until_sync

SLOT = key_slot(b"{rmq}")  # every registry key's slot (keys are {rmq}:...)


class RedisClusterNodes:
    """``masters`` primaries with ``replicas`` replicas each (AOF on, so a killed node
    restarts with its data and its nodes.conf). ``node_timeout_ms`` is how long a node
    may be unreachable before the others fail it over. Unlike Redis' defaults, a replica
    that needs a full resync gets it at once (``repl-diskless-sync-delay 0``)."""

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 1000) -> None:
        # a cluster node also listens on its port + 10000, so ports above 55535 are refused
        self.nodes = [RedisServer(None, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                  "--cluster-node-timeout", str(node_timeout_ms), "--appendonly", "yes",
                                  # a full resync starts at once instead of waiting 5 s for more replicas
                                  "--repl-diskless-sync-delay", "0", ports_below=55536)
                      for _ in range(masters * (1 + replicas))]
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                            "--cluster-replicas", str(replicas), "--cluster-yes"],
                           check=True, capture_output=True, timeout=30)
            self.wait_formed(replicas)
            if replicas:
                wait_replicated(self.current_primary(), replicas, key="{rmq}:warm-up")
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """REDIS_URL naming every node as a seed."""
        return f"redis://{','.join(f'127.0.0.1:{n.port}' for n in self.nodes)}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, decode_responses=True, socket_timeout=2)

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None]

    def wait_formed(self, replicas: int, limit_s: float = 20) -> None:
        """Until every node sees the cluster ok and each primary has its replicas online."""
        until_sync(lambda: self._formed(replicas), limit_s, "the cluster formed", poll_s=0.1)

    def _formed(self, replicas: int) -> bool:
        try:
            if not all(self.client(n.port).cluster("info")["cluster_state"] == "ok" for n in self.live()):
                return False
            masters = [n for n in self.live() if self.client(n.port).info("replication")["role"] == "master"]
            return all(self.client(m.port).info("replication")["connected_slaves"] >= replicas for m in masters)
        except redis.exceptions.ConnectionError:
            return False

    def node_on(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def owner_seen_by(self, port: int) -> int:
        """The port of the primary owning the registry's slot, as the node on ``port`` sees it."""
        for start, end, primary, *_ in self.client(port).execute_command("CLUSTER", "SLOTS"):
            if int(start) <= SLOT <= int(end):
                return int(primary[1])
        raise AssertionError(f"slot {SLOT} is not covered")

    def current_primary(self) -> int:
        """The primary owning the registry's slot: the node that says so itself."""
        for node in self.live():
            try:
                owner = self.owner_seen_by(node.port)
                if self.client(owner).info("replication")["role"] == "master" and self.owner_seen_by(owner) == owner:
                    return owner
            except redis.exceptions.ConnectionError:
                continue
        raise AssertionError("no node owns the registry's slot")

    def replicas_of(self, port: int) -> list[int]:
        info = self.client(port).info("replication")
        return [int(v["port"]) for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]

    def move_slot(self, to_port: int) -> None:
        """Moves the registry's slot, keys and all, from its primary to the one on
        ``to_port``, as ``redis-cli --cluster reshard`` moves a slot."""
        source, target = self.client(self.current_primary()), self.client(to_port)
        source_id, target_id = source.execute_command("CLUSTER", "MYID"), target.execute_command("CLUSTER", "MYID")
        target.execute_command("CLUSTER", "SETSLOT", SLOT, "IMPORTING", source_id)
        source.execute_command("CLUSTER", "SETSLOT", SLOT, "MIGRATING", target_id)
        while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", SLOT, 100):
            source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        for node in (target, source):
            node.execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", target_id)

    def failed_over(self, old_port: int, limit_s: float = 20) -> int:
        """The new owner's port once a replica was promoted, the cluster is ok again and
        the new owner takes writes."""
        def promoted() -> int | None:
            try:
                port = self.current_primary()
                return port if port != old_port and self.client(port).cluster("info")["cluster_state"] == "ok" else None
            except (AssertionError, redis.exceptions.ConnectionError):
                return None

        return until_sync(promoted, limit_s, "a failover")

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()
