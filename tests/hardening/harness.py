"""Shared pieces of the hardening tests: real worker processes, atomic table checks.

- ``Worker``: one ``rmq-registry serve`` subprocess on a free port, its output in a log
  file (a pipe nobody reads could fill up and stall the worker).
- ``atomic_violations``: the invariants of ``tests/tables.py`` in one read-only Lua script,
  EVAL'd directly (not through the service's loader), so it may run while the tables change.
- ``atomic_snapshot``: every key and its whole content (timestamps, scores) in one script.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import redis

from service.keys import Keys
from tests.processes import ROOT, console_script
from tests.redis_server import RedisServer, free_port
from tests.waits import until_sync

HERE = Path(__file__).resolve().parent
CHECKS_LUA = (HERE / "checks.lua").read_text(encoding="utf-8")
SNAPSHOT_LUA = (HERE / "snapshot.lua").read_text(encoding="utf-8")


def _s(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def atomic_violations(r: redis.Redis, keys: Keys = Keys()) -> list[str]:
    return [_s(v) for v in r.eval(CHECKS_LUA, 0, keys.tag)]


def atomic_snapshot(r: redis.Redis, keys: Keys = Keys()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, kind, value in r.eval(SNAPSHOT_LUA, 0, keys.tag):
        key, kind, value = _s(key), _s(kind), [_s(v) for v in value]
        if kind == "hash":
            out[key] = dict(zip(value[::2], value[1::2]))
        elif kind == "zset":
            out[key] = dict(zip(value[::2], value[1::2]))
        else:
            out[key] = value
    return out


def own_redis(*extra: str) -> RedisServer:
    """A redis-server of the test's own (fresh directory, free port), started."""
    server = RedisServer(None, *extra)
    server.start()
    server.fixed_port = True  # type: ignore[attr-defined]  # restarts must come back on the same port
    return server


class Worker:
    """A real worker process, started as a user starts it."""

    def __init__(self, redis_url: str, **env: str | int) -> None:
        self.redis_url = redis_url
        self.port = free_port()
        self.env = {k: str(v) for k, v in env.items()}
        fd, name = tempfile.mkstemp(prefix="rmq-worker-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 30) -> "Worker":
        environ = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("RMQ_")}
        # RocketMQ's remoting port off: several workers on one machine would collide on 9876
        environ.update({"RMQ_LOG_LEVEL": "WARNING", "RMQ_REMOTING_PORT": "0", **self.env})
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--redis-url", self.redis_url],
            cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as resp:
                    return resp.status == 200
            except OSError:
                return False

        until_sync(healthy, wait_s, lambda: f"worker on {self.url} answering /healthz:\n{self.log()}", poll_s=0.1)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        code = self.proc.returncode
        self.proc = None
        return code

    def cleanup(self) -> None:
        self.stop()
        # pytest shows a fixture's teardown output when the test failed: a worker's own
        # account of an error (a traceback behind a 500) is the first thing to read then
        text = self.log(tail=20000)
        if "Traceback" in text or "ERROR" in text:
            print(f"--- log of the worker on {self.url} ---\n{text}")
        self.log_path.unlink(missing_ok=True)
