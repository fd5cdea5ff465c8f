"""Executor side of the pattern reader (and, on the driver, the index reader's HMGETs): fetch one partition of keys with redis-py.

This module imports nothing from the project, so the reader can ship its functions to
the executors by value (``cloudpickle.register_pickle_by_value``): a cluster only needs
redis-py on its Python workers, not this package. Parsing follows spark-redis
(``ParseUtils.parseFields``): a missing field is null, a present one is parsed into the
schema's type and a value that does not parse fails the task.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator


def parse_value(type_name: str, value: str | None) -> Any:
    if value is None:
        return None
    if type_name in ("integer", "long", "short", "byte"):
        return int(value)
    if type_name in ("double", "float"):
        return float(value)
    if type_name == "boolean":
        return value.lower() == "true"  # java.lang.Boolean.parseBoolean
    return value


def table_key(prefix_pattern: str, key: str) -> str:
    """spark-redis ``tableKey``: strip the literal part of a ``prefix*`` pattern."""
    if prefix_pattern.endswith("*"):
        return key[len(prefix_pattern) - 1:]
    return key


def connect(params: dict[str, Any], retry: Any = None) -> Any:
    """``retry``: redis-py's ``Retry`` (None: redis-py's default, three retries with backoff)."""
    import redis

    timeout = int(params.get("timeout") or 2000) / 1000.0
    extra = {} if retry is None else {"retry": retry}
    return redis.Redis(
        host=params.get("host") or "localhost",
        port=int(params.get("port") or 6379),
        username=params.get("user") or None,
        password=params.get("auth") or None,
        db=int(params.get("dbNum") or 0),
        ssl=str(params.get("ssl", "false")).lower() == "true",
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        decode_responses=True,
        **extra,
    )


def fetch_partition(
    params: dict[str, Any],
    prefix_pattern: str,
    fields: list[tuple[str, str]],
    pipeline_size: int,
    drop_missing: bool,
    keys: Iterable[str],
) -> Iterator[tuple[Any, ...]]:
    """Rows ``(key column, *fields)`` for ``keys``: pipelined HMGET, ``pipeline_size`` a round trip."""
    names = [name for name, _ in fields]
    client = connect(params)
    try:
        batch: list[str] = []

        def flush() -> Iterator[tuple[Any, ...]]:
            pipe = client.pipeline(transaction=False)
            for key in batch:
                pipe.hmget(key, names)
            for key, values in zip(batch, pipe.execute()):
                if drop_missing and all(v is None for v in values):
                    continue
                yield (table_key(prefix_pattern, key),) + tuple(
                    parse_value(t, v) for (_, t), v in zip(fields, values)
                )

        for key in keys:
            batch.append(key)
            if len(batch) >= pipeline_size:
                yield from flush()
                batch = []
        if batch:
            yield from flush()
    finally:
        client.close()
