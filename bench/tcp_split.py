"""Bench 10d: split registration's steady state over RocketMQ's protocol, the registry and the
Java NameServer in one run.

A 5.3.3 master and slave with `enableSplitRegistration=true` and `splitRegistrationSize`
(`--part`, default 800) re-register a table of `--topics` topics (default 6,013, as a real
5.3.3 broker tried side by side with Java had) as BrokerController.registerBrokerAll sends it: the table in parts of
`--part` topics, the static topic's mapping with the last part, each part a REGISTER_BROKER
of its own in the plain JSON form (bench/broker_requests.py `json5`), the dataVersion moved
at every part (TopicConfigManager.buildSerializeWrapper) and the mappingDataVersion's
timestamp at every registration, as a real broker's do. Nothing in the table changes.

Per target and repetition: both members register `--warmup-rounds` rounds unmeasured (the
first writes the table), then `--rounds` rounds measured: the server's CPU seconds per round
of both members (the registry's worker and redis-server together; the JVM) and the wall time
of a round; for a registry, the share of parts that took its unchanged path (its
`rmq_table_changes_total{script="register_unchanged"}` against all registrations). Then the
connections close (each server removes the broker) and the next target
goes. The targets take turns repetition by repetition, each pinned to the server core, the
loader (this process) on the other; per registry target its ratio to Java in the same
repetition.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_requests as br  # noqa: E402
from bench import cores as pinning  # noqa: E402
from bench import tcp_targets  # noqa: E402
from bench.common import machine_info, parser, write_result  # noqa: E402
from bench.spread import ratio_rows  # noqa: E402


class SplitBroker:
    """One member of the group: its connection, its table's parts, its dataVersion."""

    def __init__(self, port: int, group: str, addr: str, broker_id: int, table: dict[str, Any], part: int) -> None:
        self.conn = br.Connection(port)
        self.group, self.addr, self.broker_id = group, addr, broker_id
        names = list(table)
        self.parts = [{n: table[n] for n in names[i:i + part]} for i in range(0, len(names), part)]
        self.counter = 0

    def registration_round(self) -> None:
        """Every part once, each with the next dataVersion; the static topic (the table's
        first) with the last part only, as its mappings go."""
        for i, topics in enumerate(self.parts):
            self.counter += 1
            version = br.data_version(self.counter)
            last = i == len(self.parts) - 1
            body = br.json5_body(topics, version, self.group, static=None if not last else next(iter(self.parts[0])))
            ext = {"brokerAddr": self.addr, "brokerId": str(self.broker_id), "brokerName": self.group,
                   "clusterName": "BenchCluster", "haServerAddr": self.addr.rsplit(":", 1)[0] + ":10912",
                   "compressed": "false", "bodyCrc32": str(br.crc32(body)), "enableActingMaster": "false",
                   "heartbeatTimeoutMillis": "120000"}
            code, remark, _ = self.conn.call(br.frame(br.REGISTER_BROKER, ext, body, self.conn.next_opaque(),
                                                      br.V5_3_3))
            if code != 0:
                raise RuntimeError(f"REGISTER_BROKER of {self.addr} part {i} answered {code}: {remark}")

    def close(self) -> None:
        self.conn.close()


def unchanged_and_full(target: tcp_targets.Target) -> tuple[float, float] | None:
    """A registry's registrations so far that took the unchanged path, and those that did
    not (its /metrics); None for Java."""
    if not isinstance(target, tcp_targets.Registry):
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{target.http_ports[0]}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    counts = {k: float(v) for k, v in re.findall(r'rmq_table_changes_total\{script="(register\w*)"\} ([0-9.e+]+)', text)}
    return counts.get("register_unchanged", 0.0), counts.get("register", 0.0)


def one_turn(target: tcp_targets.Target, topics: int, part: int, warmup: int, rounds: int, rep: int) -> dict[str, float]:
    table = br.topics(f"S{rep}x", topics)
    group = f"split-{rep}"
    members = [SplitBroker(target.tcp_ports[0], group, f"10.8.{rep % 250}.{i + 1}:10911", i, table, part)
               for i in (0, 1)]
    try:
        for _ in range(warmup):
            for m in members:
                m.registration_round()
        before = unchanged_and_full(target)
        cpu, started = tcp_targets.cpu_seconds(target), time.perf_counter()
        for _ in range(rounds):
            for m in members:
                m.registration_round()
        wall, used = time.perf_counter() - started, tcp_targets.cpu_seconds(target) - cpu
        after = unchanged_and_full(target)
    finally:
        for m in members:
            m.close()
    br.wait_gone(target.tcp_ports[0], [f"S{rep}x000001"])  # the server removed the closed connections' broker
    turn = {"cpu_ms_per_round": used / rounds * 1000, "wall_ms_per_round": wall / rounds * 1000}
    if before is not None and after is not None:
        unchanged, full = after[0] - before[0], after[1] - before[1]
        turn["unchanged_share"] = unchanged / (unchanged + full) if unchanged + full else 0.0
    return turn


MEASURES = {"cpu_ms_per_round": "CPU-ms", "wall_ms_per_round": "ms", "unchanged_share": "of registrations"}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    tcp_targets.add_arguments(p)
    p.add_argument("--topics", type=int, default=6_013)
    p.add_argument("--part", type=int, default=800, help="splitRegistrationSize")
    p.add_argument("--rounds", type=int, default=20, help="measured rounds per repetition (both members)")
    p.add_argument("--warmup-rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.topics, args.part, args.rounds, args.warmup_rounds, args.reps = 2_000, 400, 5, 2, 1
    cores = pinning.from_args(args)
    machine = machine_info()
    by_target: dict[str, list[dict[str, float]]] = {}
    with tcp_targets.targets(args, cores) as targets:
        for t in targets:
            by_target[t.name] = []
        for rep in range(args.reps):
            for target in tcp_targets.turns(targets, rep):
                turn = one_turn(target, args.topics, args.part, args.warmup_rounds, args.rounds, rep)
                by_target[target.name].append(turn)
                print(f"rep {rep}: {target.name} " + ", ".join(f"{k} {v:.1f}" for k, v in turn.items()), flush=True)
        described = tcp_targets.describe(targets)
    rows = []
    for measure, unit in MEASURES.items():
        samples = {name: [t[measure] for t in turns if measure in t] for name, turns in by_target.items()}
        rows += ratio_rows(f"TCP split registration, {args.topics:,} topics in parts of {args.part}, {measure}",
                           {name: v for name, v in samples.items() if v and max(v) > 0}, unit,
                           ratios=measure != "unchanged_share")
    write_result(args.out, "tcp_split", {
        "topics": args.topics, "part": args.part, "rounds": args.rounds, "warmup_rounds": args.warmup_rounds,
        "reps": args.reps, "targets": described, "cores": cores.describe(),
    }, {"by_target": by_target}, rows, machine)


if __name__ == "__main__":
    main()
