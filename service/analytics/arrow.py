"""Arrow between the driver's Python and Spark, both ways, without a Python object per row.

pyspark 3.5 takes Arrow only through pandas (``createDataFrame(pandas_df)``), and with
pandas 3 (string columns backed by Arrow) that path fails and falls back to pickling
every row: a million queue rows then take 15-25 s. So the batches go the way pyspark's
own pandas path sends them once converted (an Arrow IPC stream, through a file or, with
``spark.io.encryption.enabled``, a socket; the JVM reads it with
``PythonSQLUtils.readArrowStreamFromFile`` / ``ArrowIteratorServer``), minus pandas.
Back, ``collect`` is ``DataFrame._collect_as_arrow`` (pyspark 4: ``toArrow``): the JVM
writes Arrow batches, no ``Row`` objects. Both lean on pyspark 3.5 internals (the extra
pins pyspark 3.5); a pyspark without them sends through pandas with plain string
objects, slower and equal.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

log = logging.getLogger("service.analytics")


def to_frame(spark: Any, batches: Sequence[Any], schema: Any) -> Any:
    """Arrow record batches (columns named and typed as ``schema``) as a DataFrame.

    The rows are regrouped into one batch per default-parallelism slot: Spark makes a
    partition of each batch, and a few hundred tiny ones would cost a task each in every
    stage that reads the frame.
    """
    import pyarrow as pa

    names = [f.name for f in schema.fields]
    if not batches or not sum(b.num_rows for b in batches):
        return spark.createDataFrame([], schema=schema)
    table = pa.Table.from_batches(batches).select(names).combine_chunks()
    parts = max(1, spark.sparkContext.defaultParallelism)
    regrouped = table.to_batches(max_chunksize=-(-table.num_rows // parts))
    try:
        return _stream_to_jvm(spark, regrouped, schema)
    except (AttributeError, ImportError) as e:  # not pyspark 3.5's internals
        log.debug("Arrow stream to the JVM unavailable (%s): through pandas", e)
        return _through_pandas(spark, table, schema)


def _stream_to_jvm(spark: Any, batches: Sequence[Any], schema: Any) -> Any:
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    sc = spark.sparkContext
    jvm = sc._jvm
    jbatches = sc._serialize_to_jvm(batches, ArrowStreamSerializer(),
                                    lambda path: jvm.PythonSQLUtils.readArrowStreamFromFile(path),
                                    lambda: jvm.ArrowIteratorServer())
    df = DataFrame(jvm.PythonSQLUtils.toDataFrame(jbatches, schema.json(), spark._jsparkSession), spark)
    df._schema = schema
    return df


def _through_pandas(spark: Any, table: Any, schema: Any) -> Any:
    """The public path: pandas columns of plain objects, which pyspark 3.5's Arrow path accepts."""
    import pyarrow as pa

    frame = table.to_pandas()
    for field in table.schema:
        if pa.types.is_string(field.type):
            frame[field.name] = frame[field.name].astype(object)
    key = "spark.sql.execution.arrow.pyspark.enabled"
    before = spark.conf.get(key, "false")
    spark.conf.set(key, "true")
    try:
        return spark.createDataFrame(frame, schema=schema)
    finally:
        spark.conf.set(key, before)


def collect(df: Any) -> Any:
    """A DataFrame's rows on the driver as one ``pyarrow.Table`` (in the frame's order)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if hasattr(df, "toArrow"):  # pyspark 4
        return df.toArrow()
    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches) if batches else to_arrow_schema(df.schema).empty_table()
