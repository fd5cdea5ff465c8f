"""Bench: GET_ROUTEINFO_BY_TOPIC (105) over RocketMQ's protocol, the registry and the Java NameServer in one run.

Each target (bench/tcp_targets.py: the registry's worker on its redis-server, other
checkouts with `--registry`, the Java NameServer with `--java-namesrv-home`) is seeded over
TCP with the same registrations (2 broker groups, master + slave, 100 topics, in the JSON
form of a 4.9.8 broker; the four broker connections stay open, as a broker's do, and
re-register unchanged before each round), then read. The targets take turns round by round,
each pinned to the server core; the load generator is Python asyncio (uvloop when
importable) in `--loaders` processes on the loader core. `--connections` TCP connections in
all (default 64), each keeping `--depth` requests in flight (default 8), pipelined with
distinct opaques: every answer sends the next request on that connection. Requests are JSON
headers, language JAVA, version 479 (>= 401: routes in standard JSON), as a 5.x Java client
sends them. Reports per target requests/s, p50/p99 latency (request written to answer read,
in the loader), errors (answers other than SUCCESS), and requests per CPU-second of the
server (/proc/<pid>/stat: the registry's worker and redis-server together, or the JVM),
with the range over rounds and each registry's ratio to Java round by round. After each
registry's TCP run, the same route is read over its HTTP API (`<name> http`: wrk, one
thread, `--connections`, on the loader core; the worker answers from its cache), its
requests per server CPU-second set against Java's TCP figure of the same round; then
again with `--depth` requests written at once per connection (`<name> http pipelined`:
HTTP/1.1 pipelining, as many in flight as the TCP loader keeps) (`--no-http` leaves both
out).
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

from bench import broker_requests as br  # noqa: E402
from bench import cores as pinning  # noqa: E402
from bench import tcp_targets  # noqa: E402
from bench.common import ROOT, have_wrk, http, machine_info, parser, pct, write_result, wrk  # noqa: E402
from bench.route_query import TOPIC  # noqa: E402
from bench.spread import ratio_rows, spread  # noqa: E402

_LEN = struct.Struct(">i")
SEED_TOPICS = [TOPIC, *(f"T{i}" for i in range(99))]


# What is read (--read), as (topic, the answer code expected): the seeded topic from the cache
# (cached) or from Redis (uncached: the registry's workers run with RMQ_MAX_STALENESS_MS=0), or
# a topic no broker serves (unknown: TOPIC_NOT_EXIST, from the cache).
READS = {"cached": (TOPIC, 0), "uncached": (TOPIC, 0), "unknown": ("NoSuchTopic", 17)}


def request_frame(opaque: int, topic: str = TOPIC) -> bytes:
    return br.route_frame(topic, opaque)


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
        return request_frame(opaque, self.loader.topic)

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
                if code != loader.expected:
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
    def __init__(self, port: int, connections: int, depth: int, read: tuple[str, int] = READS["cached"]) -> None:
        self.port = port
        self.topic, self.expected = read
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


def _loader_main(port: int, connections: int, depth: int, warmup: float, seconds: float, out: Any,
                 read: tuple[str, int]) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    out.send(asyncio.run(Loader(port, connections, depth, read).run(warmup, seconds, out)))
    out.close()


def load(port: int, loaders: int, connections: int, depth: int, warmup: float, seconds: float,
         target: tcp_targets.Target, read: tuple[str, int] = READS["cached"]) -> dict[str, Any]:
    """One run: `loaders` processes share the connections; their numbers summed, latencies pooled.

    The target's CPU time is read when the first loader starts and ends its measured window.
    """
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for n in range(loaders):
        share = connections // loaders + (1 if n < connections % loaders else 0)
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_loader_main, args=(port, share, depth, warmup, seconds, send, read))
        p.start()
        pipes.append(recv)
        procs.append(p)
    worker_pids = getattr(target, "worker_pids", target.pids)
    parts = []
    marks: dict[str, float] = {}
    for recv, p in zip(pipes, procs):
        while True:
            if not recv.poll(warmup + seconds + 60):
                raise RuntimeError("a loader process gave no result")
            msg = recv.recv()
            if isinstance(msg, str):
                marks.setdefault(f"{msg}_cpu", tcp_targets.cpu_seconds(target))
                marks.setdefault(f"{msg}_worker_cpu", sum(pinning.cpu_seconds(pid) for pid in worker_pids))
                marks.setdefault(f"{msg}_wall", time.perf_counter())
                continue
            parts.append(msg)
            break
        p.join(10)
    cpu = marks["end_cpu"] - marks["start_cpu"]
    worker_cpu = marks["end_worker_cpu"] - marks["start_worker_cpu"]
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
        # the server's CPU in the measured window (registry: worker + redis-server; Java: the JVM)
        "server_cpu_s": round(cpu, 3),
        "server_cpu_share": round(cpu / wall, 3),
        "rps_per_server_cpu_s": requests / elapsed / max(cpu / wall, 1e-9),
        "worker_cpu_share": round(worker_cpu / wall, 3),
        "rps_per_worker_cpu_s": requests / elapsed / max(worker_cpu / wall, 1e-9),
    }


def http_load(target: tcp_targets.Registry, seconds: float, connections: int, pipeline: int = 1) -> dict[str, Any]:
    """The same route over the registry's HTTP API (GET /v1/routes/{topic}, cached): wrk,
    one thread, on the loader core (this process's pinning), and the server's CPU meanwhile;
    `pipeline` requests written at once on each connection (1: one at a time)."""
    url = f"http://127.0.0.1:{target.http_ports[0]}/v1/routes/{TOPIC}"
    cpu, wall = tcp_targets.cpu_seconds(target), time.perf_counter()
    result = wrk(url, seconds, connections, pipeline=pipeline)
    cpu, wall = tcp_targets.cpu_seconds(target) - cpu, time.perf_counter() - wall
    return {
        "requests": result["requests"], "errors": sum(result["errors"].values()), "rps": result["rps"],
        "p50_us": result["latency_us"]["p50"], "p99_us": result["latency_us"]["p99"],
        "server_cpu_s": round(cpu, 3), "server_cpu_share": round(cpu / wall, 3),
        "rps_per_server_cpu_s": result["requests"] / max(cpu, 1e-9),
    }


class Seeded:
    """The seed brokers' connections to one target: open for the whole run, as brokers keep them."""

    def __init__(self, target: tcp_targets.Target) -> None:
        self.conns: list[tuple[br.Connection, str, str, int]] = []
        self.table = {t: br.topic_config(t, queues=4) for t in SEED_TOPICS}
        self.version = br.data_version(1)
        for g, name in enumerate(("broker-a", "broker-b")):
            for broker_id in (0, 1):
                self.conns.append((br.Connection(target.tcp_ports[0]), name, f"10.0.{g}.{broker_id + 1}:10911",
                                   broker_id))
        self.refresh()

    def refresh(self) -> None:
        """Every seed broker registers (unchanged after the first time), as every 30 s."""
        for conn, name, addr, broker_id in self.conns:
            br.register_retrying(conn, "json", name, addr, broker_id, self.table, self.version)

    def close(self) -> None:
        for conn, *_ in self.conns:
            conn.close()


def check_answer(target: tcp_targets.Target) -> int:
    """One request by hand: SUCCESS naming both groups (for the registry: the route its HTTP API gives)."""
    import json

    conn = br.Connection(target.tcp_ports[0])
    try:
        code, remark, body = conn.call(request_frame(7))
    finally:
        conn.close()
    assert code == 0, (target.name, code, remark)
    over_tcp = json.loads(body)
    assert sorted(q["brokerName"] for q in over_tcp["queueDatas"]) == ["broker-a", "broker-b"], over_tcp
    if isinstance(target, tcp_targets.Registry):
        status, http_body = http("GET", f"http://127.0.0.1:{target.http_ports[0]}/v1/routes/{TOPIC}")
        assert status == 200
        assert over_tcp["queueDatas"] == json.loads(http_body)["queueDatas"], "TCP and HTTP routes differ"
    return len(body)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    tcp_targets.add_arguments(p)
    p.add_argument("--seconds", type=float, help="measured seconds per round and target (default 5, quick 1)")
    p.add_argument("--rounds", type=int, help="rounds per target (default 5, quick 1); medians and ranges")
    p.add_argument("--warmup", type=float, help="seconds of load before each round's measurement (default 1, quick 0.2)")
    p.add_argument("--warmup-rounds", type=int,
                   help="unmeasured rounds per target first, for the JVM's JIT (default 2, quick 0)")
    p.add_argument("--connections", type=int, help="TCP connections in all (default 64, quick 8)")
    p.add_argument("--depth", type=int, default=8, help="requests in flight per connection (default 8)")
    p.add_argument("--loaders", type=int, default=1, help="load generator processes (default 1)")
    p.add_argument("--read", choices=sorted(READS), default="cached",
                   help="cached (default): the seeded route from the cache; uncached: from Redis every time "
                        "(registry workers with RMQ_MAX_STALENESS_MS=0); unknown: a topic no broker serves")
    p.add_argument("--no-http", dest="http", action="store_false",
                   help="leave out the registry's HTTP reads of the same route (wrk, after each TCP run)")
    args = p.parse_args()
    seconds = args.seconds or (1 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 5)
    warmup = args.warmup if args.warmup is not None else (0.2 if args.quick else 1)
    connections = args.connections or (8 if args.quick else 64)
    warmup_rounds = args.warmup_rounds if args.warmup_rounds is not None else (0 if args.quick else 2)
    cores = pinning.from_args(args)
    machine = machine_info()

    settings = {"RMQ_MAX_STALENESS_MS": "0"} if args.read == "uncached" else {}
    runs: dict[str, list[dict[str, Any]]] = {}
    with tcp_targets.targets(args, cores, **settings) as targets:
        described = tcp_targets.describe(targets)
        seeded = {t.name: Seeded(t) for t in targets}
        try:
            body_bytes = {t.name: check_answer(t) for t in targets}
            for r in range(-warmup_rounds, rounds):
                for target in tcp_targets.turns(targets, r):
                    seeded[target.name].refresh()
                    result = load(target.tcp_ports[0], args.loaders, connections, args.depth, warmup, seconds,
                                  target, READS[args.read])
                    if r < 0:
                        print(f"warm-up round, {target.name}: {result['rps']:.0f} req/s")
                        continue
                    results = {target.name: result}
                    if isinstance(target, tcp_targets.Registry) and args.http and have_wrk():
                        results[f"{target.name} http"] = http_load(target, seconds, connections)
                        # as many in flight per connection as the TCP loader keeps (--depth)
                        results[f"{target.name} http pipelined"] = http_load(target, seconds, connections, args.depth)
                    for name, result in results.items():
                        runs.setdefault(name, []).append(result)
                        print(f"round {r + 1}, {name}: {result['rps']:.0f} req/s, p50 {result['p50_us']:.0f} us, "
                              f"p99 {result['p99_us']:.0f} us, errors {result['errors']}, server CPU "
                              f"{result['server_cpu_share']:.2f} core, {result['rps_per_server_cpu_s']:.0f} per CPU-s")
        finally:
            for s in seeded.values():
                s.close()

    summary_numbers = {name: {
        "rps": spread([x["rps"] for x in rs]),
        "p50_us": spread([x["p50_us"] for x in rs]),
        "p99_us": spread([x["p99_us"] for x in rs]),
        "errors": sum(x["errors"] for x in rs),
        "server_cpu_share": spread([x["server_cpu_share"] for x in rs]),
        "rps_per_server_cpu_s": spread([x["rps_per_server_cpu_s"] for x in rs]),
    } for name, rs in runs.items()}

    def samples(key: str, scale: float = 1, front: str = "tcp") -> dict[str, list[float]]:
        """By target: its TCP runs, or (front "http", "http pipelined") each registry's runs
        of that front next to Java's TCP ones."""
        out = {}
        for name, rs in runs.items():
            target, _, of = name.partition(" ")
            if (front == "tcp" and not of) or (front != "tcp" and (of == front or name == "java")):
                out[target] = [x[key] * scale for x in rs]
        return out

    summary = [
        *ratio_rows("TCP route (105) per server CPU-second", samples("rps_per_server_cpu_s"), "req/s"),
        *ratio_rows("TCP route (105) throughput", samples("rps"), "req/s", ratios=False),
        *ratio_rows("TCP route (105) p50 latency", samples("p50_us", 1e-3), "ms", ratios=False),
        *ratio_rows("TCP route (105) p99 latency", samples("p99_us", 1e-3), "ms", ratios=False),
        *ratio_rows("TCP route (105) server CPU", samples("server_cpu_share"), "cores", ratios=False),
    ]
    if any(name.endswith(" http") for name in runs):  # Java: its TCP figures, the same in each row
        summary += [
            *ratio_rows("HTTP route (cached) per server CPU-second (Java over TCP)",
                        samples("rps_per_server_cpu_s", front="http"), "req/s"),
            *ratio_rows("HTTP route (cached) throughput", {k: v for k, v in samples("rps", front="http").items()
                                                           if k != "java"}, "req/s", ratios=False),
            *ratio_rows(f"HTTP route (cached, {args.depth} pipelined) per server CPU-second (Java over TCP)",
                        samples("rps_per_server_cpu_s", front="http pipelined"), "req/s"),
            *ratio_rows(f"HTTP route (cached, {args.depth} pipelined) throughput",
                        {k: v for k, v in samples("rps", front="http pipelined").items() if k != "java"},
                        "req/s", ratios=False),
        ]
    write_result(args.out, "tcp_route_query", {
        "seconds": seconds, "rounds": rounds, "warmup_seconds": warmup, "warmup_rounds": warmup_rounds, "connections": connections,
        "depth": args.depth, "loaders": args.loaders, "targets": described, "cores": cores.describe(),
        "java_opts": args.java_opts if "java" in described else None,
        "load_generator": "Python asyncio (uvloop when importable), asyncio.Protocol per connection, "
                          f"{args.loaders} process(es); pipelined requests with distinct opaques",
        "request": "GET_ROUTEINFO_BY_TOPIC, JSON header, language JAVA, version 479 (standard JSON answer)",
        "topic": TOPIC, "read": args.read, "route_bytes": body_bytes,
        "brokers": "2 groups x (master + slave), 100 topics, registered over TCP (4.9.8 JSON body)",
    }, {"summary": summary_numbers, "runs": runs}, summary, machine)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
