"""The snapshot job: clusters, broker groups and their members, heartbeat ages."""

from __future__ import annotations

from typing import Any

from . import charts
from .context import Context, by_cluster_and_name, chart, iso, rows, summary_head, write_table

DEFAULT_TIMEOUT_MS = 120_000  # a live row without heartbeatTimeoutMillis (BROKER_CHANNEL_EXPIRED_TIME)


def snapshot(ctx: Context) -> dict[str, Any]:
    """Clusters, broker groups and their members, groups without a master, heartbeat ages.

    Two Spark actions: one row per broker address (member rows full-outer-joined with live
    rows, ages computed against Redis time), then one row per broker group.
    """
    from pyspark.sql import functions as F

    job = "snapshot"
    now = ctx.redis_now_ms()
    ctx.stage(job, f"read tables broker, member, live (reader {ctx.reader_used}, Redis time {now})")
    brokers = ctx.read("broker").select("cluster", "brokerName", "enableActingMaster", "zoneName")
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
    # a few hundred rows each: sorted here, not by a Spark sort (a sampling job and a shuffle)
    addrs = sorted(rows(addrs_df), key=lambda a: (a["ageMs"] is None, -(a["ageMs"] or 0), a["brokerAddr"]))

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
        # RocketMQ 5: without a master, such a group's smallest-id slave serves reads
        F.coalesce(F.col("enableActingMaster") == "1", F.lit(False)).alias("actingMaster"),
        "zoneName",
    )
    groups = sorted(rows(groups_df), key=by_cluster_and_name)
    addrs_df.unpersist()

    heartbeat = [a for a in addrs if a["alive"]]
    unseen = [{k: a[k] for k in ("brokerAddr", "cluster", "brokerName", "brokerId")}
              for a in sorted(addrs, key=lambda a: a["brokerAddr"]) if a["member"] and not a["alive"]]
    clusters: dict[str, list[str]] = {}
    for g in groups:
        clusters.setdefault(g["cluster"], []).append(g["brokerName"])
    flagged = [b["brokerAddr"] for b in heartbeat if b["flagged"]]
    summary: dict[str, Any] = {
        **summary_head(ctx, job, now),
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
        "groupsWithoutSlave": [g["brokerName"] for g in groups if g["slaves"] == 0],
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
            "groups": write_table(ctx, job, "groups", groups),
            "brokers": write_table(ctx, job, "brokers", addrs),
            "heartbeatChart": chart(ctx, charts.heartbeat_age, job, "heartbeat_age", heartbeat,
                                    flag_ratio=ctx.flag_ratio, timed_out=unseen,
                                    title=f"Heartbeat age ({iso(now)})", caption=ctx.begin().caption()),
        }
    return summary
