"""Arrow between the driver's Python and Spark, both ways, through pyspark's public API.

pyspark 3.5 (the extra pins it: spark-redis's published jars are for its Scala 2.12) takes
and gives Arrow only through pandas: ``createDataFrame(pandas_frame)`` and ``toPandas()``
with ``spark.sql.execution.arrow.pyspark.enabled``, each an Arrow stream between the
driver and the JVM, no ``Row`` object per row. pandas 3's string columns (backed by Arrow)
are not taken by that path, which would fall back to pickling every row (a million queue
rows: 15-25 s), so they go as plain string objects, and the fallback is off: a frame Arrow
cannot take fails here, and in the tests, rather than crawling. (pyspark 4 takes and gives
a ``pyarrow.Table`` itself: ``createDataFrame(table)``, ``DataFrame.toArrow``.)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence


@contextmanager
def _arrow(spark: Any, **settings: str) -> Iterator[None]:
    """pyspark's Arrow conversions on (no fallback) for the block, with `settings`; the
    session's values are back after it."""
    settings = {"spark.sql.execution.arrow.pyspark.enabled": "true",
                "spark.sql.execution.arrow.pyspark.fallback.enabled": "false", **settings}
    before = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def to_frame(spark: Any, batches: Sequence[Any], schema: Any) -> Any:
    """Arrow record batches (columns named and typed as ``schema``) as a DataFrame.

    pyspark makes a partition of each Arrow batch it sends, so the rows go in one batch per
    default-parallelism slot: a few hundred tiny partitions would cost a task each in every
    stage that reads the frame.
    """
    import pyarrow as pa

    rows = sum(b.num_rows for b in batches)
    if not rows:
        return spark.createDataFrame([], schema=schema)
    table = pa.Table.from_batches(batches).select([f.name for f in schema.fields])
    frame = table.to_pandas()
    for field in table.schema:
        if pa.types.is_string(field.type):
            frame[field.name] = frame[field.name].astype(object)
    per_batch = -(-rows // max(1, spark.sparkContext.defaultParallelism))
    with _arrow(spark, **{"spark.sql.execution.arrow.maxRecordsPerBatch": str(per_batch)}):
        return spark.createDataFrame(frame, schema=schema)


def collect(df: Any) -> Any:
    """A DataFrame's rows on the driver as one ``pyarrow.Table`` of its schema (in its order)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    with _arrow(df.sparkSession):
        frame = df.toPandas()
    return pa.Table.from_pandas(frame, schema=to_arrow_schema(df.schema), preserve_index=False)
