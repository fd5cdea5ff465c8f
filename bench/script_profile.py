"""Where redis-server's time per (topic, group) pair goes in a first registration.

Runs the registration scripts of each checkout (`--registry NAME=PATH`, default this one)
on a private redis-server started here, as a worker would call them (service/registry.py:
a new group's master with STAGE_MIN topics or more is staged by lua/register_stage.lua in
slices of STAGE_SLICE, then lua/register.lua publishes it), in two shapes:

- **first**: one group registering `--topics` topics all new to the tables (bench 10's
  first registration);
- **fleet**: `--groups` groups on `--fleet-topics` topics, each topic on 3-30 groups
  (bench/tcp_fleet.py's cold start, masters only: a slave writes no QueueData).

Reported per checkout and shape: Redis' own time per pair (INFO commandstats' usec of
EVALSHA, which includes the commands a script calls) and, by command kind, the calls and
the microseconds per pair of the commands the scripts call (commandstats counts those
too). The rest of a script's time is Lua itself: argument decoding, key building, tables.
Microseconds move with the machine's load; the checkouts take turns shape by shape, so
compare them within one run. With `--callgrind`, redis-server runs under valgrind's
callgrind and the instructions per pair of EVALSHA are given (stable under load).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import assign  # noqa: E402

TAG = "{rmq}"
SLICE = 300
STAGE_MIN = 500


def sources(checkout: Path) -> dict[str, str]:
    """The two scripts as the checkout's own service/store.py assembles them (its prelude,
    whole or in parts, and its change wrapper)."""
    code = ("import json; from service.store import load_sources; s = load_sources(); "
            "print(json.dumps({n: s[n] for n in ('register', 'register_stage')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, callgrind: bool, workdir: Path) -> None:
        self.port = free_port()
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(workdir), "--busy-reply-threshold", "60000"]
        if callgrind:
            self.out = workdir / f"callgrind.{self.port}"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}"] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(port=self.port, socket_timeout=600)
        for _ in range(600):
            try:
                self.r.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise SystemExit("redis-server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def register_args(name: str, addr: str, flat: bytes, staging: str) -> list[Any]:
    return ["c1", addr, name, "0", addr, "120000", '{"counter":1,"timestamp":1}', "keep", "1", flat, "[]",
            "ch", "", "", "", "[]", staging]


def register(r: redis.Redis, shas: dict[str, str], name: str, addr: str, topics: list[str]) -> None:
    flat: list[str] = []
    for t in topics:
        flat += [t, "8,8,6,0"]
    generation = ""
    if len(topics) >= STAGE_MIN:
        for i in range(0, len(flat), 2 * SLICE):
            part = json.dumps(flat[i:i + 2 * SLICE]).encode()
            res = r.evalsha(shas["register_stage"], 1, TAG + ":version", name, generation, part)
            assert res[1] == b"staged", res
            generation = res[2].decode()
    r.evalsha(shas["register"], 1, TAG + ":version", *register_args(name, addr, json.dumps(flat).encode(), generation))


def stats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    out = {}
    for k, v in r.info("commandstats").items():
        out[k.removeprefix("cmdstat_")] = (int(v["calls"]), int(v["usec"]))
    return out


def run_shape(checkout: Path, shape: list[tuple[str, list[str]]], callgrind: bool, keep: str = "") -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="script-profile-"))
    server = Server(callgrind, workdir)
    try:
        r = server.r
        shas = {n: r.script_load(s) for n, s in sources(checkout).items()}
        r.config_resetstat()
        if callgrind:
            subprocess.run(["callgrind_control", "-z", str(server.proc.pid)], check=True, capture_output=True)
        t0 = time.perf_counter()
        for i, (name, topics) in enumerate(shape):
            register(r, shas, name, f"10.0.{i // 250}.{i % 250}:10911", topics)
        wall = time.perf_counter() - t0
        if callgrind:
            subprocess.run(["callgrind_control", "-d", str(server.proc.pid)], check=True, capture_output=True)
        s = stats(r)
        mem = r.info("memory")["used_memory"]
    finally:
        server.stop()
    pairs = sum(len(t) for _, t in shape)
    result: dict[str, Any] = {"pairs": pairs, "wall_s": round(wall, 3), "used_memory_per_pair": round(mem / pairs, 1),
                              "evalsha_us_per_pair": round(s.get("evalsha", (0, 0))[1] / pairs, 3),
                              "commands": {k: {"calls_per_pair": round(c / pairs, 3), "us_per_pair": round(u / pairs, 3)}
                                           for k, (c, u) in sorted(s.items(), key=lambda kv: -kv[1][1])
                                           if k not in ("evalsha", "script|load", "config|resetstat", "ping", "info")}}
    if callgrind:
        costs = callgrind_costs(Path(f"{server.out}.1"))
        if keep:
            shutil.copy(f"{server.out}.1", keep)
        result["instructions_per_pair"] = {k: round(v / pairs) for k, v in costs.items()}
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def callgrind_costs(out: Path) -> dict[str, int]:
    """Instructions in all, and inclusive of the functions FUNCTIONS names."""
    for _ in range(300):
        if out.exists() and "totals:" in out.read_text(errors="replace")[-4000:]:
            break
        time.sleep(0.2)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
                          capture_output=True, text=True).stdout
    costs: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0][0].isdigit():
            continue
        count = int(parts[0].replace(",", ""))
        if "PROGRAM TOTALS" in line:
            costs["total"] = count
            continue
        fn = parts[-2] if parts[-1].startswith("[") else parts[-1]
        fn = fn.split(":")[-1]
        if fn in FUNCTIONS and fn not in costs:
            costs[fn] = count
    return costs


# redis-server's functions a registration's time goes to (7.0): the script as a whole, the
# Lua-to-Redis call (luaRedisGenericCommand, which includes the command it runs), the
# commands, cjson's decoding, Lua's interpreter
FUNCTIONS = ("evalGenericCommand", "luaRedisGenericCommand", "call", "hsetCommand", "saddCommand", "zaddCommand",
             "smismemberCommand", "hincrbyCommand", "json_decode", "luaV_execute", "luaS_newlstr", "createObject",
             "lookupKeyWrite", "dbAdd", "luaCreateFunction", "luaReplyToRedisReply", "redisProtocolToLuaType")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--registry", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--groups", type=int, default=60)
    p.add_argument("--fleet-topics", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--callgrind", action="store_true")
    p.add_argument("--keep", default="", help="with --callgrind: copy each profile to KEEP.<shape>.<checkout>")
    args = p.parse_args()
    checkouts = dict(r.split("=", 1) for r in args.registry) or {"this": str(Path(__file__).resolve().parent.parent)}
    first = [("group-first", [f"Topic{i:06d}" for i in range(args.topics)])]
    by_group = assign(args.groups, args.fleet_topics, random.Random(7))
    fleet = [(f"group-{g}", names) for g, names in by_group.items()]
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    for rep in range(args.reps):
        for shape_name, shape in (("first", first), ("fleet", fleet)):
            for name, path in checkouts.items():
                keep = f"{args.keep}.{shape_name}.{name}" if args.keep else ""
                res = run_shape(Path(path), shape, args.callgrind, keep)
                results.setdefault(shape_name, {}).setdefault(name, []).append(res)
    results["load_average_end"] = os.getloadavg()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
