"""What the store is, asked before any table is read: its role, its data set's id, whether
it holds a registry at all. Both the check before Spark starts (``preflight.py``) and
``Context.begin`` go through ``inspect_store``, so both refuse the same stores with the
same line.

A store without a data-set id (seeded without a worker, or written by workers older than
the stamp) is given one when the run appends to the history: ``SET NX``, the same command
and the same form of id a worker writes at start (``Store.stamp_dataset``), so a worker
starting at the same moment and the job agree on one id. A user that may not write it (the
read-only ACL, a replica) is refused in one line: a history row without an id could not be
told apart from another store's.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from service.keys import Keys

from .index import Index, list_index
from .source import JobError, check_replica

log = logging.getLogger("service.analytics")


def inspect_store(client: Any, keys: Keys, where: str, *, replica: bool = False, allow_empty: bool = False,
                  stamp: bool = False) -> tuple[str | None, Index]:
    """The data set's id (written first when ``stamp`` and missing) and the registry's index;
    a ``JobError`` for a replica that is not one, an empty or wrong store, or an id that
    cannot be written."""
    if replica:
        check_replica(client, where)
    dataset = client.get(keys.dataset)
    index = list_index(client, keys)
    if not index.names and not allow_empty:
        raise JobError(f"no broker group under {{{keys.prefix}}} in {where} (data set {dataset or 'none'}): "
                       f"an empty or wrong store; check --redis-url / REDIS_URL and --prefix / RMQ_KEY_PREFIX, "
                       f"or pass --allow-empty")
    if dataset is None and stamp:
        dataset = stamp_dataset(client, keys, where, replica)
    elif dataset is None and index.names:
        log.warning("%s has no data-set id at %s and this run appends no history: its summary carries "
                    "data set null", where, keys.dataset)
    return dataset, index


def stamp_dataset(client: Any, keys: Keys, where: str, replica: bool) -> str:
    """Give the store its id (SET NX: a worker or another run that got there first wins)."""
    import redis

    refusal = (f"{where} has no data-set id ({keys.dataset}), so its history rows could not be told "
               f"apart from another store's")
    if replica:
        raise JobError(f"{refusal}; a replica cannot be given one: run the job once on the primary "
                       f"(or start a registry worker on it), or pass --no-history")
    try:
        if client.set(keys.dataset, secrets.token_hex(16), nx=True):
            log.warning("%s had no data-set id: this run wrote one at %s", where, keys.dataset)
    except redis.ResponseError as e:  # NOPERM: the read-only ACL user; READONLY: a replica
        raise JobError(f"{refusal}, and this user may not write one ({str(e).splitlines()[0]}): run the job "
                       f"once as a user that may SET {keys.dataset} (or start a registry worker on it), "
                       f"or pass --no-history") from None
    return str(client.get(keys.dataset))
