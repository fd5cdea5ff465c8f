"""Regenerates the results table in bench/README.md and the plot from results/*.json.

Usage: python bench/report.py [--results DIR] [--readme PATH] [--png PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
BEGIN, END = "<!-- results:begin (bench/report.py) -->", "<!-- results:end -->"
ORDER = ["route_query", "registration", "heartbeat", "scanner_pass", "redis_memory", "scale_workers",
         "tcp_route_query", "tcp_registration", "tcp_reads_during_registration", "tcp_fleet", "tcp_split", "changing_reads",
         "fleet",
         "analytics_197k", "analytics_992k", "analytics_992k_checkouts", "analytics_992k_prefetch"]
TITLES = {
    "route_query": "1. Route query, one worker, 64 connections (wrk)",
    "registration": "2. Registration latency (median)",
    "heartbeat": "3. Heartbeat latency",
    "scanner_pass": "4. Expiry scanner pass (median)",
    "redis_memory": "5. Redis memory",
    "scale_workers": "6. Workers on one Redis (cached route reads, 64 connections)",
    "tcp_route_query": "7. Route query over RocketMQ's protocol (TCP), one worker, against the Java NameServer",
    "tcp_registration": "7b. Registration over RocketMQ's protocol (TCP), one connection, against the Java NameServer",
    "tcp_reads_during_registration": "7c. Route reads (TCP) while big brokers register, against the Java NameServer",
    "tcp_fleet": "7d. A whole fleet over RocketMQ's protocol (TCP): cold start and steady state, against the Java "
                 "NameServer",
    "tcp_split": "7e. Split registration's steady state over RocketMQ's protocol (TCP), against the Java NameServer",
    "changing_reads": "8. Random-topic route reads while another group changes (10,000 topics)",
    "fleet": "9. Fleet size: 300 broker groups, 100,000 topics",
    "analytics_197k": "10. Analytics `all` at ~200,000 pairs: the code before this round's analytics changes "
                      "(checkout `pre21`, commit 5afd8c5) against main, where the wall time goes",
    "analytics_992k": "10b. Analytics `all` at ~1,000,000 pairs, main, where the wall time goes",
    "analytics_992k_checkouts": "10c. Analytics `all` at ~1,000,000 pairs: main's checkout against branch h21, "
                                "where the wall time goes",
    "analytics_992k_prefetch": "10d. As 10c, with h21's first version (queue rows fetched during the snapshot)",
}


def load(results: Path) -> dict[str, dict[str, Any]]:
    docs = {}
    for path in sorted(results.glob("*.json")):
        doc = json.loads(path.read_text())
        docs[doc["bench"]] = doc
    return {k: docs[k] for k in ORDER if k in docs} | {k: v for k, v in docs.items() if k not in ORDER}


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(docs: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, doc in docs.items():
        m = doc["machine"]
        load_ = ", ".join(f"{x:.2f}" for x in m["loadavg_start"])
        lines += [
            f"### {TITLES.get(name, name)}",
            "",
            f"`bench/results/{name}.json`: {m['date']}, {m['cores']} cores ({m.get('cpu') or '?'}), "
            f"Python {m['python']}, Redis {m['redis_server']}, uvloop {m.get('uvloop') or 'no'}, "
            f"commit {m.get('git_commit') or '?'}, load average at start {load_}.",
            "",
            "| measure | value | unit | note |",
            "|---|---:|---|---|",
        ]
        lines += [f"| {r['metric']} | {fmt(r['value'])} | {r.get('unit', '')} | {r.get('note', '')} |"
                  for r in doc["summary"]]
        lines.append("")
    return "\n".join(lines)


def headline(docs: dict[str, dict[str, Any]]) -> str:
    out = []
    if "route_query" in docs:
        rq = docs["route_query"]["results"]
        t, ratios = rq["targets"], rq["ratios"]
        per_cpu = ratios.get("cached_over_ceiling_per_cpu_s")  # results from before it was measured lack it
        out.append(f"- Route reads: cached **{t['cached']['rps']:,.0f} req/s** = **{ratios['cached_over_ceiling']:.2f}** "
                   f"of the same-run aiohttp static-JSON ceiling ({t['ceiling']['rps']:,.0f} req/s; goal >= 0.8)"
                   + (f", **{per_cpu:.2f}** of it per server CPU-second" if per_cpu is not None else "")
                   + f"; uncached {t['uncached']['rps']:,.0f} req/s = {ratios['uncached_over_ceiling']:.2f} of it.")
    if "registration" in docs:
        by = docs["registration"]["results"]["by_topics"]
        big = by.get("10000") or by[max(by, key=int)]
        n = 10000 if "10000" in by else max(map(int, by))
        out.append(f"- Registration of {n:,} topics: first {big['first']['client_ms']:.1f} ms, unchanged "
                   f"{big['unchanged']['client_ms']:.1f} ms, changed {big['changed']['client_ms']:.1f} ms (client); "
                   f"longest registration script {docs['registration']['results']['longest_script_ms']:.1f} ms in Redis.")
    java = [(r["metric"].split(": ")[0], r, java_version(docs[name])) for name in (
                "tcp_registration", "tcp_fleet", "tcp_split", "tcp_route_query", "tcp_reads_during_registration")
            for r in docs.get(name, {}).get("summary", []) if r["metric"].endswith(": registry / Java")
            and ", zlib" not in r["metric"] and "whole stream" not in r["metric"]]
    if java:
        out.append("- Against the Java NameServer (its version after each figure), same run, one core each "
                   "(registry / Java: the median of same-repetition ratios, their range; compressed forms in "
                   "section 7b): " + "; ".join(
                       f"{what} **{r['value']:.2f}x** ({r['note'].split(' over')[0]}; {version})"
                       for what, r, version in java) + ".")
    if "redis_memory" in docs:
        mem = docs["redis_memory"]["results"]
        out.append(f"- Redis memory: {mem['bytes_per_pair']:.0f} bytes per (topic, broker) pair.")
    return "\n".join(out)


def java_version(doc: dict[str, Any]) -> str:
    """The Java NameServer a result was measured against, as its params name it."""
    described = (doc.get("params", {}).get("targets") or {}).get("java", "")
    words = described.split()
    return f"Java {words[2]}" if len(words) > 2 and words[:2] == ["Java", "NameServer"] and words[2][0].isdigit() \
        else "Java 4.9.8"


def plot(docs: dict[str, dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    axes = axes.ravel()
    for ax, name in zip(axes, ORDER):
        ax.set_title(TITLES[name].split(". ", 1)[1], fontsize=10)
        doc = docs.get(name)
        if doc is None:
            ax.text(0.5, 0.5, "not run", ha="center", va="center")
            ax.set_axis_off()
            continue
        res = doc["results"]
        if name == "route_query":
            labels = ["ceiling", "uncached", "cached"]
            values = [res["targets"][k]["rps"] for k in labels]
            ratios = [1.0, res["ratios"]["uncached_over_ceiling"], res["ratios"]["cached_over_ceiling"]]
            bars = ax.bar(labels, values, color=["grey", "tab:orange", "tab:blue"])
            for b, v, q in zip(bars, values, ratios):
                ax.annotate(f"{q:.2f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom")
            ax.set_ylabel("req/s, median (median per-round ratio on top)")
        elif name == "registration":
            sizes = sorted(res["by_topics"], key=int)
            for case, style in (("first", "o-"), ("unchanged", "s-"), ("changed", "^-")):
                ax.plot([int(s) for s in sizes], [res["by_topics"][s][case]["client_ms"] for s in sizes], style,
                        label=f"{case} (client)")
                red = [res["by_topics"][s][case]["redis_ms"] for s in sizes]
                if all(v is not None for v in red):
                    ax.plot([int(s) for s in sizes], red, style[0] + "--", alpha=0.5, label=f"{case} (Redis)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("topics")
            ax.set_ylabel("ms")
            ax.legend(fontsize=7)
        elif name == "heartbeat":
            labels, p50, p99 = [], [], []
            for key in ("sequential", "concurrent"):
                if key in res:
                    labels.append(key)
                    p50.append(res[key]["p50_us"] / 1000)
                    p99.append(res[key]["p99_us"] / 1000)
            x = range(len(labels))
            ax.bar([i - 0.2 for i in x], p50, 0.4, label="p50")
            ax.bar([i + 0.2 for i in x], p99, 0.4, label="p99")
            ax.set_xticks(list(x), labels)
            ax.set_yscale("log")
            ax.set_ylabel("ms")
            ax.legend(fontsize=7)
        elif name == "scanner_pass":
            by_total: dict[int, list[tuple[int, float]]] = {}
            for case in res["cases"].values():
                by_total.setdefault(case["live"], []).append((case["due"], case["pass_ms"]))
            for total, pts in sorted(by_total.items()):
                pts.sort()
                ax.plot([d for d, _ in pts], [t for _, t in pts], "o-", label=f"{total:,} live")
            ax.set_xlabel("due brokers")
            ax.set_ylabel("pass ms")
            ax.legend(fontsize=7)
        elif name == "redis_memory":
            labels = ["per pair\n(used_memory)", "queue hash\n(MEMORY USAGE)", "topic set\n(MEMORY USAGE)"]
            values = [res["bytes_per_pair"], res["memory_usage"]["queue_hash"], res["memory_usage"]["topic_set"]]
            bars = ax.bar(labels, values)
            for b, v in zip(bars, values):
                ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom")
            ax.set_ylabel("bytes")
        elif name == "scale_workers":
            for mode, points in res.items():
                ns = sorted(points, key=int)
                ax.plot([int(n) for n in ns], [points[n]["rps"] for n in ns], "o-", label=mode)
            ax.set_xlabel("workers")
            ax.set_ylabel("req/s")
            ax.set_xticks([1, 2, 3])
            ax.legend(fontsize=7)
    cores = next(iter(docs.values()))["machine"]["cores"] if docs else "?"
    fig.suptitle(f"rmq-registry bench ({cores} cores, shared machine)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=BENCH / "results")
    p.add_argument("--readme", type=Path, default=BENCH / "README.md")
    p.add_argument("--png", type=Path, default=None, help="default: <results>/summary.png")
    args = p.parse_args()
    docs = load(args.results)
    if not docs:
        print(f"no results in {args.results}", file=sys.stderr)
        return 1
    png = args.png or args.results / "summary.png"
    plot(docs, png)
    try:
        rel = png.resolve().relative_to(args.readme.resolve().parent)
    except ValueError:
        rel = png
    block = "\n".join([BEGIN, "", headline(docs), "", f"![bench summary]({rel})", "", table(docs), END])
    text = args.readme.read_text() if args.readme.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n## Results\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    args.readme.write_text(head + block + tail)
    print(f"wrote {args.readme} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
