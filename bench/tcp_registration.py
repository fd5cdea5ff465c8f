"""Bench 10: REGISTER_BROKER (103) over RocketMQ's protocol, the registry and the Java NameServer in one run.

A master broker with 10,000 topics (`--sizes`) registers over one TCP connection, as a
broker keeps one to its NameServer, its requests encoded as a Java broker encodes them
(bench/broker_requests.py: `json` of a 4.9.8 broker, `zlib` of a 4.9.8 broker with
compressedRegister, `zlib5` of a 5.x broker with compressedRegister, which no Java
NameServer reads (the registry alone is measured with it),
`json5` of a 5.x broker with a static topic, whose re-registration moves its
mappingDataVersion). Four cases on that connection, client-observed (request written to answer
read): **first** (a new broker group whose topics are all new), **unchanged** (the same
request again: the 30 s re-registration), **changed** (one topic's queue count changed,
new dataVersion: what a broker sends when an operator updates a topic) and **added** (one
topic added, new dataVersion: an operator creates a topic). Then the connection closes,
which removes the broker on both servers, and the next repetition registers another group
with other topic names (once the server has removed the previous one: its routes are gone).

The targets (bench/tcp_targets.py: the registry, other checkouts with `--registry`, the
Java NameServer with `--java-namesrv-home`) take turns repetition by repetition, each
pinned to the server core, the loader (this process) on the other core. Reported per
target: the median and the range over repetitions; per registry target and repetition its
ratio to Java in the same repetition (median, range); for the registry the longest script
in Redis during each case (SLOWLOG above 1 ms; no row where none took longer).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_requests as br  # noqa: E402
from bench import cores as pinning  # noqa: E402
from bench import tcp_targets  # noqa: E402
from bench.common import machine_info, parser, write_result  # noqa: E402
from bench.spread import ratio_rows, spread  # noqa: E402

CASES = ("first", "unchanged", "changed", "added")


def longest_script_ms(target: tcp_targets.Target) -> float | None:
    """The longest script since the last call (SLOWLOG keeps those above 1 ms); None for Java."""
    if not isinstance(target, tcp_targets.Registry):
        return None
    r = target.client()
    entries = r.slowlog_get(1000)
    r.slowlog_reset()
    return max((e["duration"] / 1000 for e in entries if e["command"][:4].upper() == b"EVAL"), default=0.0)


def one_turn(target: tcp_targets.Target, form: str, n: int, rep: int) -> dict[str, tuple[float, float | None]]:
    """A new broker group of n topics: first, unchanged, changed, added; its connection closed after."""
    prefix = f"T{form}{n}r{rep}x"
    broker, addr = f"bench-{form}-{n}-{rep}", f"10.9.{rep % 250}.1:10911"
    table = br.topics(prefix, n)
    changed = dict(table, **{f"{prefix}000000": br.topic_config(f"{prefix}000000", queues=16)})
    added = dict(changed, **{f"{prefix}added": br.topic_config(f"{prefix}added")})
    steps = [("first", table, br.data_version(1)), ("changed", changed, br.data_version(2)),
             ("added", added, br.data_version(3))]
    steps.insert(1, ("unchanged", table, steps[0][2]))
    longest_script_ms(target)  # empties the SLOWLOG
    out: dict[str, tuple[float, float | None]] = {}
    conn = br.Connection(target.tcp_ports[0])
    try:
        for case, topics, version in steps:
            ms = br.register(conn, form, broker, addr, 0, topics, version)
            out[case] = (ms, longest_script_ms(target))
    finally:
        conn.close()
    br.wait_gone(target.tcp_ports[0], [f"{prefix}000001"])  # the server removed the closed connection's broker
    return out


def measure(targets: list[tcp_targets.Target], forms: list[str], sizes: list[int], reps: int,
            warmup: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for form in forms:
        takers = [t for t in targets if t.name != "java" or br.JAVA_READS[form]]
        for n in sizes:
            data = {case: {t.name: {"client_ms": [], "script_ms": []} for t in takers} for case in CASES}
            for rep in range(-warmup, reps):
                for target in tcp_targets.turns(takers, rep):
                    turn = one_turn(target, form, n, rep)
                    if rep < 0:
                        continue  # warm-up: JIT, caches, connections
                    for case, (ms, script) in turn.items():
                        data[case][target.name]["client_ms"].append(round(ms, 3))
                        if script is not None:
                            data[case][target.name]["script_ms"].append(round(script, 3))
            results.setdefault(form, {})[str(n)] = data
            for case in CASES:
                print(f"{form} {n:,} topics, {case}: " + ", ".join(
                    f"{name} {spread(v['client_ms'])['median']:.1f} ms" for name, v in data[case].items()))
    return results


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for form, by_size in results.items():
        for n, data in by_size.items():
            for case in CASES:
                what = f"TCP registration {int(n):,} topics, {form}, {case}"
                samples = {name: v["client_ms"] for name, v in data[case].items()}
                rows += ratio_rows(what, samples, "ms")
                # no row where no script took over 1 ms (SLOWLOG's threshold here); Java has no Redis
                rows += ratio_rows(f"{what}, longest script", {
                    name: v["script_ms"] for name, v in data[case].items() if v["script_ms"] and max(v["script_ms"]) > 0},
                    "ms", ratios=False)
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    tcp_targets.add_arguments(p)
    p.add_argument("--sizes", help="topic counts, comma-separated (default 10000; quick 50)")
    p.add_argument("--forms", default=",".join(br.FORMS), help=f"request forms (default {','.join(br.FORMS)})")
    p.add_argument("--reps", type=int, help="measured repetitions per target (default 5, quick 1)")
    p.add_argument("--warmup-reps", type=int, help="unmeasured repetitions first (default 2, quick 0)")
    args = p.parse_args()
    sizes = [int(x) for x in (args.sizes or ("50" if args.quick else "10000")).split(",")]
    forms = [f for f in args.forms.split(",") if f]
    unknown = [f for f in forms if f not in br.FORMS]
    if unknown:
        raise SystemExit(f"--forms {args.forms}: unknown {', '.join(unknown)} (one of {', '.join(br.FORMS)})")
    reps = args.reps or (1 if args.quick else 5)
    warmup = args.warmup_reps if args.warmup_reps is not None else (0 if args.quick else 2)
    cores = pinning.from_args(args)
    machine = machine_info()
    with tcp_targets.targets(args, cores) as targets:
        for t in targets:
            if isinstance(t, tcp_targets.Registry):
                t.client().config_set("slowlog-log-slower-than", 1000)
        described = tcp_targets.describe(targets)
        results = measure(targets, forms, sizes, reps, warmup)
    write_result(args.out, "tcp_registration", {
        "sizes": sizes, "forms": {f: br.FORM_NOTES[f] for f in forms}, "reps": reps, "warmup_reps": warmup,
        "cases": list(CASES), "targets": described, "cores": cores.describe(),
        "java_opts": args.java_opts if "java" in described else None,
        "connection": "one per repetition and target; closed after the four cases",
    }, {"by_form": results}, summary_rows(results), machine)


if __name__ == "__main__":
    main()
