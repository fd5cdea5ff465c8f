"""Bench: route reads (105) while big brokers register, the registry and the Java NameServer in one run.

Each target holds a resident broker group of 1,000 topics (its connection open all run).
In each repetition a reader process opens its own connection, reads each resident topic's
route once (the window measures cached reads: a route the worker has not read yet runs
route.lua, queued in Redis behind the registrations' scripts, while Java answers every read
from memory; the misses in the window are reported), then reads routes of random
resident topics, one request at a time, as fast as answers come, while this process streams
`--brokers` new master brokers (default 5) of `--topics` topics each (default 10,000; the
JSON form of a 4.9.8 broker, or with `--form zlib` its compressedRegister form): a first
registration, then a changed one (one topic's queue count, new dataVersion), each on its
own connection, back to back. The frames are built
before the reader starts, so the loader core only sends and reads. The reader's latencies
(request written to answer read) from the stream's first byte to its last answer give
p50 / p99 / p99.9 / max (with fewer than 1,000 reads in the window, p99.9 is the slowest
read: the row "reads in the window" says how many). For the registry the reader is on the
**same** worker as the registrations and, in a separate turn, on **another** worker of the
same Redis (two workers, both on the server core); the Java NameServer is one process
(same). Targets take turns
repetition by repetition (bench/tcp_targets.py), pinned as in the other TCP benches;
reported: medians and ranges over repetitions, each registry's p99.9 over Java's in the
same repetition, and the registry's longest script in Redis during the stream (SLOWLOG).
"""

from __future__ import annotations

import multiprocessing as mp
import random
import re
import sys
import time
import urllib.request
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_requests as br  # noqa: E402
from bench import cores as pinning  # noqa: E402
from bench import tcp_targets  # noqa: E402
from bench.common import machine_info, parser, pct, write_result  # noqa: E402
from bench.spread import ratio_rows, spread  # noqa: E402
from bench.tcp_registration import longest_script_ms  # noqa: E402

RESIDENT = "resident"


def _reader_main(port: int, topics: list[str], out: Any) -> None:
    """Reads until told to stop; sends back the latencies (µs) of the window between "mark" and "stop"."""
    conn = br.Connection(port)
    rng = random.Random(7)
    latencies = array("d")
    errors = 0
    recording = False
    for topic in topics:  # every resident route once: the window measures cached reads, not first reads
        conn.timed(br.route_frame(topic, conn.next_opaque()))
    out.send("ready")
    while True:
        if out.poll():
            msg = out.recv()
            if msg == "stop":
                break
            recording = msg == "mark"
        ms, code, _ = conn.timed(br.route_frame(rng.choice(topics), conn.next_opaque()))
        if recording:
            latencies.append(ms * 1000)
            errors += code != 0
    conn.close()
    out.send({"latencies_us": latencies.tobytes(), "errors": errors})


def stream_frames(rep: int, brokers: int, topics: int, form: str = "json") -> list[list[bytes]]:
    """Per broker: its first and its changed registration, encoded ahead of time."""
    out = []
    for k in range(brokers):
        prefix = f"S{rep}b{k}x"
        table = br.topics(prefix, topics)
        changed = dict(table, **{f"{prefix}000000": br.topic_config(f"{prefix}000000", queues=16)})
        name, addr = f"stream-{rep}-{k}", f"10.8.{rep % 250}.{k + 1}:10911"
        out.append([br.register_frame(form, name, addr, 0, t, br.data_version(v), v)
                    for v, t in ((1, table), (2, changed))])
    return out


def cache_counts(http_port: int | None) -> dict[str, float]:
    """The reader's worker's cache hits and misses so far (none for Java)."""
    if http_port is None:
        return {}
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {name: float(value) for name, value in re.findall(r"^rmq_cache_(hits|misses)_total ([0-9.e+]+)$", text, re.M)}


def one_turn(target: tcp_targets.Target, read_port: int, frames: list[list[bytes]], resident: list[str],
             rep: int, http_port: int | None = None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    reader = ctx.Process(target=_reader_main, args=(read_port, resident, theirs))
    reader.start()
    try:
        if not mine.poll(60) or mine.recv() != "ready":
            raise RuntimeError("the reader did not start")
        time.sleep(0.3)
        longest_script_ms(target)  # empties the SLOWLOG
        conns = []
        register_ms = []
        counted = cache_counts(http_port)
        mine.send("mark")
        started = time.perf_counter()
        for first, changed in frames:
            conn = br.Connection(target.tcp_ports[0])
            conns.append(conn)
            for frame in (first, changed):
                ms, code, remark = conn.timed(frame)
                if code != 0:
                    raise RuntimeError(f"{target.name}: a stream registration answered {code}: {remark}")
                register_ms.append(ms)
        stream_s = time.perf_counter() - started
        mine.send("stop")
        cache = {k: v - counted.get(k, 0) for k, v in cache_counts(http_port).items()}
        if not mine.poll(60):
            raise RuntimeError("the reader gave no result")
        result = mine.recv()
        script = longest_script_ms(target)
        for conn in conns:
            conn.close()
    finally:
        reader.join(30)
        if reader.is_alive():
            reader.kill()
    # the stream's brokers are removed (connections closed) before the next turn
    br.wait_gone(target.tcp_ports[0], [f"S{rep}b{k}x000001" for k in range(len(frames))])
    lat = list(array("d", result["latencies_us"]))
    return {"reads": len(lat), "errors": result["errors"], "stream_s": round(stream_s, 3),
            "p50_ms": pct(lat, 50) / 1000, "p99_ms": pct(lat, 99) / 1000, "p999_ms": pct(lat, 99.9) / 1000,
            "max_ms": max(lat) / 1000, "register_ms": [round(x, 2) for x in register_ms],
            "longest_script_ms": script, "cache_misses": cache.get("misses"), "cache_hits": cache.get("hits")}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    tcp_targets.add_arguments(p)
    p.add_argument("--brokers", type=int, help="brokers registering per repetition (default 5, quick 2)")
    p.add_argument("--topics", type=int, help="topics per streaming broker (default 10000, quick 200)")
    p.add_argument("--reps", type=int, help="repetitions per target (default 5, quick 1)")
    p.add_argument("--form", choices=("json", "zlib"), default="json",
                   help="the streaming brokers' body: json (default) or zlib (4.9.8 with compressedRegister=true)")
    args = p.parse_args()
    brokers = args.brokers or (2 if args.quick else 5)
    topics = args.topics or (200 if args.quick else 10_000)
    reps = args.reps or (1 if args.quick else 5)
    cores = pinning.from_args(args)
    machine = machine_info()
    resident = [f"R{i:06d}" for i in range(1000)]
    runs: dict[str, list[dict[str, Any]]] = {}
    with tcp_targets.targets(args, cores, workers=2) as targets:
        described = tcp_targets.describe(targets)
        seats = []  # (label, target, port the reader uses)
        for t in targets:
            if isinstance(t, tcp_targets.Registry):
                t.client().config_set("slowlog-log-slower-than", 1000)
                seats += [(f"{t.name} same worker", t, t.tcp_ports[0], t.http_ports[0]),
                          (f"{t.name} other worker", t, t.tcp_ports[1], t.http_ports[1])]
            else:
                seats.append((t.name, t, t.tcp_ports[0], None))
        holders = {}
        for t in targets:
            holders[t.name] = br.Connection(t.tcp_ports[0])
        table = {name: br.topic_config(name, queues=4) for name in resident}
        version = br.data_version(1)
        try:
            for rep in range(reps):
                frames = stream_frames(rep, brokers, topics, args.form)
                k = rep % len(seats)
                for label, target, port, http_port in seats[k:] + seats[:k]:
                    br.register_retrying(holders[target.name], "json", RESIDENT, "10.7.0.1:10911", 0, table, version)
                    run = one_turn(target, port, frames, resident, rep, http_port)
                    runs.setdefault(label, []).append(run)
                    print(f"rep {rep + 1}, {label}: {run['reads']} reads, p99.9 {run['p999_ms']:.1f} ms, "
                          f"max {run['max_ms']:.1f} ms, stream {run['stream_s']:.2f} s"
                          + (f", cache misses {run['cache_misses']:.0f}" if run["cache_misses"] is not None else ""))
        finally:
            for conn in holders.values():
                conn.close()

    def samples(key: str) -> dict[str, list[float]]:
        """By target: a registry's same-worker seat under its own name (the one compared with Java)."""
        return {label.removesuffix(" same worker"): [r[key] for r in rs] for label, rs in runs.items()
                if r_has(rs, key)}

    def r_has(rs: list[dict[str, Any]], key: str) -> bool:
        return all(r[key] is not None for r in rs)

    what = f"route reads while {brokers} brokers x {topics:,} topics register" + (f" ({args.form})" if args.form != "json" else "")
    summary = [*ratio_rows(f"{what}, p99.9", samples("p999_ms"), "ms"),
               *ratio_rows(f"{what}, max", samples("max_ms"), "ms", ratios=False),
               *ratio_rows(f"{what}, p50", samples("p50_ms"), "ms", ratios=False),
               *ratio_rows(f"{what}, whole stream", samples("stream_s"), "s"),
               # fewer than 1,000 reads in the window: p99.9 is the slowest read
               *ratio_rows(f"{what}, reads in the window", samples("reads"), "reads", ratios=False)]
    # reads the cache answered (the misses, each a route.lua behind the registrations' scripts, are in the JSON)
    summary += ratio_rows(f"{what}, reads the cache answered", samples("cache_hits"), "reads", ratios=False)
    # no row where no script took over SLOWLOG's threshold (1 ms; a tiny run on an idle machine)
    summary += ratio_rows(f"{what}, longest script", {
        name: v for name, v in samples("longest_script_ms").items()
        if not name.endswith("other worker") and v and max(v) > 0}, "ms", ratios=False)
    write_result(args.out, "tcp_reads_during_registration", {
        "brokers": brokers, "topics": topics, "reps": reps, "targets": described, "cores": cores.describe(),
        "java_opts": args.java_opts if "java" in described else None,
        "resident_topics": len(resident), "form": br.FORM_NOTES[args.form],
        "reader": "one connection, one request at a time, random resident topics, its own process on the loader core",
    }, {"summary": {label: {k: spread([r[k] for r in rs]) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms", "stream_s")}
                    for label, rs in runs.items()}, "runs": runs}, summary, machine)


if __name__ == "__main__":
    main()
