"""The index reader's rows, read on the driver: no Redis access from the executors.

``queue`` comes from the per-broker-name ``broker-topics`` HASHes (topic ->
"readQueueNums,writeQueueNums,perm,topicSysFlag"), kept by the same scripts that write the
``queue:<topic>:<name>`` rows: one HSCAN page gives a thousand queue rows where the pattern
reader pays a SCAN step and an HMGET per row. Pages of ``count`` entries keep every Redis
call short (a HASH of 10,000 topics read whole would be one long call); the pages of
``pipeline`` names go out together. The rows become Arrow columns (about 60 MB at
1,000,000 rows), handed to Spark in one piece.
"""

from __future__ import annotations

from typing import Any, Iterator

from service.keys import encode_name

from ._partition_reader import connect

QUEUE_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
BATCH_ROWS = 65_536


def _batch(pa: Any, schema: Any, cols: dict[str, list[Any]]) -> Any:
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


def fetch_broker_topics(params: dict[str, Any], key_column: str, count: int, pipeline: int,
                        names: list[tuple[str, str, str]]) -> Iterator[Any]:
    """For (name, hashKey, keyPart) of each broker name: Arrow batches of the ``queue`` schema."""
    import pyarrow as pa

    schema = pa.schema([(key_column, pa.string()), ("topic", pa.string()), ("brokerName", pa.string())]
                       + [(f, pa.int32()) for f in QUEUE_FIELDS])
    cols: dict[str, list[Any]] = {f.name: [] for f in schema}
    client = connect(params)
    try:
        pending = [(name, hkey, part, 0, {}) for name, hkey, part in names]
        while pending:
            now, pending = pending[:pipeline], pending[pipeline:]
            pipe = client.pipeline(transaction=False)
            for _, hkey, _, cursor, _ in now:
                pipe.hscan(hkey, cursor, count=count)
            for (name, hkey, part, _, seen), (cursor, page) in zip(now, pipe.execute()):
                seen.update(page)  # HSCAN may repeat a field while the hash rehashes
                if int(cursor):
                    pending.append((name, hkey, part, int(cursor), seen))
                    continue
                for topic, value in seen.items():
                    numbers = value.split(",")
                    if len(numbers) != len(QUEUE_FIELDS):
                        raise ValueError(f"{hkey}: field {topic!r} holds {value!r}, not r,w,perm,sysFlag")
                    cols[key_column].append(f"{encode_name(topic)}:{part}")
                    cols["topic"].append(topic)
                    cols["brokerName"].append(name)
                    for f, v in zip(QUEUE_FIELDS, numbers):
                        cols[f].append(int(v))
                if len(cols["topic"]) >= BATCH_ROWS:
                    yield _batch(pa, schema, cols)
                    cols = {f.name: [] for f in schema}
    finally:
        client.close()
    if cols["topic"]:
        yield _batch(pa, schema, cols)
