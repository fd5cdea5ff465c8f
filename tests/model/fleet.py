"""Two real worker processes on one real redis-server, and the calls the model test makes
through both of their fronts (HTTP and RocketMQ's TCP protocol).

The state machine is synchronous (Hypothesis runs its rules one after another); the calls
are asyncio (aiohttp, tests/remoting's client) on one event loop in a thread of its own,
where brokers' TCP connections stay open between steps, as a broker's do.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, TypeVar
from urllib.parse import quote

import aiohttp

from service.remoting import codec, codes
from service.remoting.client import NameServerClient
from tests.processes import console_script, start, wait_http
from tests.redis_server import free_port
from tests.remoting.client import RemotingClient, request

T = TypeVar("T")

# short: an expiry step waits for one scan; a stop mid-work gives its queue no time
SCAN_INTERVAL_MS = 100
# A broker's connection is never closed as idle (RMQ_REMOTING_IDLE_MS, 120 s by default, as
# Java's serverChannelMaxIdleTimeSeconds): a real broker sends something every 30 s, the
# model's send only at their steps, seconds apart, and a long run's brokers fall silent for
# minutes. Closed as idle, a broker leaves (tests/remoting/test_channel_close.py), as on
# Java; the model has no clock for it, and three differences the long runs found were that.
IDLE_MS = 86_400_000


class Loop:
    """An event loop in a thread; run() waits for a coroutine's result from outside it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Worker:
    """One `rmq-registry serve` process: its HTTP and RocketMQ ports stay across restarts."""
    redis_url: str
    log_dir: Path
    http_port: int = field(default_factory=free_port)
    tcp_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        log = open(self.log_dir / f"worker-{self.http_port}.log", "ab")
        command = [console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(self.http_port)]
        self.proc = start(command,
                          env={"REDIS_URL": self.redis_url, "RMQ_REMOTING_PORT": str(self.tcp_port),
                               "RMQ_REMOTING_HOST": "127.0.0.1", "RMQ_SCAN_INTERVAL_MS": str(SCAN_INTERVAL_MS),
                               "RMQ_REDIS_TIMEOUT_MS": "10000", "RMQ_LOG_LEVEL": "WARNING",
                               "RMQ_REMOTING_IDLE_MS": str(IDLE_MS)},
                          output=log)
        log.close()
        wait_http(f"{self.base}/readyz", 60)

    def stop(self, wait: bool = True) -> None:
        """SIGTERM, as a rollout sends it; with `wait`, until the process has exited."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if wait:
                self.proc.wait(60)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self) -> str:
        logs = sorted(self.log_dir.glob(f"worker-{self.http_port}.log"))
        return logs[0].read_text(errors="replace")[-3000:] if logs else ""


def make_workers(redis_url: str, count: int = 2) -> list[Worker]:
    log_dir = Path(tempfile.mkdtemp(prefix="rmq-model-"))
    workers = [Worker(redis_url, log_dir) for _ in range(count)]
    for w in workers:
        w.start()
    return workers


class Fronts:
    """Every call the model test makes, through either front of a worker."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.session: aiohttp.ClientSession = loop.run(self._session())

    @staticmethod
    async def _session() -> aiohttp.ClientSession:
        # no keep-alive: a worker that gets SIGTERM would wait for idle connections to close
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60),
                                     connector=aiohttp.TCPConnector(force_close=True))

    def close(self) -> None:
        self.loop.run(self.session.close())

    # ---- HTTP

    async def http(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, url, json=body) as resp:
            text = await resp.text()
            try:
                doc = codec.loads(text.encode()) if text else None
            except ValueError:
                doc = text
            return resp.status, doc

    # ---- TCP

    async def connect(self, worker: Worker) -> RemotingClient:
        return await RemotingClient.connect(worker.tcp_port)

    async def tcp(self, worker: Worker, code: int, ext: dict[str, str] | None = None,
                  client: RemotingClient | None = None, body: bytes = b"") -> tuple[int, Any, dict[str, str]]:
        """(answer code, JSON body or None, header fields); a connection of its own unless
        `client` is given."""
        own = client is None
        conn = client or await self.connect(worker)
        try:
            answer = await conn.call(request(code, ext, body, version=codes.V5_3_3), timeout=60)
        finally:
            if own:
                await conn.close()
        return answer.code, codec.loads(answer.body) if answer.body else None, answer.ext_fields

    # ---- the reads, as (front, read) -> answer

    async def reads(self, worker: Worker, topics: list[str], clusters: list[str],
                    kv: dict[str, list[str]]) -> dict[tuple[str, str], Any]:
        """Every read of both fronts of `worker`: routes of `topics`, cluster info, every
        topic list (`clusters`' lists), KV lists and values of `kv` (namespace -> keys).
        An answer is (status or code, document)."""
        base = worker.base
        # answers matched by opaque: every read on one connection at once
        conn = NameServerClient(f"127.0.0.1:{worker.tcp_port}", timeout_s=60)
        await conn.__aenter__()
        asks: dict[tuple[str, str], Awaitable[tuple[Any, ...]]] = {}
        try:
            for t in topics:
                asks[("http", f"route {t}")] = self.http("GET", f"{base}/v1/routes/{quote(t, safe='')}")
                asks[("tcp", f"route {t}")] = self.read(conn, codes.GET_ROUTEINFO_BY_TOPIC, {"topic": t})
            asks[("http", "cluster")] = self.http("GET", f"{base}/v1/cluster")
            asks[("tcp", "cluster")] = self.read(conn, codes.GET_BROKER_CLUSTER_INFO, None)
            for which, code in (("", codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                                ("/system", codes.GET_SYSTEM_TOPIC_LIST_FROM_NS),
                                ("/unit", codes.GET_UNIT_TOPIC_LIST),
                                ("/unit-sub", codes.GET_HAS_UNIT_SUB_TOPIC_LIST),
                                ("/unit-sub-without-unit", codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)):
                asks[("http", f"topics{which}")] = self.http("GET", f"{base}/v1/topics{which}")
                asks[("tcp", f"topics{which}")] = self.read(conn, code, None)
            for c in clusters:
                asks[("http", f"cluster topics {c}")] = self.http("GET", f"{base}/v1/clusters/{c}/topics")
                asks[("tcp", f"cluster topics {c}")] = self.read(conn, codes.GET_TOPICS_BY_CLUSTER, {"cluster": c})
            for ns, keys in kv.items():
                asks[("http", f"kv {ns}")] = self.http("GET", f"{base}/v1/kv/{ns}")
                asks[("tcp", f"kv {ns}")] = self.read(conn, codes.GET_KVLIST_BY_NAMESPACE, {"namespace": ns})
                for k in keys:
                    asks[("http", f"kv {ns} {k}")] = self.http("GET", f"{base}/v1/kv/{ns}/{k}")
                    asks[("tcp", f"kv {ns} {k}")] = self.read(conn, codes.GET_KV_CONFIG, {"namespace": ns, "key": k})
            answers = await asyncio.gather(*asks.values())
        finally:
            await conn.__aexit__(None, None, None)
        return dict(zip(asks, answers))

    @staticmethod
    async def read(conn: NameServerClient, code: int, ext: dict[str, str] | None) -> tuple[int, Any, dict[str, str]]:
        answer = await conn.call(code, ext)
        return answer.code, codec.loads(answer.body) if answer.body else None, answer.ext_fields

