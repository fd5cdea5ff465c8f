"""PNG charts (matplotlib, Agg backend: no display needed).

Every chart carries a caption line under its title saying what it was read from (the
run's ``Source``): prefix, Redis host:port/db and the registry's data set id. Each
``*_figure`` function draws one chart and returns the figure (the tests read what it
drew); the function of the chart's own name saves it as a PNG.

The rules they keep, at a fleet's 300 broker groups as at 9:

* every axis says its scale, and a count axis starts at 0;
* a zero is drawn (a marker on the zero line), never left out as a missing bar;
* an outlier that would squash the rest is cut at the axis end with its value written,
  and named;
* the legend lists the series drawn, and only those.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

LABELS = 60  # heartbeat bars a chart draws at most; the Parquet tables have all
ROWS_PER_COLUMN = 80  # queue chart: group rows per column before the next column starts
ROW_INCHES = 0.16  # one labelled row: 16 px at 100 dpi, for 7 pt text
OUTLIER_IQRS = 3.0  # a far outlier (Tukey): above Q3 + 3 IQR

Row = dict[str, Any]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path


def _titles(fig: Any, title: str, caption: str) -> None:
    fig.suptitle(title, fontsize=11)
    if caption:  # below the axes; constrained layout leaves room for it
        fig.supxlabel(caption, fontsize=7, color="dimgray")


def _legend_outside(ax: Any, handles: Sequence[Any] | None = None, shift: float = 1.01) -> None:
    """The legend right of the axes, never over the data (constrained layout makes room);
    no legend at all when nothing labelled was drawn."""
    if handles is None:
        handles = ax.get_legend_handles_labels()[0]
    if handles:
        ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper left",
                  bbox_to_anchor=(shift, 1.0), borderaxespad=0)


def _counts_axis(ax: Any) -> None:
    """Whole numbers with thousands separators on the y axis: counts, never 0.2 of a broker."""
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def natural_key(text: str | None) -> tuple[Any, ...]:
    """group-2 before group-10; None (no cluster) last."""
    if text is None:
        return (1,)
    return (0, *[(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p])


def far_outlier_fence(values: Sequence[float]) -> float | None:
    """The fence above which a value is a far outlier (Q3 + 3 IQR, and above 1.5 x the
    median, so that an all-equal fleet with one group a little higher has none)."""
    xs = sorted(values)
    if len(xs) < 4:
        return None

    def q(p: float) -> float:
        i = p * (len(xs) - 1)
        lo = int(i)
        return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (i - lo)

    q1, median, q3 = q(0.25), q(0.5), q(0.75)
    return max(q3 + OUTLIER_IQRS * (q3 - q1), 1.5 * median)


# ------------------------------------------------------------------------- queues
def queue_columns(ordered: Sequence[Row]) -> list[list[tuple[str, Any]]]:
    """The chart's rows top to bottom, ("cluster", header) before each cluster's ("group",
    row)s, cut into columns of ``ROWS_PER_COLUMN``; a cluster carried over to the next
    column is named again at its top."""
    rows: list[tuple[str, Any]] = []
    for g in ordered:
        if not rows or rows[-1][1].get("cluster") != g.get("cluster"):
            rows.append(("cluster", g.get("cluster") or "no cluster"))
        rows.append(("group", g))
    columns = [rows[i:i + ROWS_PER_COLUMN] for i in range(0, len(rows), ROWS_PER_COLUMN)] or [[]]
    for column in columns[1:]:
        if column[0][0] == "group":
            column.insert(0, ("cluster", f'{column[0][1].get("cluster") or "no cluster"} (cont.)'))
    return columns


def queue_figure(groups: Sequence[Row], title: str = "", caption: str = "") -> Any:
    """Read and write queues per broker group: one labelled row per group, grouped by
    cluster (a header row and a rule between clusters), groups in natural order, the rows
    flowing into columns of ``ROWS_PER_COLUMN`` that share one linear axis from 0."""
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ordered = sorted(groups, key=lambda g: (natural_key(g.get("cluster")), natural_key(g["brokerName"])))
    columns = queue_columns(ordered)
    height = max(len(c) for c in columns) or 1
    writes = [float(g["writeQueues"]) for g in ordered]
    fence = far_outlier_fence(writes)
    outliers = {g["brokerName"] for g in ordered if fence is not None and g["writeQueues"] > fence}
    ordinary = [v for g in ordered if g["brokerName"] not in outliers for v in (g["readQueues"], g["writeQueues"])]
    top = max([*writes, *(float(g["readQueues"]) for g in ordered)], default=0.0)
    cap = max(max(ordinary, default=0.0) * 1.25, 1.0) if outliers else max(top * 1.08, 1.0)
    cut = top > cap
    # the median, not the mean: a far outlier drags the mean past the axis end (skew's
    # max/mean in the summary has the mean)
    median_w = sorted(writes)[len(writes) // 2] if writes else 0.0

    fig, axes = plt.subplots(1, len(columns), sharex=True, squeeze=False, layout="constrained",
                             figsize=(max(8.5, 4.4 * len(columns) + 1.6), ROW_INCHES * height + 2.4))
    for ax, column in zip(axes[0], columns):
        ys = list(range(len(column)))
        bars = [(y, g) for y, (kind, g) in zip(ys, column) if kind == "group"]
        ax.barh([y for y, _ in bars], [min(g["readQueues"], cap) for _, g in bars], height=0.8,
                color="lightsteelblue")
        ax.barh([y for y, _ in bars], [min(g["writeQueues"], cap) for _, g in bars], height=0.4,
                color="tab:blue")
        for y, g in bars:
            for value, thick in ((g["readQueues"], 0.8), (g["writeQueues"], 0.4)):
                if value > cap:  # cut: hatched end, the value written
                    ax.barh(y, cap * 0.06, left=cap * 0.94, height=thick, color="white", hatch="////",
                            edgecolor="black", linewidth=0)
            if max(g["readQueues"], g["writeQueues"]) > cap:
                ax.text(cap * 0.93, y, f'{max(g["readQueues"], g["writeQueues"]):,}', ha="right",
                        va="center", fontsize=7, color="white", fontweight="bold")
            if g["writeQueues"] == 0:
                ax.plot(0, y, marker="x", color="tab:red", markersize=6, markeredgewidth=1.5, clip_on=False,
                        zorder=5)
        for y, (kind, name) in zip(ys, column):
            if kind == "cluster":
                ax.axhline(y - 0.5, color="black", linewidth=0.8)
                ax.axhspan(y - 0.5, y + 0.5, color="whitesmoke", zorder=0)
        ax.set_yticks(ys)
        labels = ax.set_yticklabels([name if kind == "cluster" else name["brokerName"] for kind, name in column],
                                    fontsize=7)
        for label, (kind, g) in zip(labels, column):
            if kind == "cluster":
                label.set_fontweight("bold")
            elif g["brokerName"] in outliers:
                label.set_color("tab:red")
                label.set_fontweight("bold")
        ax.set_ylim(height - 0.5, -0.5)
        ax.axvline(median_w, color="grey", linestyle="--", linewidth=1)
        ax.tick_params(axis="x", labelsize=7, labeltop=True)
        ax.grid(axis="x", color="gainsboro", linewidth=0.6)
        ax.set_axisbelow(True)
    axes[0][0].set_xlim(0, cap)
    scale = "queues per broker group (linear, from 0)"
    if cut:
        scale += f"; bars past {cap:,.0f} are cut (hatched end), their value written"
    if outliers:
        scale += f"; names in red: far outliers (write queues above Q3 + {OUTLIER_IQRS:g} IQR = {fence:,.0f})"
    for ax in axes[0]:
        ax.set_xlabel("queues (linear, from 0)", fontsize=7)
    handles = [Patch(color="lightsteelblue", label="read queues"),
               Patch(color="tab:blue", label="write queues (writable rows: perm has W)"),
               Line2D([], [], color="grey", linestyle="--", label=f"median write queues per group ({median_w:,.0f})")]
    if any(g["writeQueues"] == 0 for g in ordered):
        handles.append(Line2D([], [], color="tab:red", marker="x", linestyle="none",
                              label="0 write queues (write bit wiped, or no topics)"))
    if cut:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="////", label="cut at the axis end"))
    clusters = len({g.get("cluster") for g in ordered})
    _titles(fig, title or "Queues per broker group", "")
    # what the chart shows, its scale and its source, as the legend's title: laid out with it
    # under the axes (constrained layout puts an upper legend over the title, and a lower one
    # over a caption of its own)
    note = f"{len(ordered)} broker groups in {clusters} clusters, by cluster and name; {scale}"
    fig.legend(handles=handles, loc="outside lower center", ncols=2 if len(columns) == 1 else 3, fontsize=8,
               frameon=False,
               title=f"{note}\n{caption}" if caption else note, title_fontsize=8)
    return fig


def queue_distribution(groups: Sequence[Row], path: Path, title: str = "", caption: str = "") -> Path:
    return _save(queue_figure(groups, title, caption), path)


# ---------------------------------------------------------------------- heartbeat
def heartbeat_figure(brokers: Sequence[Row], flag_ratio: float, timed_out: Sequence[Row] = (),
                     title: str = "", caption: str = "") -> Any:
    """Bars: heartbeat age as a fraction of each broker's own timeout, flagged ones in red.
    Registered members whose live row is gone (timed out, not yet removed) come first, at
    the timeout with a hatched bar (their age is past it; the row that held it is gone),
    then the oldest live brokers, ``LABELS`` rows in all."""
    plt = _plt()
    from matplotlib.patches import Patch

    gone = sorted(timed_out, key=lambda b: (natural_key(b.get("brokerName")), b.get("brokerId") or 0))[:LABELS]
    ranked = sorted(brokers, key=lambda b: -b["ageRatio"])
    live = ranked[:max(0, LABELS - len(gone))]
    n = len(gone) + len(live)
    fig, ax = plt.subplots(figsize=(7.5, max(3.2, min(40.0, 0.2 * n + 2.0))), layout="constrained")
    ys_gone, ys_live = list(range(len(gone))), list(range(len(gone), n))
    handles: list[Any] = []
    if gone:
        ax.barh(ys_gone, [1.0] * len(gone), color="mistyrose", edgecolor="tab:red", hatch="////", linewidth=0.6)
        handles.append(Patch(facecolor="mistyrose", edgecolor="tab:red", hatch="////",
                             label="timed out: live row gone (age >= timeout)"))
    colours = ["tab:red" if b["flagged"] else "tab:blue" for b in live]
    if live:
        ax.barh(ys_live, [b["ageRatio"] for b in live], color=colours)
    if "tab:blue" in colours:
        handles.append(Patch(color="tab:blue", label="live broker"))
    if "tab:red" in colours:
        handles.append(Patch(color="tab:red", label=f"flagged: age >= {flag_ratio:.0%} of timeout"))
    ax.set_yticks(ys_gone + ys_live)
    ax.set_yticklabels([f'{b["brokerAddr"]} ({b.get("brokerName")}/{b.get("brokerId")})' for b in [*gone, *live]],
                       fontsize=7)
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    ax.axvline(flag_ratio, color="tab:red", linestyle="--", linewidth=1, label=f"flag at {flag_ratio:.0%} of timeout")
    ax.axvline(1.0, color="black", linewidth=1, label="timeout")
    ax.set_xlim(0, max(1.05, max((b["ageRatio"] for b in live), default=0) + 0.05))
    ax.set_xlabel("heartbeat age / the broker's own timeout (linear, from 0)")
    flagged = sum(1 for b in brokers if b["flagged"])
    shown = (f"{len(gone)} timed out" + (f" of {len(timed_out)}" if len(timed_out) > len(gone) else "")
             + f", the {len(live)} oldest of {len(brokers)} live brokers, {flagged} flagged")
    ax.set_title(shown + (" (all in brokers.parquet)" if len(live) < len(brokers) else ""), fontsize=8)
    if not n:
        ax.text(0.5, 0.5, "no broker registered", transform=ax.transAxes, ha="center", color="dimgray")
    _legend_outside(ax, handles + ax.get_legend_handles_labels()[0])
    _titles(fig, title or "Broker heartbeat age", caption)
    return fig


def heartbeat_age(brokers: Sequence[Row], path: Path, flag_ratio: float, timed_out: Sequence[Row] = (),
                  title: str = "", caption: str = "") -> Path:
    return _save(heartbeat_figure(brokers, flag_ratio, timed_out, title, caption), path)


# -------------------------------------------------------------------------- trend
# panel -> (field, label, colour, marker): a marker of its own per series, so that series with
# the same values (two problem counts of 2) stay told apart where their points coincide
TREND_PANELS: list[tuple[str, list[tuple[str, str, str, str]]]] = [
    ("brokers", [("liveBrokers", "live brokers", "tab:blue", "o"),
                 ("members", "registered members", "tab:orange", "s"),
                 ("brokerGroups", "broker groups", "tab:brown", "^")]),
    ("topics", [("topics", "topics", "tab:purple", "o")]),
    ("problems", [("groupsWithoutMaster", "groups without a master", "tab:red", "o"),
                  ("membersWithoutLiveRow", "members timed out, not yet removed", "tab:pink", "s"),
                  ("flaggedBrokers", "flagged brokers (heartbeat late)", "tab:olive", "^"),
                  ("writeWipedTopics", "topics with a wiped write bit", "tab:cyan", "D")]),
]


def trend_figure(series: Sequence[Row], title: str = "", caption: str = "") -> Any:
    """Over the runs, every count axis from 0: brokers; topics (with the first-to-last
    change written, since at fleet size it is a fraction of a percent); the problem counts;
    members joined (up) and departed (down) since the previous run. A single run is drawn as
    one point in an hour's window, saying there is nothing to compare yet."""
    import datetime as dt

    plt = _plt()
    import matplotlib.dates as mdates

    xs = [dt.datetime.fromtimestamp(r["runAtMs"] / 1000, dt.timezone.utc) for r in series]
    fig, axes = plt.subplots(4, 1, figsize=(9.5, 9.0), sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [2, 1.4, 1.4, 1.2]})
    for ax, (unit, lines) in zip(axes, TREND_PANELS):
        for name, label, colour, marker in lines:
            pts = [(x, r[name]) for x, r in zip(xs, series) if r.get(name) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, markersize=5, color=colour,
                        fillstyle="none", label=label, clip_on=False)
        ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1] * 1.05))
        ax.set_ylabel(f"{unit}\n(linear, from 0)", fontsize=8)
        _counts_axis(ax)
        _legend_outside(ax)
    topics = [r["topics"] for r in series if r.get("topics") is not None]
    if len(topics) > 1 and topics[0]:
        axes[1].text(0.01, 0.06, f"{topics[0]:,} -> {topics[-1]:,} topics ({(topics[-1] - topics[0]) / topics[0]:+.2%})",
                     transform=axes[1].transAxes, fontsize=8, color="tab:purple")
    moves = axes[3]
    compared = [(x, r) for x, r in zip(xs, series) if r.get("joinedMembers") is not None]
    gap = min((b - a for a, b in zip(xs, xs[1:])), default=dt.timedelta(hours=1)) or dt.timedelta(minutes=1)
    joined = [r["joinedMembers"] or 0 for _, r in compared]
    departed = [r["departedMembers"] or 0 for _, r in compared]
    if compared:
        width = 0.6 * gap
        at = [x for x, _ in compared]
        # a series is in the legend only when a bar of it is drawn; a run with no move at
        # all is a marker on the zero line, not a missing bar
        moves.bar(at, joined, width=width, color="tab:green",
                  label="members joined since the previous run" if any(joined) else "_joined")
        moves.bar(at, [-d for d in departed], width=width, color="tab:red",
                  label="members departed since the previous run" if any(departed) else "_departed")
        still = [x for x, j, d in zip(at, joined, departed) if not (j or d)]
        if still:
            moves.plot(still, [0] * len(still), linestyle="none", marker="o", markersize=5, color="dimgray",
                       fillstyle="none", label="no member joined or departed", clip_on=False)
    else:
        moves.text(0.5, 0.5, "one snapshot: no previous run to compare with", transform=moves.transAxes,
                   ha="center", va="center", fontsize=8, color="dimgray")
    moves.axhline(0, color="black", linewidth=0.8)
    # symmetric around 0 with room above the tallest bar: no bar ends on the frame, and an
    # all-zero panel reads -1 0 1, not "0 0 0 -0 -0"
    reach = max([1, *joined, *departed]) * 1.15
    moves.set_ylim(-reach, reach)
    moves.set_ylabel("members\n(+ joined, - departed)", fontsize=8)
    _counts_axis(moves)
    _legend_outside(moves)
    if len(xs) == 1 or (xs and xs[0] == xs[-1]):  # one run: its own hour, not an auto range of years
        moves.set_xlim(xs[0] - dt.timedelta(minutes=30), xs[0] + dt.timedelta(minutes=30))
    elif xs:
        pad = max((xs[-1] - xs[0]) * 0.04, gap * 0.6)  # the first and last runs' bars whole, off the frame
        moves.set_xlim(xs[0] - pad, xs[-1] + pad)
    locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
    moves.xaxis.set_major_locator(locator)
    moves.xaxis.set_major_formatter(mdates.DateFormatter(_time_format(*moves.get_xlim()), tz=dt.timezone.utc))
    moves.set_xlabel("run time (UTC)", fontsize=8)
    when = (f"one run, {xs[0]:%Y-%m-%d %H:%M} UTC" if len(xs) == 1 else
            f"{len(xs)} runs, {xs[0]:%Y-%m-%d %H:%M} to {xs[-1]:%Y-%m-%d %H:%M} UTC" if xs else "no run")
    axes[0].set_title(when, fontsize=8)
    _titles(fig, title or "Registry trend", caption)
    return fig


def _time_format(lo_days: float, hi_days: float) -> str:
    """One format for every tick of a time axis spanning lo..hi (matplotlib dates, days): the
    run times as a clock, with seconds only when the runs are minutes apart, with the day
    when they span days (never "45 50 55 22:28 05", seconds and a clock mixed)."""
    span_s = (hi_days - lo_days) * 86_400
    return "%H:%M:%S" if span_s < 600 else "%H:%M" if span_s < 2 * 86_400 else "%m-%d %H:%M"


def trend(series: Sequence[Row], path: Path, title: str = "", caption: str = "") -> Path:
    return _save(trend_figure(series, title, caption), path)
