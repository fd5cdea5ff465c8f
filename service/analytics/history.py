"""The history dataset (one row per run) and the trend report read back from it.

The dataset is Parquet partitioned by ``date=YYYY-MM-DD``. A local path (or ``file:``) is
written and read on the driver with pyarrow: on a Spark cluster the executors do not share
the driver's disk, and a row written there would land in an executor's ``_temporary``
folder. A URI (``s3a://``, ``hdfs://``, any storage every node shares) goes through Spark.

Every row records where it was read from (host, port, db, prefix) and the registry's data
set id. One history holds one data set: a run on a store of another id (another registry, or
this one wiped) is refused before it reads anything (``check_history``), so two stores never
become one trend. A history written before that rule may hold several; the trend reports
one data set and skips, saying so, the rows of any other.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import uuid
from pathlib import Path
from typing import Any, Mapping

from . import charts
from .context import Context, chart, iso, rows, write_table
from .source import JobError

log = logging.getLogger("service.analytics")

HISTORY_COLUMNS: list[tuple[str, str]] = [
    ("runAtMs", "long"), ("job", "string"), ("prefix", "string"), ("reader", "string"),
    ("clusters", "integer"), ("brokerGroups", "integer"), ("members", "integer"),
    ("masters", "integer"), ("slaves", "integer"), ("liveBrokers", "integer"),
    ("groupsWithoutMaster", "integer"), ("flaggedBrokers", "integer"),
    ("membersWithoutLiveRow", "integer"),
    ("topics", "integer"), ("readQueues", "long"), ("writeQueues", "long"),
    ("singleGroupTopics", "integer"), ("writeWipedTopics", "integer"), ("orderTopics", "integer"),
    ("writeQueueGini", "double"),
    ("memberAddrs", "array<string>"),
    ("dataset", "string"), ("sourceHost", "string"), ("sourcePort", "integer"), ("sourceDb", "integer"),
    ("date", "string"),
]
_ARROW = {"long": "int64", "string": "string", "integer": "int32", "double": "float64"}


def history_schema() -> str:
    """The table's Spark schema as DDL, which createDataFrame and read.schema take."""
    return ", ".join(f"`{n}` {t}" for n, t in HISTORY_COLUMNS)


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([(n, pa.list_(pa.string()) if t == "array<string>" else pa.type_for_alias(_ARROW[t]))
                      for n, t in HISTORY_COLUMNS])


def is_local(path: Path | str) -> bool:
    """A path on the driver's own disk (no scheme, or ``file:``)."""
    text = str(path)
    return text.startswith("file:") or not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text)


def local_path(path: Path | str) -> Path:
    return Path(re.sub(r"^file:(//)?", "", str(path)))


def history_row(snap: Mapping[str, Any] | None, tops: Mapping[str, Any] | None) -> dict[str, Any]:
    """One run's summary as a history row (fields of a job not run stay null)."""
    base = snap or tops
    assert base is not None
    now = base["redisTimeMs"]
    source = base["source"]
    row: dict[str, Any] = {n: None for n, _ in HISTORY_COLUMNS}
    row.update(
        runAtMs=now, prefix=base["prefix"], reader=base["reader"],
        job="+".join(j for j, s in (("snapshot", snap), ("topics", tops)) if s),
        dataset=source["dataset"], sourceHost=source["host"], sourcePort=source["port"], sourceDb=source["db"],
        date=dt.datetime.fromtimestamp(now / 1000, dt.timezone.utc).date().isoformat(),
    )
    if snap:
        c = snap["counts"]
        row.update({k: c[k] for k in ("clusters", "brokerGroups", "members", "masters", "slaves",
                                      "liveBrokers", "groupsWithoutMaster", "flaggedBrokers",
                                      "membersWithoutLiveRow")})
        row["memberAddrs"] = list(snap["memberAddrs"])
    if tops:
        c = tops["counts"]
        row.update({k: c[k] for k in ("topics", "readQueues", "writeQueues", "singleGroupTopics",
                                      "writeWipedTopics", "orderTopics")})
        row["writeQueueGini"] = tops["skew"]["writeQueues"]["gini"]
        if not snap:
            row.update(clusters=c["clusters"], brokerGroups=c["brokerGroups"])
    return row


def append_history(ctx: Context, snap: Mapping[str, Any] | None, tops: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Append this run's summary to the Parquet dataset ``ctx.history``, partitioned by date."""
    if ctx.history is None:
        return None
    row = history_row(snap, tops)
    ctx.stage("history", f"append run summary to {ctx.history} (date={row['date']})")
    if is_local(ctx.history):
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = local_path(ctx.history) / f"date={row['date']}"
        folder.mkdir(parents=True, exist_ok=True)
        schema = arrow_schema()
        table = pa.Table.from_pylist([{n: row[n] for n, _ in HISTORY_COLUMNS if n != "date"}],
                                     schema=pa.schema([f for f in schema if f.name != "date"]))
        # written under a dot name, then renamed: a reader never sees half a file
        name = f"part-{row['runAtMs']}-{uuid.uuid4().hex[:12]}.parquet"
        pq.write_table(table, folder / f".{name}")
        (folder / f".{name}").rename(folder / name)
    else:
        df = ctx.spark.createDataFrame([tuple(row[n] for n, _ in HISTORY_COLUMNS)], schema=history_schema())
        df.coalesce(1).write.mode("append").partitionBy("date").parquet(str(ctx.history))
    return {"path": str(ctx.history), "date": row["date"], "runAtMs": row["runAtMs"], "dataset": row["dataset"]}


def datasets_in(history: Path | str, spark: Any | None = None) -> set[str | None] | None:
    """The data-set ids of the rows in the history (None: it cannot be read without Spark)."""
    if is_local(history):
        import pyarrow.dataset as ds

        path = local_path(history)
        if not path.is_dir():
            return set()
        table = ds.dataset(path, format="parquet", partitioning="hive", schema=arrow_schema()).to_table(
            columns=["dataset"])
        return set(table.column("dataset").unique().to_pylist())
    if spark is None:
        return None
    try:
        df = spark.read.schema(history_schema()).parquet(str(history))
    except Exception as e:  # AnalysisException: PATH_NOT_FOUND, no run appended yet
        if "PATH_NOT_FOUND" not in str(e) and "does not exist" not in str(e):
            raise
        return set()
    return {r["dataset"] for r in df.select("dataset").distinct().collect()}


def check_history(history: Path | str, dataset: str | None, where: str, spark: Any | None = None) -> None:
    """Refuse a run whose store is not the data set the history already holds."""
    held = datasets_in(history, spark)
    others = sorted(str(d) if d is not None else "none (rows without an id)" for d in (held or set())
                    if d != dataset)
    if others:
        raise JobError(f"history {history} holds data set {', '.join(others)}, but {where} is data set "
                       f"{dataset or 'none'}: one history per data set, so give this store its own --history PATH")


def read_history(ctx: Context) -> Any | None:
    """The dataset as a DataFrame (None when nothing was appended yet)."""
    assert ctx.history is not None
    if is_local(ctx.history):
        import pyarrow.dataset as ds

        path = local_path(ctx.history)
        if not path.is_dir():
            return None
        table = ds.dataset(path, format="parquet", partitioning="hive", schema=arrow_schema()).to_table()
        names = [n for n, _ in HISTORY_COLUMNS]
        return ctx.spark.createDataFrame([tuple(r[n] for n in names) for r in table.to_pylist()],
                                         schema=history_schema())
    try:
        return ctx.spark.read.schema(history_schema()).parquet(str(ctx.history))
    except Exception as e:  # AnalysisException: PATH_NOT_FOUND, no run appended yet
        if "PATH_NOT_FOUND" not in str(e) and "does not exist" not in str(e):
            raise
        return None


def trend(ctx: Context) -> dict[str, Any]:
    """Read the history back: brokers, topics and departures over the runs.

    ``departedMembers`` counts addresses registered at one snapshot and gone at the next:
    they expired or unregistered (the tables do not say which); runs far apart can miss a
    broker that came and went in between. ``membersWithoutLiveRow`` is the number seen timed
    out but not yet removed at each run.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    job = "history"
    if ctx.history is None:
        raise ValueError("history: no history path (--history)")
    ctx.stage(job, f"read history {ctx.history}")
    hist = read_history(ctx)
    empty = {"job": job, "prefix": ctx.prefix, "path": str(ctx.history), "dataset": ctx.dataset, "runs": 0,
             "skipped": {"rows": 0, "datasets": []}, "series": []}
    if hist is None:
        return empty
    hist = hist.where(F.col("prefix") == ctx.prefix)
    # one data set per report: the one asked for, else the latest run's
    seen = rows(hist.groupBy("dataset").agg(F.count(F.lit(1)).alias("rows"), F.max("runAtMs").alias("last")))
    if not seen:
        return empty
    dataset = ctx.dataset if ctx.dataset is not None else max(seen, key=lambda r: r["last"])["dataset"]
    others = [r for r in seen if r["dataset"] != dataset]
    if others:
        log.warning("history %s: skipped %d rows of other data sets (%s); reporting data set %s",
                    ctx.history, sum(r["rows"] for r in others),
                    ", ".join(str(r["dataset"]) for r in others), dataset)
    if dataset is None:  # rows of a history written before stores were given an id
        log.warning("history %s: the rows reported carry no data-set id, so rows of two stores without one "
                    "cannot be told apart in them; runs appending to a history now give their store an id",
                    ctx.history)
    hist = hist.where(F.col("dataset").eqNullSafe(F.lit(dataset)))
    empty.update(dataset=dataset, skipped={"rows": sum(r["rows"] for r in others),
                                           "datasets": sorted(str(r["dataset"]) for r in others)})
    ctx.stage(job, "departures and arrivals between consecutive snapshots")
    w = Window.partitionBy("prefix").orderBy("runAtMs")
    snaps = hist.where(F.col("memberAddrs").isNotNull())
    prev = F.lag("memberAddrs").over(w)
    moves = snaps.select(
        "runAtMs",
        F.when(prev.isNull(), F.lit(None)).otherwise(F.array_except(prev, F.col("memberAddrs"))).alias("departed"),
        F.when(prev.isNull(), F.lit(None)).otherwise(F.array_except(F.col("memberAddrs"), prev)).alias("joined"),
    )
    series_df = hist.join(moves, "runAtMs", "left").select(
        "runAtMs", F.col("date").cast("string").alias("date"), "job", "reader",
        "clusters", "brokerGroups", "members", "liveBrokers", "masters", "slaves",
        "groupsWithoutMaster", "flaggedBrokers", "membersWithoutLiveRow",
        "topics", "writeQueues", "readQueues", "singleGroupTopics", "writeWipedTopics",
        "orderTopics", "writeQueueGini", "dataset", "sourceHost", "sourcePort", "sourceDb",
        F.size("departed").alias("departedMembers"), F.size("joined").alias("joinedMembers"),
        F.sort_array("departed").alias("departed"), F.sort_array("joined").alias("joined"),
    ).orderBy("runAtMs")
    series = rows(series_df)
    for r in series:
        r["runAt"] = iso(r["runAtMs"])
        for k in ("departedMembers", "joinedMembers"):
            if r[k] is not None and r[k] < 0:  # size(null) is -1
                r[k] = None
    snap_runs = [r for r in series if r["members"] is not None]
    topic_runs = [r for r in series if r["topics"] is not None]
    last = series[-1] if series else {}
    source = {"host": last.get("sourceHost"), "port": last.get("sourcePort"), "db": last.get("sourceDb"),
              "prefix": ctx.prefix, "dataset": dataset}
    summary: dict[str, Any] = {
        **empty,
        "source": source,
        "runs": len(series),
        "first": series[0]["runAt"] if series else None,
        "last": series[-1]["runAt"] if series else None,
        "totals": {
            "departedMembers": sum(r["departedMembers"] or 0 for r in snap_runs),
            "joinedMembers": sum(r["joinedMembers"] or 0 for r in snap_runs),
        },
        "change": {
            "liveBrokers": (snap_runs[-1]["liveBrokers"] - snap_runs[0]["liveBrokers"]) if snap_runs else None,
            "members": (snap_runs[-1]["members"] - snap_runs[0]["members"]) if snap_runs else None,
            "topics": (topic_runs[-1]["topics"] - topic_runs[0]["topics"]) if topic_runs else None,
        },
        "series": series,
    }
    if ctx.out is not None:
        # beside the history dataset, never in it: its folder stays one Parquet dataset
        ctx.stage(job, f"write trend table and chart to {ctx.out / 'trend'}")
        summary["outputs"] = {
            "trend": write_table(ctx, "trend", "trend", series),
            "trendChart": chart(ctx, charts.trend, "trend", "trend", series, title="Registry trend",
                                caption=f"{{{ctx.prefix}}} at redis {source['host']}:{source['port']} db {source['db']}, "
                                        f"data set {dataset or 'unnamed'}"),
        }
    return summary
