"""A Redis primary, its replicas and three Sentinels, as real processes on free ports, with
fast failure detection so a failover takes a second or two."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.redis_server import RedisServer, free_port, wait_replicated
from tests.waits import until_sync

MASTER = "rmq"


class Sentinel:
    def __init__(self, primary_port: int) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="rmq-sentinel-"))
        conf = self.dir / "sentinel.conf"
        conf.write_text("\n".join([
            f"port {self.port}", "bind 127.0.0.1", f"dir {self.dir}", f"logfile {self.dir / 'sentinel.log'}",
            f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2",
            f"sentinel down-after-milliseconds {MASTER} 400",
            f"sentinel failover-timeout {MASTER} 2000",
            f"sentinel parallel-syncs {MASTER} 2",
        ]) + "\n")
        self.proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", str(conf), "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        def answers() -> bool:
            try:
                return bool(redis.Redis(port=self.port).ping())
            except redis.exceptions.ConnectionError:
                return False

        until_sync(answers, 10, "a sentinel answering")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class ReplicatedRedis:
    """A primary with `replicas` replicas (AOF on, so a killed node restarts with its data)
    and three Sentinels watching them."""

    def __init__(self, replicas: int = 2) -> None:
        self.primary = RedisServer(None, "--appendonly", "yes")
        self.primary.start()
        self.replicas = [RedisServer(None, "--appendonly", "yes", "--replicaof", "127.0.0.1", str(self.primary.port))
                         for _ in range(replicas)]
        for replica in self.replicas:
            replica.start()
        self.wait_replicated(self.primary.port, replicas)
        self.sentinels = [Sentinel(self.primary.port) for _ in range(3)]
        until_sync(lambda: all(self.sentinel_knows_replicas(s, replicas) for s in self.sentinels), 15,
                   "the sentinels finding the replicas", poll_s=0.1)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    def nodes(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    def current_primary(self) -> int:
        """The port the Sentinels name as the primary now."""
        host, port = redis.Redis(port=self.sentinels[0].port).sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    @staticmethod
    def sentinel_knows_replicas(sentinel: Sentinel, replicas: int) -> bool:
        info = redis.Redis(port=sentinel.port).sentinel_master(MASTER)
        return int(info.get("num-slaves", 0)) >= replicas and int(info.get("num-other-sentinels", 0)) >= 2

    wait_replicated = staticmethod(wait_replicated)

    def failed_over(self, old_port: int, limit_s: float = 20) -> int:
        """The new primary's port once the Sentinels promoted one and it takes writes."""
        def promoted() -> int | None:
            try:
                port = self.current_primary()
                return port if port != old_port and redis.Redis(port=port).info("replication")["role"] == "master" else None
            except redis.exceptions.ConnectionError:
                return None

        return until_sync(promoted, limit_s, "a failover")

    def node_on(self, port: int) -> RedisServer:
        return next(n for n in self.nodes() if n.port == port)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes():
            node.cleanup()
