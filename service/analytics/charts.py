"""PNG charts (matplotlib, Agg backend: no display needed).

Every chart carries a caption line under its title saying what it was read from (the
run's ``Source``): prefix, Redis host:port/db and the registry's data set id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


LABELS = 60  # bars (heartbeat) or labels (queues) a chart draws at most; the Parquet tables have all


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path, title: str, caption: str) -> Path:
    fig.suptitle(title, fontsize=11)
    if caption:  # below the axes; constrained layout leaves room for it
        fig.supxlabel(caption, fontsize=7, color="dimgray")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _legend_outside(ax: Any, handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None,
                    shift: float = 1.01) -> None:
    """The legend right of the axes, never over the data (constrained layout makes room)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels if labels is not None else [h.get_label() for h in handles], fontsize=8,
                  loc="upper left", bbox_to_anchor=(shift, 1.0), borderaxespad=0)


def queue_distribution(groups: Sequence[dict[str, Any]], path: Path, title: str = "", caption: str = "") -> Path:
    """Grouped bars: read queues and writable write queues per broker group, by cluster."""
    plt = _plt()
    rows = sorted(groups, key=lambda g: (g.get("cluster") or "", g["brokerName"]))
    n = len(rows)
    fig, ax = plt.subplots(figsize=(max(6.0, min(40.0, 0.45 * n + 2)), 4.8), layout="constrained")
    xs = list(range(n))
    w = 0.4
    ax.bar([x - w / 2 for x in xs], [g["readQueues"] for g in rows], w, label="read queues")
    ax.bar([x + w / 2 for x in xs], [g["writeQueues"] for g in rows], w,
           label="write queues (writable rows: perm has W)")
    # a label for every k-th group at most LABELS of them: text is what costs (seconds for
    # a fleet's 300 labels) and a denser row is unreadable anyway
    step = -(-n // LABELS) if n else 1
    ax.set_xticks(xs[::step])
    ax.set_xticklabels([f'{g["brokerName"]}\n{g.get("cluster") or "?"}' for g in rows[::step]],
                       rotation=90 if n > 12 else 0, fontsize=7)
    if step > 1:
        ax.set_xlabel(f"{n} broker groups by cluster and name, every {step}th labelled "
                      "(all in per_broker_group.parquet)", fontsize=8)
    ax.set_ylabel("queues")
    if rows:
        mean_w = sum(g["writeQueues"] for g in rows) / n
        ax.axhline(mean_w, color="grey", linestyle="--", linewidth=1, label=f"mean write ({mean_w:.1f})")
    _legend_outside(ax)
    return _save(plt, fig, path, title or "Queues per broker group", caption)


def heartbeat_age(brokers: Sequence[dict[str, Any]], path: Path, flag_ratio: float, title: str = "",
                  caption: str = "") -> Path:
    """Bars: heartbeat age as a fraction of each broker's timeout, flagged ones in red; the
    ``LABELS`` oldest of a bigger fleet, saying so."""
    plt = _plt()
    from matplotlib.patches import Patch

    ranked = sorted(brokers, key=lambda b: -b["ageRatio"])
    rows = ranked[:LABELS]  # the oldest: the flagged ones come first
    n = len(rows)
    fig, ax = plt.subplots(figsize=(7.0, max(3.2, min(40.0, 0.22 * n + 1.8))), layout="constrained")
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
    if len(ranked) > n:
        flagged = sum(1 for b in ranked if b["flagged"])
        ax.set_title(f"the {n} oldest of {len(ranked)} live brokers, {flagged} flagged "
                     "(all in brokers.parquet)", fontsize=8)
    handles = [Patch(color="tab:blue", label="broker"), Patch(color="tab:red", label="flagged broker"),
               *ax.get_legend_handles_labels()[0]]
    _legend_outside(ax, handles)
    return _save(plt, fig, path, title or "Broker heartbeat age", caption)


def trend(series: Sequence[dict[str, Any]], path: Path, title: str = "", caption: str = "") -> Path:
    """Top: live brokers, registered members, broker groups, topics over the runs. Bottom:
    members joined (up) and departed (down) since the previous run. Legends outside the axes."""
    import datetime as dt

    plt = _plt()
    xs = [dt.datetime.fromtimestamp(r["runAtMs"] / 1000, dt.timezone.utc) for r in series]
    fig, (ax, moves) = plt.subplots(2, 1, figsize=(9.0, 6.0), sharex=True, layout="constrained",
                                    gridspec_kw={"height_ratios": [3, 1.4]})
    # one colour per meaning across both panels: green and red are joined and departed only
    for name, label, colour in (("liveBrokers", "live brokers", "tab:blue"),
                                ("members", "registered members", "tab:orange"),
                                ("brokerGroups", "broker groups", "tab:brown")):
        pts = [(x, r[name]) for x, r in zip(xs, series) if r.get(name) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colour, label=label)
    ax.set_ylabel("brokers")
    ax2 = ax.twinx()
    pts = [(x, r["topics"]) for x, r in zip(xs, series) if r.get("topics") is not None]
    if pts:
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="s", color="tab:purple", label="topics")
    ax2.set_ylabel("topics")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    _legend_outside(ax, h1 + h2, l1 + l2, shift=1.1)  # past the right-hand axis' labels

    compared = [(x, r) for x, r in zip(xs, series) if r.get("joinedMembers") is not None]
    if compared:
        width = 0.6 * (min((b - a for a, b in zip(xs, xs[1:])), default=dt.timedelta(hours=1))
                       or dt.timedelta(minutes=1))
        moves.bar([x for x, _ in compared], [r["joinedMembers"] for _, r in compared], width=width,
                  color="tab:green", label="members joined since previous run")
        moves.bar([x for x, _ in compared], [-(r["departedMembers"] or 0) for _, r in compared], width=width,
                  color="tab:red", label="members departed since previous run")
    moves.axhline(0, color="black", linewidth=0.8)
    moves.set_ylabel("members")
    _legend_outside(moves, shift=1.1)
    fig.autofmt_xdate()
    return _save(plt, fig, path, title or "Registry trend", caption)
