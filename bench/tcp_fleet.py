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

Then the connections close (each server removes the fleet) and the next target goes. The
targets take turns repetition by repetition, each pinned to the server core, the loader
(this process) on the other; per repetition, each registry target's ratio to Java.
"""

from __future__ import annotations

import asyncio
import random
import struct
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

    async def call(self, data: bytes) -> None:
        async with self.turn:
            await self._call(data)

    async def _call(self, data: bytes) -> None:
        assert self.reader is not None and self.writer is not None
        self.writer.write(data)
        await self.writer.drain()
        (length,) = _LEN.unpack(await self.reader.readexactly(4))
        payload = await self.reader.readexactly(length)
        header_len = _LEN.unpack_from(payload)[0] & 0xFFFFFF
        if b'"code":0,' not in payload[4:4 + header_len]:
            raise RuntimeError(f"REGISTER_BROKER of {self.addr} refused: {payload[4:4 + header_len][:300]!r}")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _run(target: tcp_targets.Target, fleet: list[Member], form: str, in_flight: int,
               steady: int) -> dict[str, float]:
    port = target.tcp_ports[0]
    try:
        for m in fleet:
            await m.connect(port)
        return await _measure(target, fleet, form, in_flight, steady)
    finally:
        for m in fleet:
            m.close()
        await asyncio.sleep(0.1)


async def _measure(target: tcp_targets.Target, fleet: list[Member], form: str, in_flight: int,
                   steady: int) -> dict[str, float]:
    frames = [m.frame(form) for m in fleet]  # made before the clock starts
    slots = asyncio.Semaphore(in_flight)

    async def one(m: Member, data: bytes) -> None:
        async with slots:
            await m.call(data)

    cpu, started = tcp_targets.cpu_seconds(target), time.perf_counter()
    await asyncio.gather(*(one(m, f) for m, f in zip(fleet, frames)))
    cold = {"cold_start_s": time.perf_counter() - started, "cold_start_cpu_s": tcp_targets.cpu_seconds(target) - cpu}
    # the steady state: members in turn, a broker's 30 s re-registration each (one at a
    # time per member, `in_flight` members at once)
    order = [fleet[i % len(fleet)] for i in range(steady)]
    frames = [m.frame(form) for m in order]
    cpu, started = tcp_targets.cpu_seconds(target), time.perf_counter()
    await asyncio.gather(*(one(m, f) for m, f in zip(order, frames)))
    wall, used = time.perf_counter() - started, tcp_targets.cpu_seconds(target) - cpu
    return {**cold, "steady_s": wall, "steady_cpu_s_per_1000": used / steady * 1000}


def one_turn(target: tcp_targets.Target, shape: list[tuple[str, str, int, dict[str, Any]]], form: str,
             in_flight: int, steady: int) -> dict[str, float]:
    fleet = [Member(*m) for m in shape]
    try:
        return asyncio.run(_run(target, fleet, form, in_flight, steady))
    finally:
        br.wait_gone(target.tcp_ports[0], ["T0", "Big0"], limit_s=120)  # the server removed the fleet


# each measure with its unit
MEASURES = {"cold_start_s": "s", "cold_start_cpu_s": "CPU-s", "steady_cpu_s_per_1000": "CPU-s per 1,000",
            "steady_s": "s"}


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for form, by_target in results.items():
        for measure, unit in MEASURES.items():
            rows += ratio_rows(f"TCP fleet, {form}, {measure}", {name: [t[measure] for t in turns]
                                                                  for name, turns in by_target.items()}, unit)
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    tcp_targets.add_arguments(p)
    p.add_argument("--groups", type=int, default=300)
    p.add_argument("--topics", type=int, default=100_000)
    p.add_argument("--big", type=int, default=10_000)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--steady", type=int, default=3_000, help="re-registrations measured in the steady state")
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
                    turn = one_turn(target, shape, form, args.in_flight, args.steady)
                    by_target[target.name].append(turn)
                    print(f"{form} rep {rep}: {target.name} " + ", ".join(f"{k} {v:.2f}" for k, v in turn.items()),
                          flush=True)
            results[form] = by_target
        described = tcp_targets.describe(targets)
    write_result(args.out, "tcp_fleet", {
        "groups": args.groups, "topics": args.topics, "big": args.big, "members": len(shape), "pairs": pairs,
        "in_flight": args.in_flight, "steady": args.steady, "forms": {f: br.FORM_NOTES[f] for f in forms},
        "reps": args.reps, "targets": described, "cores": cores.describe(),
    }, {"by_form": results}, summary_rows(results), machine)


if __name__ == "__main__":
    main()
