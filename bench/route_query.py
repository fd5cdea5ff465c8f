"""Bench 1: route query throughput and latency of one worker, 64 connections, with wrk.

Three targets, measured in the same run and interleaved round by round so that load
from other processes on the machine hits them alike:
  ceiling   bench/ceiling.py: aiohttp (uvloop when importable) answering the same route
            JSON bytes as a constant: what one worker could serve at best;
  uncached  a registry worker with RMQ_MAX_STALENESS_MS=0 (every read runs route.lua);
  cached    a registry worker with default settings (reads served from its cache).
Reports requests/s and p50/p99 latency per target (median over rounds) and the ratios
cached/ceiling (goal >= 0.8) and uncached/ceiling (median of the per-round ratios); and
requests per CPU-second of the serving process (its user + system time during the run;
Redis's not counted), whose ratio moves less with the machine's load than throughput
does when other work shares the cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.spread import range_note  # noqa: E402
from bench.common import (  # noqa: E402
    BENCH, Proc, free_port, http, machine_info, median, parser, post_json, redis_server, row,
    workers, wrk, write_result,
)
from bench import cores as pinning  # noqa: E402
from bench.cores import cpu_seconds  # noqa: E402
from bench.seed import registration, topics  # noqa: E402

TOPIC = "BenchTopic"


def seed(base: str) -> bytes:
    """Two broker groups (master + slave each) serving the bench topic among 100 topics."""
    names = [TOPIC, *topics(99)]
    for g, name in enumerate(("broker-a", "broker-b")):
        for broker_id in (0, 1):
            post_json(f"{base}/v1/brokers/register", registration(
                addr=f"10.0.{g}.{broker_id + 1}:10911", name=name, broker_id=broker_id, topics=names))
    status, body = http("GET", f"{base}/v1/routes/{TOPIC}")
    assert status == 200, body
    return body


def listening_pid(port: int) -> int:
    """The process listening on 127.0.0.1:`port` (a worker started by bench.common.workers)."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"pid=(\d+)", out)
    if m is None:
        raise RuntimeError(f"no process found listening on port {port}: {out!r}")
    return int(m.group(1))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, help="wrk duration per target and round (default 5, quick 1)")
    p.add_argument("--rounds", type=int, help="rounds of ceiling/uncached/cached (default 5, quick 1)")
    p.add_argument("--connections", type=int, default=64)
    pinning.add_arguments(p)
    args = p.parse_args()
    cores = pinning.from_args(args)  # wrk, started from here, runs on the loader's core
    seconds = args.seconds or (1 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 5)
    warmup = 0 if args.quick else 2
    machine = machine_info()

    with redis_server() as rs, workers(rs.url) as [cached_port], \
            workers(rs.url, RMQ_MAX_STALENESS_MS="0") as [uncached_port], \
            tempfile.NamedTemporaryFile(suffix=".json") as body_file:
        body = seed(f"http://127.0.0.1:{cached_port}")
        body_file.write(body)
        body_file.flush()
        ceiling_port = free_port()
        ceiling = Proc([sys.executable, str(BENCH / "ceiling.py"), "--port", str(ceiling_port),
                        "--body-file", body_file.name], ready_url=f"http://127.0.0.1:{ceiling_port}/healthz")
        try:
            targets = {"ceiling": ceiling_port, "uncached": uncached_port, "cached": cached_port}
            pids = {name: listening_pid(port) for name, port in targets.items()}
            # the three servers and Redis share the server's core; one of them is busy at a time
            for pid in [*pids.values(), rs.proc.pid]:
                pinning.pin(pid, cores.server)
            urls = {k: f"http://127.0.0.1:{port}/v1/routes/{TOPIC}" for k, port in targets.items()}
            for name, url in urls.items():
                status, got = http("GET", url)
                assert status == 200 and got == body, f"{name} answers differently"
                if warmup:
                    wrk(url, warmup, args.connections)
            runs: dict[str, list[dict]] = {k: [] for k in targets}
            for r in range(rounds):
                # the brokers re-register as real ones do (every 30 s; a round is shorter), so
                # a run of many rounds outlives no broker's timeout; unchanged, it flushes no cache
                seed(f"http://127.0.0.1:{cached_port}")
                for name, url in urls.items():
                    cpu = cpu_seconds(pids[name])
                    result = wrk(url, seconds, args.connections)
                    if result["errors"].get("status"):
                        raise SystemExit(f"{name} answered {result['errors']['status']} route reads of round {r + 1} "
                                         "with a non-2xx status: the round measured no route reads")
                    result["server_cpu_s"] = round(cpu_seconds(pids[name]) - cpu, 3)
                    result["rps_per_server_cpu_s"] = result["requests"] / max(result["server_cpu_s"], 1e-3)
                    runs[name].append(result)
                    print(f"round {r + 1} {name}: {result['rps']:.0f} req/s, p50 {result['latency_us']['p50']} us, "
                          f"p99 {result['latency_us']['p99']} us, {result['rps_per_server_cpu_s']:.0f} per CPU-s")
        finally:
            ceiling.stop()

    per_target = {}
    for name, rs_ in runs.items():
        per_target[name] = {
            "rps": median([x["rps"] for x in rs_]),
            "p50_us": median([x["latency_us"]["p50"] for x in rs_]),
            "p99_us": median([x["latency_us"]["p99"] for x in rs_]),
            "rps_per_server_cpu_s": median([x["rps_per_server_cpu_s"] for x in rs_]),
            "errors": sum(sum(x["errors"].values()) for x in rs_),
        }
    per_round = {name: [runs[name][i]["rps"] / runs["ceiling"][i]["rps"] for i in range(rounds)]
                 for name in ("cached", "uncached")}
    per_round_cpu = {name: [runs[name][i]["rps_per_server_cpu_s"] / runs["ceiling"][i]["rps_per_server_cpu_s"]
                            for i in range(rounds)] for name in ("cached", "uncached")}
    ratios = {f"{name}_over_ceiling": median(values) for name, values in per_round.items()}
    ratios |= {f"{name}_over_ceiling_per_cpu_s": median(values) for name, values in per_round_cpu.items()}
    summary = []
    for name in targets:
        t = per_target[name]
        summary += [
            row(f"route {name}: throughput", t["rps"], "req/s", range_note([x["rps"] for x in runs[name]], "rounds")),
            row(f"route {name}: p50 latency", t["p50_us"] / 1000, "ms"),
            row(f"route {name}: p99 latency", t["p99_us"] / 1000, "ms"),
            row(f"route {name}: per server CPU-second", t["rps_per_server_cpu_s"], "req/s",
                range_note([x["rps_per_server_cpu_s"] for x in runs[name]], "rounds")),
        ]
    summary += [
        row("route ratio cached / ceiling", ratios["cached_over_ceiling"], "",
            f"{range_note(per_round['cached'], 'rounds')}; goal >= 0.8"),
        row("route ratio uncached / ceiling", ratios["uncached_over_ceiling"], "",
            range_note(per_round["uncached"], "rounds")),
        row("route ratio cached / ceiling, per server CPU-second", ratios["cached_over_ceiling_per_cpu_s"], "",
            f"{range_note(per_round_cpu['cached'], 'rounds')}; Redis's CPU not counted"),
    ]
    write_result(args.out, "route_query", {
        "seconds": seconds, "rounds": rounds, "warmup_seconds": warmup, "connections": args.connections, "cores": cores.describe(),
        "wrk_threads": 1, "topic": TOPIC, "route_bytes": len(body), "brokers": "2 groups x (master + slave), 100 topics",
    }, {"targets": per_target, "ratios": ratios, "runs": runs}, summary, machine)


if __name__ == "__main__":
    main()
