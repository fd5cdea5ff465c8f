"""Keeping the job's stdout for the JSON summary alone.

* **Under spark-submit** the Python driver's stdout and stderr are one pipe: spark-submit's
  ``PythonRunner`` merges them (``redirectErrorStream``) into its own stdout. So for the
  run, ``sys.stderr`` (every log line, warning and error of the job) is written to the
  spark-submit JVM's own ``System.err`` through the py4j gateway it already holds, and
  spark-submit's stdout carries only what the job prints there: the summary of ``--json -``.
  Spark's own log4j output goes to ``System.err`` already (Spark's default log4j2
  configuration, ``log4j2-defaults.properties``, targets ``SYSTEM_ERR``).
* **Run directly** (``python -m service.analytics``) pyspark starts the JVM as a child
  that inherits this process's stdout; it is started with its stdout on this process's
  stderr (``jvm_stdout_on_stderr``), so nothing the JVM prints, whatever its log4j
  configuration says, reaches stdout.
"""

from __future__ import annotations

import functools
import io
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator


def under_spark_submit() -> bool:
    """spark-submit runs this process with the port of its JVM's gateway."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


@functools.cache
def jvm_gateway() -> Any:
    """The py4j gateway of this process's JVM, one a process: spark-submit's (a connection to
    the port it passes), else a JVM pyspark launches now (``spark-submit pyspark-shell``, with
    ``PYSPARK_SUBMIT_ARGS``). The Spark context is later made on it (SparkContext's
    ``gateway``), so that no second JVM is launched."""
    from pyspark.java_gateway import launch_gateway

    return launch_gateway()


class JvmStream(io.TextIOBase):
    """A text stream onto a ``java.io.PrintStream``, a line at a time (one gateway call per line)."""

    def __init__(self, target: Any) -> None:
        super().__init__()
        self.target = target
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            lines, _, self.pending = self.pending.rpartition("\n")
            self.target.print(lines + "\n")
            self.target.flush()
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.target.print(self.pending)
            self.pending = ""
        self.target.flush()


@contextmanager
def stderr_apart_from_stdout() -> Iterator[None]:
    """Under spark-submit, ``sys.stderr`` is the JVM's ``System.err`` for the block."""
    if not under_spark_submit():
        yield
        return
    saved = sys.stderr
    sys.stderr = JvmStream(jvm_gateway().jvm.java.lang.System.err)  # spark-submit's: a connection, not a start
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = saved


@contextmanager
def jvm_stdout_on_stderr() -> Iterator[None]:
    """File descriptor 1 is stderr while the block starts a child (the JVM): the child keeps it."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
