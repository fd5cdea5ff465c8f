"""Bench 10c: a whole fleet over RocketMQ's protocol, the registry and the Java NameServer
in one run: its cold start, and its steady state.

The fleet is bench/fleet.py's shape (`--groups` master + slave groups, `--topics` topics on
3-30 groups each, one more group of `--big` topics), every member a broker with its own
connection, its requests encoded as a Java broker encodes them (bench/broker_requests.py:
`json` a 4.9.8 broker, `json5` a 5.3.3 broker with a static topic, whose
mappingDataVersion moves at each registration as a real one's does).

- **cold start**: every member registers at once (at most `--in-flight` registrations
  outstanding, as a fleet restarting behind one NameServer); the wall time until the last
  answer, and the server's CPU seconds (the registry's worker and redis-server together;
  the JVM).
- **steady state**: `--steady` periodic re-registrations, members in turn (nothing in
  their tables changed; a 5.x body's mappingDataVersion has); the server's CPU seconds per
  1,000 of them, and the wall time.

- **close storm** (`--storm`, after the steady state): a live group (one more master, its
  own connection, `LIVE_TOPICS` of the fleet's topics) registers, a reader reads its
  routes one at a time (they change as the fleet's groups go, so the registry's cache
  cannot answer them all), and every fleet connection closes at once (a balancer in front
  of 9876 restarted, a zone lost): the time until every closed member's routes are gone
  (one topic of each fleet group polled until TOPIC_NOT_EXIST), and the live reads
  meanwhile: failures (an error code, or no answer within 5 s), p99, max; on the
  registry, its longest script then (SLOWLOG).

Then the connections close (each server removes the fleet) and the next target goes. The
targets take turns repetition by repetition, each pinned to the server core, the loader
(this process) on the other; per repetition, each registry target's ratio to Java.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_requests as br  # noqa: E402
from bench import cores as pinning  # noqa: E402
from bench import tcp_targets  # noqa: E402
from bench.common import machine_info, parser, write_result  # noqa: E402
from bench.fleet import assign  # noqa: E402
from bench.spread import ratio_rows  # noqa: E402

_LEN = struct.Struct(">i")


def members(groups: int, topics: int, big: int, seed: int = 7) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(group, address, brokerId, topic table) of every member."""
    by_group = assign(groups, topics, random.Random(seed))
    out = []
    for g, names in by_group.items():
        table = {n: br.topic_config(n) for n in names}
        for broker_id in (0, 1):
            out.append((f"group-{g}", f"10.{g // 250}.{g % 250}.{broker_id + 1}:10911", broker_id, table))
    big_table = {f"Big{i}": br.topic_config(f"Big{i}") for i in range(big)}
    for broker_id in (0, 1):
        out.append(("group-big", f"10.99.0.{broker_id + 1}:10911", broker_id, big_table))
    return out


async def answer_header(reader: asyncio.StreamReader) -> bytes:
    """The header of the next answer frame (its body read and dropped)."""
    (length,) = _LEN.unpack(await reader.readexactly(4))
    payload = await reader.readexactly(length)
    header_len = _LEN.unpack_from(payload)[0] & 0xFFFFFF
    return payload[4:4 + header_len]


class Member:
    def __init__(self, group: str, addr: str, broker_id: int, table: dict[str, Any]) -> None:
        self.group, self.addr, self.broker_id, self.table = group, addr, broker_id, table
        self.version = br.data_version(1)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.opaque = 0
        self.turn = asyncio.Lock()  # a broker sends its next registration after the last answer

    def frame(self, form: str) -> bytes:
        self.opaque += 1
        return br.register_frame(form, self.group, self.addr, self.broker_id, self.table, self.version, self.opaque)

    async def connect(self, port: int) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)

    async def call(self, data: bytes) -> bool:
        """True when the registration was taken, False when refused as busy (SYSTEM_BUSY)."""
        async with self.turn:
            return await self._call(data)

    async def _call(self, data: bytes) -> bool:
        assert self.reader is not None and self.writer is not None
        self.writer.write(data)
        await self.writer.drain()
        header = await answer_header(self.reader)
        if b'"code":2,' in header:
            return False
        if b'"code":0,' not in header:
            raise RuntimeError(f"REGISTER_BROKER of {self.addr} refused: {header[:300]!r}")
        return True

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _run(target: tcp_targets.Target, fleet: list[Member], form: str, in_flight: int,
               steady: int, storm: bool) -> dict[str, float]:
    port = target.tcp_ports[0]
    try:
        for m in fleet:
            await m.connect(port)
        measured = await _measure(target, fleet, form, in_flight, steady)
        if storm:
            measured.update(await _close_storm(target, fleet, form))
        return measured
    finally:
        for m in fleet:
            m.close()
        await asyncio.sleep(0.1)


async def _measure(target: tcp_targets.Target, fleet: list[Member], form: str, in_flight: int,
                   steady: int) -> dict[str, float]:
    frames = [m.frame(form) for m in fleet]  # made before the clock starts
    slots = asyncio.Semaphore(in_flight)
    busy = 0

    async def one(m: Member, data: bytes) -> None:
        nonlocal busy
        async with slots:
            # refused as busy: a broker registers again on its next round (30 s); here a
            # second later, and counted
            while not await m.call(data):
                busy += 1
                await asyncio.sleep(1.0)

    cpu, started = tcp_targets.cpu_seconds(target), time.perf_counter()
    await asyncio.gather(*(one(m, f) for m, f in zip(fleet, frames)))
    cold = {"cold_start_s": time.perf_counter() - started, "cold_start_cpu_s": tcp_targets.cpu_seconds(target) - cpu,
            "cold_start_busy": busy}
    if not steady:
        return cold
    # the steady state: members in turn, a broker's 30 s re-registration each (one at a
    # time per member, `in_flight` members at once)
    order = [fleet[i % len(fleet)] for i in range(steady)]
    frames = [m.frame(form) for m in order]
    cpu, started = tcp_targets.cpu_seconds(target), time.perf_counter()
    await asyncio.gather(*(one(m, f) for m, f in zip(order, frames)))
    wall, used = time.perf_counter() - started, tcp_targets.cpu_seconds(target) - cpu
    return {**cold, "steady_s": wall, "steady_cpu_s_per_1000": used / steady * 1000}


# The close storm's live group: this many of the fleet's topics (T0, T1, ...), whose routes
# change as the fleet's groups go.
LIVE_TOPICS = 50
READ_LIMIT_S = 5.0  # a live read not answered within it counts as failed
STORM_LIMIT_S = 240.0  # past it the storm's routes are reported as not gone


class RouteClient:
    """One connection reading routes one at a time: (code, seconds) of each read."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.opaque = 0
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def read(self, topic: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.opaque += 1
        self.writer.write(br.route_frame(topic, self.opaque))
        try:
            header = await asyncio.wait_for(answer_header(self.reader), READ_LIMIT_S)
        except BaseException:
            self.close()  # an answer may still come: a new connection for the next read
            raise
        found = re.search(rb'"code":(\d+)', header)
        return int(found.group(1)) if found else -1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _read_live(port: int, topics: list[str], counting: asyncio.Event, stop: asyncio.Event) -> dict[str, float]:
    """Reads `topics` in turn until `stop`; what is read once `counting` is set is counted."""
    client = RouteClient(port)
    latencies: list[float] = []
    failures = 0
    try:
        for i in itertools.count():
            if stop.is_set():
                break
            if not counting.is_set():
                await client.read(topics[i % len(topics)])  # warming up: its routes cached
                continue
            started = time.perf_counter()
            try:
                ok = await client.read(topics[i % len(topics)]) == 0
            except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                ok = False
            latencies.append((time.perf_counter() - started) * 1000)
            failures += not ok
    finally:
        client.close()
    latencies.sort()
    return {"storm_live_reads": len(latencies), "storm_live_read_failures": failures,
            "storm_live_read_p99_ms": latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
            "storm_live_read_max_ms": latencies[-1] if latencies else 0.0}


async def _close_storm(target: tcp_targets.Target, fleet: list[Member], form: str) -> dict[str, float]:
    port = target.tcp_ports[0]
    shared = [f"T{i}" for i in range(LIVE_TOPICS)]
    live = Member("group-live", "10.98.0.1:10911", 0, {t: br.topic_config(t) for t in shared})
    await live.connect(port)
    while not await live.call(live.frame(form)):
        await asyncio.sleep(1.0)
    # one topic of each fleet group that the live group does not serve: gone (TOPIC_NOT_EXIST)
    # only once every group serving it is
    watched = {next(t for t in m.table if t not in shared) for m in fleet if m.broker_id == 0}
    slowlog = target.client() if isinstance(target, tcp_targets.Registry) else None
    if slowlog is not None:
        slowlog.config_set("slowlog-log-slower-than", 1000)
        slowlog.config_set("slowlog-max-len", 100_000)
        slowlog.slowlog_reset()
    counting, stop = asyncio.Event(), asyncio.Event()
    reads = asyncio.create_task(_read_live(port, shared, counting, stop))
    await asyncio.sleep(0.5)  # the reader under way, its first reads cached
    counting.set()
    started = time.perf_counter()
    for m in fleet:
        m.close()
    poll = RouteClient(port)
    gone_s: float | None = None
    try:
        while time.perf_counter() - started < STORM_LIMIT_S:
            for topic in sorted(watched):
                try:
                    if await poll.read(topic) == br.TOPIC_NOT_EXIST:
                        watched.discard(topic)
                except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                    pass
            if not watched:
                gone_s = time.perf_counter() - started
                break
            await asyncio.sleep(0.05)
    finally:
        poll.close()
        stop.set()
        read_stats = await reads
        live.close()
    out = {"storm_gone_s": gone_s if gone_s is not None else float("nan"), **read_stats}
    if gone_s is None:
        print(f"  {len(watched)} closed groups' routes still there {STORM_LIMIT_S:.0f} s after the storm")
    if slowlog is not None:
        assert isinstance(target, tcp_targets.Registry)
        names = script_names(target.root)
        scripts = []  # (µs, script name) of every script over 1 ms
        for e in slowlog.slowlog_get(100_000):
            words = (e["command"].decode() if isinstance(e["command"], bytes) else e["command"]).split(" ", 2)
            if words[0].upper() == "EVALSHA":
                scripts.append((e["duration"], names.get(words[1], words[1][:12]) if len(words) > 1 else "?"))
        longest = max(scripts, default=(0, ""))
        out["storm_longest_script_ms"] = longest[0] / 1000
        out["storm_longest_script"] = longest[1]
        out["storm_scripts_over_20ms"] = sum(d > 20_000 for d, _ in scripts)
        slowlog.config_set("slowlog-log-slower-than", 10_000)
        slowlog.close()
    return out


def script_names(root: Path) -> dict[str, str]:
    """SHA -> name of the scripts of the registry checkout `root`, as its own store
    assembles them (service/store.py load_sources of that checkout)."""
    code = ("import hashlib, json; from service.store import load_sources; print(json.dumps("
            "{hashlib.sha1(s.encode()).hexdigest(): n for n, s in load_sources().items()}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def one_turn(target: tcp_targets.Target, shape: list[tuple[str, str, int, dict[str, Any]]], form: str,
             in_flight: int, steady: int, storm: bool) -> dict[str, float]:
    fleet = [Member(*m) for m in shape]
    try:
        return asyncio.run(_run(target, fleet, form, in_flight, steady, storm))
    finally:
        br.wait_gone(target.tcp_ports[0], ["T0", "Big0"], limit_s=120)  # the server removed the fleet


# each measure with its unit
MEASURES = {"cold_start_s": "s", "cold_start_cpu_s": "CPU-s", "steady_cpu_s_per_1000": "CPU-s per 1,000",
            "steady_s": "s", "cold_start_busy": "answers", "storm_gone_s": "s", "storm_live_read_failures": "reads",
            "storm_live_read_p99_ms": "ms", "storm_live_read_max_ms": "ms", "storm_live_reads": "reads",
            "storm_longest_script_ms": "ms", "storm_scripts_over_20ms": "scripts"}


# counts that are 0 when all goes well: a target's row only when it counted some (the
# result's turns hold every figure)
COUNTS = {"cold_start_busy", "storm_live_read_failures", "storm_scripts_over_20ms"}


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for form, by_target in results.items():
        for measure, unit in MEASURES.items():
            samples = {name: [t[measure] for t in turns if measure in t] for name, turns in by_target.items()}
            if measure in COUNTS:
                samples = {name: values for name, values in samples.items() if any(values)}
            if any(samples.values()):
                rows += ratio_rows(f"TCP fleet, {form}, {measure}", samples, unit, ratios=measure not in COUNTS)
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    tcp_targets.add_arguments(p)
    p.add_argument("--groups", type=int, default=300)
    p.add_argument("--topics", type=int, default=100_000)
    p.add_argument("--big", type=int, default=10_000)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--steady", type=int, default=3_000, help="re-registrations measured in the steady state (0: none)")
    p.add_argument("--storm", action="store_true", help="then the close storm: every member's connection closes at once")
    p.add_argument("--forms", default="json,json5")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.groups, args.topics, args.big, args.steady, args.reps = 10, 500, 200, 100, 1
    forms = [f for f in args.forms.split(",") if f]
    cores = pinning.from_args(args)
    shape = members(args.groups, args.topics, args.big)
    pairs = sum(len(m[3]) for m in shape if m[2] == 0)
    machine = machine_info()
    results: dict[str, Any] = {}
    with tcp_targets.targets(args, cores) as targets:
        for form in forms:
            by_target: dict[str, list[dict[str, float]]] = {t.name: [] for t in targets}
            for rep in range(args.reps):
                for target in tcp_targets.turns(targets, rep):
                    turn = one_turn(target, shape, form, args.in_flight, args.steady, args.storm)
                    by_target[target.name].append(turn)
                    print(f"{form} rep {rep}: {target.name} " + ", ".join(f"{k} {v:.2f}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in turn.items()),
                          flush=True)
            results[form] = by_target
        described = tcp_targets.describe(targets)
    write_result(args.out, "tcp_fleet", {
        "groups": args.groups, "topics": args.topics, "big": args.big, "members": len(shape), "pairs": pairs,
        "in_flight": args.in_flight, "steady": args.steady, "storm": args.storm, "live_topics": LIVE_TOPICS,
        "forms": {f: br.FORM_NOTES[f] for f in forms},
        "reps": args.reps, "targets": described, "cores": cores.describe(),
    }, {"by_form": results}, summary_rows(results), machine)


if __name__ == "__main__":
    main()
