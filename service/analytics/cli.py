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
                   help="the registry's Redis, redis[s]://[user:pass@]host:port/db (default $REDIS_URL; "
                        "unset: the Spark conf spark.redis.host/port/user/auth/ssl/db, else refused)")
    p.add_argument("--replica", action="store_true",
                   help="the Redis read is a replica of the registry's: refuse unless it is one with its "
                        "link to the primary up")
    p.add_argument("--allow-empty", action="store_true",
                   help="a store with no broker group is a result (all-zero counts), not an error")
    p.add_argument("--dataset", default=None,
                   help="history: the data set to report (default: the latest run's); rows of others are skipped")
    p.add_argument("--prefix", default=os.environ.get("RMQ_KEY_PREFIX", "rmq"),
                   help="key prefix, keys are {<prefix>}:... (default $RMQ_KEY_PREFIX or rmq)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("RMQ_ANALYTICS_OUT", "analytics-out")),
                   help="folder for Parquet tables and PNG charts (default ./analytics-out)")
    p.add_argument("--no-out", action="store_true", help="write no tables or charts, only the summary")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument("--reader", choices=["auto", "index", "builtin", "spark-redis"], default="auto",
                   help="index (auto): through the registry's indexes, no SCAN; builtin: pattern SCAN + "
                        "HMGET; spark-redis: its data source (pattern SCAN, needs its jar)")
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
    p.add_argument("--log-level", default=os.environ.get("RMQ_LOG_LEVEL") or "INFO",
                   help="Python log level (default $RMQ_LOG_LEVEL or INFO)")
    p.add_argument("--debug", action="store_true", help="tracebacks and Spark's warnings on errors")
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


def spark_submit_names_redis() -> bool:
    """Whether spark-submit's or PYSPARK_SUBMIT_ARGS' conf may name the Redis (spark.redis.host)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT")) or "spark.redis.host" in os.environ.get(
        "PYSPARK_SUBMIT_ARGS", "")


NO_REDIS = ("no Redis to read: set REDIS_URL (or --redis-url redis://HOST:PORT/DB) to the registry's Redis "
            "(under spark-submit, --conf spark.redis.host=HOST also works)")


def one_line(e: BaseException, where: str, setting: str) -> str:
    """What failed, on which host, through which setting: one line, no credentials."""
    import redis

    from .source import JobError

    if isinstance(e, JobError):
        return str(e)
    if isinstance(e, redis.AuthenticationError) or "WRONGPASS" in str(e) or "NOAUTH" in str(e):
        return f"{where} refused the credentials of {setting}: {e}"
    if isinstance(e, redis.ResponseError) and "NOPERM" in str(e):
        return f"{where}: the user of {setting} may not run a command the jobs need ({e}); see the read-only ACL"
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError)):
        return f"cannot reach {where} ({setting}): {e}"
    text = str(e).strip()
    java = getattr(e, "java_exception", None)
    if java is not None:  # a Spark failure: the Python error of the task, else the Java one's first line
        lines = [ln.strip() for ln in text.splitlines()]
        python = [ln for ln in lines if ln.startswith(("redis.exceptions.", "ModuleNotFoundError", "ValueError"))]
        text = python[-1] if python else str(java.toString()).splitlines()[0]
    first = text.splitlines()[0] if text else type(e).__name__
    return f"{type(e).__name__}: {first}" if isinstance(e, (KeyError, AssertionError)) else first


def main(argv: list[str] | None = None) -> int:
    from .streams import stderr_apart_from_stdout

    # under spark-submit from the first line on: a usage error too stays off stdout
    with stderr_apart_from_stdout():
        return run_main(argv)


def run_main(argv: list[str] | None) -> int:
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
    from .preflight import preflight
    from .reader import params_from
    from .session import get_spark, submitted_conf
    from .source import params_where
    from .streams import under_spark_submit

    try:
        opts = read_options(args)
    except ValueError as e:
        print(f"error: --redis-url / REDIS_URL: {e}", file=sys.stderr)
        return 2
    reads_redis = args.job in READS_REDIS
    if reads_redis and not args.redis_url and not spark_submit_names_redis():
        print(f"error: {NO_REDIS}", file=sys.stderr)
        return 2
    if not args.redis_url:
        setting = "spark.redis.*"
    else:
        setting = "REDIS_URL" if args.redis_url == os.environ.get("REDIS_URL") else "--redis-url"
    out = None if args.no_out else args.out
    history = args.history or (out / "history" if out is not None else None)
    if args.job == "history":
        if history is None:
            print("error: history needs --history PATH (or an --out folder)", file=sys.stderr)
            return 2
    elif args.no_history:
        history = None
    where = params_where(opts) if opts else "the Spark conf's spark.redis.host"
    # the store is checked before Spark starts, whenever its address is known by then: from
    # the URL, or from spark-submit's conf (its JVM is up; no Spark context is started for it)
    conf = submitted_conf() if reads_redis and not args.redis_url and under_spark_submit() else None
    if reads_redis and (args.redis_url or conf is not None):
        if conf is not None and not conf.contains("spark.redis.host"):
            print(f"error: {NO_REDIS}", file=sys.stderr)
            return 2
        where = params_where(params_from(conf, opts))
        try:
            preflight(opts, conf, args.prefix, replica=args.replica, allow_empty=args.allow_empty, history=history)
        except Exception as e:
            if args.debug:
                log.exception("job %s refused before Spark started", args.job)
            print(f"error: {args.job}: {one_line(e, where, setting)}", file=sys.stderr)
            return 1
    try:
        spark, owned = get_spark(args.master, debug=args.debug)
    except Exception as e:
        if args.debug:
            log.exception("Spark did not start")
        print(f"error: Spark did not start (--master {args.master or 'from spark-submit'}): {one_line(e, where, setting)}",
              file=sys.stderr)
        return 1
    try:
        if reads_redis and not args.redis_url and not spark.sparkContext.getConf().contains("spark.redis.host"):
            print(f"error: {NO_REDIS}", file=sys.stderr)
            return 2
        ctx = Context(
            spark=spark, prefix=args.prefix, reader=args.reader, options=opts, out=out,
            charts=not args.no_charts, flag_ratio=args.flag_ratio, history=history,
            allow_empty=args.allow_empty, replica=args.replica, dataset=args.dataset,
        )
        where = ctx.where
        # the reader is checked (and a missing spark-redis jar refused) only for jobs that read Redis
        log.info("job %s, prefix %s, reader %s, out %s, history %s", args.job, args.prefix,
                 ctx.reader_used if reads_redis else "none (reads no Redis)", out, history)
        result = run(ctx, args.job)
    except Exception as e:  # one line for the operator; the trace with --debug
        if args.debug:
            log.exception("job %s failed", args.job)
        print(f"error: {args.job}: {one_line(e, where, setting)}", file=sys.stderr)
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
