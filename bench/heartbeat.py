"""Bench 3: heartbeat latency (POST /v1/brokers/heartbeat of a registered broker).

  sequential  N heartbeats one after another on one keep-alive connection (Python
              client): p50/p99 per request, and heartbeat.lua's time in Redis (SLOWLOG);
  concurrent  wrk with 64 connections posting heartbeats for a few seconds:
              throughput and p50/p99 under load (skipped when wrk is absent).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import json  # noqa: E402

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    Client, have_wrk, machine_info, parser, pct, post_json, redis_server, row, workers, wrk, write_result,
)
from bench.seed import registration, script_sha, script_times_us, topics  # noqa: E402


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, help="sequential heartbeats (default 5000, quick 300)")
    p.add_argument("--seconds", type=float, help="wrk duration (default 8, quick 1)")
    p.add_argument("--no-wrk", action="store_true", help="skip the concurrent (wrk) part")
    args = p.parse_args()
    n = args.requests or (300 if args.quick else 5000)
    seconds = args.seconds or (1 if args.quick else 8)
    machine = machine_info()
    sha = script_sha("heartbeat")
    results: dict = {}

    with redis_server() as rs, workers(rs.url) as [port]:
        r = redis.Redis(port=rs.port)
        reg = registration(name="broker-a", topics=topics(100))
        post_json(f"http://127.0.0.1:{port}/v1/brokers/register", reg)
        body = json.dumps({k: reg[k] for k in ("clusterName", "brokerAddr", "brokerName", "brokerId")}).encode()
        client = Client(port)
        for _ in range(50):  # warm-up: connection, first-call paths
            client.request("POST", "/v1/brokers/heartbeat", body)
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 100_000)
        r.slowlog_reset()
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            status, answer = client.request("POST", "/v1/brokers/heartbeat", body)
            samples.append((time.perf_counter() - t0) * 1e6)
            if status != 200:
                raise RuntimeError(f"heartbeat answered {status}: {answer!r}")
        client.close()
        in_redis = script_times_us(r, sha)
        r.config_set("slowlog-log-slower-than", 10_000)
        results["sequential"] = {
            "requests": n, "p50_us": pct(samples, 50), "p99_us": pct(samples, 99), "max_us": max(samples),
            "mean_us": sum(samples) / n,
            "redis_p50_us": pct(in_redis, 50) if in_redis else None,
            "redis_p99_us": pct(in_redis, 99) if in_redis else None,
        }
        if have_wrk() and not args.no_wrk:
            w = wrk(f"http://127.0.0.1:{port}/v1/brokers/heartbeat", seconds, 64, body=body)
            results["concurrent"] = {"connections": 64, "seconds": seconds, "rps": w["rps"],
                                     "p50_us": w["latency_us"]["p50"], "p99_us": w["latency_us"]["p99"],
                                     "errors": sum(w["errors"].values())}

    s = results["sequential"]
    summary = [
        row("heartbeat sequential: p50", s["p50_us"] / 1000, "ms"),
        row("heartbeat sequential: p99", s["p99_us"] / 1000, "ms"),
    ]
    if s["redis_p50_us"] is not None:
        summary.append(row("heartbeat: heartbeat.lua in Redis p50", s["redis_p50_us"] / 1000, "ms"))
    if "concurrent" in results:
        c = results["concurrent"]
        summary += [
            row("heartbeat 64 connections (wrk): throughput", c["rps"], "req/s"),
            row("heartbeat 64 connections (wrk): p50", c["p50_us"] / 1000, "ms"),
            row("heartbeat 64 connections (wrk): p99", c["p99_us"] / 1000, "ms"),
        ]
    write_result(args.out, "heartbeat", {"sequential_requests": n, "wrk_seconds": seconds}, results, summary, machine)


if __name__ == "__main__":
    main()
