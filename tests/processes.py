"""Real registry processes, started as a user starts them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from tests.redis_server import free_port
from tests.waits import until_sync

ROOT = Path(__file__).resolve().parent.parent


def wait_http(url: str, limit_s: float = 20) -> None:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    until_sync(answers, limit_s, f"{url} answering 200", poll_s=0.1)


def http_status(url: str, timeout_s: float = 5) -> int:
    """The status of a GET, error statuses included (urllib raises those)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def post(base: str, path: str, body: dict[str, Any], timeout_s: float = 5) -> int:
    """The status of a JSON POST, error statuses included; 0 for no answer (a worker killed)."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def start(args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT,
          output: int | IO[bytes] = subprocess.PIPE, errors: int | IO[bytes] = subprocess.STDOUT
          ) -> subprocess.Popen[bytes]:
    """``output``: where stdout and stderr go (a file for a process that logs for minutes
    while nobody reads its pipe, which would fill and stop it); ``errors``: stderr apart."""
    environ = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("RMQ_")}
    # RocketMQ's port off unless a test asks: several workers on one machine would collide on 9876
    environ["RMQ_REMOTING_PORT"] = "0"
    environ.update(env or {})
    return subprocess.Popen(args, cwd=cwd, env=environ, stdout=output, stderr=errors)


def console_script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


class Worker:
    """A worker process serving both fronts on free ports (`rmq-registry serve`); a test's
    fixture calls ``kill_left`` after it, so a failed test leaves none running."""

    started: list["Worker"] = []

    def __init__(self, redis_url: str, **env: str) -> None:
        self.http, self.remoting = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.http}"
        self.proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(self.http)],
                          env={"REDIS_URL": redis_url, "RMQ_REMOTING_PORT": str(self.remoting),
                               "RMQ_REMOTING_HOST": "127.0.0.1", **env})
        Worker.started.append(self)
        wait_http(f"{self.base}/readyz", limit_s=60)  # a loaded machine starts it slowly

    def metric(self, sample: str) -> float:
        """One sample of its /metrics, by its name and labels as written there."""
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(sample + " "))

    def stop(self) -> str:
        """SIGTERM; its output once it exited 0."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        out = self.proc.communicate()[0].decode()
        assert code == 0, out
        return out

    @classmethod
    def kill_left(cls) -> None:
        while cls.started:
            proc = cls.started.pop().proc
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
