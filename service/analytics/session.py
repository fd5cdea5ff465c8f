"""The Spark session of a run: spark-submit's when there is one, else one started here.

spark-submit (and ``PYSPARK_SUBMIT_ARGS``) pass ``--master`` and ``--conf`` to the JVM as
system properties, which only a conf made in the JVM sees. So the gateway comes first
(``streams.jvm_gateway``: spark-submit's JVM, or one pyspark launches), the JVM's
``org.apache.spark.SparkConf`` is asked what was set, and the Spark context is made on that
gateway: a master is chosen here only when nothing set one, and defaults never replace a
value given with ``--conf``. A JVM started here gets this process's stderr as its stdout
(``streams.py``).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any, Mapping

from .streams import jvm_gateway, jvm_stdout_on_stderr, under_spark_submit

log = logging.getLogger("service.analytics")

APP_NAME = "rmq-registry-analytics"
# Spark redacts conf values and data source options whose key matches; its default misses
# spark.redis.auth and the reader's "auth" option
REDACT = r"(?i)secret|password|token|access[.]key|auth"


def submitted_conf() -> Any:
    """The JVM's Spark conf (its ``contains`` and ``get``): spark-submit's ``--master`` and
    ``--conf``, spark-defaults.conf."""
    return jvm_gateway().jvm.org.apache.spark.SparkConf(True)  # True: with the JVM's system properties


def _asked_master(master: str | None, environ: Mapping[str, str]) -> str:
    """The master a JVM started here gets: ours, else PYSPARK_SUBMIT_ARGS', else local."""
    given = re.search(r"--master\s+(\S+)", environ.get("PYSPARK_SUBMIT_ARGS", ""))
    return master or (given.group(1).strip("'\"") if given else "local[*]")


def loopback_unless_asked(master: str | None, environ: Mapping[str, str], under_submit: bool) -> bool:
    """Whether a JVM about to start here should bind to loopback. Spark's UI binds to
    SPARK_LOCAL_IP, or to every address when it is unset (and the driver to the host's
    address); a local-master job has no executor elsewhere to reach it, so nothing of it
    needs more than loopback unless someone set SPARK_LOCAL_IP. spark-submit's JVM has
    started already, with its own environment: nothing to decide here."""
    return not under_submit and "SPARK_LOCAL_IP" not in environ and _asked_master(master, environ).startswith("local")


def ui_off_unless_asked(environ: Mapping[str, str], conf: Any) -> bool:
    """Whether the UI is turned off: its address could not be kept to loopback (a
    cluster's driver, or spark-submit's JVM) and nobody asked for it, with
    SPARK_LOCAL_IP or spark.ui.enabled."""
    return "SPARK_LOCAL_IP" not in environ and not conf.contains("spark.ui.enabled")


def get_spark(master: str | None = None, debug: bool = False) -> tuple[Any, bool]:
    """The active session if there is one (tests), else a new one; and whether we made it."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    # spark-submit started the JVM and passes its port; otherwise pyspark launches one here,
    # as a "pyspark-shell", which turns the console progress bar on whatever the terminal
    under_submit = under_spark_submit()
    if loopback_unless_asked(master, os.environ, under_submit):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # read by the JVM pyspark launches next
    if under_submit:
        conf = submitted_conf()
    else:
        with jvm_stdout_on_stderr():  # the JVM pyspark starts here prints nothing on our stdout
            conf = submitted_conf()
    asked = SparkConf().setAppName(APP_NAME)
    if master:
        asked.setMaster(master)
    elif not conf.contains("spark.master"):
        asked.setMaster("local[*]")
    effective = master or conf.get("spark.master", "local[*]")
    if (effective.startswith("local") and not os.environ.get("PYSPARK_PYTHON")
            and not conf.contains("spark.pyspark.python")):
        # local workers run this interpreter (its redis-py), not whatever python3 is on PATH
        os.environ["PYSPARK_PYTHON"] = sys.executable
    defaults = {
        # Spark's own progress bar, on a terminal only (a log file gets the per-stage lines)
        "spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false",
        # the tables are registry-sized (brokers, topic x group rows): 200 shuffle tasks
        # per join would cost more than the data
        "spark.sql.shuffle.partitions": "8",
        # the per-topic lists (collect_list over a million queue rows, ~100,000 topics) as a
        # sort then a merge: the hash variant falls back to sorting after 128 keys a task
        # anyway, and at fleet size costs about twice the CPU
        "spark.sql.execution.useObjectHashAggregateExec": "false",
        "spark.redaction.regex": REDACT,
        "spark.sql.redaction.options.regex": REDACT,
    }
    if ui_off_unless_asked(os.environ, conf):
        defaults["spark.ui.enabled"] = "false"
    for key, value in defaults.items():
        if not conf.contains(key) or (key == "spark.ui.showConsoleProgress" and not under_submit):
            asked.set(key, value)
    SparkContext(conf=asked, gateway=jvm_gateway())  # on the JVM whose conf was read: not a second one
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if debug else "ERROR")
    sc = spark.sparkContext
    log.info("Spark %s, master %s, app %s, UI %s", spark.version, sc.master, sc.applicationId,
             sc.uiWebUrl and f"{sc.uiWebUrl} bound to {os.environ.get('SPARK_LOCAL_IP', 'every address')}"
             or "disabled (spark.ui.enabled=false; SPARK_LOCAL_IP or spark.ui.enabled=true turn it on)")
    return spark, True
