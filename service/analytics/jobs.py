"""The analytics jobs: snapshot, topics (topic distribution), history (trend report).

Each job reads the live tables through ``reader.read_table`` (spark-redis or the built-in
reader, the jobs cannot tell), aggregates with Spark, and returns a JSON-ready summary;
when an output folder is given it also writes Parquet tables and PNG charts there.
``now`` is Redis time (``TIME``), the clock the registry's scripts stamp rows with, so the
driver's clock never matters.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from service.keys import ORDER_TOPIC_CONFIG, Keys

from . import charts
from .reader import choose_reader, read_table, redis_client

log = logging.getLogger("service.analytics")

DEFAULT_TIMEOUT_MS = 120_000  # a live row without heartbeatTimeoutMillis (BROKER_CHANNEL_EXPIRED_TIME)
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1


@dataclass
class Context:
    """What every job needs: the session, where the tables are, where results go."""

    spark: Any
    prefix: str = "rmq"
    reader: str = "auto"
    options: Mapping[str, Any] = field(default_factory=dict)  # read + connection options
    out: Path | None = None  # Parquet tables and PNG charts; None: summary only
    charts: bool = True
    flag_ratio: float = 0.8
    history: Path | None = None  # Parquet dataset the runs append to; None: no history
    now_ms: int | None = None  # fixed "now" (ms); None: Redis TIME at the start of the job
    _tables: dict[str, Any] = field(default_factory=dict, repr=False)
    _stage: int = field(default=0, repr=False)

    @property
    def keys(self) -> Keys:
        return Keys(self.prefix)

    @property
    def reader_used(self) -> str:
        return choose_reader(self.spark, self.reader)

    def stage(self, job: str, text: str) -> None:
        self._stage += 1
        log.info("[%s] stage %d: %s", job, self._stage, text)

    def read(self, kind: str) -> Any:
        """A table, read once per context and cached (the jobs reuse it)."""
        if kind not in self._tables:
            self._tables[kind] = read_table(
                self.spark, kind, options=self.options, prefix=self.prefix, reader=self.reader
            ).cache()
        return self._tables[kind]

    def redis(self) -> Any:
        return redis_client(self.spark, self.options)

    def redis_now_ms(self) -> int:
        if self.now_ms is None:
            client = self.redis()
            try:
                sec, usec = client.time()
            finally:
                client.close()
            self.now_ms = int(sec) * 1000 + int(usec) // 1000
        return self.now_ms

    def release(self) -> None:
        for df in self._tables.values():
            df.unpersist()
        self._tables.clear()


# --------------------------------------------------------------------------- helpers

def gini(values: Sequence[float]) -> float:
    """Gini coefficient of non-negative values: 0 = perfectly even, (n-1)/n = all on one."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    total = sum(xs)
    if n == 0 or total == 0:
        return 0.0
    weighted = sum((i + 1) * x for i, x in enumerate(xs))
    return 2.0 * weighted / (n * total) - (n + 1.0) / n


def skew(values: Sequence[float]) -> dict[str, Any]:
    """max, mean, max/mean and Gini of a distribution (over broker groups)."""
    n = len(values)
    total = float(sum(values))
    mean = total / n if n else 0.0
    mx = float(max(values)) if n else 0.0
    return {
        "groups": n,
        "total": int(total) if total.is_integer() else total,
        "min": float(min(values)) if n else 0.0,
        "max": mx,
        "mean": round(mean, 6),
        "maxOverMean": round(mx / mean, 6) if mean else None,
        "gini": round(gini(values), 6),
    }


def _rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def _summary_head(ctx: Any, job: str, now: int) -> dict[str, Any]:
    """The fields every job's summary starts with: what ran, on what, at what Redis time."""
    return {"job": job, "prefix": ctx.prefix, "reader": ctx.reader_used, "redisTimeMs": now, "redisTime": _iso(now)}


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def _write_table(ctx: Context, job: str, name: str, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """A collected result as one Parquet file in the output folder (pyarrow, on the driver:
    the results are aggregates, small, and go beside the charts and the JSON)."""
    if ctx.out is None:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = ctx.out / job / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), path)
    return str(path)


def _chart(ctx: Context, fn: Any, job: str, name: str, *args: Any, **kw: Any) -> str | None:
    if ctx.out is None or not ctx.charts:
        return None
    return str(fn(*args, ctx.out / job / f"{name}.png", **kw))


# --------------------------------------------------------------------------- snapshot

def snapshot(ctx: Context) -> dict[str, Any]:
    """Clusters, broker groups and their members, groups without a master, heartbeat ages.

    Two Spark actions: one row per broker address (member rows full-outer-joined with live
    rows, ages computed against Redis time), then one row per broker group.
    """
    from pyspark.sql import functions as F

    job = "snapshot"
    now = ctx.redis_now_ms()
    ctx.stage(job, f"read tables broker, member, live (reader {ctx.reader_used}, Redis time {now})")
    brokers = ctx.read("broker").select("cluster", "brokerName")
    members = ctx.read("member").select(
        F.col("key").alias("brokerAddr"), "cluster", "brokerName", "brokerId", F.lit(True).alias("member"))
    live = ctx.read("live").select(
        F.col("key").alias("brokerAddr"),
        F.col("cluster").alias("liveCluster"), F.col("brokerName").alias("liveBrokerName"),
        F.col("brokerId").alias("liveBrokerId"), "haServerAddr", "lastUpdateTimestamp",
        F.coalesce("heartbeatTimeoutMillis", F.lit(DEFAULT_TIMEOUT_MS)).alias("timeoutMs"),
        F.lit(True).alias("alive"),
    )

    ctx.stage(job, f"brokers: membership, liveness, heartbeat age (flag at {ctx.flag_ratio:.0%} of timeout)")
    age = F.lit(now) - F.col("lastUpdateTimestamp")
    addrs_df = members.join(live, "brokerAddr", "full_outer").select(
        "brokerAddr",
        F.coalesce("cluster", "liveCluster").alias("cluster"),
        F.coalesce("brokerName", "liveBrokerName").alias("brokerName"),
        F.coalesce("brokerId", "liveBrokerId").alias("brokerId"),
        F.coalesce("member", F.lit(False)).alias("member"),
        F.coalesce("alive", F.lit(False)).alias("alive"),
        "haServerAddr", "lastUpdateTimestamp", "timeoutMs",
        age.alias("ageMs"),
        F.round(age / F.col("timeoutMs"), 6).alias("ageRatio"),
        (age >= F.lit(ctx.flag_ratio) * F.col("timeoutMs")).alias("flagged"),
        (F.col("lastUpdateTimestamp") + F.col("timeoutMs") - F.lit(now)).alias("msUntilExpiry"),
    ).cache()
    addrs = _rows(addrs_df.orderBy(F.desc_nulls_last("ageMs"), "brokerAddr"))

    ctx.stage(job, "broker groups: masters, slaves, live members")
    registered = addrs_df.where(F.col("member"))
    is_master = F.col("brokerId") == 0
    per_group = registered.groupBy("brokerName").agg(
        F.count(F.lit(1)).alias("members"),
        F.sum(F.when(is_master, 1).otherwise(0)).alias("masters"),
        F.sum(F.when(~is_master, 1).otherwise(0)).alias("slaves"),
        F.sum(F.when(F.col("alive"), 1).otherwise(0)).alias("liveMembers"),
        F.max(F.when(is_master, F.col("brokerAddr"))).alias("masterAddr"),
        F.max(F.when(is_master, F.col("alive"))).alias("masterAlive"),
        F.sort_array(F.collect_list(F.struct("brokerId", "brokerAddr", "alive"))).alias("addrs"),
    )
    groups_df = brokers.join(per_group, "brokerName", "left").select(
        "cluster", "brokerName",
        F.coalesce("members", F.lit(0)).alias("members"),
        (F.coalesce("masters", F.lit(0)) > 0).alias("hasMaster"),
        "masterAddr",
        F.coalesce("masterAlive", F.lit(False)).alias("masterAlive"),
        F.coalesce("slaves", F.lit(0)).alias("slaves"),
        F.coalesce("liveMembers", F.lit(0)).alias("liveMembers"),
        F.coalesce("addrs", F.array()).alias("addrs"),
    ).orderBy("cluster", "brokerName")
    groups = _rows(groups_df)
    addrs_df.unpersist()

    heartbeat = [a for a in addrs if a["alive"]]
    unseen = [{k: a[k] for k in ("brokerAddr", "cluster", "brokerName", "brokerId")}
              for a in sorted(addrs, key=lambda a: a["brokerAddr"]) if a["member"] and not a["alive"]]
    clusters: dict[str, list[str]] = {}
    for g in groups:
        clusters.setdefault(g["cluster"], []).append(g["brokerName"])
    flagged = [b["brokerAddr"] for b in heartbeat if b["flagged"]]
    summary: dict[str, Any] = {
        **_summary_head(ctx, job, now),
        "counts": {
            "clusters": len(clusters),
            "brokerGroups": len(groups),
            "members": sum(g["members"] for g in groups),
            "masters": sum(1 for g in groups if g["hasMaster"]),
            "slaves": sum(g["slaves"] for g in groups),
            "liveBrokers": len(heartbeat),
            "groupsWithoutMaster": sum(1 for g in groups if not g["hasMaster"]),
            "groupsWithoutLiveMaster": sum(1 for g in groups if not g["masterAlive"]),
            "groupsWithoutSlave": sum(1 for g in groups if g["slaves"] == 0),
            "flaggedBrokers": len(flagged),
            "membersWithoutLiveRow": len(unseen),
        },
        "clusters": [{"cluster": c, "brokerGroups": len(names), "brokerNames": sorted(names)}
                     for c, names in sorted(clusters.items())],
        "groups": groups,
        "groupsWithoutMaster": [g["brokerName"] for g in groups if not g["hasMaster"]],
        "groupsWithoutLiveMaster": [g["brokerName"] for g in groups if not g["masterAlive"]],
        "heartbeat": {
            "flagRatio": ctx.flag_ratio,
            "flagged": flagged,
            "brokers": [{k: b[k] for k in ("brokerAddr", "cluster", "brokerName", "brokerId", "ageMs",
                                           "timeoutMs", "ageRatio", "flagged", "msUntilExpiry",
                                           "lastUpdateTimestamp")} for b in heartbeat],
        },
        # timed out (TTL lapsed) and not yet removed by the scanner: the registry already
        # treats them as dead
        "membersWithoutLiveRow": unseen,
        "memberAddrs": sorted(a["brokerAddr"] for a in addrs if a["member"]),
    }

    if ctx.out is not None:
        ctx.stage(job, f"write Parquet tables and charts to {ctx.out / job}")
        summary["outputs"] = {
            "groups": _write_table(ctx, job, "groups", groups),
            "brokers": _write_table(ctx, job, "brokers", addrs),
            "heartbeatChart": _chart(ctx, charts.heartbeat_age, job, "heartbeat_age", heartbeat,
                                     flag_ratio=ctx.flag_ratio,
                                     title=f"Heartbeat age ({_iso(now)})"),
        }
    return summary


# --------------------------------------------------------------------------- topics

def order_topics(ctx: Context) -> dict[str, str]:
    """KV namespace ORDER_TOPIC_CONFIG (topic -> orderTopicConf), read on the driver."""
    client = ctx.redis()
    try:
        return dict(sorted(client.hgetall(ctx.keys.kv(ORDER_TOPIC_CONFIG)).items()))
    finally:
        client.close()


def topics(ctx: Context) -> dict[str, Any]:
    """Topic distribution over broker groups and clusters, skew, redundancy, perm, order.

    Two Spark actions: one row per broker group, one row per topic (with the queue rows
    whose read and write counts differ or whose write bit is clear).
    """
    from pyspark.sql import functions as F

    job = "topics"
    now = ctx.redis_now_ms()
    ctx.stage(job, f"read tables queue, broker (reader {ctx.reader_used})")
    brokers = ctx.read("broker").select("cluster", "brokerName")
    queues = ctx.read("queue").select(
        "topic", "brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
    qb = queues.join(F.broadcast(brokers), "brokerName", "left")

    ctx.stage(job, "topics and read/write queues per broker group")
    per_group_df = brokers.join(
        queues.groupBy("brokerName").agg(
            F.count(F.lit(1)).alias("topics"),  # one queue row per (topic, brokerName)
            F.sum("readQueueNums").alias("readQueues"),
            F.sum("writeQueueNums").alias("writeQueues"),
        ), "brokerName", "left",
    ).select(
        "cluster", "brokerName",
        F.coalesce("topics", F.lit(0)).alias("topics"),
        F.coalesce("readQueues", F.lit(0)).cast("long").alias("readQueues"),
        F.coalesce("writeQueues", F.lit(0)).cast("long").alias("writeQueues"),
    ).orderBy("cluster", "brokerName")
    per_group = _rows(per_group_df)

    ctx.stage(job, "per topic: broker groups, clusters, read/write mismatch, write permission")
    writable = F.col("perm").bitwiseAND(F.lit(PERM_WRITE)) != 0
    mismatch = F.col("readQueueNums") != F.col("writeQueueNums")
    per_topic_df = qb.groupBy("topic").agg(
        F.count(F.lit(1)).alias("brokerGroups"),
        F.sort_array(F.collect_list("brokerName")).alias("brokerNames"),
        F.sort_array(F.collect_set("cluster")).alias("clusters"),
        F.sum("readQueueNums").cast("long").alias("readQueues"),
        F.sum("writeQueueNums").cast("long").alias("writeQueues"),
        F.sort_array(F.collect_list(F.when(mismatch, F.struct(
            "brokerName", "readQueueNums", "writeQueueNums")))).alias("mismatched"),
        F.sort_array(F.collect_list(F.when(~writable, F.struct("brokerName", "perm")))).alias("wiped"),
        F.sum(F.when(F.col("cluster").isNull(), 1).otherwise(0)).alias("rowsWithoutBroker"),
    ).orderBy("topic")
    per_topic = _rows(per_topic_df)

    ctx.stage(job, "order topics from KV ORDER_TOPIC_CONFIG")
    kv = order_topics(ctx)
    routed = {t["topic"] for t in per_topic}

    ctx.stage(job, "per cluster, skew (max/mean, Gini), redundancy")
    by_cluster: dict[str, list[dict[str, Any]]] = {}
    for g in per_group:
        by_cluster.setdefault(g["cluster"], []).append(g)
    topics_in: dict[str, int] = {c: 0 for c in by_cluster}
    for t in per_topic:
        for c in t["clusters"]:
            topics_in[c] = topics_in.get(c, 0) + 1
    per_cluster = [{
        "cluster": c,
        "topics": topics_in.get(c, 0),
        "brokerGroups": len(gs),
        "brokerGroupsWithQueues": sum(1 for g in gs if g["topics"]),
        "readQueues": sum(g["readQueues"] for g in gs),
        "writeQueues": sum(g["writeQueues"] for g in gs),
    } for c, gs in sorted(by_cluster.items())]
    writes = [g["writeQueues"] for g in per_group]
    reads = [g["readQueues"] for g in per_group]
    single = [t["topic"] for t in per_topic if t["brokerGroups"] == 1]
    mismatch_rows = [{"topic": t["topic"], **m} for t in per_topic for m in t["mismatched"]]
    wiped_rows = [{"topic": t["topic"], **w} for t in per_topic for w in t["wiped"]]
    unwritable = [t["topic"] for t in per_topic if len(t["wiped"]) == t["brokerGroups"]]
    summary: dict[str, Any] = {
        **_summary_head(ctx, job, now),
        "counts": {
            "topics": len(per_topic),
            "queueRows": sum(t["brokerGroups"] for t in per_topic),
            "brokerGroups": len(per_group),
            "clusters": len(by_cluster),
            "readQueues": sum(reads),
            "writeQueues": sum(writes),
            "singleGroupTopics": len(single),
            "readWriteMismatchTopics": sum(1 for t in per_topic if t["mismatched"]),
            "writeWipedTopics": sum(1 for t in per_topic if t["wiped"]),
            "unwritableTopics": len(unwritable),
            "orderTopics": len(kv),
            "queueRowsWithoutBroker": sum(t["rowsWithoutBroker"] for t in per_topic),
        },
        "perBrokerGroup": per_group,
        "perCluster": per_cluster,
        "skew": {
            "writeQueues": skew(writes),
            "readQueues": skew(reads),
            "topics": skew([g["topics"] for g in per_group]),
            "byCluster": {
                c: {"writeQueues": skew([g["writeQueues"] for g in gs]),
                    "readQueues": skew([g["readQueues"] for g in gs])}
                for c, gs in sorted(by_cluster.items())
            },
        },
        "singleGroupTopics": single,
        "readWriteMismatch": mismatch_rows,
        "writeWiped": wiped_rows,
        "unwritableTopics": unwritable,
        "orderTopics": [{"topic": t, "orderTopicConf": conf, "routed": t in routed} for t, conf in kv.items()],
    }

    if ctx.out is not None:
        ctx.stage(job, f"write Parquet tables and charts to {ctx.out / job}")
        summary["outputs"] = {
            "perBrokerGroup": _write_table(ctx, job, "per_broker_group", per_group),
            "perCluster": _write_table(ctx, job, "per_cluster", per_cluster),
            "perTopic": _write_table(ctx, job, "per_topic", per_topic),
            "queueChart": _chart(ctx, charts.queue_distribution, job, "queue_distribution", per_group,
                                 title=f"Queues per broker group ({_iso(now)})"),
        }
    return summary


# --------------------------------------------------------------------------- history

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
    ("date", "string"),
]


def history_schema() -> Any:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string("struct<" + ",".join(f"{n}:{t}" for n, t in HISTORY_COLUMNS) + ">")


def history_row(snap: Mapping[str, Any] | None, tops: Mapping[str, Any] | None) -> dict[str, Any]:
    """One run's summary as a history row (fields of a job not run stay null)."""
    base = snap or tops
    assert base is not None
    now = base["redisTimeMs"]
    row: dict[str, Any] = {n: None for n, _ in HISTORY_COLUMNS}
    row.update(
        runAtMs=now, prefix=base["prefix"], reader=base["reader"],
        job="+".join(j for j, s in (("snapshot", snap), ("topics", tops)) if s),
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
    df = ctx.spark.createDataFrame([tuple(row[n] for n, _ in HISTORY_COLUMNS)], schema=history_schema())
    df.write.mode("append").partitionBy("date").parquet(str(ctx.history))
    return {"path": str(ctx.history), "date": row["date"], "runAtMs": row["runAtMs"]}


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
    try:
        hist = ctx.spark.read.schema(history_schema()).parquet(str(ctx.history))
    except Exception as e:  # AnalysisException: PATH_NOT_FOUND, no run appended yet
        if "PATH_NOT_FOUND" not in str(e) and "does not exist" not in str(e):
            raise
        return {"job": job, "prefix": ctx.prefix, "path": str(ctx.history), "runs": 0, "series": []}
    hist = hist.where(F.col("prefix") == ctx.prefix)
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
        "orderTopics", "writeQueueGini",
        F.size("departed").alias("departedMembers"), F.size("joined").alias("joinedMembers"),
        F.sort_array("departed").alias("departed"), F.sort_array("joined").alias("joined"),
    ).orderBy("runAtMs")
    series = _rows(series_df)
    for r in series:
        r["runAt"] = _iso(r["runAtMs"])
        for k in ("departedMembers", "joinedMembers"):
            if r[k] is not None and r[k] < 0:  # size(null) is -1
                r[k] = None
    snap_runs = [r for r in series if r["members"] is not None]
    topic_runs = [r for r in series if r["topics"] is not None]
    summary: dict[str, Any] = {
        "job": job,
        "prefix": ctx.prefix,
        "path": str(ctx.history),
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
            "trend": _write_table(ctx, "trend", "trend", series),
            "trendChart": _chart(ctx, charts.trend, "trend", "trend", series, title="Registry trend"),
        }
    return summary


# --------------------------------------------------------------------------- runner

JOBS = ("snapshot", "topics", "all", "history")
READS_REDIS = frozenset({"snapshot", "topics", "all"})  # history reads only its own dataset


def run(ctx: Context, job: str) -> dict[str, Any]:
    """Run a job by name; snapshot/topics/all append to the history when a path is set."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}; one of {', '.join(JOBS)}")
    t0 = time.monotonic()
    try:
        if job == "history":
            result = trend(ctx)
        else:
            snap = snapshot(ctx) if job in ("snapshot", "all") else None
            tops = topics(ctx) if job in ("topics", "all") else None
            appended = append_history(ctx, snap, tops)
            if job == "all":
                result = {"job": "all", "snapshot": snap, "topics": tops}
            else:
                result = dict(snap or tops or {})
            result["history"] = appended
    finally:
        ctx.release()
    result["elapsedSeconds"] = round(time.monotonic() - t0, 3)
    log.info("[%s] done in %.1f s", job, result["elapsedSeconds"])
    return result


def to_json(result: Mapping[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False, default=str)

