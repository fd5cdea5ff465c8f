"""What every job shares: the session, where the tables are, where results go, and the
small helpers that write them.

``Context.begin`` opens a run that reads Redis: it asks the server (once) for its
commandstats, the Redis time, the data set's id (given one when the run appends to the
history and the store has none) and the registry's index, and refuses an empty or wrong
store before any table is read (``store_check.py``). ``Context.cost`` is what the run cost
that Redis. ``now`` is Redis time (``TIME``), the clock the registry's scripts stamp rows
with, so the driver's clock never matters.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from service.keys import Keys

from .index import Index
from .reader import choose_reader, connection_params, read_table_rows, redis_client
from .source import Source, command_cost, commandstats, params_where
from .store_check import inspect_store

log = logging.getLogger("service.analytics")


@dataclass
class Context:
    """What every job needs: the session, where the tables are, where results go."""

    spark: Any
    prefix: str = "rmq"
    reader: str = "auto"
    options: Mapping[str, Any] = field(default_factory=dict)  # read + connection options
    out: Path | None = None  # Parquet tables and PNG charts; None: summary only
    charts: bool = True
    flag_ratio: float = 0.8
    history: Path | str | None = None  # Parquet dataset the runs append to; None: no history
    now_ms: int | None = None  # fixed "now" (ms); None: Redis TIME at the start of the job
    allow_empty: bool = False  # a store with no broker group is a result, not an error
    replica: bool = False  # the server read must be a replica with its link up
    dataset: str | None = None  # history: the data set to report (default: the latest run's)
    source: Source | None = None
    index: Index | None = None
    _tables: dict[str, Any] = field(default_factory=dict, repr=False)
    _stage: int = field(default=0, repr=False)
    _stats: dict[str, tuple[int, int]] | None = field(default=None, repr=False)

    @property
    def keys(self) -> Keys:
        return Keys(self.prefix)

    @property
    def reader_used(self) -> str:
        return choose_reader(self.spark, self.reader)

    @property
    def where(self) -> str:
        """``redis host:port db N`` of the server read (never its credentials)."""
        return params_where(connection_params(self.spark, self.options))

    def stage(self, job: str, text: str) -> None:
        self._stage += 1
        log.info("[%s] stage %d: %s", job, self._stage, text)

    def begin(self) -> Source:
        """Ask the server what it is and what it holds; refuse an empty or wrong store."""
        if self.source is not None:
            return self.source
        params = connection_params(self.spark, self.options)
        client = self.redis()
        try:
            self._stats = commandstats(client)
            sec, usec = client.time()
            if self.now_ms is None:
                self.now_ms = int(sec) * 1000 + int(usec) // 1000
            dataset, self.index = inspect_store(client, self.keys, self.where, replica=self.replica,
                                                allow_empty=self.allow_empty, stamp=self.history is not None)
        finally:
            client.close()
        self.source = Source(host=str(params["host"]), port=int(params["port"]), db=int(params["dbNum"] or 0),
                             prefix=self.prefix, dataset=dataset, replica=self.replica)
        log.info("reading {%s} at %s, data set %s, %d broker names, %d addresses", self.prefix, self.where,
                 dataset, len(self.index.names), len(self.index.addrs))
        return self.source

    def cost(self) -> dict[str, Any] | None:
        """Commands and Redis time since ``begin``, from the server's commandstats."""
        if self._stats is None:
            return None
        client = self.redis()
        try:
            return command_cost(self._stats, commandstats(client))
        finally:
            client.close()

    def read(self, kind: str) -> Any:
        """A table, read once per context, counted (one progress line per table). The index
        reader's frames are already in memory (a local relation, or Arrow batches in the
        JVM) and counted on the driver; a pattern reader's is cached and counted by Spark."""
        if kind not in self._tables:
            self.begin()
            started = time.monotonic()
            df, rows = read_table_rows(self.spark, kind, options=self.options, prefix=self.prefix,
                                       reader=self.reader, index=self.index)
            if rows is None:  # a pattern reader: cached, or each action would read Redis again
                df = df.cache()
                rows = df.count()
            log.info("read %s: %d rows via %s in %.1f s", kind, rows, self.reader_used, time.monotonic() - started)
            self._tables[kind] = df
        return self._tables[kind]

    def redis(self) -> Any:
        return redis_client(self.spark, self.options)

    def redis_now_ms(self) -> int:
        self.begin()
        assert self.now_ms is not None
        return self.now_ms

    def release(self) -> None:
        for df in self._tables.values():
            df.unpersist()
        self._tables.clear()


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def by_cluster_and_name(row: Mapping[str, Any]) -> tuple[bool, str, str]:
    """Sort key of Spark's ``orderBy("cluster", "brokerName")`` (nulls first; UTF-8 byte
    order is code point order)."""
    return row["cluster"] is not None, row["cluster"] or "", row["brokerName"]


def summary_head(ctx: Context, job: str, now: int) -> dict[str, Any]:
    """The fields every job's summary starts with: what ran, on what, at what Redis time."""
    source = ctx.begin()
    return {"job": job, "prefix": ctx.prefix, "reader": ctx.reader_used, "source": source.as_dict(),
            "redisTimeMs": now, "redisTime": iso(now)}


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def write_table(ctx: Context, job: str, name: str, table: Sequence[Mapping[str, Any]] | Any) -> str | None:
    """A collected result (rows, or a ``pyarrow.Table``) as one Parquet file in the output
    folder (pyarrow, on the driver: the results are aggregates and go beside the charts
    and the JSON)."""
    if ctx.out is None:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = ctx.out / job / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pylist([dict(r) for r in table])
    pq.write_table(table, path)
    return str(path)


def chart(ctx: Context, fn: Any, job: str, name: str, *args: Any, **kw: Any) -> str | None:
    if ctx.out is None or not ctx.charts:
        return None
    return str(fn(*args, ctx.out / job / f"{name}.png", **kw))

