"""Bench: GET_ROUTEINFO_BY_TOPIC (105) over the RocketMQ remoting TCP endpoint of one worker.

One registry worker (`python -m service serve`, RMQ_REMOTING_PORT on a free port) on its own
redis-server, seeded like route_query.py (2 broker groups, master + slave, 100 topics).
The load generator is Python asyncio (uvloop when importable) in `--loaders` processes
(default 1: on a 2-core machine the worker gets one core, the loader the other). `--connections` TCP connections in all (default 64), each
keeping `--depth` requests in flight (default 8), pipelined with distinct opaques: every answer
sends the next request on that connection. Requests are JSON headers, language JAVA, version
479 (>= 401: routes in standard JSON), as a 5.x Java client sends them. Reports requests/s
(median over rounds), p50/p99 latency (request written to answer read, in the loader), errors
(answers other than SUCCESS), and requests per CPU-second of the worker process (from
/proc/<pid>/stat), the figure to hold against the Java NameServer's ~44k per core.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import struct
import sys
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ROOT, Proc, free_port, machine_info, median, parser, pct, redis_server, row, worker_env, write_result,
)
from bench.route_query import TOPIC, seed  # noqa: E402

GET_ROUTEINFO_BY_TOPIC = 105
_LEN = struct.Struct(">i")
_HDR = struct.Struct(">ii")


def request_frame(opaque: int, topic: str = TOPIC, version: int = 479) -> bytes:
    header = (f'{{"code":{GET_ROUTEINFO_BY_TOPIC},"extFields":{{"topic":"{topic}"}},"flag":0,'
              f'"language":"JAVA","opaque":{opaque},"serializeTypeCurrentRPC":"JSON","version":{version}}}').encode()
    return _HDR.pack(4 + len(header), len(header)) + header


class Conn(asyncio.Protocol):
    """One connection: `depth` requests in flight; each answer (matched by opaque) sends the next."""

    def __init__(self, loader: "Loader", index: int) -> None:
        self.loader = loader
        self.next_opaque = index * 1_000_000_000 // max(1, loader.connections) + 1
        self.sent: dict[int, float] = {}
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        frames = [self._next() for _ in range(self.loader.depth)]
        self.transport.write(b"".join(frames))

    def _next(self) -> bytes:
        opaque = self.next_opaque
        self.next_opaque += 1
        self.sent[opaque] = time.perf_counter()
        return request_frame(opaque)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        loader = self.loader
        out = []
        at = 0
        end = len(buf)
        now = time.perf_counter()
        while end - at >= 8:
            (length,) = _LEN.unpack_from(buf, at)
            if end - at - 4 < length:
                break
            header_len = _LEN.unpack_from(buf, at + 4)[0] & 0xFFFFFF
            header = bytes(buf[at + 8:at + 8 + header_len])
            at += 4 + length
            opaque, code = _opaque_and_code(header)
            started = self.sent.pop(opaque, None)
            if started is None:
                loader.errors += 1
                continue
            if loader.measuring:
                loader.count += 1
                loader.latencies.append((now - started) * 1e6)
                if code != 0:
                    loader.errors += 1
            if not loader.stopping:
                out.append(self._next())
        del buf[:at]
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
        if loader.stopping and not self.sent and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)


def _opaque_and_code(header: bytes) -> tuple[int, int]:
    """The answer's opaque and code, read from its JSON header without a full parse."""
    i = header.index(b'"opaque":') + 9
    j = i
    while header[j] in b"-0123456789":
        j += 1
    opaque = int(header[i:j])
    k = header.index(b'"code":') + 7
    m = k
    while header[m] in b"-0123456789":
        m += 1
    return opaque, int(header[k:m])


class Loader:
    def __init__(self, port: int, connections: int, depth: int) -> None:
        self.port = port
        self.connections = connections
        self.depth = depth
        self.count = 0
        self.errors = 0
        self.latencies = array("d")
        self.measuring = False
        self.stopping = False

    async def run(self, warmup: float, seconds: float, signal: Any = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        conns = []
        for i in range(self.connections):
            _, proto = await loop.create_connection(lambda i=i: Conn(self, i), "127.0.0.1", self.port)
            conns.append(proto)
        await asyncio.sleep(warmup)
        if signal is not None:
            signal.send("start")
        self.measuring = True
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        self.measuring = False
        elapsed = time.perf_counter() - started
        if signal is not None:
            signal.send("end")
        self.stopping = True
        try:
            await asyncio.wait_for(asyncio.gather(*(c.closed for c in conns)), 10)
        except asyncio.TimeoutError:
            for c in conns:
                if c.transport is not None:
                    c.transport.abort()
        return {"requests": self.count, "errors": self.errors, "elapsed_s": elapsed,
                "latencies_us": self.latencies.tobytes()}


def _loader_main(port: int, connections: int, depth: int, warmup: float, seconds: float, out: Any) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    out.send(asyncio.run(Loader(port, connections, depth).run(warmup, seconds, out)))
    out.close()


def load(port: int, loaders: int, connections: int, depth: int, warmup: float, seconds: float,
         worker_pid: int) -> dict[str, Any]:
    """One run: `loaders` processes share the connections; their numbers summed, latencies pooled.

    The worker's CPU time is read when the first loader starts and ends its measured window.
    """
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for n in range(loaders):
        share = connections // loaders + (1 if n < connections % loaders else 0)
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_loader_main, args=(port, share, depth, warmup, seconds, send))
        p.start()
        pipes.append(recv)
        procs.append(p)
    parts = []
    marks: dict[str, float] = {}
    for recv, p in zip(pipes, procs):
        while True:
            if not recv.poll(warmup + seconds + 60):
                raise RuntimeError("a loader process gave no result")
            msg = recv.recv()
            if isinstance(msg, str):
                marks.setdefault(f"{msg}_cpu", cpu_seconds(worker_pid))
                marks.setdefault(f"{msg}_wall", time.perf_counter())
                continue
            parts.append(msg)
            break
        p.join(10)
    cpu = marks["end_cpu"] - marks["start_cpu"]
    wall = marks["end_wall"] - marks["start_wall"]
    latencies = array("d")
    for part in parts:
        latencies.frombytes(part["latencies_us"])
    requests = sum(p["requests"] for p in parts)
    elapsed = max(p["elapsed_s"] for p in parts)
    lat = list(latencies)
    return {
        "requests": requests,
        "errors": sum(p["errors"] for p in parts),
        "elapsed_s": round(elapsed, 3),
        "rps": requests / elapsed,
        "p50_us": pct(lat, 50) if lat else 0.0,
        "p99_us": pct(lat, 99) if lat else 0.0,
        # the worker's CPU in the measured window: cores busy, and the rate per busy core
        "worker_cpu_s": round(cpu, 3),
        "worker_cpu_share": round(cpu / wall, 3),
        "rps_per_worker_cpu_s": requests / elapsed / max(cpu / wall, 1e-9),
    }


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (not its children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_answer(port: int, http_base: str) -> int:
    """One request by hand: SUCCESS, and the same route the HTTP API gives. Returns the body size."""
    import json
    import socket

    from service.remoting import codec, fastjson
    from bench.common import http

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request_frame(7))
        data = b""
        while len(data) < 4 or len(data) < 4 + _LEN.unpack_from(data)[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("the endpoint closed the connection")
            data += chunk
    answer = codec.decode_payload(data[4:4 + _LEN.unpack_from(data)[0]])
    assert answer.code == 0 and answer.opaque == 7, (answer.code, answer.remark)
    status, body = http("GET", f"{http_base}/v1/routes/{TOPIC}")
    assert status == 200
    over_tcp, over_http = fastjson.loads(answer.body), json.loads(body)
    assert over_tcp["queueDatas"] == over_http["queueDatas"], "TCP and HTTP routes differ"
    return len(answer.body)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, help="measured seconds per round (default 5, quick 1)")
    p.add_argument("--rounds", type=int, help="rounds (default 3, quick 1); the report takes medians")
    p.add_argument("--warmup", type=float, help="seconds of load before each round's measurement (default 1, quick 0.2)")
    p.add_argument("--connections", type=int, help="TCP connections in all (default 64, quick 8)")
    p.add_argument("--depth", type=int, default=8, help="requests in flight per connection (default 8)")
    p.add_argument("--loaders", type=int, default=1, help="load generator processes (default 1)")
    args = p.parse_args()
    seconds = args.seconds or (1 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 3)
    warmup = args.warmup if args.warmup is not None else (0.2 if args.quick else 1)
    connections = args.connections or (8 if args.quick else 64)
    machine = machine_info()

    runs = []
    with redis_server() as rs:
        http_port, tcp_port = free_port(), free_port()
        worker = Proc([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(http_port)],
                      env=worker_env(rs.url, RMQ_REMOTING_PORT=str(tcp_port), RMQ_REMOTING_HOST="127.0.0.1"),
                      ready_url=f"http://127.0.0.1:{http_port}/readyz")
        try:
            base = f"http://127.0.0.1:{http_port}"
            seed(base)
            body_bytes = check_answer(tcp_port, base)
            for r in range(rounds):
                result = load(tcp_port, args.loaders, connections, args.depth, warmup, seconds, worker.proc.pid)
                runs.append(result)
                print(f"round {r + 1}: {result['rps']:.0f} req/s, p50 {result['p50_us']:.0f} us, "
                      f"p99 {result['p99_us']:.0f} us, errors {result['errors']}, "
                      f"worker CPU {result['worker_cpu_share']:.2f} core")
        finally:
            worker.stop()

    summary_numbers = {
        "rps": median([x["rps"] for x in runs]),
        "p50_us": median([x["p50_us"] for x in runs]),
        "p99_us": median([x["p99_us"] for x in runs]),
        "errors": sum(x["errors"] for x in runs),
        "worker_cpu_share": median([x["worker_cpu_share"] for x in runs]),
        "rps_per_worker_core": median([x["rps_per_worker_cpu_s"] for x in runs]),
    }
    summary = [
        row("TCP route (105): throughput", summary_numbers["rps"], "req/s", "1 worker, one process"),
        row("TCP route (105): p50 latency", summary_numbers["p50_us"] / 1000, "ms"),
        row("TCP route (105): p99 latency", summary_numbers["p99_us"] / 1000, "ms"),
        row("TCP route (105): per worker CPU core", summary_numbers["rps_per_worker_core"], "req/s",
            "Java NameServer: ~44k per core"),
    ]
    write_result(args.out, "tcp_route_query", {
        "seconds": seconds, "rounds": rounds, "warmup_seconds": warmup, "connections": connections,
        "depth": args.depth, "loaders": args.loaders,
        "load_generator": "Python asyncio (uvloop when importable), asyncio.Protocol per connection, "
                          f"{args.loaders} process(es); pipelined requests with distinct opaques",
        "request": "GET_ROUTEINFO_BY_TOPIC, JSON header, language JAVA, version 479 (standard JSON answer)",
        "topic": TOPIC, "route_bytes": body_bytes, "brokers": "2 groups x (master + slave), 100 topics",
        "worker": "python -m service serve, RMQ_REMOTING_PORT set, default settings (cached reads)",
    }, {"summary": summary_numbers, "runs": runs}, summary, machine)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
