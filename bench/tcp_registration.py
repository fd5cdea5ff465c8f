"""Bench 10: REGISTER_BROKER (103) over RocketMQ's protocol, end to end.

One worker with its remoting port on its own redis-server. A master with 100 / 1,000 /
10,000 topics registers over one TCP connection, as a broker keeps one to its NameServer
(closing it removes the broker, as in RocketMQ): first (tables emptied before each
repetition), unchanged (the same request again: a broker's 30 s re-registration, which
takes the fast path) and changed (a new dataVersion and one topic's queue count changed).
Client-side time from the request's write to its answer, and the register script's own
time from SLOWLOG. Median of 5.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    ROOT, Proc, free_port, machine_info, median, parser, redis_server, row, worker_env, write_result,
)
from bench.fleet import SCRIPT_BY_SHA  # noqa: E402
from tests.builders import registration, topic_config  # noqa: E402
from tests.remoting.client import RemotingClient  # noqa: E402
from tests.remoting.frames import register  # noqa: E402


def body(n: int, version: int, changed: bool = False) -> dict[str, Any]:
    topics = {f"Topic{i:06d}": topic_config(f"Topic{i:06d}") for i in range(n)}
    if changed:
        topics["Topic000000"] = topic_config("Topic000000", write=8)
    return registration(topics=topics, version=version)


async def timed_call(client: RemotingClient, doc: dict[str, Any]) -> float:
    frame = register(doc)
    started = time.perf_counter()
    answer = await client.call(frame, timeout=60)
    elapsed = time.perf_counter() - started
    assert answer.code == 0, answer.remark
    return elapsed * 1000


def script_ms(r: redis.Redis) -> float:
    """The longest registration script since the last call (SLOWLOG logs every command)."""
    # Redis logs every command a script calls too: the window holds all of a registration's
    entries = [e for e in r.slowlog_get(200_000) if e["command"].startswith(b"EVALSHA ")]
    r.slowlog_reset()
    times = [e["duration"] / 1000 for e in entries
             if SCRIPT_BY_SHA.get(e["command"].split()[1].decode(), "").startswith("register")]
    return max(times, default=0.0)


async def measure(port: int, r: redis.Redis, sizes: list[int], reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes:
        cases: dict[str, list[tuple[float, float]]] = {"first": [], "unchanged": [], "changed": []}
        for rep in range(reps):
            r.flushall()  # scripts stay loaded: FLUSHALL does not touch the script cache
            r.slowlog_reset()
            client = await RemotingClient.connect(port)
            cases["first"].append((await timed_call(client, body(n, 1)), script_ms(r)))
            cases["unchanged"].append((await timed_call(client, body(n, 1)), script_ms(r)))
            cases["changed"].append((await timed_call(client, body(n, 2 + rep, changed=True)), script_ms(r)))
            await client.close()
        out[str(n)] = {case: {"client_ms": median([c for c, _ in v]), "redis_ms": median([s for _, s in v])}
                       for case, v in cases.items()}
        print(f"{n} topics: " + ", ".join(f"{k} {v['client_ms']:.1f} ms" for k, v in out[str(n)].items()))
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", help="topic counts, comma-separated (default 100,1000,10000; quick 50)")
    p.add_argument("--reps", type=int, help="repetitions (default 5, quick 1)")
    args = p.parse_args()
    sizes = [int(x) for x in (args.sizes or ("50" if args.quick else "100,1000,10000")).split(",")]
    reps = args.reps or (1 if args.quick else 5)
    machine = machine_info()
    with redis_server() as rs:
        port, remoting = free_port(), free_port()
        env = worker_env(rs.url, RMQ_REMOTING_PORT=str(remoting))
        worker = Proc([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)],
                      env=env, ready_url=f"http://127.0.0.1:{port}/readyz")
        try:
            r = redis.Redis.from_url(rs.url)
            r.config_set("slowlog-log-slower-than", 0)
            r.config_set("slowlog-max-len", 200_000)
            results = asyncio.run(measure(remoting, r, sizes, reps))
        finally:
            worker.stop()
    summary = []
    for n, cases in results.items():
        for case, v in cases.items():
            summary.append(row(f"TCP registration, {int(n):,} topics, {case}: end to end", v["client_ms"], "ms"))
    largest = results[str(max(sizes))]
    summary.append(row("TCP registration, largest, unchanged: script", largest["unchanged"]["redis_ms"], "ms"))
    write_result(args.out, "tcp_registration", {"sizes": sizes, "reps": reps, "connection": "one per repetition"},
                 {"by_topics": results}, summary, machine)


if __name__ == "__main__":
    main()
