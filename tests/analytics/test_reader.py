"""read_table: the built-in reader against a real redis-server, and spark-redis when its jar is
at hand (SPARK_REDIS_JAR: spark-redis's published jar from Maven Central)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")

from service.analytics import reader as reader_mod  # noqa: E402
from service.analytics.reader import (  # noqa: E402
    SPARK_REDIS_PACKAGE, connection_params, read_table, spark_redis_available, url_to_options,
)
from service.analytics.schemas import KINDS, schema  # noqa: E402
from tests.analytics.conftest import HOW_TO_GET_THE_JAR, spark_redis_jar  # noqa: E402
from tests.analytics.seed import ACTING, Model  # noqa: E402

pytestmark = pytest.mark.spark


def expected_rows(model: Model, kind: str, now: int) -> set[tuple]:
    if kind == "broker":
        return {(n, c, n, ACTING.get(n, {}).get("enableActingMaster"), ACTING.get(n, {}).get("zoneName"))
                for n, c in model.groups.items()}
    if kind == "member":
        return {(m.addr, m.addr, m.cluster, m.name, m.broker_id) for m in model.members}
    if kind == "live":
        return {(m.addr, m.addr, m.cluster, m.name, m.broker_id, m.ha_addr, now - m.age_ms, m.timeout_ms,
                 json.dumps({"timestamp": now - m.age_ms - 1000, "counter": 7}, separators=(",", ":")))
                for m in model.members if m.live}
    assert kind == "queue"
    return {(f"{q.topic}:{q.name}", q.topic, q.name, q.read, q.write, q.perm, q.sys_flag) for q in model.queues}


def test_builtin_reader_gives_every_table_typed_and_keyed(spark, seeded):
    model, now, url = seeded
    opts = {**url_to_options(url), "partitions.number": "3", "max.pipeline.size": "7", "scan.count": "50"}
    for kind in KINDS:
        df = read_table(spark, kind, options=opts, reader="builtin")
        assert df.schema == schema(kind)
        assert df.rdd.getNumPartitions() == 3
        rows = df.collect()
        assert len(rows) == len({tuple(r) for r in rows})  # SCAN duplicates removed
        assert {tuple(r) for r in rows} == expected_rows(model, kind, now), kind
    assert len(expected_rows(model, "queue", now)) >= 300  # hundreds of topics


def test_index_reader_reads_the_same_tables_as_the_pattern_reader_without_a_scan(spark, seeded):
    import redis

    model, now, url = seeded
    opts = url_to_options(url)
    client = redis.Redis.from_url(url)
    try:
        for kind in KINDS:
            scans = client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0)
            by_index = read_table(spark, kind, options=opts, reader="index")
            assert by_index.schema == schema(kind)
            rows = {tuple(r) for r in by_index.collect()}
            assert client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0) == scans, kind
            by_pattern = {tuple(r) for r in read_table(spark, kind, options=opts, reader="builtin").collect()}
            assert rows == by_pattern == expected_rows(model, kind, now), kind
    finally:
        client.close()


def test_index_reader_reads_names_that_need_escaping(spark, redis_url):
    import redis

    from tests.analytics.seed import Member, Model, Queue, write_model

    model = Model(groups={"b:{x}": "C 1"}, members=[Member("10.0.0.1:10911", "C 1", "b:{x}", 0)],
                  queues=[Queue("t:1~{y}", "b:{x}", 4, 4), Queue("plain", "b:{x}", 8, 8, perm=4)])
    client = redis.Redis.from_url(redis_url)
    try:
        write_model(client, model)
    finally:
        client.close()
    opts = url_to_options(redis_url)
    for kind in KINDS:
        by_index = {tuple(r) for r in read_table(spark, kind, options=opts, reader="index").collect()}
        by_pattern = {tuple(r) for r in read_table(spark, kind, options=opts, reader="builtin").collect()}
        assert by_index == by_pattern and by_index, kind
    from service.keys import encode_name

    queue_keys = {r.key for r in read_table(spark, "queue", options=opts, reader="index").collect()}
    assert queue_keys == {f"{encode_name(q.topic)}:{encode_name(q.name)}" for q in model.queues}
    assert {r.topic for r in read_table(spark, "queue", options=opts, reader="index").collect()} == {
        q.topic for q in model.queues}


def test_index_reader_pages_a_hash_bigger_than_hgetall_max_and_reads_the_same_rows(spark, redis_url):
    import redis

    from service.analytics.reader import DEFAULT_HGETALL_MAX, DEFAULT_HSCAN_COUNT
    from tests.analytics.seed import Member, Model, Queue, write_model

    n = 2 * DEFAULT_HGETALL_MAX + 500
    model = Model(groups={"big": "C"}, members=[Member("10.0.0.1:10911", "C", "big", 0)],
                  queues=[Queue(f"T{i}", "big", 1 + i % 8, 1 + i % 8) for i in range(n)])
    client = redis.Redis.from_url(redis_url)
    try:
        write_model(client, model)
        client.config_resetstat()
        opts = url_to_options(redis_url)
        by_index = {tuple(r) for r in read_table(spark, "queue", options=opts, reader="index").collect()}
        stats = client.info("commandstats")
    finally:
        client.close()
    assert "cmdstat_hgetall" not in stats
    assert stats["cmdstat_hscan"]["calls"] >= n // DEFAULT_HSCAN_COUNT
    by_pattern = {tuple(r) for r in read_table(spark, "queue", options=opts, reader="builtin").collect()}
    assert by_index == by_pattern and len(by_index) == n


def test_keys_gone_between_scan_and_hmget_give_no_row(spark, seeded, monkeypatch):
    model, now, url = seeded
    real_scan = reader_mod.scan_keys
    # a live row whose TTL runs out between SCAN and HMGET: the key is listed, then gone
    monkeypatch.setattr(reader_mod, "scan_keys",
                        lambda *a, **k: real_scan(*a, **k) + ["{rmq}:live:10.9.9.9:10911"])
    rows = read_table(spark, "live", options=url_to_options(url), reader="builtin").collect()
    assert len(rows) == sum(1 for m in model.members if m.live)
    assert "10.9.9.9:10911" not in {r.key for r in rows}


def test_connection_from_options_then_spark_conf_then_defaults(spark):
    params = connection_params(spark, {"host": "h1", "port": "7000"})
    assert params["host"] == "h1" and params["port"] == "7000"
    assert connection_params(spark, {})["host"] == spark.sparkContext.getConf().get("spark.redis.host", "localhost")
    assert url_to_options("rediss://u:p%40ss@redis.example:6380/2") == {
        "host": "redis.example", "port": "6380", "ssl": "true", "dbNum": "2", "user": "u", "auth": "p@ss"}
    with pytest.raises(ValueError):
        url_to_options("http://x")


def test_forcing_spark_redis_without_the_jar_says_how_to_get_it(spark):
    if spark_redis_available(spark):
        pytest.skip("spark-redis is on the classpath")
    with pytest.raises(RuntimeError, match="--packages " + SPARK_REDIS_PACKAGE.replace(".", r"\.")):
        read_table(spark, "broker", reader="spark-redis")


def test_spark_redis_reader_gives_the_same_dataframes(spark, seeded):
    if not spark_redis_available(spark):
        pytest.skip(f"spark-redis jar not on the classpath: {HOW_TO_GET_THE_JAR}")
    model, now, url = seeded
    opts = {**url_to_options(url), "partitions.number": "3"}
    for kind in KINDS:
        a = read_table(spark, kind, options=opts, reader="spark-redis")
        b = read_table(spark, kind, options=opts, reader="builtin")
        c = read_table(spark, kind, options=opts, reader="index")
        assert a.schema == b.schema == c.schema
        assert sorted(map(tuple, a.collect())) == sorted(map(tuple, b.collect())), kind
        assert sorted(map(tuple, a.collect())) == sorted(map(tuple, c.collect())), kind
        assert {tuple(r) for r in a.collect()} == expected_rows(model, kind, now)


@pytest.mark.skipif(spark_redis_jar() is None, reason=f"no spark-redis jar: {HOW_TO_GET_THE_JAR}")
def test_jar_given_is_detected(spark):
    assert spark_redis_available(spark)


def test_the_documented_read_only_acl_user_reads_every_table_alike(spark, seeded):
    from pathlib import Path

    import redis

    _, _, url = seeded
    rules = reader_mod.read_only_acl()
    readme = (Path(__file__).resolve().parents[2] / "service" / "analytics" / "README.md").read_text()
    assert f"ACL SETUSER analytics on >PASSWORD {rules}" in readme  # the doc states these very rules
    admin = redis.Redis.from_url(url)
    try:
        admin.execute_command("ACL", "SETUSER", "analytics", "on", ">s3cret", *rules.split())
        restricted = url.replace("redis://", "redis://analytics:s3cret@")
        for kind in KINDS:
            as_admin = {tuple(r) for r in read_table(spark, kind, options=url_to_options(url), reader="builtin").collect()}
            for reader in ("builtin", "index"):
                as_user = {tuple(r) for r in read_table(spark, kind, options=url_to_options(restricted),
                                                        reader=reader).collect()}
                assert as_user == as_admin and as_admin, (kind, reader)
        # what spark-redis' filter.keys.by.type sends for every key (refused, it returns no rows)
        as_analytics = redis.Redis.from_url(restricted)
        key = next(as_analytics.scan_iter(match="{rmq}:broker:*"))
        assert as_analytics.type(key) == b"hash"
        as_analytics.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "analytics")
        admin.close()
