"""PNG charts (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def queue_distribution(groups: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Grouped bars: read and write queues per broker group, groups ordered by cluster."""
    plt = _plt()
    rows = sorted(groups, key=lambda g: (g.get("cluster") or "", g["brokerName"]))
    n = len(rows)
    fig, ax = plt.subplots(figsize=(max(6.0, min(40.0, 0.45 * n + 2)), 4.5))
    xs = list(range(n))
    w = 0.4
    ax.bar([x - w / 2 for x in xs], [g["readQueues"] for g in rows], w, label="read queues")
    ax.bar([x + w / 2 for x in xs], [g["writeQueues"] for g in rows], w, label="write queues")
    ax.set_xticks(xs)
    ax.set_xticklabels([f'{g["brokerName"]}\n{g.get("cluster") or "?"}' for g in rows],
                       rotation=90 if n > 12 else 0, fontsize=7)
    ax.set_ylabel("queues")
    ax.set_title(title or "Queues per broker group")
    if rows:
        mean_w = sum(g["writeQueues"] for g in rows) / n
        ax.axhline(mean_w, color="grey", linestyle="--", linewidth=1, label=f"mean write ({mean_w:.1f})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def heartbeat_age(brokers: Sequence[dict[str, Any]], path: Path, flag_ratio: float, title: str = "") -> Path:
    """Bars: heartbeat age as a fraction of each broker's timeout, flagged ones in red."""
    plt = _plt()
    rows = sorted(brokers, key=lambda b: -b["ageRatio"])
    n = len(rows)
    fig, ax = plt.subplots(figsize=(7.0, max(3.0, min(40.0, 0.22 * n + 1.5))))
    ys = list(range(n))
    ax.barh(ys, [b["ageRatio"] for b in rows],
            color=["tab:red" if b["flagged"] else "tab:blue" for b in rows])
    ax.set_yticks(ys)
    ax.set_yticklabels([f'{b["brokerAddr"]} ({b["brokerName"]}/{b["brokerId"]})' for b in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(flag_ratio, color="tab:red", linestyle="--", linewidth=1, label=f"flag at {flag_ratio:.0%} of timeout")
    ax.axvline(1.0, color="black", linewidth=1, label="timeout")
    ax.set_xlim(0, max(1.05, max((b["ageRatio"] for b in rows), default=0) + 0.05))
    ax.set_xlabel("heartbeat age / timeout")
    ax.set_title(title or "Broker heartbeat age")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def trend(series: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Lines over runs: live brokers, registered members, topics; bars: members departed."""
    import datetime as dt

    plt = _plt()
    xs = [dt.datetime.fromtimestamp(r["runAtMs"] / 1000, dt.timezone.utc) for r in series]
    fig, ax = plt.subplots(figsize=(8.0, 4.5))
    for field, label in (("liveBrokers", "live brokers"), ("members", "registered members"),
                         ("brokerGroups", "broker groups")):
        pts = [(x, r[field]) for x, r in zip(xs, series) if r.get(field) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_ylabel("brokers")
    ax2 = ax.twinx()
    pts = [(x, r["topics"]) for x, r in zip(xs, series) if r.get("topics") is not None]
    if pts:
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="s", color="tab:purple", label="topics")
    ax2.set_ylabel("topics")
    dep = [(x, r["departedMembers"]) for x, r in zip(xs, series) if r.get("departedMembers")]
    if dep:
        ax.scatter([p[0] for p in dep], [p[1] for p in dep], color="tab:red", marker="v", zorder=3,
                   label="members departed since previous run")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    ax.set_title(title or "Registry trend")
    fig.autofmt_xdate()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
