"""The checks a run makes before Spark starts (Spark takes 10-20 s to start; these take
well under 2 s): the Redis named answers, takes the credentials, is a replica when
``--replica`` says so, holds a registry under the prefix, has a data-set id (given one when
the run appends to the history), and is the data set the history already holds (a history
on the driver's disk; one on shared storage is checked once Spark is up). A refusal is the
same line ``Context.begin`` would give later (``store_check.py``), only sooner.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping

from redis.backoff import NoBackoff
from redis.retry import Retry

from service.keys import Keys

from ._partition_reader import connect
from .history import check_history
from .reader import params_from
from .source import params_where
from .store_check import inspect_store

log = logging.getLogger("service.analytics")

# each Redis call's connect and read timeout here: a Redis that does not answer is reported
# after about a second, not after the readers' 2 s (spark-redis' default) per attempt
TIMEOUT_MS = 1000


def preflight(options: Mapping[str, Any], conf: Any | None, prefix: str, *, replica: bool = False,
              allow_empty: bool = False, history: Path | str | None = None) -> str | None:
    """The store's data-set id; a ``JobError`` or redis-py's error when the run would fail."""
    started = time.monotonic()
    params = params_from(conf, options)
    params["timeout"] = str(min(int(params.get("timeout") or TIMEOUT_MS), TIMEOUT_MS))
    where = params_where(params)
    # one attempt: redis-py's default retries with backoff turn a silent Redis into ~15 s
    client = connect(params, retry=Retry(NoBackoff(), 0))
    try:
        dataset, index = inspect_store(client, Keys(prefix), where, replica=replica, allow_empty=allow_empty,
                                       stamp=history is not None)
    finally:
        client.close()
    if history is not None:
        check_history(history, dataset, where)
    log.info("checked %s before starting Spark in %.2f s: {%s}, data set %s, %d broker names", where,
             time.monotonic() - started, prefix, dataset, len(index.names))
    return dataset
