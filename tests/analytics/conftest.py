"""One local SparkSession for every analytics test (starting Spark is the slow part); under
pytest-xdist these tests run in one process (tests/conftest.py, ONE_PROCESS), so one a run."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Iterator

import pytest
import redis

from tests.analytics.seed import Model, build_model, write_model


HOW_TO_GET_THE_JAR = ("download spark-redis's published jar from Maven Central "
                      "(com.redislabs:spark-redis_2.12:3.1.0, jar-with-dependencies) and name it "
                      "with SPARK_REDIS_JAR=/path/to/spark-redis_2.12-3.1.0-jar-with-dependencies.jar")


def spark_redis_jar() -> str | None:
    """SPARK_REDIS_JAR, else None."""
    return os.environ.get("SPARK_REDIS_JAR") or None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (scripts/test installs openjdk-17-jre-headless)")
    from pyspark.sql import SparkSession

    # the Python workers must be this interpreter (it has redis-py), not python3 on PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("rmq-analytics-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    jar = spark_redis_jar()
    if jar:  # the spark-redis reader's tests run where the jar is at hand
        builder = builder.config("spark.jars", jar)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def seeded(redis_url: str) -> tuple[Model, int, str]:
    """The seed model written into the (flushed) test Redis: (model, Redis ms at seeding, url)."""
    model = build_model()
    client = redis.Redis.from_url(redis_url)
    try:
        now = write_model(client, model)
    finally:
        client.close()
    return model, now, redis_url
