"""The topics job: topic distribution over broker groups and clusters, skew (max/mean,
Gini), redundancy, write permission, order topics."""

from __future__ import annotations

from typing import Any, Sequence

from service.keys import ORDER_TOPIC_CONFIG

from . import arrow, charts
from .context import Context, by_cluster_and_name, chart, iso, rows, summary_head, write_table

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1


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
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    job = "topics"
    now = ctx.redis_now_ms()
    ctx.stage(job, f"read tables queue, broker (reader {ctx.reader_used})")
    brokers = ctx.read("broker").select("cluster", "brokerName")
    queues = ctx.read("queue").select(
        "topic", "brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
    qb = queues.join(F.broadcast(brokers), "brokerName", "left")

    ctx.stage(job, "topics and read/write queues per broker group")
    # a queue row whose perm lost its write bit (a wiped broker) takes no writes: its
    # writeQueueNums are not write queues anyone can use, so they are not counted as such
    writable = F.col("perm").bitwiseAND(F.lit(PERM_WRITE)) != 0
    write_queues = F.when(writable, F.col("writeQueueNums")).otherwise(F.lit(0))
    per_group_df = brokers.join(
        queues.groupBy("brokerName").agg(
            F.count(F.lit(1)).alias("topics"),  # one queue row per (topic, brokerName)
            F.sum("readQueueNums").alias("readQueues"),
            F.sum(write_queues).alias("writeQueues"),
        ), "brokerName", "left",
    ).select(
        "cluster", "brokerName",
        F.coalesce("topics", F.lit(0)).alias("topics"),
        F.coalesce("readQueues", F.lit(0)).cast("long").alias("readQueues"),
        F.coalesce("writeQueues", F.lit(0)).cast("long").alias("writeQueues"),
    )
    per_group = sorted(rows(per_group_df), key=by_cluster_and_name)

    ctx.stage(job, "per topic: broker groups, clusters, read/write mismatch, write permission")
    mismatch = F.col("readQueueNums") != F.col("writeQueueNums")
    per_topic_df = qb.groupBy("topic").agg(
        F.count(F.lit(1)).alias("brokerGroups"),
        F.sort_array(F.collect_list("brokerName")).alias("brokerNames"),
        F.sort_array(F.collect_set("cluster")).alias("clusters"),
        F.sum("readQueueNums").cast("long").alias("readQueues"),
        F.sum(write_queues).cast("long").alias("writeQueues"),
        F.sort_array(F.collect_list(F.when(mismatch, F.struct(
            "brokerName", "readQueueNums", "writeQueueNums")))).alias("mismatched"),
        F.sort_array(F.collect_list(F.when(~writable, F.struct("brokerName", "perm")))).alias("wiped"),
        F.sum(F.when(F.col("cluster").isNull(), 1).otherwise(0)).alias("rowsWithoutBroker"),
    )
    # one row per topic (~110,000 at fleet size): collected as Arrow and sorted there, then
    # summarised column-wise; a Python dict per topic would cost more than the aggregation
    per_topic = arrow.collect(per_topic_df).sort_by("topic")

    ctx.stage(job, "order topics from KV ORDER_TOPIC_CONFIG")
    kv = order_topics(ctx)
    routed = pc.is_in(pa.array(list(kv), pa.string()), value_set=per_topic["topic"]).to_pylist()

    ctx.stage(job, "per cluster, skew (max/mean, Gini), redundancy")
    by_cluster: dict[str, list[dict[str, Any]]] = {}
    for g in per_group:
        by_cluster.setdefault(g["cluster"], []).append(g)
    topics_in = {c: 0 for c in by_cluster}
    clusters_of = pc.list_flatten(per_topic["clusters"])
    for count in pc.value_counts(clusters_of).to_pylist():
        topics_in[count["values"]] = count["counts"]
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
    groups_of = per_topic["brokerGroups"]
    single = per_topic.filter(pc.equal(groups_of, 1))["topic"].to_pylist()
    mismatched = per_topic.filter(pc.greater(pc.list_value_length(per_topic["mismatched"]), 0))
    mismatch_rows = [{"topic": t["topic"], **m} for t in mismatched.select(["topic", "mismatched"]).to_pylist()
                     for m in t["mismatched"]]
    wiped = per_topic.filter(pc.greater(pc.list_value_length(per_topic["wiped"]), 0))
    wiped_rows = [{"topic": t["topic"], **w} for t in wiped.select(["topic", "wiped"]).to_pylist() for w in t["wiped"]]
    unwritable = wiped.filter(pc.equal(pc.list_value_length(wiped["wiped"]), wiped["brokerGroups"]))["topic"].to_pylist()
    summary: dict[str, Any] = {
        **summary_head(ctx, job, now),
        "counts": {
            "topics": per_topic.num_rows,
            "queueRows": int(pc.sum(groups_of).as_py() or 0),
            "brokerGroups": len(per_group),
            "clusters": len(by_cluster),
            "readQueues": sum(reads),
            "writeQueues": sum(writes),
            "singleGroupTopics": len(single),
            "readWriteMismatchTopics": mismatched.num_rows,
            "writeWipedTopics": wiped.num_rows,
            "unwritableTopics": len(unwritable),
            "orderTopics": len(kv),
            "queueRowsWithoutBroker": int(pc.sum(per_topic["rowsWithoutBroker"]).as_py() or 0),
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
        "orderTopics": [{"topic": t, "orderTopicConf": conf, "routed": r} for (t, conf), r in zip(kv.items(), routed)],
    }

    if ctx.out is not None:
        ctx.stage(job, f"write Parquet tables and charts to {ctx.out / job}")
        summary["outputs"] = {
            "perBrokerGroup": write_table(ctx, job, "per_broker_group", per_group),
            "perCluster": write_table(ctx, job, "per_cluster", per_cluster),
            "perTopic": write_table(ctx, job, "per_topic", per_topic),
            "queueChart": chart(ctx, charts.queue_distribution, job, "queue_distribution", per_group,
                                title=f"Queues per broker group ({iso(now)})", caption=ctx.begin().caption()),
        }
    return summary
