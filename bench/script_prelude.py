"""Bench: what the Lua prelude costs a call, as each checkout assembles its scripts.

Every call of a script runs its whole source's top level: the prelude's functions are
defined again each time, used or not. For the small, frequent scripts (heartbeat, the
unchanged re-registration, a route read, a KV put) this measures, on an empty Redis (so
each call changes nothing and the prelude is a large part of it), the time in Redis per
EVALSHA (INFO commandstats, usec_per_call), the SCRIPT LOAD time of every script and the
script cache's memory (used_memory_scripts), for this checkout and, with --against, another
(e.g. the main branch's, whose prelude is one file prepended to every script).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.common import ROOT, machine_info, parser, redis_server, row, write_result  # noqa: E402

# scripts called often, with arguments that find nothing to change
CALLS: dict[str, list[str | int]] = {
    "heartbeat": ["10.0.0.1:10911", "broker-a", 0, ""],
    "register_unchanged": ["no such digest", "", ""],
    "route": ["TopicTest", "0", "0"],
    "kv_delete": ["ns", "key"],
}


def sources(root: Path) -> dict[str, str]:
    """The scripts as the checkout `root` assembles them (its own service/store.py)."""
    code = "import json; from service.store import load_sources; print(json.dumps(load_sources()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env={"PYTHONPATH": str(root)},
                         check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def measure(r: redis.Redis, scripts: dict[str, str], calls: int) -> dict[str, Any]:
    r.script_flush()
    started = time.perf_counter()
    shas = {name: r.script_load(src) for name, src in scripts.items()}
    out: dict[str, Any] = {"load_all_ms": (time.perf_counter() - started) * 1000,
                           "scripts_memory_bytes": r.info("memory")["used_memory_scripts"],
                           "source_chars": {name: len(scripts[name]) for name in CALLS}}
    for name, args in CALLS.items():
        for _ in range(200):  # warm
            r.evalsha(shas[name], 1, "{rmq}:version", *args)
        r.config_resetstat()
        for _ in range(calls):
            r.evalsha(shas[name], 1, "{rmq}:version", *args)
        out[f"{name}_us"] = float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--against", type=Path, help="another checkout to measure the same way (e.g. main's)")
    p.add_argument("--calls", type=int, default=20_000, help="calls per script (quick: 500)")
    args = p.parse_args()
    calls = 500 if args.quick else args.calls
    roots = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    results: dict[str, Any] = {}
    with redis_server() as server:
        r = redis.Redis.from_url(server.url)
        for label, root in roots.items():
            results[label] = measure(r, sources(root), calls)
    summary = [row(f"{label}: {name} in Redis", res[f"{name}_us"], "us/call")
               for label, res in results.items() for name in CALLS]
    summary += [row(f"{label}: script cache", res["scripts_memory_bytes"] / 1024, "KiB") for label, res in results.items()]
    summary += [row(f"{label}: SCRIPT LOAD of every script", res["load_all_ms"], "ms") for label, res in results.items()]
    write_result(args.out, "script_prelude", {"calls": calls, "roots": {k: str(v) for k, v in roots.items()}},
                 results, summary, machine_info())


if __name__ == "__main__":
    main()
