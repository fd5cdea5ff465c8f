"""arrow.to_frame / arrow.collect: queue rows between the driver and Spark through pyspark's
Arrow conversions (its fallback off: a frame they cannot take fails these tests)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")

from service.analytics import arrow  # noqa: E402
from service.analytics.schemas import schema  # noqa: E402

pytestmark = pytest.mark.spark


def queue_batches(sizes: list[int]) -> list:
    import pyarrow as pa

    fields = schema("queue")
    batches = []
    for b, n in enumerate(sizes):
        topics = [f"t{b}-{i}" for i in range(n)]
        columns = [pa.array([f"{t}:g{b}" for t in topics], pa.string()), pa.array(topics, pa.string()),
                   pa.array([f"g{b}"] * n, pa.string())] + [
            pa.array([i % 16 + k for i in range(n)], pa.int32()) for k in range(4)]
        batches.append(pa.RecordBatch.from_arrays(columns, names=[f.name for f in fields]))
    return batches


def test_arrow_batches_become_a_frame_of_one_partition_per_core(spark):
    batches = queue_batches([3, 0, 250, 1, 40])
    df = arrow.to_frame(spark, batches, schema("queue"))
    assert df.schema == schema("queue")
    assert df.rdd.getNumPartitions() <= spark.sparkContext.defaultParallelism
    want = [tuple(r.values()) for b in batches for r in b.to_pylist()]
    assert sorted(tuple(r) for r in df.collect()) == sorted(want)


def test_the_sessions_arrow_settings_are_as_they_were_after_a_conversion(spark):
    keys = ("spark.sql.execution.arrow.pyspark.enabled", "spark.sql.execution.arrow.pyspark.fallback.enabled",
            "spark.sql.execution.arrow.maxRecordsPerBatch")
    before = [spark.conf.get(k) for k in keys]
    arrow.collect(arrow.to_frame(spark, queue_batches([5, 7]), schema("queue")))
    assert [spark.conf.get(k) for k in keys] == before


def test_no_batches_give_an_empty_frame_of_the_schema(spark):
    df = arrow.to_frame(spark, [], schema("queue"))
    assert df.schema == schema("queue") and df.count() == 0


def test_collect_gives_nested_lists_as_arrow(spark):
    from pyspark.sql import functions as F

    df = arrow.to_frame(spark, queue_batches([4, 4]), schema("queue"))
    per_topic = df.groupBy("readQueueNums").agg(
        F.sort_array(F.collect_list(F.struct("brokerName", "perm"))).alias("rows"))
    table = arrow.collect(per_topic).sort_by("readQueueNums")
    assert table.column_names == ["readQueueNums", "rows"]
    assert table.to_pylist() == [
        {"readQueueNums": r.readQueueNums, "rows": [x.asDict() for x in r.rows]}
        for r in per_topic.orderBy("readQueueNums").collect()]


def test_collect_of_no_rows_is_an_empty_table_of_the_schema(spark):
    df = arrow.to_frame(spark, queue_batches([2]), schema("queue")).where("perm < 0")
    table = arrow.collect(df)
    assert table.num_rows == 0 and table.column_names == [f.name for f in schema("queue").fields]
