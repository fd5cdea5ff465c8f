"""The analytics jobs by name: snapshot, topics, all (both, one history row), history.

Each job reads the live tables through ``reader.read_table`` (the readers are
interchangeable), aggregates with Spark, and returns a JSON-ready summary; when an output
folder is given it also writes Parquet tables and PNG charts there. The jobs themselves
live in ``snapshot.py``, ``topics.py`` and ``history.py``; ``context.py`` holds what they share.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Mapping

from .context import Context
from .history import append_history, check_history, trend
from .snapshot import snapshot
from .topics import gini, skew, topics

__all__ = ["Context", "JOBS", "READS_REDIS", "gini", "run", "skew", "to_json"]

log = logging.getLogger("service.analytics")

JOBS = ("snapshot", "topics", "all", "history")
READS_REDIS = frozenset({"snapshot", "topics", "all"})  # history reads only its own dataset


def run(ctx: Context, job: str) -> dict[str, Any]:
    """Run a job by name; snapshot/topics/all append to the history when a path is set.

    A run that fails or is refused (an empty store, a replica that lost its primary, a
    store of another data set than the history's) appends nothing: the history row is the
    run's last step.
    """
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}; one of {', '.join(JOBS)}")
    t0 = time.monotonic()
    try:
        if job == "history":
            result = trend(ctx)
        else:
            if ctx.history is not None:  # before any table is read: one history per data set
                check_history(ctx.history, ctx.begin().dataset, ctx.where, ctx.spark)
            snap = snapshot(ctx) if job in ("snapshot", "all") else None
            tops = topics(ctx) if job in ("topics", "all") else None
            appended = append_history(ctx, snap, tops)
            if job == "all":
                result = {"job": "all", "source": (snap or tops or {})["source"], "snapshot": snap, "topics": tops}
            else:
                result = dict(snap or tops or {})
            result["history"] = appended
            result["redisCost"] = ctx.cost()
            cost = result["redisCost"]
            log.info("[%s] Redis cost: %d commands, %.3f s of Redis time (%s)", job, cost["commands"],
                     cost["redisSeconds"], ", ".join(f"{k} {v['calls']}" for k, v in cost["byCommand"].items()))
    finally:
        ctx.release()
    sc = ctx.spark.sparkContext
    result["spark"] = {"master": sc.master, "applicationId": sc.applicationId,
                       "shufflePartitions": ctx.spark.conf.get("spark.sql.shuffle.partitions")}
    result["elapsedSeconds"] = round(time.monotonic() - t0, 3)
    log.info("[%s] done in %.1f s", job, result["elapsedSeconds"])
    return result


def to_json(result: Mapping[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False, default=str)
