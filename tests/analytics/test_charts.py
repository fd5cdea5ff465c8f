"""The charts at a fleet's 300 broker groups, from a real run on Spark, and what each one draws:
grouped by cluster, every group named, outliers named and cut with their value, zeros drawn,
axes from 0 that say so, a one-run trend as one run, and legends that list what is drawn."""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")

import redis  # noqa: E402

from service.analytics import charts  # noqa: E402
from service.analytics.jobs import Context, run  # noqa: E402
from service.analytics.reader import url_to_options  # noqa: E402
from tests.analytics.seed import fleet_model, write_model  # noqa: E402

pytestmark = pytest.mark.spark

FLEET_GROUPS = 300
# a person reads a PNG at these sizes without zooming through a strip of 4,000 px
MAX_SIDE_PX = 2600


@pytest.fixture(scope="module")
def fleet_run(spark: Any, redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``all`` on a seeded fleet of 300 groups, charts written (the figures of one run are
    shared by the tests below)."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
        write_model(client, fleet_model(FLEET_GROUPS))
    finally:
        client.close()
    out = tmp_path_factory.mktemp("fleet") / "out"
    return run(Context(spark, options=url_to_options(redis_server.url), out=out, history=out / "history"), "all")


def png_size(path: str) -> tuple[int, int]:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def legend_labels(fig: Any) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    return [t.get_text() for lg in legends if lg is not None for t in lg.get_texts()]


def tick_labels(fig: Any) -> dict[str, Any]:
    return {t.get_text(): t for ax in fig.axes for t in ax.get_yticklabels()}


def test_the_queue_chart_of_300_groups_fits_a_screen_and_names_every_group_by_cluster(fleet_run):
    groups = fleet_run["topics"]["perBrokerGroup"]
    assert len(groups) == FLEET_GROUPS
    width, height = png_size(fleet_run["topics"]["outputs"]["queueChart"])
    assert width <= MAX_SIDE_PX and height <= MAX_SIDE_PX, (width, height)
    fig = charts.queue_figure(groups)
    labels = tick_labels(fig)
    assert {f"fleet-{g}" for g in range(FLEET_GROUPS)} <= set(labels)
    headers = [t for t in labels if t.startswith("Fleet")]
    assert {h.removesuffix(" (cont.)") for h in headers} == {f"Fleet{c}" for c in range(5)}
    # by cluster, then in natural order: fleet-5 before fleet-10 in Fleet0
    order = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert order.index("Fleet0") < order.index("fleet-5") < order.index("fleet-10") < order.index("Fleet1")


def test_the_queue_chart_names_and_cuts_the_far_outlier_with_its_value(fleet_run):
    groups = fleet_run["topics"]["perBrokerGroup"]
    outlier = next(g for g in groups if g["brokerName"] == "fleet-7")
    fig = charts.queue_figure(groups)
    assert tick_labels(fig)["fleet-7"].get_color() == "tab:red"
    assert not [n for n, t in tick_labels(fig).items() if t.get_color() == "tab:red" and n != "fleet-7"]
    axis_end = fig.axes[0].get_xlim()
    assert axis_end[0] == 0 and axis_end[1] < outlier["writeQueues"] / 10, "the outlier squashes the rest"
    written = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert f'{outlier["writeQueues"]:,}' in written
    assert "cut at the axis end" in legend_labels(fig)


def test_the_queue_chart_draws_groups_without_write_queues(fleet_run):
    groups = fleet_run["topics"]["perBrokerGroup"]
    zero = {g["brokerName"] for g in groups if g["writeQueues"] == 0}
    assert zero == {"fleet-12", "fleet-13"}  # wiped, and serving nothing
    fig = charts.queue_figure(groups)
    markers = sum(1 for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "x")
    assert markers == len(zero)
    assert "0 write queues (write bit wiped, or no topics)" in legend_labels(fig)


def test_the_queue_legend_lists_no_cut_and_no_zero_when_there_are_none():
    groups = [{"cluster": "C", "brokerName": f"g-{i}", "readQueues": 16 + i % 3, "writeQueues": 16 + i % 3}
              for i in range(12)]
    labels = legend_labels(charts.queue_figure(groups))
    assert not [x for x in labels if x.startswith(("cut", "0 write"))], labels
    assert labels[:2] == ["read queues", "write queues (writable rows: perm has W)"]


def test_the_heartbeat_chart_shows_timed_out_members_and_no_flagged_entry_when_none_is(fleet_run):
    snap = fleet_run["snapshot"]
    assert snap["counts"]["flaggedBrokers"] == 0
    gone = snap["membersWithoutLiveRow"]
    assert [b["brokerAddr"] for b in gone] == ["10.100.3.11:10911"]
    fig = charts.heartbeat_figure(snap["heartbeat"]["brokers"], 0.8, gone)
    assert "10.100.3.11:10911 (fleet-3/1)" in tick_labels(fig)
    labels = legend_labels(fig)
    assert "timed out: live row gone (age >= timeout)" in labels
    assert not [x for x in labels if x.startswith("flagged")], labels
    assert png_size(snap["outputs"]["heartbeatChart"])[1] <= MAX_SIDE_PX


def test_the_heartbeat_chart_lists_flagged_brokers_when_some_are():
    brokers = [{"brokerAddr": f"10.0.0.{i}:10911", "brokerName": "b", "brokerId": i, "ageRatio": r,
                "flagged": r >= 0.8} for i, r in enumerate((0.9, 0.2))]
    labels = legend_labels(charts.heartbeat_figure(brokers, 0.8))
    assert "flagged: age >= 80% of timeout" in labels and "live broker" in labels
    assert not [x for x in labels if x.startswith("timed out")]


def run_row(at_ms: int, **counts: Any) -> dict[str, Any]:
    row = {"runAtMs": at_ms, "liveBrokers": 600, "members": 604, "brokerGroups": 300, "topics": 110_000,
           "groupsWithoutMaster": 0, "membersWithoutLiveRow": 0, "flaggedBrokers": 0, "writeWipedTopics": 0,
           "joinedMembers": None, "departedMembers": None}
    row.update(counts)
    return row


def test_a_one_run_trend_is_drawn_as_one_run_in_its_own_hour(spark, fleet_run, tmp_path):
    report = run(Context(spark, history=Path(fleet_run["history"]["path"]), out=tmp_path), "history")
    assert report["runs"] == 1
    fig = charts.trend_figure(report["series"])
    lo, hi = fig.axes[-1].get_xlim()  # matplotlib dates: days
    assert (hi - lo) * 24 == pytest.approx(1.0), "one run spans an hour, not years"
    assert "one snapshot: no previous run to compare with" in [t.get_text() for t in fig.axes[-1].texts]
    assert not [x for x in legend_labels(fig) if x.startswith("members joined")]


def test_the_trend_s_count_axes_start_at_0_and_the_topic_change_is_written():
    t0 = int(dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc).timestamp() * 1000)
    series = [run_row(t0), run_row(t0 + 900_000, topics=110_510, joinedMembers=6, departedMembers=0, members=610)]
    fig = charts.trend_figure(series)
    for ax in fig.axes[:3]:
        assert ax.get_ylim()[0] == 0, ax.get_ylabel()
        assert "from 0" in ax.get_ylabel()
    assert "110,000 -> 110,510 topics (+0.46%)" in [t.get_text() for t in fig.axes[1].texts]


def test_the_trend_draws_zero_counts_and_lists_exactly_the_series_drawn():
    t0 = int(dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc).timestamp() * 1000)
    series = [run_row(t0), run_row(t0 + 900_000, writeWipedTopics=0, joinedMembers=0, departedMembers=2)]
    fig = charts.trend_figure(series)
    drawn = {line.get_label(): list(line.get_ydata()) for ax in fig.axes for line in ax.get_lines()
             if not line.get_label().startswith("_")}
    assert drawn["topics with a wiped write bit"] == [0, 0]
    assert drawn["groups without a master"] == [0, 0]
    bars = {c.get_label() for ax in fig.axes for c in ax.containers if not c.get_label().startswith("_")}
    assert set(legend_labels(fig)) == set(drawn) | bars
    assert "members joined since the previous run" not in legend_labels(fig)  # no joined bar is drawn


def trend_runs(step_ms: int, departed: list[int]) -> list[dict[str, Any]]:
    """A first run, then one a `step_ms` later per entry of `departed` (none joined)."""
    t0 = int(dt.datetime(2026, 11, 22, 22, 27, 40, tzinfo=dt.timezone.utc).timestamp() * 1000)
    return [run_row(t0)] + [run_row(t0 + i * step_ms, joinedMembers=0, departedMembers=d)
                            for i, d in enumerate(departed, 1)]


def shown_ticks(ax: Any, axis: str) -> list[str]:
    """The tick labels drawn inside the axis' limits."""
    ax.figure.canvas.draw()
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks if lo <= (t.get_position()[0] if axis == "x" else t.get_position()[1]) <= hi]


@pytest.mark.parametrize(("step_ms", "pattern"), [(7_000, r"\d\d:\d\d:\d\d"), (900_000, r"\d\d:\d\d")])
def test_the_trend_s_time_ticks_are_written_one_way(step_ms: int, pattern: str) -> None:
    import re
    ticks = shown_ticks(charts.trend_figure(trend_runs(step_ms, [0, 0, 0, 2])).axes[-1], "x")
    assert len(ticks) >= 3 and all(re.fullmatch(pattern, t) for t in ticks), ticks


def test_a_trend_with_no_member_moving_reads_minus_one_zero_one_and_marks_each_run() -> None:
    fig = charts.trend_figure(trend_runs(900_000, [0, 0, 0]))
    moves = fig.axes[-1]
    assert shown_ticks(moves, "y") == ["\u22121", "0", "1"]
    assert legend_labels(fig)[-1:] == ["no member joined or departed"]
    assert not [x for x in legend_labels(fig) if x.startswith(("members joined", "members departed"))]


def test_the_last_run_s_departed_bar_is_drawn_whole_inside_the_frame() -> None:
    moves = charts.trend_figure(trend_runs(7_000, [0, 0, 0, 2])).axes[-1]
    [bar] = [b for c in moves.containers for b in c if b.get_height() < 0]
    x_lo, x_hi = moves.get_xlim()
    y_lo, y_hi = moves.get_ylim()
    assert x_lo < bar.get_x() and bar.get_x() + bar.get_width() < x_hi
    # its top, the zero line, is not the frame's edge, nor is its end
    assert y_lo < bar.get_y() + bar.get_height() and bar.get_y() < y_hi
