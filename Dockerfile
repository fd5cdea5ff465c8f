# syntax=docker/dockerfile:1.7
#
# rmq-registry images. Build with BuildKit (the default builder of current Docker):
#
#   docker build -t rmq-registry:0.2.0 .                                       # the registry
#   docker build --target analytics -t rmq-registry-analytics:0.2.0 .          # + Java + Spark
#
# Targets:
#   builder            downloads the locked packages, builds the project wheel (needs PyPI)
#   analytics-builder  downloads the analytics lock's packages too
#   base               python slim + the locked packages and the project wheel; no
#                      compiler, no sources, no pip cache
#   analytics          base + OpenJDK 17 JRE + the analytics lock (pyspark 3.5, pyarrow,
#                      pandas, matplotlib), for the CronJob in k8s/analytics-cronjob.yaml
#   runtime (default)  base + the registry's USER/EXPOSE/HEALTHCHECK/ENTRYPOINT
#
# Every Python package comes from the lock (requirements/, written by scripts/lock), each
# file checked against the sha256 the lock gives for it; the project wheel goes in with
# --no-deps. The base image is named by tag, not by digest: docs/deploy.md, "Images".
#
# Configuration is by environment only (REDIS_URL, RMQ_*: see service/config.py and
# docs/deploy.md). The container runs as uid/gid 10001 and writes nothing but /tmp,
# so it runs with a read-only root filesystem.

# --------------------------------------------------------------------------- builder
FROM python:3.11.13-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements/ requirements/
# pip and the build backend at the lock's versions; /wheels: the files of the runtime
# lock as PyPI has them, each checked against its hash, so that the base stage installs
# them with --no-index (no network, no build tools) and checks them again.
RUN pip install --require-hashes -r requirements/build.txt \
 && pip download --no-deps --require-hashes --dest /wheels -r requirements/base.txt
COPY pyproject.toml README.md ./
COPY service/ service/
COPY lua/ lua/
# /dist: the project wheel alone, built by the locked backend
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /dist .

# ----------------------------------------------------------------- analytics-builder
# pyspark is published as a source archive only: it is downloaded as such (the lock has
# its hash) with the build backend's files, so that the analytics stage builds it offline.
FROM builder AS analytics-builder
RUN pip download --no-deps --require-hashes --dest /wheels-analytics \
      -r requirements/analytics.txt -r requirements/build.txt

# ------------------------------------------------------------------------------ base
# What both images share: the user, the environment, the installed wheels.
FROM python:3.11.13-slim-bookworm AS base
LABEL org.opencontainers.image.title="rmq-registry" \
      org.opencontainers.image.description="RocketMQ route registry: stateless aiohttp workers, route tables in Redis"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RMQ_HOST=0.0.0.0 \
    RMQ_PORT=8080
RUN groupadd --system --gid 10001 rmq \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin rmq
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,from=builder,source=/dist,target=/dist \
    --mount=type=bind,from=builder,source=/src/requirements,target=/requirements \
    pip install --no-index --find-links=/wheels --require-hashes -r /requirements/base.txt \
 && pip install --no-index --find-links=/wheels --no-deps /dist/*.whl
WORKDIR /tmp

# ------------------------------------------------------------------------- analytics
FROM base AS analytics
USER 0:0
# Debian's JRE follows bookworm's security updates; its version is left to the package
# lists of the day rather than pinned here. Slim images delete /usr/share/man/man1, where
# the JRE's postinst links java.1.gz: without it the package fails to configure.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
# The base packages are in already (the same pins); pyspark builds from its source
# archive with the locked setuptools, both from /wheels.
RUN --mount=type=bind,from=analytics-builder,source=/wheels-analytics,target=/wheels \
    --mount=type=bind,from=builder,source=/src/requirements,target=/requirements \
    pip install --no-index --find-links=/wheels --require-hashes -r /requirements/analytics.txt
# Spark's own jars (inside pyspark) are all the jobs need: they read Redis through the
# registry's indexes with redis-py, no Spark data source.
# /opt/rmq/analytics_driver.py is the spark-submit application: it runs
# `rmq-registry analytics ARGS...` inside the driver spark-submit started.
# /opt/rmq/entrypoint.sh runs `rmq-registry ARGS...`, or a Spark executor when the
# first argument is `executor` (Spark on Kubernetes starts executor pods that way).
# (the single quotes below are printf data: nothing is meant to expand at build time)
# hadolint ignore=SC2016
RUN mkdir -p /opt/rmq \
 && printf '%s\n' \
      'import sys' \
      'from service.cli import main' \
      'sys.argv = ["rmq-registry", "analytics", *sys.argv[1:]]' \
      'sys.exit(main())' \
      > /opt/rmq/analytics_driver.py \
 && printf '%s\n' \
      '#!/bin/bash' \
      'set -euo pipefail' \
      'if [ "${1:-}" != executor ]; then exec rmq-registry "$@"; fi' \
      'SPARK_HOME="${SPARK_HOME:-$(python3 -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")}"' \
      'readarray -t java_opts < <(env | grep "^SPARK_JAVA_OPT_" | sort -t_ -k4 -n | sed "s/[^=]*=//")' \
      'exec java "${java_opts[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \' \
      '  -cp "${SPARK_CLASSPATH:-}:$SPARK_HOME/jars/*" \' \
      '  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \' \
      '  --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \' \
      '  --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \' \
      '  --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \' \
      '  --podName "$SPARK_EXECUTOR_POD_NAME"' \
      > /opt/rmq/entrypoint.sh \
 && chmod 0755 /opt/rmq/entrypoint.sh \
 && chmod -R a+rX /opt/rmq
ENV PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3 \
    HOME=/tmp
USER 10001:10001
ENTRYPOINT ["/opt/rmq/entrypoint.sh"]
CMD ["analytics", "--help"]

# --------------------------------------------------------------------------- runtime
# The registry image; last in this file, so the default target of `docker build`.
FROM base AS runtime
USER 10001:10001
# 8080: HTTP API, /healthz, /readyz, /metrics. 9876: RocketMQ remoting (reserved for
# the TCP endpoint; the Service in k8s/ publishes it too).
EXPOSE 8080 9876
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('RMQ_PORT', '8080'), timeout=2)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["rmq-registry"]
CMD ["serve"]

