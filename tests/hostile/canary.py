"""Readers beside an attack: a RocketMQ client and an HTTP client reading a route every
100 ms from their own threads, and the worker's resident memory sampled every 50 ms.

An attack that freezes the worker's event loop shows as a long wait of either reader; one
that makes it buffer or inflate shows as resident memory growth.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from service.remoting import codec, codes
from tests.remoting.client import request

PERIOD_S = 0.1
MB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def tcp_read_route(sock: socket.socket, topic: str) -> int:
    """One GET_ROUTEINFO_BY_TOPIC on a blocking socket: the answer's code."""
    cmd = request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    sock.sendall(codec.encode(cmd))
    (length,) = struct.unpack(">i", _exactly(sock, 4))
    answer = codec.decode_payload(_exactly(sock, length))
    assert answer.opaque == cmd.opaque
    return answer.code


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the worker closed the canary's connection")
        buf += chunk
    return bytes(buf)


@dataclass
class Watch:
    """Runs the readers and the memory sampler until ``stop``; then the figures."""

    pid: int
    http_url: str  # the route to read, e.g. http://127.0.0.1:8080/v1/routes/Canary
    tcp_port: int
    topic: str
    waits: dict[str, float] = field(default_factory=lambda: {"tcp": 0.0, "http": 0.0})
    reads: dict[str, int] = field(default_factory=lambda: {"tcp": 0, "http": 0})
    errors: list[str] = field(default_factory=list)
    rss_start: int = 0
    rss_peak: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._tcp, self._http, self._memory)]

    def __enter__(self) -> "Watch":
        self.rss_start = self.rss_peak = rss_bytes(self.pid)
        for t in self._threads:
            t.start()
        time.sleep(0.3)  # the readers have read once before the attack starts
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.3)  # and once after it
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        print(self.summary())  # the figures, shown by pytest -s or with a failure

    @property
    def longest_wait(self) -> float:
        return max(self.waits.values())

    @property
    def rss_growth_mb(self) -> float:
        return (self.rss_peak - self.rss_start) / MB

    def summary(self) -> str:
        return (f"longest wait tcp {self.waits['tcp']:.3f} s, http {self.waits['http']:.3f} s; "
                f"reads tcp {self.reads['tcp']}, http {self.reads['http']}; "
                f"RSS {self.rss_start / MB:.0f} -> peak {self.rss_peak / MB:.0f} MB; errors {self.errors[:3]}")

    # A reader may wait this long: the attacks' work held in the event loop would stall every
    # reader for seconds, while a machine loaded by other suites descheduled the whole worker
    # for over a second at times (seen: 1.08 s for both readers at once).
    def assert_unharmed(self, max_wait_s: float = 5.0, max_growth_mb: float = 200) -> None:
        assert not self.errors, self.summary()
        assert min(self.reads.values()) >= 2, self.summary()
        assert self.longest_wait <= max_wait_s, self.summary()
        assert self.rss_growth_mb <= max_growth_mb, self.summary()

    # ------------------------------------------------------------------ readers
    def _timed(self, kind: str, read: "callable[[], int]") -> None:  # type: ignore[valid-type]
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                code = read()
            except Exception as e:  # noqa: BLE001 - any failure of a reader is a finding
                self.errors.append(f"{kind}: {e!r}")
                return
            took = time.monotonic() - started
            self.waits[kind] = max(self.waits[kind], took)
            self.reads[kind] += 1
            if code not in (0, 200):
                self.errors.append(f"{kind}: answered {code}")
                return
            self._stop.wait(PERIOD_S)

    def _tcp(self) -> None:
        with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=60) as sock:
            self._timed("tcp", lambda: tcp_read_route(sock, self.topic))

    def _http(self) -> None:
        def read() -> int:
            # a new connection each time: a stalled accept queue shows too
            with urllib.request.urlopen(self.http_url, timeout=60) as resp:
                resp.read()
                return resp.status

        self._timed("http", read)

    def _memory(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.rss_peak = max(self.rss_peak, rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return
