"""Command line of the analytics jobs.

``python -m service.analytics <job> ...``, ``rmq-registry analytics <job> ...`` (which calls
``main``) and ``spark-submit service/analytics/job.py <job> ...`` all end here.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

JOB_HELP = {
    "snapshot": "clusters, broker groups, members, groups without a master, heartbeat ages",
    "topics": "topic distribution: per group/cluster, queue skew (max/mean, Gini), redundancy, perm, order topics",
    "all": "snapshot and topics in one run (one history row with both)",
    "history": "trend report read back from the history dataset",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rmq-registry analytics",
        description="PySpark jobs on the registry's live route tables in Redis.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="jobs:\n" + "\n".join(f"  {k:9} {v}" for k, v in JOB_HELP.items()),
    )
    p.add_argument("job", choices=list(JOB_HELP))
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL"),
                   help="redis[s]://[user:pass@]host:port/db (default $REDIS_URL; unset: the "
                        "Spark conf spark.redis.host/port/user/auth/ssl, else localhost:6379)")
    p.add_argument("--prefix", default=os.environ.get("RMQ_KEY_PREFIX", "rmq"),
                   help="key prefix, keys are {<prefix>}:... (default $RMQ_KEY_PREFIX or rmq)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("RMQ_ANALYTICS_OUT", "analytics-out")),
                   help="folder for Parquet tables and PNG charts (default ./analytics-out)")
    p.add_argument("--no-out", action="store_true", help="write no tables or charts, only the summary")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument("--reader", choices=["auto", "spark-redis", "builtin"], default="auto",
                   help="auto: spark-redis when its jar is on the classpath, else the built-in reader")
    p.add_argument("--history", type=Path, default=None,
                   help="history Parquet dataset (partitioned by date); default <out>/history")
    p.add_argument("--no-history", action="store_true", help="do not append this run to the history")
    p.add_argument("--json", default="-", metavar="FILE", help="summary JSON file (default - : stdout)")
    p.add_argument("--partitions", type=int, default=None, help="partitions.number of each read (default 3)")
    p.add_argument("--scan-count", type=int, default=None, help="scan.count (default 100)")
    p.add_argument("--pipeline", type=int, default=None, help="max.pipeline.size (default 100)")
    p.add_argument("--flag-ratio", type=float, default=0.8,
                   help="flag brokers whose heartbeat age is at least this fraction of their timeout")
    p.add_argument("--master", default=None,
                   help="Spark master for a new session (default: spark-submit's, else local[*])")
    p.add_argument("--log-level", default="INFO")
    return p


def read_options(args: argparse.Namespace) -> dict[str, str]:
    from .reader import url_to_options

    opts: dict[str, str] = {}
    if args.redis_url:
        opts.update(url_to_options(args.redis_url))
    for name, value in (("partitions.number", args.partitions), ("scan.count", args.scan_count),
                        ("max.pipeline.size", args.pipeline)):
        if value is not None:
            opts[name] = str(value)
    return opts


def get_spark(master: str | None, conf: dict[str, str]) -> tuple[Any, bool]:
    """The active session if there is one (spark-submit, tests), else a new one; and whether we made it."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.appName("rmq-registry-analytics")
    if not master and not SparkConf().contains("spark.master"):
        master = "local[*]"
    if master:
        builder = builder.master(master)
    effective = master or SparkConf().get("spark.master", "")
    if effective.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # local workers run this interpreter (its redis-py), not whatever python3 is on PATH
        os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if not SparkConf().contains("spark.sql.shuffle.partitions"):
        # the tables are registry-sized (brokers, topic x group rows): 200 shuffle tasks
        # per join would cost more than the data
        builder = builder.config("spark.sql.shuffle.partitions", "8")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, True


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    log = logging.getLogger("service.analytics")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("analytics needs pyspark 3.5: pip install '.[analytics]'", file=sys.stderr)
        return 2

    from .jobs import READS_REDIS, Context, run, to_json
    from .reader import spark_conf_from_options

    try:
        opts = read_options(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = None if args.no_out else args.out
    history = args.history or (out / "history" if out is not None else None)
    if args.job == "history":
        if history is None:
            print("error: history needs --history PATH (or an --out folder)", file=sys.stderr)
            return 2
    elif args.no_history:
        history = None
    spark, owned = get_spark(args.master, spark_conf_from_options(opts))
    try:
        ctx = Context(
            spark=spark, prefix=args.prefix, reader=args.reader, options=opts, out=out,
            charts=not args.no_charts, flag_ratio=args.flag_ratio, history=history,
        )
        # the reader is checked (and a missing spark-redis jar refused) only for jobs that read Redis
        log.info("job %s, prefix %s, reader %s, out %s, history %s", args.job, args.prefix,
                 ctx.reader_used if args.job in READS_REDIS else "none (reads no Redis)", out, history)
        result = run(ctx, args.job)
    except Exception as e:  # one line for the operator, the trace in the log
        log.exception("job %s failed", args.job)
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()
    text = to_json(result)
    if args.json in ("-", ""):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
        log.info("summary written to %s", args.json)
    return 0
