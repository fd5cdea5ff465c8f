"""Bench 6: route read throughput with 1, 2 and 3 registry workers on one Redis.

Two ways to spread the load, both measured when possible:
  direct   one wrk per worker port at the same time (64 connections split evenly),
           throughputs summed: no balancer in the path;
  haproxy  one wrk (64 connections) against haproxy (Debian package, one thread,
           round-robin, HTTP keep-alive) on 127.0.0.1 in front of the workers;
           skipped when haproxy is not installed.
Cached route reads (default settings). Reports throughput and the ratio to one worker.
Load generator, balancer, workers and Redis all share this machine's cores, so the
scaling is bounded by the core count (recorded in the result), not by the registry.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    Proc, free_port, machine_info, median, parser, redis_server, row, workers, wrk, wrk_finish, wrk_start,
    write_result,
)
from bench.route_query import TOPIC, seed  # noqa: E402

HAPROXY_CFG = """global
    maxconn 4096
    nbthread 1
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    balance roundrobin
{servers}
"""


def direct(ports: list[int], seconds: float, connections: int) -> dict:
    split = [connections // len(ports) + (1 if i < connections % len(ports) else 0) for i in range(len(ports))]
    procs = [wrk_start(f"http://127.0.0.1:{p}/v1/routes/{TOPIC}", seconds, c) for p, c in zip(ports, split)]
    runs = [wrk_finish(p) for p in procs]
    return {"rps": sum(r["rps"] for r in runs), "per_worker_rps": [r["rps"] for r in runs],
            "p99_us_max": max(r["latency_us"]["p99"] for r in runs),
            "errors": sum(sum(r["errors"].values()) for r in runs)}


def via_haproxy(ports: list[int], seconds: float, connections: int) -> dict:
    port = free_port()
    servers = "\n".join(f"    server w{i} 127.0.0.1:{p}" for i, p in enumerate(ports))
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as cfg:
        cfg.write(HAPROXY_CFG.format(port=port, servers=servers))
        cfg.flush()
        lb = Proc([shutil.which("haproxy") or "haproxy", "-db", "-f", cfg.name], ready_url=f"http://127.0.0.1:{port}/readyz")
        try:
            r = wrk(f"http://127.0.0.1:{port}/v1/routes/{TOPIC}", seconds, connections)
        finally:
            lb.stop()
    return {"rps": r["rps"], "p50_us": r["latency_us"]["p50"], "p99_us": r["latency_us"]["p99"],
            "errors": sum(r["errors"].values())}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=3, help="largest worker count (default 3)")
    p.add_argument("--seconds", type=float, help="wrk duration per point (default 8, quick 1)")
    p.add_argument("--rounds", type=int, help="rounds over all points, median reported (default 2, quick 1)")
    p.add_argument("--connections", type=int, default=64)
    args = p.parse_args()
    seconds = args.seconds or (1 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 2)
    machine = machine_info()
    modes = ["direct"] + (["haproxy"] if shutil.which("haproxy") else [])
    runs: dict[str, dict[int, list[dict]]] = {m: {n: [] for n in range(1, args.workers + 1)} for m in modes}

    with redis_server() as rs, workers(rs.url, args.workers) as ports:
        seed(f"http://127.0.0.1:{ports[0]}")
        if not args.quick:
            wrk(f"http://127.0.0.1:{ports[0]}/v1/routes/{TOPIC}", 2, args.connections)
        for _ in range(rounds):
            for n in range(1, args.workers + 1):
                for mode in modes:
                    res = (direct if mode == "direct" else via_haproxy)(ports[:n], seconds, args.connections)
                    runs[mode][n].append(res)
                    print(f"{mode} {n} worker(s): {res['rps']:.0f} req/s")

    results: dict = {}
    summary = []
    for mode in modes:
        base = median([r["rps"] for r in runs[mode][1]])
        results[mode] = {}
        for n, rs_ in runs[mode].items():
            rps = median([r["rps"] for r in rs_])
            results[mode][str(n)] = {"rps": rps, "ratio_to_1": rps / base, "runs": rs_}
            summary.append(row(f"{n} worker(s), {mode}: throughput", rps, "req/s", f"x{rps / base:.2f} of 1 worker"))
    write_result(args.out, "scale_workers", {
        "seconds": seconds, "rounds": rounds, "connections": args.connections, "modes": modes,
        "note": f"{machine['cores']} cores shared by wrk, haproxy, workers and redis-server",
    }, results, summary, machine)


if __name__ == "__main__":
    main()
