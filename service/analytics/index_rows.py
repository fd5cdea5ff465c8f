"""The index reader's rows, read on the driver: no Redis access from the executors.

``queue`` comes from the per-broker-name ``broker-topics`` HASHes (topic ->
"readQueueNums,writeQueueNums,perm,topicSysFlag"), kept by the same scripts that write the
``queue:<topic>:<name>`` rows: one reply gives a thousand queue rows where the pattern
reader pays a SCAN step and an HMGET per row. A hash of up to ``whole`` fields is read
whole (HGETALL: cheaper for Redis than paging), a bigger one in HSCAN pages of about
``count`` fields, so no Redis call is long; ``pipeline`` commands go out together (HLEN
first, to choose). The rows become
Arrow columns (split and typed by pyarrow, not row by row in Python; about 60 MB at
1,000,000 rows), handed to Spark in one piece.
"""

from __future__ import annotations

from typing import Any, Iterator

from service.keys import encode_name

from ._partition_reader import connect
from .index import pipelined

QUEUE_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
PLAIN_NAME = r"^[%|A-Za-z0-9_.\-]*$"  # service/keys.py: names that are their own encoding


def _rows(pa: Any, schema: Any, key_column: str, name: str, hkey: str, part: str,
          fields: dict[str, str]) -> Any:
    """One broker name's topics as a RecordBatch of the ``queue`` schema."""
    import numpy as np
    import pyarrow.compute as pc

    n = len(fields)
    topics = pa.array(list(fields.keys()), pa.string())
    split = pc.split_pattern(pa.array(list(fields.values()), pa.string()), ",")
    if n and (pc.min(pc.list_value_length(split)).as_py() != 4 or pc.max(pc.list_value_length(split)).as_py() != 4):
        bad = next(v for v in fields.values() if v.count(",") != 3)
        raise ValueError(f"{hkey}: a field holds {bad!r}, not r,w,perm,sysFlag")
    numbers = pc.cast(pc.list_flatten(split), pa.int32()).to_numpy().reshape(n, 4) if n else np.zeros((0, 4))
    plain = pc.all(pc.match_substring_regex(topics, PLAIN_NAME)).as_py() if n else True
    encoded = topics if plain else pa.array([encode_name(t) for t in fields], pa.string())
    keys = pc.binary_join_element_wise(encoded, pa.scalar(part), ":")
    columns = [keys, topics, pa.array([name] * n, pa.string())] + [
        pa.array(numbers[:, i].astype("int32"), pa.int32()) for i in range(4)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def fetch_broker_topics(params: dict[str, Any], key_column: str, count: int, whole: int, pipeline: int,
                        names: list[tuple[str, str, str]]) -> Iterator[Any]:
    """For (name, hashKey, keyPart) of each broker name: Arrow batches of the ``queue`` schema."""
    import pyarrow as pa

    schema = pa.schema([(key_column, pa.string()), ("topic", pa.string()), ("brokerName", pa.string())]
                       + [(f, pa.int32()) for f in QUEUE_FIELDS])
    client = connect(params)
    try:
        sizes = pipelined(client, "hlen", [hkey for _, hkey, _ in names], pipeline)
        small = [n for n, size in zip(names, sizes) if size <= whole]
        for (name, hkey, part), fields in zip(small, pipelined(client, "hgetall", [h for _, h, _ in small],
                                                                 max(1, pipeline // 10))):
            yield _rows(pa, schema, key_column, name, hkey, part, fields)
        pending = [(name, hkey, part, 0, {}) for (name, hkey, part), size in zip(names, sizes) if size > whole]
        pages = max(1, pipeline // 10)  # pages in flight: ~10,000 fields, as for the HGETALLs
        while pending:
            now, pending = pending[:pages], pending[pages:]
            pipe = client.pipeline(transaction=False)
            for _, hkey, _, cursor, _ in now:
                pipe.hscan(hkey, cursor, count=count)
            for (name, hkey, part, _, seen), (cursor, page) in zip(now, pipe.execute()):
                seen.update(page)  # HSCAN may repeat a field while the hash rehashes
                if int(cursor):
                    pending.append((name, hkey, part, int(cursor), seen))
                else:
                    yield _rows(pa, schema, key_column, name, hkey, part, seen)
    finally:
        client.close()
