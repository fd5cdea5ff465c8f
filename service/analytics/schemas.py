"""Explicit schemas of the row-shaped hashes the jobs read.

One schema per table kind; the key of a row is ``{<prefix>}:<kind>:<rest>`` and the key
column (``key``) receives ``<rest>``, exactly as spark-redis's ``keys.pattern`` +
``key.column`` does. The field names and meanings are the ones the registry's Lua scripts
write (docs/design.md part 3, ``service/keys.py``). Both readers type the rows with these
schemas, so spark-redis and the built-in reader give identical DataFrames. Names in a key
are escaped (``service/keys.py`` ``encode_name``; addresses are not), so the jobs take
broker names and topics from the row's fields, never from its key.

Kept free of any pyspark import at module level so the CLI can print its help (and the
package can be imported) without pyspark installed.
"""

from __future__ import annotations

from typing import Any

KEY_COLUMN = "key"

# kind -> [(field, spark type name)]; the key column comes first in every schema.
FIELDS: dict[str, list[tuple[str, str]]] = {
    # {rmq}:live:<addr>, HASH with a key TTL (a minute past the broker's deadline: a backstop)
    "live": [
        ("brokerAddr", "string"),
        ("cluster", "string"),
        ("brokerName", "string"),
        ("brokerId", "long"),
        ("haServerAddr", "string"),
        ("lastUpdateTimestamp", "long"),  # ms, Redis time
        ("heartbeatTimeoutMillis", "long"),
        ("dataVersion", "string"),  # JSON {"timestamp": .., "counter": .., "stateVersion": .. (when not 0)}
    ],
    # {rmq}:member:<addr>, no TTL: one per registered address
    "member": [
        ("brokerAddr", "string"),
        ("cluster", "string"),
        ("brokerName", "string"),
        ("brokerId", "long"),
    ],
    # {rmq}:broker:<brokerName, encoded>
    "broker": [
        ("cluster", "string"),
        ("brokerName", "string"),
        ("enableActingMaster", "string"),  # '1' when the group runs with acting master (RocketMQ 5)
        ("zoneName", "string"),
    ],
    # {rmq}:queue:<topic, encoded>:<brokerName, encoded>
    "queue": [
        ("topic", "string"),
        ("brokerName", "string"),
        ("readQueueNums", "integer"),
        ("writeQueueNums", "integer"),
        ("perm", "integer"),
        ("topicSysFlag", "integer"),
    ],
}

KINDS = tuple(FIELDS)


def schema(kind: str) -> Any:
    """The pyspark ``StructType`` of a table kind (key column first, all nullable)."""
    from pyspark.sql.types import (
        BooleanType, DoubleType, IntegerType, LongType, StringType, StructField, StructType,
    )

    types = {
        "string": StringType(), "long": LongType(), "integer": IntegerType(),
        "double": DoubleType(), "boolean": BooleanType(),
    }
    try:
        fields = FIELDS[kind]
    except KeyError:
        raise ValueError(f"unknown table kind {kind!r}; one of {', '.join(KINDS)}") from None
    return StructType(
        [StructField(KEY_COLUMN, StringType(), True)]
        + [StructField(name, types[t], True) for name, t in fields]
    )
