"""A real worker process (HTTP and RocketMQ port) on the test Redis, a broker serving the
topic the canary readers read, and helpers to attack it with plain sockets.

``HOSTILE_SRC=<a checkout's root>`` runs the workers from that checkout instead (the tests
stay these): how the same attacks were seen to fail before the limits existed, e.g.
``git archive <commit> | tar -x -C /tmp/old && HOSTILE_SRC=/tmp/old scripts/test tests/hostile -s``.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import urllib.request
from typing import Callable, Iterator

import pytest

from service.remoting import codec
from tests.builders import registration
from tests.hardening.harness import Worker
from tests.hostile.canary import Watch
from tests.redis_server import RedisServer, free_port

CANARY_TOPIC = "Canary"

# Short enough for the tests to see them act; every one is a documented setting.
LIMITS = {
    "RMQ_REMOTING_IDLE_MS": 2000,
    "RMQ_REMOTING_FRAME_TIMEOUT_MS": 3000,
    "RMQ_HTTP_HEADER_TIMEOUT_MS": 2000,
    "RMQ_HTTP_BODY_TIMEOUT_MS": 2000,
    "RMQ_MAX_WATCHES": 50,
}


class Target:
    """The worker under attack: its process, its ports, a Watch factory."""

    def __init__(self, worker: Worker, tcp_port: int) -> None:
        self.worker = worker
        self.tcp_port = tcp_port

    @property
    def pid(self) -> int:
        assert self.worker.proc is not None
        return self.worker.proc.pid

    @property
    def url(self) -> str:
        return self.worker.url

    def watch(self) -> Watch:
        return Watch(self.pid, f"{self.url}/v1/routes/{CANARY_TOPIC}", self.tcp_port, CANARY_TOPIC)

    def connect(self, timeout: float = 10) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.tcp_port), timeout=timeout)

    def http_connect(self, timeout: float = 10) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.worker.port), timeout=timeout)

    def log(self) -> str:
        return self.worker.log(tail=200_000)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on /metrics (0 when absent)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")


def start_target(redis_url: str, **env: int | str) -> Target:
    tcp_port = free_port()
    if os.environ.get("HOSTILE_SRC"):
        env["PYTHONPATH"] = os.environ["HOSTILE_SRC"]
    worker = Worker(redis_url, RMQ_REMOTING_PORT=tcp_port, RMQ_LOG_LEVEL="INFO", **{**LIMITS, **env}).start()
    # the canary broker never heartbeats: it must outlive every attack of a module
    body = json.dumps(registration(addr="127.0.0.1:10911", name="canary-broker", topics=[CANARY_TOPIC],
                                   timeout_ms=86_400_000)).encode()
    req = urllib.request.Request(worker.url + "/v1/brokers/register", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"{worker.url}/v1/routes/{CANARY_TOPIC}", timeout=10) as resp:
        assert resp.status == 200  # cached from now on
    return Target(worker, tcp_port)


@pytest.fixture(scope="module")
def target(redis_server: RedisServer) -> Iterator[Target]:
    """One worker for a module's attacks (each test measures from its own start)."""
    t = start_target(redis_server.url)
    yield t
    t.worker.cleanup()


@pytest.fixture
def make_target(redis_server: RedisServer) -> Iterator[Callable[..., Target]]:
    """A worker of the test's own, with settings of its own."""
    made: list[Target] = []

    def make(**env: int | str) -> Target:
        t = start_target(redis_server.url, **env)
        made.append(t)
        return t

    yield make
    for t in made:
        t.worker.cleanup()


def frame(header: bytes, body: bytes = b"", kind: int = codec.JSON) -> bytes:
    """A frame with the header as given (not re-encoded: it may be anything)."""
    return struct.pack(">iI", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body


def answer_or_close(sock: socket.socket, timeout: float = 10) -> codec.Command | None:
    """The next answer on the socket, or None when the worker closed it first."""
    sock.settimeout(timeout)
    buf = bytearray()
    while True:
        if len(buf) >= 4:
            (length,) = struct.unpack(">i", buf[:4])
            if len(buf) >= 4 + length:
                return codec.decode_payload(bytes(buf[4:4 + length]))
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk


def dribble(sock: socket.socket, data: bytes, for_s: float = 8) -> float:
    """Sends ``data`` two bytes a second (a slowloris sender) until the peer closes or
    ``for_s`` passes; the time it started."""
    started = time.monotonic()
    try:
        for byte in data:
            sock.sendall(bytes([byte]))
            time.sleep(0.5)
            if time.monotonic() - started > for_s:
                break
    except OSError:
        pass
    return started


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """How long until the peer closed the socket (reading and dropping anything it sends),
    or None if it was still open after `seconds`."""
    started = time.monotonic()
    deadline = started + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return time.monotonic() - started
        except socket.timeout:
            return None
        except ConnectionResetError:
            return time.monotonic() - started
    return None
