"""A real redis-server for the tests: started on a free port, stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.waits import until_sync


def free_port(below: int = 65536) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below:
            return port


class RedisServer:
    """One redis-server process; ``stop``/``start`` let fault tests take it away and bring it back."""

    def __init__(self, port: int | None = None, *extra_args: str, ports_below: int = 65536) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test installs it)")
        self.binary = binary
        self.fixed_port = port is not None
        self.ports_below = ports_below
        self.port = port or free_port(ports_below)
        self.dir = Path(tempfile.mkdtemp(prefix="rmq-redis-"))
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        for _ in range(3):
            if self._start_once():
                # it stays there: a restart (fault tests) must come back where clients and
                # cluster peers know it
                self.fixed_port = True
                return
            if self.fixed_port:
                break
            # another process took the free port first (or, for a cluster node, its port +
            # 10000, which a second suite beside this one may hold): take another
            self.port = free_port(self.ports_below)
        log = self.dir / "redis.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{tail}")

    def check_aof(self) -> None:
        """What k8s/redis-statefulset.yaml runs before every start: a crash that cut a
        script's MULTI block in the AOF must not leave half of it for the next restart to
        apply (tests/deploy/test_redis_aof.py)."""
        manifest = self.dir / "appendonlydir" / "appendonly.aof.manifest"
        if manifest.exists():
            subprocess.run(["redis-check-aof", "--fix", str(manifest)], input=b"y\n", capture_output=True,
                           timeout=60)

    def _start_once(self) -> bool:
        self.check_aof()
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *self.extra_args,
        ]
        proc = self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up_or_exited() -> str | None:
            if proc.poll() is not None:
                return "exited"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # up, perhaps with a password
                        return "up"
            except OSError:
                pass
            return None

        try:
            if until_sync(up_or_exited, 10, f"redis-server answering on port {self.port}") == "up":
                return True
        except AssertionError:  # start() tries another port, or says what the log says
            pass
        self.stop()
        return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_replicated(port: int, replicas: int, limit_s: float = 15, key: str = "{rmq-test}:warm-up") -> None:
    """Until the primary on ``port`` has ``replicas`` replicas online that acknowledge a
    write promptly (a replica just synced acknowledges its first writes only after a second
    or two). On a cluster, ``key`` must be in one of that primary's slots."""
    r = redis.Redis(port=port)

    def acknowledged() -> bool:
        info = r.info("replication")
        online = sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                     and v.get("state") == "online")
        return online >= replicas and bool(r.set(key, 1)) and r.execute_command("WAIT", replicas, 100) >= replicas

    until_sync(acknowledged, limit_s, f"{replicas} replicas caught up")
    r.delete(key)
