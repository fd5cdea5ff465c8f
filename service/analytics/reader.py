"""One way to read a live table into a DataFrame, three implementations behind it.

``read_table(spark, kind, ...)`` returns the table as a DataFrame typed by the explicit
schema of ``schemas.py``. It reads through

* the **index reader** (default): the rows the registry's own indexes list (``index.py``:
  the cluster SETs, the ``addrs`` HASHes, the expiry ZSET), pipelined HMGET of those keys
  on the executors, and the ``queue`` table from the per-broker-name ``broker-topics``
  HASHes (``index_rows.py``: HSCAN pages, Arrow batches). No pattern SCAN;
* the **pattern reader** (``builtin``): SCAN with ``keys.pattern`` on the driver, the keys
  split into ``partitions.number`` partitions, pipelined HMGET (``max.pipeline.size``
  commands a round trip) on the executors with redis-py in ``mapPartitions``;
* **spark-redis** (format ``org.apache.spark.sql.redis``) when asked for and its jar is
  on the classpath (``--packages com.redislabs:spark-redis_2.12:3.1.0``): the same SCAN by
  pattern, in the JVM.

All take the same options (``keys.pattern``, ``key.column``, ``partitions.number``,
``scan.count``, ``max.pipeline.size``, ``filter.keys.by.type`` and the connection options
``host``, ``port``, ``user``, ``auth``, ``dbNum``, ``timeout``, ``ssl``, which default to the
Spark conf ``spark.redis.*``), and every result goes through the same final step, which
drops the rows of keys that vanished between listing and HMGET (a live row whose TTL ran
out meanwhile: spark-redis returns such a row with every field null). So the jobs cannot
tell the readers apart.
"""

from __future__ import annotations

import logging
import urllib.parse
from functools import reduce
from typing import Any, Mapping

from service.keys import Keys
from service.redis_url import check_encoded, masked

from . import _partition_reader, arrow, index_rows
from .index import Index, list_index
from .schemas import FIELDS, KEY_COLUMN, schema as table_schema

log = logging.getLogger("service.analytics")

SPARK_REDIS_FORMAT = "org.apache.spark.sql.redis"
SPARK_REDIS_CLASS = "org.apache.spark.sql.redis.DefaultSource"
SPARK_REDIS_PACKAGE = "com.redislabs:spark-redis_2.12:3.1.0"
READERS = ("auto", "index", "builtin", "spark-redis")

# The commands a read-only Redis user needs for the jobs, with any reader: SMEMBERS, HVALS,
# ZRANGE, HLEN, HSCAN (the index reader), SCAN and HMGET for the rows, HGETALL for the order-topic
# KV, GET for the data set's id, TIME for the snapshot's clock, INFO (commandstats, and the
# replication role for --replica), and TYPE for spark-redis' filter.keys.by.type (without it
# spark-redis returns no rows, silently). service/analytics/README.md quotes this line; a
# test holds the two together.
READ_ONLY_COMMANDS = ("+smembers", "+hvals", "+zrange", "+hlen", "+hscan", "+scan", "+hmget", "+hgetall", "+get",
                      "+info", "+time", "+type")


def read_only_acl(prefix: str = "rmq") -> str:
    """The ACL rules of a read-only user for the jobs (after ``ACL SETUSER <name> on >pw``)."""
    return " ".join(["resetkeys", f"~{{{prefix}}}:*", "-@all", *READ_ONLY_COMMANDS])

# spark-redis defaults (Jedis Protocol.DEFAULT_*, RedisConfig / ReadWriteConfig)
CONNECTION_DEFAULTS = {
    "host": "localhost", "port": "6379", "user": None, "auth": None,
    "dbNum": "0", "timeout": "2000", "ssl": "false",
}
CONNECTION_CONF = {
    "host": "spark.redis.host", "port": "spark.redis.port", "user": "spark.redis.user",
    "auth": "spark.redis.auth", "dbNum": "spark.redis.db", "timeout": "spark.redis.timeout",
    "ssl": "spark.redis.ssl",
}
DEFAULT_PARTITIONS = 3  # spark-redis SqlOptionNumPartitionsDefault
DEFAULT_SCAN_COUNT = 100
DEFAULT_PIPELINE = 100
# A broker-topics hash of up to DEFAULT_HGETALL_MAX fields is read whole (HGETALL), a bigger
# one in HSCAN pages of about DEFAULT_HSCAN_COUNT: each call then returns at most ~1,000
# fields, so no one call holds Redis long, though an HSCAN field costs Redis more than an
# HGETALL one (bench/README.md, "Analytics at fleet size", gives both).
DEFAULT_HSCAN_COUNT = 1000
DEFAULT_HGETALL_MAX = 1000


def url_to_options(url: str) -> dict[str, str]:
    """``redis[s]://[user:pass@]host:port/db`` as spark-redis connection options."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("redis", "rediss"):
        raise ValueError(f"not a redis URL: {masked(url)!r}")
    check_encoded(url)  # else part of the password would be taken for the host, and printed as it
    opts = {
        "host": u.hostname or "localhost",
        "port": str(u.port or 6379),
        "ssl": "true" if u.scheme == "rediss" else "false",
        "dbNum": (u.path.lstrip("/") or "0"),
    }
    if u.username:
        opts["user"] = urllib.parse.unquote(u.username)
    if u.password:
        opts["auth"] = urllib.parse.unquote(u.password)
    q = urllib.parse.parse_qs(u.query)
    if "db" in q:
        opts["dbNum"] = q["db"][0]
    return opts


def connection_params(spark: Any, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Connection parameters as spark-redis resolves them: option, else Spark conf, else default."""
    return params_from(spark.sparkContext.getConf(), options)


def params_from(conf: Any | None, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``connection_params`` from a ``SparkConf`` (or none: before any Spark, options and
    defaults only)."""
    options = options or {}
    out: dict[str, Any] = {}
    for name, default in CONNECTION_DEFAULTS.items():
        value = options.get(name)
        if value is None:
            value = conf.get(CONNECTION_CONF[name], default) if conf is not None else default
        out[name] = value
    return out


def redis_client(spark: Any, options: Mapping[str, Any] | None = None) -> Any:
    """A redis-py client on the driver, connected like the readers."""
    return _partition_reader.connect(connection_params(spark, options))


_available: dict[int, bool] = {}


def spark_redis_available(spark: Any) -> bool:
    """Whether the spark-redis data source class can be loaded in this session's JVM."""
    key = id(spark.sparkContext)
    if key in _available:
        return _available[key]
    found = False
    jvm = getattr(spark, "_jvm", None) or getattr(spark.sparkContext, "_jvm", None)
    if jvm is not None:
        try:  # Spark's own class loader sees --jars / --packages / spark.jars
            jvm.org.apache.spark.util.Utils.classForName(SPARK_REDIS_CLASS, False, False)
            found = True
        except Exception:
            try:
                loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
                jvm.java.lang.Class.forName(SPARK_REDIS_CLASS, False, loader)
                found = True
            except Exception:
                found = False
    _available[key] = found
    return found


def choose_reader(spark: Any, reader: str = "auto") -> str:
    """``auto`` is the index reader: the one that does not walk the key space."""
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}; one of {', '.join(READERS)}")
    if reader == "auto":
        return "index"
    if reader == "spark-redis" and not spark_redis_available(spark):
        raise RuntimeError(
            f"--reader spark-redis: class {SPARK_REDIS_CLASS} is not on the classpath; "
            f"start with --packages {SPARK_REDIS_PACKAGE} (or --jars spark-redis.jar)"
        )
    return reader


def read_table(spark: Any, kind: str, schema: Any = None, options: Mapping[str, Any] | None = None,
               **where: Any) -> Any:
    """The table ``kind`` (live, member, broker, queue) as a DataFrame.

    ``options`` are spark-redis's read options; ``keys.pattern`` defaults to
    ``{<prefix>}:<kind>:*`` and ``key.column`` to ``key``. ``where``: ``prefix`` (rmq),
    ``reader`` (auto = index, index, builtin, spark-redis), ``index`` (the listing the index
    reader uses; listed here when None), as ``read_table_rows`` takes them.
    """
    return read_table_rows(spark, kind, schema, options, **where)[0]


def read_table_rows(
    spark: Any,
    kind: str,
    schema: Any = None,
    options: Mapping[str, Any] | None = None,
    *,
    prefix: str = "rmq",
    reader: str = "auto",
    index: Index | None = None,
) -> tuple[Any, int | None]:
    """``read_table`` and its row count when the reader knows it without a Spark action
    (the index reader: its rows are on the driver before Spark sees them), else None."""
    if schema is None:
        schema = table_schema(kind)
    opts = {k: str(v) for k, v in (options or {}).items() if v is not None}
    opts.setdefault("keys.pattern", Keys(prefix).pattern(kind))
    opts.setdefault("key.column", KEY_COLUMN)
    which = choose_reader(spark, reader)
    known: int | None = None
    if which == "spark-redis":
        df = spark.read.format(SPARK_REDIS_FORMAT).schema(schema).options(**opts).load()
    elif which == "index":
        # rows of missing keys are dropped as they are read: the filter below drops none
        df, known = _index_read(spark, kind, schema, opts, Keys(prefix), index)
    else:
        df = _builtin_read(spark, schema, opts)
    value_cols = [f.name for f in schema.fields if f.name != opts["key.column"]]
    if value_cols:  # rows of keys gone between SCAN and HMGET have every field null
        df = df.where(reduce(lambda a, b: a | b, [df[c].isNotNull() for c in value_cols]))
    log.info("read %s (%s) via %s", kind, opts["keys.pattern"], which)
    return df, known


def is_redis_glob(pattern: str) -> bool:
    """spark-redis ``Keys.isRedisRegex``: an unescaped ``*``, ``?`` or ``[``."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c in "*?[":
            return True
        i += 1
    return False


def scan_keys(client: Any, pattern: str, count: int, hashes_only: bool = False) -> list[str]:
    """All keys matching ``pattern`` (SCAN may repeat a key: deduplicated, sorted)."""
    if not is_redis_glob(pattern):
        return [pattern]
    kwargs: dict[str, Any] = {"match": pattern, "count": count}
    if hashes_only:
        kwargs["_type"] = "hash"
    return sorted(set(client.scan_iter(**kwargs)))


def _ship_by_value() -> None:
    """The executor code goes to the workers by value: they need redis-py, not this package."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(_partition_reader)


def _read_settings(spark: Any, opts: Mapping[str, str]) -> tuple[dict[str, Any], int, int, int]:
    """Connection parameters, partitions, SCAN COUNT and pipeline size of a read."""
    conf = spark.sparkContext.getConf()
    partitions = int(opts.get("partitions.number", DEFAULT_PARTITIONS))
    scan_count = int(opts.get("scan.count") or conf.get("spark.redis.scan.count", str(DEFAULT_SCAN_COUNT)))
    pipeline = int(
        opts.get("max.pipeline.size") or conf.get("spark.redis.max.pipeline.size", str(DEFAULT_PIPELINE))
    )
    return connection_params(spark, opts), max(1, partitions), scan_count, pipeline


def _builtin_read(spark: Any, schema: Any, opts: Mapping[str, str]) -> Any:
    params, _, scan_count, _ = _read_settings(spark, opts)
    pattern = opts["keys.pattern"]
    hashes_only = opts.get("filter.keys.by.type", "false").lower() == "true"
    client = _partition_reader.connect(params)
    try:
        keys = scan_keys(client, pattern, scan_count, hashes_only)
    finally:
        client.close()
    return _hmget_read(spark, schema, opts, keys, drop_missing=not is_redis_glob(pattern))


def _hmget_read(spark: Any, schema: Any, opts: Mapping[str, str], keys: list[str], drop_missing: bool) -> Any:
    """Rows of ``keys`` by pipelined HMGET on the executors, typed by ``schema``."""
    _ship_by_value()
    params, partitions, _, pipeline = _read_settings(spark, opts)
    pattern = opts["keys.pattern"]
    key_column = opts["key.column"]
    prefix_pattern = pattern if pattern.endswith("*") and pattern.count("*") == 1 else ""
    names = [f.name for f in schema.fields]
    if key_column not in names:
        raise ValueError(f"schema has no key column {key_column!r}")
    value_fields = [(f.name, f.dataType.typeName()) for f in schema.fields if f.name != key_column]
    fetch = _partition_reader.fetch_partition

    def rows(it: Any) -> Any:
        for row in fetch(params, prefix_pattern, value_fields, pipeline, drop_missing, it):
            values = dict(zip([key_column] + [n for n, _ in value_fields], row))
            yield tuple(values[n] for n in names)

    rdd = spark.sparkContext.parallelize(keys, partitions).mapPartitions(rows)
    return spark.createDataFrame(rdd, schema=schema, verifySchema=False)


def _index_read(spark: Any, kind: str, schema: Any, opts: Mapping[str, str], keys: Keys,
                index: Index | None) -> tuple[Any, int]:
    """Every Redis read on the driver: the executors need no Redis access and no redis-py.
    The frame and its row count."""
    params, _, _, pipeline = _read_settings(spark, opts)
    if index is None:
        client = _partition_reader.connect(params)
        try:
            index = list_index(client, keys)
        finally:
            client.close()
    key_column = opts["key.column"]
    if kind != "queue":
        value_fields = [(f.name, f.dataType.typeName()) for f in schema.fields if f.name != key_column]
        prefix_pattern = opts["keys.pattern"] if opts["keys.pattern"].endswith("*") else ""
        found = list(_partition_reader.fetch_partition(params, prefix_pattern, value_fields, pipeline, True,
                                                       index.keys_of(keys, kind)))
        order = [key_column] + [n for n, _ in value_fields]
        at = [order.index(f.name) for f in schema.fields]
        return spark.createDataFrame([tuple(r[i] for i in at) for r in found], schema=schema), len(found)
    batches = queue_batches(spark, opts, keys, index)
    return arrow.to_frame(spark, batches, schema), sum(b.num_rows for b in batches)


def queue_batches(spark: Any, options: Mapping[str, Any] | None, keys: Keys, index: Index) -> list[Any]:
    """The index reader's ``queue`` rows as Arrow batches, one per broker name. Fetched
    while Spark is idle: a thread fetching them during the snapshot's stages saved some
    wall time on 2 cores but, on a host Redis shares, made its longest Redis call several
    times longer (bench/README.md, sections 10c and 10d)."""
    from service.keys import encode_name

    opts = {k: str(v) for k, v in (options or {}).items() if v is not None}
    params, _, _, pipeline = _read_settings(spark, opts)
    count = int(opts.get("hscan.count", DEFAULT_HSCAN_COUNT))
    whole = int(opts.get("hgetall.max", DEFAULT_HGETALL_MAX))
    names = [(n, keys.broker_topics(n), encode_name(n)) for n in index.names]
    return list(index_rows.fetch_broker_topics(params, opts.get("key.column", KEY_COLUMN), count, whole,
                                               pipeline, names))


def hash_fields(kind: str) -> list[str]:
    return [name for name, _ in FIELDS[kind]]
